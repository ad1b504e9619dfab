"""Real MCP client, Python SDK mcp==2.3.0 (dual era: `server/discover` probe for 2026-07-28,
falling back to the initialize handshake).

usage: .venv2/bin/python client_v2.py URL CALLS_JSON [MODE]
  URL         e.g. http://127.0.0.1:PORT/mcp (streamable HTTP), or https://... with env CLIENT_CA_FILE
              naming the PEM CA certificate(s) to trust (instead of the system's)
  CALLS_JSON  JSON list of {"name": str, "arguments": {...}} (arguments optional). Optional per-call keys:
                "meta": {...}          sent as params._meta
                "progress": true       ask for progress (progressToken) and record the notifications
                "expect_error": true   a JSON-RPC error is expected: record it instead of failing
                                       (and fail if the call succeeds)
  MODE        mcp 2.x `Client(mode=...)`: "auto" (default: probe server/discover, fall back to
              initialize), "legacy" (initialize handshake only) or "2026-07-28" (adopt that version
              without a probe). Also settable as env CLIENT_MODE.

Prints ONE JSON object on stdout:
  {"client": "python-mcp-2.3.0", "mode": "auto", "protocolVersion": "<the version actually used>",
   "era": "modern" | "handshake", "serverInfo": {...} | null, "tools": [names...],
   "calls": [{"name": ..., "result": <CallToolResult as JSON>} | {"name": ..., "error": {...}} ...],
   "logs": [notifications/message params]}
Exits non-zero on any failure (reason on stderr); timeout CLIENT_TIMEOUT seconds (default 60).
A CallToolResult with isError=true is a result, not a failure.

Note: mcp 2.x models keep unknown fields only where the SDK allows them; mcp 1.x's client
(client_v1.py) keeps every unknown field, so use that one for faithful-forwarding checks.
Sampling / elicitation are declared and answered with the same canned values as client_v1.py
(logging on 2026-07-28 connections needs an opt-in: this client sets log_level="debug").
With env CLIENT_ROOTS (a JSON list of URIs) the roots capability is declared too and
roots/list answered with those URIs.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import traceback
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

SAMPLING_REPLY = "canned sampling reply from mcp-edge interop client"


def placeholder(schema: dict[str, Any]) -> Any:
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("oneOf"):
        return schema["oneOf"][0].get("const")
    return {"string": "test", "integer": 1, "number": 1.0, "boolean": True, "array": []}.get(schema.get("type"), "test")


async def on_sampling(_ctx, _params):
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=SAMPLING_REPLY),
        model="mcp-edge-interop-canned",
        stop_reason="endTurn",
    )


async def on_elicitation(_ctx, params):
    schema = getattr(params, "requested_schema", None) or {}
    if not isinstance(schema, dict):
        schema = schema.model_dump(by_alias=True, exclude_none=True)
    props = schema.get("properties", {})
    return types.ElicitResult(action="accept", content={k: placeholder(v) for k, v in props.items()})


def roots_callback() -> Any:
    """A roots/list answer of the URIs in env CLIENT_ROOTS, or None (roots not declared)."""
    uris = os.environ.get("CLIENT_ROOTS")
    if not uris:
        return None

    async def on_roots(_ctx):
        return types.ListRootsResult(roots=[types.Root(uri=u, name=f"root {i}") for i, u in enumerate(json.loads(uris))])

    return on_roots


def server(url: str) -> Any:
    """`Client`'s server argument: the URL, or with CLIENT_CA_FILE a transport whose
    httpx2 client trusts that CA (the SDK's timeouts kept)."""
    ca = os.environ.get("CLIENT_CA_FILE")
    if not ca:
        return url
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    http = httpx2.AsyncClient(timeout=timeout, verify=ssl.create_default_context(cafile=ca))
    return streamable_http_client(url, http_client=http)


def dump(model: Any) -> Any:
    if model is None:
        return None
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run(url: str, calls: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    logs: list[Any] = []

    async def on_log(params) -> None:
        logs.append(dump(params))

    out: dict[str, Any] = {"client": "python-mcp-2.3.0", "mode": mode}
    async with Client(
        server(url),
        mode=mode,
        sampling_callback=on_sampling,
        elicitation_callback=on_elicitation,
        list_roots_callback=roots_callback(),
        logging_callback=on_log,
        log_level="debug",
        client_info=types.Implementation(name="mcp-edge-interop-client-v2", version="2.3.0"),
        cache=None,
    ) as client:
        out["protocolVersion"] = client.protocol_version
        out["era"] = "modern" if client.protocol_version in MODERN_PROTOCOL_VERSIONS else "handshake"
        out["serverInfo"] = dump(client.server_info)
        tools = await client.list_tools()
        out["tools"] = [t.name for t in tools.tools]
        results = []
        for call in calls:
            name = call["name"]
            entry: dict[str, Any] = {"name": name}
            progress: list[Any] = []

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                progress.append({"progress": p, "total": total, "message": message})

            try:
                res = await client.call_tool(
                    name,
                    call.get("arguments") or {},
                    progress_callback=on_progress if call.get("progress") else None,
                    meta=call.get("meta"),
                )
            except MCPError as e:
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
    return out


def leaves(e: BaseException) -> list[str]:
    if isinstance(e, BaseExceptionGroup):
        return [m for sub in e.exceptions for m in leaves(sub)]
    return [f"{type(e).__name__}: {e}"]


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    url, calls = sys.argv[1], json.loads(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) == 4 else os.environ.get("CLIENT_MODE", "auto")
    if not isinstance(calls, list):
        print("CALLS_JSON must be a JSON list", file=sys.stderr)
        return 2
    timeout = float(os.environ.get("CLIENT_TIMEOUT", "60"))
    try:

        async def bounded() -> dict[str, Any]:
            with anyio.fail_after(timeout):
                return await run(url, calls, mode)

        out = anyio.run(bounded)
    except BaseException as e:  # noqa: BLE001 - report everything, including exception groups
        print(f"client_v2 failed: {'; '.join(leaves(e))}", file=sys.stderr)
        traceback.print_exception(e, file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
