#!/usr/bin/env python3
"""Footprint of a running mcp-edge: idle RSS, RSS and live heap with 1,000
legacy sessions, and idle wake-ups per second with four upstreams (one
built-in, three stdio fake upstreams; the children's own wake-ups are not
counted). Standard library only.

Usage: tests/bench/footprint.py BINARY [--runner "qemu-aarch64 -L ..."] [--idle-seconds 60]

Wake-ups are the number of times any thread of the process was scheduled
(/proc/PID/task/*/schedstat, field 3; voluntary + involuntary context
switches from /proc/PID/task/*/status when schedstat is missing), over the
idle window. Under qemu-user the process is qemu itself: its RSS includes the
emulator, and the live heap (the gateway's counting allocator, /status) is
the figure that carries over to real hardware.
"""
import argparse, atexit, json, os, shlex, shutil, socket, subprocess, sys, tempfile, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("binary")
ap.add_argument("--runner", default="")
ap.add_argument("--idle-seconds", type=float, default=60.0)
ap.add_argument("--sessions", type=int, default=1000)
a = ap.parse_args()

here = os.path.dirname(os.path.abspath(__file__))
fake = os.path.join(here, "..", "fake", "fake_upstream.py")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


port, admin = free_port(), free_port()
cfg = f'''[server]
listen = "127.0.0.1:{port}"
metrics_listen = "127.0.0.1:{admin}"
session_capacity = {max(1024, a.sessions)}
[[upstream]]
name = "edge"
transport = "builtin"
'''
for n in ("one", "two", "three"):
    cfg += f'''[[upstream]]
name = "{n}"
command = "{sys.executable}"
args = ["{fake}", "--era", "legacy", "--name", "{n}"]
era = "legacy"
paths_ro = {json.dumps(sorted({fake, sys.prefix, sys.base_prefix}))}
'''
d = tempfile.mkdtemp()
atexit.register(shutil.rmtree, d, True)
path = os.path.join(d, "footprint.toml")
open(path, "w").write(cfg)
cmd = shlex.split(a.runner) + [a.binary, "serve", "--config", path]
proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, env={**os.environ, "MCP_EDGE_LOG": "warn"})


def get(p):
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}{p}", timeout=10) as r:
        return r.read().decode()


deadline = time.time() + 120
while True:
    try:
        if get("/readyz").startswith("ready"):
            break
    except Exception:
        pass
    if time.time() > deadline or proc.poll() is not None:
        sys.exit("mcp-edge did not become ready")
    time.sleep(0.2)
status = json.loads(get("/status"))
assert all(u["state"] == "ready" for u in status["upstreams"]), status


def rss_kib():
    for line in open(f"/proc/{proc.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


def wakeups():
    total = 0
    for t in os.listdir(f"/proc/{proc.pid}/task"):
        try:
            total += int(open(f"/proc/{proc.pid}/task/{t}/schedstat").read().split()[2])
        except (FileNotFoundError, IndexError):
            for line in open(f"/proc/{proc.pid}/task/{t}/status"):
                if "ctxt_switches" in line:
                    total += int(line.split()[1])
    return total


time.sleep(3)
idle_rss = rss_kib()
w0, t0 = wakeups(), time.time()
time.sleep(a.idle_seconds)
w1, t1 = wakeups(), time.time()
rate = (w1 - w0) / (t1 - t0)
threads = len(os.listdir(f"/proc/{proc.pid}/task"))
idle_heap = json.loads(get("/status"))["heap"]["live_bytes"]

body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fp", "version": "1"}}}).encode()
for i in range(a.sessions):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200 and r.headers.get("mcp-session-id")
        r.read()
time.sleep(1)
st = json.loads(get("/status"))
busy_rss = rss_kib()
busy_heap = st["heap"]["live_bytes"]
assert st["sessions"]["active"] == a.sessions, st["sessions"]
proc.terminate()
proc.wait(timeout=30)

arch = subprocess.run(["file", "-b", a.binary], capture_output=True, text=True).stdout.split(",")[1].strip() if os.path.exists("/usr/bin/file") else "?"
print(f"binary: {a.binary} ({arch}){' under ' + a.runner.split()[0] if a.runner else ''}")
print(f"threads: {threads}")
print(f"idle RSS: {idle_rss / 1024:.1f} MiB; live heap {idle_heap / 1024:.0f} KiB")
print(f"idle wake-ups: {rate:.2f}/s over {t1 - t0:.0f} s (4 upstreams: 1 built-in, 3 stdio)")
print(f"{a.sessions} legacy sessions: RSS {busy_rss / 1024:.1f} MiB; live heap {busy_heap / 1024:.0f} KiB "
      f"(+{(busy_heap - idle_heap) / a.sessions:.0f} B per session)")
