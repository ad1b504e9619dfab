//! The scriptable streamable-HTTP upstream of the supervisor tests: a small
//! hyper server on a loopback port that answers as its [`Mode`] says
//! (401, 429 with Retry-After, a legacy server with sessions, with or
//! without a GET stream, a tool that never answers, a tool `interview`
//! that asks the client things over its SSE answer) and records every
//! request it saw. Reached as `support::scripted`.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How the scriptable HTTP upstream answers.
#[derive(Clone, Copy, PartialEq)]
pub enum Mode {
    /// 401 with a challenge, always.
    Unauthorized,
    /// 429 with `Retry-After: 120` (or the HTTP-date form) for the first request, then a legacy server.
    TooManyThen { http_date: bool },
    /// A legacy (2025-11-25) server with sessions (any number, each with
    /// the capabilities its `initialize` declared; [`Upstream::restart`]
    /// ends them all). `interview` asks only what its session declared.
    Legacy,
    /// [`Mode::Legacy`] that also offers a GET stream, which sends one
    /// `notifications/tools/list_changed` and ends.
    LegacyGet,
    /// [`Mode::Legacy`] with one session at most, as the TypeScript SDK's
    /// single transport: a second `initialize` gets 400 "Server already
    /// initialized" while one is live.
    LegacySingle,
    /// [`Mode::Legacy`] whose second `initialize` (only) fails with a
    /// plain 500, as during a restart.
    LegacyFlaky,
    /// A modern (2026-07-28) server: `server/discover`, no sessions, no
    /// listen stream (404 + -32601).
    Modern,
    /// A dual-era server: [`Mode::Modern`] to requests that carry
    /// `MCP-Protocol-Version: 2026-07-28`, [`Mode::Legacy`] in the
    /// sessions `initialize` opens. Its `interview`, called in the modern
    /// era, still asks with JSON-RPC requests on its SSE answer (as a
    /// 2025-era SDK's tool code does on any transport), but an answer
    /// POSTed without a session is refused (400): a stateless request has
    /// nowhere to take it.
    Dual,
    /// [`Mode::Dual`] whose `notifications/initialized` fails (500): the
    /// legacy session `initialize` opened is never completed.
    DualHalf,
}

impl Mode {
    fn dual(self) -> bool {
        matches!(self, Mode::Dual | Mode::DualHalf)
    }
}

pub struct Upstream {
    pub mode: Mode,
    pub requests: Mutex<Vec<(Instant, String)>>,
    /// Live sessions: id → the client capabilities its `initialize` declared.
    pub sessions: Mutex<std::collections::HashMap<String, Value>>,
    /// Every `initialize`'s declared capabilities, in order.
    pub initialized: Mutex<Vec<Value>>,
    /// The session id of every GET stream asked for ("" without one).
    pub gets: Mutex<Vec<String>>,
    pub generation: AtomicUsize,
    /// Ids of `tools/call` requests, and `requestId`s of `notifications/cancelled`
    /// with the session each came in.
    pub calls: Mutex<Vec<Value>>,
    pub cancelled: Mutex<Vec<(Value, String)>>,
    /// Every `Authorization` header value received.
    pub authorizations: Mutex<Vec<String>>,
    /// Server→client requests of `interview` calls awaiting the client's
    /// answer, by the session they were asked in and their id: an answer
    /// in another session (or none) does not reach them.
    pub waiting: Mutex<std::collections::HashMap<String, tokio::sync::oneshot::Sender<Value>>>,
    /// Errors the client answered `interview`'s requests with.
    pub refused: Mutex<Vec<String>>,
    /// `interview` calls whose SSE stream the client closed before the end.
    pub abandoned: AtomicUsize,
    /// Connections open now.
    pub connections: AtomicUsize,
    /// Every request's method (`DELETE`, `GET`, or a POST's JSON-RPC
    /// method) with the `MCP-Protocol-Version` it carried.
    pub versions: Mutex<Vec<(String, Option<String>)>>,
    /// The `Last-Event-ID` of every GET that carried one.
    pub resumed: Mutex<Vec<(Instant, String)>>,
    /// The JSON-RPC id of a `polled` call whose stream was closed after
    /// its priming event, answered when the stream is resumed.
    pub polled: Mutex<Option<Value>>,
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

impl Upstream {
    /// The server restarts: every session is unknown (404) from now on.
    pub fn restart(&self) {
        self.sessions.lock().unwrap().clear();
    }

    /// What session `sid` declared, if it is live.
    fn declared(&self, sid: Option<&str>) -> Option<Value> {
        self.sessions.lock().unwrap().get(sid?).cloned()
    }

