"""Modern (2026-07-28) MCP fixture server for mcp-edge interop tests (real Python SDK, mcp==2.3.0).

usage: .venv2/bin/python fixture_modern_server.py stdio
       .venv2/bin/python fixture_modern_server.py http PORT     (http://127.0.0.1:PORT/mcp)

Tools:
  echo(text:str) -> text unchanged
  where(region)  -> "served in <region>"; `region` carries x-mcp-header "Region", so over HTTP the
                    call must send a matching Mcp-Param-Region header (the SDK checks it)
  grow()         -> adds a tool grown_<n> and publishes a tools list-changed event, which the SDK
                    delivers only on `subscriptions/listen` streams: a client that does not listen
                    never hears of it. Text "grew grown_<n>".
  meet()         -> asks the client through the SDK's resolvers (`Resolve` with `Elicit`,
                    `ListRoots`, `Sample`), which in the 2026-07-28 era become InputRequiredResult
                    rounds: round 1 elicits a name (form {name}) and lists roots, round 2 samples
                    "Say hello to <name>" (it depends on the name). Text
                    "name=<name> roots=<uri,...> llm=<sampled text>".
"""

from __future__ import annotations

import sys
from typing import Annotated

from mcp.server.mcpserver import Context, Elicit, ListRoots, MCPServer, Resolve, Sample
from mcp_types import CreateMessageResult, ListRootsResult, SamplingMessage, TextContent
from pydantic import BaseModel, Field


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


def ask_roots() -> ListRoots:
    return ListRoots()


def ask_llm(who: Annotated[Name, Resolve(ask_name)]) -> Sample:
    hello = SamplingMessage(role="user", content=TextContent(type="text", text=f"Say hello to {who.name}"))
    return Sample([hello], max_tokens=50)


def build() -> MCPServer:
    mcp = MCPServer("mcp-edge-modern-fixture")
    grown = [0]

    @mcp.tool()
    def echo(text: str) -> str:
        """Echo text back."""
        return text

    @mcp.tool()
    def where(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        """A tool whose `region` is mirrored into the Mcp-Param-Region header; the SDK's HTTP
        transport rejects a call whose header is missing or differs (-32020)."""
        return f"served in {region}"

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

    @mcp.tool()
    def meet(
        who: Annotated[Name, Resolve(ask_name)],
        roots: Annotated[ListRootsResult, Resolve(ask_roots)],
        llm: Annotated[CreateMessageResult, Resolve(ask_llm)],
    ) -> str:
        """Meet the client: its user's name, its roots, and what its LLM says."""
        uris = ",".join(str(r.uri) for r in roots.roots)
        return f"name={who.name} roots={uris} llm={llm.content.text}"

    return mcp


def main() -> None:
    server = build()
    if sys.argv[1:2] == ["http"]:
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()


if __name__ == "__main__":
    main()
