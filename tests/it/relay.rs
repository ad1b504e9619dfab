//! Messages an upstream sends during a call reach the calling client, and only
//! it: progress (token rewritten per call), logging, and server→client
//! requests whose answers the client POSTs back.

use crate::support::*;
use serde_json::{json, Value};
use std::net::SocketAddr;

/// POSTs and returns the answer, its messages read as they arrive: an SSE
/// stream, or one JSON answer when the call relayed nothing (the response
/// head waits for the first relayed message or the answer).
async fn post_streaming(addr: SocketAddr, sid: &str, body: Value) -> sse::Stream {
    let s = sse::open("POST", addr, &[("mcp-session-id", sid)], &body.to_string()).await;
    let kind = &s.headers["content-type"];
    assert!(
        kind == "text/event-stream" || kind == "application/json",
        "{kind:?}"
    );
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_only_its_caller_with_its_own_token() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let (s1, s2) = (
        legacy_session(addr, "2025-11-25").await,
        legacy_session(addr, "2025-11-25").await,
    );
    let call = |id: i64, steps: i64, tag: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "a__progress", "arguments": {"steps": steps, "ms": 30, "tag": tag}, "_meta": {"progressToken": "same-token"}}})
    };
    let (r1, r2) = tokio::join!(
        post_streaming(addr, &s1, call(1, 3, "s1")),
        post_streaming(addr, &s2, call(1, 5, "s2"))
    );
    let (e1, e2) = tokio::join!(r1.rest(), r2.rest());
    for (events, steps, tag) in [(&e1, 3, "s1"), (&e2, 5, "s2")] {
        let progress: Vec<&Value> = events
            .iter()
            .filter(|e| e["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), steps, "{events:?}");
        assert!(
            progress
                .iter()
                .all(|p| p["params"]["progressToken"] == "same-token"
                    && p["params"]["total"] == steps)
        );
        let last = events.last().unwrap();
        assert_eq!(last["id"], 1);
        let text = content_text(last).unwrap();
        assert!(
            !text.contains("same-token"),
            "the upstream must see a gateway token: {text}"
        );
        // Log lines carry no request id: relayed only while one call is in
        // flight, so a caller never receives the other's.
        for log in events
            .iter()
            .filter(|e| e["method"] == "notifications/message")
        {
            assert!(
                log["params"]["data"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("of {tag}")),
                "{log}"
            );
        }
    }
    // Alone in flight, every log line is attributable and relayed.
    let alone = post_streaming(addr, &s1, call(2, 2, "s1"))
        .await
        .rest()
        .await;
    assert_eq!(
        alone
            .iter()
            .filter(|e| e["method"] == "notifications/message")
            .count(),
        2,
        "{alone:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_request_is_relayed_and_answered_by_the_calling_session_only() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session_with(addr, "2025-11-25", json!({"sampling": {}})).await;
    let other = legacy_session_with(addr, "2025-11-25", json!({"sampling": {}})).await;
    let mut rx = post_streaming(
        addr,
        &sid,
        json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
        "params": {"name": "a__ask", "arguments": {"question": "2+2?"}}}),
    )
    .await;
    let req = rx.recv().await.expect("relayed request").data;
    assert_eq!(req["method"], "sampling/createMessage");
    let rid = req["id"].clone();
    assert!(rid.as_str().unwrap().starts_with("mcp-edge:"), "{rid}");
    let answer = json!({"jsonrpc": "2.0", "id": rid, "result": {"role": "assistant", "model": "m", "content": {"type": "text", "text": "four"}}});
    // Another session cannot answer it.
    assert_eq!(
        post(addr, &[("mcp-session-id", &other)], &answer)
            .await
            .status,
        202
    );
    assert_eq!(
        post(addr, &[("mcp-session-id", &sid)], &answer)
            .await
            .status,
        202
    );
    let fin = rx.recv().await.expect("final response").data;
    assert_eq!(fin["id"], "c1");
    assert_eq!(content_text(&fin), Some("client said: four"));
}

