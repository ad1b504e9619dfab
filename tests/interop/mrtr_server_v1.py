"""Legacy stdio MCP server on the real Python SDK (mcp==1.30.0, FastMCP) whose tool asks
its client things the 2025 way, with server->client requests during the call: for the
modern-client pair of issue 13 (Python mcp 2.3.0 client in modern mode -> mcp-edge ->
this server), where mcp-edge turns each request into an MRTR round.

usage: .venv1/bin/python mrtr_server_v1.py     (MCP over stdin/stdout)

Tool interview(question): ctx.elicit(question, {name: str}), then sampling/createMessage
("2+2?"), then roots/list, each after the previous answer; returns JSON text
{"elicited": {"action", "name"}, "sampled": <text>, "model": <model>, "roots": [uris]}.
"""

from __future__ import annotations

import json

import mcp.types as types
from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel

server = FastMCP("mcp-edge-mrtr-fixture-v1")


class Name(BaseModel):
    name: str


@server.tool()
async def interview(ctx: Context, question: str = "Your name?") -> str:
    """Asks the client for a name (elicitation), an answer (sampling) and its roots."""
    elicited = await ctx.elicit(question, Name)
    name = elicited.data.name if elicited.action == "accept" and elicited.data else None
    sampled = await ctx.session.create_message(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text="2+2?"))],
        max_tokens=10,
        related_request_id=ctx.request_id,
    )
    text = sampled.content.text if isinstance(sampled.content, types.TextContent) else None
    roots = await ctx.session.list_roots()
    return json.dumps({
        "elicited": {"action": elicited.action, "name": name},
        "sampled": text,
        "model": sampled.model,
        "roots": [str(r.uri) for r in roots.roots],
    })


if __name__ == "__main__":
    server.run("stdio")
