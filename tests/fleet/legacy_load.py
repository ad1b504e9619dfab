"""The legacy load of the rolling restart (tests/fleet/fleet.sh, check b): N legacy sessions of the
Python SDK 1.30 client (`streamablehttp_client` + `ClientSession`), each from its own loopback
address, call rec__record with unique nonces until STOP_FILE exists. A call answered 404 (the SDK
says "Session terminated", code 32600) ends that session: the client initializes a new one and
goes on. Anything else is a failure (recorded; the session is replaced).

usage: .venv1/bin/python legacy_load.py URL TOKENS_JSON N FIRST_ADDR PREFIX STOP_FILE OUT_JSON
  TOKENS_JSON  JSON list of client tokens, used in turn by the sessions
  FIRST_ADDR   e.g. 127.0.0.30: session i connects from FIRST_ADDR + i
Each session lists the tools first (the SDK's call_tool would otherwise list them itself after the
call, to validate output schemas, and report a 404 on that listing as the call's).
Writes OUT_JSON: {"calls": [[session, nonce, "ok"|"404"|"failed", detail]...], "inits": n,
                  "init_failures": [...], "sessions": [[session, sid]...], "errors": [...],
                  "list_404": n (sessions answered 404 on their first tools/list)}
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import time
import traceback

import anyio

from mcp.shared.exceptions import McpError

from fleetlib import Answered404, call_text, is_404, legacy_session

CALL_TIMEOUT = 20.0
PAUSE = 0.03


def leaves(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(leaves(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"


async def one_session(i: int, url: str, token: str, local: str, prefix: str, stop: str, out: dict) -> None:
    seq = 0
    while not os.path.exists(stop):
        out["inits"] += 1
        state = {"sid": None, "nonce": None}
        try:
            async with legacy_session(url, token, local, init_timeout=CALL_TIMEOUT) as (s, sid):
                state["sid"] = sid
                out["sessions"].append([i, sid])
                # tools/list first, as clients do: the SDK's call_tool lists the tools itself when
                # it has not (to validate output schemas), and a 404 on that second request would
                # be reported as the call's, though the call itself was answered.
                try:
                    with anyio.fail_after(CALL_TIMEOUT):
                        await s.list_tools()
                except McpError as e:
                    if not is_404(e):
                        raise
                    out["list_404"] += 1
                    continue
                while not os.path.exists(stop):
                    seq += 1
                    nonce = f"{prefix}{i:02d}-{seq:06d}"
                    state["nonce"] = nonce
                    try:
                        with anyio.fail_after(CALL_TIMEOUT):
                            text = await call_text(s, "rec__record", {"nonce": nonce})
                    except Answered404:
                        out["calls"].append([i, nonce, "404", sid])
                        state["nonce"] = None
                        break  # initialize again
                    state["nonce"] = None
                    if text != f"ok:{nonce}":
                        out["calls"].append([i, nonce, "failed", f"{sid}: unexpected text {text!r}"])
                        break
                    out["calls"].append([i, nonce, "ok", sid])
                    await anyio.sleep(PAUSE)  # not ordering: pacing
        except BaseException as e:  # noqa: BLE001 - every way a session can break is a finding
            if isinstance(e, anyio.get_cancelled_exc_class()):
                raise
            if state["nonce"] is not None:
                out["calls"].append([i, state["nonce"], "failed", f"{state['sid']}: {leaves(e)}"])
            elif state["sid"] is None:
                out["init_failures"].append([i, time.time(), leaves(e)])
                await anyio.sleep(0.2)  # not ordering: backoff before initializing again
            else:
                out["errors"].append([i, state["sid"], leaves(e)])


async def main_async(url: str, tokens: list[str], n: int, first: str, prefix: str, stop: str) -> dict:
    out: dict = {"calls": [], "inits": 0, "init_failures": [], "sessions": [], "errors": [], "list_404": 0}
    base = ipaddress.ip_address(first)
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one_session, i, url, tokens[i % len(tokens)], str(base + i), prefix, stop, out)
    return out


def main() -> int:
    if len(sys.argv) != 8:
        print(__doc__, file=sys.stderr)
        return 2
    url, tokens, n, first, prefix, stop, dest = sys.argv[1:]
    try:
        out = anyio.run(main_async, url, json.loads(tokens), int(n), first, prefix, stop)
    except BaseException as e:  # noqa: BLE001
        traceback.print_exception(e, file=sys.stderr)
        return 1
    with open(dest, "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
