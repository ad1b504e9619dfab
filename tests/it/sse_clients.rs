//! The 2024-11-05 HTTP+SSE transport served to clients (issue 25 part 4,
//! downstream): `GET /sse` opens a session in the one session table and
//! names where to POST in its `endpoint` event; `POST /messages?sessionId=…`
//! is answered 202 at once and the answers (and what upstreams relay
//! meanwhile) come on the stream; the same credentials, policy, rate and
//! bounds as `/mcp`, each bound counted; the session ends with its stream.

use crate::support::peers::{self, ClientKind};
use crate::support::*;
use mcp_edge::metrics::{prometheus, read, REFUSED, SESSIONS_ACTIVE, SESSIONS_EVICTED};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const ALICE: &str = "mcpe_alice-token-0123456789abcdef0";
const BOB: &str = "mcpe_bob-token-0123456789abcdef012";

/// Two clients: alice may call the fake's echo, slow_echo, progress and
/// ask, and the built-in tools; bob everything but the fake's echo.
fn clients(extra: &str) -> String {
    format!(
        "[[client]]\nname = \"alice\"\ntoken_sha256 = \"{}\"\n\
         allow = [\"f__echo\", \"f__slow_echo\", \"f__progress\", \"f__ask\", \"edge__*\"]\n{extra}\n\
         [[client]]\nname = \"bob\"\ntoken_sha256 = \"{}\"\ndeny = [\"f__echo\"]\n",
        binary::sha256_hex(ALICE),
        binary::sha256_hex(BOB)
    )
}

async fn gateway(extra: &str, server: &str) -> mcp_edge::gateway::Gateway {
    let upstreams = format!(
        "{}\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n{}",
        clients(extra),
        fake_block("f", "legacy", "")
    );
    start(server, &upstreams).await
}

/// One client's HTTP+SSE session: its stream, and where its POSTs go.
struct Old {
    stream: sse::Stream,
    messages: String,
    auth: String,
}

impl Old {
    /// `GET /sse` as `token`'s client, up to its `endpoint` event.
    async fn open(addr: SocketAddr, token: &str) -> Old {
        let auth = format!("Bearer {token}");
        let h = [
            ("authorization", auth.as_str()),
            ("accept", "text/event-stream"),
        ];
        let mut stream = sse::open_at("GET", &format!("http://{addr}/sse"), &h, "").await;
        assert_eq!(stream.status, 200);
        assert_eq!(stream.header("content-type"), Some("text/event-stream"));
        let first = stream.recv().await.expect("the endpoint event");
        assert_eq!(first.event.as_deref(), Some("endpoint"), "{first:?}");
        let path = first.data.as_str().expect("a URL").to_string();
        assert!(path.starts_with("/messages?sessionId="), "{path}");
        Old {
            stream,
            messages: format!("http://{addr}{path}"),
            auth,
        }
    }

    /// POSTs `body` as `token`'s client (the stream's own by default).
    async fn post_as(&self, auth: &str, body: &Value) -> Reply {
        let h = [("authorization", auth)];
        request_at("POST", &self.messages, &h, &body.to_string()).await
    }

    /// Its session's id (from the endpoint's URL).
    fn session(&self) -> &str {
        self.messages
            .rsplit_once("sessionId=")
            .expect("a session")
            .1
    }

    async fn post(&self, body: &Value) -> Reply {
        self.post_as(&self.auth, body).await
    }

    /// A request: 202, then its answer from the stream (the messages
    /// before it, relayed meanwhile, returned too).
    async fn ask(&mut self, id: i64, method: &str, params: Value) -> (Value, Vec<Value>) {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let r = self.post(&body).await;
        assert_eq!((r.status, r.raw.as_str()), (202, ""));
        let mut before = Vec::new();
        loop {
            let m = self.stream.next().await;
            if m["id"] == id && m.get("method").is_none() {
                return (m, before);
            }
            before.push(m);
        }
    }

