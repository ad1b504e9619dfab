//! The 2024-11-05 HTTP+SSE transport as an upstream (`transport = "sse"`,
//! issue 25 part 4): the Python SDK 1.30's FastMCP served with
//! `transport="sse"` reached through mcp-edge — its tools, its progress and
//! log notifications, its sampling request mid-call, for a legacy caller
//! and a modern one.

use crate::support::peers;
use crate::support::*;
use serde_json::{json, Value};
use std::net::SocketAddr;

async fn gateway() -> (peers::KillOnDrop, mcp_edge::gateway::Gateway) {
    let (server, port) = peers::spawn_fixture_sse_server();
    let upstream = format!(
        "[[upstream]]\nname = \"old\"\ntransport = \"sse\"\nurl = \"http://127.0.0.1:{port}/sse\"\n"
    );
    let gw = start("admin_listen = \"127.0.0.1:0\"", &upstream).await;
    (server, gw)
}

/// POSTs `body` in session `sid` and reads every message of its answer.
async fn streamed(addr: SocketAddr, sid: &str, body: Value) -> Vec<Value> {
    let h = [("mcp-session-id", sid)];
    let s = sse::open("POST", addr, &h, &body.to_string()).await;
    s.rest().await
}

/// Calls a tool (`params`) in session `sid` whose server asks the client
/// for a sampling, answers "four" on the endpoint the request came with,
/// and returns the call's response.
async fn sampled(addr: SocketAddr, sid: &str, params: Value) -> Value {
    let ask = json!({"jsonrpc": "2.0", "id": "ask", "method": "tools/call", "params": params});
    let h = [("mcp-session-id", sid)];
    let mut s = sse::open("POST", addr, &h, &ask.to_string()).await;
    // A log line the server sends meanwhile may come first: this call is
    // the only one that could be told (the transport names no call).
    let q = until(&mut s, |m| {
        m.get("method")
            .is_some_and(|m| m != "notifications/message")
    })
    .await;
    assert_eq!(q["method"], "sampling/createMessage", "{q}");
    let answer = json!({"jsonrpc": "2.0", "id": q["id"], "result": {"role": "assistant",
        "model": "m", "content": {"type": "text", "text": "four"}}});
    assert_eq!(post(addr, &h, &answer).await.status, 202);
    until(&mut s, |m| m["id"] == "ask").await
}

/// The stream's next message that `wanted` accepts; the others skipped
/// are log notifications only.
async fn until(s: &mut sse::Stream, wanted: impl Fn(&Value) -> bool) -> Value {
    loop {
        let m = s.next().await;
        if wanted(&m) {
            return m;
        }
        assert_eq!(m["method"], "notifications/message", "{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2024_sse_server_serves_a_legacy_caller() {
    let (_server, gw) = gateway().await;
    let addr = gw.local_addr();
    let admin = gw.admin_addr().expect("admin listener");
    let (_, status) = binary::admin_get(admin, "/status").await;
    let status: Value = serde_json::from_str(&status).unwrap();
    let up = &status["upstreams"][0];
    assert_eq!(
        (&up["transport"], &up["state"]),
        (&json!("sse"), &json!("ready")),
        "{up}"
    );
    assert_eq!(up["eras"], json!(["2025-11-25"]), "{up}");
    let sid = legacy_session_with(addr, "2025-11-25", json!({"sampling": {}})).await;
    let list = call(addr, &sid, json!(1), "tools/list", json!({})).await;
    for tool in ["old__echo", "old__ask", "old__notify"] {
        assert!(
            tool_names(&list).contains(&tool.to_string()),
            "{}",
            list.raw
        );
    }
    let echo = call_tool(
        addr,
        &sid,
        json!(2),
        "old__echo",
        json!({"text": "over SSE"}),
    )
    .await;
    assert_eq!(text_of(&echo), "over SSE", "{}", echo.raw);
    // Progress and log messages come on the server's stream, to this call.
    let notify = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "old__notify", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}}});
    let events = streamed(addr, &sid, notify).await;
    let of = |m: &str| events.iter().filter(|e| e["method"] == m).count();
    assert_eq!(of("notifications/progress"), 2, "{events:?}");
    assert_eq!(of("notifications/message"), 2, "{events:?}");
    let progress = events
        .iter()
        .find(|e| e["method"] == "notifications/progress");
    assert_eq!(progress.unwrap()["params"]["progressToken"], "p");
    assert_eq!(content_text(events.last().unwrap()), Some("notified 2"));
    // The server's sampling request reaches this caller, whose answer the
    // server gets on the endpoint it named.
    let ask = json!({"name": "old__ask", "arguments": {"question": "2+2?"}});
    let fin = sampled(addr, &sid, ask).await;
    assert_eq!(content_text(&fin), Some("client said: four"), "{fin}");
    gw.shutdown().await;
}

/// A modern caller: the same tools, and the server's request mid-call as an
/// `InputRequiredResult` whose answer the next round carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2024_sse_server_serves_a_modern_caller() {
    let (_server, gw) = gateway().await;
    let addr = gw.local_addr();
    let echo = modern(
        addr,
        json!(1),
        "tools/call",
        json!({"name": "old__echo", "arguments": {"text": "hi"}}),
    )
    .await;
    assert_eq!(text_of(&echo), "hi", "{}", echo.raw);
    let caps = json!({"sampling": {}});
    let ask = |id: u64, extra: Value| {
        let mut params = json!({"name": "old__ask", "arguments": {"question": "2+2?"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": caps.clone()}});
        if let Value::Object(o) = extra {
            for (k, v) in o {
                params[k] = v;
            }
        }
        let h = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "old__ask"),
        ];
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        async move { post(addr, &h, &body).await }
    };
    let r1 = ask(2, json!({})).await;
    let res = &r1.body["result"];
    assert_eq!(res["resultType"], "input_required", "{}", r1.raw);
    let (key, q) = res["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(q["method"], "sampling/createMessage");
    let answer =
        json!({"role": "assistant", "model": "m", "content": {"type": "text", "text": "four"}});
    let state = res["requestState"].clone();
    let r2 = ask(
        3,
        json!({"inputResponses": {key.clone(): answer}, "requestState": state}),
    )
    .await;
    assert_eq!(text_of(&r2), "client said: four", "{}", r2.raw);
    gw.shutdown().await;
}

/// npm's server-everything in its `sse` mode (the TypeScript SDK's
/// `SSEServerTransport`): its tools, and its sampling request mid-call
/// answered by a legacy caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_in_sse_mode_is_reached() {
    let (_server, port) = peers::spawn_server_everything_sse();
    let upstream = format!(
        "[[upstream]]\nname = \"ev\"\ntransport = \"sse\"\nurl = \"http://127.0.0.1:{port}/sse\"\n"
    );
    let gw = start("", &upstream).await;
    let addr = gw.local_addr();
    let sid = legacy_session_with(addr, "2025-11-25", json!({"sampling": {}})).await;
    let list = call(addr, &sid, json!(1), "tools/list", json!({})).await;
    let names = tool_names(&list);
    for tool in ["ev__echo", "ev__trigger-sampling-request"] {
        assert!(names.contains(&tool.to_string()), "{names:?}");
    }
    let echo = call_tool(addr, &sid, json!(2), "ev__echo", json!({"message": "hi"})).await;
    assert!(text_of(&echo).contains("hi"), "{}", echo.raw);
    let ask = json!({"name": "ev__trigger-sampling-request", "arguments": {"prompt": "2+2?"}});
    let fin = sampled(addr, &sid, ask).await;
    assert!(fin.to_string().contains("four"), "{fin}");
    gw.shutdown().await;
}
