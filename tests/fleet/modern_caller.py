"""Modern (2026-07-28) callers for tests/fleet/fleet.sh, on the Python SDK mcp==2.3.0 `Client`
(mode "2026-07-28": stateless, no handshake), each with its own token and loopback address.

usage: .venv2/bin/python modern_caller.py load URL TOKENS_JSON FIRST_ADDR PREFIX STOP_FILE OUT_JSON
         one client per token, calling rec__record with unique nonces until STOP_FILE exists
         (check b); OUT_JSON: {"calls": [[client, nonce, "ok"|"failed", detail]...]}
       .venv2/bin/python modern_caller.py mrtr URL TOKENS_JSON FIRST_ADDR CALLS OUT_JSON
         one client per token, CALLS calls of rec__ask each, taking turns (the upstream asks for
         elicitation, then sampling, mid-call: two MRTR rounds that the SDK answers with its
         callbacks and retries with requestState) (check d); OUT_JSON: {"clients": [{"token": i, "results":
         [text...], "failures": [...], "retries": n (requests that carried a requestState)}...]}
A failure is any exception or an unexpected text (detail says which).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import sys
import traceback
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

CALL_TIMEOUT = 20.0
PAUSE = 0.03


def leaves(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(leaves(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"


async def on_sampling(_ctx, _params):
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="four"), model="fleet-canned", stop_reason="endTurn"
    )


async def on_elicitation(_ctx, _params):
    return types.ElicitResult(action="accept", content={"name": "Ada"})


def client(url: str, token: str, local: str, hooks: dict[str, list[Any]] | None = None) -> Client:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(30, read=300),
        transport=httpx2.AsyncHTTPTransport(local_address=local),
        event_hooks=hooks or {},
    )
    return Client(
        streamable_http_client(url, http_client=http),
        mode="2026-07-28",
        sampling_callback=on_sampling,
        elicitation_callback=on_elicitation,
        client_info=types.Implementation(name="mcp-edge-fleet-v2", version="2.3.0"),
        cache=None,
    )


def text_of(res: Any) -> str:
    if getattr(res, "is_error", False):
        raise RuntimeError(f"isError: {res}")
    return res.content[0].text if res.content else ""


async def load_one(i: int, url: str, token: str, local: str, prefix: str, stop: str, out: dict) -> None:
    seq = 0
    while not os.path.exists(stop):
        try:
            async with client(url, token, local) as c:
                while not os.path.exists(stop):
                    seq += 1
                    nonce = f"{prefix}{i:02d}-{seq:06d}"
                    try:
                        with anyio.fail_after(CALL_TIMEOUT):
                            text = text_of(await c.call_tool("rec__record", {"nonce": nonce}))
                    except Exception as e:  # noqa: BLE001
                        out["calls"].append([i, nonce, "failed", leaves(e)])
                        continue
                    ok = text == f"ok:{nonce}"
                    out["calls"].append([i, nonce, "ok" if ok else "failed", "" if ok else f"text {text!r}"])
                    await anyio.sleep(PAUSE)  # not ordering: pacing
        except Exception as e:  # noqa: BLE001
            out["client_errors"].append([i, leaves(e)])
            await anyio.sleep(0.2)  # not ordering: backoff before a new client


async def mrtr(url: str, tokens: list[str], first: str, calls: int) -> dict:
    """One client per token, all open at once; their calls take turns (token 0's first call, token
    1's, ...), one at a time: over stdio an upstream's request carries no call id, so mcp-edge
    relays it only while its call is the upstream's only one in flight that may ask a client
    (docs/architecture.md), and concurrent asking calls on one box would be refused."""
    base = ipaddress.ip_address(first)
    out: dict[str, Any] = {"clients": []}
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for i, token in enumerate(tokens):
            me: dict[str, Any] = {"token": i, "results": [], "failures": [], "retries": 0}
            out["clients"].append(me)

            async def on_request(request: Any, me: dict[str, Any] = me) -> None:
                if b'"requestState"' in (request.content or b""):
                    me["retries"] += 1

            c = await stack.enter_async_context(client(url, token, str(base + i), {"request": [on_request]}))
            clients.append((me, c))
        for k in range(calls):
            for me, c in clients:
                nonce = f"mrtr-{me['token']}-{k}"
                try:
                    with anyio.fail_after(CALL_TIMEOUT):
                        text = text_of(await c.call_tool("rec__ask", {"nonce": nonce}))
                except Exception as e:  # noqa: BLE001
                    me["failures"].append([nonce, leaves(e)])
                    continue
                if not text.startswith(f"asked:{nonce}:Ada:four:"):
                    me["failures"].append([nonce, f"text {text!r}"])
                me["results"].append(text)
    return out


async def main_async(argv: list[str]) -> dict:
    mode = argv[0]
    if mode == "load":
        url, tokens, first, prefix, stop = argv[1], json.loads(argv[2]), argv[3], argv[4], argv[5]
        out: dict = {"calls": [], "client_errors": []}
        base = ipaddress.ip_address(first)
        async with anyio.create_task_group() as tg:
            for i, t in enumerate(tokens):
                tg.start_soon(load_one, i, url, t, str(base + i), prefix, stop, out)
        return out
    if mode == "mrtr":
        return await mrtr(argv[1], json.loads(argv[2]), argv[3], int(argv[4]))
    raise SystemExit(f"unknown mode {mode!r}")


def main() -> int:
    argv = sys.argv[1:]
    if not argv or (argv[0] == "load" and len(argv) != 7) or (argv[0] == "mrtr" and len(argv) != 6):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        out = anyio.run(main_async, argv[:-1])
    except BaseException as e:  # noqa: BLE001
        traceback.print_exception(e, file=sys.stderr)
        return 1
    with open(argv[-1], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
