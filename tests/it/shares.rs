//! Issue 24 part 2, black-box against the real binary: a fair share per
//! client in every shared table. With three `[[client]]`s, client A holds
//! everything it can — sessions, GET streams, slow calls on two upstreams,
//! busy connections — and gets exactly every place but one kept for each
//! other client; B can still initialize, open a GET stream and call a tool,
//! each within a second, in every round (also when C takes its kept places
//! and B must evict A's idle session or end A's oldest stream); a session
//! with a call in flight is never evicted; a GET stream is charged to the
//! client's rate. Plus property tests of the share rule ([`mcp_edge::share`]),
//! a fixed number of cases each (printed, as in tests/properties.rs).
#![allow(clippy::disallowed_methods)] // the gateway is a child process; its clients are spawned tasks, in real time

use crate::support;

use crate::support::proptest_check::check;
use mcp_edge::share::{decide, Counts, Decision, Refusal, Shares};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::binary::{refused, sha256_hex, Running};
use support::{fake_block, free_port, post, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const A: &str = "mcpe_share-a-token-0123456789abcdefXYZ";
const B: &str = "mcpe_share-b-token-0123456789abcdefXYZ";
const C: &str = "mcpe_share-c-token-0123456789abcdefXYZ";
/// The generous bound on each of B's operations.
const SECOND: Duration = Duration::from_secs(1);
/// How long a wait on observable state may take before the test fails.
const EVENTUALLY: Duration = Duration::from_secs(20);

fn config(server: &str, clients: &[(&str, &str, &str)], upstreams: &str) -> String {
    let mut c = format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n{server}\n",
        free_port(),
        free_port()
    );
    for (name, token, extra) in clients {
        let digest = sha256_hex(token);
        c.push_str(&format!(
            "\n[[client]]\nname = \"{name}\"\ntoken_sha256 = \"{digest}\"\n{extra}\n"
        ));
    }
    c + "\n" + upstreams
}

/// Waits (polling observable state, at most [`EVENTUALLY`]) until `check` holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    support::eventually(what, EVENTUALLY, &mut check).await;
}

/// A gauge or counter without labels in a `/metrics` text (0 when absent).
fn metric(text: &str, name: &str) -> f64 {
    let prefix = format!("{name} ");
    (text.lines())
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// Upstream `name`'s calls being answered (`/status`).
async fn in_flight(gw: &Running, name: &str) -> u64 {
    let status = gw.status().await;
    let ups = status["upstreams"].as_array().unwrap();
    let up = ups.iter().find(|u| u["name"] == name).unwrap();
    up["in_flight"].as_u64().unwrap()
}

async fn connections(gw: &Running) -> f64 {
    metric(&gw.metrics().await, "mcp_edge_connections")
}

fn auth(token: &str) -> String {
    format!("Bearer {token}")
}

/// A refused `initialize`.
struct Refused(Reply);

impl std::fmt::Debug for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}: {}", self.0.status, self.0.raw)
    }
}

/// `initialize` as `token`'s client, then `notifications/initialized`:
/// the session id, or the refusal.
async fn initialize(addr: SocketAddr, token: &str) -> Result<String, Refused> {
    let a = auth(token);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}});
    let r = post(addr, &[("authorization", &a)], &init).await;
    if r.status != 200 {
        return Err(Refused(r));
    }
    let sid = r
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let n = post(
        addr,
        &[("authorization", &a), ("mcp-session-id", &sid)],
        &note,
    )
    .await;
    assert_eq!(n.status, 202, "{}", n.raw);
    Ok(sid)
}

/// A legacy request of `token`'s client in session `sid`.
async fn legacy(addr: SocketAddr, token: &str, sid: &str, body: Value) -> Reply {
    let h = [
        ("authorization", auth(token)),
        ("mcp-session-id", sid.to_string()),
        ("mcp-protocol-version", "2025-11-25".to_string()),
    ];
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    post(addr, &h, &body).await
}

/// A modern `tools/call` of `tool` by `token`'s client.
async fn modern_call(addr: SocketAddr, token: &str, id: u64, tool: &str, args: Value) -> Reply {
    let a = auth(token);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let h = [
        ("authorization", a.as_str()),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ];
    post(addr, &h, &body).await
}