    /// Session ids of DELETE requests received.
    pub fn deleted(&self) -> usize {
        (self.requests.lock().unwrap().iter())
            .filter(|(_, m)| m == "DELETE")
            .count()
    }
}

/// Serves one request: a legacy POST of `tools/call` `interview` (its answer
/// an SSE stream that asks `elicitation/create`, then `sampling/createMessage`,
/// then `roots/list`, each once the previous answer was POSTed back, then
/// the result: the answers as a JSON text) and the client's answers to its
/// requests; everything else as [`answer`] says.
async fn serve(
    u: Arc<Upstream>,
    req: http::Request<Incoming>,
) -> Result<http::Response<Body>, std::convert::Infallible> {
    let (head, body) = req.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let msg: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let sid = head
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok());
    let declared = u.declared(sid);
    let modern = u.mode.dual()
        && (head.headers.get("mcp-protocol-version")).is_some_and(|v| v == "2026-07-28");
    let declared = match modern {
        true => Some(msg["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"].clone()),
        false => declared,
    };
    let answer_posted =
        msg.get("method").is_none() && (msg.get("result").is_some() || msg.get("error").is_some());
    if modern && answer_posted {
        // A stateless server has no session to route a client's answer to:
        // 2026-07-28 has no client→server responses.
        let refusal = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
            "message": "Invalid Request: no responses in 2026-07-28"}});
        let mut r = http::Response::new(Full::new(Bytes::from(refusal.to_string())).boxed());
        *r.status_mut() = http::StatusCode::BAD_REQUEST;
        return Ok(r);
    }
    if head.method == http::Method::POST && declared.is_some() {
        if answer_posted {
            let id = msg["id"].as_str().unwrap_or("").to_string();
            let key = format!("{}/{id}", sid.unwrap_or(""));
            if let Some(tx) = u.waiting.lock().unwrap().remove(&key) {
                let _ = tx.send(msg);
                let mut r = http::Response::new(Full::new(Bytes::new()).boxed());
                *r.status_mut() = http::StatusCode::ACCEPTED;
                return Ok(r);
            }
        }
        if msg["method"] == "tools/call" && msg["params"]["name"] == "interview" {
            let asked_in = sid.filter(|_| !modern).unwrap_or("").to_string();
            return Ok(interview(u, msg, declared.unwrap_or_default(), asked_in));
        }
    }
    let req = http::Request::from_parts(head, Full::new(bytes));
    answer(u, req).await.map(|r| r.map(BodyExt::boxed))
}

/// The SSE answer of an `interview` call (see [`serve`]): it asks what its
/// session declared (`caps`) and skips the rest, as a careful server does.
fn interview(u: Arc<Upstream>, msg: Value, caps: Value, sid: String) -> http::Response<Body> {
    let id = msg["id"].clone();
    let rounds = msg["params"]["arguments"]["rounds"].as_u64().unwrap_or(3) as usize;
    u.requests
        .lock()
        .unwrap()
        .push((Instant::now(), "tools/call".into()));
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let event = |v: &Value| Bytes::from(format!("event: message\ndata: {v}\n\n"));
    tokio::spawn(async move {
        let asks = [
            (
                "elicitation/create",
                json!({"message": "Your name?", "requestedSchema": {"type": "object",
                "properties": {"name": {"type": "string"}}, "required": ["name"]}}),
            ),
            (
                "sampling/createMessage",
                json!({"messages": [{"role": "user",
                "content": {"type": "text", "text": "2+2?"}}], "maxTokens": 10}),
            ),
            ("roots/list", json!({})),
        ];
        let mut got = Vec::new();
        // elicitation/create needs "elicitation", sampling/… "sampling", roots/… "roots".
        let declared = |m: &str| caps.get(m.split('/').next().unwrap_or("")).is_some();
        let asks = asks.into_iter().take(rounds).filter(|(m, _)| declared(m));
        for (i, (method, params)) in asks.enumerate() {
            let rid = format!("iv-{id}-{i}");
            let (atx, arx) = tokio::sync::oneshot::channel();
            let key = format!("{sid}/{rid}");
            u.waiting.lock().unwrap().insert(key.clone(), atx);
            let ask = json!({"jsonrpc": "2.0", "id": rid, "method": method, "params": params});
            if tx.send(event(&ask)).await.is_err() {
                u.abandoned.fetch_add(1, Ordering::SeqCst);
                return;
            }
            // The answer first: it is in before the gateway closes the stream.
            let reply = tokio::select! {
                biased;
                r = arx => r.unwrap_or(Value::Null),
                _ = tx.closed() => {
                    u.waiting.lock().unwrap().remove(&key);
                    u.abandoned.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            };
            if let Some(e) = reply.get("error") {
                u.refused
                    .lock()
                    .unwrap()
                    .push(format!("{method}: {}", e["message"]));
                let text = format!("refused at {method}");
                let fin = json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}});
                let _ = tx.send(event(&fin)).await;
                return;
            }
            got.push(reply["result"].clone());
        }
        let text = Value::Array(got).to_string();
        let fin = json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}});
        let _ = tx.send(event(&fin)).await;
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok(hyper::body::Frame::data(b)), rx))
    });
    let mut r = http::Response::new(http_body_util::StreamBody::new(stream).boxed());
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    r
}

