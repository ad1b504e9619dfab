"""What tests/fleet/fleet.py and tests/fleet/legacy_load.py share (run with tests/interop/.venv1,
Python SDK mcp==1.30.0): a legacy streamable-HTTP session from a chosen loopback source address,
modern (2026-07-28) requests as plain HTTP, and reading an SSE or JSON answer.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import anyio
import httpx
import mcp.types as types
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

MODERN = "2026-07-28"
TOOL_PREFIX = "rec__"


class Answered404(Exception):
    """The legacy session was answered 404: initialize again."""


def http_factory(local: str):
    """The SDK's httpx client factory, with connections made from `local` (a 127/8 address)."""

    def factory(headers: dict[str, str] | None = None, timeout: httpx.Timeout | None = None, auth: httpx.Auth | None = None):
        return httpx.AsyncClient(
            headers=headers,
            timeout=timeout or httpx.Timeout(30, read=300),
            auth=auth,
            follow_redirects=True,
            transport=httpx.AsyncHTTPTransport(local_address=local),
        )

    return factory


@asynccontextmanager
async def legacy_session(
    url: str, token: str, local: str, init_timeout: float = 20.0
) -> AsyncIterator[tuple[ClientSession, str]]:
    """A legacy session (initialize, then notifications/initialized) of the Python SDK 1.30 client
    through `url` with `Authorization: Bearer token`, connecting from `local`; yields it and its
    Mcp-Session-Id."""
    async with streamablehttp_client(
        url, headers={"Authorization": f"Bearer {token}"}, httpx_client_factory=http_factory(local)
    ) as (read, write, session_id):
        async with ClientSession(
            read, write, client_info=types.Implementation(name="mcp-edge-fleet-v1", version="1.30.0")
        ) as s:
            with anyio.fail_after(init_timeout):
                await s.initialize()
            sid = session_id()
            if not sid:
                raise RuntimeError("initialize gave no Mcp-Session-Id")
            yield s, sid


@asynccontextmanager
async def legacy_sse_session(
    url: str, token: str, local: str, init_timeout: float = 20.0
) -> AsyncIterator[tuple[ClientSession, str]]:
    """The same over the 2024-11-05 HTTP+SSE transport (`sse_client`: GET /sse, then POST
    /messages?sessionId=...); yields the session and its sessionId."""
    sid: list[str] = []
    async with sse_client(
        url, headers={"Authorization": f"Bearer {token}"}, httpx_client_factory=http_factory(local),
        on_session_created=sid.append,
    ) as (read, write):
        async with ClientSession(
            read, write, client_info=types.Implementation(name="mcp-edge-fleet-v1-sse", version="1.30.0")
        ) as s:
            with anyio.fail_after(init_timeout):
                await s.initialize()
            yield s, sid[0] if sid else ""


def is_404(e: BaseException) -> bool:
    """How the SDK 1.30 client reports a 404 on a POST: a JSON-RPC error it makes itself
    (code 32600, "Session terminated") for the request that got it."""
    return isinstance(e, McpError) and e.error.code == 32600 and "Session terminated" in e.error.message


async def call_text(s: ClientSession, tool: str, args: dict[str, Any]) -> str:
    """Calls `tool` in the session; its text, or Answered404; anything else raises."""
    try:
        res = await s.call_tool(tool, args)
    except McpError as e:
        if is_404(e):
            raise Answered404() from e
        raise
    if res.isError:
        raise RuntimeError(f"{tool}: isError: {res.content}")
    return res.content[0].text if res.content else ""


def modern_body(rid: int, method: str, params: dict[str, Any], caps: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 2026-07-28 request: protocol version, client info and capabilities in params._meta."""
    p = dict(params)
    p["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-edge-fleet", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps if caps is not None else {},
    }
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": p}


def modern_headers(method: str, name: str | None, token: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    h = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name:
        h["Mcp-Name"] = name
    if token:
        h["Authorization"] = f"Bearer {token}"
    h.update(extra or {})
    return h


def jsonrpc_of(r: httpx.Response, rid: Any) -> dict[str, Any] | None:
    """The JSON-RPC response with id `rid` in a JSON or SSE answer (None if there is none)."""
    ctype = r.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        body = r.json()
        return body if isinstance(body, dict) else None
    if ctype.startswith("text/event-stream"):
        for block in r.text.split("\n\n"):
            data = "\n".join(line[5:].lstrip() for line in block.split("\n") if line.startswith("data:"))
            if not data:
                continue
            try:
                msg = json.loads(data)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("id") == rid and ("result" in msg or "error" in msg):
                return msg
    return None


def text_of(msg: dict[str, Any] | None) -> str | None:
    try:
        return msg["result"]["content"][0]["text"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return None
