#!/usr/bin/env python3
"""The conformance suite's client command for the `auth/*` scenarios (issue 22).

`conformance client --command "python3 oauth_client.py" --scenario auth/X` runs this with the
scenario's MCP server URL as the last argument. It plays an operator with mcp-edge in front of
that server: it writes a config with the server as an HTTP upstream (`[upstream.oauth]` from the
scenario: client credentials from MCP_CONFORMANCE_CONTEXT, else `authorization_code`), runs
`mcp-edge login` when the grant needs a person (following the authorization URL it prints, as a
browser would: the suite's authorization server redirects at once), starts `mcp-edge serve`, and
calls the upstream's tool through the gateway as a legacy MCP client. When a call fails because
the upstream needs a new login (a scope step-up, another authorization server), it logs in again,
at most twice more, as an operator reading the error would. Exit 0 once a tools/call succeeded.

Env: MCP_EDGE_BIN (the gateway binary), MCP_CONFORMANCE_SCENARIO, MCP_CONFORMANCE_PROTOCOL_VERSION,
MCP_CONFORMANCE_CONTEXT (set by the suite). Standard library only.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

BIN = os.environ.get("MCP_EDGE_BIN", "mcp-edge")
SCENARIO = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
VERSION = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
CONTEXT = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
CIMD_URL = "https://conformance-test.local/client-metadata.json"
MAX_LOGINS = 3


def log(msg):
    print(f"[oauth-client] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def toml_str(s):
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def write_config(d, url, ports):
    oauth = []
    if CONTEXT.get("client_id"):
        oauth.append(f"client_id = {toml_str(CONTEXT['client_id'])}")
    if CONTEXT.get("client_secret"):
        path = os.path.join(d, "client-secret")
        with open(path, "w") as f:
            f.write(CONTEXT["client_secret"])
        oauth.append(f"client_secret_file = {toml_str(path)}")
    if CONTEXT.get("private_key_pem"):
        path = os.path.join(d, "client-key.pem")
        with open(path, "w") as f:
            f.write(CONTEXT["private_key_pem"])
        oauth.append(f"private_key_file = {toml_str(path)}")
    grant = "client_credentials" if SCENARIO.startswith("auth/client-credentials") else "authorization_code"
    if grant == "authorization_code" and not CONTEXT.get("client_id"):
        oauth.append(f"client_metadata_url = {toml_str(CIMD_URL)}")
    era = "modern" if VERSION >= "2026" else "legacy"
    text = f"""[server]
listen = "127.0.0.1:{ports['listen']}"
admin_listen = "127.0.0.1:{ports['admin']}"
state_directory = {toml_str(os.path.join(d, 'state'))}

[[upstream]]
name = "conf"
transport = "http"
url = {toml_str(url)}
era = "{era}"
call_timeout = "10s"
backoff_initial = "200ms"
backoff_cap = "2s"

