//! A client that arrives right after a start (or reload) is not told
//! `Unknown tool` because an upstream was still connecting: lists and
//! unknown names wait for every upstream's first connect attempt, bounded by
//! that upstream's `startup_timeout` (src/router/mod.rs `Router::dispatch`).

mod support;
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_right_after_start_wait_for_a_slow_upstream() {
    mcp_edge::metrics::prometheus();
    let held_before = mcp_edge::metrics::read(mcp_edge::metrics::REQUESTS_HELD, "");
    let gw = start_nowait(
        "",
        &(fake_block_args("slow", "legacy", &["--slow-start", "1500"], "")
            + &fake_block("fast", "legacy", "")),
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    // Both sent before the slow upstream can have answered its `initialize`.
    assert!(
        gw.app().router.upstreams()[0].first_attempt_pending(),
        "the slow upstream should still be connecting"
    );
    let (called, listed) = tokio::join!(
        call(
            addr,
            &sid,
            json!(1),
            "tools/call",
            json!({"name": "slow__echo", "arguments": {"text": "early"}}),
        ),
        call(addr, &sid, json!(2), "tools/list", json!({})),
    );
    assert_eq!(text_of(&called), "slow:early");
    let names = tool_names(&listed);
    for want in ["slow__echo", "fast__echo"] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    let prompts = call(addr, &sid, json!(3), "prompts/list", json!({})).await;
    assert_eq!(
        prompts.body["result"]["prompts"].as_array().unwrap().len(),
        2
    );
    assert!(
        mcp_edge::metrics::read(mcp_edge::metrics::REQUESTS_HELD, "") >= held_before + 2.0,
        "both early requests are counted as held"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_upstream_delays_the_list_only_until_its_startup_timeout() {
    // `sleep` never answers `initialize`: its first attempt fails after
    // startup_timeout (1 s), and the list then comes without its tools.
    let hung = "[[upstream]]\nname = \"hung\"\ntransport = \"stdio\"\ncommand = \"sleep\"\nargs = [\"3600\"]\nstartup_timeout = \"1s\"\n";
    let gw = start_nowait("", &(hung.to_string() + &fake_block("ok", "legacy", ""))).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let list = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        call(addr, &sid, json!(1), "tools/list", json!({})),
    )
    .await
    .expect("the list is answered once the hung upstream's first attempt times out");
    let names = tool_names(&list);
    assert!(names.iter().any(|n| n == "ok__echo"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("hung__")), "{names:?}");
    assert!(!gw.app().router.upstreams()[0].first_attempt_pending());
    // A name that stays unknown after the wait is still -32602 (and names
    // the upstream when its prefix says whose it would be).
    let unknown = call(
        addr,
        &sid,
        json!(2),
        "tools/call",
        json!({"name": "nobody__echo", "arguments": {}}),
    )
    .await;
    assert_eq!(unknown.error_code(), Some(-32602), "{}", unknown.raw);
    gw.shutdown().await;
}
