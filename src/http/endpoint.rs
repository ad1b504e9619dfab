//! The `/mcp` endpoint: POST, GET and DELETE for both eras.
//!
//! Era per request (`../shared/spec/2026-07-28/versioning.mdx` §Backward
//! Compatibility, "A dual-era server selects its behavior from how the client
//! opens"): `initialize` opens a legacy session; a request carrying modern
//! `_meta` (or a non-legacy `MCP-Protocol-Version`) is served statelessly;
//! anything else is legacy and needs its `Mcp-Session-Id`
//! (`../shared/spec/2025-11-25/transports.mdx` §Session Management).

use super::{modern, reply, App, Body};
use crate::protocol::{self, Message, ProtocolVersion, RpcError};
use crate::session::{SessionError, SessionId};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::time::Instant;

/// How one POSTed message is served.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Era {
    /// In a legacy session with this negotiated version.
    Legacy(SessionId, ProtocolVersion),
    /// Modern, stateless.
    Modern,
}

/// An HTTP-level refusal: status plus JSON-RPC error (id null).
struct Refusal(StatusCode, RpcError);

fn refuse(status: StatusCode, code: i64, msg: impl Into<String>) -> Refusal {
    Refusal(status, RpcError::new(code, msg))
}

impl Refusal {
    /// The HTTP answer; an error whose `data.retryAfterSeconds` is set also
    /// gets a `Retry-After` header (RFC 9110 §10.2.3).
    fn into_response(self, id: Value) -> Response<Body> {
        let retry = self
            .1
            .data
            .as_ref()
            .and_then(|d| d.get("retryAfterSeconds"))
            .and_then(Value::as_u64);
        let mut r = reply::json(self.0, &protocol::error_response(id, &self.1));
        if let Some(secs) = retry {
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, secs.into());
        }
        r
    }
}

/// Entry point for every request on `/mcp`: the Origin/Host check (403),
/// then POST, GET, DELETE, or an OPTIONS CORS preflight; every answer to an
/// allowed `Origin` carries the CORS response headers
/// ([`reply::allow_origin`]). Generic over the request body so tests and
/// benchmarks can drive the endpoint without a socket
/// (`Request<Full<Bytes>>`); the listener passes hyper's `Incoming`.
pub async fn handle<B>(app: Arc<App>, req: Request<B>) -> Response<Body>
where
    B: hyper::body::Body<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if let Err(why) = app.origin.check(req.headers()) {
        metrics::counter!(crate::metrics::FORBIDDEN).increment(1);
        tracing::info!("403: {why}");
        return refuse(
            StatusCode::FORBIDDEN,
            protocol::INVALID_REQUEST,
            format!("Forbidden: {why}"),
        )
        .into_response(Value::Null);
    }
    let origin = req.headers().get(http::header::ORIGIN).cloned();
    let mut resp = match *req.method() {
        Method::POST => post(app, req).await,
        Method::GET => get(app, req.headers()),
        Method::DELETE => delete(app, req.headers()),
        Method::OPTIONS => reply::preflight(req.headers()),
        _ => reply::method_not_allowed(),
    };
    if let Some(origin) = origin {
        reply::allow_origin(&mut resp, origin);
    }
    resp
}

fn session_header(h: &HeaderMap) -> Result<Option<SessionId>, Refusal> {
    match h.get("mcp-session-id") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(SessionId::parse)
            .map(Some)
            .ok_or_else(|| {
                refuse(
                    StatusCode::NOT_FOUND,
                    protocol::INVALID_REQUEST,
                    "Session not found",
                )
            }),
    }
}

