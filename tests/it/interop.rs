//! Interop with real third-party peers (pinned; installed by tests/interop/setup.sh):
//! upstreams `@modelcontextprotocol/server-everything` over stdio and a Python
//! `mcp` SDK server over streamable HTTP, at once, behind one mcp-edge endpoint;
//! downstream clients Python `mcp==1.30.0`, Python `mcp==2.3.0` (modern and
//! legacy), the TypeScript SDK and the Inspector CLI; and Node `fetch` and
//! Python `http.client` reading a 413.

use crate::support;

use crate::support::peers::{self, ClientKind};
use serde_json::json;

/// A gateway fronting server-everything (stdio, prefix `everything`) and the
/// Python fixture server (HTTP, prefix `py`). The guard keeps the fixture alive.
async fn two_upstreams() -> (mcp_edge::gateway::Gateway, peers::KillOnDrop) {
    let (guard, port) = peers::spawn_fixture_http_server();
    let upstreams = format!(
        "[[upstream]]\nname = \"everything\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n{}\n\n\
         [[upstream]]\nname = \"py\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n",
        peers::server_everything_js().display(),
        support::test_grants()
    );
    let gw = support::start("", &upstreams).await;
    assert_eq!(gw.ready_upstreams(), 2, "both real upstreams connect");
    (gw, guard)
}

const CALLS: &str = r#"[{"name": "everything__echo", "arguments": {"message": "hello edge"}},
                        {"name": "py__add", "arguments": {"a": 2, "b": 40}}]"#;

