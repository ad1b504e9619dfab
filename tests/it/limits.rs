//! Every bounded buffer, hit on purpose: each refusal is a clear error for
//! that caller only, and `mcp_edge_refused_total{limit=…}` counts it.

use crate::support;
use crate::support::*;
use mcp_edge::metrics::{prometheus, read, REFUSED};
use serde_json::json;

const EDGE: &str = "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n";

fn refused(limit: &str) -> f64 {
    read(REFUSED, &format!("limit=\"{limit}\""))
}

/// A client that sends its headers and then drips its body (or stops) does
/// not hold a connection for ever: 408 after `limits::BODY_READ_TIMEOUT`
/// (virtual time; the endpoint is driven without a socket).
#[tokio::test(start_paused = true)]
async fn a_dripping_body_gets_408_and_is_counted() {
    use futures_util::StreamExt;
    prometheus();
    let gw = start(
        "",
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let before = refused("body_read_time");
    let chunks = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(
        hyper::body::Frame::data(bytes::Bytes::from_static(b"{\"jsonrpc\":")),
    )])
    .chain(futures_util::stream::pending());
    let req = http::Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("content-length", "1000")
        .body(http_body_util::StreamBody::new(chunks))
        .unwrap();
    let t0 = tokio::time::Instant::now();
    let resp = mcp_edge::downstream::endpoint::handle(gw.app().clone(), req).await;
    assert_eq!(resp.status(), 408);
    assert_eq!(t0.elapsed(), mcp_edge::limits::BODY_READ_TIMEOUT);
    assert!(refused("body_read_time") >= before + 1.0);
}

#[tokio::test]
async fn body_limit_is_413_and_counted() {
    prometheus();
    let gw = start("max_body_bytes = 2048", &fake_block("a", "legacy", "")).await;
    let before = refused("body_bytes");
    let sid = legacy_session(gw.local_addr(), "2025-11-25").await;
    let r = call_tool(
        gw.local_addr(),
        &sid,
        json!(1),
        "a__echo",
        json!({"text": "x".repeat(3000)}),
    )
    .await;
    assert_eq!((r.status, r.error_code()), (413, Some(-32600)));
    assert!(refused("body_bytes") >= before + 1.0);
}

#[tokio::test]
async fn full_session_table_is_503_with_retry_after_and_counted() {
    prometheus();
    let gw = start(
        "session_capacity = 1\nsession_min_idle_before_evict = \"30s\"",
        &fake_block("a", "legacy", ""),
    )
    .await;
    let before = refused("session_capacity");
    legacy_session(gw.local_addr(), "2025-11-25").await;
    let r = post(gw.local_addr(), &[], &json!({"jsonrpc": "2.0", "id": 9, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})).await;
    assert_eq!(
        (r.status, r.error_code()),
        (503, Some(mcp_edge::protocol::SESSIONS_FULL))
    );
    assert_eq!(r.body["id"], 9);
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    assert_eq!(r.body["error"]["data"]["retryAfterSeconds"], retry);
    assert!(refused("session_capacity") >= before + 1.0);
}

