//! End-to-end behaviour of the downstream endpoint against the fake upstream:
//! both eras, routing, id remapping, and every refusal the v0 issue lists.
#![allow(clippy::disallowed_methods)] // tests spawn concurrent clients

use crate::support;
use crate::support::*;
use serde_json::{json, Value};

#[tokio::test]
async fn legacy_session_lists_and_calls_namespaced_tools() {
    let gw = start(
        "",
        &(fake_block("alpha", "legacy", "") + &fake_block("beta", "modern", "")),
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let list = call(addr, &sid, json!(1), "tools/list", json!({})).await;
    let names = tool_names(&list);
    assert!(names.contains(&"alpha__echo".to_string()), "{names:?}");
    assert!(names.contains(&"beta__echo".to_string()), "{names:?}");
    // Deterministic order: config order, then the upstream's own order.
    let first_beta = names.iter().position(|n| n.starts_with("beta__")).unwrap();
    assert!(names[..first_beta].iter().all(|n| n.starts_with("alpha__")));
    let a = call_tool(addr, &sid, json!(2), "alpha__echo", json!({"text": "hi"})).await;
    assert_eq!(text_of(&a), "alpha:hi");
    // beta is modern-only: it got _meta and answered through its own era.
    let b = call_tool(addr, &sid, json!(3), "beta__echo", json!({"text": "yo"})).await;
    assert_eq!(text_of(&b), "beta:yo");
    gw.shutdown().await;
}

#[tokio::test]
async fn version_negotiation_echoes_supported_and_falls_back_to_latest_legacy() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    for (asked, got) in [
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
    ] {
        let r = post(gw.local_addr(), &[], &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})).await;
        assert_eq!(r.body["result"]["protocolVersion"], got, "asked {asked}");
        let sid = r.header("mcp-session-id").unwrap();
        // The box's derived instance id (machine id, listen port), `.`, 36 hex.
        let (instance, hex) = sid.split_once('.').unwrap();
        let port = gw.local_addr().port();
        assert!(instance.ends_with(&format!("-{port}")), "{sid}");
        assert_eq!(hex.len(), 36, "{sid}");
    }
}

#[tokio::test]
async fn same_id_from_two_sessions_gets_each_its_own_answer() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let s1 = legacy_session(addr, "2025-11-25").await;
    let s2 = legacy_session(addr, "2025-11-25").await;
    // The first call is slower, so answers come back out of order upstream.
    let c1 = call_tool(
        addr,
        &s1,
        json!(7),
        "a__slow_echo",
        json!({"text": "one", "ms": 300}),
    );
    let c2 = call_tool(
        addr,
        &s2,
        json!(7),
        "a__slow_echo",
        json!({"text": "two", "ms": 10}),
    );
    let c3 = call_tool(
        addr,
        &s2,
        json!("7"),
        "a__slow_echo",
        json!({"text": "three", "ms": 150}),
    );
    let (r1, r2, r3) = tokio::join!(c1, c2, c3);
    assert_eq!(
        (text_of(&r1).as_str(), r1.body["id"].clone()),
        ("a:one", json!(7))
    );
    assert_eq!(
        (text_of(&r2).as_str(), r2.body["id"].clone()),
        ("a:two", json!(7))
    );
    // A string id stays a string.
    assert_eq!(
        (text_of(&r3).as_str(), r3.body["id"].clone()),
        ("a:three", json!("7"))
    );
}

