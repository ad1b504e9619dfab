"""Real MCP client, Python SDK mcp==1.30.0 (handshake era: initialize, negotiates 2025-11-25).

usage: .venv1/bin/python client_v1.py URL CALLS_JSON
  URL         e.g. http://127.0.0.1:PORT/mcp (streamable HTTP, `streamablehttp_client`), or https://...
              with env CLIENT_CA_FILE naming the PEM CA certificate(s) to trust (instead of the system's);
              a URL whose path ends in /sse is spoken to over the 2024-11-05 HTTP+SSE transport (`sse_client`)
              Env CLIENT_TOKEN: sent as `Authorization: Bearer <token>` on every request (both transports)
  CALLS_JSON  JSON list of {"name": str, "arguments": {...}} (arguments optional). Optional per-call keys:
                "meta": {...}          sent as params._meta
                "progress": true       ask for progress (progressToken) and record the notifications
                "expect_error": true   a JSON-RPC error is expected: record it instead of failing
                                       (and fail if the call succeeds)

Prints ONE JSON object on stdout:
  {"client": "python-mcp-1.30.0", "protocolVersion": "...", "serverInfo": {...}, "tools": [names...],
   "calls": [{"name": ..., "result": <CallToolResult as JSON, unknown fields kept>}
             | {"name": ..., "error": {"code", "message", "data"}}   (expect_error only)
             (+ "progress": [notification params...] when "progress" was asked)],
   "logs": [notifications/message params received during the run]}
Exits non-zero on any failure (connection, handshake, listing, an unexpected JSON-RPC error,
an expected error that did not happen, timeout: CLIENT_TIMEOUT seconds, default 60); the reason
goes to stderr. A CallToolResult with isError=true is a result, not a failure.

The client declares sampling, elicitation and roots and answers them with canned values
(sampling: text "canned sampling reply from mcp-edge interop client (asked: <last message text>)";
elicitation: accept, with each field's default, first enum value, or a placeholder; roots: one,
file:///interop/root), so tools that call back work. Every such request is recorded in the
output's "asked": [{"method", "text"}] (text: the elicitation message or the sampling prompt).
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import traceback
from typing import Any

import anyio
import httpx
import mcp.types as types
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT, create_mcp_http_client
from mcp.shared.exceptions import McpError

SAMPLING_REPLY = "canned sampling reply from mcp-edge interop client"


def placeholder(schema: dict[str, Any]) -> Any:
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("oneOf"):
        return schema["oneOf"][0].get("const")
    return {"string": "test", "integer": 1, "number": 1.0, "boolean": True, "array": []}.get(schema.get("type"), "test")


ASKED: list[dict[str, Any]] = []
ROOT = "file:///interop/root"


async def on_sampling(_ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    last = params.messages[-1].content if params.messages else None
    prompt = getattr(last, "text", "")
    ASKED.append({"method": "sampling/createMessage", "text": prompt})
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"{SAMPLING_REPLY} (asked: {prompt})"),
        model="mcp-edge-interop-canned",
        stopReason="endTurn",
    )


async def on_elicitation(_ctx, params: types.ElicitRequestParams) -> types.ElicitResult:
    ASKED.append({"method": "elicitation/create", "text": params.message})
    props = (getattr(params, "requestedSchema", None) or {}).get("properties", {})
    return types.ElicitResult(action="accept", content={k: placeholder(v) for k, v in props.items()})


async def on_list_roots(_ctx) -> types.ListRootsResult:
    ASKED.append({"method": "roots/list", "text": ""})
    return types.ListRootsResult(roots=[types.Root(uri=ROOT, name="interop")])


def http_client_factory(
    headers: dict[str, str] | None = None,
    timeout: httpx.Timeout | None = None,
    auth: httpx.Auth | None = None,
) -> httpx.AsyncClient:
    """The SDK's client (its default timeouts), trusting CLIENT_CA_FILE when set."""
    ca = os.environ.get("CLIENT_CA_FILE")
    if not ca:
        return create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
    return httpx.AsyncClient(
        headers=headers,
        timeout=timeout or httpx.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        auth=auth,
        verify=ssl.create_default_context(cafile=ca),
    )


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run(url: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    logs: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(dump(params))

    out: dict[str, Any] = {"client": "python-mcp-1.30.0"}
    token = os.environ.get("CLIENT_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else None
    if httpx.URL(url).path.endswith("/sse"):
        out["transport"] = "sse"
        transport = sse_client(url, headers=headers, httpx_client_factory=http_client_factory)
    else:
        out["transport"] = "streamable-http"
        transport = streamablehttp_client(url, headers=headers, httpx_client_factory=http_client_factory)
    async with transport as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(
            read,
            write,
            sampling_callback=on_sampling,
            elicitation_callback=on_elicitation,
            list_roots_callback=on_list_roots,
            logging_callback=on_log,
            client_info=types.Implementation(name="mcp-edge-interop-client-v1", version="1.30.0"),
        ) as session:
            init = await session.initialize()
            out["protocolVersion"] = init.protocolVersion
            out["serverInfo"] = dump(init.serverInfo)
            tools = await session.list_tools()
            out["tools"] = [t.name for t in tools.tools]
            results = []
            for call in calls:
                name = call["name"]
                entry: dict[str, Any] = {"name": name}
                progress: list[Any] = []

                async def on_progress(p: float, total: float | None, message: str | None) -> None:
                    progress.append({"progress": p, "total": total, "message": message})

                try:
                    res = await session.call_tool(
                        name,
                        call.get("arguments") or {},
                        progress_callback=on_progress if call.get("progress") else None,
                        meta=call.get("meta"),
                    )
                except McpError as e:
                    if not call.get("expect_error"):
                        raise
                    entry["error"] = dump(e.error)
                else:
                    if call.get("expect_error"):
                        raise RuntimeError(f"call {name!r} was expected to fail but returned {dump(res)}")
                    entry["result"] = dump(res)
                if call.get("progress"):
                    entry["progress"] = progress
                results.append(entry)
            out["calls"] = results
    out["logs"] = logs
    out["asked"] = ASKED
    return out


def leaves(e: BaseException) -> list[str]:
    if isinstance(e, BaseExceptionGroup):
        return [m for sub in e.exceptions for m in leaves(sub)]
    return [f"{type(e).__name__}: {e}"]


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    url, calls = sys.argv[1], json.loads(sys.argv[2])
    if not isinstance(calls, list):
        print("CALLS_JSON must be a JSON list", file=sys.stderr)
        return 2
    timeout = float(os.environ.get("CLIENT_TIMEOUT", "60"))
    try:

        async def bounded() -> dict[str, Any]:
            with anyio.fail_after(timeout):
                return await run(url, calls)

        out = anyio.run(bounded)
    except BaseException as e:  # noqa: BLE001 - report everything, including exception groups
        print(f"client_v1 failed: {'; '.join(leaves(e))}", file=sys.stderr)
        traceback.print_exception(e, file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
