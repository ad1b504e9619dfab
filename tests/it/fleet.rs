//! Issue 26: several boxes behind one balancer, in process. Ids that name
//! their box (and the refusal naming both boxes when one reaches another),
//! the client's address from a trusted proxy (PROXY protocol v1/v2,
//! `X-Forwarded-For`) in the audit log and per-peer limits, and the drain
//! at SIGTERM. The real HAProxy and nginx in front of three processes are
//! `tests/fleet/fleet.sh`'s.

use crate::support::{self, eventually, legacy_session, modern, post, request_at, start};
use base64::Engine;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const EDGE: &str = "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n";

/// A PROXY protocol v2 header (PROXY, TCP over IPv4) naming `client`.
fn proxy_v2(client: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    h.extend_from_slice(&client);
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&8737u16.to_be_bytes());
    h
}

/// A POST of `body` to `/mcp` with `Connection: close`, as raw bytes.
fn http_post(body: &Value, headers: &str) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends `bytes` on a new connection and reads until the server closes it.
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out)).await;
    match read {
        Ok(Ok(_)) | Ok(Err(_)) => String::from_utf8_lossy(&out).into_owned(),
        Err(_) => panic!(
            "no close within 30 s; read {:?}",
            String::from_utf8_lossy(&out)
        ),
    }
}

fn modern_call(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "edge__uptime", "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}}})
}

const MODERN_HEADERS: &str =
    "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: edge__uptime\r\n";

/// The audit file's lines once at least `n` are written.
async fn audit_lines(path: &Path, n: usize) -> Vec<Value> {
    let what = format!("{n} audit line(s) in {}", path.display());
    eventually(&what, Duration::from_secs(10), || async {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (lines.len() >= n).then_some(lines)
    })
    .await
}

fn refused(label: &str) -> f64 {
    mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, &format!("limit=\"{label}\""))
}

#[tokio::test]
async fn ids_name_their_box_and_another_boxs_are_refused_naming_both() {
    mcp_edge::metrics::prometheus(); // the recorder, before the gateway sets its gauges
    let gw = start("instance_id = \"e1\"", EDGE).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let (instance, hex) = sid.split_once('.').unwrap();
    assert_eq!((instance, hex.len()), ("e1", 36), "{sid}");
    // The same id under another box's name: 404 (initialize again),
    // naming both boxes.
    let moved = format!("e2.{hex}");
    let r = support::call(addr, &moved, json!(1), "tools/list", json!({})).await;
    assert_eq!((r.status, r.error_code()), (404, Some(-32600)), "{}", r.raw);
    let data = &r.body["error"]["data"];
    assert_eq!(
        (
            data["reason"].as_str(),
            data["instance"].as_str(),
            data["here"].as_str()
        ),
        (Some("other_instance"), Some("e2"), Some("e1")),
        "{}",
        r.raw
    );
    assert_eq!(
        support::call(addr, &sid, json!(2), "tools/list", json!({}))
            .await
            .status,
        200
    );
    // An answer or a notification for another box's session: 404 too,
    // not accepted and dropped unseen.
    for msg in [
        json!({"jsonrpc": "2.0", "id": "x", "result": {}}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
    ] {
        let r = post(addr, &[("mcp-session-id", &moved)], &msg).await;
        assert_eq!(r.status, 404, "{}", r.raw);
        assert_eq!(
            r.body["error"]["data"]["reason"], "other_instance",
            "{}",
            r.raw
        );
    }
    // A task id and a requestState of another box: the same words.
    let task = format!("task-e2.{}", "0".repeat(36));
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    let get = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get",
        "params": {"taskId": task, "_meta": meta}});
    let h = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tasks/get"),
        ("mcp-name", task.as_str()),
    ];
    let r = post(addr, &h, &get).await;
    assert_eq!(r.body["error"]["code"], -32602, "{}", r.raw);
    assert_eq!(
        r.body["error"]["data"]["reason"], "other_instance",
        "{}",
        r.raw
    );
    assert_eq!(r.body["error"]["data"]["here"], "e1", "{}", r.raw);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([0u8; 80]);
    let params = json!({"name": "edge__uptime", "arguments": {},
        "requestState": format!("mcp-edge/1.e3.{b64}"), "inputResponses": {}});
    let r = modern(addr, json!(4), "tools/call", params).await;
    let e = &r.body["error"];
    assert_eq!(e["code"], -32602, "{}", r.raw);
    assert_eq!(
        (e["data"]["instance"].as_str(), e["data"]["here"].as_str()),
        (Some("e3"), Some("e1")),
        "{}",
        r.raw
    );
    assert!(
        e["message"].as_str().unwrap().contains("Several boxes"),
        "{}",
        r.raw
    );
    // /status and a metric name the box.
    let status = mcp_edge::downstream::admin::status_for(gw.app(), false);
    assert_eq!(status["instance"], "e1");
    let labels = format!("instance=\"e1\",version=\"{}\"", env!("CARGO_PKG_VERSION"));
    let info = mcp_edge::metrics::read(mcp_edge::metrics::INSTANCE_INFO, &labels);
    assert_eq!(info, 1.0, "mcp_edge_instance_info{{instance=\"e1\"}}");
}

