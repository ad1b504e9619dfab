//! Issue 13, part 4: a modern (2026-07-28) caller ↔ a legacy upstream. The
//! upstream's server→client requests during a call become
//! `InputRequiredResult` rounds (`inputRequests` + a gateway-signed
//! `requestState`); the upstream call stays parked and the caller's retry
//! resumes it (2026-07-28 patterns-mrtr.mdx).

use crate::support;
use crate::support::*;
use serde_json::{json, Value};
use std::net::SocketAddr;

const ALL_CAPS: &str = r#"{"elicitation": {}, "sampling": {}, "roots": {}}"#;

/// A modern `tools/call` of `name` with `caps` declared, `extra` params
/// merged in (`inputResponses`, `requestState`) and `headers` added.
async fn modern_call(
    addr: SocketAddr,
    id: i64,
    name: &str,
    caps: Value,
    extra: Value,
    headers: &[(&str, &str)],
) -> Reply {
    let mut params = json!({"name": name, "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps}});
    if let Value::Object(o) = extra {
        for (k, v) in o {
            params[k] = v;
        }
    }
    let mut h = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", name),
    ];
    h.extend_from_slice(headers);
    post(
        addr,
        &h,
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}),
    )
    .await
}

/// The one input request of an `InputRequiredResult`: (key, request), and its state.
fn asked(r: &Reply) -> (String, Value, String) {
    assert_eq!(r.status, 200, "{}", r.raw);
    let res = &r.body["result"];
    assert_eq!(res["resultType"], "input_required", "{}", r.raw);
    let reqs = res["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(reqs.len(), 1, "{}", r.raw);
    let (k, v) = reqs.iter().next().unwrap();
    let state = res["requestState"].as_str().expect("requestState");
    assert!(state.starts_with("mcp-edge/1."), "{state}");
    (k.clone(), v.clone(), state.to_string())
}

fn retry(key: &str, answer: Value, state: &str) -> Value {
    json!({"inputResponses": {key: answer}, "requestState": state})
}

fn elicited() -> Value {
    json!({"action": "accept", "content": {"name": "Ada"}})
}

fn sampled() -> Value {
    json!({"role": "assistant", "model": "m", "content": {"type": "text", "text": "four"}})
}

fn roots() -> Value {
    json!({"roots": [{"uri": "file:///work", "name": "work"}]})
}

/// Drives the fake's `interview` through its three rounds with `caps`;
/// returns the final reply.
async fn interview(addr: SocketAddr, name: &str, headers: &[(&str, &str)]) -> Reply {
    let caps: Value = serde_json::from_str(ALL_CAPS).unwrap();
    let r1 = modern_call(addr, 1, name, caps.clone(), json!({}), headers).await;
    let (k1, q1, s1) = asked(&r1);
    assert_eq!(q1["method"], "elicitation/create");
    assert_eq!(q1["params"]["message"], "Your name?");
    let r2 = modern_call(
        addr,
        2,
        name,
        caps.clone(),
        retry(&k1, elicited(), &s1),
        headers,
    )
    .await;
    let (k2, q2, s2) = asked(&r2);
    assert_eq!(q2["method"], "sampling/createMessage");
    assert_eq!(q2["params"]["maxTokens"], 10);
    let r3 = modern_call(
        addr,
        3,
        name,
        caps.clone(),
        retry(&k2, sampled(), &s2),
        headers,
    )
    .await;
    let (k3, q3, s3) = asked(&r3);
    assert_eq!(q3["method"], "roots/list");
    // A state is good once: the first one is spent.
    let replay = modern_call(
        addr,
        9,
        name,
        caps.clone(),
        retry(&k1, elicited(), &s1),
        headers,
    )
    .await;
    assert_eq!(replay.error_code(), Some(-32602), "{}", replay.raw);
    assert!(text_has(&replay, "names no parked call"), "{}", replay.raw);
    modern_call(addr, 4, name, caps, retry(&k3, roots(), &s3), headers).await
}

fn text_has(r: &Reply, needle: &str) -> bool {
    r.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains(needle))
}