    /// `initialize` (declaring sampling) and `notifications/initialized`.
    async fn initialize(&mut self, version: &str) -> Value {
        let params = json!({"protocolVersion": version, "capabilities": {"sampling": {}},
            "clientInfo": {"name": "old", "version": "1"}});
        let (answer, _) = self.ask(0, "initialize", params).await;
        let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(self.post(&done).await.status, 202);
        answer
    }
}

fn sse_sessions() -> f64 {
    read(SESSIONS_ACTIVE, "transport=\"sse\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_client_lists_calls_and_is_asked_on_its_stream() {
    prometheus();
    let gw = gateway("", "").await;
    let mut old = Old::open(gw.local_addr(), ALICE).await;
    let init = old.initialize("2024-11-05").await;
    // The transport's own version is spoken (its older clients know no other).
    assert_eq!(init["result"]["protocolVersion"], "2024-11-05", "{init}");
    let (list, _) = old.ask(1, "tools/list", json!({})).await;
    let names: Vec<&str> = (list["result"]["tools"].as_array().unwrap().iter())
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"f__echo") && names.contains(&"edge__uptime"),
        "{names:?}"
    );
    assert!(!names.contains(&"f__whoami"), "alice's policy: {names:?}");
    let (echo, _) = old
        .ask(
            2,
            "tools/call",
            json!({"name": "f__echo", "arguments": {"text": "hi"}}),
        )
        .await;
    assert_eq!(content_text(&echo), Some("f:hi"), "{echo}");
    // Progress relayed before the answer, on the same stream.
    let params =
        json!({"name": "f__progress", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}});
    let (done, before) = old.ask(3, "tools/call", params).await;
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("done"),
        "{done}"
    );
    let progress: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2, "{before:?}");
    assert!(
        progress.iter().all(|m| m["params"]["progressToken"] == "p"),
        "{progress:?}"
    );
    // The upstream asks mid-call; the client answers with a POST.
    let ask = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "f__ask", "arguments": {"question": "2+2?"}}});
    assert_eq!(old.post(&ask).await.status, 202);
    let q = loop {
        let m = old.stream.next().await;
        if m["method"] == "sampling/createMessage" {
            break m;
        }
    };
    let answer = json!({"jsonrpc": "2.0", "id": q["id"], "result": {"role": "assistant",
        "model": "m", "content": {"type": "text", "text": "four"}}});
    assert_eq!(old.post(&answer).await.status, 202);
    let fin = loop {
        let m = old.stream.next().await;
        if m["id"] == 4 {
            break m;
        }
    };
    assert!(fin.to_string().contains("four"), "{fin}");
    // Policy: a tool alice may not call is an error on the stream.
    let (denied, _) = old
        .ask(
            5,
            "tools/call",
            json!({"name": "f__whoami", "arguments": {}}),
        )
        .await;
    assert!(
        denied["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Unknown tool"),
        "{denied}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_need_the_streams_own_client_and_a_well_formed_message() {
    let gw = gateway("", "").await;
    let addr = gw.local_addr();
    // No credentials: 401, with the challenge, for both routes.
    let r = request_at("GET", &format!("http://{addr}/sse"), &[], "").await;
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").is_some());
    let mut old = Old::open(addr, ALICE).await;
    old.initialize("2025-06-18").await;
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    let r = request_at("POST", &old.messages, &[], &ping.to_string()).await;
    assert_eq!(r.status, 401);
    // Another client's token: as for an unknown session.
    let r = old.post_as(&format!("Bearer {BOB}"), &ping).await;
    assert_eq!((r.status, r.error_code()), (404, Some(-32600)), "{}", r.raw);
    let (base, _) = old.messages.split_once('?').unwrap();
    let h = [("authorization", old.auth.as_str())];
    let unknown = format!("{base}?sessionId=edge.{}", "0".repeat(36));
    let r = request_at("POST", &unknown, &h, &ping.to_string()).await;
    assert_eq!(r.status, 404, "{}", r.raw);
    let r = request_at("POST", base, &h, &ping.to_string()).await;
    assert_eq!(r.status, 400, "{}", r.raw);
    assert!(r.raw.contains("sessionId"), "{}", r.raw);
    // Not JSON; a batch (the transport has none).
    let r = request_at("POST", &old.messages, &h, "{nope").await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32700)), "{}", r.raw);
    let batch = json!([ping, ping]);
    let r = old.post(&batch).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32600)), "{}", r.raw);
    // Wrong methods name what each path takes.
    let r = request_at("GET", &old.messages, &h, "").await;
    assert_eq!((r.status, r.header("allow")), (405, Some("POST, OPTIONS")));
    let r = request_at("POST", &format!("http://{addr}/sse"), &h, "{}").await;
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, OPTIONS")));
    let r = request_at("OPTIONS", &old.messages, &[], "").await;
    assert_eq!((r.status, r.header("allow")), (204, Some("POST, OPTIONS")));
    // Nothing of that reached the stream; the session still answers.
    let (pong, before) = old.ask(10, "ping", json!({})).await;
    assert_eq!(
        (pong["result"].clone(), before.len()),
        (json!({}), 0),
        "{before:?}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_ends_with_its_stream_and_is_counted() {
    prometheus();
    let gw = gateway("", "").await;
    let closed = read(SESSIONS_EVICTED, "reason=\"closed\"");
    let mut old = Old::open(gw.local_addr(), ALICE).await;
    old.initialize("2025-11-25").await;
    assert!(sse_sessions() >= 1.0);
    let Old {
        stream,
        messages,
        auth,
    } = old;
    drop(stream);
    let ended = || async { read(SESSIONS_EVICTED, "reason=\"closed\"") > closed };
    eventually(
        "the session ends with its stream",
        Duration::from_secs(10),
        ended,
    )
    .await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let r = request_at(
        "POST",
        &messages,
        &[("authorization", &auth)],
        &ping.to_string(),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.raw);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_per_session_are_bounded_and_counted() {
    prometheus();
    let gw = gateway("", "").await;
    let mut old = Old::open(gw.local_addr(), ALICE).await;
    old.initialize("2025-11-25").await;
    let before = read(REFUSED, "limit=\"sse_session_calls\"");
    let per_session = mcp_edge::limits::SSE_CALLS_PER_SESSION;
    for id in 0..per_session {
        let slow = json!({"jsonrpc": "2.0", "id": 100 + id, "method": "tools/call",
            "params": {"name": "f__slow_echo", "arguments": {"text": "z", "ms": 60_000}}});
        assert_eq!(old.post(&slow).await.status, 202);
    }
    // One more: still 202 (a client's POST writer may take any other
    // status as its session's end), refused on the stream, counted.
    let (refused, _) = old.ask(1, "ping", json!({})).await;
    assert_eq!(refused["error"]["code"], -31011, "{refused}");
    let data = &refused["error"]["data"];
    assert_eq!(
        (data["limit"].as_str(), data["retryAfterSeconds"].as_u64()),
        (Some("sse_session_calls"), Some(1)),
        "{refused}"
    );
    assert!(read(REFUSED, "limit=\"sse_session_calls\"") >= before + 1.0);
    // Answers and notifications still go through: a cancellation frees a place.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 100, "reason": "enough"}});
    assert_eq!(old.post(&cancel).await.status, 202);
    let cancelled = old.stream.next().await;
    assert_eq!(
        (cancelled["id"].clone(), cancelled["error"]["code"].clone()),
        (json!(100), json!(-32800)),
        "{cancelled}"
    );
    let (pong, _) = old.ask(2, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}), "a place is free again: {pong}");
    // Its notifications are its stream's only: no GET stream on /mcp.
    let h = [
        ("mcp-session-id", old.session()),
        ("authorization", old.auth.as_str()),
    ];
    let r = request_at("GET", &format!("http://{}/mcp", gw.local_addr()), &h, "").await;
    assert_eq!(r.status, 429, "{}", r.raw);
    drop(old); // its calls end with it
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_applies_to_each_request() {
    // alice: 3 per hour (the stream, initialize, one more).
    let gw = gateway("rate = \"3/h\"", "").await;
    let mut old = Old::open(gw.local_addr(), ALICE).await;
    old.initialize("2025-11-25").await;
    let (ok, _) = old.ask(1, "ping", json!({})).await;
    assert_eq!(ok["result"], json!({}), "{ok}");
    let (limited, _) = old.ask(2, "ping", json!({})).await;
    assert_eq!(limited["error"]["code"], -31008, "{limited}");
    assert!(
        limited["error"]["data"]["retryAfterSeconds"].as_u64() > Some(1),
        "{limited}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_take_places_in_the_one_session_table() {
    prometheus();
    let gw = gateway("", "session_capacity = 1").await;
    let addr = gw.local_addr();
    let mut old = Old::open(addr, ALICE).await;
    old.initialize("2025-11-25").await;
    // The one place is alice's, and not idle: her second stream is refused
    // (she holds her share of the table).
    let before = read(REFUSED, "limit=\"session_share\"");
    let h = [("authorization", old.auth.as_str())];
    let r = request_at("GET", &format!("http://{addr}/sse"), &h, "").await;
    assert_eq!((r.status, r.error_code()), (503, Some(-31004)), "{}", r.raw);
    assert!(r.header("retry-after").is_some());
    assert!(r.raw.contains("session_share"), "{}", r.raw);
    assert!(read(REFUSED, "limit=\"session_share\"") >= before + 1.0);
    // bob, under his share, takes it (as for any session): alice's stream ends.
    let mut bob = Old::open(addr, BOB).await;
    bob.initialize("2025-11-25").await;
    let end = tokio::time::timeout(Duration::from_secs(10), old.stream.recv()).await;
    assert!(matches!(end, Ok(None)), "alice's stream ended: {end:?}");
    let (pong, _) = bob.ask(1, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}), "{pong}");
    gw.shutdown().await;
}