/// A gateway trusting loopback as its balancer, with the PROXY protocol
/// (`proxy`) or without (then `X-Forwarded-For`), auditing to `dir`.
async fn behind_proxy(
    dir: &Path,
    proxy: bool,
    trusted: &str,
    extra: &str,
) -> mcp_edge::gateway::Gateway {
    let server = format!(
        "instance_id = \"e1\"\nproxy_protocol = {proxy}\ntrusted_proxies = [\"{trusted}\"]\n{extra}\n\
         [audit]\npath = \"{}/audit.jsonl\"\n",
        dir.display()
    );
    start(&server, EDGE).await
}

#[tokio::test]
async fn a_trusted_proxys_header_names_the_client_and_nobody_else_may_send_one() {
    let dir = tempfile::tempdir().unwrap();
    let gw = behind_proxy(dir.path(), true, "127.0.0.1/32", "").await;
    let addr = gw.local_addr();
    let mut sent = proxy_v2([192, 0, 2, 7], 40000);
    sent.extend(http_post(&modern_call(1), MODERN_HEADERS));
    let r = exchange(addr, &sent).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    // v1 too.
    let mut sent = b"PROXY TCP4 198.51.100.4 127.0.0.1 40001 8737\r\n".to_vec();
    sent.extend(http_post(&modern_call(2), MODERN_HEADERS));
    assert!(exchange(addr, &sent).await.starts_with("HTTP/1.1 200"));
    let lines = audit_lines(&dir.path().join("audit.jsonl"), 2).await;
    let peers: Vec<_> = lines.iter().map(|l| l["peer"].as_str().unwrap()).collect();
    assert_eq!(peers, ["192.0.2.7", "198.51.100.4"]);
    // The trusted proxy without a header: refused, counted.
    let before = refused("proxy_header");
    let r = exchange(addr, &http_post(&modern_call(3), MODERN_HEADERS)).await;
    assert!(r.is_empty(), "closed without an answer: {r}");
    assert!(refused("proxy_header") > before);
    drop(gw);
    // Where loopback is not trusted, a header is refused and plain HTTP served.
    let other = tempfile::tempdir().unwrap();
    let gw = behind_proxy(other.path(), true, "10.9.9.9/32", "").await;
    let before = refused("proxy_untrusted");
    let mut sent = proxy_v2([192, 0, 2, 7], 40000);
    sent.extend(http_post(&modern_call(4), MODERN_HEADERS));
    assert!(exchange(gw.local_addr(), &sent).await.is_empty());
    assert!(refused("proxy_untrusted") > before);
    let r = exchange(gw.local_addr(), &http_post(&modern_call(5), MODERN_HEADERS)).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let lines = audit_lines(&other.path().join("audit.jsonl"), 1).await;
    assert_eq!(lines[0]["peer"], "127.0.0.1");
}

#[tokio::test]
async fn a_per_peer_limit_applies_to_the_client_a_proxy_names() {
    let dir = tempfile::tempdir().unwrap();
    let gw = behind_proxy(
        dir.path(),
        true,
        "127.0.0.1/32",
        "max_connections_per_peer = 1",
    )
    .await;
    let addr = gw.local_addr();
    // Client 192.0.2.7 holds its one place with a busy stream (GET /sse).
    let mut held = TcpStream::connect(addr).await.unwrap();
    held.write_all(&proxy_v2([192, 0, 2, 7], 40000))
        .await
        .unwrap();
    held.write_all(b"GET /sse HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("event: endpoint") {
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), held.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            n > 0,
            "the stream ended: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    // Its second connection through the same proxy is refused...
    let before = refused("peer_connections");
    let mut sent = proxy_v2([192, 0, 2, 7], 40001);
    sent.extend(http_post(&modern_call(1), MODERN_HEADERS));
    let r = exchange(addr, &sent).await;
    assert!(r.starts_with("HTTP/1.1 503"), "{r}");
    assert!(r.contains("max_connections_per_peer"), "{r}");
    assert!(refused("peer_connections") > before);
    // ...while another client behind the same proxy is served.
    let mut sent = proxy_v2([192, 0, 2, 8], 40002);
    sent.extend(http_post(&modern_call(2), MODERN_HEADERS));
    assert!(exchange(addr, &sent).await.starts_with("HTTP/1.1 200"));
    drop(held);
}