#[tokio::test]
async fn legacy_session_rules() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    // No session id on a non-initialize request → 400.
    assert_eq!(post(addr, &[], &list).await.status, 400);
    // Unknown session → 404.
    assert_eq!(
        post(
            addr,
            &[("mcp-session-id", "0123456789abcdef0123456789abcdef0000")],
            &list
        )
        .await
        .status,
        404
    );
    let sid = legacy_session(addr, "2025-06-18").await;
    // Header absent → treated as 2025-03-26, accepted; unsupported → 400.
    assert_eq!(
        post(addr, &[("mcp-session-id", &sid)], &list).await.status,
        200
    );
    assert_eq!(
        post(
            addr,
            &[
                ("mcp-session-id", &sid),
                ("mcp-protocol-version", "1999-01-01")
            ],
            &list
        )
        .await
        .status,
        400
    );
    // ping is answered by the gateway.
    let p = call(addr, &sid, json!(5), "ping", json!({})).await;
    assert_eq!(p.body["result"], json!({}));
    // SSE when the client accepts only SSE.
    let r = post(
        addr,
        &[("mcp-session-id", &sid), ("accept", "text/event-stream")],
        &list,
    )
    .await;
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    assert!(r.raw.starts_with("event: message\ndata: "), "{}", r.raw);
    assert!(!tool_names(&r).is_empty());
    // DELETE frees the session; its id is dead afterwards.
    assert_eq!(
        request("DELETE", addr, &[("mcp-session-id", &sid)], "")
            .await
            .status,
        200
    );
    assert_eq!(
        post(addr, &[("mcp-session-id", &sid)], &list).await.status,
        404
    );
    assert_eq!(
        request("DELETE", addr, &[("mcp-session-id", &sid)], "")
            .await
            .status,
        404
    );
    assert_eq!(gw.app().sessions().count().0, 0);
}

#[tokio::test]
async fn batches_only_on_2025_03_26_sessions() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "two", "method": "tools/call", "params": {"name": "a__echo", "arguments": {"text": "b"}}}
    ]);
    let old = legacy_session(addr, "2025-03-26").await;
    let r = post(addr, &[("mcp-session-id", &old)], &batch).await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let arr = r.body.as_array().expect("batch answer is an array");
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[1]["id"], "two");
    assert_eq!(content_text(&arr[1]), Some("a:b"));
    let new = legacy_session(addr, "2025-11-25").await;
    let r = post(addr, &[("mcp-session-id", &new)], &batch).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32600)));
}

#[tokio::test]
async fn bad_input_gets_the_right_json_rpc_codes() {
    let gw = start("max_body_bytes = 4096", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let h = [("mcp-session-id", sid.as_str())];
    let r = request("POST", addr, &h, "{\"jsonrpc\": \"2.0\", ").await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32700)));
    let r = post(
        addr,
        &h,
        &json!({"jsonrpc": "1.0", "id": 1, "method": "ping"}),
    )
    .await;
    assert_eq!(
        (r.status, r.error_code(), r.body["id"].clone()),
        (400, Some(-32600), json!(1))
    );
    let r = post(
        addr,
        &h,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}),
    )
    .await;
    assert_eq!(r.error_code(), Some(-32600));
    let r = post(addr, &h, &json!("just a string")).await;
    assert_eq!(r.error_code(), Some(-32600));
    let r = call(addr, &sid, json!(1), "no/such/method", json!({})).await;
    assert_eq!(r.error_code(), Some(-32601));
    let r = call_tool(addr, &sid, json!(1), "a__nope", json!(null)).await;
    assert_eq!(r.error_code(), Some(-32602));
    // Body limit → 413 with a JSON-RPC error.
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a__echo", "arguments": {"text": "x".repeat(5000)}}});
    let r = post(addr, &h, &big).await;
    assert_eq!(r.status, 413);
    assert_eq!(r.error_code(), Some(-32600));
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("4096"));
}

#[tokio::test]
async fn foreign_origin_or_host_is_403_and_reaches_no_upstream() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let before = fake_stats(addr, &sid, json!(1), "a").await;
    let echo = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "a__echo", "arguments": {"text": "x"}}});
    let r = post(
        addr,
        &[("mcp-session-id", &sid), ("origin", "http://evil.example")],
        &echo,
    )
    .await;
    assert_eq!(r.status, 403);
    let r = post(
        addr,
        &[("mcp-session-id", &sid), ("host", "evil.example")],
        &echo,
    )
    .await;
    assert_eq!(r.status, 403);
    // Loopback origins are fine.
    let r = post(
        addr,
        &[
            ("mcp-session-id", &sid),
            ("origin", "http://localhost:6274"),
        ],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
    )
    .await;
    assert_eq!(r.status, 200);
    let after = fake_stats(addr, &sid, json!(4), "a").await;
    let count = |stats: &Value| stats["requests"].as_u64().unwrap();
    assert_eq!(
        count(&after),
        count(&before) + 1,
        "only the second stats call reached the upstream"
    );
}

