//! A legacy session's call stream cut in the middle is resumed with
//! `Last-Event-ID` and loses nothing (issue 25 part 3;
//! `../shared/spec/2025-11-25/transports.mdx` §Resumability and
//! Redelivery).

use crate::support::*;
use serde_json::{json, Value};
use std::time::Duration;

fn progress_call(id: &str, steps: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "a__progress", "arguments": {"steps": steps, "ms": 150, "tag": "t"},
            "_meta": {"progressToken": "p"}}})
    .to_string()
}

/// `<stream>-<n>` of an event.
fn id_of(e: &sse::Event) -> (u64, u64) {
    let id =
        e.id.as_deref()
            .unwrap_or_else(|| panic!("an event without id: {e:?}"));
    let (s, n) = id.split_once('-').unwrap();
    (s.parse().unwrap(), n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_call_stream_resumed_with_last_event_id_gets_every_later_event_once() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let h = [("mcp-session-id", sid.as_str())];
    let mut s = sse::open("POST", addr, &h, &progress_call("cut-me", 6)).await;
    assert_eq!(s.header("content-type"), Some("text/event-stream"));
    let mut before = Vec::new();
    let is_progress = |e: &sse::Event| e.data["method"] == "notifications/progress";
    while before.iter().filter(|e| is_progress(e)).count() < 2 {
        before.push(
            s.next_event(Duration::from_secs(10))
                .await
                .unwrap()
                .unwrap(),
        );
    }
    // The connection is cut in the middle of the call; the client comes
    // back at once, on a new connection (whether or not the gateway has
    // seen the old one close yet).
    drop(s);
    let last = before.last().unwrap().id.clone().unwrap();
    let h = [
        ("mcp-session-id", sid.as_str()),
        ("last-event-id", last.as_str()),
    ];
    let resumed = sse::open("GET", addr, &h, "").await;
    assert_eq!(resumed.status, 200);
    assert_eq!(resumed.header("content-type"), Some("text/event-stream"));
    let after = tokio::time::timeout(Duration::from_secs(20), resumed.rest_events())
        .await
        .expect("the resumed stream ends with the result");

    let all: Vec<&sse::Event> = before.iter().chain(&after).collect();
    let stream = id_of(all[0]).0;
    let places: Vec<u64> = all
        .iter()
        .map(|e| id_of(e))
        .map(|(s, n)| {
            assert_eq!(s, stream, "one stream");
            n
        })
        .collect();
    // The priming event (not dispatched: no data) was 0.
    let expected: Vec<u64> = (1..=places.len() as u64).collect();
    assert_eq!(places, expected, "each event once, none missing: {all:?}");
    let progress: Vec<&Value> = all
        .iter()
        .filter(|e| is_progress(e))
        .map(|e| &e.data["params"]["progress"])
        .collect();
    assert_eq!(
        progress,
        (1..=6)
            .map(|n| json!(n))
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    let answers: Vec<&&sse::Event> = all.iter().filter(|e| e.data["id"] == "cut-me").collect();
    assert_eq!(answers.len(), 1, "the result exactly once: {all:?}");
    assert!(
        content_text(&answers[0].data).unwrap().starts_with("done"),
        "{:?}",
        answers[0]
    );
    assert_eq!(
        after.last().unwrap().data["id"],
        "cut-me",
        "the result ends the stream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumption_is_the_sessions_own_and_an_unknown_stream_is_gone() {
    mcp_edge::metrics::prometheus();
    let refused = || mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"sse_resume\"");
    let before = refused();
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let (mine, other) = (
        legacy_session(addr, "2025-11-25").await,
        legacy_session(addr, "2025-11-25").await,
    );
    let h = [("mcp-session-id", mine.as_str())];
    let mut s = sse::open("POST", addr, &h, &progress_call("mine", 4)).await;
    let first = s
        .next_event(Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    let (stream, _) = id_of(&first);
    drop(s);
    // Another session naming this stream does not get it (410: for that
    // session no such stream waits), nor does it end it.
    let id = format!("{stream}-1");
    let theirs = request(
        "GET",
        addr,
        &[("mcp-session-id", &other), ("last-event-id", &id)],
        "",
    )
    .await;
    assert_eq!(theirs.status, 410, "{}", theirs.raw);
    assert!(theirs.raw.contains("cannot be resumed"), "{}", theirs.raw);
    let h = [
        ("mcp-session-id", mine.as_str()),
        ("last-event-id", id.as_str()),
    ];
    let events = sse::open("GET", addr, &h, "").await.rest().await;
    assert_eq!(events.last().unwrap()["id"], "mine", "{events:?}");
    // Ended: nothing to resume.
    let again = request("GET", addr, &h, "").await;
    assert_eq!(again.status, 410, "{}", again.raw);
    assert!(refused() >= before + 2.0, "both counted");
    // An ID that is none of mcp-edge's is ignored: a plain GET stream.
    let h = [("mcp-session-id", mine.as_str()), ("last-event-id", "abc")];
    let plain = sse::open("GET", addr, &h, "").await;
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-type"), Some("text/event-stream"));
}

/// A legacy session's GET stream resumed with `Last-Event-ID` keeps its
/// stream number and goes on after that event with what changed while its
/// client was away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_stream_resumed_goes_on_with_what_changed_meanwhile() {
    let (gw, addr, sid) = edge_session("keepalive = \"60s\"").await;
    let h = [
        ("mcp-session-id", sid.as_str()),
        ("accept", "text/event-stream"),
    ];
    let mut s = sse::open("GET", addr, &h, "").await;
    assert_eq!(s.status, 200);
    let edge = || gw.app().router().upstreams()[0].clone();
    edge().force_reconnect();
    let first = s
        .next_event(Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.data["method"], "notifications/tools/list_changed");
    let (stream, n) = id_of(&first);
    drop(s); // the client goes
             // While it is away, the list changes again.
    edge().force_reconnect();
    let last = format!("{stream}-{n}");
    let next = resumed_get(addr, &sid, &last).await;
    let (again, m) = id_of(&next);
    assert_eq!(again, stream, "the same stream goes on");
    assert!(m > n, "after the client's last event: {m} > {n}");
}

/// A 2025-11-25 GET stream is primed: resumed from its priming event (it
/// sent nothing else), it still announces a change made while its client
/// was away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_stream_resumed_from_its_priming_event_misses_no_change() {
    let (gw, addr, sid) = edge_session("keepalive = \"60s\"").await;
    let h = [
        ("mcp-session-id", sid.as_str()),
        ("accept", "text/event-stream"),
    ];
    let s = sse::open("GET", addr, &h, "").await;
    assert_eq!(s.status, 200);
    let primed = || s.seen().last_event_id;
    eventually_sync("the priming event", Duration::from_secs(10), || {
        primed().is_some()
    })
    .await;
    let (last, retry) = (primed().unwrap(), s.seen().retry_ms);
    assert!(
        last.ends_with("-0") && retry == Some(1000),
        "{last} {retry:?}"
    );
    let parked = || gw.app().sse_parked();
    drop(s);
    eventually_sync("the stream parked", Duration::from_secs(10), || {
        parked() == 1
    })
    .await;
    gw.app().router().upstreams()[0].force_reconnect();
    resumed_get(addr, &sid, &last).await;
    assert_eq!(gw.app().sse_resumed(), 1);
}

/// The first event of session `sid`'s GET stream resumed after `last`:
/// a tools list change.
async fn resumed_get(addr: std::net::SocketAddr, sid: &str, last: &str) -> sse::Event {
    let h = [("mcp-session-id", sid), ("last-event-id", last)];
    let mut resumed = sse::open("GET", addr, &h, "").await;
    assert_eq!(resumed.status, 200);
    let wait = Duration::from_secs(10);
    let next = resumed.next_event(wait).await.unwrap().unwrap();
    assert_eq!(
        next.data["method"], "notifications/tools/list_changed",
        "{next:?}"
    );
    next
}
