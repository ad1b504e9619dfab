"""The upstream of every box in tests/fleet/fleet.sh: a legacy stdio MCP server on the real
Python SDK (mcp==1.30.0, FastMCP), one process per box, all appending to one shared log.

usage: .venv1/bin/python record_server.py     (MCP over stdin/stdout)
env:   FLEET_BOX  this box's name (e1, e2, ...), written next to each nonce
       FLEET_LOG  the shared log file (one line per `record` call: "<nonce> <box>\n")

Tools:
  record(nonce)       appends "<nonce> <box>" to FLEET_LOG (O_APPEND, one write per line, fsync'd
                      before the answer) and returns "ok:<nonce>": the rolling restart's proof that a
                      call reached an upstream once, or not at all
  where()             returns the box's name
  slow(seconds)       sleeps, then returns "slow:<box>" (holds a connection busy)
  ask(nonce)          asks its client twice during the call, the 2025 way (elicitation, then
                      sampling): through mcp-edge a modern 2026-07-28 caller answers them in MRTR
                      rounds; returns "asked:<nonce>:<name>:<sampled text>:<box>"
"""

from __future__ import annotations

import asyncio
import os

import mcp.types as types
from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel

BOX = os.environ.get("FLEET_BOX", "?")
LOG = os.environ["FLEET_LOG"]

server = FastMCP("mcp-edge-fleet-record", log_level="WARNING")


@server.tool()
def record(nonce: str) -> str:
    """Appends the nonce and this box's name to the shared log; returns ok:<nonce>."""
    line = f"{nonce} {BOX}\n".encode()
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return f"ok:{nonce}"


@server.tool()
def where() -> str:
    """This box's name."""
    return BOX


@server.tool()
async def slow(seconds: float = 5.0) -> str:
    """Sleeps, then answers."""
    await asyncio.sleep(seconds)  # not ordering: the tool's work
    return f"slow:{BOX}"


class Name(BaseModel):
    name: str


@server.tool()
async def ask(ctx: Context, nonce: str) -> str:
    """Asks the client for a name (elicitation), then a sampled answer."""
    elicited = await ctx.elicit(f"name for {nonce}?", Name)
    name = elicited.data.name if elicited.action == "accept" and elicited.data else "-"
    sampled = await ctx.session.create_message(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=f"2+2 ({nonce})?"))],
        max_tokens=10,
        related_request_id=ctx.request_id,
    )
    text = sampled.content.text if isinstance(sampled.content, types.TextContent) else "-"
    return f"asked:{nonce}:{name}:{text}:{BOX}"


if __name__ == "__main__":
    server.run("stdio")
