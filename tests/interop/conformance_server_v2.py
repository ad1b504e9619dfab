"""Dual-era HTTP MCP server implementing what @modelcontextprotocol/conformance@0.2.0-alpha.12 calls
(`--requirements 2025-11-25`, `--requirements 2026-07-28`), on the real Python SDK mcp==2.3.0.

usage: .venv2/bin/python conformance_server_v2.py PORT     serves http://127.0.0.1:PORT/mcp

One endpoint, both eras (the SDK's StreamableHTTPSessionManager routes by the MCP-Protocol-Version
header: a handshake version or none goes to the legacy `initialize` + Mcp-Session-Id transport, any
other version to the stateless 2026-07-28 entry, mcp/server/streamable_http_manager.py _handle_request).
tests/interop/conformance_v2.sh runs the suite against it directly and through mcp-edge with the
upstream forced to `era = "legacy"` and to `era = "modern"`.

Everything that needs input from the client is written once, era-adaptively (`gather` below):
  * 2026-07-28 (spec basic/utilities/mrtr): the handler returns an InputRequiredResult with the
    questions not yet answered in `inputResponses`, plus a `requestState` that the SDK's
    RequestStateBoundary seals (AES-GCM, bound to the request), so a tampered state is refused
    with -32602 before the handler runs;
  * 2025-11-25 and earlier: the same questions go to the client as server->client requests
    (`elicitation/create`, `sampling/createMessage`, `roots/list`) on the call's SSE stream.
So through the gateway a modern caller in front of a legacy upstream sees the upstream's mid-call
requests (which mcp-edge must turn into InputRequiredResult), and a legacy caller in front of a
modern upstream sees InputRequiredResults (which mcp-edge must turn into requests to the caller).

Scenario -> fixture content:
  tools-list, tools-call-*         test_simple_text, test_image_content, test_audio_content,
                                   test_embedded_resource, test_multiple_content_types,
                                   test_tool_with_logging, test_tool_with_progress, test_error_handling
  tools-call-sampling/-elicitation test_sampling(prompt), test_elicitation(message)     (legacy era only)
  elicitation-sep1034/sep1330      test_elicitation_sep1034_defaults, test_elicitation_sep1330_enums
  json-schema-2020-12              json_schema_2020_12_tool ($schema, $defs/$anchor, allOf/anyOf, if/then/else)
  http-custom-header-server-validation  test_header_param(region) with x-mcp-header "Region" (SEP-2243)
  server-sse-polling               test_reconnection
  resources-*                      test://static-text, test://static-binary, test://watched-resource,
                                   template test://template/{id}/data; subscribe/unsubscribe (legacy)
  sep-2164-resource-not-found      unknown URI: -32602 with data.uri at 2026-07-28, -32002 before
  prompts-*                        test_simple_prompt, test_prompt_with_arguments(arg1,arg2),
                                   test_prompt_with_embedded_resource(resourceUri), test_prompt_with_image
  completion-complete              ref/prompt test_prompt_with_arguments and the template's id
  logging-set-level                logging/setLevel (legacy; the SDK removes it at 2026-07-28)
  caching                          ttlMs/cacheScope on every cacheable result (Server cache_hints)
  server-stateless                 test_missing_capability (-32021 unless sampling is declared),
                                   test_streaming_elicitation, test_logging_tool,
                                   test_trigger_tool_change / test_trigger_prompt_change (each adds a tool
                                   test_grown_tool_<n> / prompt test_grown_prompt_<n> and announces it)
  input-required-result-*          test_input_required_result_{elicitation,sampling,list_roots,
                                   request_state,multiple_inputs,multi_round,tampered_state,capabilities}
                                   and the prompt test_input_required_result_prompt
  server-initialize, ping, server/discover, subscriptions/listen, dns-rebinding: the SDK
Not implemented: the tasks extension (io.modelcontextprotocol/tasks, SEP-2663) — the 2.3 SDK has no
tasks support, only the generic extension hook (mcp.server.extension); see conformance_v2.sh. But
its tool list is scoped by it: test_tasks_only is listed (and callable) only for a request whose
client capabilities declare the extension, as SEP-2575 lets a server do; a gateway must show each
caller what this server would (issue 25 part 2; tests/it/catalogs.rs checks it through mcp-edge).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import struct
import sys
import wave
import zlib
from typing import Any

import anyio
import mcp_types as t
import uvicorn
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from memory_events import MemoryEvents
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.subscriptions import PromptsListChanged, ResourceUpdated, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
Ctx = ServerRequestContext[Any, Any]
NAME = "mcp-edge-conformance-fixture-v2"


def _png_1x1_red() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")


def _wav_silence() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\x00\x00" * 80)
    return buf.getvalue()


PNG = base64.b64encode(_png_1x1_red()).decode()
WAV = base64.b64encode(_wav_silence()).decode()
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


def _str_arg(name: str, desc: str) -> dict[str, Any]:
    return _obj({name: {"type": "string", "description": desc}}, [name])


SCHEMA_2020_12 = {  # SEP-1613 + SEP-2106 keywords, all of which a proxy must pass through untouched
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                          "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}
# SEP-2243: `region` is mirrored into an `Mcp-Param-Region` header; the SDK's 2026-07-28 HTTP entry
# rejects a call whose header is missing or differs (-32020).
HEADER_PARAM = _obj({"region": {"type": "string", "description": "Region", "x-mcp-header": "Region"}}, ["region"])
SEP1034 = _obj(
    {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    [],
)
_TITLED = [{"const": f"value{i}", "title": f"{n} Option"} for i, n in ((1, "First"), (2, "Second"), (3, "Third"))]
SEP1330 = _obj(
    {
        "untitledSingle": {"type": "string", "description": "Untitled single-select", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {"type": "string", "description": "Titled single-select", "oneOf": _TITLED},
        "legacyEnum": {
            "type": "string",
            "description": "Legacy titled enum",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "description": "Untitled multi-select", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {
            "type": "array",
            "description": "Titled multi-select",
            "items": {"anyOf": [{"const": f"value{i}", "title": f"{n} Choice"} for i, n in ((1, "First"), (2, "Second"), (3, "Third"))]},
        },
    },
    [],
)

TOOLS: list[tuple[str, str, dict[str, Any]]] = [
    ("test_simple_text", "Returns simple text content", NO_ARGS),
    ("test_image_content", "Returns image content (1x1 red PNG)", NO_ARGS),
    ("test_audio_content", "Returns audio content (short WAV)", NO_ARGS),
    ("test_embedded_resource", "Returns an embedded resource", NO_ARGS),
    ("test_multiple_content_types", "Returns text, image and resource", NO_ARGS),
    ("test_tool_with_logging", "Sends 3 log notifications while running", NO_ARGS),
    ("test_tool_with_progress", "Sends 3 progress notifications", NO_ARGS),
    ("test_error_handling", "Always fails with isError", NO_ARGS),
    ("test_sampling", "Asks the client for LLM sampling", _str_arg("prompt", "The prompt to send to the LLM")),
    ("test_elicitation", "Asks the client for user input", _str_arg("message", "The message to show the user")),
    ("test_elicitation_sep1034_defaults", "Elicitation with defaults for every primitive type (SEP-1034)", NO_ARGS),
    ("test_elicitation_sep1330_enums", "Elicitation with all 5 enum schema variants (SEP-1330)", NO_ARGS),
    ("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", SCHEMA_2020_12),
    ("test_header_param", "Echoes region, which also travels in the Mcp-Param-Region header", HEADER_PARAM),
    ("test_reconnection", "Takes a moment so the SSE stream can be closed and resumed (SEP-1699)", NO_ARGS),
    ("test_missing_capability", "Needs the client's sampling capability (-32021 without it)", NO_ARGS),
    ("test_streaming_elicitation", "Progress, then asks the client for input", NO_ARGS),
    ("test_logging_tool", "Logs one message (only to callers that asked for logs)", NO_ARGS),
    ("test_trigger_tool_change", "Announces a tools list change", NO_ARGS),
    ("test_trigger_prompt_change", "Announces a prompts list change", NO_ARGS),
    ("test_input_required_result_elicitation", "MRTR: asks user_name", NO_ARGS),
    ("test_input_required_result_sampling", "MRTR: asks capital_question (sampling)", NO_ARGS),
    ("test_input_required_result_list_roots", "MRTR: asks client_roots (roots/list)", NO_ARGS),
    ("test_input_required_result_request_state", "MRTR: asks confirm, checks requestState", NO_ARGS),
    ("test_input_required_result_multiple_inputs", "MRTR: elicitation + sampling + roots in one round", NO_ARGS),
    ("test_input_required_result_multi_round", "MRTR: two rounds (step1, step2)", NO_ARGS),
    ("test_input_required_result_tampered_state", "MRTR: integrity-protected requestState", NO_ARGS),
    ("test_input_required_result_capabilities", "MRTR: asks only what the client declared", NO_ARGS),
]


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def image() -> dict[str, Any]:
    return {"type": "image", "data": PNG, "mimeType": "image/png"}


def done(*content: dict[str, Any], is_error: bool = False) -> t.CallToolResult:
    return t.CallToolResult.model_validate({"content": list(content), "isError": is_error})


def modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def elicit_q(message: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


def sample_q(prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": text(prompt)}], "maxTokens": max_tokens},
    }


ROOTS_Q: dict[str, Any] = {"method": "roots/list", "params": {}}
_CAP_OF = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}


def has_cap(ctx: Ctx, cap: str) -> bool:
    caps = ctx.session.client_capabilities
    return caps is not None and getattr(caps, cap, None) is not None


class NeedInput(Exception):
    """Raised by `gather` on the modern wire: the handler answers with this InputRequiredResult."""

    def __init__(self, result: t.InputRequiredResult):
        self.result = result


async def gather(ctx: Ctx, params: Any, questions: dict[str, dict[str, Any]], state: str | None = None) -> dict[str, Any]:
    """Answers to `questions` (key -> {method, params}) as plain dicts, whatever the era.

    2026-07-28: answers come from `inputResponses`; any key missing (or not an object) is asked
    again by raising NeedInput (InputRequiredResult with `requestState` = `state`). Legacy: every
    question is sent to the client at once, each as a request related to this call (its SSE
    stream), and the answers awaited together."""
    if modern(ctx):
        given = getattr(params, "input_responses", None) or {}
        got = {k: _plain(given[k]) for k in questions if k in given and isinstance(_plain(given[k]), dict)}
        missing = {k: q for k, q in questions.items() if k not in got}
        if missing:
            body: dict[str, Any] = {"resultType": "input_required", "inputRequests": missing}
            if state is not None:
                body["requestState"] = state
            raise NeedInput(t.InputRequiredResult.model_validate(body))
        return got
    meta = ServerMessageMetadata(related_request_id=ctx.request_id)
    out: dict[str, Any] = {}

    async def ask(key: str, q: dict[str, Any]) -> None:
        out[key] = await _ask_legacy(ctx, q, meta)

    # All questions at once (each sent before any answer), as the modern era asks them in one
    # InputRequiredResult; a gateway in front of this legacy server can then ask them in one round.
    async with anyio.create_task_group() as tg:
        for key, q in questions.items():
            tg.start_soon(ask, key, q)
    return {key: out[key] for key in questions}


async def _ask_legacy(ctx: Ctx, q: dict[str, Any], meta: ServerMessageMetadata) -> dict[str, Any]:
    req_type = {"elicitation/create": t.ElicitRequest, "sampling/createMessage": t.CreateMessageRequest, "roots/list": t.ListRootsRequest}
    res_type = {"elicitation/create": t.ElicitResult, "sampling/createMessage": t.CreateMessageResult, "roots/list": t.ListRootsResult}
    req = req_type[q["method"]].model_validate({"method": q["method"], "params": q["params"]})
    res = await ctx.session.send_request(req, res_type[q["method"]], metadata=meta)
    return res.model_dump(by_alias=True, mode="json", exclude_none=True)


def _plain(v: Any) -> Any:
    return v.model_dump(by_alias=True, mode="json", exclude_none=True) if hasattr(v, "model_dump") else v


def _content_field(answer: dict[str, Any], field: str) -> str:
    return str((answer.get("content") or {}).get(field, ""))


def _sampled_text(answer: dict[str, Any]) -> str:
    c = answer.get("content")
    if isinstance(c, list):
        c = c[0] if c else {}
    return str((c or {}).get("text", ""))


NAME_Q = elicit_q("What is your name?", _obj({"name": {"type": "string"}}, ["name"]))


async def mrtr_tool(ctx: Ctx, p: t.CallToolRequestParams) -> t.CallToolResult:
    """The test_input_required_result_* tools (spec basic/utilities/mrtr)."""
    name, state = p.name, p.request_state
    if name == "test_input_required_result_elicitation":
        a = await gather(ctx, p, {"user_name": NAME_Q})
        return done(text(f"Hello, {_content_field(a['user_name'], 'name')}!"))
    if name == "test_input_required_result_sampling":
        a = await gather(ctx, p, {"capital_question": sample_q("What is the capital of France?", 100)})
        return done(text(f"Sampling response: {_sampled_text(a['capital_question'])}"))
    if name == "test_input_required_result_list_roots":
        a = await gather(ctx, p, {"client_roots": ROOTS_Q})
        roots = a["client_roots"].get("roots") or []
        return done(text("Roots: " + ", ".join(str(r.get("uri")) for r in roots)))
    if name == "test_input_required_result_request_state":
        confirm = elicit_q("Please confirm", _obj({"ok": {"type": "boolean"}}, ["ok"]))
        if modern(ctx) and state is not None and state != "confirm-asked":
            raise MCPError(t.INVALID_PARAMS, "requestState is not one this tool issued")
        await gather(ctx, p, {"confirm": confirm}, state="confirm-asked")
        return done(text("state-ok: confirmation received"))
    if name == "test_input_required_result_multiple_inputs":
        qs = {"user_name": NAME_Q, "greeting": sample_q("Generate a greeting", 50), "client_roots": ROOTS_Q}
        a = await gather(ctx, p, qs, state="multiple-asked")
        return done(text(f"Got all inputs: name={_content_field(a['user_name'], 'name')}, greeting={_sampled_text(a['greeting'])}"))
    if name == "test_input_required_result_multi_round":
        return await _multi_round(ctx, p)
    if name == "test_input_required_result_tampered_state":
        q = elicit_q("Please confirm", _obj({"ok": {"type": "boolean"}}, ["ok"]))
        await gather(ctx, p, {"confirm": q}, state="tamper-check")
        return done(text("state verified"))
    if name == "test_input_required_result_capabilities":
        return await _capabilities(ctx, p)
    raise MCPError(t.INVALID_PARAMS, f"Unknown tool: {name}")


async def _multi_round(ctx: Ctx, p: t.CallToolRequestParams) -> t.CallToolResult:
    step1 = elicit_q("Step 1: What is your name?", _obj({"name": {"type": "string"}}, ["name"]))
    step2 = elicit_q("Step 2: What is your favorite color?", _obj({"color": {"type": "string"}}, ["color"]))
    if not modern(ctx):
        a1 = await gather(ctx, p, {"step1": step1})
        a2 = await gather(ctx, p, {"step2": step2})
        return done(text(f"Hello {_content_field(a1['step1'], 'name')}, favorite color {_content_field(a2['step2'], 'color')}"))
    state = p.request_state or ""
    if state.startswith("round-2:"):
        a2 = await gather(ctx, p, {"step2": step2}, state=state)
        return done(text(f"Hello {state[len('round-2:'):]}, favorite color {_content_field(a2['step2'], 'color')}"))
    a1 = await gather(ctx, p, {"step1": step1}, state="round-1")
    nxt = "round-2:" + _content_field(a1["step1"], "name")
    raise NeedInput(t.InputRequiredResult.model_validate({"resultType": "input_required", "inputRequests": {"step2": step2}, "requestState": nxt}))


async def _capabilities(ctx: Ctx, p: t.CallToolRequestParams) -> t.CallToolResult:
    qs: dict[str, dict[str, Any]] = {}
    if has_cap(ctx, "sampling"):
        qs["capital_question"] = sample_q("What is the capital of France?", 100)
    if has_cap(ctx, "elicitation"):
        qs["user_name"] = NAME_Q
    if has_cap(ctx, "roots"):
        qs["client_roots"] = ROOTS_Q
    if not qs:
        raise MCPError(t.MISSING_REQUIRED_CLIENT_CAPABILITY, "Client declared none of sampling, elicitation, roots",
                       {"requiredCapabilities": {"sampling": {}}})
    if modern(ctx):
        a = await gather(ctx, p, qs, state="caps-asked")
        return done(text("Answered: " + ", ".join(sorted(a))))
    answered = []  # legacy: one request at a time; one the client (or a gateway) refuses is skipped
    for key, q in qs.items():
        try:
            await gather(ctx, p, {key: q})
            answered.append(key)
        except MCPError:
            pass
    return done(text("Answered: " + ", ".join(sorted(answered))))


async def plain_tool(ctx: Ctx, p: t.CallToolRequestParams) -> t.CallToolResult | None:
    """Tools without client input (None: not one of these)."""
    name, args = p.name, p.arguments or {}
    if name == "test_simple_text":
        return done(text("This is a simple text response for testing."))
    if name == "test_image_content":
        return done(image())
    if name == "test_audio_content":
        return done({"type": "audio", "data": WAV, "mimeType": "audio/wav"})
    if name == "test_embedded_resource":
        return done({"type": "resource", "resource": {"uri": "test://embedded-resource", "mimeType": "text/plain",
                                                      "text": "This is an embedded resource content."}})
    if name == "test_multiple_content_types":
        res = {"uri": "test://mixed-content-resource", "mimeType": "application/json", "text": json.dumps({"test": "data", "value": 123})}
        return done(text("Multiple content types test:"), image(), {"type": "resource", "resource": res})
    if name == "test_tool_with_logging":
        for i, msg in enumerate(["Tool execution started", "Tool processing data", "Tool execution completed"]):
            if i:
                await anyio.sleep(0.05)
            await ctx.session.send_log_message("info", msg, logger="conformance", related_request_id=ctx.request_id)
        return done(text("Tool with logging executed successfully"))
    if name == "test_tool_with_progress":
        for i, v in enumerate([0, 50, 100]):
            if i:
                await anyio.sleep(0.05)
            await ctx.session.report_progress(v, 100, f"{v}%")  # a no-op without a progressToken
        return done(text("Tool with progress executed successfully"))
    if name == "test_error_handling":
        return done(text("This tool intentionally returns an error for testing"), is_error=True)
    if name == "json_schema_2020_12_tool":
        return done(text(f"json_schema_2020_12_tool called with {json.dumps(args, sort_keys=True)}"))
    if name == "test_header_param":
        return done(text(f"region={args.get('region')}"))
    if name.startswith("test_grown_tool_"):
        return done(text(f"{name} called"))
    if name == "test_reconnection":
        # SEP-1699 polling: the call's stream is closed after its priming event, the client
        # reconnects with Last-Event-ID and gets the result from the event store.
        if ctx.close_sse_stream is not None:
            await ctx.close_sse_stream()
        await anyio.sleep(0.3)
        return done(text("Reconnection test completed successfully"))
    if name == "test_missing_capability":
        if not has_cap(ctx, "sampling"):
            raise MCPError(t.MISSING_REQUIRED_CLIENT_CAPABILITY, "MissingRequiredClientCapabilityError: sampling",
                           {"requiredCapabilities": {"sampling": {}}})
        return done(text("Success"))
    if name == "test_logging_tool":
        await ctx.session.send_log_message("info", "Diagnostic trace logging activated", related_request_id=ctx.request_id)
        return done(text("Logging evaluated"))
    if name in ("test_trigger_tool_change", "test_trigger_prompt_change"):
        tools = name == "test_trigger_tool_change"
        # A real change (not just the announcement): a proxy may re-list and notify only on a difference.
        GROWN.append(("tool" if tools else "prompt", len(GROWN) + 1))
        if modern(ctx):
            await BUS.publish(ToolsListChanged() if tools else PromptsListChanged())
        elif tools:
            await ctx.session.send_tool_list_changed()
        else:
            await ctx.session.send_prompt_list_changed()
        return done(text("Mutation triggered"))
    return None


async def asking_tool(ctx: Ctx, p: t.CallToolRequestParams) -> t.CallToolResult | None:
    """Tools that ask the client something (legacy scenarios, era-adaptive)."""
    name, args = p.name, p.arguments or {}
    if name == "test_sampling":
        a = await gather(ctx, p, {"sample": sample_q(str(args.get("prompt", "")), 100)})
        return done(text(f"LLM response: {_sampled_text(a['sample'])}"))
    if name == "test_elicitation":
        schema = _obj({"username": {"type": "string", "description": "User's response"},
                       "email": {"type": "string", "description": "User's email address"}}, ["username", "email"])
        a = await gather(ctx, p, {"user": elicit_q(str(args.get("message", "")), schema)})
        return done(text(f"User response: action={a['user'].get('action')}, content={json.dumps(a['user'].get('content'))}"))
    if name in ("test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums"):
        schema = SEP1034 if name.endswith("defaults") else SEP1330
        a = await gather(ctx, p, {"form": elicit_q("Please review and update the form fields", schema)})
        return done(text(f"Elicitation completed: action={a['form'].get('action')}, content={json.dumps(a['form'].get('content'))}"))
    if name == "test_streaming_elicitation":
        await ctx.session.report_progress(50, 100, "asking")
        a = await gather(ctx, p, {"user_name": NAME_Q})
        return done(text(f"Streaming complete: {_content_field(a['user_name'], 'name')}"))
    return None


async def call_tool(ctx: Ctx, p: t.CallToolRequestParams) -> t.CallToolResult | t.InputRequiredResult:
    if p.name == TASKS_ONLY[0] and declares_tasks(ctx):
        return done(text("declared the tasks extension"))
    try:
        if p.name.startswith("test_input_required_result_"):
            return await mrtr_tool(ctx, p)
        for handler in (plain_tool, asking_tool):
            res = await handler(ctx, p)
            if res is not None:
                return res
    except NeedInput as need:
        return need.result
    raise MCPError(t.INVALID_PARAMS, f"Unknown tool: {p.name}")


GROWN: list[tuple[str, int]] = []  # ("tool" | "prompt", n): added by test_trigger_*_change


TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# Listed (and callable) only for a request that declares the tasks extension: a catalog scoped to the
# caller's capabilities (SEP-2575), which a gateway must show each caller as this server would.
TASKS_ONLY = ("test_tasks_only", "Shown only to clients that declare the tasks extension", NO_ARGS)


def declares_tasks(ctx: Ctx) -> bool:
    caps = ctx.session.client_capabilities
    return caps is not None and TASKS_EXTENSION in (caps.extensions or {})


async def list_tools(ctx: Ctx, p: Any) -> t.ListToolsResult:
    grown = [(f"test_grown_tool_{n}", "Added by test_trigger_tool_change", NO_ARGS) for k, n in GROWN if k == "tool"]
    scoped = [TASKS_ONLY] if declares_tasks(ctx) else []
    return t.ListToolsResult.model_validate(
        {"tools": [{"name": n, "description": d, "inputSchema": s} for n, d, s in TOOLS + grown + scoped]}
    )


RESOURCES = [
    {"uri": "test://static-text", "name": "static-text", "description": "A static text resource", "mimeType": "text/plain"},
    {"uri": "test://static-binary", "name": "static-binary", "description": "A static binary resource (1x1 red PNG)", "mimeType": "image/png"},
    {"uri": "test://watched-resource", "name": "watched-resource", "description": "A resource that can be subscribed to", "mimeType": "text/plain"},
]


async def list_resources(ctx: Ctx, p: Any) -> t.ListResourcesResult:
    return t.ListResourcesResult.model_validate({"resources": RESOURCES})


async def list_templates(ctx: Ctx, p: Any) -> t.ListResourceTemplatesResult:
    tpl = {"uriTemplate": "test://template/{id}/data", "name": "template-data",
           "description": "Data for an id, substituted from the URI", "mimeType": "application/json"}
    return t.ListResourceTemplatesResult.model_validate({"resourceTemplates": [tpl]})


async def read_resource(ctx: Ctx, p: t.ReadResourceRequestParams) -> t.ReadResourceResult:
    u = str(p.uri)
    if u == "test://static-text":
        c = {"uri": u, "mimeType": "text/plain", "text": "This is the content of the static text resource."}
    elif u == "test://static-binary":
        c = {"uri": u, "mimeType": "image/png", "blob": PNG}
    elif u == "test://watched-resource":
        c = {"uri": u, "mimeType": "text/plain", "text": "Watched resource content."}
    elif u.startswith("test://template/") and u.endswith("/data") and u.count("/") == 4:
        rid = u[len("test://template/"):-len("/data")]
        body = json.dumps({"id": rid, "templateTest": True, "data": f"Data for ID: {rid}"}, separators=(",", ":"))
        c = {"uri": u, "mimeType": "application/json", "text": body}
    elif modern(ctx):  # SEP-2164 (2026-07-28): -32602 with the uri in data
        raise MCPError(t.INVALID_PARAMS, f"Resource not found: {u}", {"uri": u})
    else:  # 2025-11-25 server/resources.mdx §Error Handling: -32002
        raise MCPError(-32002, f"Resource not found: {u}", {"uri": u})
    return t.ReadResourceResult.model_validate({"contents": [c]})


SUBSCRIBED: set[str] = set()


async def subscribe(ctx: Ctx, p: t.SubscribeRequestParams) -> t.EmptyResult:
    SUBSCRIBED.add(str(p.uri))
    return t.EmptyResult()


async def unsubscribe(ctx: Ctx, p: t.UnsubscribeRequestParams) -> t.EmptyResult:
    SUBSCRIBED.discard(str(p.uri))
    return t.EmptyResult()


def _arg(name: str, desc: str) -> dict[str, Any]:
    return {"name": name, "description": desc, "required": True}


PROMPTS = [
    {"name": "test_simple_prompt", "description": "A simple prompt without arguments"},
    {"name": "test_prompt_with_arguments", "description": "A prompt with two required arguments",
     "arguments": [_arg("arg1", "First test argument"), _arg("arg2", "Second test argument")]},
    {"name": "test_prompt_with_embedded_resource", "description": "A prompt with an embedded resource",
     "arguments": [_arg("resourceUri", "URI of the resource to embed")]},
    {"name": "test_prompt_with_image", "description": "A prompt with image content"},
    {"name": "test_input_required_result_prompt", "description": "MRTR: asks user_context before rendering"},
]


async def list_prompts(ctx: Ctx, p: Any) -> t.ListPromptsResult:
    grown = [{"name": f"test_grown_prompt_{n}", "description": "Added by test_trigger_prompt_change"} for k, n in GROWN if k == "prompt"]
    return t.ListPromptsResult.model_validate({"prompts": PROMPTS + grown})


def _user(content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": content}


async def get_prompt(ctx: Ctx, p: t.GetPromptRequestParams) -> t.GetPromptResult | t.InputRequiredResult:
    name, args = p.name, p.arguments or {}
    if name == "test_simple_prompt":
        msgs = [_user(text("This is a simple prompt for testing."))]
    elif name == "test_prompt_with_arguments":
        msgs = [_user(text(f"Prompt with arguments: arg1='{args.get('arg1', '')}', arg2='{args.get('arg2', '')}'"))]
    elif name == "test_prompt_with_embedded_resource":
        res = {"uri": args.get("resourceUri") or "test://example-resource", "mimeType": "text/plain",
               "text": "Embedded resource content for testing."}
        msgs = [_user({"type": "resource", "resource": res}), _user(text("Please process the embedded resource above."))]
    elif name == "test_prompt_with_image":
        msgs = [_user(image()), _user(text("Please analyze the image above."))]
    elif name.startswith("test_grown_prompt_"):
        msgs = [_user(text(f"{name} rendered"))]
    elif name == "test_input_required_result_prompt":
        q = elicit_q("What context should the prompt use?", _obj({"context": {"type": "string"}}, ["context"]))
        try:
            a = await gather(ctx, p, {"user_context": q})
        except NeedInput as need:
            return need.result
        msgs = [_user(text(f"Prompt rendered with context: {_content_field(a['user_context'], 'context')}"))]
    else:
        raise MCPError(t.INVALID_PARAMS, f"Unknown prompt: {name}")
    return t.GetPromptResult.model_validate({"description": f"{name} (conformance fixture)", "messages": msgs})


async def complete(ctx: Ctx, p: t.CompleteRequestParams) -> t.CompleteResult:
    ref = _plain(p.ref)
    if ref.get("type") == "ref/prompt" and ref.get("name") == "test_prompt_with_arguments":
        pool = ["paris", "park", "party", "test", "testValue1", "testValue2"]
    elif ref.get("type") == "ref/resource":
        pool = ["1", "2", "123"]
    else:
        pool = []
    values = [v for v in pool if v.startswith(p.argument.value)]
    return t.CompleteResult.model_validate({"completion": {"values": values, "total": len(values), "hasMore": False}})


async def set_level(ctx: Ctx, p: t.SetLevelRequestParams) -> t.EmptyResult:
    return t.EmptyResult()


BUS = InMemorySubscriptionBus()
HINT = CacheHint(ttl_ms=0, scope="private")


def build() -> Server[Any]:
    import warnings

    warnings.simplefilter("ignore")  # logging/setLevel is deprecated at 2026-07-28; served for legacy callers
    server: Server[Any] = Server(
        NAME,
        version="0.2.0",
        cache_hints={m: HINT for m in ("tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read")},
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_subscriptions_listen=ListenHandler(BUS),
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_completion=complete,
        on_set_logging_level=set_level,
    )
    # Seals every outgoing requestState and verifies every echoed one (-32602 when tampered).
    server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=NAME))
    return server


def main(port: int) -> None:
    server = build()
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )
    app = server.streamable_http_app(
        transport_security=security, host="127.0.0.1", event_store=MemoryEvents(), retry_interval=500
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    main(int(sys.argv[1]))