async fn answer(
    u: Arc<Upstream>,
    req: http::Request<Full<Bytes>>,
) -> Result<http::Response<Full<Bytes>>, std::convert::Infallible> {
    if let Some(a) = req.headers().get(http::header::AUTHORIZATION) {
        let seen = String::from_utf8_lossy(a.as_bytes()).into_owned();
        u.authorizations.lock().unwrap().push(seen);
    }
    let version = (req.headers().get("mcp-protocol-version"))
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if req.method() != http::Method::POST {
        let verb = req.method().to_string();
        u.versions.lock().unwrap().push((verb, version.clone()));
    }
    if req.method() == http::Method::DELETE {
        u.requests
            .lock()
            .unwrap()
            .push((Instant::now(), "DELETE".into()));
        if let Some(sid) = req.headers().get("mcp-session-id") {
            u.sessions.lock().unwrap().remove(sid.to_str().unwrap());
        }
        return Ok(http::Response::new(Full::new(Bytes::new())));
    }
    if req.method() == http::Method::GET {
        u.requests
            .lock()
            .unwrap()
            .push((Instant::now(), "GET".into()));
        let sid = req.headers().get("mcp-session-id");
        let sid = sid.map_or("", |v| v.to_str().unwrap_or("?"));
        u.gets.lock().unwrap().push(sid.to_string());
        // A `polled` call's stream resumed after its priming event: the
        // response, on a stream of its own event ids.
        if let Some(last) = req.headers().get("last-event-id") {
            let last = last.to_str().unwrap_or("?").to_string();
            (u.resumed.lock().unwrap()).push((Instant::now(), last.clone()));
            let id = u.polled.lock().unwrap().take();
            if let (Some(id), "p1") = (id, last.as_str()) {
                let done = json!({"jsonrpc": "2.0", "id": id,
                    "result": {"content": [{"type": "text", "text": "polled"}]}});
                return Ok(typed(
                    format!("id: p2\ndata: {done}\n\n"),
                    "text/event-stream",
                ));
            }
            // A `polled_forever` stream: resumed, it closes again at once
            // with nothing new.
            if last == "f1" {
                return Ok(typed("retry: 1\n\n", "text/event-stream"));
            }
        }
        if u.mode != Mode::LegacyGet {
            let mut r = http::Response::new(Full::new(Bytes::new()));
            *r.status_mut() = http::StatusCode::METHOD_NOT_ALLOWED;
            return Ok(r);
        }
        let event =
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n";
        let mut r = http::Response::new(Full::new(Bytes::from(event)));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        return Ok(r);
    }
    let sid_in = req
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let body: Value = serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes())
        .unwrap_or(Value::Null);
    let method = body["method"].as_str().unwrap_or("").to_string();
    let verb = if method.is_empty() {
        "(answer)"
    } else {
        &method
    };
    u.versions
        .lock()
        .unwrap()
        .push((verb.to_string(), version.clone()));
    let n = {
        let mut r = u.requests.lock().unwrap();
        r.push((Instant::now(), method.clone()));
        r.len()
    };
    let resp = |status: u16, v: Value| {
        let mut r = http::Response::new(Full::new(Bytes::from(v.to_string())));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        r
    };
    match u.mode {
        Mode::Unauthorized => {
            let mut r = resp(401, json!({"error": "unauthorized"}));
            r.headers_mut().insert(
                "www-authenticate",
                "Bearer realm=\"secret-realm\"".parse().unwrap(),
            );
            return Ok(r);
        }
        Mode::TooManyThen { http_date } if n == 1 => {
            let mut r = resp(429, json!({"error": "slow down"}));
            let v = if http_date {
                httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(120))
            } else {
                "120".to_string()
            };
            r.headers_mut().insert("retry-after", v.parse().unwrap());
            return Ok(r);
        }
        _ => {}
    }
    let id = body["id"].clone();
    let ok = |result: Value| resp(200, json!({"jsonrpc": "2.0", "id": id, "result": result}));
    let modern =
        u.mode == Mode::Modern || (u.mode.dual() && version.as_deref() == Some("2026-07-28"));
    Ok(match method.as_str() {
        "server/discover" if modern => ok(json!({
            "supportedVersions": if u.mode.dual() { json!(["2026-07-28", "2025-11-25"]) } else { json!(["2026-07-28"]) },
            "capabilities": {"tools": {}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "scripted", "version": "1"}}})),
        "subscriptions/listen" if modern => resp(
            404,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
        ),
        "server/discover" => resp(
            400,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
        ),
        "initialize" if u.mode == Mode::LegacySingle && !u.sessions.lock().unwrap().is_empty() => {
            u.initialized
                .lock()
                .unwrap()
                .push(body["params"]["capabilities"].clone());
            resp(
                400,
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600,
                    "message": "Invalid Request: Server already initialized"}}),
            )
        }
        "initialize" if u.mode == Mode::LegacyFlaky && u.initialized.lock().unwrap().len() == 1 => {
            u.initialized
                .lock()
                .unwrap()
                .push(body["params"]["capabilities"].clone());
            let mut r = http::Response::new(Full::new(Bytes::from("restarting")));
            *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
            r
        }
        "initialize" => {
            let sid = format!("s{}", u.generation.fetch_add(1, Ordering::SeqCst));
            let caps = body["params"]["capabilities"].clone();
            u.initialized.lock().unwrap().push(caps.clone());
            u.sessions.lock().unwrap().insert(sid.clone(), caps);
            let mut r = ok(
                json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "scripted", "version": "1"}}),
            );
            r.headers_mut()
                .insert("mcp-session-id", sid.parse().unwrap());
            r
        }
        _ if !modern && u.declared(sid_in.as_deref()).is_none() => {
            resp(404, json!({"error": "unknown session"}))
        }
        "" => resp(202, Value::Null),
        "notifications/initialized" if u.mode == Mode::DualHalf => {
            let mut r = http::Response::new(Full::new(Bytes::from("restarting")));
            *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
            r
        }
        "notifications/cancelled" => {
            u.cancelled.lock().unwrap().push((
                body["params"]["requestId"].clone(),
                sid_in.unwrap_or_default(),
            ));
            resp(202, Value::Null)
        }
        m if m.starts_with("notifications/") => resp(202, Value::Null),
        "tools/call" if body["params"]["name"] == "hang" => {
            u.calls.lock().unwrap().push(id.clone());
            // not ordering: a tool that never answers (the test's premise)
            tokio::time::sleep(Duration::from_secs(3600)).await;
            ok(json!({"content": []}))
        }
        "ping" => ok(json!({})),
        // `tasks_only` is listed only to a modern request that declares
        // the tasks extension (SEP-2575: a listing may depend on the
        // request's declared capabilities).
        "tools/list" if modern && declares_tasks(&body) => {
            let mut all = tool_list();
            let tools = all["tools"].as_array_mut().unwrap();
            tools.push(json!({"name": "tasks_only", "inputSchema": {"type": "object"}}));
            ok(all)
        }
        "tools/list" => ok(tool_list()),
        // Primes its SSE answer with an event id and a retry of 0 ms (a
        // tight loop, were it obeyed as is), then closes
        // the stream: the client is to resume it (GET, `Last-Event-ID`).
        "tools/call" if body["params"]["name"] == "polled" => {
            *u.polled.lock().unwrap() = Some(id.clone());
            typed("id: p1\nretry: 0\ndata:\n\n", "text/event-stream")
        }
        // Primes its stream without a `retry`, and never answers: every
        // resumption closes at once (a server that keeps closing).
        "tools/call" if body["params"]["name"] == "polled_forever" => {
            typed("id: f1\ndata:\n\n", "text/event-stream")
        }
        // Like `polled`, but its stream cannot be resumed: the GET gets 405.
        "tools/call" if body["params"]["name"] == "polled_gone" => {
            typed("id: g1\nretry: 10\ndata:\n\n", "text/event-stream")
        }
        // Answers this one call with a body no client can read: two JSON
        // texts in one JSON body, or an HTML page (a proxy's error page).
        "tools/call" if body["params"]["name"] == "twice" => {
            let one = json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}});
            typed(format!("{one}{one}"), "application/json")
        }
        // A modern 404 (2026-07-28: the JSON-RPC error of a method not
        // found travels as 404): this call's error, not a session's end.
        "tools/call" if body["params"]["name"] == "unrouted" && modern => resp(
            404,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601,
                "message": "Method not found"}}),
        ),
        "tools/call" if body["params"]["name"] == "html" => {
            typed("<html><body>502 Bad Gateway</body></html>", "text/html")
        }
        // A text of `bytes` bytes, answered as JSON with its Content-Length.
        "tools/call" if body["params"]["name"] == "big" => {
            let n = body["params"]["arguments"]["bytes"].as_u64().unwrap_or(10);
            ok(json!({"content": [{"type": "text", "text": "x".repeat(n as usize)}]}))
        }
        "tools/call" if body["params"]["name"] == "header_mismatch" => resp(
            400,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32020,
                "message": "Header mismatch: Mcp-Name does not match params.name"}}),
        ),
        "tools/call" if body["params"]["name"] == "bad_params" => resp(
            200,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602,
                "message": "Invalid params: x must be a number", "data": {"field": "x"}}}),
        ),
        // One request's errors: a JSON-RPC error on an HTTP 400, and a
        // plain-text 400.
        "tools/call" if body["params"]["name"] == "needs_sampling" => resp(
            400,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32021,
                "message": "Missing required client capability",
                "data": {"requiredCapabilities": {"sampling": {}}}}}),
        ),
        "tools/call" if body["params"]["name"] == "bad_request" => {
            let mut r = http::Response::new(Full::new(Bytes::from("bad request")));
            *r.status_mut() = http::StatusCode::BAD_REQUEST;
            r
        }
        "tools/call" => {
            u.calls.lock().unwrap().push(id.clone());
            let from = sid_in.as_deref().unwrap_or("no session");
            ok(json!({"content": [{"type": "text", "text": format!("hello from {from}")}]}))
        }
        _ => ok(json!({})),
    })
}