fn get(app: Arc<App>, h: &HeaderMap) -> Response<Body> {
    let id = match session_header(h) {
        Err(r) => return r.into_response(Value::Null),
        Ok(None) => return reply::method_not_allowed(),
        Ok(Some(id)) => id,
    };
    // A place in the shared pool first, so a full pool costs the session nothing.
    let place = match app.streams.take() {
        Ok(p) => p,
        Err((status, e)) => return Refusal(status, e).into_response(Value::Null),
    };
    let opened = app.sessions.lock().expect("sessions").open_stream(
        &id,
        Instant::now(),
        crate::limits::MAX_STREAMS_PER_SESSION,
    );
    match opened {
        Ok(_) => reply::session_stream(app.clone(), id, place),
        Err(e @ SessionError::TooManyStreams { .. }) => refuse(
            StatusCode::TOO_MANY_REQUESTS,
            protocol::INVALID_REQUEST,
            e.to_string(),
        )
        .into_response(Value::Null),
        Err(_) => refuse(
            StatusCode::NOT_FOUND,
            protocol::INVALID_REQUEST,
            "Session not found",
        )
        .into_response(Value::Null),
    }
}

fn delete(app: Arc<App>, h: &HeaderMap) -> Response<Body> {
    match session_header(h) {
        Err(r) => r.into_response(Value::Null),
        Ok(None) => reply::method_not_allowed(),
        Ok(Some(id)) => {
            let mut t = app.sessions.lock().expect("sessions");
            if t.remove(&id) {
                metrics::gauge!(crate::metrics::SESSIONS_ACTIVE).set(t.len() as f64);
                drop(t);
                // Everything the session owned goes now: its GET streams end,
                // its relayed requests are forgotten.
                app.sessions_changed.notify_waiters();
                let header = id.to_header();
                for up in app.router.upstreams().iter() {
                    up.forget_session(&header);
                }
                app.subscriptions
                    .remove_subscriber(crate::subscriptions::Subscriber::Session(id));
                reply::empty(StatusCode::OK)
            } else {
                refuse(
                    StatusCode::NOT_FOUND,
                    protocol::INVALID_REQUEST,
                    "Session not found",
                )
                .into_response(Value::Null)
            }
        }
    }
}

async fn read_body<B>(app: &App, req: Request<B>) -> Result<(HeaderMap, bytes::Bytes), Refusal>
where
    B: hyper::body::Body<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let limit = app.server.max_body_bytes;
    let too_big = || {
        metrics::counter!(crate::metrics::REFUSED, "limit" => "body_bytes").increment(1);
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            protocol::INVALID_REQUEST,
            format!("Request body larger than {limit} bytes (server.max_body_bytes)"),
        )
    };
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_big());
    }
    let (parts, body) = req.into_parts();
    let collected = tokio::time::timeout(
        crate::limits::BODY_READ_TIMEOUT,
        http_body_util::Limited::new(body, limit).collect(),
    )
    .await
    .map_err(|_| {
        metrics::counter!(crate::metrics::REFUSED, "limit" => "body_read_time").increment(1);
        refuse(
            StatusCode::REQUEST_TIMEOUT,
            protocol::INVALID_REQUEST,
            format!(
                "Request body not received within {} s",
                crate::limits::BODY_READ_TIMEOUT.as_secs()
            ),
        )
    })?;
    let bytes = collected
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                too_big()
            } else {
                refuse(
                    StatusCode::BAD_REQUEST,
                    protocol::PARSE_ERROR,
                    format!("Parse error: reading body: {e}"),
                )
            }
        })?
        .to_bytes();
    Ok((parts.headers, bytes))
}

async fn post<B>(app: Arc<App>, req: Request<B>) -> Response<Body>
where
    B: hyper::body::Body<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (headers, bytes) = match read_body(&app, req).await {
        Ok(x) => x,
        Err(r) => return r.into_response(Value::Null),
    };
    let sse = reply::wants_sse(&headers);
    let body: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                protocol::PARSE_ERROR,
                format!("Parse error: {e}"),
            )
            .into_response(Value::Null)
        }
    };
    if let Value::Array(items) = body {
        return batch(&app, &headers, items, sse).await;
    }
    let msg = match protocol::classify(body) {
        Ok(m) => m,
        Err((id, e)) => {
            return reply::json(StatusCode::BAD_REQUEST, &protocol::error_response(id, &e))
        }
    };
    match one(&app, &headers, msg, reply::accepts_sse(&headers)).await {
        Ok(Outcome::Accepted) => reply::empty(StatusCode::ACCEPTED),
        Ok(Outcome::Answer(Answer {
            response,
            session,
            status,
        })) => reply::answer(status, response, session, sse),
        Ok(Outcome::Stream(r)) => r,
        Err((id, r)) => r.into_response(id),
    }
}