#[tokio::test]
async fn in_flight_overflow_is_immediate_and_counted() {
    prometheus();
    let marks = support::marks::Marks::new();
    let gw = start("", &marks.fake_block("a", "legacy", "max_in_flight = 1")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let before = refused("in_flight");
    let slow = call_tool(
        addr,
        &sid,
        json!(1),
        "a__slow_echo",
        json!({"ms": 2500, "text": "s"}),
    );
    let fast = async {
        marks.called("slow_echo", 1).await; // the one slot is taken
        call_tool(addr, &sid, json!(2), "a__echo", json!({"text": "f"})).await
    };
    let (s, f) = tokio::join!(slow, fast);
    assert_eq!(text_of(&s), "a:s");
    assert_eq!(f.error_code(), Some(mcp_edge::protocol::UPSTREAM_BUSY));
    assert!(f.body["error"]["message"].as_str().unwrap().contains("'a'"));
    assert!(refused("in_flight") >= before + 1.0);
}

#[tokio::test]
async fn oversized_stdio_answer_fails_only_its_call_and_is_counted() {
    prometheus();
    let gw = start("", &fake_block("a", "legacy", "max_result_bytes = 4096")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let before = refused("result_bytes");
    let r = call_tool(addr, &sid, json!(1), "a__big", json!({"bytes": 100000})).await;
    assert_eq!(
        r.error_code(),
        Some(mcp_edge::protocol::UPSTREAM_RESULT_TOO_LARGE),
        "{}",
        r.raw
    );
    assert!(r.body["error"]["message"].as_str().unwrap().contains("'a'"));
    assert!(refused("result_bytes") >= before + 1.0);
    // The connection is still usable: the rest of the line was drained.
    let ok = call_tool(addr, &sid, json!(2), "a__big", json!({"bytes": 100})).await;
    assert_eq!(text_of(&ok).len(), 100);
}

/// An HTTP upstream's JSON answer over `max_result_bytes` (by its
/// Content-Length, or while read) is refused: that call gets
/// -31003, the refusal is counted, and the upstream stays up for the next
/// call (a refused answer says nothing about its health).
#[tokio::test]
async fn oversized_http_answer_fails_only_its_call_and_is_counted() {
    use support::scripted::{http_block, scripted, Mode};
    prometheus();
    let (_u, url) = scripted(Mode::Legacy).await;
    let gw = start("", &http_block("remote", &url, "max_result_bytes = 4096")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let before = refused("result_bytes");
    let r = call_tool(
        addr,
        &sid,
        json!(1),
        "remote__big",
        json!({"bytes": 100000}),
    )
    .await;
    assert_eq!(
        r.error_code(),
        Some(mcp_edge::protocol::UPSTREAM_RESULT_TOO_LARGE),
        "{}",
        r.raw
    );
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("'remote'"));
    assert!(refused("result_bytes") >= before + 1.0);
    let ok = call_tool(addr, &sid, json!(2), "remote__big", json!({"bytes": 100})).await;
    assert_eq!(text_of(&ok).len(), 100, "{}", ok.raw);
    assert_eq!(
        gw.app().router().upstreams()[0].attempts(),
        1,
        "no reconnect"
    );
}

#[tokio::test]
async fn catalog_entry_and_byte_budgets_drop_the_extra_tools_and_count_them() {
    prometheus();
    let (e0, b0) = (refused("catalog_entries"), refused("catalog_bytes"));
    let upstreams = fake_block("few", "legacy", "max_catalog_entries = 3")
        + &fake_block("small", "legacy", "max_catalog_bytes = 1024");
    let gw = start("", &upstreams).await;
    let sid = legacy_session(gw.local_addr(), "2025-11-25").await;
    let names = tool_names(&call(gw.local_addr(), &sid, json!(1), "tools/list", json!({})).await);
    let few: Vec<_> = names.iter().filter(|n| n.starts_with("few__")).collect();
    assert_eq!(few, vec!["few__echo", "few__slow_echo", "few__exotic"]);
    // The 2 KiB `fat` tool does not fit a 1 KiB budget; the small ones do.
    assert!(
        names.contains(&"small__echo".to_string()) && names.contains(&"small__ask".to_string()),
        "{names:?}"
    );
    assert!(!names.contains(&"small__fat".to_string()), "{names:?}");
    // What was kept still works.
    let r = call_tool(
        gw.local_addr(),
        &sid,
        json!(2),
        "few__echo",
        json!({"text": "k"}),
    )
    .await;
    assert_eq!(text_of(&r), "few:k");
    assert!(refused("catalog_entries") >= e0 + 1.0);
    assert!(refused("catalog_bytes") >= b0 + 1.0);
}

#[tokio::test]
async fn an_abandoned_call_is_cancelled_upstream_and_keeps_its_slot_until_answered() {
    let marks = support::marks::Marks::new();
    let gw = start("", &marks.fake_block("a", "legacy", "max_in_flight = 1")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    // The client gives up on a call the upstream needs 1.5 s for, once the
    // upstream has it.
    let slow = call_tool(
        addr,
        &sid,
        json!(1),
        "a__slow_echo",
        json!({"ms": 1500, "text": "s"}),
    );
    tokio::select! {
        r = slow => panic!("answered before the client gave up: {}", r.raw),
        () = marks.called("slow_echo", 1) => {}
    }
    // The gateway tells the upstream to cancel; the upstream is still
    // working on it, so the one slot is still taken.
    marks.cancelled(1).await;
    let busy = call_tool(addr, &sid, json!(2), "a__stats", json!(null)).await;
    assert_eq!(
        busy.error_code(),
        Some(mcp_edge::protocol::UPSTREAM_BUSY),
        "{}",
        busy.raw
    );
    // Once it answers, the slot is free again.
    let mut id = 2;
    let free = || {
        id += 1;
        let (id, sid) = (id, &sid);
        async move {
            let r = call_tool(addr, sid, json!(id), "a__stats", json!(null)).await;
            match r.error_code() {
                Some(mcp_edge::protocol::UPSTREAM_BUSY) => Err(r.raw),
                _ => Ok(r),
            }
        }
    };
    let what = "the slot free once the upstream answered";
    let r = eventually(what, std::time::Duration::from_secs(10), free).await;
    let seen: serde_json::Value = serde_json::from_str(&text_of(&r)).unwrap();
    assert_eq!(seen["cancelled"].as_array().unwrap().len(), 1, "{seen}");
}

/// Reads what the gateway answers on `s` until it closes the connection
/// (or 10 s pass): the raw response, and whether the read ended in an error
/// (a reset) rather than a clean close.
async fn read_to_close(s: &mut tokio::net::TcpStream) -> (String, bool) {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) => return (String::from_utf8_lossy(&out).into(), false),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Ok(Err(_)) => return (String::from_utf8_lossy(&out).into(), true),
        }
    }
}

