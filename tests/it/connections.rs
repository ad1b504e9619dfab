//! Connections that send nothing, or half a request head, cannot lock
//! clients out (issue 12, part 2): the `max_connections` places go to
//! requests first; an address holds at most `max_connections_per_peer` of
//! them; each connection closed or refused for that is counted in
//! `mcp_edge_refused_total` (`idle_connections`, `peer_connections`).

#![allow(clippy::disallowed_methods)] // real sockets and a child process, in real time; tests spawn concurrent clients

use crate::support;
use crate::support::binary::{refused, Running};
use crate::support::*;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Keeps `n` connections open against `addr`, re-opening each as the
/// gateway closes it: a third send nothing, a third half a request head, a
/// third a whole head announcing a body of which they send one byte. They
/// come from eight loopback addresses (127.0.0.10–17).
/// Counts connections opened. Ends when the returned handle is aborted.
fn hold_connections(
    addr: SocketAddr,
    n: usize,
    opened: Arc<AtomicUsize>,
) -> tokio::task::JoinSet<()> {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let opened = opened.clone();
        set.spawn(async move {
            loop {
                let source = [127, 0, 0, 10 + (i % 8) as u8];
                let Ok(mut s) = try_connect_from(source, addr).await else {
                    // not ordering: the attacker's pause before it connects again
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                opened.fetch_add(1, Ordering::Relaxed);
                let sends: &[u8] = match i % 3 {
                    0 => b"",
                    1 => b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty",
                    _ => {
                        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                           Content-Type: application/json\r\nContent-Length: 900\r\n\r\n{"
                    }
                };
                let _ = s.write_all(sends).await;
                let mut buf = [0u8; 512];
                // Until the gateway closes it (EOF or reset).
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            }
        });
    }
    set
}

/// The acceptance test: 1,000 silent or half-sent connections (heads, or
/// bodies), re-opened as they are closed, against the default limits (256
/// places). A new client still initializes and calls a tool, each request
/// answered well before any held connection could have timed out
/// (`limits::HEADER_READ_TIMEOUT`, 10 s; a body, 30 s): before this, such a
/// client waited 3–10 s per request with 300 sockets, and timed out with
/// 1,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_half_sent_connections_cannot_lock_a_client_out() {
    let dir = tempfile::tempdir().unwrap();
    let gw = default_gateway(dir.path()).await;
    let opened = Arc::new(AtomicUsize::new(0));
    let mut attack = hold_connections(gw.addr, 1000, opened.clone());
    // Every held connection open at least once (its connect completed:
    // accepted, or waiting in the listen backlog), and the gateway's table
    // full: it closes held connections to admit others.
    let all_open = || match opened.load(Ordering::Relaxed) {
        1000.. => Ok(()),
        n => Err(format!("{n} opened")),
    };
    eventually_sync(
        "1,000 held connections opened",
        Duration::from_secs(60),
        all_open,
    )
    .await;
    let closing = || async {
        let n = refused(&gw.metrics().await, "idle_connections");
        (n > 0).then_some(n)
    };
    let what = "held connections closed to admit others (refused{idle_connections} > 0)";
    let before = eventually(what, Duration::from_secs(30), closing).await;
    // The bound is the header timeout less a margin: a client admitted only
    // when a held connection times out would take at least 10 s.
    let bound = mcp_edge::limits::HEADER_READ_TIMEOUT - Duration::from_secs(2);
    // Under qemu-user (tests/arm.sh sets the runner) everything is ten
    // times slower and the figure means nothing: one exchange a round.
    let exchanges = match std::env::var_os("MCP_EDGE_TEST_RUNNER") {
        Some(_) => 1,
        None => 10,
    };
    for round in 0..3 {
        // The kernel queues every held socket (the listen backlog,
        // `limits::LISTEN_BACKLOG`): no connect is left to a SYN
        // retransmission, which comes after 1 s (issue 24: with a backlog
        // of 128, exchanges waited 1 s, 3 s, 6 s for their connects).
        for _ in 0..10 {
            let t0 = std::time::Instant::now();
            drop(TcpStream::connect(gw.addr).await.unwrap());
            let connect = t0.elapsed();
            assert!(
                connect < Duration::from_secs(1),
                "round {round}: connect took {connect:?}"
            );
        }
        // Ten good client exchanges (initialize, initialized, tools/call),
        // one after another; their times are printed (issue 24's acceptance
        // figure: each under 3 s), the bound asserted is the behaviour's.
        let mut took = Vec::new();
        for _ in 0..exchanges {
            let t0 = std::time::Instant::now();
            let sid = tokio::time::timeout(bound, legacy_session(gw.addr, "2025-11-25"))
                .await
                .unwrap_or_else(|_| panic!("round {round}: initialize waited {bound:?}"));
            let r = tokio::time::timeout(
                bound,
                call_tool(gw.addr, &sid, json!(1), "edge__uptime", json!({})),
            )
            .await
            .unwrap_or_else(|_| panic!("round {round}: tools/call waited {bound:?}"));
            assert_eq!(r.status, 200, "{}", r.raw);
            assert!(r.body["result"]["content"].is_array(), "{}", r.raw);
            took.push(t0.elapsed());
        }
        let ms: Vec<u128> = took.iter().map(Duration::as_millis).collect();
        eprintln!("round {round}: {exchanges} exchange(s) (initialize, initialized, tools/call), ms: {ms:?}");
    }
    // The premise: the table was full, held connections being closed to
    // admit others all along.
    let m = gw.metrics().await;
    assert!(refused(&m, "idle_connections") > before);
    attack.abort_all();
    drop(attack);
    eprintln!(
        "held connections opened: {}, closed to admit others: {}",
        opened.load(Ordering::Relaxed),
        refused(&m, "idle_connections")
    );
}