/// A legacy upstream's request for a capability the session did not
/// declare at `initialize` is not relayed: the upstream gets an error and
/// the refusal is counted (mcp-edge declares every relayable capability
/// upstream, so it must check each caller's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_session_has_no_capability_for_is_refused() {
    mcp_edge::metrics::prometheus();
    let refused =
        || mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"client_capability\"");
    let before = refused();
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session_with(addr, "2025-11-25", json!({"elicitation": {}})).await;
    let events = post_streaming(
        addr,
        &sid,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "a__ask", "arguments": {"question": "2+2?"}}}),
    )
    .await
    .rest()
    .await;
    assert!(
        events
            .iter()
            .all(|e| e["method"] != "sampling/createMessage"),
        "{events:?}"
    );
    let fin = events.last().expect("final response");
    assert!(
        content_text(fin).is_some_and(|t| t.starts_with("client refused: mcp-edge has no client")),
        "{fin}"
    );
    // Only this test of the binary refuses for a capability.
    assert_eq!(refused(), before + 1.0);
}

#[tokio::test]
async fn without_a_client_to_ask_the_upstream_gets_an_error() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    // JSON-only client: nothing can be relayed, so the upstream's request is refused.
    let r = post(addr, &[("mcp-session-id", &sid), ("accept", "application/json")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a__ask", "arguments": {}}})).await;
    assert!(
        text_of(&r).starts_with("client refused: mcp-edge has no client"),
        "{}",
        r.raw
    );
}

/// Modern callers get `notifications/message` only when their request asked
/// with `io.modelcontextprotocol/logLevel`, and only from that level up
/// (2026-07-28 changelog: MUST NOT emit otherwise); a legacy upstream never
/// sees the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_callers_get_log_messages_only_as_asked() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let logs = |level: Option<&'static str>| async move {
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        });
        if let Some(l) = level {
            meta["io.modelcontextprotocol/logLevel"] = json!(l);
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "a__progress", "arguments": {"steps": 2, "ms": 10, "tag": "m"}, "_meta": meta}});
        let text = request(
            "POST",
            addr,
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "a__progress"),
            ],
            &body.to_string(),
        )
        .await
        .raw;
        assert!(text.contains("done; upstream saw"), "{text}");
        text.matches("notifications/message").count()
    };
    assert_eq!(logs(None).await, 0, "not asked: none");
    assert_eq!(logs(Some("debug")).await, 2, "info ≥ debug");
    assert_eq!(logs(Some("info")).await, 2);
    assert_eq!(logs(Some("error")).await, 0, "info < error");
}

/// A legacy session's `logging/setLevel` is kept per session (the upstreams
/// are shared) and filters the log messages relayed to that session only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sessions_log_level_filters_its_own_messages() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let (quiet, chatty) = (
        legacy_session(addr, "2025-11-25").await,
        legacy_session(addr, "2025-11-25").await,
    );
    let r = call(
        addr,
        &quiet,
        json!(1),
        "logging/setLevel",
        json!({"level": "error"}),
    )
    .await;
    assert_eq!(r.body["result"], json!({}), "{}", r.raw);
    let bad = call(
        addr,
        &quiet,
        json!(2),
        "logging/setLevel",
        json!({"level": "loud"}),
    )
    .await;
    assert_eq!(bad.error_code(), Some(-32602), "{}", bad.raw);
    let progress = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "a__progress", "arguments": {"steps": 2, "ms": 10, "tag": "x"}}});
    let logs = |events: Vec<Value>| {
        events
            .iter()
            .filter(|e| e["method"] == "notifications/message")
            .count()
    };
    let q = post_streaming(addr, &quiet, progress.clone())
        .await
        .rest()
        .await;
    assert_eq!(logs(q), 0, "info is below the quiet session's error level");
    let c = post_streaming(addr, &chatty, progress).await.rest().await;
    assert_eq!(logs(c), 2, "the other session still gets them");
}