#[tokio::test]
async fn unknown_fields_are_forwarded_unchanged() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(addr, &sid, json!(1), "a__exotic", json!(null)).await;
    assert_eq!(
        r.body["result"]["content"][0],
        json!({"type": "hologram", "data": "3d", "annotations": {"audience": ["user"], "x-depth": 7}})
    );
    assert_eq!(
        r.body["result"]["_meta"],
        json!({"com.example/trace": "abc-123"})
    );
    assert_eq!(
        r.body["result"]["vendorExtension"],
        json!({"nested": [1, 2, 3]})
    );
    let l = call(addr, &sid, json!(2), "tools/list", json!({})).await;
    let exotic = l.body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "a__exotic")
        .unwrap()
        .clone();
    assert_eq!(exotic["x-vendor-field"], json!({"kept": true}));
}

#[tokio::test]
async fn odd_tool_names_are_mapped_and_called_by_their_original_name() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let names = tool_names(&call(addr, &sid, json!(1), "tools/list", json!({})).await);
    for n in &names {
        assert!(
            n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{n}"
        );
    }
    let weird = names
        .iter()
        .find(|n| n.starts_with("a__weird_name_with_chars_"))
        .expect("mapped weird name");
    let r = call_tool(addr, &sid, json!(2), weird, json!(null)).await;
    assert_eq!(text_of(&r), "called as weird.name/with:chars");
    let long = names
        .iter()
        .find(|n| n.starts_with("a__a_really_long"))
        .expect("mapped long name");
    assert_eq!(long.len(), 64);
    let r = call_tool(addr, &sid, json!(3), long, json!(null)).await;
    assert!(
        text_of(&r).starts_with("called as a_really_long_tool_name"),
        "{}",
        r.raw
    );
}

