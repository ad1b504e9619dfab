//! Issue 11, black-box against the real binary: client authentication
//! (bearer tokens; 401 with `WWW-Authenticate`), legacy sessions that
//! belong to their client (404 for anyone else), per-client policy for
//! legacy and modern requests, the rate limit (429 with `Retry-After`), no
//! token passthrough to an HTTP upstream, refusals counted, and no token in
//! `/status`, `check-config` or the log.
#![allow(clippy::disallowed_methods)] // the gateway is a child process waited for in real time

use crate::support;

use crate::support::binary::{admin_get, refused, sha256_hex, Running};
use crate::support::{eventually_sync, free_port, post, scripted};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;

const READER: &str = "mcpe_reader-token-0123456789abcdef";
const WRITER: &str = "mcpe_writer-token-0123456789abcdef";
const LIMITED: &str = "mcpe_limited-token-0123456789abcd";

fn config(dir: &Path, cap_url: &str) -> String {
    std::fs::write(dir.join("writer.token"), format!("{WRITER}\n")).unwrap();
    format!(
        r#"[server]
listen = "127.0.0.1:{}"
admin_listen = "127.0.0.1:{}"

[[client]]
name = "reader"
token_sha256 = "{}"
allow = ["fake__echo", "fake__greet", "edge__*", "cap__*"]
deny = ["edge__thermal"]

[[client]]
name = "writer"
token_file = "{}/writer.token"
deny = ["fake__echo"]

[[client]]
name = "limited"
token_sha256 = "{}"
allow = ["edge__*"]
rate = "3/h"

[audit]
path = "{}/audit.jsonl"

[[upstream]]
name = "edge"
transport = "builtin"

{}
{}"#,
        free_port(),
        free_port(),
        sha256_hex(READER),
        dir.display(),
        sha256_hex(LIMITED),
        dir.display(),
        support::fake_block("fake", "legacy", ""),
        scripted::http_block("cap", cap_url, ""),
    )
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Opens a legacy session as `token`'s client; returns its id.
async fn session(addr: SocketAddr, token: &str) -> String {
    let auth = bearer(token);
    let r = post(
        addr,
        &[("authorization", &auth)],
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.raw);
    r.header("mcp-session-id").unwrap().to_string()
}

async fn legacy(
    addr: SocketAddr,
    token: &str,
    sid: &str,
    method: &str,
    params: Value,
) -> support::Reply {
    let auth = bearer(token);
    let h = [
        ("authorization", auth.as_str()),
        ("mcp-session-id", sid),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    post(
        addr,
        &h,
        &json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
    )
    .await
}

async fn modern(addr: SocketAddr, token: &str, method: &str, mut params: Value) -> support::Reply {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let auth = bearer(token);
    let mut h = vec![
        ("authorization", auth.as_str()),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    let name = params
        .get("name")
        .or(params.get("uri"))
        .and_then(Value::as_str)
        .map(String::from);
    if let Some(n) = &name {
        h.push(("mcp-name", n.as_str()));
    }
    post(
        addr,
        &h,
        &json!({"jsonrpc": "2.0", "id": 8, "method": method, "params": params}),
    )
    .await
}

fn names(r: &support::Reply, key: &str) -> Vec<String> {
    let items = r.body["result"][key]
        .as_array()
        .unwrap_or_else(|| panic!("{}", r.raw));
    let field = if key == "resources" { "uri" } else { "name" };
    items
        .iter()
        .map(|t| t[field].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_are_authenticated_kept_apart_and_held_to_their_policy() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, cap_url) = scripted::scripted(scripted::Mode::Legacy).await;
    let gw = Running::start(dir.path(), &config(dir.path(), &cap_url)).await;
    let addr = gw.addr;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});

    // No token, a malformed header, a wrong token: 401 with a challenge and a JSON-RPC error.
    let none = post(addr, &[], &init).await;
    assert_eq!(none.status, 401, "{}", none.raw);
    assert_eq!(
        none.header("www-authenticate"),
        Some(r#"Bearer realm="mcp-edge""#)
    );
    assert_eq!(none.error_code(), Some(mcp_edge::protocol::UNAUTHORIZED));
    let wrong = post(
        addr,
        &[("authorization", "Bearer mcpe_not-a-known-token-000000")],
        &init,
    )
    .await;
    assert_eq!(wrong.status, 401, "{}", wrong.raw);
    let challenge = wrong.header("www-authenticate").unwrap();
    assert!(
        challenge.starts_with(r#"Bearer realm="mcp-edge""#),
        "{challenge}"
    );
    let basic = post(addr, &[("authorization", "Basic cmVhZGVyOng=")], &init).await;
    assert_eq!(basic.status, 401);
    // A modern request is asked the same.
    let m = modern(
        addr,
        "mcpe_not-a-known-token-000000",
        "tools/list",
        json!({}),
    )
    .await;
    assert_eq!(m.status, 401);

    // The right tokens: 200, and sessions of their own.
    let reader = session(addr, READER).await;
    let writer = session(addr, WRITER).await;

    // Another client's session id is answered as an unknown one: 404, on every method.
    let stolen = legacy(addr, WRITER, &reader, "tools/list", json!({})).await;
    assert_eq!(stolen.status, 404, "{}", stolen.raw);
    let auth = bearer(WRITER);
    for method in ["GET", "DELETE"] {
        let h = [
            ("authorization", auth.as_str()),
            ("mcp-session-id", reader.as_str()),
        ];
        let r = support::request(method, addr, &h, "").await;
        assert_eq!(r.status, 404, "{method}: {}", r.raw);
    }
    let unknown = legacy(
        addr,
        WRITER,
        "0123456789abcdef0123456789abcdef0000",
        "tools/list",
        json!({}),
    )
    .await;
    assert_eq!(
        (unknown.status, &unknown.body["error"]),
        (404, &stolen.body["error"])
    );
    // ... and the owner's session survived the attempts.
    let own = legacy(addr, READER, &reader, "tools/list", json!({})).await;
    assert_eq!(own.status, 200, "{}", own.raw);

    // Policy: each client sees what it may use, in both eras.
    let reader_tools = names(&own, "tools");
    assert!(
        reader_tools.contains(&"fake__echo".to_string()),
        "{reader_tools:?}"
    );
    assert!(
        reader_tools
            .iter()
            .all(|t| t == "fake__echo" || t.starts_with("edge__") || t.starts_with("cap__")),
        "{reader_tools:?}"
    );
    assert!(
        !reader_tools.contains(&"edge__thermal".to_string()),
        "{reader_tools:?}"
    );
    let writer_tools = names(
        &legacy(addr, WRITER, &writer, "tools/list", json!({})).await,
        "tools",
    );
    assert!(
        !writer_tools.contains(&"fake__echo".to_string()),
        "{writer_tools:?}"
    );
    assert!(
        writer_tools.contains(&"fake__slow_echo".to_string()),
        "{writer_tools:?}"
    );
    assert!(
        writer_tools.contains(&"edge__thermal".to_string()),
        "{writer_tools:?}"
    );
    assert_eq!(
        names(
            &modern(addr, READER, "tools/list", json!({})).await,
            "tools"
        ),
        reader_tools
    );
    assert_eq!(
        names(
            &modern(addr, WRITER, "tools/list", json!({})).await,
            "tools"
        ),
        writer_tools
    );
    let prompts = names(
        &legacy(addr, READER, &reader, "prompts/list", json!({})).await,
        "prompts",
    );
    assert_eq!(prompts, ["fake__greet"]);

    // Outside its policy: the answer of a tool that does not exist, in both eras.
    let call = |name: &str| json!({"name": name, "arguments": {"text": "hi"}});
    let denied = legacy(addr, READER, &reader, "tools/call", call("fake__slow_echo")).await;
    let absent = legacy(
        addr,
        READER,
        &reader,
        "tools/call",
        call("fake__no_such_tool"),
    )
    .await;
    assert_eq!(denied.status, absent.status);
    assert_eq!(
        denied.body["error"]["code"], absent.body["error"]["code"],
        "{}",
        denied.raw
    );
    assert_eq!(
        denied.body["error"]["message"], "Unknown tool: fake__slow_echo",
        "{}",
        denied.raw
    );
    let denied_m = modern(addr, WRITER, "tools/call", call("fake__echo")).await;
    let absent_m = modern(addr, WRITER, "tools/call", call("fake__no_such_tool")).await;
    assert_eq!(denied_m.status, absent_m.status, "{}", denied_m.raw);
    assert_eq!(
        denied_m.body["error"]["code"],
        absent_m.body["error"]["code"]
    );
    let allowed = legacy(addr, READER, &reader, "tools/call", call("fake__echo")).await;
    assert_eq!(support::text_of(&allowed), "fake:hi");
    let allowed_m = modern(addr, WRITER, "tools/call", call("fake__slow_echo")).await;
    assert!(allowed_m.body.get("result").is_some(), "{}", allowed_m.raw);

    // Resources follow their upstream's policy: "limited" may use none of fake's names.
    let reader_res = names(
        &legacy(addr, READER, &reader, "resources/list", json!({})).await,
        "resources",
    );
    assert!(
        reader_res.contains(&"fake://fake/readme".to_string()),
        "{reader_res:?}"
    );
    let limited_res = names(
        &modern(addr, LIMITED, "resources/list", json!({})).await,
        "resources",
    );
    assert!(
        !limited_res.contains(&"fake://fake/readme".to_string()),
        "{limited_res:?}"
    );
    let hidden = modern(
        addr,
        LIMITED,
        "resources/read",
        json!({"uri": "fake://fake/readme"}),
    )
    .await;
    assert!(
        hidden.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Resource not found"),
        "{}",
        hidden.raw
    );

    // Rate: "limited" has 3 an hour (two used above): the 4th request is 429 with Retry-After.
    let third = modern(addr, LIMITED, "tools/list", json!({})).await;
    assert_eq!(third.status, 200, "{}", third.raw);
    let fourth = modern(addr, LIMITED, "tools/list", json!({})).await;
    assert_eq!(fourth.status, 429, "{}", fourth.raw);
    let retry: u64 = fourth.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=1200).contains(&retry), "{retry}");
    assert_eq!(fourth.error_code(), Some(mcp_edge::protocol::RATE_LIMITED));
    assert_eq!(fourth.body["id"], 8, "the refused request's own id");
    // Notifications are not charged: a client over its rate can still cancel.
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    let auth_limited = bearer(LIMITED);
    let n = post(
        addr,
        &[
            ("authorization", auth_limited.as_str()),
            ("mcp-protocol-version", "2026-07-28"),
        ],
        &note,
    )
    .await;
    assert_eq!(n.status, 202, "{}", n.raw);
    // Other clients are not held back by it.
    assert_eq!(
        modern(addr, WRITER, "tools/list", json!({})).await.status,
        200
    );

    // No token passthrough: the HTTP upstream was called, never with a caller's Authorization.
    let via = legacy(
        addr,
        READER,
        &reader,
        "tools/call",
        json!({"name": "cap__hello"}),
    )
    .await;
    assert!(via.body.get("result").is_some(), "{}", via.raw);
    assert!(!cap.calls.lock().unwrap().is_empty());
    assert_eq!(
        cap.authorizations.lock().unwrap().len(),
        0,
        "{:?}",
        cap.authorizations.lock().unwrap()
    );

    // Every refusal counted.
    let (_, metrics) = admin_get(gw.admin, "/metrics").await;
    assert!(refused(&metrics, "auth") >= 4, "{metrics}");
    assert!(refused(&metrics, "policy") >= 2, "{metrics}");
    assert!(refused(&metrics, "rate") >= 1, "{metrics}");

    // /status names the clients, never their credentials; neither does the log.
    let (_, status) = admin_get(gw.admin, "/status").await;
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(
        status["access"]["clients"],
        json!(["reader", "writer", "limited"])
    );
    let log = std::fs::read_to_string(&gw.log).unwrap();
    let (valid, checked) = support::binary::check_config(&gw.config);
    assert!(valid, "{checked}");
    for secret in [READER, WRITER, LIMITED] {
        assert!(!status.to_string().contains(secret));
        assert!(!checked.contains(secret), "token in check-config");
        assert!(!log.contains(secret), "token in the log");
        assert!(!metrics.contains(secret));
    }
    assert!(log.contains("401"), "refusals are logged: {log}");

    // Audit: one line per call that reached the endpoint, no arguments by default.
    let lines = audit_lines(&dir.path().join("audit.jsonl"), 8).await;
    let outcomes: Vec<(&str, &str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["client"].as_str().unwrap(),
                l["name"].as_str().unwrap(),
                l["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("reader", "fake__slow_echo", "refused"),
            // Outside the reader's allow-list, existing or not.
            ("reader", "fake__no_such_tool", "refused"),
            ("writer", "fake__echo", "refused"),
            ("writer", "fake__no_such_tool", "error"),
            ("reader", "fake__echo", "ok"),
            ("writer", "fake__slow_echo", "ok"),
            ("limited", "fake://fake/readme", "refused"),
            ("reader", "cap__hello", "ok"),
        ]
    );
    let ok = &lines[4];
    assert_eq!(ok["method"], "tools/call");
    assert_eq!(ok["upstream"], "fake");
    assert_eq!(ok["original"], "echo");
    assert!(
        ok["session"].as_str().unwrap().starts_with("legacy:"),
        "{ok}"
    );
    assert_eq!(lines[5]["session"], "modern");
    assert_eq!(lines[3]["code"], -32602);
    assert!(lines[0].get("code").is_none(), "{}", lines[0]);
    assert_eq!(lines[6]["method"], "resources/read");
    for l in &lines {
        assert!(l["time"].as_str().unwrap().ends_with('Z'), "{l}");
        assert!(
            l["duration_ms"].is_u64() && l["request_bytes"].as_u64().unwrap() > 0,
            "{l}"
        );
        assert!(l["response_bytes"].as_u64().unwrap() > 0, "{l}");
        assert!(l.get("arguments").is_none(), "no arguments by default: {l}");
    }
}

/// The audit file's lines once there are `n` of them (the writer is a thread).
async fn audit_lines(path: &Path, n: usize) -> Vec<Value> {
    let what = format!("{n} audit lines in {}", path.display());
    let text = eventually_sync(&what, std::time::Duration::from_secs(10), || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), n, "{text}");
    lines
}