/// A legacy client's `notifications/cancelled` ends its request at once
/// (answered -32800) and the upstream is told in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_cancellation_reaches_the_upstream() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let slow = json!({"jsonrpc": "2.0", "id": "long-one", "method": "tools/call",
        "params": {"name": "a__slow_echo", "arguments": {"text": "x", "ms": 5000}}});
    // The cancellation is sent while the call runs (its response head
    // waits for its answer).
    let call = async { post_streaming(addr, &sid, slow).await.rest().await };
    let cancel = async {
        let answering = || gw.app().sessions().cancellable() > 0;
        let within = std::time::Duration::from_secs(10);
        eventually_sync("the gateway answering the call", within, answering).await;
        let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "long-one", "reason": "user pressed stop"}});
        let r = post(addr, &[("mcp-session-id", &sid)], &note).await;
        assert_eq!(r.status, 202);
    };
    let both = async { tokio::join!(call, cancel).0 };
    let events = tokio::time::timeout(std::time::Duration::from_secs(4), both)
        .await
        .expect("the request ended long before the tool's 5 s");
    let last = events.last().unwrap();
    assert_eq!(last["id"], "long-one");
    assert_eq!(last["error"]["code"], -32800, "{last}");
    assert!(gw.app().sessions().cancellable() == 0);
    // The upstream is told by the stdio driver, a moment later.
    let told = || async {
        let seen = fake_stats(addr, &sid, json!("s"), "a").await;
        match seen["cancelled"].as_array().unwrap().is_empty() {
            true => Err(seen.to_string()),
            false => Ok(seen),
        }
    };
    let within = std::time::Duration::from_secs(10);
    let seen = eventually("the upstream told to cancel", within, told).await;
    assert_eq!(seen["cancelled"].as_array().unwrap().len(), 1, "{seen}");
}

/// A legacy session's calls to a modern upstream carry its log level as
/// `io.modelcontextprotocol/logLevel` (a modern server sends no log
/// messages without it): every level by default, its `logging/setLevel`
/// floor once set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_session_gets_a_modern_upstreams_log_messages() {
    let gw = start("", &fake_block("m", "modern", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let logs = |id: i64| {
        let sid = sid.clone();
        async move {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "m__progress", "arguments": {"steps": 2, "ms": 10, "tag": "l"}}});
            let events = post_streaming(addr, &sid, body).await.rest().await;
            (events.iter())
                .filter(|e| e["method"] == "notifications/message")
                .count()
        }
    };
    assert_eq!(logs(1).await, 2, "every level by default");
    let r = call(
        addr,
        &sid,
        json!(2),
        "logging/setLevel",
        json!({"level": "error"}),
    )
    .await;
    assert_eq!(r.body["result"], json!({}), "{}", r.raw);
    assert_eq!(logs(3).await, 0, "the upstream was asked for error and up");
}

/// A legacy session's call that accepts SSE but relays nothing is answered
/// as one JSON message with a length (its head waited for the answer); one
/// that relays something streams it (2025-11-25 transports.mdx §Sending
/// Messages to the Server: the server returns either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_relays_nothing_is_one_json_answer() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let quiet = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "a__slow_echo", "arguments": {"text": "q", "ms": 10}}});
    let s = post_streaming(addr, &sid, quiet).await;
    assert_eq!(s.header("content-type"), Some("application/json"));
    assert!(s.header("content-length").is_some(), "{:?}", s.headers);
    let answer = s.rest().await;
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0]["id"], 1);
    assert!(answer[0]["result"].is_object(), "{answer:?}");
    let chatty = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "a__progress", "arguments": {"steps": 2, "ms": 10, "tag": "c"},
        "_meta": {"progressToken": "t"}}});
    let s = post_streaming(addr, &sid, chatty).await;
    assert_eq!(s.header("content-type"), Some("text/event-stream"));
    let events = s.rest().await;
    let progress = (events.iter()).filter(|e| e["method"] == "notifications/progress");
    assert_eq!(progress.count(), 2, "{events:?}");
    assert_eq!(events.last().unwrap()["id"], 2, "the answer comes last");
}
