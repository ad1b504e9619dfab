//! Live heap depends on concurrent work, never on cumulative work: measured
//! with the test binary's counting allocator, in virtual time (the burst
//! tests: over sockets, in real time). Each test runs alone in its process
//! (`support::heap`): nextest gives it one, `cargo test` a child process.

use crate::support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcp_edge::alloc::live_bytes;
use mcp_edge::config::Config;
use mcp_edge::downstream::endpoint;
use mcp_edge::gateway::Gateway;
use serde_json::{json, Value};
use std::time::Duration;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

async fn gateway(capacity: usize) -> Gateway {
    let mut c = Config::embedded_default();
    c.server.listen = "127.0.0.1:0".parse().unwrap();
    c.server.admin_listen = None;
    c.server.session_capacity = capacity;
    c.server.session_idle_timeout = Duration::from_secs(60);
    c.server.session_min_idle_before_evict = Duration::from_secs(1);
    let gw = Gateway::start(c).await.unwrap();
    gw.wait_upstreams(Duration::from_secs(5)).await;
    gw
}

/// One request through the endpoint (no socket); returns status, session header and body.
async fn send(
    gw: &Gateway,
    method: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, Option<String>, Bytes) {
    let mut b = http::Request::builder()
        .method(method)
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let resp = endpoint::handle(gw.app().clone(), req).await;
    let status = resp.status().as_u16();
    let sid = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, sid, bytes)
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "churn", "version": "1"}}})
}

