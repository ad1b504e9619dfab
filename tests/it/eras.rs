//! Like-for-like eras (issue 25 part 1): a dual-era HTTP upstream found by
//! `era = "auto"` is spoken to in each caller's era — a legacy caller in
//! a legacy session, where the server's requests mid-call are requests it
//! answers itself, a modern caller statelessly — and `/status` shows the
//! eras spoken. `era = "legacy"`/`"modern"` keep forcing one.

use crate::support::scripted::{http_block, scripted, Mode};
use crate::support::*;
use mcp_edge::gateway::Gateway;
use serde_json::{json, Value};
use std::net::SocketAddr;

/// The upstream's entry of `/status` (the gateway's admin listener).
async fn status_of(gw: &Gateway) -> Value {
    let admin = gw.admin_addr().expect("admin listener bound");
    let (code, body) = binary::admin_get(admin, "/status").await;
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["upstreams"][0].clone()
}

/// `d__hello` from a legacy session and from a modern caller: what the
/// upstream said it was reached through.
async fn hello_both(addr: SocketAddr) -> (String, String) {
    let sid = legacy_session(addr, "2025-11-25").await;
    let legacy = call_tool(addr, &sid, json!(1), "d__hello", json!({})).await;
    let modern = modern(addr, json!(2), "tools/call", json!({"name": "d__hello"})).await;
    (text_of(&legacy), text_of(&modern))
}

/// The methods the upstream got with each `MCP-Protocol-Version`.
fn versions_of(up: &scripted::Upstream, method: &str) -> Vec<Option<String>> {
    let seen = up.versions.lock().unwrap();
    (seen.iter().filter(|(m, _)| m == method))
        .map(|(_, v)| v.clone())
        .collect()
}

const ADMIN: &str = "admin_listen = \"127.0.0.1:0\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_era_upstream_is_spoken_to_in_each_callers_era() {
    let (up, url) = scripted(Mode::Dual).await;
    let gw = start(ADMIN, &http_block("d", &url, "era = \"auto\"")).await;
    let addr = gw.local_addr();
    let st = status_of(&gw).await;
    assert_eq!(st["state"], "ready", "{st}");
    assert_eq!(st["eras"], json!(["2026-07-28", "2025-11-25"]), "{st}");
    let (legacy, stateless) = hello_both(addr).await;
    // A legacy caller's call runs in a legacy session (mcp-edge's own is
    // s0; a caller that declared nothing gets a session declaring that).
    assert!(legacy.starts_with("hello from s"), "{legacy}");
    assert_eq!(stateless, "hello from no session");
    assert_eq!(
        versions_of(&up, "tools/call"),
        [
            Some("2025-11-25".to_string()),
            Some("2026-07-28".to_string())
        ]
    );
    // A modern call's 404 is that call's error: the legacy session it did
    // not use has not ended, and the upstream stays up.
    let attempts = st["attempts"].clone();
    let gone = modern(addr, json!(3), "tools/call", json!({"name": "d__unrouted"})).await;
    assert_eq!(gone.error_code(), Some(-32601), "{}", gone.raw);
    let (legacy, _) = hello_both(addr).await;
    assert!(legacy.starts_with("hello from s"), "{legacy}");
    let st = status_of(&gw).await;
    assert_eq!(
        (&st["state"], &st["attempts"]),
        (&json!("ready"), &attempts)
    );
    gw.shutdown().await;
    // Its legacy sessions ended with DELETE, in their version.
    assert!(up.deleted() >= 1);
    let deletes = versions_of(&up, "DELETE");
    assert!(
        deletes.iter().all(|v| v.as_deref() == Some("2025-11-25")),
        "{deletes:?}"
    );
}

/// The field failure: a tool that asks its client things mid-call with
/// JSON-RPC requests (as every 2025-era SDK's tool code may). Spoken to in
/// the modern era, such a request has nobody to answer it; in a legacy
/// session it reaches the legacy caller, who answers, as it would directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_caller_answers_a_dual_era_servers_requests_mid_call() {
    let (up, url) = scripted(Mode::Dual).await;
    let gw = start("", &http_block("d", &url, "era = \"auto\"")).await;
    let addr = gw.local_addr();
    let caps = json!({"elicitation": {}, "sampling": {}, "roots": {}});
    let sid = legacy_session_with(addr, "2025-11-25", caps).await;
    let call = json!({"jsonrpc": "2.0", "id": "iv", "method": "tools/call",
        "params": {"name": "d__interview", "arguments": {}}});
    let h = [("mcp-session-id", sid.as_str())];
    let mut s = sse::open("POST", addr, &h, &call.to_string()).await;
    let answers = [
        (
            "elicitation/create",
            json!({"action": "accept", "content": {"name": "Ada"}}),
        ),
        (
            "sampling/createMessage",
            json!({"role": "assistant", "model": "m",
            "content": {"type": "text", "text": "four"}}),
        ),
        ("roots/list", json!({"roots": []})),
    ];
    for (method, result) in answers {
        let ask = s.next().await;
        assert_eq!(ask["method"], method, "{ask}");
        let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": result});
        assert_eq!(post(addr, &h, &answer).await.status, 202);
    }
    let fin = s.next().await;
    assert_eq!(fin["id"], "iv", "{fin}");
    let text = content_text(&fin).expect("text").to_string();
    assert!(text.contains("Ada") && text.contains("four"), "{text}");
    assert!(up.refused.lock().unwrap().is_empty(), "nothing refused");
    gw.shutdown().await;
}

/// `era = "modern"` and `"legacy"` still force one era on a dual-era
/// upstream, for every caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_era_is_spoken_to_every_caller() {
    for (era, eras) in [
        ("modern", json!(["2026-07-28"])),
        ("legacy", json!(["2025-11-25"])),
    ] {
        let (_up, url) = scripted(Mode::Dual).await;
        let extra = format!("era = \"{era}\"");
        let gw = start(ADMIN, &http_block("d", &url, &extra)).await;
        let st = status_of(&gw).await;
        assert_eq!(st["eras"], eras, "{era}: {st}");
        let (legacy, modern) = hello_both(gw.local_addr()).await;
        for reached in [legacy, modern] {
            match era {
                "modern" => assert_eq!(reached, "hello from no session"),
                _ => assert!(reached.starts_with("hello from s"), "{reached}"),
            }
        }
        gw.shutdown().await;
    }
}

/// A server that answers `initialize` but then fails the session's
/// `notifications/initialized` is not dual-era for mcp-edge: the half-open
/// session is ended with DELETE (in the version asked) and every caller is
/// spoken to in the modern era.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_session_opened_half_way_is_ended_and_the_upstream_stays_modern() {
    let (up, url) = scripted(Mode::DualHalf).await;
    let gw = start(ADMIN, &http_block("d", &url, "era = \"auto\"")).await;
    let st = status_of(&gw).await;
    assert_eq!(st["state"], "ready", "{st}");
    assert_eq!(st["eras"], json!(["2026-07-28"]), "{st}");
    assert_eq!(up.deleted(), 1, "the half-open session ended");
    let deletes = versions_of(&up, "DELETE");
    assert_eq!(deletes, [Some("2025-11-25".to_string())]);
    let (legacy, stateless) = hello_both(gw.local_addr()).await;
    assert_eq!(legacy, "hello from no session");
    assert_eq!(stateless, "hello from no session");
    gw.shutdown().await;
    assert_eq!(up.deleted(), 1, "no session left to end");
}