fn final_answers(r: &Reply) -> Value {
    assert_eq!(r.status, 200, "{}", r.raw);
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.raw);
    serde_json::from_str(content_text(&r.body).expect("text")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstreams_three_requests_become_three_rounds_of_one_call() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let fin = interview(addr, "a__interview", &[]).await;
    assert_eq!(
        final_answers(&fin),
        json!([elicited(), sampled(), roots()]),
        "the upstream received each answer as its request's result"
    );
    assert!(gw.app().parked().is_empty());
    // One upstream call served all four requests: the fake saw one tools/call.
    let sid = legacy_session(addr, "2025-11-25").await;
    let stats = fake_stats(addr, &sid, json!(1), "a").await;
    let calls = stats["methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| *m == "tools/call")
        .count();
    assert_eq!(calls, 2, "the interview and this stats call: {stats}");
    assert!(stats["cancelled"].as_array().unwrap().is_empty());
}

/// A legacy server that asks several things at once (each request sent
/// before any answer, log messages between them) gets them asked in one
/// round: one `InputRequiredResult` with all three, one retry answers them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_a_stdio_upstream_sends_together_are_asked_in_one_round() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let caps: Value = serde_json::from_str(ALL_CAPS).unwrap();
    // With a log level: the upstream's log messages between its requests
    // are relayed (the round's answer is then a stream) and do not split it.
    let args = json!({"arguments": {"together": true}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps.clone(),
        "io.modelcontextprotocol/logLevel": "debug"}});
    let r1 = modern_call(addr, 1, "a__interview", caps.clone(), args, &[]).await;
    assert_eq!(
        r1.body["result"]["resultType"], "input_required",
        "{}",
        r1.raw
    );
    for m in ["elicitation/create", "sampling/createMessage", "roots/list"] {
        assert!(r1.raw.contains(&format!("asking {m}")), "{}", r1.raw);
    }
    let asked = r1.body["result"]["inputRequests"].as_object().unwrap();
    let state = r1.body["result"]["requestState"].as_str().unwrap();
    let mut methods: Vec<&str> = asked
        .values()
        .map(|q| q["method"].as_str().unwrap())
        .collect();
    methods.sort_unstable();
    assert_eq!(
        methods,
        ["elicitation/create", "roots/list", "sampling/createMessage"],
        "{}",
        r1.raw
    );
    let responses: serde_json::Map<String, Value> = (asked.iter())
        .map(|(k, q)| {
            let answer = match q["method"].as_str().unwrap() {
                "elicitation/create" => elicited(),
                "sampling/createMessage" => sampled(),
                _ => roots(),
            };
            (k.clone(), answer)
        })
        .collect();
    let extra = json!({"arguments": {"together": true}, "inputResponses": responses,
        "requestState": state});
    let fin = modern_call(addr, 2, "a__interview", caps, extra, &[]).await;
    assert_eq!(
        final_answers(&fin),
        json!([elicited(), sampled(), roots()]),
        "each answer reached its request"
    );
    assert!(gw.app().parked().is_empty());
}

/// A server that keeps one session only refuses the session a caller's
/// capability set would get: that caller's calls go to mcp-edge's own
/// session instead (for the rest of the connection, without asking again),
/// and the refusal is counted.
#[tokio::test]
async fn a_server_with_one_session_serves_every_caller_in_it() {
    use support::scripted::{http_block, scripted, Mode};
    mcp_edge::metrics::prometheus();
    let refused =
        || mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"capability_sessions\"");
    let before = refused();
    let (u, url) = scripted(Mode::LegacySingle).await;
    let gw = start("", &http_block("remote", &url, "")).await;
    let addr = gw.local_addr();
    let bare = legacy_session(addr, "2025-11-25").await;
    for id in 1..=3 {
        let r = call_tool(addr, &bare, json!(id), "remote__hello", json!(null)).await;
        assert_eq!(text_of(&r), "hello from s0", "call {id}: {}", r.raw);
    }
    let inits = u.initialized.lock().unwrap().len();
    assert_eq!(
        inits, 2,
        "mcp-edge's own, and one refused try for the caller's set"
    );
    assert!(refused() >= before + 1.0);
}

