"""Modern (2026-07-28) MCP fixture server for mcp-edge interop tests (real Python SDK, mcp==2.3.0).

usage: .venv2/bin/python fixture_modern_server.py stdio
       .venv2/bin/python fixture_modern_server.py http PORT     (http://127.0.0.1:PORT/mcp)

Tools:
  echo(text:str) -> text unchanged
  grow()         -> adds a tool grown_<n> and publishes a tools list-changed event, which the SDK
                    delivers only on `subscriptions/listen` streams: a client that does not listen
                    never hears of it. Text "grew grown_<n>".
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import Context, MCPServer


def build() -> MCPServer:
    mcp = MCPServer("mcp-edge-modern-fixture")
    grown = [0]

    @mcp.tool()
    def echo(text: str) -> str:
        """Echo text back."""
        return text

    @mcp.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool grown_<n> and announce it to listeners."""
        grown[0] += 1
        n = grown[0]

        def grown_tool() -> str:
            return f"grown {n}"

        mcp.add_tool(grown_tool, name=f"grown_{n}", description=f"added by grow call {n}")
        await ctx.notify_tools_changed()
        return f"grew grown_{n}"

    return mcp


def main() -> None:
    server = build()
    if sys.argv[1:2] == ["http"]:
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()


if __name__ == "__main__":
    main()
