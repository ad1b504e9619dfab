"""Checks docs/fleet/k8s.yaml without a cluster (tests/fleet/fleet.sh): it parses as YAML (PyYAML,
which Debian's python3 has as python3-yaml; without it the check says so and passes), its
StatefulSet gives the pods a termination grace above drain_grace + the shutdown grace, its probes
are kubelet httpGet probes of /readyz and /healthz on the container's MCP port, and the config its
init container renders for pod edge-0 passes `mcp-edge check-config` (the token file and state
directory pointed at temporary ones). Then that config is served (on loopback ports) and asked
what kubelet and a client would ask: the probes' paths with kubelet's Host (the pod's address)
answer 200, a client's request with the Service's name as Host is served, /readyz answers 503 as
soon as the box gets SIGTERM, and the box exits within the termination grace; once more with the
commented PROXY-protocol lines turned on (kubelet's address is not a trusted proxy: its probes
need no PROXY header).

usage: python3 k8s_check.py MCP_EDGE_BIN
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SHUTDOWN_GRACE = 10
KUBELET = {"Host": "10.42.0.15:8737", "User-Agent": "kube-probe/1.31", "Accept": "*/*", "Connection": "close"}
PROBLEMS: list[str] = []


def problem(msg: str) -> None:
    PROBLEMS.append(msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int | None, str]:
    """One request to 127.0.0.1:port with exactly these headers (Host included): status, body."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        text = r.read().decode(errors="replace")
        c.close()
        return r.status, text
    except OSError:
        return None, ""


def tools_list(port: int, token: str, host: str) -> tuple[int | None, str]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "k8s-check", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}}
    h = {"Host": host, "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list", "Authorization": f"Bearer {token}",
         "Connection": "close"}
    return get(port, "POST", "/mcp", h, json.dumps(body).encode())


def probes(pod: dict) -> None:
    c = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        p = c.get(probe) or {}
        g = p.get("httpGet")
        if not g or "exec" in p:
            problem(f"{probe} is not an httpGet probe: {p!r}")
            continue
        if g.get("path") != path:
            problem(f"{probe} GETs {g.get('path')!r}, expected {path}")
        port = ports.get(g.get("port"), g.get("port"))
        if port != 8737:
            problem(f"{probe} port {g.get('port')!r} is not the MCP port 8737")
        if g.get("scheme", "HTTP") != "HTTP":
            problem(f"{probe} scheme {g.get('scheme')!r}: the MCP port speaks plain HTTP here")