/// A GET stream of session `sid`: the socket and the response head (the
/// body follows on the socket).
async fn open_get(addr: SocketAddr, token: &str, sid: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\
         Authorization: Bearer {token}\r\nMcp-Session-Id: {sid}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut buf).await {
            Ok(1) => head.push(buf[0]),
            _ => break,
        }
    }
    (s, String::from_utf8_lossy(&head).into_owned())
}

/// Reads an SSE body to its end: true when it ended cleanly (the chunked
/// body's last chunk), false if the connection broke first.
async fn ends_cleanly(s: &mut TcpStream) -> bool {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                all.extend_from_slice(&buf[..n]);
                if all.ends_with(b"0\r\n\r\n") {
                    return true;
                }
            }
        }
    }
}

fn status_of(head: &str) -> u16 {
    head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0)
}

fn message(r: &Reply) -> String {
    r.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `f`, which must finish within [`SECOND`]; its value and how long it took.
async fn within_a_second<T>(what: &str, f: impl Future<Output = T>) -> (T, Duration) {
    let t0 = Instant::now();
    let v = tokio::time::timeout(SECOND, f)
        .await
        .unwrap_or_else(|_| panic!("{what} took more than {SECOND:?}"));
    (v, t0.elapsed())
}

/// Sessions 8, connections 20 (so 10 stream places), upstream `slow` with 4
/// in-flight places and `wide` with 32; three clients of weight 1.
fn crowded_config() -> String {
    let calls = "call_timeout = \"600s\"";
    let upstreams = fake_block("slow", "legacy", &format!("max_in_flight = 4\n{calls}"))
        + &fake_block("wide", "legacy", &format!("max_in_flight = 32\n{calls}"));
    config(
        "session_capacity = 8\nmax_connections = 20",
        &[("a", A, ""), ("b", B, ""), ("c", C, "")],
        &upstreams,
    )
}

/// What A holds: its sessions, GET streams, calls in flight and the task
/// keeping its sessions warm.
struct Held {
    sessions: Vec<String>,
    streams: Vec<TcpStream>,
    calls: tokio::task::JoinSet<Reply>,
    warm: Option<tokio::task::JoinHandle<()>>,
}

/// A takes every session it can: all but one per other client (B, C).
async fn fill_sessions(gw: &Running) -> Vec<String> {
    let mut sessions = Vec::new();
    let refusal = loop {
        match initialize(gw.addr, A).await {
            Ok(sid) => sessions.push(sid),
            Err(r) => break r.0,
        }
        assert!(sessions.len() <= 8, "A took every session");
    };
    assert_eq!(
        sessions.len(),
        8 - 2,
        "sessions: all but one per other client"
    );
    assert_eq!(refusal.status, 503, "{}", refusal.raw);
    assert!(refusal.header("retry-after").is_some());
    assert!(
        message(&refusal).contains("session_share"),
        "{}",
        refusal.raw
    );
    assert_eq!(refusal.body["error"]["data"]["limit"], "session_share");
    sessions
}

/// A's GET streams, two on each of its sessions but the first two (which
/// stay stream-less and unpinged: its least recently used).
async fn fill_streams(gw: &Running, sessions: &[String]) -> Vec<TcpStream> {
    let mut streams = Vec::new();
    for sid in sessions[2..].iter().flat_map(|s| [s, s]) {
        let (s, head) = open_get(gw.addr, A, sid).await;
        assert_eq!(status_of(&head), 200, "{head}");
        streams.push(s);
    }
    assert_eq!(
        streams.len(),
        10 - 2,
        "streams: all but one per other client"
    );
    let (_, head) = open_get(gw.addr, A, &sessions[0]).await;
    assert_eq!(status_of(&head), 503, "{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after"), "{head}");
    streams
}