/// A real 2024-era client: the Python SDK 1.30's `sse_client`, with a
/// token, lists, calls (with progress) and is asked for a sampling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_sse_client_works_through_mcp_edge() {
    let gw = gateway("", "").await;
    let url = format!("http://{}/sse", gw.local_addr());
    let calls = r#"[{"name": "f__echo", "arguments": {"text": "old"}},
        {"name": "f__progress", "arguments": {"steps": 2}, "progress": true},
        {"name": "f__ask", "arguments": {"question": "2+2?"}}]"#;
    let out =
        peers::run_client_with_env(ClientKind::V1, &url, calls, &[("CLIENT_TOKEN", ALICE)]).await;
    assert_eq!(out["transport"], "sse", "{out}");
    let tools = out["tools"].as_array().unwrap();
    assert!(
        tools.contains(&json!("f__echo")) && !tools.contains(&json!("f__whoami")),
        "{out}"
    );
    assert_eq!(peers::call_text(&out, 0), "f:old");
    assert_eq!(
        out["calls"][1]["progress"].as_array().map(Vec::len),
        Some(2),
        "{out}"
    );
    let said = peers::call_text(&out, 2);
    assert!(
        said.starts_with("client said: canned sampling reply"),
        "{said}"
    );
    assert_eq!(out["asked"][0]["method"], "sampling/createMessage", "{out}");
    gw.shutdown().await;
}