/// What one POSTed message produced.
enum Outcome {
    /// A notification or response: 202 without body.
    Accepted,
    /// A complete JSON-RPC response.
    Answer(Answer),
    /// An SSE stream relaying the upstream's messages, then the response.
    Stream(Response<Body>),
}

/// Methods whose upstream may send request-scoped notifications or
/// server→client requests while working.
fn relayable(method: &str) -> bool {
    matches!(
        method,
        "tools/call" | "prompts/get" | "resources/read" | "completion/complete"
    )
}

/// What one request produced: the JSON-RPC response, the HTTP status and, for
/// `initialize`, the new session id.
struct Answer {
    response: Value,
    status: StatusCode,
    session: Option<SessionId>,
}

fn decide_era(
    app: &App,
    h: &HeaderMap,
    method: &str,
    params: Option<&Value>,
) -> Result<Era, Refusal> {
    let header_version = h.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    let meta_version =
        protocol::params_meta(params).and_then(|m| m.get(protocol::META_PROTOCOL_VERSION));
    let legacy_header = header_version
        .and_then(ProtocolVersion::parse)
        .is_some_and(|v| v.is_legacy());
    // A modern request ignores any Mcp-Session-Id (2026-07-28 is
    // stateless), well-formed or not.
    let has_session = h.contains_key("mcp-session-id");
    if meta_version.is_some() || (header_version.is_some() && !legacy_header && !has_session) {
        return Ok(Era::Modern);
    }
    let session = session_header(h)?;
    let Some(id) = session else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            protocol::INVALID_REQUEST,
            format!("Bad Request: {method} needs an Mcp-Session-Id (send initialize first) or modern _meta"),
        ));
    };
    // 2025-11-25 transports.mdx §Protocol Version Header: absent → 2025-03-26; unsupported → 400.
    if let Some(hv) = header_version {
        if !legacy_header {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                protocol::INVALID_REQUEST,
                format!("Bad Request: unsupported MCP-Protocol-Version {hv:?} in a legacy session"),
            ));
        }
    }
    match app
        .sessions
        .lock()
        .expect("sessions")
        .touch(&id, Instant::now())
    {
        Ok(s) => Ok(Era::Legacy(id, s.version)),
        Err(_) => Err(refuse(
            StatusCode::NOT_FOUND,
            protocol::INVALID_REQUEST,
            "Session not found",
        )),
    }
}

/// Status and framing of a finished call (-32601 on the modern path is 404:
/// transports-streamable-http.mdx §Protocol Version Header).
fn finish(id: Value, method: &str, era: Era, outcome: Result<Value, RpcError>) -> Answer {
    let label = crate::metrics::method_label(method);
    let status = match &outcome {
        Err(e) if era == Era::Modern && e.code == protocol::METHOD_NOT_FOUND => {
            StatusCode::NOT_FOUND
        }
        _ => StatusCode::OK,
    };
    metrics::counter!(crate::metrics::REQUESTS, "method" => label, "outcome" => if outcome.is_ok() { "ok" } else { "error" }).increment(1);
    let response = match outcome {
        Ok(r) if era == Era::Modern => protocol::result_response(id, modern::decorate(method, r)),
        Ok(r) => protocol::result_response(id, r),
        Err(e) => protocol::error_response(id, &e),
    };
    Answer {
        response,
        status,
        session: None,
    }
}

/// Records the request's duration in `mcp_edge_request_duration_seconds{method}`.
fn observe(method: &str, t0: Instant) {
    metrics::histogram!(crate::metrics::REQUEST_DURATION, "method" => crate::metrics::method_label(method))
        .record(t0.elapsed().as_secs_f64());
}

