#!/usr/bin/env python3
"""What the stdio sandbox costs at spawn (issue 23 part 2): a gateway with N
C echo upstreams (tests/bench/echo.c) is started R times with sandbox = "off"
and R times with sandbox = "strict", alternating; each start is timed from
the exec of mcp-edge to /readyz (every upstream's first attempt settled),
and /status must then show every upstream ready. Prints the medians and the
difference per child. Python standard library only.

  spawn.py --bin PATH --echo PATH [--children 8] [--rounds 7]

A binary without the sandbox keys (before issue 23) is measured with
"off" only (the keys are left out) and says so.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=2) as r:
            return r.status, r.read()
    except OSError:
        return 0, b""


def config(port, admin, echo, n, mode):
    cfg = '[server]\nlisten = "127.0.0.1:%d"\nadmin_listen = "127.0.0.1:%d"\n' % (port, admin)
    for i in range(n):
        cfg += '\n[[upstream]]\nname = "e%d"\ncommand = "%s"\nera = "legacy"\n' % (i, echo)
        if mode == "strict":
            cfg += 'sandbox = "strict"\npaths_ro = ["%s"]\n' % os.path.dirname(echo)
        elif mode == "off":
            cfg += 'sandbox = "off"\n'
    return cfg


def supports_sandbox(binary, echo, tmp):
    path = os.path.join(tmp, "probe.toml")
    with open(path, "w") as f:
        f.write(config(1, 2, echo, 1, "strict"))
    r = subprocess.run([binary, "check-config", path], capture_output=True)
    return r.returncode == 0


def one_start(binary, echo, n, mode, tmp):
    port, admin = free_port(), free_port()
    path = os.path.join(tmp, "config-%s.toml" % mode)
    with open(path, "w") as f:
        f.write(config(port, admin, echo, n, mode))
    t0 = time.monotonic()
    p = subprocess.Popen([binary, "serve", "--config", path],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while get(admin, "/readyz")[0] != 200:
            if p.poll() is not None or time.monotonic() - t0 > 30:
                raise SystemExit("mcp-edge (%s) did not get ready" % mode)
            time.sleep(0.002)
        elapsed = time.monotonic() - t0
        status = json.loads(get(admin, "/status")[1])
        states = [u["state"] for u in status["upstreams"]]
        if states != ["ready"] * n:
            raise SystemExit("mcp-edge (%s): upstreams %s" % (mode, states))
        return elapsed
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--echo", required=True)
    ap.add_argument("--children", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if not supports_sandbox(a.bin, a.echo, tmp):
            modes = ["none"]
            print("spawn: %s has no sandbox keys; measuring it unsandboxed only" % a.bin)
        else:
            modes = ["off", "strict"]
        times = {m: [] for m in modes}
        one_start(a.bin, a.echo, a.children, modes[0], tmp)  # warm the page cache
        for _ in range(a.rounds):
            for m in modes:
                times[m].append(one_start(a.bin, a.echo, a.children, m, tmp))
    med = {m: statistics.median(t) * 1000 for m, t in times.items()}
    for m in modes:
        print("spawn: sandbox = %-6s %d children, start to ready: median %.1f ms (min %.1f, max %.1f; %d starts)"
              % (m, a.children, med[m], min(times[m]) * 1000, max(times[m]) * 1000, a.rounds))
    if "strict" in med:
        per_child = (med["strict"] - med["off"]) / a.children
        print("spawn: sandbox cost per child: %+.2f ms (strict - off, medians, / %d children)"
              % (per_child, a.children))


if __name__ == "__main__":
    sys.exit(main())
