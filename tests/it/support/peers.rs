//! Real third-party MCP peers for mcp-edge's integration tests (installed by `tests/interop/setup.sh`).
//!
//! Reached from a test file as `support::peers` (after `mod support;`).
//!
//! * paths: [`interop_dir`], [`python_v1`], [`python_v2`], [`server_everything_js`], [`conformance_server_py`],
//!   [`fixture_http_server_py`], [`force_loopback_mjs`], [`node22_bin`]
//! * upstream peers: [`spawn_fixture_http_server`] (Python SDK 1.30 FastMCP over streamable HTTP),
//!   [`spawn_server_everything_http`] (the reference TS server, forced onto loopback); both return a
//!   [`KillOnDrop`] guard and the port, and are reached at `http://127.0.0.1:{port}/mcp`
//! * downstream clients: [`run_client`] (async; use it when the gateway runs in the test's own tokio runtime),
//!   [`run_client_trusting`] (the same over https with a test CA) and [`run_client_blocking`]; both print-parse the scripts' single JSON object:
//!   `{"protocolVersion", "serverInfo", "tools": [names], "calls": [{"name", "result"} | {"name", "error"}],
//!   "logs": [...]}`. Calls spec: JSON list of `{"name", "arguments"?, "meta"?, "progress"?, "expect_error"?}`
//!   (see tests/interop/client_v1.py's docstring).
//!
//! Fixture HTTP server tools: `add(a,b)` -> text "a+b" (+ structuredContent {"result": n}), `echo(text)`,
//! `extensions()` (unknown fields + `_meta["com.example/trace"]`: see [`EXTENSIONS_TRACE`]), `echo_meta()`,
//! `sleep_ms(ms)`, `notify(steps)`.

use super::{eventually_blocking, free_port};
use std::net::TcpStream;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// `_meta["com.example/trace"]` of the fixture server's `extensions` tool result (JSON text).
pub const EXTENSIONS_TRACE: &str =
    r#"{"traceId":"4bf92f3577b34da6","spanId":"00f067aa0ba902b7","sampled":true}"#;

/// Per-script timeout handed to the client scripts (CLIENT_TIMEOUT, seconds); the Rust side waits a bit longer.
const CLIENT_TIMEOUT_S: u64 = 60;

const SETUP_HINT: &str = "run tests/interop/setup.sh";

/// `<crate>/tests/interop`.
pub fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("interop")
}

fn installed(p: PathBuf, what: &str) -> PathBuf {
    if !p.exists() {
        panic!("{what} not found at {}: {SETUP_HINT}", p.display());
    }
    p
}

/// Python with mcp==1.30.0 (`tests/interop/.venv1/bin/python`).
pub fn python_v1() -> PathBuf {
    installed(
        interop_dir().join(".venv1/bin/python"),
        "Python venv with mcp 1.30.0",
    )
}

/// Python with mcp==2.3.0 (`tests/interop/.venv2/bin/python`).
pub fn python_v2() -> PathBuf {
    installed(
        interop_dir().join(".venv2/bin/python"),
        "Python venv with mcp 2.3.0",
    )
}

/// server-everything's entry point; run as `node <this> stdio` (or `streamableHttp` with env PORT).
pub fn server_everything_js() -> PathBuf {
    installed(
        interop_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        "@modelcontextprotocol/server-everything",
    )
}

/// mcp-remote's stdio proxy (the pinned 0.15.1), run with system Node.
pub fn mcp_remote_js() -> PathBuf {
    installed(
        interop_dir().join("node_modules/mcp-remote/dist/proxy.js"),
        "mcp-remote",
    )
}

/// The stdio conformance fixture (run with [`python_v1`]).
pub fn conformance_server_py() -> PathBuf {
    interop_dir().join("conformance_server.py")
}

/// The streamable-HTTP fixture server (run with [`python_v1`] and a port).
pub fn fixture_http_server_py() -> PathBuf {
    interop_dir().join("fixture_http_server.py")
}

/// Preload that forces Node servers onto 127.0.0.1: `NODE_OPTIONS=--import <this>`.
pub fn force_loopback_mjs() -> PathBuf {
    interop_dir().join("force-loopback.mjs")
}

