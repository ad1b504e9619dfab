//! Issue 13 acceptance: the parked-call table (modern callers' calls waiting
//! for their `inputResponses`) holds its capacity under a test that fills it,
//! refuses (and counts) the call past it, and drains to empty after expiry
//! with live heap back to its baseline. Heap is read from the test binary's
//! counting allocator, the test alone in its process (`support::heap`).

use crate::support;
use crate::support::scripted::{http_block, scripted, Mode};
use crate::support::*;
use mcp_edge::alloc::live_bytes;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::heap::until;

/// Heap allowed above the baseline once everything drained: the scripted
/// upstream's request log and the tokio/hyper bookkeeping that stays.
const TOLERANCE: usize = 64 * 1024;

const TEN_S: Duration = Duration::from_secs(10);

async fn interview(addr: SocketAddr, id: usize) -> Reply {
    let params = json!({"name": "remote__interview", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "sampling": {}, "roots": {}}}});
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "remote__interview"),
    ];
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    post(addr, &headers, &body).await
}

fn parked_state(r: &Reply) -> &str {
    assert_eq!(
        r.body["result"]["resultType"], "input_required",
        "{}",
        r.raw
    );
    r.body["result"]["requestState"].as_str().unwrap()
}

fn refused_parked() -> f64 {
    mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"parked_calls\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_parked_table_refuses_counts_and_drains_to_its_baseline() {
    if !crate::alone!(a_full_parked_table_refuses_counts_and_drains_to_its_baseline) {
        return;
    }
    mcp_edge::metrics::prometheus();
    let (up, url) = scripted(Mode::Legacy).await;
    // Each parked call also holds its request in the upstream's table of relayed
    // requests (16 by default): room for all of them.
    let gw = start(
        "max_pending_server_requests = 128",
        &http_block("remote", &url, "max_in_flight = 128"),
    )
    .await;
    let (addr, app) = (gw.local_addr(), gw.app().clone());
    let cap = mcp_edge::limits::PARKED_CALLS;
    assert_eq!(app.parked().capacity(), cap);
    let later = || tokio::time::Instant::now() + mcp_edge::limits::PARKED_CALL_TTL;
    // Warm-up: a few calls parked at once and expired (metric labels,
    // statics, and the idle connections the upstream's pool keeps).
    let warm = 2 * mcp_edge::limits::UPSTREAM_IDLE_CONNECTIONS;
    for i in 0..warm {
        parked_state(&interview(addr, 2000 + i).await);
    }
    assert_eq!(
        mcp_edge::downstream::rounds::expire(&app, later()).await,
        warm
    );
    until("the warm-up drained", TEN_S, || {
        up.refused.lock().unwrap().len() == warm
    })
    .await;
    let baseline = settled(&up).await;
    let mut refused = 0;
    let mut drained = Vec::new();
    // Three rounds: the first drain back to the baseline, then no growth
    // between the last two (a leak per call would grow every round; what a
    // runtime thread first allocates under load, once, does not).
    for round in 0..3 {
        let (full, after) = fill_and_drain(addr, &app, &up, round * 10_000, &mut refused).await;
        refused = 0; // its log was emptied
        eprintln!(
            "live heap: baseline {baseline} B, {cap} parked {full} B ({} B per parked call), drained {after} B; upstream connections open: {}",
            full.saturating_sub(baseline) / cap,
            up.connections.load(Ordering::SeqCst)
        );
        assert!(
            full.saturating_sub(baseline) / cap <= mcp_edge::budget::PARKED_CALL_BYTES,
            "a parked call costs more than budget::PARKED_CALL_BYTES"
        );
        drained.push(after);
    }
    assert!(
        drained[0] <= baseline + TOLERANCE,
        "heap back to baseline: {} B vs {baseline} B",
        drained[0]
    );
    assert!(
        drained[2] <= drained[1] + TOLERANCE / 4,
        "no growth with work done: {drained:?}"
    );
}

/// Live heap, settled, once the test's own logs are emptied (the scripted
/// upstream's request and refusal logs grow with the work, mcp-edge must
/// not).
async fn settled(up: &support::scripted::Upstream) -> usize {
    drop(std::mem::take(&mut *up.requests.lock().unwrap()));
    drop(std::mem::take(&mut *up.refused.lock().unwrap()));
    support::heap::settled_live().await
}

/// Fills the table (ids from `first`), checks the refusal past it, expires
/// everything and waits for the drain; returns the live heap full and drained.
async fn fill_and_drain(
    addr: SocketAddr,
    app: &mcp_edge::downstream::App,
    up: &support::scripted::Upstream,
    first: usize,
    refused: &mut usize,
) -> (usize, usize) {
    let cap = mcp_edge::limits::PARKED_CALLS;
    let later = || tokio::time::Instant::now() + mcp_edge::limits::PARKED_CALL_TTL;
    for i in 0..cap {
        parked_state(&interview(addr, first + i + 1).await);
    }
    assert_eq!(app.parked().len(), cap);
    let full = live_bytes();
    let before = refused_parked();
    let r = interview(addr, first + 1000).await;
    assert_eq!(
        r.error_code(),
        Some(mcp_edge::protocol::PARKED_CALLS_FULL),
        "{}",
        r.raw
    );
    assert_eq!(r.body["error"]["data"]["capacity"], cap);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("retry later"));
    assert_eq!(refused_parked(), before + 1.0, "the refusal is counted");
    assert_eq!(app.parked().len(), cap, "the table held its capacity");
    *refused += 1;
    let n = *refused;
    until("the refused call's request answered", TEN_S, || {
        up.refused.lock().unwrap().len() == n
    })
    .await;
    assert_eq!(
        mcp_edge::downstream::rounds::expire(app, later()).await,
        cap
    );
    assert!(app.parked().is_empty());
    *refused += cap;
    let n = *refused;
    until("every parked request answered with an error", TEN_S, || {
        up.refused.lock().unwrap().len() == n
    })
    .await;
    assert!(up.waiting.lock().unwrap().is_empty());
    assert_eq!(up.abandoned.load(Ordering::SeqCst), 0);
    // Connections and their tasks wind down.
    until("the upstream's connections closed", TEN_S, || {
        up.connections.load(Ordering::SeqCst) <= mcp_edge::limits::UPSTREAM_IDLE_CONNECTIONS
    })
    .await;
    (full, settled(up).await)
}