#[test]
fn a_million_initializes_keep_table_and_heap_bounded() {
    if !crate::alone!(a_million_initializes_keep_table_and_heap_bounded) {
        return;
    }
    runtime().block_on(async {
        let capacity = 256;
        let gw = gateway(capacity).await;
        for _ in 0..2_000 {
            send(&gw, "POST", &[], &initialize()).await;
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        let baseline = live_bytes();
        let per_session = gw.app().sessions().footprint_bytes() / capacity;
        let (mut ok, mut full) = (0u32, 0u32);
        for i in 0..1_000_000u32 {
            match send(&gw, "POST", &[], &initialize()).await.0 {
                200 => ok += 1,
                503 => full += 1,
                s => panic!("unexpected status {s}"),
            }
            if i % 100 == 99 {
                // 100 initializes per virtual second: the LRU session is always
                // idle ≥ 1 s (min_idle_before_evict) by the time the table is full.
                tokio::time::advance(Duration::from_millis(1000)).await;
            }
            assert!(gw.app().sessions().count().0 <= capacity);
        }
        let live = live_bytes();
        let bound = baseline + capacity * per_session + (1 << 20);
        println!("1,000,000 initializes: {ok} ok, {full} refused (503); live heap {baseline} -> {live} bytes (bound {bound}); {per_session} bytes per slot");
        assert!(live <= bound, "live heap {live} > bound {bound}");
        assert_eq!(ok + full, 1_000_000);
        assert!(ok > 990_000, "LRU eviction should make room: only {ok} succeeded");
    });
}

#[test]
fn delete_and_idle_timeout_give_the_heap_back() {
    if !crate::alone!(delete_and_idle_timeout_give_the_heap_back) {
        return;
    }
    runtime().block_on(async {
        let gw = gateway(4096).await;
        for _ in 0..500 {
            let (_, sid, _) = send(&gw, "POST", &[], &initialize()).await;
            send(&gw, "DELETE", &[("mcp-session-id", &sid.unwrap())], &json!(null)).await;
        }
        let baseline = live_bytes();
        // Half deleted at once, half abandoned.
        let mut kept = Vec::new();
        for i in 0..4_000 {
            let (status, sid, _) = send(&gw, "POST", &[], &initialize()).await;
            assert_eq!(status, 200);
            let sid = sid.unwrap();
            if i % 2 == 0 {
                let (s, _, _) = send(&gw, "DELETE", &[("mcp-session-id", &sid)], &json!(null)).await;
                assert_eq!(s, 200);
            } else {
                kept.push(sid);
            }
        }
        assert_eq!(gw.app().sessions().count().0, 2_000);
        let after_churn = live_bytes();
        drop(kept); // the test's own copies of the ids
        // not ordering: 121 s of virtual time, the idle timeout and one sweep period
        tokio::time::sleep(Duration::from_secs(61 + 60)).await;
        let residue = live_bytes() as i64 - baseline as i64;
        println!("baseline {baseline}, after churn {after_churn}, after idle timeout {} (residue {residue} bytes)", live_bytes());
        assert_eq!(gw.app().sessions().count().0, 0, "every abandoned session expired");
        assert!(residue.abs() <= 16 * 1024, "residue {residue} bytes");
    });
}

/// Modern stateless calls retain nothing, with no time passing at all
/// (virtual time stands still): nothing waits for a timer or an upkeep to
/// give memory back. (Before the request-duration histogram was kept in
/// fixed atomic buckets, the exporter queued a sample per request, about
/// 16 B, until an upkeep every 5 s; this test then had to sleep past it.)
#[test]
fn modern_requests_retain_nothing() {
    if !crate::alone!(modern_requests_retain_nothing) {
        return;
    }
    runtime().block_on(async {
        // With the Prometheus recorder, as the binary runs: every request
        // counts itself and records its duration.
        mcp_edge::metrics::prometheus();
        let gw = gateway(16).await;
        let call = json!({"jsonrpc": "2.0", "id": "m", "method": "tools/call", "params": {"name": "edge__load_average",
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
        let h = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "edge__load_average")];
        for _ in 0..200 {
            assert_eq!(send(&gw, "POST", &h, &call).await.0, 200);
        }
        let (t0, baseline) = (tokio::time::Instant::now(), live_bytes());
        let mut deltas = Vec::new();
        for _ in 0..4 {
            for _ in 0..5_000 {
                let (status, sid, body) = send(&gw, "POST", &h, &call).await;
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                assert!(sid.is_none());
            }
            deltas.push(live_bytes() as i64 - baseline as i64);
        }
        println!("modern tools/call, live heap delta after each 5,000: {deltas:?} bytes");
        assert_eq!(t0.elapsed(), Duration::ZERO, "no virtual time passed");
        assert!(
            deltas.iter().all(|d| d.abs() <= 16 * 1024),
            "live heap not back to the baseline ± 16 KiB: {deltas:?} bytes"
        );
        assert!((gw.app().sessions().count().0 == 0));
    });
}

/// The task table (issue 13 part 5) holds its capacity when filled —
/// one more is refused and counted — and drains to empty once its tasks
/// expire, its heap back to the baseline (the upstream ids are the only
/// per-entry heap; the slots are allocated with the table).
///
/// The whole cycle (fill, refuse, expire) runs once before the baseline is
/// read, so whatever it allocates once and keeps (a metric's first use, the
/// timer wheel's first far deadline) is in the baseline; and nothing is
/// printed between two readings (libtest's output capture grows its buffer
/// on a `println!`, which the counting allocator would see as a residue):
/// the figures are gathered in a buffer sized before the baseline and
/// printed at the end.
#[test]
fn the_task_table_holds_its_capacity_and_drains_after_expiry() {
    use mcp_edge::tasks::Tasks;
    if !crate::alone!(the_task_table_holds_its_capacity_and_drains_after_expiry) {
        return;
    }
    runtime().block_on(async {
        mcp_edge::metrics::prometheus();
        let capacity = mcp_edge::limits::TASKS_CAPACITY;
        let tasks = Tasks::new(capacity);
        task_table_cycle(&tasks, capacity).await; // warm-up, not measured
        let mut figures: Vec<(i64, i64)> = Vec::with_capacity(3);
        let baseline = live_bytes();
        for _ in 0..3 {
            let full = task_table_cycle(&tasks, capacity).await;
            let residue = live_bytes() as i64 - baseline as i64;
            figures.push((full - baseline as i64, residue));
        }
        println!("task table after the warm-up cycle, (full, after expiry) bytes over the baseline per round: {figures:?}");
        for (round, (full, residue)) in figures.into_iter().enumerate() {
            assert!(full > 0 && full <= (capacity * 64) as i64, "round {round}: full +{full} bytes");
            assert_eq!(residue, 0, "round {round}: heap back to the baseline");
        }
    });
}

/// Fills `tasks` to `capacity`, checks that one more is refused, lets every
/// task expire; returns the live heap while full.
async fn task_table_cycle(tasks: &mcp_edge::tasks::Tasks, capacity: usize) -> i64 {
    use mcp_edge::tasks::{Status, TasksError};
    let keep = Duration::from_secs(60);
    let now = tokio::time::Instant::now();
    for i in 0..capacity {
        let id = format!("{i:08}-upstream-task-id-of-some-typical-length");
        tasks.insert(1, &id, 7, Status::Working, keep, now).unwrap();
    }
    let full = live_bytes() as i64;
    assert_eq!(tasks.len(), capacity);
    assert_eq!(
        tasks.insert(1, "one-more", 7, Status::Working, keep, now),
        Err(TasksError::Full { capacity })
    );
    assert_eq!(tasks.len(), capacity, "holds its capacity");
    tokio::time::sleep(keep).await; // not ordering: the tasks' virtual lifetime passes
    assert_eq!(tasks.expire(tokio::time::Instant::now()), capacity);
    assert!(tasks.is_empty());
    full
}

/// A keep-alive HTTP/1.1 connection to a served gateway, with the headers
/// every request on it carries (its session, its era).
struct Conn {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    headers: Vec<(&'static str, String)>,
}

impl Conn {
    #[allow(clippy::disallowed_methods)] // the client connection's driver is a task of the test's runtime
    async fn open(addr: std::net::SocketAddr) -> Conn {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let io = hyper_util::rt::TokioIo::new(tcp);
        let (send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        Conn {
            send,
            headers: Vec::new(),
        }
    }

    /// POSTs `body` to `/mcp` with this connection's headers and `extra`;
    /// returns the status, the session header and the body.
    async fn post(&mut self, extra: &[(&str, &str)], body: &Value) -> (u16, Option<String>, Bytes) {
        let mut b = http::Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (k, v) in &self.headers {
            b = b.header(*k, v.as_str());
        }
        for (k, v) in extra {
            b = b.header(*k, *v);
        }
        let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
        self.send.ready().await.unwrap();
        let resp = self.send.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        let sid = resp
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_string());
        (
            status,
            sid,
            resp.into_body().collect().await.unwrap().to_bytes(),
        )
    }
}

/// Opens `n` connections; legacy ones each open (and initialize) a session
/// of their own, modern ones carry the 2026-07-28 headers.
async fn connections(addr: std::net::SocketAddr, n: usize, modern: bool) -> Vec<Conn> {
    let mut conns = Vec::new();
    for _ in 0..n {
        let mut c = Conn::open(addr).await;
        if modern {
            c.headers = vec![
                ("mcp-protocol-version", "2026-07-28".into()),
                ("mcp-method", "tools/call".into()),
            ];
        } else {
            let (status, sid, body) = c.post(&[], &initialize()).await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            c.headers = vec![
                ("mcp-session-id", sid.unwrap()),
                ("mcp-protocol-version", "2025-11-25".into()),
            ];
            let (status, _, _) = c
                .post(
                    &[],
                    &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                )
                .await;
            assert_eq!(status, 202);
        }
        conns.push(c);
    }
    conns
}

/// `per_conn` `tools/call`s on each connection, the connections side by
/// side; ids from `first`, one of its own for each request. Calls alternate
/// between the built-in `edge` upstream and the stdio fake; every answer
/// must be a result.
async fn burst(conns: &mut [Conn], modern: bool, first: u64, per_conn: u64) {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let runs = conns.iter_mut().enumerate().map(|(c, conn)| {
        let meta = &meta;
        async move {
            for k in 0..per_conn {
                let id = first + c as u64 * per_conn + k;
                let (tool, args) = if id.is_multiple_of(2) {
                    ("edge__load_average", json!({}))
                } else {
                    ("fake__echo", json!({"text": "burst"}))
                };
                let mut params = json!({"name": tool, "arguments": args});
                let mut extra = Vec::new();
                if modern {
                    params["_meta"] = meta.clone();
                    extra.push(("mcp-name", tool));
                }
                let body =
                    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
                let (status, _, answer) = conn.post(&extra, &body).await;
                let text = String::from_utf8_lossy(&answer);
                assert!(
                    status == 200 && text.contains("\"result\""),
                    "{status} {text}"
                );
            }
        }
    });
    futures_util::future::join_all(runs).await;
}

/// Live heap against `baseline` now and, polled every 10 ms, once it is
/// back within ± 16 KiB or ten seconds have passed: (delta now, delta at
/// the end of the poll, time polled). (Within a second when the machine is
/// not loaded; the bound is ten, so a busy machine cannot fail the test by
/// speed: what it holds is that the heap comes back.)
async fn settle(baseline: i64) -> (i64, i64, Duration) {
    let start = tokio::time::Instant::now();
    let deadline = start + Duration::from_secs(10);
    let at_start = live_bytes() as i64 - baseline;
    loop {
        let delta = live_bytes() as i64 - baseline;
        let now = tokio::time::Instant::now();
        if delta.abs() <= 16 * 1024 || now >= deadline {
            return (at_start, delta, now - start);
        }
        // not ordering: the poll interval of the heap reading (a tokio timer allocates nothing)
        tokio::time::sleep((deadline - now).min(Duration::from_millis(10))).await;
    }
}

/// Issue 14's acceptance: live heap after 10,000 requests in a burst is
/// back to the pre-burst baseline ± 16 KiB within one second (bounded at
/// ten here, see [`settle`]) — polled, with
/// no sleep past a metrics upkeep (there is none) — for an in-process
/// gateway served on a socket, with the Prometheus recorder installed as
/// the binary has it. It is checked after every 2,000 of the 10,000 too:
/// before the request-duration histogram was kept in fixed atomic buckets,
/// the exporter held each request's sample (about 16 B) until its upkeep
/// every 5 s, so what was left depended on when that last ran; of five
/// checks, some fall long after it.
fn burst_leaves_no_heap_behind(modern: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        mcp_edge::metrics::prometheus();
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("burst.toml");
        let fake = support::fake_block("fake", "legacy", "");
        let text = format!("[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n\n{fake}\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n");
        std::fs::write(&cfg, text).unwrap();
        let gw = support::inprocess::InProcess::start(&cfg, None).await;
        // 8 connections side by side, 250 calls each: 2,000 per slice.
        let mut c = connections(gw.addr, 8, modern).await;
        burst(&mut c, modern, 1, 250).await; // warm-up: a slice of the same shape
        let baseline = support::heap::settled_live().await as i64;
        let mut checks = Vec::new();
        for slice in 0..5 {
            burst(&mut c, modern, 1_000_000 + slice * 2_000, 250).await;
            checks.push(settle(baseline).await);
        }
        let era = if modern { "modern" } else { "legacy" };
        println!("{era}: live heap vs the pre-burst baseline {baseline} B after each 2,000 of 10,000 calls (as the slice ended, after polling, time polled): {checks:?}");
        for (n, (_, delta, _)) in checks.iter().enumerate() {
            let calls = 2_000 * (n + 1);
            assert!(delta.abs() <= 16 * 1024, "{era}: live heap {delta:+} B off the baseline ten seconds after {calls} calls: {checks:?}");
        }
        drop(c);
        gw.stop().await;
    });
}

#[test]
fn a_burst_of_legacy_calls_leaves_no_heap_behind() {
    if crate::alone!(a_burst_of_legacy_calls_leaves_no_heap_behind) {
        burst_leaves_no_heap_behind(false);
    }
}

#[test]
fn a_burst_of_modern_calls_leaves_no_heap_behind() {
    if crate::alone!(a_burst_of_modern_calls_leaves_no_heap_behind) {
        burst_leaves_no_heap_behind(true);
    }
}
