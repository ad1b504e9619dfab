//! Shared helpers of the integration tests: start a gateway in-process, speak
//! HTTP to it, and describe the fake upstream of `tests/fake/fake_upstream.py`.
//! The submodules are [`peers`] (real third-party MCP peers), [`scripted`]
//! (the scriptable HTTP upstream of the supervisor tests), [`sse`] (the one
//! SSE reader), [`inprocess`] (a gateway served in-process, driven by
//! controls), [`binary`] (the gateway binary as a black box), [`tls`] (test
//! certificates, TLS config files and a TLS client), [`eventually`] (waiting
//! on observable state, never a fixed sleep), [`marks`] (what the fake
//! upstream has received), [`sockets`] (what the kernel says of a socket)
//! and [`heap`] (heap measurements alone in their process).
//!
//! Not every helper is used by every configuration of the tests (qemu,
//! no root), hence one `allow(dead_code)` here (it covers the submodules too).
#![allow(dead_code)]
#![allow(clippy::disallowed_methods)] // test servers and readers are spawned tasks; peers are waited for in real time

pub mod binary;
pub mod eventually;
pub mod heap;
pub mod inprocess;
pub mod marks;
pub mod peers;
pub mod proptest_check;
pub mod rmcp_tasks;
pub mod scripted;
pub mod sockets;
pub mod sse;
pub mod tls;

pub use eventually::{eventually, eventually_blocking, eventually_sync};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mcp_edge::config::Config;
use mcp_edge::gateway::Gateway;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One HTTP answer: status, headers, and the JSON body (the last SSE event's
/// data when the answer was an SSE stream; `Null` when empty).
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Value,
    pub raw: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn error_code(&self) -> Option<i64> {
        self.body.get("error")?.get("code")?.as_i64()
    }
}

/// `method` to `http://{addr}/mcp` with `headers`, plus a JSON
/// `content-type` (always, or on a POST only) and an `accept` of both JSON
/// and SSE unless given.
pub fn mcp_request(
    method: &str,
    addr: SocketAddr,
    headers: &[(&str, &str)],
    body: &str,
    content_type_always: bool,
) -> http::Request<Full<Bytes>> {
    let uri = format!("http://{addr}/mcp");
    request_to(method, &uri, headers, body, content_type_always)
}

/// [`mcp_request`] to any `uri` (e.g. the HTTP+SSE transport's
/// `http://…/messages?sessionId=…`).
pub fn request_to(
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
    content_type_always: bool,
) -> http::Request<Full<Bytes>> {
    let mut b = http::Request::builder().method(method).uri(uri);
    if content_type_always || method == "POST" {
        b = b.header("content-type", "application/json");
    }
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("accept"))
    {
        b = b.header("accept", "application/json, text/event-stream");
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

pub async fn request(
    method: &str,
    addr: SocketAddr,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    request_at(method, &format!("http://{addr}/mcp"), headers, body).await
}

/// [`request`] to any `uri`.
pub async fn request_at(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let resp = client
        .request(request_to(method, uri, headers, body, true))
        .await
        .expect("HTTP request");
    reply(resp).await
}

/// Reads a whole answer into a [`Reply`].
pub async fn reply(resp: http::Response<hyper::body::Incoming>) -> Reply {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let raw =
        String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).to_string();
    let is_sse = headers
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
    let body = if is_sse {
        sse::events(&raw)
            .pop()
            .map(|e| e.data)
            .unwrap_or(Value::Null)
    } else if raw.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&raw).unwrap_or(Value::Null)
    };
    Reply {
        status,
        headers,
        body,
        raw,
    }
}

pub async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &Value) -> Reply {
    request("POST", addr, headers, &body.to_string()).await
}

/// Opens a legacy session with `version` declaring no client capabilities;
/// returns its id.
pub async fn legacy_session(addr: SocketAddr, version: &str) -> String {
    legacy_session_with(addr, version, json!({})).await
}