/// A's slow calls on `upstream`, one at a time (each seen in flight before
/// the next), until one is refused; returns the refusal.
async fn fill_calls(gw: &Running, held: &mut Held, upstream: &str) -> Reply {
    let tool = format!("{upstream}__slow_echo");
    for n in 1.. {
        let addr = gw.addr;
        let tool = tool.clone();
        let id = held.calls.len() as u64 + 1;
        held.calls.spawn(async move {
            modern_call(addr, A, id, &tool, json!({"text": "held", "ms": 600_000})).await
        });
        let mut done = None;
        eventually(&format!("{upstream} call {n} in flight or refused"), || {
            let calls = &mut held.calls;
            let seen = in_flight(gw, upstream);
            let finished = calls.try_join_next();
            let got = finished.is_some();
            if let Some(r) = finished {
                done = Some(r.unwrap());
            }
            async move { got || seen.await >= n }
        })
        .await;
        if let Some(r) = done {
            return r;
        }
    }
    unreachable!()
}

/// A takes everything it can, alone (B and C configured, idle), and gets
/// every place but one kept for each of them in every table.
async fn fill(gw: &Running) -> Held {
    let sessions = fill_sessions(gw).await;
    eventually("the initialize connections closed", || async {
        connections(gw).await == 0.0
    })
    .await;
    let streams = fill_streams(gw, &sessions).await;
    let mut held = Held {
        sessions,
        streams,
        calls: tokio::task::JoinSet::new(),
        warm: None,
    };
    let r = fill_calls(gw, &mut held, "slow").await;
    assert_eq!(
        in_flight(gw, "slow").await,
        4 - 2,
        "in flight: all but one per other client"
    );
    assert_eq!(r.error_code(), Some(-31002), "{}", r.raw);
    assert!(message(&r).contains("upstream_share"), "{}", r.raw);
    assert_eq!(r.body["error"]["data"]["retryAfterSeconds"], 1, "{}", r.raw);
    held.warm = Some(keep_warm(gw.addr, held.sessions[2..].to_vec()));
    eventually(
        "A's 8 streams, 2 calls and its pinging connection",
        || async { connections(gw).await == 11.0 },
    )
    .await;
    // Busy connections: those and the wide calls, all A's.
    let r = fill_calls(gw, &mut held, "wide").await;
    assert_eq!(r.status, 503, "{}", r.raw);
    assert!(message(&r).contains("connection_share"), "{}", r.raw);
    assert_eq!(r.header("retry-after"), Some("1"));
    let wide = in_flight(gw, "wide").await;
    assert_eq!(
        11 + wide,
        20 - 2,
        "connections: all but one per other client"
    );
    held
}

