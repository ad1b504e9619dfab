#!/usr/bin/env python3
"""The hot-path benchmark of issue 14 (run it through tests/bench/run.sh, which installs the peers,
builds the echo upstream and the gateway, then calls this). Python standard library only.

Targets, all in one run, alternating round by round (each round runs every measurement once, the order
rotated by one each round, so drift hits every target alike); figures are medians over the rounds:
  - mcp-edge (each --bin) x {legacy session, 2026-07-28 stateless} x {stdio echo (C), HTTP upstream
    (Python SDK mcp 1.30 FastMCP, stateless, JSON responses)}: one gateway process per target;
  - supergateway 4.0.0 (--stateful), npm mcp-proxy 6.7.19, PyPI mcp-proxy 0.12.0, each with the stdio
    echo behind it, in their default configuration (legacy sessions);
  - at one connection (wrk -t1 -c1): the HTTP upstream directly, and mcp-edge (legacy session) in front of
    it: p50 ratio mcp-edge / direct.
Per target: req/s, p50, p99 (wrk), proxy CPU per call (utime+stime of the proxy process itself from
/proc/PID/stat, children excluded, before/after each run / good answers), allocations per call for
mcp-edge (mcp_edge_heap_allocations_total from the admin listener's /metrics, delta / good answers, one
scrape's own allocations subtracted), RSS after the load (VmRSS after the last round). Every answer is
checked by tests/bench/call.lua; a target with any wrong answer or socket error is reported FAILED.
Heap per in-flight result byte: a fresh mcp-edge with the echo upstream, after warm-up: one tools/call
whose result is 4 MiB; (mcp_edge_heap_peak_bytes after - mcp_edge_heap_live_bytes before) / bytes of the
answer (the peak cannot be reset over HTTP, so each measurement starts a new gateway process).
"""
import argparse, http.client, json, os, platform, shutil, socket, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import bench_report  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
PEERS = os.path.join(HERE, ".peers")
LOOPBACK = os.path.join(ROOT, "tests", "interop", "force-loopback.mjs")
FIXTURE = os.path.join(ROOT, "tests", "interop", "fixture_http_server.py")
LEGACY_PV = "2025-11-25"
BIG = 4 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body, headers=None, method="POST", path="/mcp", timeout=30):
    """One HTTP request; returns (status, headers dict (lower-case), parsed JSON-RPC message or None, raw)."""
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(headers or {})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
        r = c.getresponse()
        raw = r.read()
        hd = {k.lower(): v for k, v in r.getheaders()}
    finally:
        c.close()
    msg = None
    text = raw.decode("utf-8", "replace")
    if hd.get("content-type", "").startswith("text/event-stream"):
        datas = [ln[5:].strip() for ln in text.splitlines() if ln.startswith("data:")]
        msg = json.loads(datas[-1]) if datas else None
    elif raw.strip():
        try:
            msg = json.loads(text)
        except ValueError:
            msg = None
    return r.status, hd, msg, raw


def get(port, path, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def proc_cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def metrics(port):
    _, text = get(port, "/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith("mcp_edge_heap_") or line.startswith("mcp_edge_process_"):
            name, _, val = line.rpartition(" ")
            out[name] = float(val)
    return out


class Proc:
    """A process we started, in its own process group (its children, e.g. the echo, die with it)."""

    def __init__(self, name, cmd, out_dir, env=None):
        self.name = name
        self.log = os.path.join(out_dir, f"{name}.log")
        with open(self.log, "wb") as log:
            self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                      env={**os.environ, **(env or {})}, start_new_session=True)
        self.pid = self.p.pid

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.pid, 15)
                self.p.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.pid, 9)
                except ProcessLookupError:
                    pass
                self.p.wait()

    def tail(self):
        try:
            with open(self.log, "rb") as f:
                return f.read()[-1500:].decode("utf-8", "replace")
        except OSError:
            return ""


