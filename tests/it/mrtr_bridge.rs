//! Legacy caller ↔ modern upstream, MRTR bridged (issue 13, part 3), through
//! the real binary: a modern upstream's `InputRequiredResult` becomes
//! requests on the legacy caller's SSE stream, its answers go back as
//! `inputResponses` with the upstream's `requestState`, round after round
//! (the fake upstream's `mrtr` tool checks both, and the fresh ids); what
//! the session did not declare is -32021; a JSON-only caller gets a clear
//! error; the rounds and time bounds end the call with an error and a count.

use crate::support::binary::{refused, Running};
use crate::support::*;
use serde_json::{json, Value};
use std::net::SocketAddr;

fn config(extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n\n{}",
        free_port(),
        free_port(),
        fake_block("m", "modern", extra)
    )
}

/// A legacy session that declared `caps` at `initialize`.
async fn session(addr: SocketAddr, caps: Value) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": caps,
        "clientInfo": {"name": "legacy-test", "version": "1"}}});
    let r = post(addr, &[], &init).await;
    let sid = r.header("mcp-session-id").expect("a session").to_string();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(addr, &[("mcp-session-id", &sid)], &note).await.status,
        202
    );
    sid
}

fn all_caps() -> Value {
    json!({"elicitation": {}, "sampling": {}, "roots": {"listChanged": true}})
}

/// `tools/call` of `tool` read as it arrives: an SSE stream, or one JSON
/// answer when the call relayed nothing.
async fn call_streaming(addr: SocketAddr, sid: &str, tool: &str, args: Value) -> sse::Stream {
    let body = json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
        "params": {"name": tool, "arguments": args}});
    let h = [
        ("mcp-session-id", sid),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let s = sse::open("POST", addr, &h, &body.to_string()).await;
    let kind = s.header("content-type");
    assert!(
        matches!(kind, Some("text/event-stream" | "application/json")),
        "{kind:?}"
    );
    s
}

/// The client's answer (a result, or an error object) to relayed request `id`.
async fn answer(addr: SocketAddr, sid: &str, id: &Value, outcome: Result<Value, Value>) {
    let mut msg = json!({"jsonrpc": "2.0", "id": id});
    match outcome {
        Ok(r) => msg["result"] = r,
        Err(e) => msg["error"] = e,
    }
    assert_eq!(
        post(addr, &[("mcp-session-id", sid)], &msg).await.status,
        202
    );
}

