"""Several boxes (issue 26): three mcp-edge processes behind Debian's HAProxy (docs/fleet/haproxy.cfg,
PROXY protocol v2) and behind Debian's nginx (docs/fleet/nginx.conf, X-Forwarded-For), driven by
real MCP clients. Run by tests/fleet/fleet.sh with tests/interop/.venv1's Python.

usage: fleet.py --bin MCP_EDGE --out DIR

Checks (each prints its figures; any failed expectation makes the exit code 1):
  a  HAProxy + PROXY v2: its health checks reach /readyz on each box's listen port with a PROXY v2
     header (check-send-proxy; none refused by a box); legacy sessions of the Python SDK 1.30 and
     the TypeScript SDK land on the box their id names (its audit: session legacy:<box>.<8 hex>,
     peer = the client's own 127.0.0.X); max_connections_per_peer applies to the client's address
     behind HAProxy
  d  MRTR with affinity: a modern Python SDK 2.3 caller's rounds (requestState) against a legacy
     upstream that asks mid-call all complete through HAProxy (balance hdr(Authorization)); a
     round, a session id and a task id sent straight to another box get the JSON-RPC error whose
     data is {"reason": "other_instance", "instance": <issuer>, "here": <that box>}
  b  rolling restart under load: 20 legacy sessions (SDK 1.30) and modern callers (SDK 2.3) call
     rec__record with unique nonces while each box in turn gets SIGTERM (/readyz 503 at once on
     the admin and the listen port; HAProxy takes it out by its data-port check, L7STS 503, while it
     still serves), exits by itself, starts again and is UP in HAProxy; no modern call fails,
     legacy calls succeed or are answered 404
     (then the client initializes again), every nonce answered ok is in the upstream log once,
     every nonce answered 404 never
  c  nginx + X-Forwarded-For: the same legacy routing, the audit's peer from X-Forwarded-For
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from fleetlib import call_text, jsonrpc_of, legacy_session, legacy_sse_session, modern_body, modern_headers, text_of

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
INTEROP = ROOT / "tests" / "interop"
VENV1 = INTEROP / ".venv1"
VENV2 = INTEROP / ".venv2"
BOXES = ("e1", "e2", "e3")
DRAIN_GRACE = 3.0
EXIT_LIMIT = DRAIN_GRACE + 12.0  # drain_grace + in-flight calls + shutdown grace, with room
N_TOKENS = 8
PROBE_FROM = 7  # 127.0.0.7: the test's own GETs of a box's listen port (no box trusts it: plain HTTP)

T0 = time.monotonic()
FIGURES: list[tuple[str, str, str]] = []
PROBLEMS: list[str] = []


def say(msg: str) -> None:
    print(f"[fleet {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def figure(check: str, what: str, value: Any) -> None:
    FIGURES.append((check, what, str(value)))
    say(f"{check}: {what}: {value}")


def expect(ok: bool, msg: str) -> bool:
    if not ok:
        PROBLEMS.append(msg)
        say(f"FAIL: {msg}")
    return ok


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def addr(n: int) -> str:
    """A loopback source address other than 127.0.0.1."""
    return str(ipaddress.ip_address("127.0.0.0") + n)


# ---------------------------------------------------------------------------------------- processes


class Procs:
    """Every process this run starts, each in its own process group (listed in OUT/pgids for
    fleet.sh's trap), stopped at the end."""

    def __init__(self, out: Path):
        self.out = out
        self.live: list[subprocess.Popen] = []

    def start(self, argv: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen:
        f = open(log, "ab")
        f.write(f"\n==== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
        f.flush()
        p = subprocess.Popen(
            argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, **(env or {})}, cwd=cwd,
        )
        f.close()
        with open(self.out / "pgids", "a") as g:
            g.write(f"{p.pid}\n")
        self.live.append(p)
        return p

    def stop_all(self) -> None:
        for p in self.live:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 8
        for p in self.live:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


def tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(lines[-n:])


# ---------------------------------------------------------------------------------------- boxes


def python_grants() -> list[str]:
    """What the upstream's Python needs beyond the sandbox's defaults: the venv, and the
    interpreter it was made from when that is not under /usr (pyenv)."""
    py = VENV1 / "bin" / "python"
    out = subprocess.run([str(py), "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True, check=True)
    grants = [str(VENV1)]
    for p in {out.stdout.strip(), str(Path(os.path.realpath(py)).parent.parent)}:
        if p and not p.startswith("/usr") and p != "/":
            grants.append(p)
    return sorted(set(grants))


class Box:
    def __init__(self, fleet: "Fleet", name: str):
        self.fleet = fleet
        self.name = name
        self.port = free_port()
        self.admin = free_port()
        self.dir = fleet.dir / name
        self.dir.mkdir(parents=True)
        (self.dir / "state").mkdir()
        self.config = self.dir / "config.toml"
        self.log = self.dir / "mcp-edge.log"
        self.audit = self.dir / "audit.jsonl"
        self.proc: subprocess.Popen | None = None
        self.config.write_text(self.config_text())

    def config_text(self, drain_grace: float = DRAIN_GRACE) -> str:
        f = self.fleet
        proxy = "proxy_protocol = true\n" if f.proxy_protocol else ""
        clients = "".join(
            f'\n[[client]]\nname = "c{i}"\ntoken_file = "{p}"\n' for i, p in enumerate(f.token_files)
        )
        ro = json.dumps(python_grants() + [str(HERE / "record_server.py")])
        return f'''[server]
listen = "127.0.0.1:{self.port}"
admin_listen = "127.0.0.1:{self.admin}"
instance_id = "{self.name}"
{proxy}trusted_proxies = ["127.0.0.1/32"]
drain_grace = "{drain_grace:g}s"
max_connections_per_peer = {f.per_peer}
state_directory = "{self.dir / 'state'}"
admin_socket = "off"
{clients}
[audit]
path = "{self.audit}"

[[upstream]]
name = "rec"
transport = "stdio"
command = "{VENV1 / 'bin' / 'python'}"
args = ["{HERE / 'record_server.py'}"]
env = {{ FLEET_BOX = "{self.name}", FLEET_LOG = "{f.shared_log}" }}
era = "legacy"
paths_rw = ["{f.shared_log.parent}"]
paths_ro = {ro}
'''

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.proc = self.fleet.procs.start([self.fleet.bin, "serve", "--config", str(self.config)], self.log)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def admin_get(self, path: str) -> httpx.Response | None:
        try:
            async with httpx.AsyncClient(timeout=2) as c:
                return await c.get(f"http://127.0.0.1:{self.admin}{path}")
        except httpx.HTTPError:
            return None

    async def readyz(self) -> int | None:
        r = await self.admin_get("/readyz")
        return r.status_code if r is not None else None

    async def data_get(self, path: str) -> httpx.Response | None:
        """GET on the listen port, as a balancer or kubelet that is not a trusted proxy would."""
        try:
            async with httpx.AsyncClient(timeout=2, transport=httpx.AsyncHTTPTransport(local_address=addr(PROBE_FROM))) as c:
                return await c.get(f"http://127.0.0.1:{self.port}{path}")
        except httpx.HTTPError:
            return None

    async def data_readyz(self) -> int | None:
        r = await self.data_get("/readyz")
        return r.status_code if r is not None else None

    async def wait_ready(self, timeout: float = 30) -> bool:
        """/readyz 200 and the upstream connected."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            if await self.readyz() == 200:
                r = await self.admin_get("/status")
                if r is not None and r.status_code == 200:
                    ups = r.json().get("upstreams", [])
                    if ups and all(u.get("state") == "ready" for u in ups):
                        return True
            await asyncio.sleep(0.1)  # not ordering: poll interval
        return False

    async def upstream_in_flight(self) -> int:
        r = await self.admin_get("/status")
        if r is None or r.status_code != 200:
            return -1
        return sum(u.get("in_flight", 0) for u in r.json().get("upstreams", []))

    async def metric(self, name: str, labels: str = "") -> float:
        r = await self.admin_get("/metrics")
        if r is None:
            return float("nan")
        total = 0.0
        for line in r.text.splitlines():
            if line.startswith(name) and (not labels or labels in line):
                head, _, value = line.rpartition(" ")
                if head == name or head.startswith(name + "{"):
                    total += float(value)
        return total

    def audit_lines(self) -> list[dict[str, Any]]:
        try:
            text = self.audit.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]


class Fleet:
    """Three boxes with one config shape: behind HAProxy (`proxy_protocol`) or nginx (XFF)."""

    def __init__(self, kind: str, out: Path, bin_: str, procs: Procs, token_files: list[Path], shared_log: Path):
        self.kind = kind
        self.dir = out / f"boxes-{kind}"
        self.dir.mkdir(parents=True)
        self.bin = bin_
        self.procs = procs
        self.token_files = token_files
        self.shared_log = shared_log
        self.proxy_protocol = kind == "haproxy"
        # Behind HAProxy each connection carries its client's address, so a per-peer limit means
        # something (check a); behind nginx every connection is nginx's: max_connections.
        self.per_peer = 4 if kind == "haproxy" else 256
        self.boxes = {n: Box(self, n) for n in BOXES}

    async def start(self) -> None:
        for b in self.boxes.values():
            b.start()
        for b in self.boxes.values():
            for _ in range(3):
                if await b.wait_ready():
                    break
                if b.alive() or "Address already in use" not in tail(b.log, 3):
                    raise RuntimeError(f"box {b.name} did not become ready:\n{tail(b.log)}")
                # Another process took a port between free_port() and the bind: new ports.
                b.port, b.admin = free_port(), free_port()
                b.config.write_text(b.config_text())
                b.start()
            else:
                raise RuntimeError(f"box {b.name} did not become ready:\n{tail(b.log)}")
        say(f"{self.kind} fleet: " + ", ".join(f"{b.name} on :{b.port} (admin :{b.admin})" for b in self.boxes.values()))

    async def stop(self) -> None:
        for b in self.boxes.values():
            if b.alive():
                b.proc.send_signal(signal.SIGTERM)
        for b in self.boxes.values():
            deadline = time.monotonic() + EXIT_LIMIT
            while b.alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)  # not ordering: poll interval


# ---------------------------------------------------------------------------------------- balancers


class HAProxy:
    def __init__(self, out: Path, procs: Procs, fleet: Fleet):
        self.dir = out / "haproxy"
        self.dir.mkdir()
        self.port = free_port()
        self.sock = self.dir / "admin.sock"
        self.cfg = self.dir / "haproxy.cfg"
        self.log = self.dir / "haproxy.log"
        self.procs = procs
        text = (ROOT / "docs" / "fleet" / "haproxy.cfg").read_text()
        subs = [("bind :8080", f"bind 127.0.0.1:{self.port}"), ("/run/haproxy/admin.sock", str(self.sock))]
        for i, b in enumerate(fleet.boxes.values()):
            # Only the address: the server line's options (send-proxy-v2 check check-send-proxy)
            # are the file's.
            subs.append((f"    server {b.name} 10.0.0.1{i + 1}:8737 ", f"    server {b.name} 127.0.0.1:{b.port} "))
        for old, new in subs:
            if text.count(old) != 1:
                raise RuntimeError(f"docs/fleet/haproxy.cfg: expected {old!r} once, found it {text.count(old)} times")
            text = text.replace(old, new)
        left = [l for l in text.splitlines() if not l.lstrip().startswith("#") and re.search(r"10\.0\.0\.|:9090|\bport \d", l)]
        if left:
            raise RuntimeError(f"docs/fleet/haproxy.cfg: addresses or check ports the test does not replace: {left}")
        self.cfg.write_text(text)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        check = subprocess.run(["haproxy", "-c", "-f", str(self.cfg)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy -c: {check.stdout}{check.stderr}")
        self.proc = self.procs.start(["haproxy", "-db", "-f", str(self.cfg)], self.log)
        if not await self.wait_state({n: "UP" for n in BOXES}, 20):
            raise RuntimeError(f"HAProxy does not see every box UP: {self.states()}\n{tail(self.log)}")

    def command(self, cmd: str) -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(3)
            s.connect(str(self.sock))
            s.sendall(cmd.encode() + b"\n")
            chunks = []
            while True:
                c = s.recv(65536)
                if not c:
                    break
                chunks.append(c)
        return b"".join(chunks).decode()

    def rows(self) -> dict[str, dict[str, str]]:
        """Each server's row in `show stat` (status: UP, DOWN, MAINT, "UP 1/2", ...; check_status:
        L7OK, L7STS, L4CON, ...; check_code: the HTTP status of the last check)."""
        try:
            text = self.command("show stat")
        except OSError:
            return {}
        lines = text.splitlines()
        if not lines or not lines[0].startswith("# "):
            return {}
        head = lines[0][2:].split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(head, line.split(",")))
            if row.get("pxname") == "edge" and row.get("svname") in BOXES:
                out[row["svname"]] = row
        return out

    def states(self) -> dict[str, str]:
        return {k: row.get("status", "") for k, row in self.rows().items()}

    def servers_state(self) -> dict[str, dict[str, str]]:
        """Each server's row in `show servers state edge` (srv_port, srv_check_port: 0 when the
        check goes to the server's own port, srv_check_addr, ...)."""
        lines = [l for l in self.command("show servers state edge").splitlines() if l.strip()]
        head = next((l[2:].split() for l in lines if l.startswith("# ")), [])
        rows = [dict(zip(head, l.split())) for l in lines if not l.startswith("#") and len(l.split()) == len(head)]
        return {r["srv_name"]: r for r in rows if r.get("srv_name") in BOXES}

    async def wait_state(self, want: dict[str, str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.states()
            if all(s.get(k) == v for k, v in want.items()):
                return True
            await asyncio.sleep(0.1)  # not ordering: poll interval
        return False


class Nginx:
    def __init__(self, out: Path, procs: Procs, fleet: Fleet):
        self.dir = out / "nginx"
        self.dir.mkdir()
        self.port = free_port()
        self.cfg = self.dir / "nginx.conf"
        self.log = self.dir / "nginx.log"
        self.procs = procs
        text = (ROOT / "docs" / "fleet" / "nginx.conf").read_text()
        subs = [("listen 8080;", f"listen 127.0.0.1:{self.port};"), ("/run/nginx.pid", str(self.dir / "nginx.pid")),
                ("/var/log/nginx/", f"{self.dir}/")]
        for i, b in enumerate(fleet.boxes.values()):
            subs.append((f"10.0.0.1{i + 1}:8737", f"127.0.0.1:{b.port}"))
        for old, new in subs:
            if old not in text:
                raise RuntimeError(f"docs/fleet/nginx.conf: {old!r} not found")
            text = text.replace(old, new)
        self.cfg.write_text(text)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def argv(self, *more: str) -> list[str]:
        return ["nginx", "-p", f"{self.dir}/", "-c", str(self.cfg), "-e", str(self.dir / "error.log"), *more]

    async def start(self) -> None:
        check = subprocess.run(self.argv("-t"), capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"nginx -t: {check.stdout}{check.stderr}")
        self.proc = self.procs.start(self.argv("-g", "daemon off;"), self.log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                await asyncio.sleep(0.1)  # not ordering: poll interval
        raise RuntimeError(f"nginx did not listen:\n{tail(self.log)}\n{tail(self.dir / 'error.log')}")


# ---------------------------------------------------------------------------------------- helpers


def shared_nonces(shared_log: Path) -> collections.Counter:
    """How often each nonce is in the upstream log, and (separately) on which box."""
    counts: collections.Counter = collections.Counter()
    try:
        for line in shared_log.read_text().splitlines():
            counts[line.split(" ", 1)[0]] += 1
    except FileNotFoundError:
        pass
    return counts


def shared_boxes(shared_log: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = collections.defaultdict(set)
    for line in shared_log.read_text().splitlines():
        nonce, _, box = line.partition(" ")
        out[nonce].add(box)
    return out


async def wait_audit(box: Box, pred, n: int, timeout: float = 5) -> list[dict[str, Any]]:
    """Audit lines of `box` matching `pred` once there are at least n (or whatever is there)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [l for l in box.audit_lines() if pred(l)]
        if len(lines) >= n or time.monotonic() > deadline:
            return lines
        await asyncio.sleep(0.1)  # not ordering: poll interval


async def verify_session(check: str, fleet: Fleet, sid: str, peer: str, nonces: list[str], client: str) -> str | None:
    """A session's calls are on the box its id names, audited there with the client's own
    address, and nowhere else. Returns the box."""
    box, _, rest = sid.partition(".")
    if not expect(box in fleet.boxes and re.fullmatch(r"[0-9a-f]{36}", rest) is not None,
                  f"{check}: {client}: session id {sid!r} is not <box>.<36 hex>"):
        return None
    tag = f"legacy:{box}.{rest[:8]}"
    own = await wait_audit(fleet.boxes[box], lambda l: l.get("session") == tag and l.get("name") == "rec__record", len(nonces))
    expect(len(own) == len(nonces), f"{check}: {client}: {len(own)} audit lines of {tag} on {box}, expected {len(nonces)}")
    peers = {l.get("peer") for l in own}
    expect(peers == {peer}, f"{check}: {client}: audit peer {peers} on {box}, expected {{{peer!r}}} (the client's own address)")
    for other in fleet.boxes.values():
        if other.name != box:
            stray = [l for l in other.audit_lines() if l.get("session") == tag]
            expect(not stray, f"{check}: {client}: {len(stray)} audit lines of {tag} on {other.name}")
    where = shared_boxes(fleet.shared_log)
    for n in nonces:
        expect(where.get(n) == {box}, f"{check}: {client}: nonce {n} reached the upstream of {sorted(where.get(n, []))}, expected {box}")
    return box


async def py_session(url: str, token: str, local: str, nonces: list[str], sse: bool = False) -> tuple[str, list[str]]:
    """A Python SDK 1.30 legacy session (streamable HTTP, or with `sse` the HTTP+SSE transport):
    tools/list, then rec__record per nonce."""
    session = legacy_sse_session(url.replace("/mcp", "/sse"), token, local) if sse else legacy_session(url, token, local)
    async with session as (s, sid):
        tools = [t.name for t in (await s.list_tools()).tools]
        for n in nonces:
            text = await call_text(s, "rec__record", {"nonce": n})
            if text != f"ok:{n}":
                raise RuntimeError(f"rec__record {n}: {text!r}")
        return sid, tools


def run_json(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}… exited {r.returncode}: {r.stderr[-3000:]}")
    return json.loads(r.stdout)


async def modern_post(url: str, local: str, token: str | None, body: dict[str, Any], name: str | None = None,
                      extra: dict[str, str] | None = None, timeout: float = 30) -> tuple[httpx.Response, dict[str, Any] | None]:
    headers = modern_headers(body["method"], name, token, extra)
    async with httpx.AsyncClient(timeout=timeout, transport=httpx.AsyncHTTPTransport(local_address=local)) as c:
        r = await c.post(url, json=body, headers=headers)
    return r, jsonrpc_of(r, body["id"])


# ---------------------------------------------------------------------------------------- check a


async def check_health(fleet: Fleet, ha: HAProxy) -> None:
    """HAProxy's health checks are GETs of /readyz on each box's listen port with a PROXY v2
    (LOCAL) header: every box UP by an L7OK 200 check, no box refused a connection of HAProxy's
    for its header; the same /readyz and /healthz answer 200 to a GET from an untrusted address
    (plain HTTP, as a kubelet sends)."""
    C = "a health"
    await asyncio.sleep(2.5)  # not ordering: a few more checks (inter 1s) before they are read
    rows = ha.rows()
    servers = ha.servers_state()
    seen = []
    for b in fleet.boxes.values():
        row = rows.get(b.name, {})
        last = f"{row.get('check_status')} {row.get('check_code')}"
        expect(row.get("status") == "UP" and last == "L7OK 200", f"{C}: HAProxy's check of {b.name}: {row.get('status')}, last {last!r}")
        s = servers.get(b.name, {})
        to = (s.get("srv_check_addr", "-") if s.get("srv_check_addr", "-") != "-" else "127.0.0.1") + ":" + \
            (s.get("srv_check_port", "?") if s.get("srv_check_port", "0") != "0" else s.get("srv_port", "?"))
        expect(to == f"127.0.0.1:{b.port}", f"{C}: HAProxy checks {b.name} at {to}, not its listen port {b.port}: {s}")
        refused = await b.metric("mcp_edge_refused_total", 'limit="proxy_header"')
        expect(refused == 0, f"{C}: {b.name} refused {refused:g} connection(s) from HAProxy for their PROXY header")
        direct = [await b.data_get(p) for p in ("/readyz", "/healthz")]
        codes = [r.status_code if r is not None else None for r in direct]
        expect(codes == [200, 200], f"{C}: {b.name}'s listen port, GET /readyz and /healthz from {addr(PROBE_FROM)}: {codes}")
        seen.append(f"{b.name} {row.get('status')} {last} at {'listen port' if to == f'127.0.0.1:{b.port}' else to} "
                    f"(chkfail {row.get('chkfail')}), proxy_header refused {refused:g}, direct {'/'.join(str(c) for c in codes)}")
    figure(C, "HAProxy's checks: GET /readyz on the listen port with check-send-proxy", "; ".join(seen))


async def check_a(fleet: Fleet, ha: HAProxy, tokens: list[str]) -> None:
    C = "a haproxy"
    await check_health(fleet, ha)
    placed: collections.Counter = collections.Counter()
    for i in range(6):
        local, nonces = addr(20 + i), [f"a-py{i}-{k}" for k in range(3)]
        try:
            sid, tools = await py_session(ha.url, tokens[i % len(tokens)], local, nonces)
        except Exception as e:  # noqa: BLE001
            expect(False, f"{C}: Python SDK session {i} from {local}: {e!r}")
            continue
        expect({"rec__record", "rec__where", "rec__slow", "rec__ask"} <= set(tools), f"{C}: tools/list: {tools}")
        box = await verify_session(C, fleet, sid, local, nonces, f"python session {i}")
        placed[f"py:{box}"] += 1
    for i in range(2):
        local, nonces = addr(26 + i), [f"a-ts{i}-{k}" for k in range(3)]
        try:
            out = await asyncio.to_thread(
                run_json, ["node", str(HERE / "ts_session.mjs"), ha.url, tokens[(6 + i) % len(tokens)], local, json.dumps(nonces)], 90
            )
        except Exception as e:  # noqa: BLE001
            expect(False, f"{C}: TypeScript SDK session {i} from {local}: {e}")
            continue
        expect(out.get("texts") == [f"ok:{n}" for n in nonces], f"{C}: TypeScript session {i}: {out}")
        expect("rec__record" in (out.get("tools") or []), f"{C}: TypeScript tools/list: {out.get('tools')}")
        box = await verify_session(C, fleet, out.get("sessionId") or "", local, nonces, f"typescript session {i} ({out.get('client')})")
        placed[f"ts:{box}"] += 1
    local, nonces = addr(28), [f"a-sse-{k}" for k in range(3)]
    try:
        sid, _ = await py_session(ha.url, tokens[0], local, nonces, sse=True)
        box = await verify_session(C, fleet, sid, local, nonces, "python HTTP+SSE session")
        placed[f"py-sse:{box}"] += 1
    except Exception as e:  # noqa: BLE001
        expect(False, f"{C}: Python SDK HTTP+SSE session from {local}: {e!r}")
    figure(C, "legacy sessions on the box their id names (SDK:box)", " ".join(f"{k}={v}" for k, v in sorted(placed.items())))
    figure(C, "audit peer", "each session's own 127.0.0.20-28 (HAProxy connects from 127.0.0.1)")
    await probe_routing(C, fleet, ha.url, tokens[0], addr(29))
    await check_per_peer(fleet, ha, tokens)


async def probe_routing(C: str, fleet: Fleet, url: str, token: str, local: str) -> None:
    """Routing by the id, not by the token's hash: a made-up session id of each box, as
    Mcp-Session-Id and as /messages?sessionId=, reaches that box (its own 404, "Session not
    found"), not the box the token hashes to (which would answer reason "other_instance")."""
    right = 0
    for b in fleet.boxes:
        sid = f"{b}.{'0' * 36}"
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "Authorization": f"Bearer {token}", "MCP-Protocol-Version": "2025-11-25"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        async with httpx.AsyncClient(timeout=10, transport=httpx.AsyncHTTPTransport(local_address=local)) as c:
            for how, r in (("Mcp-Session-Id", await c.post(url, json=body, headers=dict(h, **{"Mcp-Session-Id": sid}))),
                           ("sessionId", await c.post(url.replace("/mcp", "/messages"), params={"sessionId": sid}, json=body, headers=h))):
                err = (r.json() if r.headers.get("content-type", "").startswith("application/json") else {}).get("error") or {}
                ok = r.status_code == 404 and (err.get("data") or {}).get("reason") != "other_instance"
                right += ok
                expect(ok, f"{C}: {how} {b}.000… went to the wrong box: HTTP {r.status_code} {r.text[:300]!r}")
    figure(C, "made-up session ids answered by the box they name", f"{right} of {2 * len(fleet.boxes)} (Mcp-Session-Id and /messages?sessionId=)")


async def check_per_peer(fleet: Fleet, ha: HAProxy, tokens: list[str]) -> None:
    """max_connections_per_peer (4) applies to the client's address behind HAProxy: with e2 and
    e3 in maintenance, client 127.0.0.2 holds 4 busy connections on e1; its next one is refused
    (503) while client 127.0.0.3 is served, through the same HAProxy connection source."""
    C = "a per-peer"
    e1 = fleet.boxes["e1"]
    for n in ("e2", "e3"):
        ha.command(f"set server edge/{n} state maint")
    try:
        expect(await ha.wait_state({"e1": "UP", "e2": "MAINT", "e3": "MAINT"}, 5), f"{C}: maint not applied: {ha.states()}")
        before = await e1.metric("mcp_edge_refused_total", 'limit="peer_connections"')
        token = tokens[0]

        async def call(local: str, tool: str, args: dict[str, Any], rid: int):
            return await modern_post(ha.url, local, token, modern_body(rid, "tools/call", {"name": tool, "arguments": args}), tool)

        held = [asyncio.create_task(call(addr(2), "rec__slow", {"seconds": 4}, 100 + k)) for k in range(fleet.per_peer)]
        deadline = time.monotonic() + 5
        while await e1.upstream_in_flight() < fleet.per_peer and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # not ordering: poll interval
        expect(await e1.upstream_in_flight() >= fleet.per_peer, f"{C}: {fleet.per_peer} slow calls not in flight on e1")
        r, msg = await call(addr(2), "rec__where", {}, 200)
        expect(r.status_code == 503, f"{C}: 127.0.0.2's connection {fleet.per_peer + 1}: HTTP {r.status_code} {r.text[:200]!r}, expected 503")
        figure(C, f"127.0.0.2's connection {fleet.per_peer + 1} to e1", f"HTTP {r.status_code}, Retry-After {r.headers.get('retry-after')}, {r.text.strip()[:90]!r}")
        r3, msg3 = await call(addr(3), "rec__where", {}, 201)
        expect(r3.status_code == 200 and text_of(msg3) == "e1", f"{C}: 127.0.0.3 meanwhile: HTTP {r3.status_code} {r3.text[:200]!r}")
        figure(C, "127.0.0.3 meanwhile", f"HTTP {r3.status_code} {text_of(msg3)!r}")
        after = await e1.metric("mcp_edge_refused_total", 'limit="peer_connections"')
        expect(after > before, f"{C}: mcp_edge_refused_total{{limit=\"peer_connections\"}} on e1 {before} -> {after}")
        figure(C, 'e1 mcp_edge_refused_total{limit="peer_connections"}', f"{before:g} -> {after:g}")
        slow = await asyncio.gather(*held)
        texts = [text_of(m) for _, m in slow]
        expect(texts == ["slow:e1"] * fleet.per_peer, f"{C}: held calls: {[(r.status_code, t) for (r, _), t in zip(slow, texts)]}")
        served = await wait_audit(e1, lambda l: l.get("name") == "rec__where" and l.get("peer") == addr(3), 1)
        expect(len(served) == 1, f"{C}: e1's audit of 127.0.0.3's call: {served}")
        held_audit = await wait_audit(e1, lambda l: l.get("name") == "rec__slow", fleet.per_peer)
        expect({l.get("peer") for l in held_audit} == {addr(2)}, f"{C}: held calls' audit peers: {[l.get('peer') for l in held_audit]}")
    finally:
        for n in ("e2", "e3"):
            ha.command(f"set server edge/{n} state ready")
    expect(await ha.wait_state({n: "UP" for n in BOXES}, 10), f"{C}: boxes not UP again: {ha.states()}")


# ---------------------------------------------------------------------------------------- check d


async def check_d(fleet: Fleet, ha: HAProxy, tokens: list[str]) -> None:
    C = "d mrtr"
    calls = 5
    out = await mrtr_run(fleet, ha, tokens, calls)
    rounds = 0
    by_box = []
    for c in out["clients"]:
        expect(not c["failures"], f"{C}: token {c['token']}: failures {c['failures']}")
        expect(len(c["results"]) == calls, f"{C}: token {c['token']}: {len(c['results'])} results of {calls}")
        expect(c["retries"] == 2 * calls, f"{C}: token {c['token']}: {c['retries']} requestState retries, expected {2 * calls}")
        boxes = {t.rsplit(":", 1)[-1] for t in c["results"]}
        expect(len(boxes) <= 1, f"{C}: token {c['token']}: calls ran on {boxes}")
        rounds += c["retries"]
        by_box.append(f"c{c['token']}->{','.join(sorted(boxes))}")
    figure(C, "modern SDK 2.3 calls with 2 rounds each, through HAProxy", f"{sum(len(c['results']) for c in out['clients'])} calls ok, {rounds} rounds, 0 refused ({' '.join(by_box)})")
    await check_wrong_box(fleet, tokens[0])


async def mrtr_run(fleet: Fleet, ha: HAProxy, tokens: list[str], calls: int) -> dict[str, Any]:
    dest = fleet.dir / "mrtr.json"
    await asyncio.to_thread(
        run_json_file, [str(VENV2 / "bin" / "python"), str(HERE / "modern_caller.py"), "mrtr", ha.url,
                        json.dumps(tokens[:4]), addr(40), str(calls), str(dest)], 120,
    )
    return json.loads(dest.read_text())


def run_json_file(argv: list[str], timeout: float) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}… exited {r.returncode}: {r.stderr[-3000:]}")


def other_instance(msg: dict[str, Any] | None, issued: str, here: str) -> bool:
    data = ((msg or {}).get("error") or {}).get("data") or {}
    return data == {"reason": "other_instance", "instance": issued, "here": here}


async def check_wrong_box(fleet: Fleet, token: str) -> None:
    """Straight to another box (from 127.0.0.5, which no box trusts: plain HTTP, no PROXY)."""
    C = "d wrong box"
    a, b = fleet.boxes["e1"], fleet.boxes["e2"]
    local = addr(5)
    caps = {"elicitation": {}, "sampling": {}}
    ask = {"name": "rec__ask", "arguments": {"nonce": "d-direct"}}
    r, m = await modern_post(a.url, local, token, modern_body(1, "tools/call", ask, caps), "rec__ask")
    res = (m or {}).get("result") or {}
    state = res.get("requestState", "")
    reqs = res.get("inputRequests") or {}
    if not expect(res.get("resultType") == "input_required" and state.startswith("mcp-edge/1.e1.") and len(reqs) == 1,
                  f"{C}: first round on e1: HTTP {r.status_code} {r.text[:300]!r}"):
        return
    key = next(iter(reqs))
    retry = dict(ask, inputResponses={key: {"action": "accept", "content": {"name": "Ada"}}}, requestState=state)
    r, m = await modern_post(b.url, local, token, modern_body(2, "tools/call", retry, caps), "rec__ask")
    expect(other_instance(m, "e1", "e2"), f"{C}: e1's requestState at e2: HTTP {r.status_code} {r.text[:400]!r}")
    err = (m or {}).get("error") or {}
    figure(C, "MRTR retry with e1's requestState sent to e2", f"HTTP {r.status_code}, code {err.get('code')}, data {json.dumps(err.get('data'))}")
    # The same retry at its own box goes on (the sampling round), then completes.
    r, m = await modern_post(a.url, local, token, modern_body(3, "tools/call", retry, caps), "rec__ask")
    res = (m or {}).get("result") or {}
    if expect(res.get("resultType") == "input_required", f"{C}: the retry at e1: {r.text[:300]!r}"):
        key2 = next(iter(res.get("inputRequests") or {"?": 0}))
        sampled = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "four"}}
        last = dict(ask, inputResponses={key2: sampled}, requestState=res.get("requestState"))
        r, m = await modern_post(a.url, local, token, modern_body(4, "tools/call", last, caps), "rec__ask")
        expect(text_of(m) == "asked:d-direct:Ada:four:e1", f"{C}: the last round at e1: {r.text[:300]!r}")
    # A legacy session of e1 at e2: 404 naming both boxes.
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fleet", "version": "1"}}}
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=10, transport=httpx.AsyncHTTPTransport(local_address=local)) as c:
        r = await c.post(a.url, json=init, headers=h)
        sid = r.headers.get("mcp-session-id", "")
        hs = dict(h, **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
        await c.post(a.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=hs)
        r = await c.post(b.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=hs)
        m = jsonrpc_of(r, 2)
        expect(sid.startswith("e1.") and r.status_code == 404 and other_instance(m, "e1", "e2"),
               f"{C}: e1's session {sid[:11]}… at e2: HTTP {r.status_code} {r.text[:400]!r}")
        figure(C, "e1's Mcp-Session-Id sent to e2", f"HTTP {r.status_code}, data {json.dumps(((m or {}).get('error') or {}).get('data'))}")
        await c.delete(a.url, headers=hs)
    # A task id of e1 at e2.
    tasks_caps = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    task = "task-e1." + "0" * 36
    r, m = await modern_post(b.url, local, token, modern_body(5, "tasks/get", {"taskId": task}, tasks_caps), task)
    expect(other_instance(m, "e1", "e2"), f"{C}: e1's task id at e2: HTTP {r.status_code} {r.text[:400]!r}")
    figure(C, "tasks/get of task-e1.… at e2", f"HTTP {r.status_code}, code {((m or {}).get('error') or {}).get('code')}, reason {(((m or {}).get('error') or {}).get('data') or {}).get('reason')}")


# ---------------------------------------------------------------------------------------- check b


DRAINS: list[str] = []  # each drained restart's data-port /readyz and HAProxy DOWN, for the figures


async def restart(C: str, ha: HAProxy, box: Box, note: str = "") -> str:
    """SIGTERM, /readyz 503 at once (on the admin and on the listen port), HAProxy takes the box
    out by its data-port check (its 503) while it still serves, it exits by itself (code 0), starts again with
    its config, ready, and UP in HAProxy."""
    t = time.monotonic()
    box.proc.send_signal(signal.SIGTERM)
    not_ready = data_not_ready = None
    # Behaviour, not speed: 503 seen on both ports while the box still serves (before it exits).
    while time.monotonic() - t < EXIT_LIMIT and box.alive() and (not_ready is None or data_not_ready is None):
        admin, data = await asyncio.gather(box.readyz(), box.data_readyz())
        now = time.monotonic() - t
        if not_ready is None and admin == 503:
            not_ready = now
        if data_not_ready is None and data == 503:
            data_not_ready = now
        await asyncio.sleep(0.02)  # not ordering: poll interval
    if not note:
        expect(not_ready is not None, f"{C}: {box.name}'s /readyz did not answer 503 before it exited")
        expect(data_not_ready is not None, f"{C}: {box.name}'s /readyz on its listen port did not answer 503 before it exited")
    # Until it exited and HAProxy has it DOWN (after the exit, for a box that closed its listener
    # at once: drain_grace 0).
    down = exited = None
    why = ""
    while time.monotonic() - t < EXIT_LIMIT and (exited is None or down is None):
        now = time.monotonic() - t
        if exited is None and not box.alive():
            exited = now
        if down is None:
            row = ha.rows().get(box.name, {})
            if row.get("status", "").startswith("DOWN"):
                down = now
                why = f"{row.get('check_status')} {row.get('check_code')}"
        await asyncio.sleep(0.05)  # not ordering: poll interval
    if not note:
        # Taken out by its check's 503 (so while it still served), not by a refused connection.
        expect(down is not None and why == "L7STS 503",
               f"{C}: HAProxy did not take {box.name} out by its check of /readyz on the listen port "
               f"while it served: DOWN at {down}, last check {why!r}")
    if exited is None:
        exited = time.monotonic() - t
    if not expect(not box.alive(), f"{C}: {box.name} still running {EXIT_LIMIT:g} s after SIGTERM:\n{tail(box.log)}"):
        box.proc.kill()
        box.proc.wait()
    code = box.proc.returncode
    expect(code == 0, f"{C}: {box.name} exited with {code}:\n{tail(box.log)}")
    box.start()
    expect(await box.wait_ready(30), f"{C}: {box.name} not ready after restart:\n{tail(box.log)}")
    expect(await ha.wait_state({box.name: "UP"}, 15), f"{C}: HAProxy does not see {box.name} UP again: {ha.states()}")
    back = time.monotonic() - t
    fmt = lambda x: "-" if x is None else f"{x:.1f}s"  # noqa: E731
    line = (f"{box.name}{' (' + note + ')' if note else ''}: /readyz 503 at {fmt(not_ready)} (admin), {fmt(data_not_ready)} (listen), "
            f"DOWN in HAProxy at {fmt(down)} ({why or '-'}), exited at {exited:.1f}s (code {code}), UP again at {back:.1f}s")
    if not note:
        DRAINS.append(f"{box.name} {fmt(data_not_ready)}/{fmt(down)} {why}")
    say(f"{C}: {line}")
    return line


def haproxy_post_stats(lines: list[str]) -> tuple[int, int, collections.Counter]:
    """From HAProxy's httplog lines: POSTs retried, those redispatched (+), 404s by box."""
    retried = redispatched = 0
    answered_404: collections.Counter = collections.Counter()
    for line in lines:
        m = re.search(r" edge/(e\d) \S+ (\d{3}) .* (\d+)/(\d+)/(\d+)/(\d+)/(\+?)(\d+) \d+/\d+ \"POST ", line)
        if not m:
            continue
        if int(m.group(8)) > 0:
            retried += 1
            redispatched += m.group(7) == "+"
        if m.group(2) == "404":
            answered_404[m.group(1)] += 1
    return retried, redispatched, answered_404


async def check_b(fleet: Fleet, ha: HAProxy, tokens: list[str], out: Path) -> None:
    C = "b rolling"
    d = fleet.dir / "rolling"
    d.mkdir()
    stop = d / "stop"
    legacy_out, modern_out = d / "legacy.json", d / "modern.json"
    log_start = len(ha.log.read_text(errors="replace").splitlines())
    # Which box each token's modern calls go to (balance hdr(Authorization)): the modern callers
    # take one token per box where the tokens allow, so every restart meets one.
    home: dict[int, str] = {}
    for i, t in enumerate(tokens):
        _, m = await modern_post(ha.url, addr(9), t, modern_body(900 + i, "tools/call", {"name": "rec__where", "arguments": {}}), "rec__where")
        home[i] = text_of(m) or "?"
    chosen = [next(i for i in home if home[i] == b) for b in BOXES if b in home.values()]
    chosen += [i for i in home if i not in chosen][: 3 - len(chosen)]
    modern_tokens = [tokens[i] for i in chosen]
    figure(C, "modern callers' boxes (by their token's hash)", " ".join(f"c{i}->{home[i]}" for i in chosen))
    harsh = next((b for b in BOXES if b in {home[i] for i in chosen}), "e1")
    legacy = subprocess.Popen(
        [str(VENV1 / "bin" / "python"), str(HERE / "legacy_load.py"), ha.url, json.dumps(tokens), "20", addr(100),
         "rL", str(stop), str(legacy_out)],
        stdout=open(d / "legacy.log", "wb"), stderr=subprocess.STDOUT, cwd=HERE, start_new_session=True,
    )
    modern = subprocess.Popen(
        [str(VENV2 / "bin" / "python"), str(HERE / "modern_caller.py"), "load", ha.url, json.dumps(modern_tokens), addr(140),
         "rM", str(stop), str(modern_out)],
        stdout=open(d / "modern.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    for p in (legacy, modern):
        with open(out / "pgids", "a") as g:
            g.write(f"{p.pid}\n")
        fleet.procs.live.append(p)
    restarts = []
    try:
        # Until every legacy session and modern client has had calls answered, then 2 s more.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen = {k.split("-")[0] for k in shared_nonces(fleet.shared_log) if k.startswith(("rL", "rM"))}
            if len(seen) >= 20 + 3:
                break
            await asyncio.sleep(0.2)  # not ordering: poll interval
        expect(len(seen) >= 23, f"{C}: only {len(seen)} of 23 callers had calls answered before the restarts")
        await asyncio.sleep(2)  # not ordering: calls flow on every box before the first SIGTERM
        for box in fleet.boxes.values():
            restarts.append(await restart(C, ha, box))
            await asyncio.sleep(1.5)  # not ordering: traffic back on the restarted box before the next
        # Once more without a drain, on a box with a modern caller: started with drain_grace 0, it
        # closes its listener at SIGTERM while HAProxy still sends it work (it has not seen
        # /readyz fail yet): what it is sent then is refused (connection refused, or 503 on a kept
        # connection) and HAProxy's retry-on sends it to another box; its legacy sessions get 404.
        box = fleet.boxes[harsh]
        box.config.write_text(box.config_text(drain_grace=0))
        restarts.append(await restart(C, ha, box))
        await asyncio.sleep(1.5)  # not ordering: traffic back on the restarted box before the next
        box.config.write_text(box.config_text())
        before = len(ha.log.read_text(errors="replace").splitlines())
        restarts.append(await restart(C, ha, box, "drain_grace 0"))
        during = ha.log.read_text(errors="replace").splitlines()[before:]
        retried, redispatched, _ = haproxy_post_stats(during)
        figure(C, f"POSTs HAProxy retried (redispatched) while {harsh} left without a drain", f"{retried} ({redispatched})")
        await asyncio.sleep(2)  # not ordering: calls after the last restart, then stop
    finally:
        stop.write_text("stop")
        for p, name in ((legacy, "legacy"), (modern, "modern")):
            try:
                await asyncio.to_thread(p.wait, 60)
            except subprocess.TimeoutExpired:
                p.kill()
                expect(False, f"{C}: the {name} load did not stop:\n{tail(d / (name + '.log'))}")
    expect(legacy.returncode == 0 and legacy_out.exists(), f"{C}: legacy load exited {legacy.returncode}:\n{tail(d / 'legacy.log')}")
    expect(modern.returncode == 0 and modern_out.exists(), f"{C}: modern load exited {modern.returncode}:\n{tail(d / 'modern.log')}")
    if not (legacy_out.exists() and modern_out.exists()):
        return
    L = json.loads(legacy_out.read_text())
    M = json.loads(modern_out.read_text())
    log = shared_nonces(fleet.shared_log)
    kinds = {"legacy": [(c[1], c[2], c[3]) for c in L["calls"]], "modern": [(c[1], c[2], c[3]) for c in M["calls"]]}
    for kind, calls in kinds.items():
        n = collections.Counter(o for _, o, _ in calls)
        figure(C, f"{kind} calls ok / 404 / failed", f"{n['ok']} / {n['404']} / {n['failed']}")
        failed = [(nonce, detail, log.get(nonce, 0)) for nonce, o, detail in calls if o == "failed"]
        expect(not failed, f"{C}: {len(failed)} {kind} call(s) failed (nonce, why, times in the upstream log): {failed[:5]}")
        expect(n["ok"] > 0, f"{C}: no {kind} call succeeded")
        if kind == "modern":
            expect(n["404"] == 0, f"{C}: modern calls answered 404")
        twice = [nonce for nonce, o, _ in calls if o == "ok" and log.get(nonce, 0) != 1]
        expect(not twice, f"{C}: {kind} nonces answered ok but not in the upstream log exactly once: {[(x, log.get(x, 0)) for x in twice[:5]]}")
        sent = [nonce for nonce, o, _ in calls if o == "404" and log.get(nonce, 0) != 0]
        expect(not sent, f"{C}: {kind} nonces answered 404 yet in the upstream log: {sent[:5]}")
    dup = [k for k, v in log.items() if v > 1]
    expect(not dup, f"{C}: nonces in the upstream log more than once: {dup[:5]}")
    known = {c[0] for calls in kinds.values() for c in calls}
    stray = [k for k in log if k.startswith(("rL", "rM")) and k not in known]
    expect(not stray, f"{C}: nonces in the upstream log that no client recorded: {stray[:5]}")
    reinit = L["inits"] - 20
    figure(C, "legacy re-initializations (after a 404)", f"{reinit} ({L['list_404']} of them after a 404 on the first tools/list)")
    expect(reinit > 0, f"{C}: no legacy session was told to re-initialize: the restarts did not reach a session")
    expect(not L["init_failures"], f"{C}: legacy initializations failed: {L['init_failures'][:5]}")
    expect(not L["errors"], f"{C}: legacy sessions broke between calls: {L['errors'][:5]}")
    expect(not M["client_errors"], f"{C}: modern clients broke: {M['client_errors'][:5]}")
    for k, line in enumerate(restarts, 1):
        figure(C, f"restart {k}", line)
    figure(C, f"listen port /readyz 503 / HAProxy DOWN (its check) after SIGTERM, drain_grace {DRAIN_GRACE:g}s", ", ".join(DRAINS))
    retried, redispatched, answered_404 = haproxy_post_stats(ha.log.read_text(errors="replace").splitlines()[log_start:])
    figure(C, "POSTs answered 404 during the restarts, by box (HAProxy's log)", " ".join(f"{k}={v}" for k, v in sorted(answered_404.items())) or "none")
    figure(C, "POSTs HAProxy retried (redispatched) during the restarts", f"{retried} ({redispatched})")


# ---------------------------------------------------------------------------------------- check c


async def check_c(fleet: Fleet, ng: Nginx, tokens: list[str]) -> None:
    C = "c nginx"
    placed: collections.Counter = collections.Counter()
    for i in range(6):
        local, nonces = addr(60 + i), [f"c-py{i}-{k}" for k in range(3)]
        try:
            sid, _ = await py_session(ng.url, tokens[i % len(tokens)], local, nonces)
        except Exception as e:  # noqa: BLE001
            expect(False, f"{C}: Python SDK session {i} from {local}: {e!r}")
            continue
        box = await verify_session(C, fleet, sid, local, nonces, f"python session {i}")
        placed[box] += 1
    figure(C, "legacy sessions on the box their id names", " ".join(f"{k}={v}" for k, v in sorted(placed.items())))
    await probe_routing(C, fleet, ng.url, tokens[0], addr(69))
    # A client's own X-Forwarded-For is kept in front of what nginx adds; the box takes the last.
    local = addr(70)
    r, m = await modern_post(ng.url, local, tokens[0], modern_body(7, "tools/call", {"name": "rec__where", "arguments": {}}), "rec__where",
                             {"X-Forwarded-For": "203.0.113.9"})
    box = text_of(m)
    expect(r.status_code == 200 and box in fleet.boxes, f"{C}: modern call with a forged X-Forwarded-For: HTTP {r.status_code} {r.text[:200]!r}")
    if box in fleet.boxes:
        lines = await wait_audit(fleet.boxes[box], lambda l: l.get("name") == "rec__where", 1)
        peers = [l.get("peer") for l in lines]
        expect(peers == [local], f"{C}: audit peer of a call that forged X-Forwarded-For: {peers}, expected [{local!r}]")
        figure(C, "audit peer with the client's forged 'X-Forwarded-For: 203.0.113.9'", peers)
    figure(C, "audit peer", "each session's own 127.0.0.60-65, from nginx's X-Forwarded-For")


# ---------------------------------------------------------------------------------------- main


def make_tokens(bin_: str, out: Path) -> tuple[list[str], list[Path]]:
    d = out / "tokens"
    d.mkdir()
    tokens, files = [], []
    for i in range(N_TOKENS):
        r = subprocess.run([bin_, "token", "new", f"c{i}"], capture_output=True, text=True, check=True)
        tok = next(l for l in r.stdout.splitlines() if l and not l.startswith("#") and " " not in l)
        p = d / f"c{i}"
        p.write_text(tok + "\n")
        p.chmod(0o600)
        tokens.append(tok)
        files.append(p)
    return tokens, files


async def haproxy_phase(out: Path, bin_: str, procs: Procs, tokens: list[str], files: list[Path], shared_log: Path) -> None:
    fleet = Fleet("haproxy", out, bin_, procs, files, shared_log)
    ha = None
    n0 = len(PROBLEMS)
    try:
        await fleet.start()
        ha = HAProxy(out, procs, fleet)
        await ha.start()
        say(f"HAProxy on :{ha.port}, every box UP")
        for name, check in (("a", check_a), ("d", check_d), ("b", check_b)):
            say(f"check {name}")
            try:
                await (check(fleet, ha, tokens, out) if name == "b" else check(fleet, ha, tokens))
            except Exception as e:  # noqa: BLE001
                expect(False, f"check {name}: {type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001
        expect(False, f"HAProxy fleet: {type(e).__name__}: {e}")
    await fleet.stop()
    if len(PROBLEMS) > n0:
        for b in fleet.boxes.values():
            print(f"---- tail of {b.log}\n{tail(b.log)}")
        if ha is not None:
            print(f"---- tail of {ha.log}\n{tail(ha.log)}")


async def nginx_phase(out: Path, bin_: str, procs: Procs, tokens: list[str], files: list[Path], shared_log: Path) -> None:
    fleet = Fleet("nginx", out, bin_, procs, files, shared_log)
    ng = None
    n0 = len(PROBLEMS)
    try:
        await fleet.start()
        ng = Nginx(out, procs, fleet)
        await ng.start()
        say(f"nginx on :{ng.port}")
        say("check c")
        await check_c(fleet, ng, tokens)
    except Exception as e:  # noqa: BLE001
        expect(False, f"check c: {type(e).__name__}: {e}")
    await fleet.stop()
    if len(PROBLEMS) > n0:
        for b in fleet.boxes.values():
            print(f"---- tail of {b.log}\n{tail(b.log)}")
        if ng is not None:
            print(f"---- tail of {ng.dir / 'error.log'}\n{tail(ng.dir / 'error.log')}")


async def main_async(bin_: str, out: Path) -> None:
    procs = Procs(out)
    try:
        tokens, files = make_tokens(bin_, out)
        shared = out / "shared"
        shared.mkdir()
        shared_log = shared / "record.log"
        await haproxy_phase(out, bin_, procs, tokens, files, shared_log)
        await nginx_phase(out, bin_, procs, tokens, files, shared_log)
    finally:
        procs.stop_all()
        leftovers(out)


def leftovers(out: Path) -> None:
    """Upstream processes whose box did not stop them (a box that was killed): found by the
    shared log path in their environment, stopped by pid."""
    marker = f"FLEET_LOG={out / 'shared' / 'record.log'}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if marker in env.split(b"\0"):
            say(f"stopping a leftover upstream, pid {d.name}")
            try:
                os.kill(int(d.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out).resolve()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        asyncio.run(main_async(a.bin, out))
    except KeyboardInterrupt:
        PROBLEMS.append("interrupted")
    except Exception as e:  # noqa: BLE001
        PROBLEMS.append(f"{type(e).__name__}: {e}")
        say(f"FAIL: {type(e).__name__}: {e}")
    print()
    print("fleet: figures")
    w1 = max((len(c) for c, _, _ in FIGURES), default=5)
    w2 = max((len(f) for _, f, _ in FIGURES), default=6)
    for c, f, v in FIGURES:
        print(f"  {c:<{w1}}  {f:<{w2}}  {v}")
    print(f"fleet: {len(PROBLEMS)} problem(s) in {time.monotonic() - T0:.0f}s")
    for p in PROBLEMS:
        print(f"  - {p}")
    return 1 if PROBLEMS else 0


if __name__ == "__main__":
    sys.exit(main())