/// Directory holding Node 22's `node` and the `conformance` CLI (put it first on PATH).
pub fn node22_bin() -> PathBuf {
    installed(
        interop_dir().join(".node22/bin"),
        "Node 22 + conformance suite",
    )
}

/// A child process killed (and reaped) on drop. Derefs to [`Child`].
pub struct KillOnDrop(pub Child);

impl Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` (built for `port`) and waits until 127.0.0.1:`port` accepts TCP. Retries with a fresh
/// port when the child dies early (e.g. the port got taken in between). The child's stdout+stderr go to
/// `tests/interop/out/logs/<name>-<port>.log` (shown in the panic message if it dies).
fn spawn_listening(name: &str, mut build: impl FnMut(u16) -> Command) -> (KillOnDrop, u16) {
    let log_dir = interop_dir().join("out").join("logs");
    std::fs::create_dir_all(&log_dir).expect("create tests/interop/out/logs");
    let mut last_err = String::new();
    for _attempt in 0..3 {
        let port = free_port();
        let log_path = log_dir.join(format!("{name}-{port}.log"));
        let log = std::fs::File::create(&log_path).expect("create peer log");
        let mut cmd = build(port);
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log);
        let mut child = KillOnDrop(cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}")));
        // Listening (`Ok`), or exited first (`Err`, with its log).
        let what = format!(
            "{name} listening on 127.0.0.1:{port} (log: {})",
            log_path.display()
        );
        let up = eventually_blocking(&what, Duration::from_secs(30), || {
            if let Some(status) = child.try_wait().expect("try_wait") {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Some(Err(format!(
                    "{name} exited with {status} before listening on {port}:\n{log}"
                )));
            }
            let addr = ([127, 0, 0, 1], port).into();
            let listening = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok();
            listening.then_some(Ok(()))
        });
        match up {
            Ok(()) => return (child, port),
            Err(e) => last_err = e,
        }
    }
    panic!("{last_err}")
}

/// Starts `fixture_http_server.py PORT` (mcp 1.30 FastMCP, stateful, SSE responses) on a free loopback port
/// and waits until it accepts TCP. URL: `http://127.0.0.1:{port}/mcp`. Killed when the guard drops.
pub fn spawn_fixture_http_server() -> (KillOnDrop, u16) {
    spawn_fixture_http_server_with(&[])
}

/// Like [`spawn_fixture_http_server`] with extra flags: `--json-response` and/or `--stateless`.
pub fn spawn_fixture_http_server_with(flags: &[&str]) -> (KillOnDrop, u16) {
    let (py, script) = (python_v1(), fixture_http_server_py());
    spawn_listening("fixture_http_server", |port| {
        let mut c = Command::new(&py);
        c.arg(&script).arg(port.to_string()).args(flags);
        c
    })
}

/// Starts `fixture_http_server.py PORT --sse` (mcp 1.30 FastMCP, the 2024-11-05 HTTP+SSE
/// transport). Its stream: `http://127.0.0.1:{port}/sse`.
pub fn spawn_fixture_sse_server() -> (KillOnDrop, u16) {
    spawn_fixture_http_server_with(&["--sse"])
}

/// `tests/interop/fixture_modern_server.py` (mcp 2.3.0 MCPServer, 2026-07-28 only).
pub fn fixture_modern_server_py() -> PathBuf {
    installed(
        interop_dir().join("fixture_modern_server.py"),
        "the modern fixture server",
    )
}

/// Starts `fixture_modern_server.py http PORT` on a free loopback port and
/// waits until it accepts TCP. URL: `http://127.0.0.1:{port}/mcp`.
pub fn spawn_fixture_modern_server() -> (KillOnDrop, u16) {
    let (py, script) = (python_v2(), fixture_modern_server_py());
    spawn_listening("fixture_modern_server", |port| {
        let mut c = Command::new(&py);
        c.arg(&script).arg("http").arg(port.to_string());
        c
    })
}