/// The next messages of the stream, which must be requests: by method.
async fn requests(s: &mut sse::Stream, n: usize) -> std::collections::BTreeMap<String, Value> {
    let mut out = std::collections::BTreeMap::new();
    for _ in 0..n {
        let m = s.next().await;
        let id = m["id"].as_str().unwrap_or_else(|| panic!("a request: {m}"));
        assert!(id.starts_with("mcp-edge:"), "{m}");
        out.insert(m["method"].as_str().unwrap().to_string(), m);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_client_answers_a_modern_upstreams_input_over_two_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Running::start(dir.path(), &config("")).await;
    let sid = session(gw.addr, all_caps()).await;
    let mut s = call_streaming(gw.addr, &sid, "m__mrtr", json!({})).await;
    // Round 1: elicitation and roots together; answered out of order.
    let r1 = requests(&mut s, 2).await;
    let elicit = &r1["elicitation/create"];
    assert_eq!(elicit["params"]["message"], "Your name?");
    assert_eq!(
        elicit["params"]["requestedSchema"]["required"],
        json!(["name"])
    );
    let roots = json!({"roots": [{"uri": "file:///work", "name": "work"}]});
    answer(gw.addr, &sid, &r1["roots/list"]["id"], Ok(roots)).await;
    let accept = json!({"action": "accept", "content": {"name": "Ada"}});
    answer(gw.addr, &sid, &elicit["id"], Ok(accept)).await;
    // Round 2: sampling about what round 1 gave.
    let r2 = requests(&mut s, 1).await;
    let sampling = &r2["sampling/createMessage"];
    assert_eq!(
        sampling["params"]["messages"][0]["content"]["text"],
        "greet Ada"
    );
    let reply = json!({"role": "assistant", "model": "m",
        "content": {"type": "text", "text": "Hello Ada"}});
    answer(gw.addr, &sid, &sampling["id"], Ok(reply)).await;
    let fin = s.next().await;
    assert_eq!(fin["id"], "c1");
    assert_eq!(
        content_text(&fin),
        Some("name=Ada roots=file:///work llm=Hello Ada rounds=3 ids_distinct=True"),
        "the upstream saw every answer and its own requestState, under fresh ids: {fin}"
    );
    // A declined elicitation is a result: the upstream decides (here: says so).
    let mut s = call_streaming(gw.addr, &sid, "m__mrtr", json!({})).await;
    let r1 = requests(&mut s, 2).await;
    answer(
        gw.addr,
        &sid,
        &r1["roots/list"]["id"],
        Ok(json!({"roots": []})),
    )
    .await;
    let decline = json!({"action": "decline"});
    answer(gw.addr, &sid, &r1["elicitation/create"]["id"], Ok(decline)).await;
    assert_eq!(content_text(&s.next().await), Some("elicitation decline"));
    // A client's error answer ends the call with that error, saying which request.
    let mut s = call_streaming(gw.addr, &sid, "m__mrtr", json!({})).await;
    let r1 = requests(&mut s, 2).await;
    let no = json!({"code": -32601, "message": "no roots here", "data": {"x": 1}});
    answer(gw.addr, &sid, &r1["roots/list"]["id"], Err(no)).await;
    let fin = s.next().await;
    assert_eq!(fin["error"]["code"], -32601, "{fin}");
    assert_eq!(fin["error"]["data"], json!({"x": 1}));
    let msg = fin["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("roots/list (input request \"where\")") && msg.contains("no roots here"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_caller_cannot_answer_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Running::start(dir.path(), &config("")).await;
    let sampling_only = session(gw.addr, json!({"sampling": {}})).await;
    let call = |args: Value| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "m__mrtr", "arguments": args}})
    };
    let h = [("mcp-session-id", sampling_only.as_str())];
    // The upstream is told what the session declared, and refuses by itself.
    let r = post(gw.addr, &h, &call(json!({}))).await;
    assert_eq!(r.error_code(), Some(-32021), "{}", r.raw);
    let needed = &r.body["error"]["data"]["requiredCapabilities"];
    assert_eq!(needed, &json!({"elicitation": {}, "roots": {}}));
    // An upstream that asks anyway: mcp-edge refuses before asking anything.
    let r = post(gw.addr, &h, &call(json!({"ignore_caps": true}))).await;
    assert_eq!(r.error_code(), Some(-32021), "{}", r.raw);
    assert_eq!(
        r.body["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {"form": {}}, "roots": {}})
    );
    assert!(!r.raw.contains("\"method\""), "nothing relayed: {}", r.raw);
    // A client that takes JSON only cannot be asked.
    let all = session(gw.addr, all_caps()).await;
    let h = [
        ("mcp-session-id", all.as_str()),
        ("accept", "application/json"),
    ];
    let r = post(gw.addr, &h, &call(json!({}))).await;
    assert_eq!((r.status, r.error_code()), (200, Some(-32600)), "{}", r.raw);
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("elicitation/create, roots/list") && msg.contains("text/event-stream"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rounds_and_time_bounds_end_the_call_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Running::start(dir.path(), &config("call_timeout = \"2s\"")).await;
    let sid = session(gw.addr, all_caps()).await;
    let before = refused(&gw.metrics().await, "mrtr_rounds");
    let s = call_streaming(gw.addr, &sid, "m__mrtr_forever", json!({})).await;
    let fin = s.rest().await.pop().unwrap();
    assert_eq!(fin["error"]["code"], -32603, "{fin}");
    let max = mcp_edge::limits::MRTR_MAX_ROUNDS;
    assert!(
        fin["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("after {max} rounds")),
        "{fin}"
    );
    assert_eq!(refused(&gw.metrics().await, "mrtr_rounds"), before + 1);
    let stats = call_tool(gw.addr, &sid, json!(2), "m__stats", Value::Null).await;
    let seen: Value = serde_json::from_str(&text_of(&stats)).unwrap();
    let calls = (seen["methods"].as_array().unwrap().iter())
        .filter(|m| *m == "tools/call")
        .count();
    assert_eq!(calls, 1 + max + 1, "first try, {max} retries, then stats");
    // A client that never answers: the exchange ends at call_timeout.
    let mut s = call_streaming(gw.addr, &sid, "m__mrtr", json!({})).await;
    requests(&mut s, 2).await;
    let fin = s.next().await;
    assert_eq!(
        fin["error"]["code"],
        mcp_edge::protocol::UPSTREAM_TIMEOUT,
        "{fin}"
    );
    assert!(fin["error"]["message"]
        .as_str()
        .unwrap()
        .contains("call_timeout"));
    assert_eq!(refused(&gw.metrics().await, "mrtr_time"), 1);
    // The session ends (DELETE) while it is being asked: the call ends too.
    let mut s = call_streaming(gw.addr, &sid, "m__mrtr", json!({})).await;
    requests(&mut s, 2).await;
    let h = [("mcp-session-id", sid.as_str())];
    assert_eq!(request("DELETE", gw.addr, &h, "").await.status, 200);
    let fin = s.next().await;
    assert_eq!(fin["error"]["code"], -32603, "{fin}");
    assert!(fin["error"]["message"]
        .as_str()
        .unwrap()
        .contains("session ended"));
}

/// A modern caller's call to a modern upstream is not bridged: the
/// upstream's own `InputRequiredResult` (its keys, its `requestState`)
/// reaches the caller unchanged, SSE-framed or not. (A modern caller's
/// relay also carries a key; before, mcp-edge took it for a legacy session,
/// asked through its own parked-call table and renamed the keys.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_callers_input_required_result_passes_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Running::start(dir.path(), &config("")).await;
    let addr = gw.addr;
    let mut params = json!({"name": "m__mrtr", "arguments": {}});
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": all_caps()});
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    for accept in ["application/json", "application/json, text/event-stream"] {
        let h = [
            ("accept", accept),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "m__mrtr"),
        ];
        let text = request("POST", addr, &h, &body.to_string()).await.raw;
        let json_part = text.find('{').map(|i| &text[i..]).unwrap_or("");
        let json_part = json_part.lines().next().unwrap_or("");
        let r: Value = serde_json::from_str(json_part).unwrap_or_else(|_| panic!("{text}"));
        let result = &r["result"];
        assert_eq!(result["resultType"], "input_required", "{text}");
        let mut keys: Vec<&String> = result["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        keys.sort();
        assert_eq!(keys, ["where", "who"], "the upstream's own keys: {text}");
        let state = result["requestState"].as_str().unwrap();
        assert!(
            state.starts_with("s1-"),
            "the upstream's own state: {state}"
        );
    }
}
