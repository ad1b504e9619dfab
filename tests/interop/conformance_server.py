"""STDIO MCP server implementing what @modelcontextprotocol/conformance@0.1.16's server scenarios expect.

usage: .venv1/bin/python conformance_server.py              speaks MCP over stdin/stdout (logs go to stderr)
       .venv1/bin/python conformance_server.py --http PORT  self-check mode: the same server over the SDK's own
                                                            streamable HTTP at http://127.0.0.1:PORT/mcp, to get a
                                                            baseline from the conformance suite without mcp-edge

Built on the real Python SDK (mcp==1.30.0, low-level `mcp.server.lowlevel.Server`, so every
schema is exactly what we write). mcp-edge fronts it over stdio with prefix = "" so the names
below reach the conformance suite unchanged. Scenario -> fixture content:

  tools-list                      every tool has name, description, inputSchema
  tools-call-simple-text          test_simple_text            text "This is a simple text response for testing."
  tools-call-image                test_image_content          image/png (1x1 red pixel)
  tools-call-audio                test_audio_content          audio/wav (mimeType must be exactly audio/wav)
  tools-call-embedded-resource    test_embedded_resource      resource test://embedded-resource, text/plain
  tools-call-mixed-content        test_multiple_content_types text + image + resource
  tools-call-with-logging         test_tool_with_logging      3 notifications/message (info), ~50 ms apart
  tools-call-with-progress        test_tool_with_progress     progress 0/100, 50/100, 100/100 for _meta.progressToken
  tools-call-error                test_error_handling         isError: true with a text message
  tools-call-sampling             test_sampling(prompt)       sends sampling/createMessage to the client
  tools-call-elicitation          test_elicitation(message)   sends elicitation/create (username, email)
  elicitation-sep1034-defaults    test_elicitation_sep1034_defaults  schema with defaults for all primitive types
  elicitation-sep1330-enums       test_elicitation_sep1330_enums     schema with the 5 enum variants
  json-schema-2020-12             json_schema_2020_12_tool    inputSchema keeps $schema, $defs, additionalProperties
  server-sse-polling              test_reconnection           waits, then "Reconnection test completed successfully"
                                                              (stream close/resume itself is the HTTP front's job)
  resources-list                  test://static-text, test://static-binary, test://watched-resource
  resources-read-text             test://static-text   text/plain
  resources-read-binary           test://static-binary image/png blob
  resources-templates-read        template test://template/{id}/data -> JSON text containing the id
  resources-subscribe/-unsubscribe  accepts test://watched-resource (capability resources.subscribe = true)
  prompts-list / prompts-get-*    test_simple_prompt, test_prompt_with_arguments(arg1,arg2),
                                  test_prompt_with_embedded_resource(resourceUri), test_prompt_with_image
  completion-complete             completion for ref/prompt test_prompt_with_arguments (and the template's id)
  logging-set-level               logging/setLevel accepted (capability logging)
  server-initialize, ping         SDK built-ins
  server-sse-multiple-streams, dns-rebinding-protection: purely the HTTP front (mcp-edge) — nothing here.

Sampling/elicitation are sent whether or not the upstream-side client declared the capability
(the gateway, not this fixture, is what is under test); if the request fails the tool returns
isError with the reason, which the conformance check reports.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import re
import struct
import sys
import wave
import zlib

import anyio
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

logging.basicConfig(stream=sys.stderr, level=logging.WARNING)


def _png_1x1_red() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    idat = zlib.compress(b"\x00\xff\x00\x00")  # filter byte + one red pixel
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _wav_short_silence() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\x00\x00" * 80)  # 10 ms of silence
    return buf.getvalue()


PNG_B64 = base64.b64encode(_png_1x1_red()).decode()
WAV_B64 = base64.b64encode(_wav_short_silence()).decode()
NO_ARGS = {"type": "object", "properties": {}}

TOOLS = [
    types.Tool(name="test_simple_text", description="Returns simple text content", inputSchema=NO_ARGS),
    types.Tool(name="test_image_content", description="Returns image content (1x1 red PNG)", inputSchema=NO_ARGS),
    types.Tool(name="test_audio_content", description="Returns audio content (short WAV)", inputSchema=NO_ARGS),
    types.Tool(name="test_embedded_resource", description="Returns an embedded resource", inputSchema=NO_ARGS),
    types.Tool(name="test_multiple_content_types", description="Returns text, image and resource", inputSchema=NO_ARGS),
    types.Tool(name="test_tool_with_logging", description="Sends 3 log notifications while running", inputSchema=NO_ARGS),
    types.Tool(name="test_tool_with_progress", description="Sends 3 progress notifications", inputSchema=NO_ARGS),
    types.Tool(name="test_error_handling", description="Always fails with isError", inputSchema=NO_ARGS),
    types.Tool(
        name="test_sampling",
        description="Asks the client for LLM sampling",
        inputSchema={
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "The prompt to send to the LLM"}},
            "required": ["prompt"],
        },
    ),
    types.Tool(
        name="test_elicitation",
        description="Asks the client for user input",
        inputSchema={
            "type": "object",
            "properties": {"message": {"type": "string", "description": "The message to show the user"}},
            "required": ["message"],
        },
    ),
    types.Tool(
        name="test_elicitation_sep1034_defaults",
        description="Elicitation with default values for every primitive type (SEP-1034)",
        inputSchema=NO_ARGS,
    ),
    types.Tool(
        name="test_elicitation_sep1330_enums",
        description="Elicitation with all 5 enum schema variants (SEP-1330)",
        inputSchema=NO_ARGS,
    ),
    types.Tool(
        name="json_schema_2020_12_tool",
        description="Tool with JSON Schema 2020-12 features",
        inputSchema={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                }
            },
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="test_reconnection",
        description="Takes a moment so an HTTP front can close and resume the SSE stream (SEP-1699)",
        inputSchema=NO_ARGS,
    ),
]

SEP1034_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    "required": [],
}

SEP1330_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "description": "Untitled single-select", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "description": "Titled single-select",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "description": "Legacy titled enum",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "description": "Untitled multi-select",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "description": "Titled multi-select",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
    "required": [],
}

RESOURCES = [
    types.Resource(
        uri=AnyUrl("test://static-text"),
        name="static-text",
        description="A static text resource",
        mimeType="text/plain",
    ),
    types.Resource(
        uri=AnyUrl("test://static-binary"),
        name="static-binary",
        description="A static binary resource (1x1 red PNG)",
        mimeType="image/png",
    ),
    types.Resource(
        uri=AnyUrl("test://watched-resource"),
        name="watched-resource",
        description="A resource that can be subscribed to",
        mimeType="text/plain",
    ),
]
TEMPLATE_RE = re.compile(r"^test://template/([^/]+)/data$")

PROMPTS = [
    types.Prompt(name="test_simple_prompt", description="A simple prompt without arguments"),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with two required arguments",
        arguments=[
            types.PromptArgument(name="arg1", description="First test argument", required=True),
            types.PromptArgument(name="arg2", description="Second test argument", required=True),
        ],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt with an embedded resource",
        arguments=[types.PromptArgument(name="resourceUri", description="URI of the resource to embed", required=True)],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt with image content"),
]

class FixtureServer(Server):
    def create_initialization_options(self, notification_options=None, experimental_capabilities=None):
        opts = super().create_initialization_options(notification_options, experimental_capabilities)
        # The low-level Server always reports resources.subscribe = false; this fixture implements it.
        if opts.capabilities.resources is not None:
            opts.capabilities.resources.subscribe = True
        return opts


server: Server = FixtureServer("mcp-edge-conformance-fixture", version="0.1.0")
subscriptions: set[str] = set()


def text(t: str) -> types.TextContent:
    return types.TextContent(type="text", text=t)


def image() -> types.ImageContent:
    return types.ImageContent(type="image", data=PNG_B64, mimeType="image/png")


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return TOOLS


@server.call_tool()
async def call_tool(name: str, arguments: dict) -> list[types.ContentBlock] | types.CallToolResult:
    ctx = server.request_context
    session, rid = ctx.session, ctx.request_id

    if name == "test_simple_text":
        return [text("This is a simple text response for testing.")]
    if name == "test_image_content":
        return [image()]
    if name == "test_audio_content":
        return [types.AudioContent(type="audio", data=WAV_B64, mimeType="audio/wav")]
    if name == "test_embedded_resource":
        return [
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(
                    uri=AnyUrl("test://embedded-resource"),
                    mimeType="text/plain",
                    text="This is an embedded resource content.",
                ),
            )
        ]
    if name == "test_multiple_content_types":
        return [
            text("Multiple content types test:"),
            image(),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(
                    uri=AnyUrl("test://mixed-content-resource"),
                    mimeType="application/json",
                    text=json.dumps({"test": "data", "value": 123}),
                ),
            ),
        ]
    if name == "test_tool_with_logging":
        for i, msg in enumerate(["Tool execution started", "Tool processing data", "Tool execution completed"]):
            if i:
                await anyio.sleep(0.05)
            await session.send_log_message("info", msg, logger="conformance", related_request_id=rid)
        return [text("Tool with logging executed successfully")]
    if name == "test_tool_with_progress":
        token = ctx.meta.progressToken if ctx.meta else None
        for i, p in enumerate([0, 50, 100]):
            if i:
                await anyio.sleep(0.05)
            if token is not None:
                await session.send_progress_notification(token, p, 100, f"{p}%", related_request_id=rid)
        return [text("Tool with progress executed successfully")]
    if name == "test_error_handling":
        raise RuntimeError("This tool intentionally returns an error for testing")
    if name == "test_sampling":
        res = await session.create_message(
            [types.SamplingMessage(role="user", content=text(str(arguments.get("prompt", ""))))],
            max_tokens=100,
            related_request_id=rid,
        )
        reply = res.content.text if isinstance(res.content, types.TextContent) else json.dumps(res.content.model_dump(mode="json"))
        return [text(f"LLM response: {reply}")]
    if name == "test_elicitation":
        res = await session.elicit_form(
            str(arguments.get("message", "")),
            {
                "type": "object",
                "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"},
                },
                "required": ["username", "email"],
            },
            related_request_id=rid,
        )
        return [text(f"User response: action={res.action}, content={json.dumps(res.content)}")]
    if name in ("test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums"):
        schema = SEP1034_SCHEMA if name.endswith("defaults") else SEP1330_SCHEMA
        res = await session.elicit_form("Please review and update the form fields", schema, related_request_id=rid)
        return [text(f"Elicitation completed: action={res.action}, content={json.dumps(res.content)}")]
    if name == "json_schema_2020_12_tool":
        return [text(f"json_schema_2020_12_tool called with {json.dumps(arguments, sort_keys=True)}")]
    if name == "test_reconnection":
        await anyio.sleep(0.3)
        return [text("Reconnection test completed successfully")]
    raise ValueError(f"Unknown tool: {name}")


@server.list_resources()
async def list_resources() -> list[types.Resource]:
    return RESOURCES


@server.list_resource_templates()
async def list_resource_templates() -> list[types.ResourceTemplate]:
    return [
        types.ResourceTemplate(
            uriTemplate="test://template/{id}/data",
            name="template-data",
            description="Data for an id, substituted from the URI",
            mimeType="application/json",
        )
    ]


@server.read_resource()
async def read_resource(uri: AnyUrl) -> list[ReadResourceContents]:
    u = str(uri)
    if u == "test://static-text":
        return [ReadResourceContents("This is the content of the static text resource.", "text/plain")]
    if u == "test://static-binary":
        return [ReadResourceContents(base64.b64decode(PNG_B64), "image/png")]
    if u == "test://watched-resource":
        return [ReadResourceContents("Watched resource content.", "text/plain")]
    m = TEMPLATE_RE.match(u)
    if m:
        rid = m.group(1)
        body = json.dumps({"id": rid, "templateTest": True, "data": f"Data for ID: {rid}"}, separators=(",", ":"))
        return [ReadResourceContents(body, "application/json")]
    raise McpError(types.ErrorData(code=-32002, message=f"Resource not found: {u}", data={"uri": u}))


@server.subscribe_resource()
async def subscribe(uri: AnyUrl) -> None:
    subscriptions.add(str(uri))


@server.unsubscribe_resource()
async def unsubscribe(uri: AnyUrl) -> None:
    subscriptions.discard(str(uri))


@server.list_prompts()
async def list_prompts() -> list[types.Prompt]:
    return PROMPTS


@server.get_prompt()
async def get_prompt(name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
    args = arguments or {}
    if name == "test_simple_prompt":
        msgs = [types.PromptMessage(role="user", content=text("This is a simple prompt for testing."))]
    elif name == "test_prompt_with_arguments":
        msgs = [
            types.PromptMessage(
                role="user",
                content=text(f"Prompt with arguments: arg1='{args.get('arg1', '')}', arg2='{args.get('arg2', '')}'"),
            )
        ]
    elif name == "test_prompt_with_embedded_resource":
        msgs = [
            types.PromptMessage(
                role="user",
                content=types.EmbeddedResource(
                    type="resource",
                    resource=types.TextResourceContents(
                        uri=AnyUrl(args.get("resourceUri") or "test://example-resource"),
                        mimeType="text/plain",
                        text="Embedded resource content for testing.",
                    ),
                ),
            ),
            types.PromptMessage(role="user", content=text("Please process the embedded resource above.")),
        ]
    elif name == "test_prompt_with_image":
        msgs = [
            types.PromptMessage(role="user", content=image()),
            types.PromptMessage(role="user", content=text("Please analyze the image above.")),
        ]
    else:
        raise McpError(types.ErrorData(code=-32602, message=f"Unknown prompt: {name}"))
    return types.GetPromptResult(description=f"{name} (conformance fixture)", messages=msgs)


@server.completion()
async def complete(ref, argument: types.CompletionArgument, context) -> types.Completion:
    if isinstance(ref, types.PromptReference) and ref.name == "test_prompt_with_arguments":
        pool = ["paris", "park", "party", "test", "testValue1", "testValue2"]
    elif isinstance(ref, types.ResourceTemplateReference):
        pool = ["1", "2", "123"]
    else:
        pool = []
    values = [v for v in pool if v.startswith(argument.value)]
    return types.Completion(values=values, total=len(values), hasMore=False)


@server.set_logging_level()
async def set_level(level: types.LoggingLevel) -> None:
    return None


async def main_stdio() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions()))


def main_http(port: int) -> None:
    import contextlib

    import uvicorn
    from mcp.server.fastmcp.server import StreamableHTTPASGIApp
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Route

    mgr = StreamableHTTPSessionManager(
        app=server,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        ),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        async with mgr.run():
            yield

    app = Starlette(routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(mgr))], lifespan=lifespan)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        main_http(int(sys.argv[2]))
    elif len(sys.argv) == 1:
        asyncio.run(main_stdio())
    else:
        sys.exit(__doc__.split("\n\n")[1])