def serve(bin_: str, rendered: str, d: Path, token: str, grace: float, term: float, label: str) -> str:
    """Serves `rendered` on loopback ports and asks it what kubelet and a client would. Returns a
    line of figures."""
    port, admin = free_port(), free_port()
    for want in ('listen = "0.0.0.0:8737"', 'admin_listen = "127.0.0.1:9090"'):
        if rendered.count(want) != 1:
            problem(f"{label}: {want!r} not once in the rendered config: cannot serve it on loopback ports")
            return f"{label}: not served"
    text = (rendered.replace('listen = "0.0.0.0:8737"', f'listen = "127.0.0.1:{port}"')
            .replace('admin_listen = "127.0.0.1:9090"', f'admin_listen = "127.0.0.1:{admin}"'))
    cfg = d / f"config-{label}.toml"
    cfg.write_text(text)
    log = open(d / f"serve-{label}.log", "wb")
    p = subprocess.Popen([bin_, "serve", "--config", str(cfg)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        t = time.monotonic()
        ready = None
        while time.monotonic() - t < 20 and p.poll() is None:
            if get(port, "GET", "/readyz", KUBELET)[0] == 200:
                ready = time.monotonic() - t
                break
            time.sleep(0.1)  # not ordering: poll interval
        if ready is None:
            problem(f"{label}: kubelet's GET /readyz (Host {KUBELET['Host']}) never answered 200: "
                    f"{get(port, 'GET', '/readyz', KUBELET)}\n{(d / f'serve-{label}.log').read_text()[-1500:]}")
            return f"{label}: not ready"
        health = get(port, "GET", "/healthz", KUBELET)
        if health[0] != 200:
            problem(f"{label}: kubelet's GET /healthz: {health}")
        served = tools_list(port, token, "edge.mcp.svc.cluster.local:8737")
        if served[0] != 200 or '"tools"' not in served[1]:
            problem(f"{label}: tools/list with Host edge.mcp.svc.cluster.local: {served[0]} {served[1][:300]!r}")
        p.send_signal(signal.SIGTERM)
        t = time.monotonic()
        not_ready = None
        while time.monotonic() - t < 2 and p.poll() is None:
            if get(port, "GET", "/readyz", KUBELET)[0] == 503:
                not_ready = time.monotonic() - t
                break
            time.sleep(0.02)  # not ordering: poll interval
        if not_ready is None:
            problem(f"{label}: kubelet's GET /readyz did not answer 503 within 2 s of SIGTERM")
        try:
            p.wait(term)
        except subprocess.TimeoutExpired:
            problem(f"{label}: still running {term:g} s (terminationGracePeriodSeconds) after SIGTERM")
        exited = time.monotonic() - t
        if p.returncode not in (0, None):
            problem(f"{label}: exited with {p.returncode}")
        fmt = lambda x: "-" if x is None else f"{x:.1f}s"  # noqa: E731
        return (f"{label}: kubelet's /readyz 200 at {fmt(ready)}, /healthz {health[0]}, tools/list via Host edge.mcp.svc… "
                f"{served[0]}; after SIGTERM /readyz 503 at {fmt(not_ready)}, exited at {exited:.1f}s (drain_grace {grace:g}s)")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()


def main() -> int:
    try:
        import yaml
    except ImportError:
        print("k8s: docs/fleet/k8s.yaml not checked: this python3 has no PyYAML (Debian: python3-yaml)")
        return 0
    docs = [d for d in yaml.safe_load_all((ROOT / "docs" / "fleet" / "k8s.yaml").read_text()) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    ss = next(d for d in docs if d["kind"] == "StatefulSet")
    pod = ss["spec"]["template"]["spec"]
    text = cm["data"]["config.toml.in"]
    grace = float(re.search(r'drain_grace = "(\d+)s"', text).group(1))
    term = pod["terminationGracePeriodSeconds"]
    if term <= grace + SHUTDOWN_GRACE:
        problem(f"terminationGracePeriodSeconds {term} <= drain_grace + {SHUTDOWN_GRACE}")
    probes(pod)
    lines = []
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        tok = subprocess.run([sys.argv[1], "token", "new", "agents"], capture_output=True, text=True, check=True)
        token_text = next(l for l in tok.stdout.splitlines() if l and not l.startswith("#") and " " not in l)
        token = d / "agents"
        token.write_text(token_text + "\n")
        token.chmod(0o600)
        state = d / "state"
        state.mkdir()
        rendered = (
            text.replace("@POD_NAME@", "edge-0")
            .replace("/etc/mcp-edge-tokens/agents", str(token))
            .replace("/var/lib/mcp-edge", str(state))
        )
        cfg = d / "config.toml"
        cfg.write_text(rendered)
        r = subprocess.run([sys.argv[1], "check-config", str(cfg)], capture_output=True, text=True)
        if r.returncode != 0:
            problem(f"check-config of the rendered config: {r.stdout[-800:]}{r.stderr[-800:]}")
        else:
            lines.append(serve(sys.argv[1], rendered, d, token_text, grace, term, "as shipped"))
            proxied = rendered.replace("# proxy_protocol = true", "proxy_protocol = true").replace("# trusted_proxies =", "trusted_proxies =")
            if not (re.search(r"^proxy_protocol = true", proxied, re.M) and re.search(r"^trusted_proxies = ", proxied, re.M)):
                problem("the commented proxy_protocol / trusted_proxies lines were not found")
            else:
                lines.append(serve(sys.argv[1], proxied, d, token_text, grace, term, "with proxy_protocol"))
    for p in PROBLEMS:
        print(f"k8s: FAIL: {p}")
    if not PROBLEMS:
        print(f"k8s: docs/fleet/k8s.yaml parses ({', '.join(f'{k} {n}' for k, n in sorted(kinds))}); "
              f"pod edge-0's config passes check-config; termination grace {term} s; httpGet probes /readyz, /healthz on the MCP port")
        for line in lines:
            print(f"k8s: {line}")
    return 1 if PROBLEMS else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