/// Review fixes: each message of a 2025-03-26 batch pays for itself, and a
/// call whose caller hangs up is still audited (as `disconnected`).
#[tokio::test(flavor = "multi_thread")]
async fn batches_pay_per_message_and_abandoned_calls_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let marks = support::marks::Marks::new();
    let text = format!(
        r#"[server]
listen = "127.0.0.1:{}"
admin_listen = "127.0.0.1:{}"

[[client]]
name = "batcher"
token_sha256 = "{}"
rate = "4/h"

[[client]]
name = "free"
token_sha256 = "{}"

[audit]
path = "{}/audit.jsonl"

{}"#,
        free_port(),
        free_port(),
        sha256_hex(READER),
        sha256_hex(WRITER),
        dir.path().display(),
        marks.fake_block("fake", "legacy", ""),
    );
    let gw = Running::start(dir.path(), &text).await;
    let addr = gw.addr;

    // initialize (1 of 4), then a batch of 5 requests: each pays for
    // itself (2, 3, 4), the 4th and 5th are over the rate.
    let auth = bearer(READER);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = post(addr, &[("authorization", &auth)], &init).await;
    let sid = r.header("mcp-session-id").unwrap().to_string();
    let batch: Vec<Value> = (1..=5)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "tools/list"}))
        .collect();
    let h = [
        ("authorization", auth.as_str()),
        ("mcp-session-id", sid.as_str()),
    ];
    let r = post(addr, &h, &Value::Array(batch)).await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let answers = r.body.as_array().unwrap_or_else(|| panic!("{}", r.raw));
    let codes: Vec<Option<i64>> = answers
        .iter()
        .map(|a| a["error"]["code"].as_i64())
        .collect();
    let limited = Some(mcp_edge::protocol::RATE_LIMITED);
    assert_eq!(codes, [None, None, None, limited, limited], "{}", r.raw);

    // A caller that hangs up in the middle of a slow call: audited anyway.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "fake__slow_echo", "arguments": {"text": "x", "ms": 5000},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {WRITER}\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: fake__slow_echo\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::AsyncWriteExt;
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    marks.called("slow_echo", 1).await; // in flight at the upstream
    drop(s);
    let lines = audit_lines(&dir.path().join("audit.jsonl"), 1).await;
    assert_eq!(lines[0]["client"], "free");
    assert_eq!(lines[0]["name"], "fake__slow_echo");
    assert_eq!(lines[0]["outcome"], "disconnected", "{}", lines[0]);
    assert!(
        lines[0]["duration_ms"].as_u64().unwrap() < 5000,
        "{}",
        lines[0]
    );
}

