//! Resource subscriptions through the gateway
//! (2025-11-25 server/resources.mdx §Subscriptions): kept in mcp-edge's own
//! fixed table, one upstream subscription however many sessions want a URI,
//! `notifications/resources/updated` delivered to exactly the sessions that
//! subscribed (on their GET stream), the upstream told to stop once the
//! last one is gone, and asked again after it reconnects.

use crate::support::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const URI: &str = "fake://a/readme";

/// Opens the session's GET stream; its messages as they arrive.
async fn get_stream(addr: SocketAddr, sid: &str) -> sse::Stream {
    let s = sse::open(
        "GET",
        addr,
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        "",
    )
    .await;
    assert_eq!(s.status, 200);
    s
}

/// The next `notifications/resources/updated` on `rx` within `wait`, if any.
async fn next_update(rx: &mut sse::Stream, wait: Duration) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match rx.next_event(left).await {
            Ok(Some(m)) if m.data["method"] == "notifications/resources/updated" => {
                return Some(m.data)
            }
            Ok(Some(_)) => continue,
            _ => return None,
        }
    }
}

/// The fake upstream's own view: the URIs it was asked to report.
async fn upstream_subscribed(addr: SocketAddr, sid: &str) -> Vec<String> {
    let seen = fake_stats(addr, sid, json!("s"), "a").await;
    serde_json::from_value(seen["subscribed"].clone()).unwrap()
}