/// Starts `conformance_server_v2.py PORT` (mcp 2.3.0, dual-era: 2026-07-28
/// statelessly and 2025-11-25 in sessions, on one endpoint) on a free
/// loopback port. URL: `http://127.0.0.1:{port}/mcp`.
pub fn spawn_dual_era_server() -> (KillOnDrop, u16) {
    let py = python_v2();
    let script = installed(
        interop_dir().join("conformance_server_v2.py"),
        "the dual-era conformance fixture",
    );
    spawn_listening("conformance_server_v2", |port| {
        let mut c = Command::new(&py);
        c.arg(&script).arg(port.to_string());
        c
    })
}

/// Starts server-everything in `streamableHttp` mode on a free port, forced onto 127.0.0.1.
/// URL: `http://127.0.0.1:{port}/mcp`. Killed when the guard drops (it is `node` itself, not an npx wrapper).
pub fn spawn_server_everything_http() -> (KillOnDrop, u16) {
    spawn_server_everything("streamableHttp")
}

/// Starts server-everything in `sse` mode (the 2024-11-05 HTTP+SSE transport) on a free port,
/// forced onto 127.0.0.1. Its stream: `http://127.0.0.1:{port}/sse`.
pub fn spawn_server_everything_sse() -> (KillOnDrop, u16) {
    spawn_server_everything("sse")
}

/// server-everything in transport `mode` on a free loopback port.
fn spawn_server_everything(mode: &str) -> (KillOnDrop, u16) {
    let (js, preload) = (server_everything_js(), force_loopback_mjs());
    spawn_listening(&format!("server-everything-{mode}"), |port| {
        let mut c = Command::new("node");
        c.arg(&js)
            .arg(mode)
            .env("PORT", port.to_string())
            .env("NODE_OPTIONS", format!("--import {}", preload.display()));
        c
    })
}

/// Which real client script to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientKind {
    /// `client_v1.py`, Python SDK mcp 1.30.0: initialize handshake, offers 2025-11-25.
    V1,
    /// `client_v2.py`, Python SDK mcp 2.3.0, mode "auto": probes `server/discover` (2026-07-28), else initialize.
    V2,
    /// `client_v2.py` mode "legacy": initialize handshake only.
    V2Legacy,
    /// `client_v2.py` mode "2026-07-28": the stateless modern era without a probe.
    V2Modern,
    /// `client_ts.mjs`, TypeScript SDK 1.x on system Node: initialize handshake, offers 2025-11-25.
    Ts,
}

fn client_command(kind: ClientKind, url: &str, calls_json: &str) -> Command {
    let dir = interop_dir();
    let mut c = match kind {
        ClientKind::V1 => {
            let mut c = Command::new(python_v1());
            c.arg(dir.join("client_v1.py"));
            c
        }
        ClientKind::V2 | ClientKind::V2Legacy | ClientKind::V2Modern => {
            let mut c = Command::new(python_v2());
            c.arg(dir.join("client_v2.py"));
            c
        }
        ClientKind::Ts => {
            installed(
                dir.join("node_modules/@modelcontextprotocol/sdk"),
                "@modelcontextprotocol/sdk",
            );
            let mut c = Command::new("node");
            c.arg(dir.join("client_ts.mjs"));
            c
        }
    };
    c.arg(url).arg(calls_json);
    match kind {
        ClientKind::V2 => {
            c.arg("auto");
        }
        ClientKind::V2Legacy => {
            c.arg("legacy");
        }
        ClientKind::V2Modern => {
            c.arg("2026-07-28");
        }
        _ => {}
    }
    c.current_dir(&dir)
        .env("CLIENT_TIMEOUT", CLIENT_TIMEOUT_S.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn parse_client_output(kind: ClientKind, out: Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        panic!(
            "client {kind:?} failed ({}):\n--- stderr ---\n{stderr}\n--- stdout ---\n{stdout}",
            out.status
        );
    }
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("client {kind:?} printed invalid JSON ({e}):\n{stdout}\n--- stderr ---\n{stderr}")
    })
}

/// Runs a client script against `url` with `calls_json` (a JSON list of tool calls), asserts it exited 0 and
/// returns its JSON output; panics with the script's stderr otherwise. Async: the gateway may run on the
/// same tokio runtime (a blocking wait would starve a current-thread runtime).
pub async fn run_client(kind: ClientKind, url: &str, calls_json: &str) -> serde_json::Value {
    run_client_command(kind, client_command(kind, url, calls_json)).await
}