async fn check_client(kind: ClientKind) -> serde_json::Value {
    let (gw, _guard) = two_upstreams().await;
    let url = format!("http://{}/mcp", gw.local_addr());
    let out = peers::run_client(kind, &url, CALLS).await;
    let tools = peers::tool_names(&out);
    for t in [
        "everything__echo",
        "everything__get-sum",
        "py__add",
        "py__echo",
    ] {
        assert!(
            tools.contains(&t.to_string()),
            "{kind:?}: {t} missing from {tools:?}"
        );
    }
    assert!(
        peers::call_text(&out, 0).contains("hello edge"),
        "{kind:?}: {}",
        out["calls"][0]
    );
    assert_eq!(
        peers::call_text(&out, 1),
        "42",
        "{kind:?}: {}",
        out["calls"][1]
    );
    gw.shutdown().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_1_30_legacy_client() {
    let out = check_client(ClientKind::V1).await;
    assert_eq!(out["protocolVersion"], "2025-11-25");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_2_modern_client() {
    let out = check_client(ClientKind::V2).await;
    assert_eq!(
        out["protocolVersion"], "2026-07-28",
        "mcp 2.x auto mode should stay modern: {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_2_legacy_client() {
    let out = check_client(ClientKind::V2Legacy).await;
    assert!(
        out["protocolVersion"]
            .as_str()
            .unwrap()
            .starts_with("2025-"),
        "{out}"
    );
}

/// Calls `{prefix}__grow` now and then and polls the gateway's tools/list
/// until a `{prefix}__grown_*` tool appears (the upstream announced it on a
/// stream not tied to the call; up to 10 s); returns the grown tools' names.
async fn grown_tools(addr: std::net::SocketAddr, prefix: &str) -> Vec<String> {
    let sid = support::legacy_session(addr, "2025-11-25").await;
    let mut polls = 0;
    let grown_listed = || {
        polls += 1;
        let (n, sid) = (polls, &sid);
        async move {
            // Grow again now and then: the first call may come before the
            // stream is open.
            if n % 40 == 1 {
                let grow = format!("{prefix}__grow");
                let r = support::call_tool(addr, sid, json!(n), &grow, json!(null)).await;
                assert!(support::text_of(&r).starts_with("grew grown_"), "{}", r.raw);
            }
            let list = support::call(addr, sid, json!(1000 + n), "tools/list", json!({})).await;
            let grown: Vec<String> = (support::tool_names(&list).into_iter())
                .filter(|n| n.starts_with(&format!("{prefix}__grown_")))
                .collect();
            (!grown.is_empty()).then_some(grown)
        }
    };
    let what = format!("a {prefix}__grown_* tool in tools/list");
    let grown = support::eventually(&what, std::time::Duration::from_secs(10), grown_listed).await;
    let r = support::call_tool(addr, &sid, json!("g"), &grown[0], json!(null)).await;
    assert!(support::text_of(&r).starts_with("grown "), "{}", r.raw);
    grown
}

/// An upstream announces a new tool on a stream tied to no request: a
/// legacy HTTP server (Python `mcp==1.30.0`) on its session's GET stream, a
/// modern one (Python `mcp==2.3.0`, over streamable HTTP and over stdio)
/// only to `subscriptions/listen` streams. mcp-edge follows each, refreshes
/// the catalog, and the tool appears downstream without a reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_announce_new_tools_on_their_notification_streams() {
    let (_legacy, lport) = peers::spawn_fixture_http_server();
    let (_modern, mport) = peers::spawn_fixture_modern_server();
    let upstreams = format!(
        "[[upstream]]\nname = \"py\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{lport}/mcp\"\n\n\
         [[upstream]]\nname = \"mh\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{mport}/mcp\"\n\n\
         [[upstream]]\nname = \"ms\"\ntransport = \"stdio\"\ncommand = \"{}\"\nargs = [\"{}\", \"stdio\"]\n{}\n",
        peers::python_v2().display(),
        peers::fixture_modern_server_py().display(),
        support::test_grants()
    );
    let gw = support::start("", &upstreams).await;
    assert_eq!(gw.ready_upstreams(), 3);
    let ups = gw.app().router().upstreams().to_vec();
    assert!(ups[1].negotiated().unwrap().era == mcp_edge::upstream::UpstreamEra::Modern);
    let attempts: Vec<u64> = ups.iter().map(|u| u.attempts()).collect();
    for prefix in ["py", "mh", "ms"] {
        let grown = grown_tools(gw.local_addr(), prefix).await;
        assert!(!grown.is_empty());
    }
    let after: Vec<u64> = ups.iter().map(|u| u.attempts()).collect();
    assert_eq!(after, attempts, "seen without a reconnect");
    gw.shutdown().await;
}

/// `x-mcp-header` both ways, with the Python `mcp==2.3.0` server (which
/// rejects a call without the matching header): mcp-edge sends
/// `Mcp-Param-Region` upstream for a legacy client's call, and checks the
/// header a modern client sends it (400 and -32020 when missing or wrong).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_parameters_mirrored_into_headers_both_ways() {
    let (_modern, port) = peers::spawn_fixture_modern_server();
    let gw = support::start(
        "",
        &format!("[[upstream]]\nname = \"mh\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n"),
    )
    .await;
    let addr = gw.local_addr();
    let sid = support::legacy_session(addr, "2025-11-25").await;
    let args = json!({"name": "mh__where", "arguments": {"region": "eu-west1"}});
    let r = support::call(addr, &sid, json!(1), "tools/call", args.clone()).await;
    assert_eq!(support::text_of(&r), "served in eu-west1", "{}", r.raw);
    // A modern client must send the header itself.
    let modern = |headers: Vec<(&'static str, &'static str)>| {
        let args = args.clone();
        async move {
            let mut params = args;
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            });
            let mut h = vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "mh__where"),
            ];
            h.extend(headers);
            support::post(
                addr,
                &h,
                &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}),
            )
            .await
        }
    };
    let missing = modern(vec![]).await;
    assert_eq!(missing.status, 400, "{}", missing.raw);
    assert_eq!(missing.error_code(), Some(-32020), "{}", missing.raw);
    let wrong = modern(vec![("mcp-param-region", "us-west1")]).await;
    assert_eq!(wrong.error_code(), Some(-32020), "{}", wrong.raw);
    let right = modern(vec![("mcp-param-region", "eu-west1")]).await;
    assert_eq!(
        support::text_of(&right),
        "served in eu-west1",
        "{}",
        right.raw
    );
    let encoded = modern(vec![("Mcp-Param-Region", "=?base64?ZXUtd2VzdDE=?=")]).await;
    assert_eq!(
        support::text_of(&encoded),
        "served in eu-west1",
        "{}",
        encoded.raw
    );
    gw.shutdown().await;
}

