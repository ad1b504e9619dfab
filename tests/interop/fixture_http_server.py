"""Streamable-HTTP MCP fixture server for mcp-edge interop tests (real Python SDK, mcp==1.30.0).

usage: .venv1/bin/python fixture_http_server.py PORT [--json-response] [--stateless] [--resumable] [--sse]

Binds 127.0.0.1 only and serves MCP at http://127.0.0.1:PORT/mcp (FastMCP's default
DNS-rebinding protection stays on: Host must be 127.0.0.1:*, localhost:* or [::1]:*).
By default the server is stateful (Mcp-Session-Id) and answers POSTs with SSE streams;
--json-response makes it answer with plain JSON bodies, --stateless drops sessions, --resumable
keeps its SSE events for Last-Event-ID (tests/interop/memory_events.py) and primes every stream.
--sse serves the 2024-11-05 HTTP+SSE transport instead: GET http://127.0.0.1:PORT/sse, whose first
event names where to POST (/messages/?session_id=…), every answer on that stream.

Tools:
  add(a:int, b:int)  -> content [{"type":"text","text":"<a+b>"}], structuredContent {"result": a+b}
  echo(text:str)     -> content [{"type":"text","text": text}]   (text returned unchanged)
  extensions()       -> a result carrying fields no MCP schema defines (see EXTENSIONS_RESULT);
                        a gateway must forward them byte-for-byte-equivalent (same JSON value)
  echo_meta()        -> text = JSON of the request's params._meta as the server received it
                        (lets a test check that _meta keys reach the upstream)
  sleep_ms(ms:int)   -> waits ms milliseconds, then text "slept <ms> ms" (timeouts / cancellation)
  notify(steps:int=3)-> sends `steps` notifications/message (info) and, when the request carried
                        _meta.progressToken, `steps` notifications/progress; text "notified <steps>"
  grow()             -> adds a tool grown_<n> and sends notifications/tools/list_changed on the
                        session's GET stream (not tied to the request); text "grew grown_<n>"
  ask(question:str)  -> asks the client sampling/createMessage with the question (a request on the
                        call's stream, or on the SSE stream with --sse); text "client said: <its text>"
  polled()           -> progress 1 of 2, closes the call's SSE stream to be polled (--resumable),
                        after 300 ms progress 2 of 2 and text "polled" (replayed after Last-Event-ID)

How a test checks unknown-field forwarding: call `extensions` through the gateway with
client_v1.py (the mcp 1.30 client keeps unknown fields: its models use extra="allow") and
compare calls[i]["result"] against EXTENSIONS_RESULT below, or at least:
  result["_meta"]["com.example/trace"] == {"traceId": "4bf92f3577b34da6", "spanId": "00f067aa0ba902b7", "sampled": True}
  result["com.example/topLevel"] == "top-level unknown field"
  result["content"][0]["com.example/unknownField"] == {"nested": [1, 2, 3], "flag": True}
  result["content"][0]["annotations"]["com.example/unknownAnnotation"] == "kept"
  result["content"][0]["_meta"]["com.example/contentMeta"] == "c-1"
(The TypeScript SDK client strips unknown keys that its zod schemas do not know, so use the
Python clients, or raw HTTP, for this check.)
"""

from __future__ import annotations

import argparse
import asyncio
import json

import mcp.types as types
from mcp.server.fastmcp import Context, FastMCP
from memory_events import MemoryEvents

# The exact JSON the `extensions` tool returns (as sent on the wire, result object of tools/call).
EXTENSIONS_RESULT = {
    "_meta": {
        "com.example/trace": {"traceId": "4bf92f3577b34da6", "spanId": "00f067aa0ba902b7", "sampled": True},
    },
    "content": [
        {
            "type": "text",
            "text": "result with extension fields",
            "annotations": {
                "audience": ["user"],
                "priority": 0.5,
                "com.example/unknownAnnotation": "kept",
            },
            "_meta": {"com.example/contentMeta": "c-1"},
            "com.example/unknownField": {"nested": [1, 2, 3], "flag": True},
        }
    ],
    "isError": False,
    "com.example/topLevel": "top-level unknown field",
}


def build(port: int, json_response: bool, stateless: bool, resumable: bool = False) -> FastMCP:
    mcp = FastMCP(
        "mcp-edge-fixture-http",
        host="127.0.0.1",
        port=port,
        streamable_http_path="/mcp",
        json_response=json_response,
        stateless_http=stateless,
        log_level="WARNING",
        # --resumable: every SSE answer primed with an event ID and a retry, kept for Last-Event-ID.
        event_store=MemoryEvents() if resumable else None,
        retry_interval=300 if resumable else None,
    )

    @mcp.tool()
    async def polled(ctx: Context) -> str:
        """Close this call's SSE stream to be polled (with --resumable), then answer after 300 ms."""
        await ctx.report_progress(1, 2, "before the close")
        await ctx.close_sse_stream()
        await asyncio.sleep(0.3)
        await ctx.report_progress(2, 2, "after the close")
        return "polled"

    @mcp.tool()
    async def ask(ctx: Context, question: str) -> str:
        """Ask the client to sample an answer to `question`."""
        msg = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=question))
        got = await ctx.session.create_message(messages=[msg], max_tokens=50, related_request_id=ctx.request_id)
        return f"client said: {getattr(got.content, 'text', '')}"

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Add two integers; the text result is the decimal sum."""
        return a + b

    @mcp.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @mcp.tool()
    def extensions() -> types.CallToolResult:
        """Return a result carrying unknown fields, an unknown annotation and a _meta extension key."""
        # model_validate keeps the unknown keys: every mcp 1.x type has extra="allow".
        return types.CallToolResult.model_validate(EXTENSIONS_RESULT)

    @mcp.tool()
    def echo_meta(ctx: Context) -> str:
        """Return the request's params._meta as JSON text (as received by this server)."""
        meta = ctx.request_context.meta
        return json.dumps(meta.model_dump(by_alias=True, exclude_none=True) if meta else None, sort_keys=True)

    @mcp.tool()
    async def sleep_ms(ms: int) -> str:
        """Sleep for ms milliseconds, then return."""
        await asyncio.sleep(ms / 1000)
        return f"slept {ms} ms"

    @mcp.tool()
    async def notify(ctx: Context, steps: int = 3) -> str:
        """Send `steps` log notifications and (if a progressToken was given) `steps` progress notifications."""
        for i in range(1, steps + 1):
            await ctx.info(f"step {i} of {steps}")
            await ctx.report_progress(i, steps, f"step {i}")
            await asyncio.sleep(0.01)
        return f"notified {steps}"

    grown = [0]

    @mcp.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool grown_<n> and announce it with notifications/tools/list_changed, sent (unrelated
        to this request) on the session's GET stream: a client without one never hears of it."""
        grown[0] += 1
        n = grown[0]

        def grown_tool() -> str:
            return f"grown {n}"

        mcp.add_tool(grown_tool, name=f"grown_{n}", description=f"added by grow call {n}")
        await ctx.session.send_tool_list_changed()
        return f"grew grown_{n}"

    return mcp


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("port", type=int)
    p.add_argument("--json-response", action="store_true")
    p.add_argument("--stateless", action="store_true")
    p.add_argument("--resumable", action="store_true")
    p.add_argument("--sse", action="store_true", help="the 2024-11-05 HTTP+SSE transport")
    a = p.parse_args()
    server = build(a.port, a.json_response, a.stateless, a.resumable)
    server.run(transport="sse" if a.sse else "streamable-http")


if __name__ == "__main__":
    main()