/// Pings A's sessions that hold streams, over and over, on one kept-alive
/// connection: they stay warm (the attack of the issue); results do not
/// matter (once the connection is closed for another client's, a new one
/// may be refused: A holds its share).
fn keep_warm(addr: SocketAddr, sessions: Vec<String>) -> tokio::task::JoinHandle<()> {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    tokio::spawn(async move {
        let client: Client<_, Full<bytes::Bytes>> =
            Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        let a = auth(A);
        for i in 0u64.. {
            for sid in &sessions {
                let ping = json!({"jsonrpc": "2.0", "id": i, "method": "ping"}).to_string();
                let h = [
                    ("authorization", a.as_str()),
                    ("mcp-session-id", sid.as_str()),
                ];
                let req = support::mcp_request("POST", addr, &h, &ping, true);
                if let Ok(r) = client.request(req).await {
                    let _ = r.into_body().collect().await;
                }
            }
            // not ordering: pacing the keep-warm load
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// B's round: initialize, a GET stream, a tool call, each within a second;
/// returns the stream and the three durations.
async fn b_round(gw: &Running, round: usize) -> (String, TcpStream, [Duration; 3]) {
    let (sid, t_init) = within_a_second("B's initialize", initialize(gw.addr, B)).await;
    let sid = sid.unwrap_or_else(|r| panic!("round {round}: B's initialize: {r:?}"));
    let ((stream, head), t_get) =
        within_a_second("B's GET stream", open_get(gw.addr, B, &sid)).await;
    assert_eq!(status_of(&head), 200, "round {round}: {head}");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "slow__echo", "arguments": {"text": "b"}}});
    let (r, t_call) = within_a_second("B's tools/call", legacy(gw.addr, B, &sid, call)).await;
    assert_eq!(
        r.body["result"]["content"][0]["text"], "slow:b",
        "round {round}: {}",
        r.raw
    );
    (sid, stream, [t_init, t_get, t_call])
}

/// The acceptance of issue 24 part 2: A holds everything it can, alone it
/// gets every place but one per other client; B's initialize, GET stream
/// and tool call each succeed within a second in every round — also when
/// C takes its kept places, so that B's initialize must evict A's least
/// recently used idle session (round 2) and B's stream must end A's
/// oldest stream (round 3, which ends cleanly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holding_everything_leaves_room_for_another() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Running::start(dir.path(), &crowded_config()).await;
    let mut held = fill(&gw).await;
    let mut c_sessions = Vec::new();
    let mut c_streams = Vec::new();
    let mut times = Vec::new();
    for round in 1..=3 {
        let m = gw.metrics().await;
        let (evicted, ended) = (
            series(&m, "mcp_edge_sessions_evicted_total{reason=\"share\"}"),
            refused(&m, "stream_evicted"),
        );
        if round == 2 {
            // C takes both places left: B must evict one of A's.
            for _ in 0..2 {
                c_sessions.push(initialize(gw.addr, C).await.expect("C is under its share"));
            }
        }
        if round == 3 {
            // C opens streams in both stream places left: B must end one of A's.
            for sid in &c_sessions {
                let (s, head) = open_get(gw.addr, C, sid).await;
                assert_eq!(status_of(&head), 200, "{head}");
                c_streams.push(s);
            }
        }
        let (sid, stream, t) = b_round(&gw, round).await;
        eprintln!(
            "round {round}: B's initialize {:?}, GET stream {:?}, tools/call {:?}",
            t[0], t[1], t[2]
        );
        times.push(t);
        let m = gw.metrics().await;
        let evicted_now = series(&m, "mcp_edge_sessions_evicted_total{reason=\"share\"}");
        assert_eq!(
            evicted_now > evicted,
            round == 2,
            "round {round}: an A session evicted"
        );
        assert_eq!(
            refused(&m, "stream_evicted") > ended,
            round == 3,
            "round {round}"
        );
        if round == 3 {
            let oldest = &mut held.streams[0];
            let clean = tokio::time::timeout(EVENTUALLY, ends_cleanly(oldest)).await;
            assert_eq!(clean.ok(), Some(true), "A's oldest stream ends cleanly");
        }
        // B leaves: its session (and with it its stream) ends.
        let del = support::request(
            "DELETE",
            gw.addr,
            &[("authorization", &auth(B)), ("mcp-session-id", &sid)],
            "",
        )
        .await;
        assert_eq!(del.status, 200, "{}", del.raw);
        drop(stream);
    }
    let m = gw.metrics().await;
    for limit in [
        "session_share",
        "stream_share",
        "upstream_share",
        "connection_share",
    ] {
        assert!(refused(&m, limit) > 0, "{limit} counted");
    }
    let worst = times.iter().flatten().max().unwrap();
    eprintln!("B's slowest operation while A held everything: {worst:?}");
    held.warm.take().unwrap().abort();
    held.calls.abort_all();
}

/// `name{labels}` (a whole series name) in a `/metrics` text, 0 when absent.
fn series(text: &str, name: &str) -> u64 {
    metric(text, name) as u64
}

