//! A client that arrives right after a start (or reload) is not told
//! `Unknown tool` because an upstream was still connecting: lists and
//! unknown names wait for every upstream's first connect attempt
//! (src/router/mod.rs `Router::dispatch`, src/upstream/mod.rs
//! `Upstream::first_attempt`).
#![allow(clippy::disallowed_methods)] // tests spawn concurrent clients

use crate::support::*;
use serde_json::json;
use std::time::Duration;

const HUNG: &str = "[[upstream]]\nname = \"hung\"\ntransport = \"stdio\"\ncommand = \"sleep\"\nargs = [\"3600\"]\n";

/// One test, so the process-wide held counter is this test's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_requests_wait_for_first_attempts_and_no_longer() {
    mcp_edge::metrics::prometheus();
    let held = || mcp_edge::metrics::read(mcp_edge::metrics::REQUESTS_HELD, "");
    let before = held();

    // 1. An upstream that reads nothing for 1.5 s (a slow SDK import).
    let gw = start_nowait(
        "",
        &(fake_block_args("slow", "legacy", &["--slow-start", "1500"], "")
            + &fake_block("fast", "legacy", "")),
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let slow = gw.app().router().upstreams()[0].clone();
    assert!(
        slow.first_attempt_pending(tokio::time::Instant::now()),
        "the slow upstream should still be connecting"
    );
    let (called, listed) = tokio::join!(
        call_tool(addr, &sid, json!(1), "slow__echo", json!({"text": "early"})),
        call(addr, &sid, json!(2), "tools/list", json!({})),
    );
    assert_eq!(text_of(&called), "slow:early");
    let names = tool_names(&listed);
    for want in ["slow__echo", "fast__echo"] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    assert_eq!(held(), before + 2.0, "both early requests were held");
    // Settled: nothing waits any more, and nothing more is counted.
    let prompts = call(addr, &sid, json!(3), "prompts/list", json!({})).await;
    assert_eq!(
        prompts.body["result"]["prompts"].as_array().unwrap().len(),
        2
    );
    assert_eq!(held(), before + 2.0);
    gw.shutdown().await;

    // 2. A child that never answers `initialize`: the list waits only until
    //    its first attempt fails (startup_timeout 1 s), then comes without it.
    let gw = start_nowait(
        "",
        &(format!("{HUNG}startup_timeout = \"1s\"\n") + &fake_block("ok", "legacy", "")),
    )
    .await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let list = tokio::time::timeout(
        Duration::from_secs(20),
        call(addr, &sid, json!(1), "tools/list", json!({})),
    )
    .await
    .expect("answered once the hung upstream's first attempt timed out");
    let names = tool_names(&list);
    assert!(names.iter().any(|n| n == "ok__echo"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("hung__")), "{names:?}");
    let hung = gw.app().router().upstreams()[0].clone();
    assert!(!hung.first_attempt_pending(tokio::time::Instant::now()));
    assert!(hung.attempts() >= 1);
    // A name that stays unknown after the wait is still -32602.
    let unknown = call_tool(addr, &sid, json!(2), "nobody__echo", json!({})).await;
    assert_eq!(unknown.error_code(), Some(-32602), "{}", unknown.raw);
    gw.shutdown().await;
}

/// A shutdown does not wait for held requests: they are answered with what
/// there is (the hold's own bound here is 30 s + 60 s + 1 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_held_requests() {
    let gw = start_nowait("", &(HUNG.to_string() + &fake_block("ok", "legacy", ""))).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let list =
        tokio::spawn(async move { call(addr, &sid, json!(1), "tools/list", json!({})).await });
    // Until the list is being held (the ok upstream may still be connecting too).
    let app = gw.app().clone();
    let held = || app.in_flight().active() > 0;
    eventually_sync("the list held", Duration::from_secs(10), held).await;
    // A 30 s grace for calls in flight: only the release ends it sooner.
    tokio::time::timeout(
        Duration::from_secs(20),
        gw.shutdown_within(Duration::from_secs(30)),
    )
    .await
    .expect("shutdown did not wait for the held list");
    let list = tokio::time::timeout(Duration::from_secs(5), list)
        .await
        .expect("the held list was answered")
        .unwrap();
    assert_eq!(list.status, 200, "{}", list.raw);
    assert!(list.body["result"]["tools"].is_array(), "{}", list.raw);
}

/// A listing that fails once does not hide an upstream's tools until it
/// reconnects: the catalog is marked incomplete and listed again at the next
/// health check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_listing_is_retried_at_the_next_health_check() {
    let gw = start(
        "",
        &fake_block_args(
            "a",
            "legacy",
            &["--fail-first-list"],
            "health_interval = \"1s\"",
        ),
    )
    .await;
    let addr = gw.local_addr();
    let up = gw.app().router().upstreams()[0].clone();
    let sid = legacy_session(addr, "2025-11-25").await;
    let listed = || async {
        let names = tool_names(&call(addr, &sid, json!(1), "tools/list", json!({})).await);
        (!names.is_empty()).then_some(names)
    };
    let what = "the tools listed at the next health check";
    let names = eventually(what, Duration::from_secs(10), listed).await;
    assert!(names.iter().any(|n| n == "a__echo"), "{names:?}");
    assert!(!up.catalog().incomplete);
    assert_eq!(up.attempts(), 1, "no reconnect was needed");
    gw.shutdown().await;
}