/// Review fix: a reload may not leave a running non-loopback listener
/// without clients (its `listen` change would wait for a restart while
/// the empty client table applied at once).
#[tokio::test]
async fn a_reload_cannot_open_a_network_listener_to_everyone() {
    use mcp_edge::config::Config;
    let edge = "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n";
    let client = format!(
        "[[client]]\nname = \"a\"\ntoken_sha256 = \"{}\"\n",
        sha256_hex(READER)
    );
    let open = format!("[server]\nlisten = \"0.0.0.0:0\"\nadmin_listen = \"off\"\n{client}{edge}");
    let config = Config::from_toml_str(&open, &support::origin("t.toml")).unwrap();
    let gw = mcp_edge::gateway::Gateway::start(config).await.unwrap();
    // Valid on its own (loopback, no clients), not for this running gateway.
    let closed = format!("[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n{edge}");
    let new = Config::from_toml_str(&closed, &support::origin("t.toml")).unwrap();
    let why = gw.admissible(&new).unwrap_err();
    assert!(
        why.contains("[[client]]") && why.contains("server.listen"),
        "{why}"
    );
    let kept =
        Config::from_toml_str(&format!("{closed}{client}"), &support::origin("t.toml")).unwrap();
    assert!(gw.admissible(&kept).is_ok());
    gw.shutdown().await;
}