/// How many `resources/subscribe` requests the fake upstream received.
async fn upstream_subscribe_calls(addr: SocketAddr, sid: &str) -> usize {
    let seen = fake_stats(addr, sid, json!("s"), "a").await;
    seen["methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| *m == "resources/subscribe")
        .count()
}

async fn touch(addr: SocketAddr, sid: &str) {
    let r = call_tool(addr, sid, json!("t"), "a__touch", json!({"uri": URI})).await;
    assert_eq!(text_of(&r), format!("touched {URI}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_reach_exactly_the_subscribed_sessions() {
    let gw = start("keepalive = \"60s\"", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let (s1, s2, s3) = (
        legacy_session(addr, "2025-11-25").await,
        legacy_session(addr, "2025-11-25").await,
        legacy_session(addr, "2025-11-25").await,
    );
    let (mut g1, mut g2, mut g3) = (
        get_stream(addr, &s1).await,
        get_stream(addr, &s2).await,
        get_stream(addr, &s3).await,
    );
    for s in [&s1, &s2] {
        let r = call(
            addr,
            s,
            json!(1),
            "resources/subscribe",
            json!({"uri": URI}),
        )
        .await;
        assert_eq!(r.body["result"], json!({}), "{}", r.raw);
    }
    assert_eq!(
        upstream_subscribed(addr, &s3).await,
        vec![URI],
        "one upstream subscription for two sessions"
    );
    assert_eq!(
        upstream_subscribe_calls(addr, &s3).await,
        1,
        "asked once, not once per session nor again by the owner task"
    );
    touch(addr, &s3).await;
    for g in [&mut g1, &mut g2] {
        let u = next_update(g, Duration::from_secs(10))
            .await
            .expect("the subscriber is told");
        assert_eq!(u["params"]["uri"], URI);
    }
    assert!(
        next_update(&mut g3, Duration::from_millis(300))
            .await
            .is_none(),
        "s3 did not subscribe"
    );
    // s1 leaves: the upstream still reports the URI for s2.
    let r = call(
        addr,
        &s1,
        json!(2),
        "resources/unsubscribe",
        json!({"uri": URI}),
    )
    .await;
    assert_eq!(r.body["result"], json!({}));
    touch(addr, &s3).await;
    assert!(next_update(&mut g2, Duration::from_secs(10))
        .await
        .is_some());
    assert!(
        next_update(&mut g1, Duration::from_millis(300))
            .await
            .is_none(),
        "s1 unsubscribed"
    );
    assert_eq!(upstream_subscribed(addr, &s3).await, vec![URI]);
    // s2's session ends: nobody wants the URI, and the owner task tells the upstream.
    let r = request("DELETE", addr, &[("mcp-session-id", &s2)], "").await;
    assert_eq!(r.status, 200);
    let stopped = || async {
        let left = upstream_subscribed(addr, &s3).await;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    };
    eventually("the upstream told to stop", Duration::from_secs(5), stopped).await;
    assert_eq!(gw.app().subscriptions().len(), 0);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnected_upstream_is_asked_again() {
    let gw = start("keepalive = \"60s\"", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let mut g = get_stream(addr, &sid).await;
    let r = call(
        addr,
        &sid,
        json!(1),
        "resources/subscribe",
        json!({"uri": URI}),
    )
    .await;
    assert_eq!(r.body["result"], json!({}), "{}", r.raw);
    // A new child knows nothing of the old one's subscriptions.
    let up = gw.app().router().upstreams()[0].clone();
    let mut rx = up.subscribe();
    up.force_reconnect();
    while !(up.attempts() == 2 && rx.borrow().is_ready()) {
        rx.changed().await.unwrap();
    }
    let asked_again = || async {
        let asked = upstream_subscribed(addr, &sid).await;
        (!asked.is_empty()).then_some(asked)
    };
    let what = "a subscription on the new connection";
    let asked = eventually(what, Duration::from_secs(5), asked_again).await;
    assert_eq!(asked, vec![URI], "subscribed again on the new connection");
    touch(addr, &sid).await;
    assert!(next_update(&mut g, Duration::from_secs(10)).await.is_some());
    gw.shutdown().await;
}

#[tokio::test]
async fn refusals_are_clear_and_counted() {
    mcp_edge::metrics::prometheus();
    let gw = start(
        "",
        &(fake_block("a", "legacy", "") + &fake_block("m", "modern", "")),
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let sub = |uri: String| {
        let sid = sid.clone();
        async move {
            call(
                addr,
                &sid,
                json!(1),
                "resources/subscribe",
                json!({"uri": uri}),
            )
            .await
        }
    };
    let r = sub("nowhere://x".into()).await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.raw);
    assert!(r.raw.contains("Resource not found"), "{}", r.raw);
    // Routed to a modern upstream that does not declare resources.subscribe.
    let r = sub("fake://m/readme".into()).await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.raw);
    assert!(
        r.raw
            .contains("upstream 'm' cannot report resource updates"),
        "{}",
        r.raw
    );
    gw.shutdown().await;
    // A client's share is bounded (one upstream serving resources takes every URI).
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let sub = |uri: String| {
        let sid = sid.clone();
        async move {
            call(
                addr,
                &sid,
                json!(1),
                "resources/subscribe",
                json!({"uri": uri}),
            )
            .await
        }
    };
    let before = mcp_edge::metrics::read(
        mcp_edge::metrics::REFUSED,
        "limit=\"resource_subscriptions\"",
    );
    for i in 0..mcp_edge::limits::MAX_SUBSCRIPTIONS_PER_CLIENT {
        let r = sub(format!("fake://a/readme?{i}")).await;
        assert_eq!(r.body["result"], json!({}), "{}", r.raw);
    }
    let r = sub("fake://a/readme?more".into()).await;
    assert_eq!(
        r.error_code(),
        Some(mcp_edge::protocol::SUBSCRIPTIONS_FULL),
        "{}",
        r.raw
    );
    assert!(
        mcp_edge::metrics::read(
            mcp_edge::metrics::REFUSED,
            "limit=\"resource_subscriptions\""
        ) >= before + 1.0
    );
    assert_eq!(
        gw.app().subscriptions().len(),
        mcp_edge::limits::MAX_SUBSCRIPTIONS_PER_CLIENT
    );
    // 2026-07-28 removed resources/subscribe: a modern request gets -32601
    // and never reaches the upstream (it could unsubscribe others' URIs).
    let m = modern(
        addr,
        json!(7),
        "resources/unsubscribe",
        json!({"uri": "fake://a/readme?0"}),
    )
    .await;
    assert_eq!(m.error_code(), Some(-32601), "{}", m.raw);
    assert_eq!(m.status, 404);
    gw.shutdown().await;
}

/// Opens a modern `subscriptions/listen` stream; its messages as they arrive.
async fn listen(addr: SocketAddr, id: &str, notifications: Value) -> sse::Stream {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        },
        "notifications": notifications}});
    let s = sse::listen(addr, &body).await;
    assert_eq!(s.status, 200);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_reports_the_resources_it_was_allowed() {
    let gw = start("keepalive = \"60s\"", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let mut rx = listen(
        addr,
        "res",
        json!({"resourceSubscriptions": [URI, "x".repeat(3000)]}),
    )
    .await;
    let ack = rx
        .next_event(Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap()
        .data;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourceSubscriptions": [URI]}),
        "only the URI it can honour"
    );
    assert_eq!(upstream_subscribed(addr, &sid).await, vec![URI]);
    touch(addr, &sid).await;
    let u = next_update(&mut rx, Duration::from_secs(10))
        .await
        .expect("the stream is told");
    assert_eq!(u["params"]["uri"], URI);
    assert_eq!(
        u["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "res"
    );
    // The client closes the stream: its subscription goes, and so does the
    // upstream's.
    drop(rx);
    let both_gone = || async {
        let left = upstream_subscribed(addr, &sid).await;
        match left.is_empty() && gw.app().subscriptions().is_empty() {
            true => Ok(()),
            false => Err(format!(
                "upstream: {left:?}, {} here",
                gw.app().subscriptions().len()
            )),
        }
    };
    let what = "the subscription gone, here and upstream";
    eventually(what, Duration::from_secs(5), both_gone).await;
    gw.shutdown().await;
}

/// Issue 13 part 3: legacy sessions' subscriptions to a modern upstream's
/// resource travel on one upstream `subscriptions/listen` whose
/// `resourceSubscriptions` follow the wanted set (2026-07-28
/// patterns-subscriptions.mdx): updates reach exactly the subscribers, and
/// when the last one leaves the listen is replaced by one without the URI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_reach_a_modern_upstream_through_its_listen_stream() {
    const M: &str = "fake://m/readme";
    let gw = start(
        "keepalive = \"60s\"",
        &fake_block_args("m", "modern", &["--subscribe"], ""),
    )
    .await;
    let addr = gw.local_addr();
    let stats = |sid: String| async move { fake_stats(addr, &sid, json!("s"), "m").await };
    let (s1, s2) = (
        legacy_session(addr, "2025-11-25").await,
        legacy_session(addr, "2025-11-25").await,
    );
    let (mut g1, mut g2) = (get_stream(addr, &s1).await, get_stream(addr, &s2).await);
    let r = call(
        addr,
        &s1,
        json!(1),
        "resources/subscribe",
        json!({"uri": M}),
    )
    .await;
    assert_eq!(r.body["result"], json!({}), "{}", r.raw);
    assert_eq!(stats(s2.clone()).await["subscribed"], json!([M]));
    let t = call_tool(addr, &s2, json!(2), "m__touch", json!({"uri": M})).await;
    assert_eq!(text_of(&t), format!("touched {M}"));
    let u = next_update(&mut g1, Duration::from_secs(10)).await;
    assert_eq!(u.expect("the subscriber is told")["params"]["uri"], M);
    assert!(
        next_update(&mut g2, Duration::from_millis(300))
            .await
            .is_none(),
        "s2 did not subscribe"
    );
    // The last subscriber leaves: the upstream's listen no longer names it.
    let r = call(
        addr,
        &s1,
        json!(3),
        "resources/unsubscribe",
        json!({"uri": M}),
    )
    .await;
    assert_eq!(r.body["result"], json!({}));
    // The old listen is cancelled before its replacement is sent, so
    // "nothing subscribed" alone may be the moment in between.
    let resubscribed = || async {
        let seen = stats(s2.clone()).await;
        match seen["subscribed"] == json!([]) && seen["listens"] == 3 {
            true => Ok(seen),
            false => Err(seen.to_string()),
        }
    };
    let what = "the third listen, subscribed to nothing";
    let seen = eventually(what, Duration::from_secs(5), resubscribed).await;
    assert_eq!(seen["subscribed"], json!([]), "{seen}");
    // One listen after the handshake, one with the URI, one without.
    assert_eq!(seen["listens"], 3, "{seen}");
    gw.shutdown().await;
}
