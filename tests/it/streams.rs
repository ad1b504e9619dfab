//! GET streams of legacy sessions, in virtual time: keep-alive comments flow,
//! an open stream does not keep its session alive, and DELETE ends it at once.

use crate::support::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn open_get(addr: std::net::SocketAddr, sid: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: {sid}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    s
}

/// Reads until the chunked body ends (or `limit` virtual time passes); returns what was read.
async fn read_to_end_of_body(s: &mut TcpStream, limit: Duration) -> (String, bool) {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&all).into(), false),
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&all).into(), true),
            Ok(Ok(n)) => {
                all.extend_from_slice(&buf[..n]);
                let n = all.len();
                if all.ends_with(b"0\r\n\r\n") && (n == 5 || all[..n - 5].ends_with(b"\r\n")) {
                    return (String::from_utf8_lossy(&all).into(), true);
                }
            }
        }
    }
}

/// Reads until the response head is complete (or 10 s pass); returns it.
async fn read_head(s: &mut TcpStream) -> String {
    let mut all = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !all.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => all.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&all).into_owned()
}

const SERVER: &str =
    "session_idle_timeout = \"10s\"\nsession_min_idle_before_evict = \"5s\"\nkeepalive = \"1s\"";

#[tokio::test(start_paused = true)]
async fn an_open_get_stream_does_not_keep_its_session_alive() {
    // The built-in upstream: no child process whose timers virtual time could race.
    let gw = start(
        SERVER,
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let mut s = open_get(addr, &sid).await;
    // Keep-alives flow while the session lives; the client never sends another request.
    let (seen, ended) = read_to_end_of_body(&mut s, Duration::from_secs(3)).await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(seen.contains("text/event-stream"));
    assert!(seen.matches(": keep-alive").count() >= 2, "{seen}");
    assert!(!ended);
    // Within the idle timeout plus two keep-alive periods the slot is gone and the stream ends.
    let (_, ended) = read_to_end_of_body(&mut s, Duration::from_secs(10 + 2)).await;
    assert!(ended, "the stream of an expired session ends");
    let r = post(
        addr,
        &[("mcp-session-id", &sid)],
        &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
    )
    .await;
    assert_eq!(r.status, 404);
    // The slot itself is freed by the lookup above or by the sweep (every
    // idle/4, 2.5 s), whichever comes first.
    let freed = || gw.app().sessions().count().0 == 0;
    eventually_sync("the session's slot freed", Duration::from_secs(10), freed).await;
}

/// Real time here (a keep-alive of 60 s): if DELETE did not wake the stream,
/// it would end only at the next tick, a minute later.
#[tokio::test]
async fn delete_ends_the_get_stream_at_once() {
    let gw = start("keepalive = \"60s\"", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let mut s = open_get(addr, &sid).await;
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(
        request("DELETE", addr, &[("mcp-session-id", &sid)], "")
            .await
            .status,
        200
    );
    // Long before the next keep-alive tick, the stream is over.
    let (_, ended) = read_to_end_of_body(&mut s, Duration::from_secs(10)).await;
    assert!(ended, "DELETE wakes the stream");
}

#[tokio::test]
async fn a_session_holds_at_most_two_get_streams() {
    mcp_edge::metrics::prometheus();
    let gw = start("keepalive = \"60s\"", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let before =
        mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"streams_per_session\"");
    let mut s1 = open_get(addr, &sid).await;
    let mut s2 = open_get(addr, &sid).await;
    for s in [&mut s1, &mut s2] {
        let head = read_head(s).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    let r = request(
        "GET",
        addr,
        &[("mcp-session-id", &sid), ("accept", "text/event-stream")],
        "",
    )
    .await;
    assert_eq!((r.status, r.error_code()), (429, Some(-32600)), "{}", r.raw);
    assert!(
        mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"streams_per_session\"")
            >= before + 1.0
    );
    // A closed stream gives its place back.
    drop(s1);
    let mut s3 = None;
    for _ in 0..50 {
        let mut s = open_get(addr, &sid).await;
        let head = read_head(&mut s).await;
        if head.starts_with("HTTP/1.1 200") {
            s3 = Some(s);
            break;
        }
    }
    assert!(
        s3.is_some(),
        "the place of the closed stream was given back"
    );
}

#[tokio::test]
async fn a_changed_catalog_is_announced_on_the_get_stream() {
    let (gw, addr, sid) = edge_session("keepalive = \"60s\"").await;
    let mut s = open_get(addr, &sid).await;
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head.contains("list_changed"),
        "nothing changed yet: {head}"
    );
    // The upstream reconnects: its tools go away and come back.
    gw.app().router().upstreams()[0].force_reconnect();
    let (seen, _) = read_to_end_of_body(&mut s, Duration::from_secs(5)).await;
    assert!(
        seen.contains("\"method\":\"notifications/tools/list_changed\""),
        "{seen}"
    );
    // The built-in upstream has tools only: its prompts and resources did
    // not change, so they are not announced.
    assert!(
        !seen.contains("notifications/prompts/list_changed")
            && !seen.contains("notifications/resources/list_changed"),
        "{seen}"
    );
}