/// The tools every listing names.
fn tool_list() -> Value {
    json!({"tools": [{"name": "hello", "inputSchema": {"type": "object"}},
        {"name": "hang", "inputSchema": {"type": "object"}},
        {"name": "needs_sampling", "inputSchema": {"type": "object"}},
        {"name": "bad_request", "inputSchema": {"type": "object"}},
        {"name": "header_mismatch", "inputSchema": {"type": "object"}},
        {"name": "bad_params", "inputSchema": {"type": "object"}},
        {"name": "interview", "inputSchema": {"type": "object"}},
        {"name": "twice", "inputSchema": {"type": "object"}},
        {"name": "polled", "inputSchema": {"type": "object"}},
        {"name": "polled_gone", "inputSchema": {"type": "object"}},
        {"name": "polled_forever", "inputSchema": {"type": "object"}},
        {"name": "html", "inputSchema": {"type": "object"}},
        {"name": "unrouted", "inputSchema": {"type": "object"}},
        {"name": "big", "inputSchema": {"type": "object"}}]})
}

/// Whether a request's `_meta` client capabilities declare the tasks extension.
fn declares_tasks(body: &Value) -> bool {
    let caps = &body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"];
    !caps["extensions"]["io.modelcontextprotocol/tasks"].is_null()
}

