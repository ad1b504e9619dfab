"""An MCP server protected by OAuth, for tests/it/oauth.rs (real Python SDK, mcp==1.30.0, and PyJWT).

usage: .venv1/bin/python oauth_mcp_server.py PORT ISSUER [--sdk-metadata]

Serves MCP at http://127.0.0.1:PORT/mcp (127.0.0.1 only; FastMCP, stateful, SSE answers) as an OAuth
resource server, with the SDK's own auth support:
  * protected-resource metadata (RFC 9728) at /.well-known/oauth-protected-resource/mcp:
    resource = http://127.0.0.1:PORT/mcp, authorization_servers = [ISSUER], scopes_supported = [mcp:tools];
    with --sdk-metadata the SDK's own document as it is, whose pydantic URL type writes an issuer without a
    path as ISSUER + "/" (http://127.0.0.1:9000 -> http://127.0.0.1:9000/)
  * 401 with `WWW-Authenticate: Bearer error="invalid_token", …, resource_metadata="…"` on a missing or
    invalid token (the SDK's RequireAuthMiddleware), 403 insufficient_scope without `mcp:tools`
  * every bearer token verified here: a JWT (`typ` at+jwt) signed by a key of ISSUER's JWKS (ES256),
    `iss` = ISSUER, `aud` = the resource URL above, not expired (`exp`, no leeway); the SDK checks the
    token's resource against its resource_server_url once more (validate_token_resource)

Tool: echo(text) -> text unchanged.

GET /stats (no auth) -> JSON counters since start: {"accepted", "expired", "wrong_audience",
"invalid" (bad signature, issuer, type, …), "echo_calls", "mcp_status": {"200": n, "401": n, …}}.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys

import jwt
import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.fastmcp import FastMCP

STATS: dict = {"accepted": 0, "expired": 0, "wrong_audience": 0, "invalid": 0, "echo_calls": 0}
STATUS: collections.Counter = collections.Counter()


class JwtVerifier:
    """The SDK's TokenVerifier protocol over PyJWT and the authorization server's JWKS."""

    def __init__(self, issuer: str, resource: str) -> None:
        self.issuer = issuer
        self.resource = resource
        self.jwks = jwt.PyJWKClient(f"{issuer}/jwks", cache_keys=True, lifespan=3600)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            if jwt.get_unverified_header(token).get("typ", "").lower() not in ("at+jwt", "application/at+jwt"):
                raise jwt.InvalidTokenError("not an RFC 9068 access token")
            key = await asyncio.to_thread(self.jwks.get_signing_key_from_jwt, token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["ES256"],
                audience=self.resource,
                issuer=self.issuer,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            STATS["expired"] += 1
            return None
        except jwt.InvalidAudienceError:
            STATS["wrong_audience"] += 1
            return None
        except (jwt.PyJWTError, jwt.PyJWKClientError):
            STATS["invalid"] += 1
            return None
        STATS["accepted"] += 1
        return AccessToken(
            token=token,
            client_id=claims.get("client_id", ""),
            scopes=claims.get("scope", "").split(),
            expires_at=claims["exp"],
            resource=claims["aud"] if isinstance(claims["aud"], str) else self.resource,
            subject=claims.get("sub"),
            claims=claims,
        )


async def json_response(send, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    port, issuer = int(sys.argv[1]), sys.argv[2]
    sdk_metadata = "--sdk-metadata" in sys.argv[3:]
    resource = f"http://127.0.0.1:{port}/mcp"
    mcp = FastMCP(
        "mcp-edge-oauth-upstream",
        host="127.0.0.1",
        port=port,
        streamable_http_path="/mcp",
        log_level="WARNING",
        token_verifier=JwtVerifier(issuer, resource),
        auth=AuthSettings(
            issuer_url=issuer,
            resource_server_url=resource,
            required_scopes=["mcp:tools"],
            validate_token_resource=True,
        ),
    )

    @mcp.tool()
    def echo(text: str) -> str:
        """Returns its argument."""
        STATS["echo_calls"] += 1
        return text

    app = mcp.streamable_http_app()
    metadata_path = "/.well-known/oauth-protected-resource/mcp"
    metadata = json.dumps({
        "resource": resource,
        "authorization_servers": [issuer],
        "scopes_supported": ["mcp:tools"],
        "bearer_methods_supported": ["header"],
    }).encode()

    async def counted(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/stats":
            await json_response(send, json.dumps({**STATS, "mcp_status": dict(STATUS)}).encode())
            return
        if scope["type"] == "http" and scope["path"] == metadata_path and not sdk_metadata:
            await json_response(send, metadata)
            return

        async def counting_send(msg):
            if msg["type"] == "http.response.start" and scope.get("path") == "/mcp":
                STATUS[str(msg["status"])] += 1
            await send(msg)

        await app(scope, receive, counting_send)

    uvicorn.run(counted, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