/// A client's answer to a request relayed from an upstream: back to that upstream.
async fn relayed_answer(app: &App, h: &HeaderMap, id: Value, outcome: Result<Value, RpcError>) {
    let Some((up, slot, generation)) = crate::upstream::relay::parse_downstream_id(&id) else {
        return; // not ours
    };
    let session = h.get("mcp-session-id").and_then(|v| v.to_str().ok());
    let (Some(upstream), Some(session)) = (app.router.by_id(up), session) else {
        return;
    };
    if !upstream
        .answer_relayed(slot, generation, session, outcome)
        .await
    {
        tracing::info!(upstream = %upstream.name(), "dropped an answer to an unknown or expired relayed request");
    }
}

async fn one(
    app: &Arc<App>,
    h: &HeaderMap,
    msg: Message,
    stream_ok: bool,
) -> Result<Outcome, (Value, Refusal)> {
    match msg {
        Message::Response { id, outcome } => {
            relayed_answer(app, h, id, outcome).await;
            Ok(Outcome::Accepted)
        }
        Message::Notification { method, params } => {
            if method == "notifications/initialized" {
                if let Ok(Some(id)) = session_header(h) {
                    app.sessions.lock().expect("sessions").mark_initialized(&id);
                }
            } else if method == "notifications/cancelled" {
                let request = params.as_ref().and_then(|p| p.get("requestId"));
                if let (Ok(Some(sid)), Some(request)) = (session_header(h), request) {
                    app.cancels.cancel(sid, request);
                }
            }
            Ok(Outcome::Accepted)
        }
        Message::Request { id, method, params } => {
            if method == "initialize" {
                return initialize(app, id, params.as_ref()).map(Outcome::Answer);
            }
            let era = decide_era(app, h, &method, params.as_ref()).map_err(|r| (id.clone(), r))?;
            if era == Era::Modern {
                if let Err(e) = modern::validate(h, &method, params.as_ref()) {
                    return Err((id, Refusal(StatusCode::BAD_REQUEST, e)));
                }
                if let Err(e) = check_param_headers(app, h, &method, params.as_ref()) {
                    return Err((id, Refusal(StatusCode::BAD_REQUEST, e)));
                }
            }
            let modern = era == Era::Modern;
            if modern && method == "subscriptions/listen" {
                let opened = super::listen::open(app, id.clone(), params.as_ref(), stream_ok).await;
                metrics::counter!(crate::metrics::REQUESTS, "method" => "subscriptions/listen",
                    "outcome" => if opened.is_ok() { "ok" } else { "error" })
                .increment(1);
                return match opened {
                    Ok(stream) => Ok(Outcome::Stream(stream)),
                    // A bad filter is an ordinary JSON-RPC error, framed as the client asked.
                    Err((StatusCode::OK, e)) => Ok(Outcome::Answer(Answer {
                        response: protocol::error_response(id, &e),
                        status: StatusCode::OK,
                        session: None,
                    })),
                    Err((status, e)) => Err((id, Refusal(status, e))),
                };
            }
            if let (Era::Legacy(sid, _), "logging/setLevel") = (&era, method.as_str()) {
                // Kept per session and applied to the log messages relayed to
                // it (the upstreams are shared, so their own level is not set).
                let level = params
                    .as_ref()
                    .and_then(|p| p.get("level"))
                    .and_then(Value::as_str);
                let outcome = match level.and_then(crate::upstream::relay::log_rank) {
                    Some(rank) => {
                        app.sessions
                            .lock()
                            .expect("sessions")
                            .set_log_floor(sid, rank as u8);
                        Ok(json!({}))
                    }
                    None => Err(RpcError::new(
                        protocol::INVALID_PARAMS,
                        format!(
                            "params.level must be one of {}",
                            crate::upstream::relay::LOG_LEVELS.join(", ")
                        ),
                    )),
                };
                return Ok(Outcome::Answer(finish(id, &method, era, outcome)));
            }
            if let (Era::Legacy(sid, _), "resources/subscribe" | "resources/unsubscribe") =
                (&era, method.as_str())
            {
                let _busy = app.in_flight.enter();
                let t0 = Instant::now();
                let who = crate::subscriptions::Subscriber::Session(*sid);
                let outcome = app
                    .resource_subscription(who, &method, params.as_ref())
                    .await;
                observe(&method, t0);
                return Ok(Outcome::Answer(finish(id, &method, era, outcome)));
            }
            if stream_ok && relayable(&method) {
                let session = match era {
                    Era::Legacy(sid, _) => Some(sid.to_header()),
                    Era::Modern => None,
                };
                let (relay, rx) =
                    crate::upstream::relay::Relay::new(session, app.server.sse_queue_depth);
                let relay = if let Era::Legacy(sid, _) = &era {
                    // The session's logging/setLevel.
                    let floor = app
                        .sessions
                        .lock()
                        .expect("sessions")
                        .peek(sid, Instant::now())
                        .map_or(0, |s| s.log_floor);
                    relay.with_log_floor(Some(usize::from(floor)))
                } else if modern {
                    // Log messages only when asked for, and from that level up.
                    let floor = protocol::params_meta(params.as_ref())
                        .and_then(|m| m.get("io.modelcontextprotocol/logLevel"))
                        .and_then(Value::as_str)
                        .and_then(crate::upstream::relay::log_rank);
                    relay.with_log_floor(floor)
                } else {
                    relay
                };
                let keepalive = app.server.keepalive;
                let app = app.clone();
                let cancel = match &era {
                    Era::Legacy(sid, _) => Some(app.cancels.register(*sid, &id)),
                    Era::Modern => None,
                };
                let fut = async move {
                    let _busy = app.in_flight.enter();
                    let t0 = Instant::now();
                    let call = app.call(&method, params, modern, Some(relay));
                    let outcome = match cancel {
                        Some((_registered, cancelled)) => {
                            super::cancel::cancellable(call, cancelled).await
                        }
                        None => call.await,
                    };
                    observe(&method, t0);
                    finish(id, &method, era, outcome).response
                };
                return Ok(Outcome::Stream(reply::relay_stream(rx, fut, keepalive)));
            }
            let _busy = app.in_flight.enter();
            let t0 = Instant::now();
            let call = app.call(&method, params, modern, None);
            let outcome = match &era {
                Era::Legacy(sid, _) => {
                    let (_registered, cancelled) = app.cancels.register(*sid, &id);
                    super::cancel::cancellable(call, cancelled).await
                }
                Era::Modern => call.await,
            };
            observe(&method, t0);
            Ok(Outcome::Answer(finish(id, &method, era, outcome)))
        }
    }
}