/// [`legacy_session`] declaring `capabilities` (e.g. `{"sampling": {}}`).
pub async fn legacy_session_with(addr: SocketAddr, version: &str, capabilities: Value) -> String {
    let r = post(
        addr,
        &[],
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let sid = r.header("mcp-session-id").expect("session id").to_string();
    let n = post(
        addr,
        &[("mcp-session-id", &sid)],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(n.status, 202);
    sid
}

/// A legacy request in session `sid`.
pub async fn call(addr: SocketAddr, sid: &str, id: Value, method: &str, params: Value) -> Reply {
    post(
        addr,
        &[
            ("mcp-session-id", sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    )
    .await
}

/// `tools/call` of `name` in legacy session `sid`, with `arguments` unless
/// they are `Null` (then the request has no `arguments` at all).
pub async fn call_tool(
    addr: SocketAddr,
    sid: &str,
    id: Value,
    name: &str,
    arguments: Value,
) -> Reply {
    let mut params = json!({"name": name});
    if !arguments.is_null() {
        params["arguments"] = arguments;
    }
    call(addr, sid, id, "tools/call", params).await
}

/// Calls `tool` in legacy session `sid` as a client that polls
/// (2025-11-25 transports.mdx §Sending Messages to the Server, item 6):
/// the POST's stream, then, while a stream ends without the response, a
/// GET with `Last-Event-ID` after the stream's `retry`. The response, and
/// how many times it polled.
pub async fn call_polled(addr: SocketAddr, sid: &str, id: Value, tool: &str) -> (Value, usize) {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": {}}});
    let mut s = sse::open("POST", addr, &[("mcp-session-id", sid)], &call.to_string()).await;
    let (mut polls, mut last) = (0, None);
    loop {
        let wait = std::time::Duration::from_secs(30);
        let (events, seen) = tokio::time::timeout(wait, s.rest_seen())
            .await
            .expect("each stream ends within 30 s");
        if let Some(answer) = events.into_iter().find(|e| e.data["id"] == id) {
            return (answer.data, polls);
        }
        // A client keeps the last event ID across its reconnections.
        last = seen.last_event_id.or(last);
        let last = (last.clone())
            .unwrap_or_else(|| panic!("a stream ended without the response or an event ID"));
        let retry = std::time::Duration::from_millis(seen.retry_ms.unwrap_or(1000));
        tokio::time::sleep(retry).await; // not ordering: the wait the stream asked for
        polls += 1;
        let h = [("mcp-session-id", sid), ("last-event-id", last.as_str())];
        s = sse::open("GET", addr, &h, "").await;
        assert_eq!(s.status, 200, "the resumption of stream {last}");
    }
}

/// The fake upstream `upstream`'s own counters (JSON of its `stats` tool),
/// asked in session `sid`.
pub async fn fake_stats(addr: SocketAddr, sid: &str, id: Value, upstream: &str) -> Value {
    let r = call_tool(addr, sid, id, &format!("{upstream}__stats"), Value::Null).await;
    serde_json::from_str(&text_of(&r)).unwrap()
}

/// A correct modern (2026-07-28) request with its headers.
pub async fn modern(addr: SocketAddr, id: Value, method: &str, mut params: Value) -> Reply {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let name = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str)
        .map(String::from);
    let mut h = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(n) = &name {
        h.push(("mcp-name", n.as_str()));
    }
    post(
        addr,
        &h,
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    )
    .await
}

/// A `Command` for the gateway binary built with these tests. When
/// `MCP_EDGE_TEST_RUNNER` is set (tests/arm.sh sets it to the qemu-user
/// runner, e.g. `qemu-aarch64 -L /usr/aarch64-linux-gnu`), the binary is run
/// through it: a test binary that itself runs under qemu-user cannot execve a
/// foreign-architecture binary without binfmt_misc. qemu-user forwards
/// signals to its guest, so signalling `child.id()` reaches the gateway.
/// The gateway also gets `PR_SET_PDEATHSIG` = SIGKILL, so a test process that
/// dies half-way (a failed assertion, a killed test runner) leaves no gateway
/// behind (its own children follow through their own death signal).
pub fn gateway_command() -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let bin = env!("CARGO_BIN_EXE_mcp-edge");
    let runner = std::env::var("MCP_EDGE_TEST_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    let mut c = match words.next() {
        Some(first) => {
            let mut c = std::process::Command::new(first);
            c.args(words).arg(bin);
            c
        }
        None => std::process::Command::new(bin),
    };
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    c
}

/// `method path` with `headers` and `body` over the operator socket at
/// `socket` (`server.admin_socket`): the status and the body.
pub async fn operator_request(
    socket: &Path,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let io = tokio::net::UnixStream::connect(socket)
        .await
        .expect("operator socket");
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(bytes::Bytes::from(body.to_owned())))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// A port that was free on 127.0.0.1 a moment ago.
/// Never the same port twice in one test binary: the kernel may hand a
/// just-released port out again, and two calls in a row (`listen` and
/// `admin_listen`) then collide.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .expect("bind 127.0.0.1:0")
            .local_addr()
            .unwrap()
            .port();
        let mut given = GIVEN.lock().unwrap();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

pub fn fake_upstream() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake/fake_upstream.py")
}

/// `paths_ro = [...]` for test upstreams under the default `sandbox =
/// "strict"`: the repository's `tests/` (fixtures, interop peers) and the
/// Python on `PATH` (its prefixes, and pyenv's root when its shims are on
/// `PATH`), none of which the default grant has on a developer machine.
pub fn test_grants() -> String {
    test_grants_with(&[])
}

/// [`test_grants`] and `more`.
pub fn test_grants_with(more: &[&Path]) -> String {
    static PATHS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    let base = PATHS.get_or_init(|| {
        let mut paths = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")];
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import sys; print(sys.base_prefix); print(sys.prefix)",
            ])
            .output();
        if let Ok(out) = out {
            paths.extend(
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(PathBuf::from),
            );
        }
        paths.extend(std::env::var_os("PYENV_ROOT").map(PathBuf::from));
        paths.retain(|p| p.is_absolute() && !p.starts_with("/usr"));
        paths.dedup();
        paths
    });
    let quoted: Vec<String> = base
        .iter()
        .map(PathBuf::as_path)
        .chain(more.iter().copied())
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    format!("paths_ro = [{}]", quoted.join(", "))
}