def wait_until(what, proc, probe, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{what} exited (code {proc.p.returncode}):\n{proc.tail()}")
        try:
            if probe():
                return
        except (OSError, http.client.HTTPException, ValueError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready after {timeout}s:\n{proc.tail()}")


def legacy_session(port):
    """initialize + notifications/initialized; returns (session id or "", negotiated version)."""
    st, hd, msg, raw = post(port, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY_PV, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    if st != 200 or not msg or "result" not in msg:
        raise RuntimeError(f"initialize answered {st}: {raw[:300]!r}")
    sid = hd.get("mcp-session-id", "")
    pv = msg["result"].get("protocolVersion", LEGACY_PV)
    h = {"MCP-Protocol-Version": pv}
    if sid:
        h["Mcp-Session-Id"] = sid
    st, _, _, raw = post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, h)
    if st not in (200, 202):
        raise RuntimeError(f"notifications/initialized answered {st}: {raw[:300]!r}")
    return sid, pv


def end_session(port, sid, pv):
    if sid:
        try:
            post(port, None, {"Mcp-Session-Id": sid, "MCP-Protocol-Version": pv}, method="DELETE", timeout=5)
        except (OSError, http.client.HTTPException):
            pass


class Target:
    """One thing wrk is pointed at: a proxy process (pid measured) at a port, with a tool name."""

    def __init__(self, name, kind, proc, port, tool, era, upstream, admin=None, binary=None):
        self.name, self.kind, self.proc, self.port, self.tool = name, kind, proc, port, tool
        self.era, self.upstream, self.admin, self.binary = era, upstream, admin, binary
        self.runs = []  # one dict per measured run
        self.rss_kib = None
        self.failed = None


def sandbox_keys(binary, echo, _cache={}):
    """Whether `binary` knows `paths_ro` (issue 23): then the sandboxed echo is granted its directory."""
    if binary not in _cache:
        import tempfile
        # In a directory of its own: a config's directory is never granted,
        # and /tmp itself may hold the build directory.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "probe.toml")
            with open(path, "w") as f:
                f.write(f'[[upstream]]\nname = "e"\ncommand = "{echo}"\npaths_ro = ["{os.path.dirname(echo)}"]\n')
            r = subprocess.run([binary, "check-config", path], capture_output=True)
        _cache[binary] = r.returncode == 0
    return _cache[binary]


def edge_config(port, admin, upstream, echo, echo_era, http_url, grant=False):
    cfg = f'[server]\nlisten = "127.0.0.1:{port}"\nadmin_listen = "127.0.0.1:{admin}"\n\n[[upstream]]\n'
    if upstream == "stdio":
        cfg += f'name = "echo"\ncommand = "{echo}"\nera = "{echo_era}"\n'
        if grant:  # the default sandbox does not reach the build directory
            cfg += f'paths_ro = ["{os.path.dirname(echo)}"]\n'
    else:
        cfg += f'name = "http"\nurl = "{http_url}"\n'
    return cfg


def start_edge(label, binary, upstream, era, a, out_dir, http_url, tag=""):
    port, admin = free_port(), free_port()
    path = os.path.join(out_dir, f"edge-{label}-{upstream}-{era}{tag}.toml")
    with open(path, "w") as f:
        f.write(edge_config(port, admin, upstream, a.echo, a.echo_era, http_url,
                            sandbox_keys(binary, a.echo)))
    proc = Proc(os.path.basename(path)[:-5], [binary, "serve", "--config", path], out_dir,
                {"MCP_EDGE_LOG": "warn"})

    def ready():
        st, body = get(admin, "/status")
        return st == 200 and all(u["state"] == "ready" for u in json.loads(body)["upstreams"])

    try:
        wait_until(f"mcp-edge {label}", proc, ready)
    except Exception:
        proc.stop()  # not yet in the caller's list of what to stop
        raise
    tool = "echo__echo" if upstream == "stdio" else "http__echo"
    return proc, port, admin, tool


def start_peer(name, a, out_dir):
    port = free_port()
    node_env = {"NODE_OPTIONS": f"--import {LOOPBACK}"}
    nm = os.path.join(PEERS, "npm", "node_modules")
    if name == "supergateway":
        cmd = [a.node, os.path.join(nm, "supergateway", "dist", "index.js"), "--stdio", a.echo,
               "--outputTransport", "streamableHttp", "--stateful", "--port", str(port)]
    elif name == "mcp-proxy-npm":
        cmd = [a.node, os.path.join(nm, "mcp-proxy", "dist", "bin", "mcp-proxy.mjs"), "--host", "127.0.0.1",
               "--port", str(port), "--server", "stream", "--", a.echo]
    else:
        cmd = [os.path.join(PEERS, "venv", "bin", "mcp-proxy"), "--host", "127.0.0.1", "--port", str(port),
               "--", a.echo]
        node_env = {}
    proc = Proc(name, cmd, out_dir, node_env)

    def ready():
        sid, pv = legacy_session(port)
        end_session(port, sid, pv)
        return True

    wait_until(name, proc, ready)
    return proc, port


def run_wrk(t, conns, a, rnd, out_dir, duration=None, max_requests=None):
    """One run of target t (rnd -1: the warm-up); returns the run's figures (dict). ID_BASE starts the
    ids of a run (rnd + 2: never 0, a JSON number has no leading zero)."""
    duration = a.duration if duration is None else duration
    max_requests = a.max_requests if max_requests is None else max_requests
    sid, pv = ("", LEGACY_PV)
    if t.era == "legacy" and t.kind != "direct":
        sid, pv = legacy_session(t.port)
    threads = max(1, min(a.threads, conns))
    out = os.path.join(out_dir, "wrk.json")
    env = {**os.environ, "TOOL": t.tool, "ERA": t.era, "SID": sid, "PV": pv, "ID_BASE": str(rnd + 2),
           "OUT": out, "MAX_PER_THREAD": str(-(-max_requests // threads) if max_requests else 0)}
    cmd = ["wrk", "-t", str(threads), "-c", str(conns), "-d", f"{max(1, round(duration))}s", "--timeout", "10s",
           "-s", os.path.join(HERE, "call.lua"), f"http://127.0.0.1:{t.port}/mcp"]
    scrape = 0
    if t.admin:
        m0 = metrics(t.admin)["mcp_edge_heap_allocations_total"]
        m1 = metrics(t.admin)["mcp_edge_heap_allocations_total"]
        scrape = m1 - m0  # what one /metrics scrape allocates
    cpu0 = proc_cpu_ticks(t.proc.pid)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    cpu1 = proc_cpu_ticks(t.proc.pid)
    allocs = None
    if t.admin:
        allocs = metrics(t.admin)["mcp_edge_heap_allocations_total"] - m1 - scrape
    # wrk stops with calls still in flight; end the session only once they have been answered (PyPI
    # mcp-proxy 0.12.0 exits when a session is deleted while its calls are in flight).
    time.sleep(0.5)
    end_session(t.port, sid, pv)
    if r.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"wrk failed ({r.returncode}): {r.stderr[-800:]}")
    with open(out) as f:
        w = json.load(f)
    os.unlink(out)
    good = w["good"]
    w.update({
        "round": rnd + 1, "connections": conns, "threads": threads,
        "rps": w["requests"] / (w["duration_us"] / 1e6),
        "cpu_us_per_call": (cpu1 - cpu0) * 1e6 / TICK / good if good else None,
        "cpu_ticks": cpu1 - cpu0,
        "allocs_per_call": allocs / good if (allocs is not None and good) else None,
        "errors": w["connect_errors"] + w["read_errors"] + w["write_errors"] + w["status_errors"] + w["timeouts"],
    })
    return w


def heap_per_byte(label, binary, era, a, out_dir):
    """Fresh gateway + echo; warm up with small calls, then one call whose result is 4 MiB."""
    proc, port, admin, _ = start_edge(label, binary, "stdio", era, a, out_dir, None, tag="-heap")
    try:
        sid, pv = legacy_session(port) if era == "legacy" else ("", "2026-07-28")

        def call(i, name, args):
            params = {"name": name, "arguments": args}
            h = {"MCP-Protocol-Version": pv}
            if era == "modern":
                params["_meta"] = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                   "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
                                   "io.modelcontextprotocol/clientCapabilities": {}}
                h.update({"Mcp-Method": "tools/call", "Mcp-Name": name})
            else:
                h["Mcp-Session-Id"] = sid
            st, _, msg, raw = post(port, {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}, h)
            if st != 200 or not msg or msg.get("id") != i or "result" not in msg:
                raise RuntimeError(f"{name} call answered {st}: {raw[:300]!r}")
            return msg["result"]["content"][0]["text"], len(raw)

        for i in range(1, 41):
            call(i, "echo__echo", {"text": f"w{i}"})
            call(1000 + i, "echo__big", {"bytes": 1024})
        time.sleep(0.3)
        before = metrics(admin)
        text, nbytes = call(5000, "echo__big", {"bytes": BIG})
        after = metrics(admin)
        time.sleep(0.3)
        settled = metrics(admin)
        ok = text == "x" * BIG
        live0 = before["mcp_edge_heap_live_bytes"]
        peak0, peak1 = before["mcp_edge_heap_peak_bytes"], after["mcp_edge_heap_peak_bytes"]
        return {"binary": label, "era": era, "result_text_bytes": BIG, "answer_bytes": nbytes,
                "live_before": live0, "peak_before": peak0, "peak_after": peak1,
                "live_after": settled["mcp_edge_heap_live_bytes"], "correct": ok,
                "measurable": peak1 > peak0,
                "bytes_per_result_byte": (peak1 - live0) / nbytes if peak1 > peak0 else None}
    finally:
        proc.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", action="append", required=True, help="LABEL=PATH of an mcp-edge binary")
    ap.add_argument("--echo", required=True, help="the compiled tests/bench/echo.c")
    ap.add_argument("--node", default="node")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=2, help="seconds of unmeasured load per target first")
    ap.add_argument("--echo-era", default="legacy", choices=["legacy", "modern", "auto"])
    ap.add_argument("--peers", default="supergateway,mcp-proxy-npm,mcp-proxy-pypi")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--command", default="tests/bench/run.sh", help="the command line, for the docs")
    a = ap.parse_args()
    a.max_requests = 0
    if a.quick:
        a.duration, a.rounds, a.max_requests, a.warmup = min(a.duration, 3), 1, 300, 1
    bins = []
    for b in a.bin:
        label, _, path = b.partition("=")
        if not path or not os.access(path, os.X_OK):
            sys.exit(f"--bin {b}: want LABEL=PATH of an executable")
        bins.append((label, os.path.abspath(path)))
    out_dir = os.path.join(HERE, "out")
    os.makedirs(out_dir, exist_ok=True)
    procs, t0 = [], time.time()
    try:
        results = measure(a, bins, out_dir, procs)
    finally:
        for p in procs:
            p.stop()
    results["elapsed_s"] = time.time() - t0
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    report = bench_report.render(results)
    print(report)
    if a.write_docs and not a.quick and results["failed"]:
        print("docs/benchmarks.md left as it was: a run with failed targets is not recorded")
    elif a.write_docs and not a.quick:
        bench_report.write_docs(os.path.join(ROOT, "docs", "benchmarks.md"), report)
        print("wrote docs/benchmarks.md, section \"Hot path (issue 14)\"")
    if results["failed"]:
        sys.exit("bench: FAILED targets: " + ", ".join(results["failed"]))


def measure(a, bins, out_dir, procs):
    say = lambda m: print(f"[bench {time.time() - T0:6.1f}s] {m}", flush=True)  # noqa: E731
    fixture_port = free_port()
    fixture = Proc("http-upstream", [os.path.join(PEERS, "venv", "bin", "python"), FIXTURE, str(fixture_port),
                                     "--json-response", "--stateless"], out_dir)
    procs.append(fixture)
    direct = Target("HTTP upstream, direct", "direct", fixture, fixture_port, "echo", "legacy", "http")
    probe = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    wait_until("HTTP upstream", fixture,
               lambda: post(fixture_port, probe, {"MCP-Protocol-Version": LEGACY_PV})[0] == 200)
    http_url = f"http://127.0.0.1:{fixture_port}/mcp"
    say(f"HTTP upstream (fixture_http_server.py, mcp 1.30, stateless JSON) on {http_url}")
    load, ones = [], [direct]
    for label, binary in bins:
        name = "mcp-edge" if len(bins) == 1 else f"mcp-edge [{label}]"
        for upstream in ("stdio", "http"):
            for era in ("legacy", "modern"):
                proc, port, admin, tool = start_edge(label, binary, upstream, era, a, out_dir, http_url)
                procs.append(proc)
                t = Target(f"{name} {'legacy session' if era == 'legacy' else '2026-07-28 stateless'}",
                           "edge", proc, port, tool, era, upstream, admin, label)
                load.append(t)
                if upstream == "http" and era == "legacy":
                    ones.append(t)
        say(f"mcp-edge [{label}] {binary}: 4 gateways ready")
    for peer in [p for p in a.peers.split(",") if p]:
        proc, port = start_peer(peer, a, out_dir)
        procs.append(proc)
        load.append(Target(bench_report.PEER_NAMES[peer], "peer", proc, port, "echo", "legacy", "stdio"))
        say(f"{peer} ready on {port}")
    plan = [(t, a.connections) for t in load] + [(t, 1) for t in ones]
    results = {"load": {}, "one": {}, "heap": [], "failed": []}
    for t, conns in plan:
        if t.failed or not a.warmup:
            continue
        try:
            w = run_wrk(t, conns, a, -1, out_dir, duration=a.warmup, max_requests=100 if a.quick else 0)
            if w["bad"] or w["errors"] or not w["good"]:
                t.failed = f"warm-up: {w['bad']} wrong answers, {w['errors']} socket errors; first: {w['first_bad']}"
        except (RuntimeError, OSError, http.client.HTTPException, ValueError) as e:
            t.failed = "warm-up: " + str(e)[:500]
        say(f"warm-up {t.name} | {t.upstream} c{conns}: " + (f"FAILED: {t.failed}" if t.failed else "ok"))
    for rnd in range(a.rounds):
        k = rnd % len(plan)
        for t, conns in plan[k:] + plan[:k]:
            key = f"{t.name} | {t.upstream}"
            if t.failed:
                continue
            try:
                w = run_wrk(t, conns, a, rnd, out_dir)
            except (RuntimeError, OSError, http.client.HTTPException, ValueError) as e:
                t.failed = str(e)[:500]
                say(f"{key} c{conns}: FAILED: {t.failed}")
                continue
            if w["bad"] or w["errors"] or not w["good"]:
                t.failed = f"{w['bad']} wrong answers, {w['errors']} socket errors; first: {w['first_bad']}"
            (results["one"] if conns == 1 else results["load"]).setdefault(key, []).append(w)
            say(f"round {rnd + 1}/{a.rounds} {key} c{conns}: {w['good']} good, {w['bad']} bad, "
                f"{w['rps']:.0f} req/s, p50 {w['p50_us'] / 1000:.2f} ms, "
                f"cpu {w['cpu_us_per_call'] or 0:.0f} us/call" + (f" FAILED: {t.failed}" if t.failed else ""))
    everyone = load + [t for t in ones if t not in load]
    for t in everyone:
        if t.proc.alive():
            t.rss_kib = rss_kib(t.proc.pid)
    for label, binary in bins:
        for era in ("legacy", "modern"):
            try:
                h = heap_per_byte(label, binary, era, a, out_dir)
            except (RuntimeError, OSError, http.client.HTTPException, ValueError) as e:
                h = {"binary": label, "era": era, "error": str(e)[:500]}
            results["heap"].append(h)
            say(f"heap per result byte [{label}] {era}: {h}")
    results["targets"] = [{"name": t.name, "kind": t.kind, "upstream": t.upstream, "era": t.era,
                           "binary": t.binary, "rss_kib": t.rss_kib, "failed": t.failed,
                           "key": f"{t.name} | {t.upstream}"} for t in everyone]
    results["failed"] = sorted({f"{t.name} ({t.upstream})" for t in everyone if t.failed}
                               | {f"heap [{h['binary']}] {h['era']}" for h in results["heap"]
                                  if h.get("error") or not h.get("correct")})
    results["params"] = {"quick": a.quick, "duration_s": a.duration, "rounds": a.rounds,
                         "connections": a.connections, "threads": a.threads, "echo_era": a.echo_era,
                         "warmup_s": a.warmup,
                         "max_requests": a.max_requests, "command": a.command,
                         "bins": [{"label": lb, "path": p, "bytes": os.path.getsize(p)} for lb, p in bins]}
    results["machine"] = machine(a)
    return results


def machine(a):
    def cmd(*c):
        try:
            return subprocess.run(c, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) // 1024
    return {"nproc": os.cpu_count(), "cpu": model, "mem_mib": mem, "arch": platform.machine(),
            "kernel": platform.release(), "rustc": cmd("rustc", "--version"),
            "commit": cmd("git", "-C", ROOT, "describe", "--always", "--dirty"),
            "wrk": cmd("wrk", "-v"), "node": cmd(a.node, "--version"),
            "python": cmd(os.path.join(PEERS, "venv", "bin", "python"), "--version"),
            "loadavg": open("/proc/loadavg").read().split()[:3]}


T0 = time.time()
if __name__ == "__main__":
    if not shutil.which("wrk"):
        sys.exit("bench: wrk not found (Debian: apt-get install wrk; tests/bench/run.sh installs it)")
    main()