/// `mcp-remote --transport sse-only` (0.15.1), the stdio bridge many
/// desktop clients run, with a token: it lists and calls through mcp-edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_remote_sse_only_works_through_mcp_edge() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let gw = gateway("", "").await;
    let url = format!("http://{}/sse", gw.local_addr());
    let home = tempfile::tempdir().unwrap();
    let auth = format!("Authorization: Bearer {ALICE}");
    let mut child = tokio::process::Command::new("node")
        .arg(peers::mcp_remote_js())
        .args([
            url.as_str(),
            "--transport",
            "sse-only",
            "--header",
            auth.as_str(),
        ])
        .env("MCP_REMOTE_CONFIG_DIR", home.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs mcp-remote");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answer = async |msg: Value| {
        let line = format!("{msg}\n");
        stdin.write_all(line.as_bytes()).await.unwrap();
        let Some(id) = msg.get("id").cloned() else {
            return Value::Null;
        };
        loop {
            let next = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
            let line = next
                .expect("mcp-remote answers within 30 s")
                .unwrap()
                .expect("a line");
            let m: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if m["id"] == id {
                return m;
            }
        }
    };
    let init = answer(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "desk", "version": "1"}}})).await;
    assert_eq!(init["result"]["serverInfo"]["name"], "mcp-edge", "{init}");
    answer(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let list = answer(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    let tools = list["result"]["tools"].as_array().expect("tools");
    assert!(tools.iter().any(|t| t["name"] == "f__echo"), "{list}");
    let called = answer(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "f__echo", "arguments": {"text": "remote"}}}))
    .await;
    assert_eq!(content_text(&called), Some("f:remote"), "{called}");
    drop(child);
    gw.shutdown().await;
}