/// The next JSON line the child printed (60 s at most).
async fn next_json(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> serde_json::Value {
    let line = tokio::time::timeout(std::time::Duration::from_secs(60), lines.next_line())
        .await
        .expect("the client prints within 60 s")
        .unwrap()
        .expect("the client printed a line before exiting");
    serde_json::from_str(&line).unwrap()
}

/// Python `mcp==2.3.0`'s own `Client.listen` through mcp-edge
/// (tests/interop/listen_v2.py): the acknowledgment names the honoured
/// subset (list changes, not resource updates), a reconnecting upstream's
/// tools are announced (and its unchanged, empty prompt list is not), and a gateway shutdown ends the stream gracefully, not as a
/// lost subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_2_listens_for_list_changes() {
    use tokio::io::AsyncBufReadExt;
    let gw = support::start(
        "keepalive = \"60s\"",
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let url = format!("http://{}/mcp", gw.local_addr());
    let mut child = tokio::process::Command::new(peers::python_v2())
        .arg(peers::interop_dir().join("listen_v2.py"))
        .arg(&url)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python listen client starts");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let honored = next_json(&mut lines).await;
    assert_eq!(
        honored["honored"],
        json!({"toolsListChanged": true, "promptsListChanged": true}),
        "{honored}"
    );
    gw.app().router().upstreams()[0].force_reconnect();
    let first = next_json(&mut lines).await;
    assert_eq!(first["event"], "ToolsListChanged", "{first}");
    gw.shutdown().await;
    let end = loop {
        let v = next_json(&mut lines).await;
        if v.get("end").is_some() {
            break v;
        }
        // The built-in upstream has no prompts: only tool changes come.
        assert_eq!(v["event"], "ToolsListChanged", "{v}");
    };
    assert_eq!(end["end"], "graceful", "{end}");
    assert!(child.wait().await.unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client() {
    check_client(ClientKind::Ts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspector_cli_lists_tools() {
    let (gw, _guard) = two_upstreams().await;
    let out = peers::inspector_tools_list(&format!("http://{}/mcp", gw.local_addr())).await;
    let names: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"everything__echo") && names.contains(&"py__add"),
        "{names:?}"
    );
    gw.shutdown().await;
}

/// The README's default: the built-in `edge` tools, reached by the Inspector CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_default_serves_edge_tools_to_the_inspector() {
    let mut config = mcp_edge::config::Config::embedded_default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.admin_listen = None;
    let gw = mcp_edge::gateway::Gateway::start(config).await.unwrap();
    gw.wait_upstreams(std::time::Duration::from_secs(5)).await;
    let out = peers::inspector_tools_list(&format!("http://{}/mcp", gw.local_addr())).await;
    let names: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for t in [
        "edge__uptime",
        "edge__load_average",
        "edge__memory",
        "edge__disk_usage",
        "edge__thermal",
    ] {
        assert!(names.contains(&t), "{t} missing from {names:?}");
    }
    let py = peers::run_client(
        ClientKind::V1,
        &format!("http://{}/mcp", gw.local_addr()),
        &json!([{"name": "edge__disk_usage", "arguments": {"path": "/"}}]).to_string(),
    )
    .await;
    assert!(peers::call_text(&py, 0).contains("/"), "{}", py["calls"][0]);
    gw.shutdown().await;
}

/// The Python SDKs and the TypeScript SDK over https (`server.tls_cert`),
/// trusting the test CA: initialize (or `server/discover`), tools/list and
/// tools/call of the built-in `edge` tools.
async fn check_client_over_https(kind: ClientKind) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let ca = support::tls::Ca::new("interop CA");
    let files = support::tls::Files::write(dir.path(), &ca.server("mcp-edge"), None);
    let edge = "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n";
    let gw = support::tls::start("admin_listen = \"off\"", edge, &files).await;
    let url = format!("https://{}/mcp", gw.local_addr());
    let ca_file = ca.write(&dir.path().join("ca.pem"));
    let calls = r#"[{"name": "edge__uptime"}]"#;
    let out = peers::run_client_trusting(kind, &url, calls, &ca_file).await;
    let tools = peers::tool_names(&out);
    assert!(
        tools.contains(&"edge__uptime".to_string()),
        "{kind:?}: {tools:?}"
    );
    assert_eq!(
        out["calls"][0]["result"]["isError"],
        json!(false),
        "{kind:?}: {}",
        out["calls"][0]
    );
    gw.shutdown().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_1_30_over_https() {
    let out = check_client_over_https(ClientKind::V1).await;
    assert_eq!(out["protocolVersion"], "2025-11-25");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_2_modern_over_https() {
    let out = check_client_over_https(ClientKind::V2).await;
    assert_eq!(out["protocolVersion"], "2026-07-28", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_over_https() {
    check_client_over_https(ClientKind::Ts).await;
}

/// Node `fetch` and Python `http.client` write a whole 2 MiB body before
/// they read the answer: each reads the gateway's 413 (the body is
/// discarded up to `limits::REFUSED_BODY_DRAIN_BYTES` first) instead of
/// failing with EPIPE or ECONNRESET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_fetch_and_python_http_client_read_the_413_of_a_2_mib_body() {
    let gw = support::start(
        "",
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let url = format!("http://{}/mcp", gw.local_addr());
    for python in [false, true] {
        let out = peers::post_bytes(python, &url, 2 * 1024 * 1024).await;
        assert_eq!(out["status"], 413, "python {python}: {out}");
        assert!(
            out["body"].as_str().unwrap().contains("max_body_bytes"),
            "{out}"
        );
    }
    gw.shutdown().await;
}

/// Issue 13 acceptance (modern caller ↔ legacy upstream): the Python SDK 2.3.0
/// client in modern mode calls, through mcp-edge, a tool of a Python SDK
/// 1.30.0 stdio server that asks during the call — `ctx.elicit(...)`, then
/// sampling, then roots. mcp-edge turns each request into an
/// `InputRequiredResult` round; the SDK client's callbacks answer and it
/// retries; the server receives every value and the result comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_2_modern_client_answers_a_legacy_python_servers_requests() {
    let upstream = format!(
        "[[upstream]]\nname = \"v1\"\ntransport = \"stdio\"\ncommand = \"{}\"\nargs = [\"{}\"]\n{}\n",
        peers::python_v1().display(),
        peers::interop_dir().join("mrtr_server_v1.py").display(),
        support::test_grants()
    );
    let gw = support::start("", &upstream).await;
    assert_eq!(gw.ready_upstreams(), 1);
    let url = format!("http://{}/mcp", gw.local_addr());
    let calls = r#"[{"name": "v1__interview", "arguments": {"question": "Who are you?"}}]"#;
    let roots = r#"["file:///srv/edge", "file:///home/pi"]"#;
    let out = peers::run_client_with_env(
        ClientKind::V2Modern,
        &url,
        calls,
        &[("CLIENT_ROOTS", roots)],
    )
    .await;
    assert_eq!(out["protocolVersion"], "2026-07-28", "{out}");
    let got: serde_json::Value = serde_json::from_str(&peers::call_text(&out, 0))
        .unwrap_or_else(|e| panic!("{e}: {}", out["calls"][0]));
    assert_eq!(
        got,
        json!({
            "elicited": {"action": "accept", "name": "test"},
            "sampled": "canned sampling reply from mcp-edge interop client",
            "model": "mcp-edge-interop-canned",
            "roots": ["file:///srv/edge", "file:///home/pi"],
        })
    );
    assert!(gw.app().parked().is_empty(), "every round resumed");
    gw.shutdown().await;
}

/// SSE polling with real peers on both sides (issue 25 part 3): the Python
/// SDK 1.30 server (an event store: `--resumable`) closes a call's stream
/// after its first progress notification, to be polled; mcp-edge resumes
/// it with `Last-Event-ID` and closes its own caller's stream in turn; the
/// Python SDK 1.30 client and the TypeScript SDK client poll mcp-edge
/// with `Last-Event-ID` (this gateway resumed a stream for each) and get
/// both progress notifications and the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_poll_a_call_whose_upstream_closed_its_stream() {
    let (_guard, port) = peers::spawn_fixture_http_server_with(&["--resumable"]);
    let upstream = format!(
        "[[upstream]]\nname = \"py\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
    );
    let gw = support::start("", &upstream).await;
    let url = format!("http://{}/mcp", gw.local_addr());
    // This gateway's own count: other tests in the process resume streams too.
    let resumed = || gw.app().sse_resumed();
    for kind in [ClientKind::V1, ClientKind::Ts] {
        let before = resumed();
        let out =
            peers::run_client(kind, &url, r#"[{"name": "py__polled", "progress": true}]"#).await;
        assert_eq!(peers::call_text(&out, 0), "polled", "{kind:?}: {out}");
        let progress = out["calls"][0]["progress"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            progress.len(),
            2,
            "{kind:?}: both progress notifications once: {out}"
        );
        assert!(
            resumed() > before,
            "{kind:?} resumed its stream from mcp-edge"
        );
    }
    gw.shutdown().await;
}
