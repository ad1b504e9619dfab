//! The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663; issue 13
//! part 5) through mcp-edge, against a real tasks-capable upstream (an rmcp
//! 3.11 server, `support::rmcp_tasks`): advertised only to callers that
//! declare it, tasks handed on under gateway ids (never the upstream's),
//! `tasks/get`/`tasks/cancel` routed by id (`Mcp-Name`), status
//! notifications on the caller's `subscriptions/listen` stream, a caller
//! without the extension answered directly by a task-optional tool, and a
//! task-required tool's task followed to its result for it (or cancelled
//! at its call timeout, or when the caller goes away).

use crate::support;
use crate::support::rmcp_tasks::rmcp_tasks;
use crate::support::scripted::http_block;
use crate::support::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// Modern `_meta`, declaring the tasks extension or not.
fn meta(declare: bool) -> Value {
    let caps = if declare {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// A modern request; `name` goes in `Mcp-Name` when given.
async fn modern_req(
    addr: SocketAddr,
    method: &str,
    mut params: Value,
    name: Option<&str>,
    declare: bool,
) -> Reply {
    params["_meta"] = meta(declare);
    let mut h = vec![
        ("accept", "application/json"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(n) = name {
        h.push(("mcp-name", n));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    post(addr, &h, &body).await
}

async fn task_req(addr: SocketAddr, method: &str, id: &str) -> Reply {
    modern_req(addr, method, json!({"taskId": id}), Some(id), true).await
}

async fn slow(addr: SocketAddr, ms: u64, declare: bool) -> Reply {
    tool(addr, "jobs__slow", ms, declare).await
}

async fn tool(addr: SocketAddr, name: &str, ms: u64, declare: bool) -> Reply {
    let params = json!({"name": name, "arguments": {"ms": ms}});
    modern_req(addr, "tools/call", params, Some(name), declare).await
}

/// A gateway with the rmcp tasks upstream as `jobs` (`extra` in its block).
async fn gateway(
    extra: &str,
) -> (
    mcp_edge::gateway::Gateway,
    std::sync::Arc<support::rmcp_tasks::Seen>,
) {
    let (seen, url) = rmcp_tasks().await;
    let gw = start("keepalive = \"60s\"", &http_block("jobs", &url, extra)).await;
    (gw, seen)
}

#[tokio::test]
async fn a_modern_client_creates_polls_cancels_and_hears_of_a_task() {
    let (gw, seen) = gateway("").await;
    let addr = gw.local_addr();
    // Advertised only to a caller declaring the extension.
    let d = modern_req(addr, "server/discover", json!({}), None, true).await;
    assert_eq!(
        d.body["result"]["capabilities"]["extensions"][TASKS],
        json!({}),
        "{}",
        d.raw
    );
    let d = modern_req(addr, "server/discover", json!({}), None, false).await;
    assert!(
        d.body["result"]["capabilities"].get("extensions").is_none(),
        "{}",
        d.raw
    );

    let created = slow(addr, 60_000, true).await;
    let r = &created.body["result"];
    assert_eq!(r["resultType"], "task", "{}", created.raw);
    assert_eq!(r["status"], "working");
    let id = r["taskId"].as_str().unwrap().to_string();
    let upstream_id = seen.ids.lock().unwrap()[0].clone();
    assert!(
        id.starts_with("task-") && id != upstream_id,
        "{id} vs {upstream_id}"
    );
    assert!(
        !created.raw.contains(&upstream_id),
        "the upstream's id never shows"
    );

    let got = task_req(addr, "tasks/get", &id).await;
    assert_eq!(got.body["result"]["status"], "working", "{}", got.raw);
    assert_eq!(got.body["result"]["taskId"], id.as_str());
    assert!(!got.raw.contains(&upstream_id), "{}", got.raw);
    assert_eq!(seen.gets.load(Relaxed), 1);

    // Mcp-Name must carry the task id; undeclared callers get -32021; a
    // forged id is unknown.
    let p = json!({"taskId": id});
    let r = modern_req(addr, "tasks/get", p.clone(), None, true).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "{}", r.raw);
    let r = modern_req(addr, "tasks/get", p, Some(&id), false).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32021)), "{}", r.raw);
    let mut forged = id.clone();
    let c = if forged.as_bytes()[5] == b'0' {
        "1"
    } else {
        "0"
    };
    forged.replace_range(5..6, c);
    let r = task_req(addr, "tasks/get", &forged).await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.raw);

    // Status notifications on the listen stream: the state at once, then
    // the cancellation.
    let listen = json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
        "params": {"_meta": meta(true), "notifications": {"taskIds": [id, "task-nope"]}}});
    let mut s = sse::listen(addr, &listen).await;
    assert_eq!(s.status, 200);
    let ack = s.next().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
    let first = s.next().await;
    assert_eq!(first["method"], "notifications/tasks", "{first}");
    assert_eq!(
        (
            first["params"]["taskId"].as_str(),
            first["params"]["status"].as_str()
        ),
        (Some(id.as_str()), Some("working"))
    );
    assert!(!first.to_string().contains(&upstream_id), "{first}");
    assert_eq!(
        first["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );

    let c = task_req(addr, "tasks/cancel", &id).await;
    assert_eq!(c.body["result"]["resultType"], "complete", "{}", c.raw);
    assert!(!c.raw.contains(&upstream_id), "{}", c.raw);
    assert_eq!(seen.cancels.load(Relaxed), 1);
    let last = s.next().await;
    assert_eq!(last["method"], "notifications/tasks");
    assert_eq!(last["params"]["status"], "cancelled", "{last}");
    assert!(!last.to_string().contains(&upstream_id), "{last}");
    let got = task_req(addr, "tasks/get", &id).await;
    assert_eq!(got.body["result"]["status"], "cancelled", "{}", got.raw);
    assert!(!got.raw.contains(&upstream_id), "{}", got.raw);
}

#[tokio::test]
async fn a_completed_task_carries_its_result_and_listen_needs_the_extension() {
    let (gw, _seen) = gateway("").await;
    let addr = gw.local_addr();
    let created = slow(addr, 200, true).await;
    let id = created.body["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let completed = || async {
        let got = task_req(addr, "tasks/get", &id).await;
        match got.body["result"]["status"] == "completed" {
            true => Ok(got.body["result"].clone()),
            false => Err(got.raw),
        }
    };
    let within = std::time::Duration::from_secs(5);
    let done = eventually("the task completed", within, completed).await;
    assert_eq!(done["result"]["content"][0]["text"], "slept 200", "{done}");
    // taskIds without the extension declared: -32021 (HTTP 400).
    let listen = json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": {"_meta": meta(false), "notifications": {"taskIds": [id]}}});
    let s = sse::listen(addr, &listen).await;
    assert_eq!(s.status, 400);
    // A legacy session has no tasks/* methods.
    let sid = legacy_session(addr, "2025-11-25").await;
    let r = call(addr, &sid, json!(1), "tasks/get", json!({"taskId": id})).await;
    assert_eq!(r.error_code(), Some(-32601), "{}", r.raw);
}

/// A caller that did not declare the extension: the gateway does not
/// declare it for it, so a tool with optional task support answers
/// directly (no task, no `tasks/get` polling).
#[tokio::test]
async fn a_caller_without_the_extension_gets_a_task_optional_tool_answered_directly() {
    let (gw, seen) = gateway("").await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(addr, &sid, json!(1), "jobs__slow", json!({"ms": 300})).await;
    assert_eq!(text_of(&r), "slept 300", "{}", r.raw);
    let r = slow(addr, 100, false).await;
    assert_eq!(
        r.body["result"]["content"][0]["text"], "slept 100",
        "{}",
        r.raw
    );
    assert_eq!(r.body["result"]["resultType"], "complete");
    assert_eq!(seen.created.load(Relaxed), 0, "no task made");
    assert_eq!(seen.gets.load(Relaxed), 0, "nothing polled");
}

/// A task-required tool (`-32021` naming the extension): asked once more
/// with the extension declared, and its task followed to the final result
/// for a legacy caller and a modern one that did not declare it.
#[tokio::test]
async fn a_task_required_tool_is_retried_with_the_extension_and_followed() {
    let (gw, seen) = gateway("").await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(addr, &sid, json!(1), "jobs__must", json!({"ms": 300})).await;
    assert_eq!(text_of(&r), "slept 300", "{}", r.raw);
    assert_eq!(
        seen.required.load(Relaxed),
        1,
        "refused without the extension"
    );
    assert_eq!(seen.created.load(Relaxed), 1, "then made a task");
    assert!(seen.gets.load(Relaxed) >= 1, "the gateway polled tasks/get");
    let r = tool(addr, "jobs__must", 100, false).await;
    assert_eq!(
        r.body["result"]["content"][0]["text"], "slept 100",
        "{}",
        r.raw
    );
    assert_eq!(r.body["result"]["resultType"], "complete");
    assert_eq!(seen.created.load(Relaxed), 2);
    assert_eq!(seen.required.load(Relaxed), 2);
    for up in seen.ids.lock().unwrap().iter() {
        assert!(!r.raw.contains(up.as_str()), "{}", r.raw);
    }
}

#[tokio::test]
async fn a_followed_task_past_the_call_timeout_is_cancelled_with_a_clear_error() {
    let (gw, seen) = gateway("call_timeout = \"1s\"").await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(addr, &sid, json!(1), "jobs__must", json!({"ms": 30_000})).await;
    assert_eq!(r.error_code(), Some(-31001), "{}", r.raw);
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("call_timeout") && msg.contains("jobs"),
        "{msg}"
    );
    assert_eq!(seen.cancels.load(Relaxed), 1, "cancelled upstream");
}

