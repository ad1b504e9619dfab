//! Every bounded buffer, hit on purpose: each refusal is a clear error for
//! that caller only, and `mcp_edge_refused_total{limit=…}` counts it.

mod support;
use mcp_edge::metrics::{prometheus, read, REFUSED};
use serde_json::json;
use support::*;

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
    let resp = mcp_edge::http::endpoint::handle(gw.app().clone(), req).await;
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
    let gw = start("", &fake_block("a", "legacy", "max_in_flight = 1")).await;
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
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
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
    let gw = start("", &fake_block("a", "legacy", "max_in_flight = 1")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    // The client gives up after 200 ms on a call the upstream needs 1.5 s for.
    let slow = call_tool(
        addr,
        &sid,
        json!(1),
        "a__slow_echo",
        json!({"ms": 1500, "text": "s"}),
    );
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(200), slow)
            .await
            .is_err()
    );
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    // The upstream is still working on it, so the one slot is still taken.
    let busy = call_tool(addr, &sid, json!(2), "a__stats", json!(null)).await;
    assert_eq!(
        busy.error_code(),
        Some(mcp_edge::protocol::UPSTREAM_BUSY),
        "{}",
        busy.raw
    );
    // Once it answers, the slot is free again, and it was told to cancel.
    tokio::time::sleep(std::time::Duration::from_millis(1800)).await;
    let seen = fake_stats(addr, &sid, json!(3), "a").await;
    assert_eq!(seen["cancelled"].as_array().unwrap().len(), 1, "{seen}");
}