/// A session with a call in flight is never evicted, however far over its
/// share its client is; once its call ends, it can be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_a_call_in_flight_is_never_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        "session_capacity = 4",
        &[("a", A, ""), ("b", B, ""), ("c", C, "")],
        &fake_block("slow", "legacy", "call_timeout = \"600s\""),
    );
    let gw = Running::start(dir.path(), &cfg).await;
    let addr = gw.addr;
    // A takes 2 of 4 (its share is 1.33; one kept for each of B and C).
    let a = [
        initialize(addr, A).await.unwrap(),
        initialize(addr, A).await.unwrap(),
    ];
    assert_eq!(initialize(addr, A).await.unwrap_err().0.status, 503);
    let mut calls = tokio::task::JoinSet::new();
    for (i, sid) in a.iter().enumerate() {
        let sid = sid.clone();
        let call = json!({"jsonrpc": "2.0", "id": "long", "method": "tools/call",
            "params": {"name": "slow__slow_echo", "arguments": {"text": "x", "ms": 600_000}}});
        calls.spawn(async move { (i, legacy(addr, A, &sid, call).await) });
    }
    eventually("both of A's calls in flight", || async {
        in_flight(&gw, "slow").await == 2
    })
    .await;
    let c = initialize(addr, C).await.unwrap();
    let b = initialize(addr, B).await.unwrap();
    // Full. B (1, under its 1.33) may only take from A (2, over): both busy.
    let r = initialize(addr, B).await.unwrap_err().0;
    assert_eq!(r.status, 503, "{}", r.raw);
    assert!(r.header("retry-after").is_some(), "{}", r.raw);
    assert!(message(&r).contains("session table full"), "{}", r.raw);
    assert_eq!(r.body["error"]["data"]["limit"], "session_capacity");
    let m = gw.metrics().await;
    assert_eq!(refused(&m, "session_capacity"), 1);
    for sid in a.iter().chain([&c, &b]) {
        let ping = legacy(
            addr,
            A,
            sid,
            json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
        );
        // A's own answer; the others' are 404 for A (not its sessions).
        let status = ping.await.status;
        assert!(
            status == 200 || (status == 404 && !a.contains(sid)),
            "{status}"
        );
    }
    // A cancels its first call: that session is idle again, and goes.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "long"}});
    assert_eq!(legacy(addr, A, &a[0], cancel).await.status, 202);
    let (i, answer) = calls.join_next().await.unwrap().unwrap();
    assert_eq!(
        (i, answer.body["error"]["code"].as_i64()),
        (0, Some(-32800)),
        "{}",
        answer.raw
    );
    let b2 = initialize(addr, B)
        .await
        .expect("A's idle session evicted for B");
    let ping = |sid: &str| {
        let sid = sid.to_string();
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
            legacy(addr, A, &sid, body).await
        }
    };
    assert_eq!(ping(&a[0]).await.status, 404, "the idle one went");
    assert_eq!(ping(&a[1]).await.status, 200, "the busy one stays");
    assert_eq!(in_flight(&gw, "slow").await, 1);
    let m = gw.metrics().await;
    assert_eq!(
        series(&m, "mcp_edge_sessions_evicted_total{reason=\"share\"}"),
        1
    );
    drop(b2);
    calls.abort_all();
}

/// A GET stream is charged to its client's rate when it opens (429 with
/// `Retry-After`, counted as `rate`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_stream_is_charged_to_the_rate() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        "",
        &[("a", A, "rate = \"2/m\"")],
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    );
    let gw = Running::start(dir.path(), &cfg).await;
    let sid = initialize(gw.addr, A).await.unwrap(); // 1 of 2
    let (_first, head) = open_get(gw.addr, A, &sid).await; // 2 of 2
    assert_eq!(status_of(&head), 200, "{head}");
    let (mut s, head) = open_get(gw.addr, A, &sid).await;
    assert_eq!(status_of(&head), 429, "{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after"), "{head}");
    let mut body = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&body).contains('}') {
        match tokio::time::timeout(EVENTUALLY, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => body.extend_from_slice(&buf[..n]),
            other => panic!("no body: {other:?}"),
        }
    }
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("-31008"), "{body}");
    assert_eq!(refused(&gw.metrics().await, "rate"), 1);
}

// ---- properties of the rule ----

/// 1 to 6 clients (owner marks 1, 3, 5, …) with weights 1 to 5.
fn clients() -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec(1u32..=5, 1..=6).prop_map(|w| {
        w.into_iter()
            .enumerate()
            .map(|(i, w)| (2 * i as u64 + 1, w))
            .collect()
    })
}