/// A caller that goes away (here: a legacy `notifications/cancelled`)
/// while the gateway follows its task leaves it to the session sweep,
/// which cancels it upstream.
#[tokio::test]
async fn a_followed_task_whose_caller_goes_away_is_cancelled_upstream() {
    let (seen, url) = rmcp_tasks().await;
    let server = "keepalive = \"60s\"\nsession_idle_timeout = \"10s\"\n\
        session_min_idle_before_evict = \"5s\"";
    let gw = start(server, &http_block("jobs", &url, "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let args = json!({"ms": 600_000});
    let calling = call_tool(addr, &sid, json!(7), "jobs__must", args);
    let cancelling = async {
        let created = || seen.created.load(Relaxed) > 0;
        let within = std::time::Duration::from_secs(10);
        eventually_sync("the upstream's task created", within, created).await;
        let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 7}});
        post(addr, &[("mcp-session-id", &sid)], &note).await
    };
    let (r, note) = tokio::join!(calling, cancelling);
    assert_eq!(note.status, 202);
    assert_eq!(r.error_code(), Some(-32800), "{}", r.raw);
    assert_eq!(seen.cancels.load(Relaxed), 0, "not yet: the sweep does it");
    // The sweep runs every 2.5 s here (idle timeout / 4).
    let cancelled = || seen.cancels.load(Relaxed) > 0;
    let within = std::time::Duration::from_secs(10);
    eventually_sync("the task cancelled upstream", within, cancelled).await;
    assert_eq!(seen.cancels.load(Relaxed), 1, "cancelled upstream");
}

#[tokio::test]
async fn a_full_task_table_refuses_and_cancels_the_upstream_task() {
    mcp_edge::metrics::prometheus();
    let (gw, seen) = gateway("").await;
    let addr = gw.local_addr();
    let capacity = gw.app().router().tasks().capacity();
    for _ in 0..capacity {
        let r = slow(addr, 600_000, true).await;
        assert_eq!(r.body["result"]["resultType"], "task", "{}", r.raw);
    }
    assert_eq!(gw.app().router().tasks().len(), capacity);
    let refused_before = refused_tasks();
    let r = slow(addr, 600_000, true).await;
    assert_eq!(r.error_code(), Some(-31010), "{}", r.raw);
    assert!(refused_tasks() > refused_before, "refusal counted");
    assert_eq!(
        seen.cancels.load(Relaxed),
        1,
        "the orphan cancelled upstream"
    );
    assert_eq!(
        gw.app().router().tasks().len(),
        capacity,
        "holds its capacity"
    );
}

fn refused_tasks() -> f64 {
    let text = mcp_edge::metrics::render().unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with("mcp_edge_refused_total{limit=\"tasks\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