#[tokio::test]
async fn x_forwarded_for_counts_only_from_a_trusted_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let gw = behind_proxy(dir.path(), false, "127.0.0.1/32", "").await;
    let h = [("x-forwarded-for", "203.0.113.9, 198.51.100.4")];
    let sid = legacy_session(gw.local_addr(), "2025-11-25").await;
    let mut headers = vec![("mcp-session-id", sid.as_str())];
    headers.extend(h);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "edge__uptime", "arguments": {}}});
    assert_eq!(post(gw.local_addr(), &headers, &call).await.status, 200);
    let line = &audit_lines(&dir.path().join("audit.jsonl"), 1).await[0];
    assert_eq!(
        line["peer"], "198.51.100.4",
        "the entry the proxy added: {line}"
    );
    assert_eq!(line["session"], format!("legacy:e1.{}", &sid[3..11]));
    drop(gw);
    let other = tempfile::tempdir().unwrap();
    let gw = behind_proxy(other.path(), false, "10.0.0.0/8", "").await;
    let sid = legacy_session(gw.local_addr(), "2025-11-25").await;
    let mut headers = vec![("mcp-session-id", sid.as_str())];
    headers.extend(h);
    assert_eq!(post(gw.local_addr(), &headers, &call).await.status, 200);
    let line = &audit_lines(&other.path().join("audit.jsonl"), 1).await[0];
    assert_eq!(
        line["peer"], "127.0.0.1",
        "not from a trusted proxy: {line}"
    );
}

/// A gateway served as `mcp-edge serve` serves it (stops on `Control`s),
/// with an admin listener, `drain_grace` and a slow tool.
async fn served(dir: &Path, drain_grace: &str) -> (support::inprocess::InProcess, SocketAddr) {
    let admin = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let cfg = dir.join("config.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"{admin}\"\ninstance_id = \"e1\"\n\
         drain_grace = \"{drain_grace}\"\n\n{}",
        support::fake_block("slow", "legacy", "")
    );
    std::fs::write(&cfg, text).unwrap();
    (
        support::inprocess::InProcess::start(&cfg, None).await,
        admin,
    )
}

/// Sends the first stop (SIGTERM) once the slow call runs at its upstream.
async fn stop_once_called(gw: &support::inprocess::InProcess) {
    eventually(
        "the slow call at its upstream",
        Duration::from_secs(10),
        || async { gw.app.router().upstreams()[0].active_calls() > 0 },
    )
    .await;
    gw.controls
        .send(mcp_edge::gateway::Control::Stop)
        .await
        .unwrap();
}

/// `GET /readyz`'s status, on the admin listener or on `listen` (for a
/// balancer or kubelet off the box: no credentials, no `Host` check).
async fn readyz(at: SocketAddr) -> u16 {
    request_at("GET", &format!("http://{at}/readyz"), &[], "")
        .await
        .status
}

#[tokio::test]
async fn sigterm_drains_then_refuses_what_comes_after() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, admin) = served(dir.path(), "5m").await;
    let addr = gw.addr;
    assert_eq!((readyz(admin).await, readyz(addr).await), (200, 200));
    let idle = legacy_session(addr, "2025-11-25").await;
    let busy = legacy_session(addr, "2025-11-25").await;
    // A slow call in flight on `busy` when SIGTERM comes.
    let args = json!({"name": "slow__slow_echo", "arguments": {"text": "done", "ms": 1500}});
    let slow = support::call(addr, &busy, json!(9), "tools/call", args);
    let drained = mcp_edge::metrics::read(mcp_edge::metrics::SESSIONS_EVICTED, "reason=\"drain\"");
    let meanwhile = async {
        stop_once_called(&gw).await;
        eventually("/readyz 503", Duration::from_secs(10), || async {
            readyz(admin).await == 503
        })
        .await;
        assert_eq!(readyz(addr).await, 503, "on listen too");
        // The idle session is told to initialize again at once.
        let r = support::call(addr, &idle, json!(1), "tools/list", json!({})).await;
        assert_eq!(r.status, 404, "{}", r.raw);
    };
    let (r, ()) = tokio::join!(slow, meanwhile);
    // The busy one's call finished, then it was told too.
    assert_eq!(support::text_of(&r), "slow:done", "{}", r.raw);
    let r = support::call(addr, &busy, json!(2), "tools/list", json!({})).await;
    assert_eq!(r.status, 404, "{}", r.raw);
    let now = mcp_edge::metrics::read(mcp_edge::metrics::SESSIONS_EVICTED, "reason=\"drain\"");
    assert!(now >= drained + 2.0, "{drained} → {now}");
    // Still serving: a new session, and modern calls, on new connections.
    let fresh = legacy_session(addr, "2025-11-25").await;
    assert_eq!(
        support::call(addr, &fresh, json!(3), "tools/list", json!({}))
            .await
            .status,
        200
    );
    assert_eq!(
        modern(addr, json!(4), "tools/list", json!({})).await.status,
        200
    );
    let status = mcp_edge::downstream::admin::status_for(&gw.app, false);
    assert_eq!(status["draining"], true);
    // A second stop ends the drain.
    gw.stop().await;
}