async fn try_connect_from(source: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind((source, 0).into())?;
    s.connect(to).await
}

/// Opens a connection from `source` (a loopback address of its own, so
/// the gateway sees another peer).
async fn connect_from(source: [u8; 4], to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind((source, 0).into()).unwrap();
    s.connect(to).await.unwrap()
}

/// A GET stream of session `sid`, opened from `source`: a busy connection.
async fn stream_from(source: [u8; 4], to: SocketAddr, sid: &str) -> TcpStream {
    let mut s = connect_from(source, to).await;
    let req = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\
         Mcp-Session-Id: {sid}\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "stream closed: {head:?}");
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// Reads what the gateway sends before closing `s` (within 10 s).
async fn read_to_close(mut s: TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the gateway closes it")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

/// One address over its share: its connection idle for the grace period
/// yields to its new one; with all its connections busy, a new one is
/// refused with a readable 503 naming the key; another address still gets
/// in. All counted.
#[tokio::test]
async fn one_address_holds_only_its_share() {
    mcp_edge::metrics::prometheus();
    let gw = start(
        "max_connections = 6\nmax_connections_per_peer = 2",
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let addr = gw.local_addr();
    let peer_refusals =
        || mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"peer_connections\"");
    let before = peer_refusals();
    let mut sids = Vec::new();
    for _ in 0..3 {
        sids.push(legacy_session(addr, "2025-11-25").await);
    }
    let busy = stream_from([127, 0, 0, 2], addr, &sids[0]).await;
    let idle = connect_from([127, 0, 0, 2], addr).await;
    let accepted = || sockets::accept_queue(addr) == Some(0);
    eventually_sync(
        "the idle connection accepted",
        Duration::from_secs(10),
        accepted,
    )
    .await;
    // Once the idle one has sat out its grace, it is closed to admit a
    // third from .2 (before that, the third would be refused: unit tests).
    // not ordering: the idle connection must sit out the grace the gateway measures from its accept
    tokio::time::sleep(mcp_edge::limits::CONNECTION_YIELD_GRACE + Duration::from_millis(50)).await;
    let _busy2 = stream_from([127, 0, 0, 2], addr, &sids[1]).await;
    assert_eq!(
        read_to_close(idle).await,
        "",
        "the idle connection is closed, unanswered"
    );
    assert!(peer_refusals() >= before + 1.0);
    // Now .2 holds two busy streams: a new one is refused with 503.
    let refused = connect_from([127, 0, 0, 2], addr).await;
    let text = read_to_close(refused).await;
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("max_connections_per_peer"), "{text}");
    assert!(peer_refusals() >= before + 2.0);
    // Another address is not affected.
    let other = stream_from([127, 0, 0, 3], addr, &sids[2]).await;
    drop((busy, other));
}

/// A legacy `ping` in session `sid` as raw HTTP/1.1 (kept alive).
fn ping_request(sid: &str) -> (String, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {sid}\r\n\
         Mcp-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    (head, body)
}

/// Reads one response from `s`: its head, then its `Content-Length` or
/// chunked body.
async fn read_response(s: &mut TcpStream) -> String {
    let mut text = Vec::new();
    let mut b = [0u8; 1];
    while !text.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "closed: {text:?}");
        text.push(b[0]);
    }
    let head = String::from_utf8_lossy(&text).to_ascii_lowercase();
    if head.contains("transfer-encoding: chunked") {
        while !text.ends_with(b"\r\n0\r\n\r\n") {
            assert_eq!(s.read(&mut b).await.unwrap(), 1, "closed: {text:?}");
            text.push(b[0]);
        }
    } else {
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.unwrap();
        text.extend(body);
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Every place busy (a GET stream, a slow tool call): a new connection is
/// neither refused nor lets anything be closed; it waits. Once the call is
/// answered — its whole response sent — and the connection has sat idle for
/// the grace period, it is closed for the waiting one, which is answered:
/// after the call's answer, never before.
#[tokio::test]
async fn a_connection_waits_while_every_place_is_busy() {
    mcp_edge::metrics::prometheus();
    let marks = support::marks::Marks::new();
    let gw = start("max_connections = 2", &marks.fake_block("f", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let _stream = stream_from([127, 0, 0, 4], addr, &sid).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "f__slow_echo", "arguments": {"text": "done", "ms": 2000}}})
    .to_string();
    let mut slow = connect_from([127, 0, 0, 5], addr).await;
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {sid}\r\n\
         Mcp-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{call}",
        call.len()
    );
    slow.write_all(req.as_bytes()).await.unwrap();
    marks.called("slow_echo", 1).await; // both places busy now
    let (head, body) = ping_request(&sid);
    let mut s = connect_from([127, 0, 0, 6], addr).await;
    s.write_all(format!("{head}{body}").as_bytes())
        .await
        .unwrap();
    let mut waiting = tokio::spawn(async move { read_response(&mut s).await });
    let answer = tokio::select! {
        biased;
        answer = read_response(&mut slow) => answer,
        early = &mut waiting => panic!("answered while every place was busy: {early:?}"),
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("done"),
        "the whole answer arrived: {answer}"
    );
    let text = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("admitted once a place was idle")
        .unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let length = text.to_ascii_lowercase().contains("content-length:");
    assert!(length, "the busy mark keeps Content-Length: {text}");
    assert_eq!(
        read_to_close(slow).await,
        "",
        "the idle one was closed for it"
    );
}