/// Starts the scripted upstream on a loopback port; returns it and its URL.
pub async fn scripted(mode: Mode) -> (Arc<Upstream>, String) {
    let u = Arc::new(Upstream {
        mode,
        requests: Mutex::new(Vec::new()),
        sessions: Mutex::new(Default::default()),
        initialized: Mutex::new(Vec::new()),
        gets: Mutex::new(Vec::new()),
        generation: 0.into(),
        calls: Mutex::new(Vec::new()),
        cancelled: Mutex::new(Vec::new()),
        authorizations: Mutex::new(Vec::new()),
        waiting: Mutex::new(Default::default()),
        refused: Mutex::new(Vec::new()),
        abandoned: 0.into(),
        connections: 0.into(),
        versions: Mutex::new(Vec::new()),
        resumed: Mutex::new(Vec::new()),
        polled: Mutex::new(None),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let u2 = u.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.unwrap();
            let u = u2.clone();
            tokio::spawn(async move {
                u.connections.fetch_add(1, Ordering::SeqCst);
                let u2 = u.clone();
                let svc = hyper::service::service_fn(move |r| serve(u2.clone(), r));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
                u.connections.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (u, url)
}

pub fn http_block(name: &str, url: &str, extra: &str) -> String {
    format!("[[upstream]]\nname = \"{name}\"\ntransport = \"http\"\nurl = \"{url}\"\n{extra}\n")
}

/// A 200 with `body` as `content_type`.
fn typed(body: impl Into<Bytes>, content_type: &'static str) -> http::Response<Full<Bytes>> {
    let mut r = http::Response::new(Full::new(body.into()));
    (r.headers_mut()).insert("content-type", http::HeaderValue::from_static(content_type));
    r
}
