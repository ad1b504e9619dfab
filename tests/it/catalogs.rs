//! Catalogs per capability set (issue 25 part 2): an upstream whose
//! `tools/list` depends on the capabilities a request declares (the
//! scripted upstream lists `tasks_only` only to a modern request that
//! declares the tasks extension) shows each caller, and lets it call, what
//! its own capabilities would get directly; sets beyond the fixed table get
//! the broadest catalog, counted.

use crate::support::scripted::{http_block, scripted, Mode};
use crate::support::*;
use crate::support::{binary, peers};
use serde_json::{json, Value};
use std::net::SocketAddr;

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A modern request declaring `caps` as its client capabilities.
async fn modern_as(addr: SocketAddr, id: u64, method: &str, params: Value, caps: Value) -> Reply {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let mut h = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    let name = params["name"].as_str().map(String::from);
    if let Some(n) = &name {
        h.push(("mcp-name", n));
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    post(addr, &h, &body).await
}

async fn listed(addr: SocketAddr, caps: Value) -> Vec<String> {
    tool_names(&modern_as(addr, 1, "tools/list", json!({}), caps).await)
}

fn tasks_declared(mut caps: Value) -> Value {
    caps["extensions"] = json!({ TASKS: {} });
    caps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_caller_sees_and_calls_the_tools_its_capabilities_would_get() {
    for mode in [Mode::Modern, Mode::Dual] {
        let (_up, url) = scripted(mode).await;
        let gw = start("", &http_block("d", &url, "era = \"auto\"")).await;
        let addr = gw.local_addr();
        let with_tasks = listed(addr, tasks_declared(json!({}))).await;
        assert!(
            with_tasks.contains(&"d__tasks_only".to_string()),
            "{with_tasks:?}"
        );
        assert!(with_tasks.contains(&"d__hello".to_string()));
        let without = listed(addr, json!({"sampling": {}})).await;
        assert!(
            !without.contains(&"d__tasks_only".to_string()),
            "{without:?}"
        );
        assert_eq!(without.len() + 1, with_tasks.len(), "only that one differs");
        // A legacy session declares no extension: as a client of the
        // server directly, it is not shown the tool, nor may call it.
        let sid = legacy_session(addr, "2025-11-25").await;
        let legacy = call(addr, &sid, json!(2), "tools/list", json!({})).await;
        assert!(!tool_names(&legacy).contains(&"d__tasks_only".to_string()));
        let refused = call_tool(addr, &sid, json!(3), "d__tasks_only", json!({})).await;
        assert_eq!(refused.error_code(), Some(-32602), "{}", refused.raw);
        assert!(
            refused.raw.contains("Unknown tool: d__tasks_only"),
            "{}",
            refused.raw
        );
        let call = json!({"name": "d__tasks_only", "arguments": {}});
        let no = modern_as(addr, 4, "tools/call", call.clone(), json!({})).await;
        assert_eq!(no.error_code(), Some(-32602), "{}", no.raw);
        let yes = modern_as(addr, 5, "tools/call", call, tasks_declared(json!({}))).await;
        assert_eq!(text_of(&yes), "hello from no session", "{}", yes.raw);
        gw.shutdown().await;
    }
}

/// The sets listed are a fixed table per upstream
/// (`limits::UPSTREAM_CAPABILITY_SESSIONS`, 6): a seventh set is shown the
/// broadest catalog, and the refusal counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_beyond_the_table_get_the_broadest_catalog_counted() {
    mcp_edge::metrics::prometheus();
    let (up, url) = scripted(Mode::Modern).await;
    let gw = start("", &http_block("d", &url, "")).await;
    let addr = gw.local_addr();
    let sets = [
        json!({}),
        json!({"sampling": {}}),
        json!({"roots": {}}),
        json!({"elicitation": {}}),
        json!({"sampling": {}, "roots": {}}),
        json!({"elicitation": {"url": {}}}),
    ];
    for caps in &sets {
        let names = listed(addr, caps.clone()).await;
        assert!(!names.contains(&"d__tasks_only".to_string()), "{caps}");
    }
    let refused =
        || mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"capability_catalogs\"");
    let before = refused();
    let lists = || {
        let seen = up.requests.lock().unwrap();
        seen.iter().filter(|(_, m)| m == "tools/list").count()
    };
    let asked = lists();
    for _ in 0..3 {
        let seventh = listed(addr, json!({"sampling": {"tools": {}}})).await;
        let shown = seventh.contains(&"d__tasks_only".to_string());
        assert!(shown, "broadest: {seventh:?}");
    }
    assert!(refused() >= before + 3.0, "counted, each time");
    assert_eq!(
        lists(),
        asked,
        "the upstream is not asked for a set with no place"
    );
    // The sets already listed keep their own.
    assert!(!listed(addr, json!({"roots": {}}))
        .await
        .contains(&"d__tasks_only".to_string()));
    gw.shutdown().await;
}

/// The real thing: the Python SDK 2.3 conformance fixture, dual-era, whose
/// `test_tasks_only` is listed only to a request that declares the tasks
/// extension, as an `era = "auto"` upstream. A legacy session's call that
/// asks the client (`test_elicitation`) is answered by that session on its
/// stream; each caller is shown the tools its capabilities would get.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_dual_era_server_is_reached_in_each_era_with_each_callers_catalog() {
    let (_server, port) = peers::spawn_dual_era_server();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let block = format!(
        "{}prefix = \"conf\"\n",
        http_block("conf", &url, "era = \"auto\"")
    );
    let gw = start("admin_listen = \"127.0.0.1:0\"", &block).await;
    let addr = gw.local_addr();
    let admin = gw.admin_addr().expect("admin listener");
    let (_, status) = binary::admin_get(admin, "/status").await;
    let status: Value = serde_json::from_str(&status).unwrap();
    let eras = &status["upstreams"][0]["eras"];
    assert_eq!(eras, &json!(["2026-07-28", "2025-11-25"]), "{status}");
    let only = "conf__test_tasks_only".to_string();
    assert!(listed(addr, tasks_declared(json!({})))
        .await
        .contains(&only));
    assert!(!listed(addr, json!({"elicitation": {}}))
        .await
        .contains(&only));
    let sid = legacy_session_with(addr, "2025-11-25", json!({"elicitation": {}})).await;
    let list = call(addr, &sid, json!(1), "tools/list", json!({})).await;
    assert!(!tool_names(&list).contains(&only), "{}", list.raw);
    // The server asks on the call's own stream, in the legacy session.
    let ask = json!({"jsonrpc": "2.0", "id": "e1", "method": "tools/call",
        "params": {"name": "conf__test_elicitation", "arguments": {"message": "Who?"}}});
    let h = [("mcp-session-id", sid.as_str())];
    let mut s = sse::open("POST", addr, &h, &ask.to_string()).await;
    let q = loop {
        let m = s.next().await;
        if m.get("method").is_some_and(|m| m == "elicitation/create") {
            break m;
        }
    };
    let content = json!({"username": "ada", "email": "ada@example.org"});
    let answer = json!({"jsonrpc": "2.0", "id": q["id"],
        "result": {"action": "accept", "content": content}});
    assert_eq!(post(addr, &h, &answer).await.status, 202);
    let fin = loop {
        let m = s.next().await;
        if m.get("id") == Some(&json!("e1")) {
            break m;
        }
    };
    let text = content_text(&fin).unwrap_or_default().to_string();
    assert!(
        text.contains("action=accept") && text.contains("ada@example.org"),
        "{fin}"
    );
    gw.shutdown().await;
}