/// A client alone takes places until refused: it gets every place but one
/// per other client (each under its share with none), or its own share
/// if that is more; never more than the table.
#[test]
fn a_client_alone_gets_all_but_one_place_per_other_client_512_cases() {
    let s = (clients(), 1usize..=64, any::<prop::sample::Index>());
    check("alone", 512, s, |(clients, capacity, pick)| {
        let who = clients[pick.index(clients.len())].0;
        let shares = Shares::new(clients.clone());
        let mut counts = Counts::new();
        let mut got = 0;
        while let Decision::Take = decide(&shares, capacity, got, &counts, who, |_| false) {
            counts.add(who);
            got += 1;
            prop_assert!(got <= capacity);
        }
        let total: u64 = clients.iter().map(|(_, w)| u64::from(*w)).sum();
        let w = u64::from(shares.weight(who));
        // The smallest count at or over its share (capacity × w / total).
        let share = (capacity as u64 * w).div_ceil(total) as usize;
        let expect = (capacity - (clients.len() - 1).min(capacity))
            .max(share)
            .min(capacity);
        prop_assert_eq!(got, expect);
        Ok(())
    });
}

/// A table state: the clients, the capacity, what each holds, places
/// nobody holds, whether each has an idle place, and who asks.
type State = (Vec<(u64, u32)>, usize, Vec<u32>, usize, Vec<bool>, usize);

/// Any table state.
fn states() -> impl Strategy<Value = State> {
    (clients(), 1usize..=48).prop_flat_map(|(clients, capacity)| {
        let n = clients.len();
        (
            Just(clients),
            Just(capacity),
            prop::collection::vec(0u32..=capacity as u32, n),
            0usize..=capacity,
            prop::collection::vec(any::<bool>(), n),
            0..n,
        )
    })
}

/// Whatever the state: a client under its share gets a place when one is
/// free, or when a client over its share has an idle one (then from the
/// furthest over of those); nothing busy is ever taken; a client at or
/// over its share never takes one of the places kept for the others.
#[test]
fn the_rule_keeps_room_and_never_takes_a_busy_place_2048_cases() {
    check(
        "rule",
        2048,
        states(),
        |(clients, capacity, held, unheld, idle, who)| {
            let shares = Shares::new(clients.clone());
            let mut counts = Counts::new();
            let mut sum = 0usize;
            for (i, (m, _)) in clients.iter().enumerate() {
                // Scale the holdings so they fit the table.
                let n = (held[i] as usize).min(capacity - sum);
                for _ in 0..n {
                    counts.add(*m);
                }
                sum += n;
            }
            let used = (sum + unheld).min(capacity);
            let is_idle = |m: u64| {
                clients
                    .iter()
                    .position(|(c, _)| *c == m)
                    .is_some_and(|i| idle[i] && counts.get(m) > 0)
            };
            let me = clients[who].0;
            let excess = |m: u64| shares.excess(m, counts.get(m), capacity);
            let free = capacity - used;
            let d = decide(&shares, capacity, used, &counts, me, is_idle);
            if let Decision::TakeFrom(v) = d {
                prop_assert!(is_idle(v), "took a busy place of {}", v);
            }
            if excess(me) < 0 {
                let over_idle: Vec<u64> = (clients.iter().map(|(m, _)| *m))
                    .filter(|&m| m != me && excess(m) > 0 && is_idle(m))
                    .collect();
                if free > 0 {
                    prop_assert_eq!(d, Decision::Take);
                } else if let Some(&top) = over_idle.iter().max_by_key(|&&m| excess(m)) {
                    match d {
                        Decision::TakeFrom(v) => prop_assert_eq!(excess(v), excess(top)),
                        other => prop_assert!(false, "under its share, refused: {:?}", other),
                    }
                }
            } else {
                let kept = (clients.iter().map(|(m, _)| *m))
                    .filter(|&m| m != me && excess(m) < 0)
                    .count();
                match d {
                    Decision::Take => prop_assert!(free > kept),
                    Decision::TakeFrom(v) => {
                        prop_assert_eq!(v, me, "over its share, took another's")
                    }
                    Decision::Refuse(Refusal::Share) => prop_assert!(kept > 0),
                    Decision::Refuse(Refusal::Full) => prop_assert!(kept == 0 && free == 0),
                }
            }
            Ok(())
        },
    );
}