#[tokio::test]
async fn after_the_drain_a_kept_connection_is_refused_what_a_balancer_can_resend() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _admin) = served(dir.path(), "0s").await;
    let addr = gw.addr;
    let sid = legacy_session(addr, "2025-11-25").await;
    // Connections opened before the stop and kept alive by their client.
    let mut kept_modern = TcpStream::connect(addr).await.unwrap();
    let mut kept_legacy = TcpStream::connect(addr).await.unwrap();
    let args = json!({"name": "slow__slow_echo", "arguments": {"text": "done", "ms": 3000}});
    let slow = modern(addr, json!(9), "tools/call", args);
    let meanwhile = async {
        stop_once_called(&gw).await;
        // The drain grace is zero: shutdown begins at once and new
        // connections are no longer taken.
        eventually("the listener closed", Duration::from_secs(10), || async {
            TcpStream::connect(addr).await.is_err()
        })
        .await;
        let unclosed = |bytes: Vec<u8>| {
            String::from_utf8(bytes)
                .unwrap()
                .replace("Connection: close\r\n", "")
        };
        let modern_req = unclosed(http_post(&modern_call(1), MODERN_HEADERS));
        let r = answer(&mut kept_modern, modern_req.as_bytes()).await;
        assert!(r.starts_with("HTTP/1.1 503"), "{r}");
        let lower = r.to_ascii_lowercase();
        assert!(
            lower.contains("connection: close") && lower.contains("retry-after: 1"),
            "{r}"
        );
        let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let legacy_req = unclosed(http_post(&list, &format!("Mcp-Session-Id: {sid}\r\n")));
        let r = answer(&mut kept_legacy, legacy_req.as_bytes()).await;
        assert!(
            r.starts_with("HTTP/1.1 404"),
            "initialize again, elsewhere: {r}"
        );
    };
    let (r, ()) = tokio::join!(slow, meanwhile);
    assert_eq!(
        support::text_of(&r),
        "slow:done",
        "the call in flight finished: {}",
        r.raw
    );
    gw.stop().await;
}

/// Writes `req` on `s` and reads one answer (its head and what came with it).
async fn answer(s: &mut TcpStream, req: &[u8]) -> String {
    s.write_all(req).await.unwrap();
    let mut buf = vec![0u8; 16 * 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A call waiting for its client's answer (a sampling request relayed to
/// it) when SIGTERM comes: the answer still reaches the draining box, the
/// call finishes, and only then is its session told to initialize again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_its_clients_answer_finishes_in_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, admin) = served(dir.path(), "5m").await;
    let addr = gw.addr;
    let sid = support::legacy_session_with(addr, "2025-11-25", json!({"sampling": {}})).await;
    let call = json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
        "params": {"name": "slow__ask", "arguments": {"question": "2+2?"}}});
    let h = [("mcp-session-id", sid.as_str())];
    let mut rx = support::sse::open("POST", addr, &h, &call.to_string()).await;
    let req = rx.recv().await.expect("the relayed request").data;
    assert_eq!(req["method"], "sampling/createMessage", "{req}");
    gw.controls
        .send(mcp_edge::gateway::Control::Stop)
        .await
        .unwrap();
    eventually("/readyz 503", Duration::from_secs(10), || async {
        readyz(admin).await == 503
    })
    .await;
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"role": "assistant",
        "model": "m", "content": {"type": "text", "text": "four"}}});
    assert_eq!(post(addr, &h, &answer).await.status, 202);
    let fin = rx.recv().await.expect("the call's answer").data;
    assert_eq!(
        support::content_text(&fin),
        Some("client said: four"),
        "{fin}"
    );
    drop(rx);
    eventually(
        "the session ended after its call",
        Duration::from_secs(10),
        || async {
            support::call(addr, &sid, json!(2), "tools/list", json!({}))
                .await
                .status
                == 404
        },
    )
    .await;
    gw.stop().await;
}
