"""Real MCP client, Python SDK mcp==2.3.0: one `subscriptions/listen` stream (2026-07-28).

usage: .venv2/bin/python listen_v2.py URL

Connects in 2026-07-28 mode, opens `Client.listen(tools_list_changed=True,
prompts_list_changed=True, resource_subscriptions=["edge://none"])`, prints
one JSON line `{"honored": {...}}` once the acknowledgment arrived, then one
line per event `{"event": "<type name>"}`, and when the stream ends one line
`{"end": "graceful" | "lost"}` (the server's closing response, or a drop).
Exits non-zero on any other failure; timeout CLIENT_TIMEOUT seconds (default 60).
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client
from mcp.client.subscriptions import SubscriptionLost


def say(obj) -> None:
    print(json.dumps(obj), flush=True)


async def run(url: str) -> None:
    async with Client(url, mode="2026-07-28", cache=None) as client:
        async with client.listen(
            tools_list_changed=True,
            prompts_list_changed=True,
            resource_subscriptions=["edge://none"],
        ) as sub:
            say({"honored": sub.honored.model_dump(mode="json", by_alias=True, exclude_none=True)})
            try:
                async for event in sub:
                    say({"event": type(event).__name__})
            except SubscriptionLost:
                say({"end": "lost"})
                return
            say({"end": "graceful"})


async def bounded(url: str) -> None:
    with anyio.fail_after(float(os.environ.get("CLIENT_TIMEOUT", "60"))):
        await run(url)


def main() -> None:
    anyio.run(bounded, sys.argv[1])


if __name__ == "__main__":
    main()
