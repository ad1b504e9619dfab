//! `subscriptions/listen` (2026-07-28 patterns-subscriptions.mdx): the
//! acknowledgment first, only the asked-for list_changed kinds, every frame
//! stamped with the subscription id, the graceful closing response on
//! shutdown, a fixed pool of streams, and clear errors for bad filters.

use crate::support::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const SUB: &str = "io.modelcontextprotocol/subscriptionId";

fn listen_body(id: Value, notifications: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        },
        "notifications": notifications}})
}

/// Opens a listen stream; returns the HTTP status and the stream, whose
/// messages are read as they arrive (dropping it closes the stream).
async fn listen(addr: SocketAddr, body: Value) -> (u16, sse::Stream) {
    let s = sse::listen(addr, &body).await;
    (s.status, s)
}

const EDGE: &str = "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n";

#[tokio::test]
async fn acknowledges_then_sends_only_the_asked_for_list_changes() {
    let gw = start("keepalive = \"60s\"", EDGE).await;
    let addr = gw.local_addr();
    let (status, mut rx) = listen(
        addr,
        listen_body(
            json!("sub-1"),
            json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///x"]}),
        ),
    )
    .await;
    assert_eq!(status, 200);
    let ack = rx.next().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["_meta"][SUB], "sub-1");
    // Honoured: the tool list; not resource updates (not relayed yet), so
    // they are left out of the acknowledgment.
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    // The upstream reconnects: its tools go away and come back.
    gw.app().router().upstreams()[0].force_reconnect();
    let change = rx.next().await;
    assert_eq!(change["method"], "notifications/tools/list_changed");
    assert_eq!(change["params"]["_meta"][SUB], "sub-1");
    assert_eq!(gw.app().streams().open(), 1);
    // Shutdown: the graceful closing response, then the end of the stream.
    let app = gw.app().clone();
    gw.shutdown().await;
    let rest = rx.rest().await;
    let last = rest.last().expect("a closing response");
    assert_eq!(last["id"], "sub-1", "{rest:?}");
    assert_eq!(last["result"]["resultType"], "complete");
    assert_eq!(last["result"]["_meta"][SUB], "sub-1");
    assert!(
        rest.iter()
            .all(|m| m["method"] != "notifications/prompts/list_changed"
                && m["method"] != "notifications/resources/list_changed"),
        "only the asked-for kinds: {rest:?}"
    );
    assert_eq!(app.streams().open(), 0);
}

#[tokio::test]
async fn the_pool_is_fixed_and_a_closed_stream_gives_its_place_back() {
    mcp_edge::metrics::prometheus();
    // 4 connections: 2 places for long-lived streams, 2 always left for requests.
    let gw = start("max_connections = 4\nkeepalive = \"60s\"", EDGE).await;
    assert_eq!(gw.app().streams().capacity(), 2);
    let addr = gw.local_addr();
    let before = mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"streams\"");
    let f = json!({"promptsListChanged": true});
    let (_, mut a) = listen(addr, listen_body(json!(1), f.clone())).await;
    let (_, mut b) = listen(addr, listen_body(json!(2), f.clone())).await;
    a.next().await;
    b.next().await;
    let refused = post(
        addr,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "subscriptions/listen"),
        ],
        &listen_body(json!(3), f.clone()),
    )
    .await;
    assert_eq!(refused.status, 503, "{}", refused.raw);
    assert_eq!(refused.error_code(), Some(-31005), "{}", refused.raw);
    assert_eq!(refused.body["id"], 3);
    assert_eq!(refused.header("retry-after"), Some("5"));
    // Legacy GET streams share the pool.
    let sid = legacy_session(addr, "2025-11-25").await;
    let get = request(
        "GET",
        addr,
        &[("mcp-session-id", &sid), ("accept", "text/event-stream")],
        "",
    )
    .await;
    assert_eq!(get.status, 503, "{}", get.raw);
    assert_eq!(get.error_code(), Some(-31005), "{}", get.raw);
    let after = mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"streams\"");
    assert!(after >= before + 2.0, "the refusals are counted");
    // The client closes one stream: its place is free again.
    drop(a);
    let reopen = || async {
        let (status, d) = listen(addr, listen_body(json!(4), f.clone())).await;
        (status == 200).then_some(d)
    };
    let what = "the closed stream's place given back (a listen answered 200)";
    let mut d = eventually(what, Duration::from_secs(10), reopen).await;
    assert_eq!(
        d.next().await["method"],
        "notifications/subscriptions/acknowledged"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn bad_filters_and_legacy_sessions_get_clear_errors() {
    let gw = start("", EDGE).await;
    let addr = gw.local_addr();
    for (notifications, needle) in [
        (
            json!({"toolsListChanged": "yes"}),
            "toolsListChanged must be a boolean",
        ),
        (
            json!({"resourceSubscriptions": "file:///x"}),
            "array of URI strings",
        ),
        (json!([true]), "must be an object"),
    ] {
        let (status, mut rx) = listen(addr, listen_body(json!(9), notifications)).await;
        let r = rx.next().await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert!(
            r["error"]["message"].as_str().unwrap().contains(needle),
            "{r}"
        );
    }
    assert_eq!(
        gw.app().streams().open(),
        0,
        "refused filters hold no place"
    );
    // A client that cannot read SSE is told so (406), holding no place.
    let r = post(
        addr,
        &[
            ("accept", "application/json"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "subscriptions/listen"),
        ],
        &listen_body(json!(10), json!({"toolsListChanged": true})),
    )
    .await;
    assert_eq!(r.status, 406, "{}", r.raw);
    assert_eq!(r.error_code(), Some(-32600), "{}", r.raw);
    // Asking only for what mcp-edge does not relay yet: the empty
    // acknowledgment and at once the graceful end.
    let (status, mut rx) = listen(
        addr,
        listen_body(json!("r"), json!({"resourceSubscriptions": ["file:///x"]})),
    )
    .await;
    assert_eq!(status, 200);
    let ack = rx.next().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"], json!({}));
    let done = rx.next().await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(done["result"]["_meta"][SUB], "r");
    assert!(rx.recv().await.is_none(), "the stream ended");
    assert_eq!(gw.app().streams().open(), 0);
    // subscriptions/listen is modern-only: a legacy session gets -32601.
    let sid = legacy_session(addr, "2025-11-25").await;
    let r = call(addr, &sid, json!(1), "subscriptions/listen", json!({})).await;
    assert_eq!(r.error_code(), Some(-32601), "{}", r.raw);
    gw.shutdown().await;
}