/// A failure that is not a refusal (a 500 while the server restarts) sends
/// only that call to mcp-edge's session: the next call opens the caller's own.
#[tokio::test]
async fn a_passing_failure_to_open_a_callers_session_is_tried_again() {
    use support::scripted::{http_block, scripted, Mode};
    let (u, url) = scripted(Mode::LegacyFlaky).await;
    let gw = start("", &http_block("remote", &url, "")).await;
    let addr = gw.local_addr();
    let bare = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(addr, &bare, json!(1), "remote__hello", json!(null)).await;
    assert_eq!(text_of(&r), "hello from s0", "{}", r.raw);
    let r = call_tool(addr, &bare, json!(2), "remote__hello", json!(null)).await;
    assert_eq!(text_of(&r), "hello from s1", "{}", r.raw);
    assert_eq!(u.initialized.lock().unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_or_misdirected_states_are_invalid_params_and_leave_the_call_parked() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let caps: Value = serde_json::from_str(ALL_CAPS).unwrap();
    let r1 = modern_call(addr, 1, "a__interview", caps.clone(), json!({}), &[]).await;
    let (k, _, state) = asked(&r1);
    // One character changed inside the signed part (after the box's
    // instance id and its `.`; base64url has no `.`).
    let mut bytes = state.clone().into_bytes();
    let i = state.rfind('.').unwrap() + 4;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(bytes).unwrap();
    let r = modern_call(
        addr,
        2,
        "a__interview",
        caps.clone(),
        retry(&k, elicited(), &tampered),
        &[],
    )
    .await;
    assert_eq!((r.status, r.error_code()), (200, Some(-32602)), "{}", r.raw);
    assert!(text_has(&r, "failed verification"), "{}", r.raw);
    let r = modern_call(
        addr,
        3,
        "a__interview",
        caps.clone(),
        retry(&k, elicited(), "mcp-edge/1.xyz"),
        &[],
    )
    .await;
    assert!(text_has(&r, "malformed"), "{}", r.raw);
    // The state of a tools/call of a__interview is no good for another tool.
    let r = modern_call(
        addr,
        4,
        "a__echo",
        caps.clone(),
        retry(&k, elicited(), &state),
        &[],
    )
    .await;
    assert!(text_has(&r, "another request"), "{}", r.raw);
    // inputResponses that are not results are refused before the state is spent.
    let bad = json!({"inputResponses": {k.clone(): "yes"}, "requestState": state});
    let r = modern_call(addr, 5, "a__interview", caps.clone(), bad, &[]).await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.raw);
    assert_eq!(gw.app().parked().len(), 1, "none of these took the call");
    // A retry without the answer is asked again (patterns-mrtr.mdx §Error Handling).
    let again = modern_call(
        addr,
        6,
        "a__interview",
        caps.clone(),
        json!({"requestState": state}),
        &[],
    )
    .await;
    let (k2, q2, s2) = asked(&again);
    assert_eq!(
        (k2.as_str(), q2["method"].as_str()),
        (k.as_str(), Some("elicitation/create"))
    );
    // The genuine state still works.
    let r = modern_call(
        addr,
        7,
        "a__interview",
        caps,
        retry(&k2, elicited(), &s2),
        &[],
    )
    .await;
    let (_, q, _) = asked(&r);
    assert_eq!(q["method"], "sampling/createMessage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_capability_is_32021_and_the_upstream_is_refused() {
    // Two upstreams: a stdio request is relayed only while its call is the
    // only one on its upstream, and the refused first call stays in flight
    // there until the upstream answers it.
    let gw = start(
        "",
        &(fake_block("a", "legacy", "") + &fake_block("b", "legacy", "")),
    )
    .await;
    let addr = gw.local_addr();
    let none = modern_call(addr, 1, "a__interview", json!({}), json!({}), &[]).await;
    assert_eq!(
        (none.status, none.error_code()),
        (400, Some(-32021)),
        "{}",
        none.raw
    );
    assert_eq!(
        none.body["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}})
    );
    // Elicitation declared, sampling not: round one works, round two fails.
    let caps = json!({"elicitation": {}});
    let r1 = modern_call(addr, 2, "b__interview", caps.clone(), json!({}), &[]).await;
    let (k, _, s) = asked(&r1);
    let r2 = modern_call(
        addr,
        3,
        "b__interview",
        caps,
        retry(&k, elicited(), &s),
        &[],
    )
    .await;
    assert_eq!(
        (r2.status, r2.error_code()),
        (400, Some(-32021)),
        "{}",
        r2.raw
    );
    assert_eq!(
        r2.body["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    assert!(gw.app().parked().is_empty());
    let sid = legacy_session(addr, "2025-11-25").await;
    for (name, first) in [("a", "elicitation/create"), ("b", "sampling/createMessage")] {
        let refusal_seen = || async {
            let stats = fake_stats(addr, &sid, json!("s"), name).await;
            match stats["refused"].as_array().unwrap().is_empty() {
                true => Err(stats.to_string()),
                false => Ok(stats),
            }
        };
        let what = format!("{name}'s request refused");
        let stats = eventually(&what, std::time::Duration::from_secs(10), refusal_seen).await;
        let refused = stats["refused"].as_array().unwrap();
        assert_eq!(refused.len(), 1, "{name}: {stats}");
        assert!(refused[0].as_str().unwrap().starts_with(first), "{stats}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_call_is_refused_upstream_cancelled_and_its_state_dead() {
    let gw = start("", &fake_block("a", "legacy", "")).await;
    let addr = gw.local_addr();
    let caps: Value = serde_json::from_str(ALL_CAPS).unwrap();
    let r1 = modern_call(addr, 1, "a__interview", caps.clone(), json!({}), &[]).await;
    let (k, _, s) = asked(&r1);
    let app = gw.app();
    let now = tokio::time::Instant::now();
    assert_eq!(
        mcp_edge::downstream::rounds::expire(app, now).await,
        0,
        "not yet"
    );
    let later = now + mcp_edge::limits::PARKED_CALL_TTL;
    assert_eq!(mcp_edge::downstream::rounds::expire(app, later).await, 1);
    assert!(app.parked().is_empty());
    let r = modern_call(
        addr,
        2,
        "a__interview",
        caps,
        retry(&k, elicited(), &s),
        &[],
    )
    .await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.raw);
    assert!(text_has(&r, "names no parked call"), "{}", r.raw);
    // The upstream's request was answered with an error (then the call is
    // cancelled, unless the upstream answered it first: not waited for).
    let sid = legacy_session(addr, "2025-11-25").await;
    let refused = || async {
        let stats = fake_stats(addr, &sid, json!("s"), "a").await;
        match stats["refused"].as_array().unwrap().is_empty() {
            true => Err(stats.to_string()),
            false => Ok(stats),
        }
    };
    let within = std::time::Duration::from_secs(10);
    let stats = eventually("the upstream's request refused", within, refused).await;
    assert_eq!(stats["refused"].as_array().unwrap().len(), 1, "{stats}");
    assert!(
        stats["refused"][0]
            .as_str()
            .unwrap()
            .contains("did not retry"),
        "{stats}"
    );
}

/// Issue 23: a round that never completes is audited as such when its
/// parked call expires (`"input_expired"`), after the round's own line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_round_is_audited_as_input_expired() {
    let dir = tempfile::tempdir().unwrap();
    let audit = format!(
        "\n[audit]\npath = \"{}/audit.jsonl\"\n",
        dir.path().display()
    );
    let gw = start("", &(fake_block("a", "legacy", "") + &audit)).await;
    let caps: Value = serde_json::from_str(ALL_CAPS).unwrap();
    let r1 = modern_call(gw.local_addr(), 1, "a__interview", caps, json!({}), &[]).await;
    asked(&r1);
    let later = tokio::time::Instant::now() + mcp_edge::limits::PARKED_CALL_TTL;
    assert_eq!(
        mcp_edge::downstream::rounds::expire(gw.app(), later).await,
        1
    );
    let path = dir.path().join("audit.jsonl");
    let two_lines = || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<Value> = (text.lines())
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect();
        (lines.len() >= 2).then_some(lines)
    };
    let within = std::time::Duration::from_secs(10);
    let lines = eventually_sync("two audit lines", within, two_lines).await;
    let outcomes: Vec<_> = lines
        .iter()
        .map(|l| (l["name"].clone(), l["outcome"].clone()))
        .collect();
    assert_eq!(
        outcomes,
        [
            (json!("a__interview"), json!("ok")),
            (json!("a__interview"), json!("input_expired"))
        ]
    );
    assert_eq!(lines[1]["upstream"], "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_state_is_refused() {
    let (alice, bob) = (
        "mcpe_alice-token-0123456789abcdef",
        "mcpe_bob-token-0123456789abcdefgh",
    );
    let clients = format!(
        "[[client]]\nname = \"alice\"\ntoken_sha256 = \"{}\"\n[[client]]\nname = \"bob\"\ntoken_sha256 = \"{}\"\n",
        sha256_hex(alice),
        sha256_hex(bob)
    );
    let gw = start("", &format!("{clients}{}", fake_block("a", "legacy", ""))).await;
    let addr = gw.local_addr();
    let (ha, hb) = (format!("Bearer {alice}"), format!("Bearer {bob}"));
    let caps: Value = serde_json::from_str(ALL_CAPS).unwrap();
    let r1 = modern_call(
        addr,
        1,
        "a__interview",
        caps.clone(),
        json!({}),
        &[("authorization", &ha)],
    )
    .await;
    let (k, _, s) = asked(&r1);
    let theft = modern_call(
        addr,
        2,
        "a__interview",
        caps.clone(),
        retry(&k, elicited(), &s),
        &[("authorization", &hb)],
    )
    .await;
    assert_eq!(theft.error_code(), Some(-32602), "{}", theft.raw);
    assert!(text_has(&theft, "another client"), "{}", theft.raw);
    let own = modern_call(
        addr,
        3,
        "a__interview",
        caps,
        retry(&k, elicited(), &s),
        &[("authorization", &ha)],
    )
    .await;
    let (_, q, _) = asked(&own);
    assert_eq!(q["method"], "sampling/createMessage");
}

fn sha256_hex(token: &str) -> String {
    mcp_edge::config::token_sha256(token)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_http_upstream_asks_over_its_sse_answer_round_after_round() {
    use support::scripted::{http_block, scripted, Mode};
    let (up, url) = scripted(Mode::Legacy).await;
    let gw = start("", &http_block("remote", &url, "")).await;
    let addr = gw.local_addr();
    let fin = interview(addr, "remote__interview", &[]).await;
    assert_eq!(final_answers(&fin), json!([elicited(), sampled(), roots()]));
    let calls = (up.requests.lock().unwrap().iter())
        .filter(|(_, m)| m == "tools/call")
        .count();
    assert_eq!(calls, 1, "one upstream call for all the rounds");
    assert_eq!(up.abandoned.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert!(gw.app().parked().is_empty());
}

/// A legacy HTTP upstream learns its client's capabilities at `initialize`
/// only, so each set callers declare gets an upstream session of its own
/// that declares exactly it: a careful server asks a caller only what that
/// caller can answer (conformance `sep-2575-server-rejects-undeclared-capability`
/// through a legacy upstream). The sessions are kept for later callers of
/// the same set, bounded by `limits::UPSTREAM_CAPABILITY_SESSIONS` (beyond
/// it: mcp-edge's own session, counted), and ended with DELETE at shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_http_upstream_sees_each_callers_capabilities_in_a_session_of_its_own() {
    use support::scripted::{http_block, scripted, Mode};
    let (up, url) = scripted(Mode::Legacy).await;
    let gw = start("", &http_block("remote", &url, "")).await;
    let addr = gw.local_addr();
    // Elicitation only: the server asks just that, in one round.
    let elicit = json!({"elicitation": {}});
    let r1 = modern_call(addr, 1, "remote__interview", elicit.clone(), json!({}), &[]).await;
    let (k, q, s) = asked(&r1);
    assert_eq!(q["method"], "elicitation/create");
    let fin = modern_call(
        addr,
        2,
        "remote__interview",
        elicit,
        retry(&k, elicited(), &s),
        &[],
    );
    assert_eq!(final_answers(&fin.await), json!([elicited()]));
    // Nothing declared: nothing asked (no -32021: the server never asks).
    let none = modern_call(addr, 3, "remote__interview", json!({}), json!({}), &[]).await;
    assert_eq!(final_answers(&none), json!([]));
    let hello = |caps: Value| async move {
        let r = modern_call(addr, 4, "remote__hello", caps, json!({}), &[]).await;
        text_of(&r)
    };
    // The same sets again: the same sessions (s0 is mcp-edge's own).
    assert_eq!(hello(json!({"elicitation": {}})).await, "hello from s1");
    assert_eq!(hello(json!({})).await, "hello from s2");
    let main = json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}});
    assert_eq!(
        hello(main.clone()).await,
        "hello from s0",
        "mcp-edge's own set"
    );
    // Four more sets fill the table (six); a seventh uses the main session.
    let more = [
        json!({"sampling": {}}),
        json!({"roots": {}}),
        json!({"sampling": {}, "roots": {}}),
        json!({"elicitation": {"url": {}}}),
    ];
    for (i, caps) in more.iter().enumerate() {
        assert_eq!(hello(caps.clone()).await, format!("hello from s{}", i + 3));
    }
    let full =
        || mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"capability_sessions\"");
    mcp_edge::metrics::prometheus();
    let before = full();
    assert_eq!(
        hello(json!({"elicitation": {}, "roots": {}})).await,
        "hello from s0"
    );
    assert!(full() >= before + 1.0, "counted");
    let declared = up.initialized.lock().unwrap().clone();
    assert_eq!(
        declared.len(),
        7,
        "one initialize per session: {declared:?}"
    );
    assert_eq!(declared[0], main);
    assert_eq!(declared[1], json!({"elicitation": {"form": {}}}));
    assert_eq!(declared[2], json!({}));
    gw.shutdown().await;
    assert_eq!(up.deleted(), 7, "every session ended with DELETE");
    // Every request after `initialize` carries the negotiated version,
    // each session's DELETE included (2025-11-25 transports.mdx §Protocol
    // Version Header).
    // (The era probe before it, `server/discover`, is modern.)
    let versions = up.versions.lock().unwrap().clone();
    let first = versions
        .iter()
        .position(|(m, _)| m == "initialize")
        .unwrap();
    let after: Vec<_> = (versions[first..].iter())
        .filter(|(m, _)| m != "initialize")
        .collect();
    for (method, version) in after {
        assert_eq!(version.as_deref(), Some("2025-11-25"), "{method}");
    }
}