/// Reads `body` until `needle` has come; what came.
async fn read_until(body: &mut mcp_edge::downstream::Body, needle: &str) -> String {
    use http_body_util::BodyExt;
    let mut text = String::new();
    while !text.contains(needle) {
        let frame = body.frame().await.expect("the stream is open").unwrap();
        text.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap());
    }
    text
}

/// A request to the endpoint without a socket (virtual time).
async fn handled(
    gw: &mcp_edge::gateway::Gateway,
    req: http::Request<String>,
) -> http::Response<mcp_edge::downstream::Body> {
    let req = req.map(|b| http_body_util::Full::new(bytes::Bytes::from(b)));
    mcp_edge::downstream::endpoint::handle(gw.app().clone(), req).await
}

/// This transport's session lives as long as its stream (its connection):
/// past `session_idle_timeout` without a request it still answers, where a
/// streamable-HTTP session is gone.
#[tokio::test(start_paused = true)]
async fn an_open_stream_keeps_its_session_where_an_idle_one_expires() {
    let gw = start(
        "session_idle_timeout = \"10s\"",
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let get = http::Request::get("/sse").header("host", "127.0.0.1");
    let mut stream = handled(&gw, get.body(String::new()).unwrap())
        .await
        .into_body();
    let first = read_until(&mut stream, "\n\n").await;
    let at = first.find("/messages?").expect("the endpoint event");
    let path = first[at..].trim_end().to_string();
    let post = |body: Value| {
        let req = http::Request::post(path.as_str()).header("host", "127.0.0.1");
        handled(&gw, req.body(body.to_string()).unwrap())
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "o", "version": "1"}}});
    assert_eq!(post(init.clone()).await.status(), 202);
    read_until(&mut stream, "\"id\":0").await;
    let mcp = http::Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    let r = handled(&gw, mcp.body(init.to_string()).unwrap()).await;
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    tokio::time::advance(Duration::from_secs(25)).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let mcp = http::Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("mcp-session-id", sid.as_str())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    let expired = handled(&gw, mcp.body(ping.to_string()).unwrap()).await;
    assert_eq!(
        expired.status(),
        404,
        "the idle streamable-HTTP session expired"
    );
    assert_eq!(post(ping).await.status(), 202);
    let answered = read_until(&mut stream, "\"id\":1").await;
    assert!(answered.contains("\"result\":{}"), "{answered}");
    drop(stream);
    gw.shutdown().await;
}