/// A modern `tools/call`'s `Mcp-Param-*` headers against its arguments,
/// for a tool whose `inputSchema` annotates parameters with `x-mcp-header`
/// (2026-07-28 transports-streamable-http.mdx §Server Validation). Errors:
/// `-32020` naming the header.
fn check_param_headers(
    app: &App,
    h: &HeaderMap,
    method: &str,
    params: Option<&Value>,
) -> Result<(), RpcError> {
    if method != "tools/call" {
        return Ok(());
    }
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Ok(());
    };
    let annotated = app.router.param_headers(name);
    if annotated.is_empty() {
        return Ok(());
    }
    let args = params.and_then(|p| p.get("arguments"));
    crate::protocol::param_headers::check(&annotated, args, |n| {
        h.get(format!("mcp-param-{n}").as_str())
            .and_then(|v| v.to_str().ok())
    })
    .map_err(|m| RpcError::new(protocol::HEADER_MISMATCH, m))
}

/// `initialize`: version negotiation and a new session
/// (`../shared/spec/2025-11-25/lifecycle.mdx` §Version Negotiation).
fn initialize(app: &App, id: Value, params: Option<&Value>) -> Result<Answer, (Value, Refusal)> {
    let asked = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let Some(asked) = asked else {
        return Ok(Answer {
            response: protocol::error_response(
                id,
                &RpcError::new(
                    protocol::INVALID_PARAMS,
                    "Invalid params: initialize needs params.protocolVersion",
                ),
            ),
            status: StatusCode::OK,
            session: None,
        });
    };
    let version = match ProtocolVersion::parse(asked) {
        Some(v) if v.is_legacy() => v,
        _ => ProtocolVersion::LATEST_LEGACY,
    };
    let mut table = app.sessions.lock().expect("sessions");
    let sid = match table.insert(version, Instant::now()) {
        Ok(s) => s,
        Err(e @ SessionError::Full { retry_after, .. }) => {
            let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            let r = RpcError::new(protocol::SESSIONS_FULL, e.to_string())
                .with_data(json!({"retryAfterSeconds": secs}));
            return Err((id, Refusal(StatusCode::SERVICE_UNAVAILABLE, r)));
        }
        Err(e) => {
            return Err((
                id,
                refuse(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    protocol::INTERNAL_ERROR,
                    e.to_string(),
                ),
            ))
        }
    };
    metrics::gauge!(crate::metrics::SESSIONS_ACTIVE).set(table.len() as f64);
    drop(table);
    metrics::counter!(crate::metrics::REQUESTS, "method" => "initialize", "outcome" => "ok")
        .increment(1);
    let result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": App::capabilities(),
        "serverInfo": App::server_info(),
        "instructions": app.instructions(),
    });
    Ok(Answer {
        response: protocol::result_response(id, result),
        status: StatusCode::OK,
        session: Some(sid),
    })
}

