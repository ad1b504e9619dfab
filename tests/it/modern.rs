//! The modern era (2026-07-28) at the downstream endpoint: stateless
//! exchanges reach a legacy-only upstream, and the header rules
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) are enforced.

use crate::support::*;
use serde_json::json;

#[tokio::test]
async fn modern_exchange_reaches_a_legacy_only_upstream() {
    let gw = start("", &fake_block("old", "legacy", "")).await;
    let addr = gw.local_addr();
    let d = modern(addr, json!("d1"), "server/discover", json!({})).await;
    assert_eq!(d.status, 200, "{}", d.raw);
    let r = &d.body["result"];
    assert_eq!(r["resultType"], "complete");
    assert!(r["supportedVersions"]
        .as_array()
        .unwrap()
        .contains(&json!("2026-07-28")));
    assert!(r["ttlMs"].as_u64().is_some() && r["cacheScope"].is_string());
    assert!(
        d.header("mcp-session-id").is_none(),
        "modern requests get no session"
    );
    let l = modern(addr, json!(2), "tools/list", json!({})).await;
    assert_eq!(l.body["result"]["resultType"], "complete");
    assert!(l.body["result"]["ttlMs"].is_u64());
    assert!(tool_names(&l).contains(&"old__echo".to_string()));
    // The fake legacy upstream errors if it sees modern _meta keys, so this also
    // proves the gateway strips them for a legacy upstream.
    let c = modern(
        addr,
        json!(3),
        "tools/call",
        json!({"name": "old__echo", "arguments": {"text": "m"}}),
    )
    .await;
    assert_eq!(text_of(&c), "old:m");
    assert_eq!(c.body["result"]["resultType"], "complete");
    // A modern request ignores any Mcp-Session-Id, even a malformed one.
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let r = post(
        addr,
        &[
            ("mcp-session-id", "abc"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ],
        &body,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.raw);
}

#[tokio::test]
async fn modern_header_rules() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a__echo", "_meta": meta}});
    // Mcp-Name mismatch → 400 + -32020.
    let r = post(
        addr,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "a__other"),
        ],
        &body,
    )
    .await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "{}", r.raw);
    // Mcp-Method mismatch → 400 + -32020.
    let r = post(
        addr,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
            ("mcp-name", "a__echo"),
        ],
        &body,
    )
    .await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)));
    // Unsupported version → 400 + -32022 listing the supported versions.
    let mut b2 = body.clone();
    b2["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let r = post(
        addr,
        &[
            ("mcp-protocol-version", "1900-01-01"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "a__echo"),
        ],
        &b2,
    )
    .await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32022)));
    assert_eq!(r.body["error"]["data"]["supported"][0], "2026-07-28");
    // Unknown method on the modern path → 404 + -32601.
    let r = modern(addr, json!(9), "nope/nothing", json!({})).await;
    assert_eq!((r.status, r.error_code()), (404, Some(-32601)));
    // GET and DELETE without a legacy session → 405.
    assert_eq!(request("GET", addr, &[], "").await.status, 405);
    assert_eq!(request("DELETE", addr, &[], "").await.status, 405);
}

/// A list missing a down upstream's part is not cacheable (ttlMs 0); a
/// complete one keeps the gateway's default hint.
#[tokio::test]
async fn a_partial_list_is_not_cached() {
    let dead = "[[upstream]]\nname = \"dead\"\ntransport = \"stdio\"\ncommand = \"false\"\n";
    let gw = start("", &(fake_block("ok", "legacy", "") + dead)).await;
    let l = modern(gw.local_addr(), json!(1), "tools/list", json!({})).await;
    assert!(tool_names(&l).contains(&"ok__echo".to_string()));
    assert_eq!(l.body["result"]["ttlMs"], 0, "{}", l.raw);
    gw.shutdown().await;
    let gw = start("", &fake_block("ok", "legacy", "")).await;
    let l = modern(gw.local_addr(), json!(1), "tools/list", json!({})).await;
    assert!(l.body["result"]["ttlMs"].as_u64().unwrap() > 0, "{}", l.raw);
    gw.shutdown().await;
}

/// Methods 2026-07-28 removed, sent as modern requests, are 404 with
/// -32601 (transports-streamable-http.mdx §Protocol Version Header), while
/// a legacy `initialize` still opens a session (versioning.mdx §Backward
/// Compatibility) and a legacy `ping` is still answered.
#[tokio::test]
async fn removed_methods_are_not_found_in_the_modern_era() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let removed = [
        (
            "initialize",
            json!({"protocolVersion": "2026-07-28", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}),
        ),
        ("ping", json!({})),
        ("logging/setLevel", json!({"level": "debug"})),
        ("resources/subscribe", json!({"uri": "test://x"})),
        ("resources/unsubscribe", json!({"uri": "test://x"})),
    ];
    for (i, (method, params)) in removed.into_iter().enumerate() {
        let r = modern(addr, json!(i), method, params).await;
        assert_eq!(
            (r.status, r.error_code()),
            (404, Some(-32601)),
            "{method}: {}",
            r.raw
        );
        assert!(r.header("mcp-session-id").is_none(), "{method}");
        let msg = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(method), "{method}: {msg}");
    }
    // The legacy forms still work.
    let sid = legacy_session(addr, "2025-11-25").await;
    let p = call(addr, &sid, json!(10), "ping", json!({})).await;
    assert_eq!(p.status, 200, "{}", p.raw);
    assert_eq!(p.body["result"], json!({}));
    let s = call(
        addr,
        &sid,
        json!(11),
        "logging/setLevel",
        json!({"level": "info"}),
    )
    .await;
    assert!(s.body["result"].is_object(), "{}", s.raw);
}