/// [`run_client`] with extra environment variables for the client script
/// (e.g. `CLIENT_ROOTS` for `client_v2.py`).
pub async fn run_client_with_env(
    kind: ClientKind,
    url: &str,
    calls_json: &str,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let mut cmd = client_command(kind, url, calls_json);
    cmd.envs(env.iter().copied());
    run_client_command(kind, cmd).await
}

/// [`run_client`] against an `https://` `url` whose certificate is signed by
/// the PEM CA in `ca` (the Python scripts read `CLIENT_CA_FILE`, Node's
/// fetch `NODE_EXTRA_CA_CERTS`).
pub async fn run_client_trusting(
    kind: ClientKind,
    url: &str,
    calls_json: &str,
    ca: &Path,
) -> serde_json::Value {
    let mut cmd = client_command(kind, url, calls_json);
    cmd.env("CLIENT_CA_FILE", ca).env("NODE_EXTRA_CA_CERTS", ca);
    run_client_command(kind, cmd).await
}

async fn run_client_command(kind: ClientKind, cmd: Command) -> serde_json::Value {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn client {kind:?}: {e}"));
    let out = tokio::time::timeout(
        Duration::from_secs(CLIENT_TIMEOUT_S + 30),
        child.wait_with_output(),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "client {kind:?} did not finish within {} s",
            CLIENT_TIMEOUT_S + 30
        )
    })
    .unwrap_or_else(|e| panic!("wait for client {kind:?}: {e}"));
    parse_client_output(kind, out)
}

/// Blocking [`run_client`], for tests whose gateway runs on another thread or process.
pub fn run_client_blocking(kind: ClientKind, url: &str, calls_json: &str) -> serde_json::Value {
    let out = client_command(kind, url, calls_json)
        .output()
        .unwrap_or_else(|e| panic!("spawn client {kind:?}: {e}"));
    parse_client_output(kind, out)
}

/// `npx --no-install @modelcontextprotocol/inspector --cli URL --method tools/list` from tests/interop
/// (the pinned Inspector 0.15.0), returning its JSON (`{"tools": [...]}`).
pub async fn inspector_tools_list(url: &str) -> serde_json::Value {
    installed(
        interop_dir().join("node_modules/@modelcontextprotocol/inspector"),
        "@modelcontextprotocol/inspector",
    );
    let mut cmd = tokio::process::Command::new("npx");
    cmd.args([
        "--no-install",
        "@modelcontextprotocol/inspector",
        "--cli",
        url,
        "--method",
        "tools/list",
    ])
    .current_dir(interop_dir())
    .stdin(Stdio::null())
    .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .expect("inspector CLI did not finish within 90 s")
        .expect("spawn npx inspector");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "inspector CLI failed ({}):\n{}\n{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("inspector printed invalid JSON ({e}):\n{stdout}"))
}

/// Tool names from a client output's `"tools"`.
pub fn tool_names(v: &serde_json::Value) -> Vec<String> {
    v["tools"]
        .as_array()
        .expect("tools array")
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

/// The first text content of call `i`'s result.
pub fn call_text(v: &serde_json::Value, i: usize) -> String {
    v["calls"][i]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("call {i} has no text result: {}", v["calls"][i]))
        .to_owned()
}

/// POSTs `bytes` spaces to `url` with Node's own `fetch` (undici; `node`
/// on PATH) or, `python` true, Python's `http.client` (the pinned
/// [`python_v1`]) (`tests/interop/post_big.{mjs,py}`), returning the
/// script's `{"status", "body"}` or `{"error"}`.
pub async fn post_bytes(python: bool, url: &str, bytes: usize) -> serde_json::Value {
    let dir = interop_dir();
    let mut cmd = if python {
        let mut c = tokio::process::Command::new(python_v1());
        c.arg(dir.join("post_big.py"));
        c
    } else {
        let mut c = tokio::process::Command::new("node");
        c.arg(dir.join("post_big.mjs"));
        c
    };
    cmd.arg(url)
        .arg(bytes.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("post_big did not finish within 60 s")
        .expect("spawn post_big");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "post_big printed invalid JSON ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