/// A client that writes its whole 2 MiB body before reading (as Node
/// `fetch` and Python `http.client` do) reads the 413: the gateway
/// discards the body up to `limits::REFUSED_BODY_DRAIN_BYTES` before it
/// answers and closes, so no write fails with EPIPE or ECONNRESET. Sent
/// steadily, 64 KiB every 5 ms; with and without `Content-Length`.
#[tokio::test]
async fn a_2_mib_body_gets_a_readable_413() {
    use tokio::io::AsyncWriteExt;
    prometheus();
    let gw = start("", EDGE).await;
    const BODY: usize = 2 * 1024 * 1024;
    let chunk = vec![b' '; 64 * 1024];
    for chunked in [false, true] {
        let before = refused("body_bytes");
        let mut s = tokio::net::TcpStream::connect(gw.local_addr())
            .await
            .unwrap();
        let framing = if chunked {
            "Transfer-Encoding: chunked".to_string()
        } else {
            format!("Content-Length: {BODY}")
        };
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{framing}\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        for _ in 0..BODY / chunk.len() {
            if chunked {
                let size = format!("{:x}\r\n", chunk.len());
                s.write_all(size.as_bytes())
                    .await
                    .expect("write, chunk size");
            }
            s.write_all(&chunk).await.expect("write the body");
            if chunked {
                s.write_all(b"\r\n").await.expect("write, chunk end");
            }
            // not ordering: the body is sent steadily (64 KiB every 5 ms), as a client would
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        if chunked {
            s.write_all(b"0\r\n\r\n").await.expect("write, last chunk");
        }
        let (resp, reset) = read_to_close(&mut s).await;
        assert!(
            resp.starts_with("HTTP/1.1 413"),
            "chunked {chunked}: {resp:?}"
        );
        assert!(
            resp.to_ascii_lowercase().contains("connection: close"),
            "{resp}"
        );
        assert!(resp.contains("max_body_bytes"), "{resp}");
        assert!(!reset, "chunked {chunked}: the read ended in a reset");
        assert_eq!(refused("body_bytes"), before + 1.0);
    }
    let list = modern(gw.local_addr(), json!(1), "tools/list", json!({})).await;
    assert_eq!(list.status, 200);
}

/// A request head over `limits::MAX_REQUEST_HEAD_BYTES` gets hyper's 431
/// and its connection is closed (counted as `refused{limit="head_bytes"}`);
/// a head just under it is served, and so is the next client.
#[tokio::test]
async fn a_head_over_the_cap_gets_431_and_the_gateway_keeps_serving() {
    use tokio::io::AsyncWriteExt;
    prometheus();
    let gw = start("", EDGE).await;
    let cap = mcp_edge::limits::MAX_REQUEST_HEAD_BYTES;
    let before = refused("head_bytes");
    let mut s = tokio::net::TcpStream::connect(gw.local_addr())
        .await
        .unwrap();
    let big = format!(
        "GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(cap)
    );
    // The gateway may close before it has read all of it.
    let _ = s.write_all(big.as_bytes()).await;
    let (resp, _) = read_to_close(&mut s).await;
    assert!(resp.starts_with("HTTP/1.1 431"), "{resp:?}");
    assert_eq!(refused("head_bytes"), before + 1.0);

    let mut s = tokio::net::TcpStream::connect(gw.local_addr())
        .await
        .unwrap();
    let fits = format!(
        "GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(cap - 1024)
    );
    s.write_all(fits.as_bytes()).await.unwrap();
    let (resp, _) = read_to_close(&mut s).await;
    assert!(resp.starts_with("HTTP/1.1 404"), "{resp:?}");
    let list = modern(gw.local_addr(), json!(1), "tools/list", json!({})).await;
    assert_eq!(list.status, 200);
}