/// `rel` under the repository, as a string.
pub fn repo_path(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(rel)
        .display()
        .to_string()
}

/// The real interpreter behind `python3` on `PATH` (`sys.executable`).
pub fn python_executable() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A `[[upstream]]` block running the fake upstream over stdio.
pub fn fake_block(name: &str, era: &str, extra: &str) -> String {
    fake_block_args(name, era, &[], extra)
}

/// [`fake_block`] with extra command-line flags for the fake (e.g. `--paged 3`).
pub fn fake_block_args(name: &str, era: &str, flags: &[&str], extra: &str) -> String {
    fake_block_granting(name, era, flags, extra, &[])
}

/// [`fake_block_args`] whose child may also read beneath `ro`.
pub fn fake_block_granting(
    name: &str,
    era: &str,
    flags: &[&str],
    extra: &str,
    ro: &[&Path],
) -> String {
    let flags: String = flags.iter().map(|f| format!(", \"{f}\"")).collect();
    format!(
        "[[upstream]]\nname = \"{name}\"\ntransport = \"stdio\"\ncommand = \"python3\"\nargs = [\"{}\", \"--era\", \"{era}\", \"--name\", \"{name}\"{flags}]\n{}\n{extra}\n",
        fake_upstream().display(),
        test_grants_with(ro)
    )
}

/// A gateway with `server_extra` and only the built-in upstream, and a
/// 2025-11-25 legacy session opened on it.
pub async fn edge_session(server_extra: &str) -> (Gateway, SocketAddr, String) {
    let gw = start(
        server_extra,
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    (gw, addr, sid)
}

/// Starts a gateway on an ephemeral loopback port with `upstreams` (TOML
/// `[[upstream]]` blocks) and `server_extra` lines in `[server]`; waits for
/// every upstream's first attempt to settle.
pub async fn start(server_extra: &str, upstreams: &str) -> Gateway {
    let gw = start_nowait(server_extra, upstreams).await;
    gw.wait_upstreams(Duration::from_secs(30)).await;
    gw
}

/// Where an in-process test's config "comes from": a file name under the
/// temp directory, apart from the repository, whose `tests/` the test
/// upstreams' sandboxes are granted (a config's directory never may be).
pub fn origin(name: &str) -> PathBuf {
    std::env::temp_dir()
        .join("mcp-edge-test-configs")
        .join(name)
}

/// [`start`] without waiting for the upstreams' first attempts.
pub async fn start_nowait(server_extra: &str, upstreams: &str) -> Gateway {
    let text = format!("[server]\nlisten = \"127.0.0.1:0\"\n{server_extra}\n{upstreams}");
    let config = Config::from_toml_str(&text, &origin("test.toml")).expect("valid test config");
    Gateway::start(config).await.expect("gateway starts")
}

pub fn tool_names(list: &Reply) -> Vec<String> {
    list.body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {}", list.raw))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// The first text content of a JSON-RPC message's result, if it has one.
pub fn content_text(msg: &Value) -> Option<&str> {
    msg["result"]["content"][0]["text"].as_str()
}

/// [`content_text`] of an answer (panics, showing it, when it has none).
pub fn text_of(r: &Reply) -> String {
    content_text(&r.body)
        .unwrap_or_else(|| panic!("no text content in {}", r.raw))
        .to_string()
}

/// systemd's end of sd_notify(3) for a test: a datagram socket in a folder
/// the test owns, read with a timeout.
pub struct NotifySocket {
    pub path: PathBuf,
    pub sock: std::os::unix::net::UnixDatagram,
}

impl NotifySocket {
    /// Binds `<dir>/notify.sock`; reads wait up to `timeout`.
    pub fn bind(dir: &Path, timeout: Duration) -> NotifySocket {
        let path = dir.join("notify.sock");
        let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(timeout)).unwrap();
        NotifySocket { path, sock }
    }

    /// The next datagram (panics when none comes within the timeout).
    pub fn next(&self) -> String {
        let mut buf = [0u8; 4096];
        let n = self.sock.recv(&mut buf).expect("a notify datagram in time");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

/// `mcp-edge serve --config CONFIG` telling `notify` (stderr silenced).
pub fn serve_notified(config: &Path, notify: &NotifySocket) -> std::process::Command {
    let mut c = gateway_command();
    c.args(["serve", "--config"])
        .arg(config)
        .env("NOTIFY_SOCKET", &notify.path)
        .stderr(std::process::Stdio::null());
    c
}
