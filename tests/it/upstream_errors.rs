//! Per-request errors stay per-request (issue 13, part 1): an upstream's
//! HTTP answer that refuses one request — a JSON-RPC error on any status,
//! or a 4xx without one — is that caller's error, with code, message and
//! `data` kept, and it neither marks the upstream down nor reconnects it.
//! So is a successful answer mcp-edge cannot read (issue 25, part 6).

use crate::support::scripted::{self, http_block, scripted, Mode};
use crate::support::*;
use serde_json::{json, Value};
use tokio::time::Instant;

#[tokio::test]
async fn an_upstreams_refusal_of_one_request_is_that_callers_error_only() {
    mcp_edge::metrics::prometheus();
    let (up, gw, sid) = remote().await;
    let addr = gw.local_addr();
    let r = call_tool(addr, &sid, json!(1), "remote__needs_sampling", json!({})).await;
    assert_eq!(r.error_code(), Some(-32021), "{}", r.raw);
    let e = &r.body["error"];
    assert_eq!(e["message"], "Missing required client capability");
    assert_eq!(e["data"]["requiredCapabilities"], json!({"sampling": {}}));
    let (plain, _) = failed(&gw, &sid, "remote__bad_request").await;
    assert_eq!(plain["error"]["data"]["httpStatus"], 400);
    // The upstream stayed up: the same upstream session (this caller's,
    // opened at its first call: it declared no capabilities) answers next.
    stayed_up(&gw, &up, &sid).await;
    // A modern caller answered in JSON gets the spec's HTTP status: 400
    // (index.mdx: -32021 on HTTP is 400).
    let params = json!({"name": "remote__needs_sampling", "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}});
    let headers = [
        ("accept", "application/json"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "remote__needs_sampling"),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": params});
    let m = post(addr, &headers, &body).await;
    assert_eq!((m.status, m.error_code()), (400, Some(-32021)), "{}", m.raw);
}

/// An answer to one call that is no JSON-RPC response — two JSON texts in
/// a JSON body, an HTML page with 200 — fails that call with a JSON-RPC
/// error naming the upstream and what was wrong; the upstream stays up and
/// is not reconnected.
#[tokio::test]
async fn an_unreadable_answer_to_one_call_is_that_calls_error_only() {
    let (up, gw, sid) = remote().await;
    let (twice, message) = failed(&gw, &sid, "remote__twice").await;
    assert!(
        message.contains("'remote'") && message.contains("several JSON texts"),
        "{message}"
    );
    assert_eq!(twice["error"]["data"]["upstream"], "remote");
    let (_, message) = failed(&gw, &sid, "remote__html").await;
    assert!(message.contains("not JSON (text/html"), "{message}");
    stayed_up(&gw, &up, &sid).await;
}

/// A legacy upstream that primes a call's SSE answer with an event id and
/// a `retry`, then closes the stream (2025-11-25 SSE polling): the call's
/// stream is resumed with `Last-Event-ID` after the retry, the call
/// succeeds, and it was sent once (issue 25, part 3). The caller's own
/// stream (a 2025-11-25 session's) is closed in turn and polled once by
/// its client. One whose resumption is refused fails that call only.
#[tokio::test]
async fn a_calls_stream_closed_after_its_priming_event_is_resumed() {
    let (up, gw, sid) = remote().await;
    let (r, polls) = call_polled(gw.local_addr(), &sid, json!(1), "remote__polled").await;
    assert_eq!(content_text(&r), Some("polled"), "{r}");
    assert_eq!(polls, 1, "the caller's stream closed as the upstream's did");
    let (posted, first, ids) = resumptions(&up);
    assert_eq!(ids, ["p1"]);
    // `retry: 0` is lengthened to the floor, limits::SSE_RETRY_MIN.
    // not ordering: a lower bound on the wait the test is about.
    assert!(first - posted >= mcp_edge::limits::SSE_RETRY_MIN);
    let sent = (up.versions.lock().unwrap().iter())
        .filter(|(m, _)| m == "tools/call")
        .count();
    assert_eq!(sent, 1, "never sent again");
    // A stream that cannot be resumed (the GET refused) fails that call
    // only: the upstream stays up, its session answers the next call.
    let (_, message) = failed(&gw, &sid, "remote__polled_gone").await;
    assert!(
        message.contains("cut this call's answer") && message.contains("HTTP 405"),
        "{message}"
    );
    stayed_up(&gw, &up, &sid).await;
}

/// A stream that the server keeps closing with no new event is resumed
/// `limits::SSE_RESUMES_PER_CALL` times, the first after
/// `limits::SSE_RETRY_DEFAULT` (it sent no `retry`), then the call fails,
/// counted as `refused{limit="sse_resumes"}`; the upstream stays up.
#[tokio::test]
async fn a_stream_that_keeps_closing_is_resumed_a_bounded_number_of_times() {
    mcp_edge::metrics::prometheus();
    let refused = || mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"sse_resumes\"");
    let before = refused();
    let (up, gw, sid) = remote().await;
    let (_, message) = failed(&gw, &sid, "remote__polled_forever").await;
    let n = mcp_edge::limits::SSE_RESUMES_PER_CALL as usize;
    assert!(message.contains(&format!("resumed {n} times")), "{message}");
    let (posted, first, ids) = resumptions(&up);
    assert_eq!(ids, vec!["f1"; n]);
    assert!(refused() >= before + 1.0, "counted");
    // not ordering: a lower bound on the wait the test is about.
    assert!(first - posted >= mcp_edge::limits::SSE_RETRY_DEFAULT);
    stayed_up(&gw, &up, &sid).await;
}

/// When the scripted upstream got the `tools/call`, when it was first
/// resumed, and the event ID each resumption named.
fn resumptions(up: &scripted::Upstream) -> (Instant, Instant, Vec<String>) {
    let requests = up.requests.lock().unwrap();
    let posted = requests
        .iter()
        .find(|(_, m)| m == "tools/call")
        .expect("the call posted")
        .0;
    let resumed = up.resumed.lock().unwrap();
    let ids = resumed.iter().map(|(_, id)| id.clone()).collect();
    (posted, resumed.first().expect("resumed").0, ids)
}

/// A gateway in front of a legacy scripted upstream `remote`, and a
/// legacy session on it.
async fn remote() -> (
    std::sync::Arc<scripted::Upstream>,
    mcp_edge::gateway::Gateway,
    String,
) {
    let (up, url) = scripted(Mode::Legacy).await;
    let gw = start("", &http_block("remote", &url, "")).await;
    let sid = legacy_session(gw.local_addr(), "2025-11-25").await;
    (up, gw, sid)
}

/// Calls `tool` in session `sid` as a client that polls (its stream
/// closes when the upstream's does), which must fail with -32603: the
/// response and its message.
async fn failed(gw: &mcp_edge::gateway::Gateway, sid: &str, tool: &str) -> (Value, String) {
    let (r, _) = call_polled(gw.local_addr(), sid, json!(7), tool).await;
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or("").to_string();
    (r, message)
}

/// The upstream of `sid`'s calls stayed up: the same upstream session
/// (the caller's, opened at its first call) answers the next call, no
/// reconnect (`initialize` twice: mcp-edge's session and the caller's), and
/// its status is ready.
async fn stayed_up(gw: &mcp_edge::gateway::Gateway, up: &scripted::Upstream, sid: &str) {
    let ok = call_tool(gw.local_addr(), sid, json!(99), "remote__hello", json!({})).await;
    assert_eq!(text_of(&ok), "hello from s1", "{}", ok.raw);
    let initializes = (up.requests.lock().unwrap().iter())
        .filter(|(_, m)| m == "initialize")
        .count();
    assert_eq!(
        initializes, 2,
        "mcp-edge's session and the caller's; no reconnect"
    );
    let status = gw.app().router().upstreams()[0].status();
    assert!(
        matches!(status, mcp_edge::router::Status::Ready { .. }),
        "{status:?}"
    );
}

/// The acceptance of issue 13 part 1: while one client's calls draw
/// -32021, -32020 and -32602 from a modern HTTP upstream, another client's
/// calls to the same upstream keep succeeding, and the upstream is never
/// reconnected (its connect counter and its handshakes unchanged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_refusals_never_take_the_upstream_from_another() {
    mcp_edge::metrics::prometheus();
    let (up, url) = scripted(Mode::Modern).await;
    let gw = start("", &http_block("shared", &url, "")).await;
    let addr = gw.local_addr();
    let connects = || {
        mcp_edge::metrics::read(
            mcp_edge::metrics::UPSTREAM_CONNECTS,
            "upstream=\"shared\",outcome=\"ok\"",
        )
    };
    let discovers = || {
        (up.requests.lock().unwrap().iter())
            .filter(|(_, m)| m == "server/discover")
            .count()
    };
    let (connects0, discovers0) = (connects(), discovers());
    assert_eq!(connects0, 1.0);
    let bad = legacy_session(addr, "2025-11-25").await;
    let refused = async {
        let expect = [
            ("shared__needs_sampling", -32021),
            ("shared__header_mismatch", -32020),
            ("shared__bad_params", -32602),
        ];
        for i in 0..20 {
            let (tool, code) = expect[i % 3];
            let r = call_tool(addr, &bad, json!(i), tool, json!({})).await;
            assert_eq!(r.error_code(), Some(code), "{tool}: {}", r.raw);
        }
        let r = call_tool(addr, &bad, json!(99), "shared__bad_params", json!({})).await;
        assert_eq!(r.body["error"]["data"], json!({"field": "x"}), "data kept");
    };
    let served = async {
        for i in 0..20 {
            let r = modern(
                addr,
                json!(i),
                "tools/call",
                json!({"name": "shared__hello"}),
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.raw);
            assert!(text_of(&r).starts_with("hello from"), "{}", r.raw);
        }
    };
    tokio::join!(refused, served);
    assert_eq!(connects(), connects0, "no reconnect");
    assert_eq!(discovers(), discovers0, "no new handshake");
    gw.shutdown().await;
}

/// A modern caller that takes SSE gets the same: the response head waits
/// for the outcome, so an upstream's -32021 is HTTP 400 JSON, never an
/// event inside a 200 stream (2026-07-28 transports-streamable-http.mdx;
/// index.mdx). A successful call is still answered.
#[tokio::test]
async fn a_modern_sse_caller_gets_an_upstream_error_with_its_own_status() {
    let (_up, url) = scripted(Mode::Legacy).await;
    let gw = start("", &http_block("remote", &url, "")).await;
    let addr = gw.local_addr();
    for accept in ["application/json, text/event-stream", "text/event-stream"] {
        for (tool, status, code) in [
            ("remote__needs_sampling", 400, Some(-32021)),
            ("remote__hello", 200, None),
        ] {
            let params = json!({"name": tool, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}});
            let headers = [
                ("accept", accept),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", tool),
            ];
            let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
            let r = post(addr, &headers, &body).await;
            assert_eq!(
                (r.status, r.error_code()),
                (status, code),
                "{accept}: {}",
                r.raw
            );
            if status != 200 {
                assert_eq!(r.header("content-type"), Some("application/json"));
                assert_eq!(
                    r.body["error"]["data"]["requiredCapabilities"],
                    json!({"sampling": {}})
                );
            }
        }
    }
}

/// The held head of a modern SSE-framed call waits at most one keep-alive
/// period: a call longer than that gets its stream opened with keep-alive
/// comments before its answer (a reverse proxy with a read timeout would
/// otherwise cut a long call that sends nothing).
#[tokio::test]
async fn a_long_modern_call_streams_keep_alives_before_its_answer() {
    let gw = start("keepalive = \"1s\"", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let params = json!({"name": "a__slow_echo", "arguments": {"text": "late", "ms": 2500},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}});
    let h = [
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "a__slow_echo"),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let r = request("POST", addr, &h, &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.raw);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let keepalive = r
        .raw
        .find(": keep-alive")
        .expect("a keep-alive before the answer");
    let answer = r.raw.find("a:late").expect("the answer");
    assert!(keepalive < answer, "{}", r.raw);
    gw.shutdown().await;
}