/// Review fix: a client removed at reload loses what it held open — its
/// legacy session and GET stream, and its `subscriptions/listen` stream —
/// while another client's session stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_removed_at_reload_loses_its_sessions_and_streams() {
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let config = |with_alpha: bool, beta_token: &str| {
        let alpha = format!(
            "[[client]]\nname = \"alpha\"\ntoken_sha256 = \"{}\"\n",
            sha256_hex(READER)
        );
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\n{}\
             [[client]]\nname = \"beta\"\ntoken_sha256 = \"{}\"\nallow = [\"edge__*\"]\n\n\
             [[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n\n{}",
            if with_alpha { alpha } else { String::new() },
            sha256_hex(beta_token),
            support::fake_block("fake", "legacy", ""),
        )
    };
    let gw = Running::start(dir.path(), &config(true, WRITER)).await;
    let addr = gw.addr;
    let alpha = session(addr, READER).await;
    let beta = session(addr, WRITER).await;
    let auth = bearer(READER);
    let get_headers = [
        ("authorization", auth.as_str()),
        ("mcp-session-id", alpha.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
        ("accept", "text/event-stream"),
    ];
    let get = support::sse::open("GET", addr, &get_headers, "").await;
    let listen_body = json!({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}}});
    let listen_headers = [
        ("authorization", auth.as_str()),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
        ("accept", "application/json, text/event-stream"),
    ];
    let mut listen =
        support::sse::open("POST", addr, &listen_headers, &listen_body.to_string()).await;
    let ack = listen.next().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(gw.status().await["sessions"]["active"], 2);
    // beta may use edge's tools only: the instructions name no other upstream.
    let discover = modern(addr, WRITER, "server/discover", json!({})).await;
    let text = discover.body["result"]["instructions"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("'edge'") && !text.contains("fake"), "{text}");
    let discover = modern(addr, READER, "server/discover", json!({})).await;
    let text = discover.body["result"]["instructions"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("'edge'") && text.contains("'fake'"), "{text}");

    std::fs::write(&gw.config, config(false, WRITER)).unwrap();
    let reload = gw.reload().await;
    assert_eq!(reload["rejected"], false, "{reload}");
    // Both of alpha's streams end; the listen stream with its closing answer.
    let rest = listen.rest().await;
    assert_eq!(rest.last().map(|m| &m["id"]), Some(&json!(5)), "{rest:?}");
    let get_rest = tokio::time::timeout(std::time::Duration::from_secs(10), get.rest()).await;
    assert!(get_rest.is_ok(), "alpha's GET stream did not end");
    assert_eq!(gw.status().await["sessions"]["active"], 1);
    assert_eq!(
        legacy(addr, WRITER, &beta, "tools/list", json!({}))
            .await
            .status,
        200
    );
    assert_eq!(
        legacy(addr, READER, &alpha, "tools/list", json!({}))
            .await
            .status,
        401
    );

    // A rotated token (same name) ends what the old one opened.
    std::fs::write(&gw.config, config(false, LIMITED)).unwrap();
    let reload = gw.reload().await;
    assert_eq!(reload["rejected"], false, "{reload}");
    assert_eq!(gw.status().await["sessions"]["active"], 0);
    let old_token = legacy(addr, WRITER, &beta, "tools/list", json!({})).await;
    assert_eq!(old_token.status, 401);
    let new_token = legacy(addr, LIMITED, &beta, "tools/list", json!({})).await;
    assert_eq!(new_token.status, 404, "the old token's session is gone");
    let again = session(addr, LIMITED).await;
    let fresh = legacy(addr, LIMITED, &again, "tools/list", json!({})).await;
    assert_eq!(fresh.status, 200);
}