#[tokio::test]
async fn prompts_and_resources_are_routed() {
    let gw = start(
        "",
        &(fake_block("a", "legacy", "") + &fake_block("b", "legacy", "")),
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let p = call(addr, &sid, json!(1), "prompts/list", json!({})).await;
    let names: Vec<_> = p.body["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("a__greet"), json!("b__greet")]);
    let g = call(
        addr,
        &sid,
        json!(2),
        "prompts/get",
        json!({"name": "b__greet", "arguments": {"who": "pi"}}),
    )
    .await;
    assert_eq!(
        g.body["result"]["messages"][0]["content"]["text"],
        "hello pi from b"
    );
    let r = call(addr, &sid, json!(3), "resources/list", json!({})).await;
    assert_eq!(r.body["result"]["resources"].as_array().unwrap().len(), 2);
    let rr = call(
        addr,
        &sid,
        json!(4),
        "resources/read",
        json!({"uri": "fake://b/readme"}),
    )
    .await;
    assert_eq!(rr.body["result"]["contents"][0]["text"], "readme of b");
    let nf = call(
        addr,
        &sid,
        json!(5),
        "resources/read",
        json!({"uri": "fake://zzz/none"}),
    )
    .await;
    assert_eq!(nf.error_code(), Some(-32602));
}

#[tokio::test]
async fn a_down_upstream_does_not_break_the_others() {
    let broken = "[[upstream]]\nname = \"gone\"\ntransport = \"stdio\"\ncommand = \"/nonexistent/mcp-server\"\n";
    let gw = start("", &(fake_block("a", "legacy", "") + broken)).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let names = tool_names(&call(addr, &sid, json!(1), "tools/list", json!({})).await);
    assert!(names.iter().all(|n| n.starts_with("a__")), "{names:?}");
    let r = call_tool(addr, &sid, json!(2), "gone__anything", json!(null)).await;
    assert_eq!(
        r.error_code(),
        Some(mcp_edge::protocol::UPSTREAM_UNAVAILABLE)
    );
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'gone'"),
        "{}",
        r.raw
    );
    // The crash of an upstream mid-call is a clear error naming it; the others keep serving.
    let c = call_tool(addr, &sid, json!(3), "a__crash", json!(null)).await;
    assert!(
        c.body["error"]["message"].as_str().unwrap().contains("'a'"),
        "{}",
        c.raw
    );
    assert_eq!(
        gw.live_owner_tasks(),
        2,
        "one owner task per upstream, whatever happened"
    );
}

#[tokio::test]
async fn call_timeout_names_the_upstream() {
    let gw = start("", &fake_block("slow", "legacy", "call_timeout = \"1s\"")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(addr, &sid, json!(1), "slow__slow_echo", json!({"ms": 3000})).await;
    assert_eq!(r.error_code(), Some(mcp_edge::protocol::UPSTREAM_TIMEOUT));
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("'slow'"));
    // The connection stays usable.
    let ok = call_tool(addr, &sid, json!(2), "slow__echo", json!({"text": "still"})).await;
    assert_eq!(text_of(&ok), "slow:still");
}

/// A child that stops reading its stdin: a call whose request cannot be
/// written (the pipe is full) still ends at its `call_timeout`, not when the
/// child reads again.
#[tokio::test]
async fn a_write_the_child_does_not_read_ends_at_the_call_timeout() {
    let marks = support::marks::Marks::new();
    let gw = start(
        "",
        &marks.fake_block("s", "legacy", "call_timeout = \"1s\""),
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let stall = call_tool(addr, &sid, json!(1), "s__echo", json!({"stall_ms": 8000}));
    // 256 KiB of arguments: more than a pipe holds while nobody reads it.
    let big = json!({"text": "x".repeat(256 * 1024)});
    let blocked = async {
        marks.called("echo", 1).await; // the child stalls: it reads nothing now
        call_tool(addr, &sid, json!(2), "s__echo", big).await
    };
    // Before the write counted, the second call waited for the child to
    // read again and then got its echo.
    let (stalled, r) = tokio::join!(stall, blocked);
    assert_eq!(
        stalled.error_code(),
        Some(mcp_edge::protocol::UPSTREAM_TIMEOUT)
    );
    assert_eq!(
        r.error_code(),
        Some(mcp_edge::protocol::UPSTREAM_TIMEOUT),
        "{}",
        r.raw.len()
    );
}

#[tokio::test]
async fn full_session_table_answers_503() {
    let gw = start("session_capacity = 2", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    legacy_session(addr, "2025-11-25").await;
    legacy_session(addr, "2025-11-25").await;
    let r = post(addr, &[], &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})).await;
    assert_eq!(
        (r.status, r.error_code()),
        (503, Some(mcp_edge::protocol::SESSIONS_FULL))
    );
}

#[tokio::test]
async fn upstream_pagination_is_followed_and_a_looping_cursor_cannot_hang_it() {
    let upstreams = fake_block_args("paged", "legacy", &["--paged", "3"], "")
        + &fake_block_args("loop", "legacy", &["--looping"], "");
    let gw = start("", &upstreams).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let names = tool_names(&call(addr, &sid, json!(1), "tools/list", json!({})).await);
    let paged: Vec<&String> = names.iter().filter(|n| n.starts_with("paged__")).collect();
    assert_eq!(paged.len(), 13, "all pages of 3 followed: {paged:?}");
    assert_eq!(paged[0], "paged__echo");
    // The looping upstream repeats its cursor: its first page is kept, then the listing stops.
    let looped: Vec<&String> = names.iter().filter(|n| n.starts_with("loop__")).collect();
    assert_eq!(looped, vec!["loop__echo", "loop__slow_echo"]);
    // A downstream cursor is refused: the gateway returns complete lists.
    let r = call(addr, &sid, json!(2), "tools/list", json!({"cursor": "x"})).await;
    assert_eq!(r.error_code(), Some(-32602));
}

#[tokio::test]
async fn huge_numeric_ids_come_back_unchanged() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let body = r#"{"jsonrpc":"2.0","id":99999999999999999999999,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"big"}}}"#;
    let r = request(
        "POST",
        addr,
        &[("mcp-session-id", &sid), ("accept", "application/json")],
        body,
    )
    .await;
    assert!(
        r.raw.contains(r#""id":99999999999999999999999"#),
        "{}",
        r.raw
    );
}

#[tokio::test]
async fn bad_builtin_arguments_are_a_tool_error_not_a_protocol_error() {
    let gw = start(
        "",
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(addr, &sid, json!(1), "edge__disk_usage", json!({"path": 5})).await;
    assert_eq!(r.body["result"]["isError"], true, "{}", r.raw);
    let r = call_tool(addr, &sid, json!(2), "edge__nope", json!(null)).await;
    assert_eq!(r.error_code(), Some(-32602));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_calls_in_flight_finish() {
    let marks = support::marks::Marks::new();
    let gw = start("", &marks.fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let slow = tokio::spawn(async move {
        call_tool(
            addr,
            &sid,
            json!(1),
            "a__slow_echo",
            json!({"ms": 1500, "text": "finished"}),
        )
        .await
    });
    // Shut down while the call is running: the upstream stays until it answered.
    marks.called("slow_echo", 1).await;
    gw.shutdown().await;
    let r = slow.await.unwrap();
    assert_eq!(text_of(&r), "a:finished", "{}", r.raw);
}

/// Issue 13 part 6: a legacy session is not idle while one of its requests
/// is in flight. A 12 s call on a session whose idle timeout is 10 s (the
/// sweep runs every 2.5 s meanwhile) leaves the session usable; before,
/// the call succeeded and the session was gone (404) right after.
#[tokio::test]
async fn a_long_call_keeps_its_session() {
    let gw = start(
        "session_idle_timeout = \"10s\"",
        &fake_block("a", "legacy", "call_timeout = \"30s\""),
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(
        addr,
        &sid,
        json!(1),
        "a__slow_echo",
        json!({"text": "late", "ms": 12_000}),
    )
    .await;
    assert_eq!(text_of(&r), "a:late", "{}", r.raw);
    let after = call(addr, &sid, json!(2), "tools/list", json!({})).await;
    assert_eq!(
        after.status, 200,
        "session gone after a long call: {}",
        after.raw
    );
    // The session is still held (and idle again from the call's end: the
    // session unit tests check it then expires).
    assert_eq!(gw.app().sessions().count().0, 1);
    gw.shutdown().await;
}

/// A forced reconnect of a stdio upstream (the admin listener's
/// `reconnect`, a reload) fails the calls still waiting on the old child at
/// once with a transport error, not at their `call_timeout` (the old
/// driver's future is dropped; before, its in-flight table kept the
/// waiters, and a caller heard nothing for the whole timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_reconnect_fails_the_old_childs_calls_at_once() {
    let marks = support::marks::Marks::new();
    let gw = start(
        "",
        &marks.fake_block("a", "legacy", "call_timeout = \"120s\""),
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let app = gw.app();
    let call = call_tool(
        addr,
        &sid,
        json!(1),
        "a__slow_echo",
        json!({"text": "never", "ms": 100_000}),
    );
    let reconnect = async {
        marks.called("slow_echo", 1).await; // waiting on the old child
        app.router().upstreams()[0].force_reconnect();
    };
    let (r, ()) = tokio::join!(call, reconnect);
    assert_eq!(r.error_code(), Some(-31000), "{}", r.raw);
    gw.shutdown().await;
}