[upstream.oauth]
grant = "{grant}"
{chr(10).join(oauth)}
"""
    path = os.path.join(d, "config.toml")
    with open(path, "w") as f:
        f.write(text)
    log(f"config ({grant}, era {era}):\n{text}")
    return path, grant


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


def login(cfg, port):
    """Runs `mcp-edge login conf`, follows the authorization URL it prints to the redirect, hands
    the redirect to login's listener; returns login's exit code."""
    p = subprocess.Popen([BIN, "login", "conf", "--config", cfg, "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=sys.stderr, stdin=subprocess.DEVNULL, text=True)
    auth_url = None
    for line in p.stdout:
        log(f"login: {line.rstrip()}")
        if line.startswith("http") and "response_type=code" in line:
            auth_url = line.strip()
            break
    if auth_url is None:
        return p.wait(timeout=30)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(auth_url, timeout=10)
        log("the authorization endpoint did not redirect")
    except urllib.error.HTTPError as e:
        location = e.headers.get("Location")
        log(f"authorization redirect: {e.code} -> {location}")
        if location:
            try:
                urllib.request.urlopen(location, timeout=10).read()
            except Exception as ex:  # login may have closed its listener after refusing
                log(f"callback: {ex}")
    for line in p.stdout:
        log(f"login: {line.rstrip()}")
    return p.wait(timeout=30)


class Gateway:
    def __init__(self, cfg, ports, d):
        self.base = f"http://127.0.0.1:{ports['listen']}/mcp"
        self.admin = f"http://127.0.0.1:{ports['admin']}"
        self.log = open(os.path.join(d, "gateway.log"), "w")
        self.p = subprocess.Popen([BIN, "serve", "--config", cfg], stdout=self.log, stderr=self.log,
                                  stdin=subprocess.DEVNULL)
        self.sid = None
        self.next_id = 1
        for _ in range(100):
            try:
                urllib.request.urlopen(self.admin + "/healthz", timeout=1).read()
                return
            except Exception:
                time.sleep(0.1)
        raise RuntimeError("the gateway did not start")

    def post(self, msg):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-11-25"}
        if self.sid:
            headers["Mcp-Session-Id"] = self.sid
        req = urllib.request.Request(self.base, data=json.dumps(msg).encode(), headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            self.sid = r.headers.get("Mcp-Session-Id") or self.sid
            body = r.read().decode()
        if not body:
            return None
        m = re.findall(r"^data: (.*)$", body, re.M)
        return json.loads(m[-1] if m else body)

    def request(self, method, params):
        self.next_id += 1
        answer = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        log(f"{method}: {json.dumps(answer)[:400]}")
        return answer

    def open_session(self):
        self.sid = None
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "oauth-conformance", "version": "1"}})
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.log.close()


def call_tool(gw):
    """tools/list then tools/call conf__test-tool; True on a result."""
    gw.request("tools/list", {})
    a = gw.request("tools/call", {"name": "conf__test-tool", "arguments": {}})
    return a is not None and "result" in a and not a["result"].get("isError"), a


def needs_login(answer):
    """The gateway's error for a call the upstream's token could not serve, or for an upstream
    parked until a login: both say "needs a login (…)"."""
    return "needs a login" in json.dumps(answer or {})


def wait_ready(gw, seconds=15):
    """After a login: until the gateway has read the new token file and reconnected (a parked
    upstream looks at its files every few seconds; a ready one's calls look every second)."""
    time.sleep(1.1)
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            status = json.loads(urllib.request.urlopen(gw.admin + "/status", timeout=2).read())
            state = status["upstreams"][0]["state"]
            if state == "ready":
                return
        except Exception:
            pass
        time.sleep(0.25)


def main():
    url = sys.argv[-1]
    d = tempfile.mkdtemp(prefix="mcp-edge-oauth-")
    try:
        return run(url, d)
    finally:
        # One directory a scenario: the suite runs dozens of them.
        shutil.rmtree(d, ignore_errors=True)


def run(url, d):
    ports = {"listen": free_port(), "admin": free_port(), "login": free_port()}
    cfg, grant = write_config(d, url, ports)
    logins = 0
    if grant == "authorization_code":
        logins += 1
        rc = login(cfg, ports["login"])
        if rc != 0:
            log(f"login failed ({rc})")
            return 1
    gw = Gateway(cfg, ports, d)
    try:
        gw.open_session()
        for attempt in range(12):
            ok, answer = call_tool(gw)
            if ok:
                log("tools/call succeeded")
                return 0
            if needs_login(answer):
                if logins >= MAX_LOGINS:
                    log("the upstream keeps asking for a login; giving up")
                    return 1
                logins += 1
                if login(cfg, ports["login"]) != 0:
                    return 1
                wait_ready(gw)
                continue
            elif "given up after" in json.dumps(answer or {}):
                return 1
            time.sleep(1)  # the gateway notices the new token file within its credential check period
        return 1
    finally:
        gw.stop()
        with open(os.path.join(d, "gateway.log")) as f:
            sys.stderr.write(f.read()[-6000:])


if __name__ == "__main__":
    sys.exit(main())