async fn batch(app: &Arc<App>, h: &HeaderMap, items: Vec<Value>, sse: bool) -> Response<Body> {
    // JSON-RPC batches exist only in 2025-03-26 (removed in 2025-06-18).
    let sid = match session_header(h) {
        Ok(Some(id)) => id,
        Ok(None) | Err(_) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                protocol::INVALID_REQUEST,
                "Invalid Request: JSON-RPC batches are accepted only in 2025-03-26 sessions",
            )
            .into_response(Value::Null)
        }
    };
    let version = app
        .sessions
        .lock()
        .expect("sessions")
        .touch(&sid, Instant::now());
    match version {
        Err(_) => {
            return refuse(
                StatusCode::NOT_FOUND,
                protocol::INVALID_REQUEST,
                "Session not found",
            )
            .into_response(Value::Null)
        }
        Ok(s) if s.version != ProtocolVersion::V2025_03_26 => {
            return refuse(
                StatusCode::BAD_REQUEST,
                protocol::INVALID_REQUEST,
                "Invalid Request: JSON-RPC batches are accepted only in 2025-03-26 sessions",
            )
            .into_response(Value::Null)
        }
        Ok(_) => {}
    }
    if items.is_empty() {
        return refuse(
            StatusCode::BAD_REQUEST,
            protocol::INVALID_REQUEST,
            "Invalid Request: empty batch",
        )
        .into_response(Value::Null);
    }
    let mut out = Vec::new();
    for item in items {
        let answer = match protocol::classify(item) {
            Err((id, e)) => Some(protocol::error_response(id, &e)),
            Ok(Message::Request { id, method, .. }) if method == "initialize" => {
                Some(protocol::error_response(
                    id,
                    &RpcError::new(
                        protocol::INVALID_REQUEST,
                        "Invalid Request: initialize must not be part of a batch",
                    ),
                ))
            }
            Ok(m) => match one(app, h, m, false).await {
                Ok(Outcome::Answer(a)) => Some(a.response),
                Ok(_) => None,
                Err((id, r)) => Some(protocol::error_response(id, &r.1)),
            },
        };
        out.extend(answer);
    }
    if out.is_empty() {
        return reply::empty(StatusCode::ACCEPTED);
    }
    reply::answer(StatusCode::OK, Value::Array(out), None, sse)
}