/// A request whose body is still arriving holds no place against others:
/// with the one place taken by a head announcing 900 bytes of which one
/// came, a new client is answered once the grace period has passed, and the
/// slow one is dropped unanswered.
#[tokio::test]
async fn a_body_sent_slowly_yields_its_place() {
    mcp_edge::metrics::prometheus();
    let gw = start("max_connections = 1", EDGE_BLOCK).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let (head, body) = ping_request(&sid);
    let mut dripping = connect_from([127, 0, 0, 7], addr).await;
    let partial = head.replace(
        &format!("Content-Length: {}", body.len()),
        "Content-Length: 900",
    );
    dripping
        .write_all(format!("{partial}{{").as_bytes())
        .await
        .unwrap();
    let (server, client) = (addr, dripping.local_addr().unwrap());
    let read = || sockets::unread(server, client) == Some(0);
    eventually_sync(
        "the gateway read the dripping head",
        Duration::from_secs(10),
        read,
    )
    .await;
    let mut s = connect_from([127, 0, 0, 8], addr).await;
    s.write_all(format!("{head}{body}").as_bytes())
        .await
        .unwrap();
    let text = tokio::time::timeout(Duration::from_secs(10), read_response(&mut s))
        .await
        .expect("answered long before the body timeout (30 s)");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(read_to_close(dripping).await, "", "dropped unanswered");
}

const EDGE_BLOCK: &str = "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n";

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// 256 connections at once, each sending 390 KiB of request head that never
/// ends: each gets 431 once its head passes `limits::MAX_REQUEST_HEAD_BYTES`
/// (32 KiB) and is closed, and the gateway's peak RSS (`VmHWM`) stays under
/// 32 MiB (before the cap: 111 MiB). Under a test runner (qemu-user) the
/// RSS is the emulator's, so only its growth is bounded there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_request_heads_cost_little_memory() {
    let dir = tempfile::tempdir().unwrap();
    let gw = default_gateway(dir.path()).await;
    let (pid, addr) = (gw.pid() as u32, gw.addr);
    let before_kib = status_kib(pid, "VmHWM");
    let head_431 = Arc::new(AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..256 {
        let head_431 = head_431.clone();
        // From eight addresses: 32 each, within one address's share.
        let source = [127, 0, 0, 20 + (i % 8) as u8];
        set.spawn(async move {
            let mut s = connect_from(source, addr).await;
            let mut head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ".to_vec();
            head.resize(390 * 1024, b'a');
            // The gateway stops reading at its cap: the rest may not go out.
            let _ = s.write_all(&head).await;
            let mut answer = Vec::new();
            let _ = s.read_to_end(&mut answer).await;
            if answer.starts_with(b"HTTP/1.1 431") {
                head_431.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    let peak_kib = status_kib(pid, "VmHWM");
    let refused_heads = refused(&gw.metrics().await, "head_bytes");
    eprintln!(
        "VmHWM before {before_kib} KiB, after 256 long heads {peak_kib} KiB; \
         431 read by {} clients; refused{{head_bytes}} = {refused_heads}",
        head_431.load(Ordering::Relaxed)
    );
    assert_eq!(refused_heads, 256, "every long head refused");
    assert!(head_431.load(Ordering::Relaxed) > 0, "431 is sent");
    if std::env::var_os("MCP_EDGE_TEST_RUNNER").is_some() {
        assert!(
            peak_kib - before_kib < 24 * 1024,
            "grew {} KiB",
            peak_kib - before_kib
        );
    } else {
        assert!(peak_kib < 32 * 1024, "peak RSS {peak_kib} KiB");
    }
}

/// The gateway binary on the default limits: only `listen`,
/// `admin_listen` (free loopback ports) and the built-in upstream set.
async fn default_gateway(dir: &std::path::Path) -> Running {
    let (port, admin) = (free_port(), free_port());
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n{EDGE_BLOCK}"
    );
    Running::start(dir, &config).await
}
