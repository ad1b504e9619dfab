//! The per-request service of a connection and the `/mcp` endpoint: POST
//! for both eras, GET and DELETE handed to [`super::session_verbs`]; the
//! head admitted, the request received
//! on its connection ([`super::receiving`]; a body not received whole is
//! answered here), batches, one message admitted, checked in its era and
//! routed ([`one`]), and the framing of what it produced.

use super::admission::{self, admit, Admitted, Call, Entry, Head, SessionOp};
use super::app::{App, Body, Peer, Who};
use super::reply::{refuse, Refusal};
use super::reply::{Answer, Outcome};
use super::{answered_here, modern, receiving, reply, session_verbs};
use crate::protocol::envelope::Body as Parsed;
use crate::protocol::{self, Message, ProtocolVersion, RpcError};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::time::Instant;

/// The per-request service of one connection (hyper calls it for each
/// request the connection's task reads, [`super::accept`]): the request
/// gets its [`Peer`] and the connection's tracker; `/mcp` is [`handle`]d,
/// any other path is a 404 naming it.
pub(super) fn service(
    app: Arc<App>,
    peer: Peer,
    conn: receiving::Tracker,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<Response<Body>, Infallible>> + Send,
> {
    let peer = Arc::new(peer);
    hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(Peer::clone(&peer));
        req.extensions_mut().insert(conn.clone());
        let app = app.clone();
        async move {
            if req.uri().path() == "/mcp" {
                return Ok(handle(app, req).await);
            }
            // Marked like any request: busy while answered.
            let receiving = !hyper::body::Body::is_end_stream(req.body());
            let Ok(busy) = conn_of(&req).enter(receiving, None) else {
                return Ok(closed());
            };
            let path = req.uri().path();
            let e = format!("no such path {path}; the MCP endpoint is /mcp");
            let resp = reply::json(StatusCode::NOT_FOUND, &json!({ "error": e }));
            Ok(unmark(Some(busy), resp))
        }
    })
}

/// The connection's tracker [`service`] put on a request.
fn conn_of<B>(req: &Request<B>) -> &receiving::Tracker {
    req.extensions()
        .get::<receiving::Tracker>()
        .expect("set by service")
}

/// The 503 of a request on a connection the table closed meanwhile to
/// admit a newer one.
fn closed() -> Response<Body> {
    reply::closing(
        StatusCode::SERVICE_UNAVAILABLE,
        "connection closed to admit a newer one; retry",
    )
}

/// Entry point for every request on `/mcp`: its head
/// ([`admission::head`]: 400, 403, 401), then the connection layer's step
/// ([`receiving::receive`] for a POST: the request marked on its connection
/// and claimed for the caller's client — 503 naming `connection_share`
/// when the client holds its share —, its body read within its limits;
/// [`receiving::Tracker::enter`] for the rest), then POST, GET, DELETE, or an
/// OPTIONS CORS preflight; every answer to an allowed `Origin` carries the
/// CORS response headers ([`reply::allow_origin`]), and keeps the
/// connection busy until hyper has taken all of it. Generic over the
/// request body so tests and benchmarks can drive the endpoint without a
/// socket (`Request<Full<Bytes>>`, no connection to mark); the listener
/// passes hyper's `Incoming`.
pub async fn handle<B>(app: Arc<App>, req: Request<B>) -> Response<Body>
where
    B: hyper::body::Body<Data = bytes::Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let entry = admission::head(&app, &req);
    let origin = req.headers().get(http::header::ORIGIN).cloned();
    let tracker = req.extensions().get::<receiving::Tracker>().cloned();
    let (busy, mut resp) = match entry {
        Ok(Entry::Request(head)) if req.method() == Method::POST => {
            let claim = Some((head.who.access.shares(), head.who.owner()));
            let until = Instant::now() + crate::limits::BODY_READ_TIMEOUT;
            let bounds = (app.server.max_body_bytes, until);
            match receiving::receive(tracker.as_ref(), claim, req, bounds).await {
                Ok(r) => (r.busy, post(app, r.parts.headers, r.body, head).await),
                Err((_, receiving::NotReceived::NotBegun(e))) => {
                    return not_begun(&app, &head.who, e, origin)
                }
                Err((busy, why)) => (busy, not_received(why, &app)),
            }
        }
        entry => {
            let claim = match &entry {
                Ok(Entry::Request(head)) => Some((head.who.access.shares(), head.who.owner())),
                _ => None,
            };
            let receiving = !req.body().is_end_stream();
            let busy = match tracker.map(|t| t.enter(receiving, claim)) {
                None => None,
                Some(Ok(busy)) => Some(busy),
                Some(Err(e)) => {
                    let Ok(Entry::Request(head)) = &entry else {
                        return closed();
                    };
                    return not_begun(&app, &head.who, e, origin);
                }
            };
            let resp = match entry {
                // Refused before its origin was found allowed: no CORS headers.
                Err(refused) => return unmark(busy, refused),
                Ok(Entry::Unauthorized(refused)) => refused,
                Ok(Entry::Preflight) => reply::preflight(req.headers()),
                Ok(Entry::Request(head)) => match *req.method() {
                    Method::GET => session_verbs::get(app, &head, req.headers()).await,
                    Method::DELETE => session_verbs::delete(app, &head),
                    _ => reply::method_not_allowed(),
                },
            };
            (busy, resp)
        }
    };
    if let Some(origin) = origin {
        reply::allow_origin(&mut resp, origin);
    }
    unmark(busy, resp)
}

/// Answered: the connection stays busy until hyper has taken the whole
/// response body.
fn unmark(busy: Option<receiving::Busy>, resp: Response<Body>) -> Response<Body> {
    match busy {
        Some(busy) => resp.map(|b| busy.hold(b).boxed_unsync()),
        None => resp,
    }
}

/// The 503 of a request that could not begin on its connection: closed
/// meanwhile by the table, or its client at its share (with the CORS
/// headers of an allowed origin, as every answer after the head's checks).
fn not_begun(
    app: &App,
    who: &Who,
    e: receiving::NotBegun,
    origin: Option<HeaderValue>,
) -> Response<Body> {
    match e {
        receiving::NotBegun::Closed => closed(),
        receiving::NotBegun::OverShare(e) => {
            let mut refused = over_share(app, who, e);
            if let Some(origin) = origin {
                reply::allow_origin(&mut refused, origin);
            }
            refused
        }
    }
}

/// The 503 of a request whose client holds its share of the connections
/// (counted as `connection_share`); the connection ends with it.
fn over_share(app: &App, who: &Who, e: receiving::ShareRefusal) -> Response<Body> {
    crate::metrics::refused("connection_share");
    if let Some(skipped) = app.refusal_log.allow(Instant::now()) {
        tracing::info!(client = who.name(), skipped, "503: {e}");
    }
    let err = RpcError::new(protocol::CONNECTIONS_FULL, e.to_string())
        .with_data(json!({"retryAfterSeconds": 1, "limit": "connection_share"}));
    let mut r = Refusal(StatusCode::SERVICE_UNAVAILABLE, err).into_response(Value::Null);
    // The body was not read: say the connection ends (RFC 9112 §9.6).
    let h = r.headers_mut();
    h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// What a request whose body was not received whole is answered: 413
/// over `server.max_body_bytes` (counted as `body_bytes`; the connection
/// closes), 408 past `limits::BODY_READ_TIMEOUT` (`body_read_time`), 400
/// when it could not be read.
fn not_received(why: receiving::NotReceived, app: &App) -> Response<Body> {
    let limit = app.server.max_body_bytes;
    let refused = match why {
        receiving::NotReceived::NotBegun(_) => unreachable!("answered by not_begun"),
        receiving::NotReceived::TooLarge => {
            crate::metrics::refused("body_bytes");
            let why = format!("Request body larger than {limit} bytes (server.max_body_bytes)");
            let mut resp = refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                protocol::INVALID_REQUEST,
                why,
            )
            .into_response(Value::Null);
            let close = HeaderValue::from_static("close");
            resp.headers_mut().insert(http::header::CONNECTION, close);
            return resp;
        }
        receiving::NotReceived::TimedOut => {
            crate::metrics::refused("body_read_time");
            let secs = crate::limits::BODY_READ_TIMEOUT.as_secs();
            let why = format!("Request body not received within {secs} s");
            refuse(StatusCode::REQUEST_TIMEOUT, protocol::INVALID_REQUEST, why)
        }
        receiving::NotReceived::Unreadable(e) => refuse(
            StatusCode::BAD_REQUEST,
            protocol::PARSE_ERROR,
            format!("Parse error: reading body: {e}"),
        ),
    };
    refused.into_response(Value::Null)
}

async fn post(
    app: Arc<App>,
    headers: HeaderMap,
    bytes: bytes::Bytes,
    head: Head,
) -> Response<Body> {
    let media = head.accept;
    let sse = media.sse_only();
    let msg = match protocol::envelope::parse(&bytes) {
        Ok(Parsed::One(Ok(m))) => m,
        Ok(Parsed::One(Err((id, e)))) => {
            return reply::json(StatusCode::BAD_REQUEST, &protocol::error_response(id, &e))
        }
        Ok(Parsed::Batch(items)) => return batch(&app, &headers, items, sse, &head).await,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                protocol::PARSE_ERROR,
                format!("Parse error: {e}"),
            )
            .into_response(Value::Null)
        }
    };
    match one(&app, &head, &headers, msg, media.sse, bytes.len()).await {
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

async fn batch(
    app: &Arc<App>,
    h: &HeaderMap,
    items: Vec<Value>,
    sse: bool,
    head: &Head,
) -> Response<Body> {
    let _held = match batch_session(app, head) {
        Ok(held) => held,
        Err(refused) => return refused,
    };
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
        out.extend(batch_item(app, h, item, head).await);
    }
    if out.is_empty() {
        return reply::empty(StatusCode::ACCEPTED);
    }
    reply::answer(StatusCode::OK, Value::Array(out).into(), None, sse)
}

/// One message of a batch: its answer, if it gets one. Each request is
/// admitted on its own (over the rate: that error in its place).
async fn batch_item(app: &Arc<App>, h: &HeaderMap, item: Value, head: &Head) -> Option<Value> {
    let size = match app.audit {
        Some(_) => super::call::json_len(&item),
        None => 0,
    };
    let m = match protocol::classify(item) {
        Err((id, e)) => return Some(protocol::error_response(id, &e)),
        Ok(m) => m,
    };
    if let Message::Request { id, method, .. } = &m {
        if method == "initialize" {
            let e = RpcError::new(
                protocol::INVALID_REQUEST,
                "Invalid Request: initialize must not be part of a batch",
            );
            return Some(protocol::error_response(id.clone(), &e));
        }
    }
    match one(app, head, h, m, false, size).await {
        Ok(Outcome::Answer(a)) => Some(a.response.into_value()),
        Ok(_) => None,
        Err((id, r)) => Some(protocol::error_response(id, &r.1)),
    }
}

/// A batch's session: it must exist and speak 2025-03-26, the one revision
/// with JSON-RPC batches (removed in 2025-06-18).
fn batch_session(app: &Arc<App>, head: &Head) -> Result<super::sessions::Held, Response<Body>> {
    let not_here = || {
        refuse(
            StatusCode::BAD_REQUEST,
            protocol::INVALID_REQUEST,
            "Invalid Request: JSON-RPC batches are accepted only in 2025-03-26 sessions",
        )
        .into_response(Value::Null)
    };
    let Ok(Some(sid)) = head.session() else {
        return Err(not_here());
    };
    // Held for the batch's length: its session stays busy while it runs.
    match app.sessions.enter(sid, head.who.owner(), None) {
        Err(_) => Err(refuse(
            StatusCode::NOT_FOUND,
            protocol::INVALID_REQUEST,
            "Session not found",
        )
        .into_response(Value::Null)),
        Ok(held) if held.seen.version != ProtocolVersion::V2025_03_26 => Err(not_here()),
        Ok(held) => Ok(held),
    }
}

/// Methods whose upstream may send request-scoped notifications or
/// server→client requests while working.
fn relayable(method: &str) -> bool {
    matches!(
        method,
        "tools/call" | "prompts/get" | "resources/read" | "completion/complete"
    )
}

/// A client's answer to a request relayed from an upstream: back to that upstream.
async fn relayed_answer(app: &App, head: &Head, id: Value, outcome: Result<Value, RpcError>) {
    let Some((up, slot, generation)) = crate::relay::parse_downstream_id(&id) else {
        return; // not ours
    };
    let session = head.own_session(app).map(|s| s.to_header());
    let (Some(upstream), Some(session)) = (app.router.by_id(up), session) else {
        return;
    };
    if !upstream
        .answer_relayed(slot, generation, &session, outcome)
        .await
    {
        tracing::info!(upstream = %upstream.name(), "dropped an answer to an unknown or expired relayed request");
    }
}

/// Serves one message: a client's answer to a relayed request, a
/// notification, or a request: admitted ([`admit`]), checked in its era,
/// then routed ([`Call::route`]).
pub(super) async fn one(
    app: &Arc<App>,
    head: &Head,
    h: &HeaderMap,
    msg: Message,
    stream_ok: bool,
    request_bytes: usize,
) -> Result<Outcome, (Value, Refusal)> {
    let request = match msg {
        Message::Response { id, outcome } => {
            relayed_answer(app, head, id, outcome).await;
            return Ok(Outcome::Accepted);
        }
        Message::Notification { method, params } => {
            notification(app, head, &method, params.as_ref());
            return Ok(Outcome::Accepted);
        }
        Message::Request { id, method, params } => (id, method, params),
    };
    let call = match admit(app, head, h, request, request_bytes)? {
        Admitted::Call(call) => call,
        Admitted::Initialize(who, id, params) => {
            return answered_here::initialize(app, id, params.as_ref(), &who).map(Outcome::Answer)
        }
    };
    if call.caller.modern() {
        modern_checks(app, h, &call)?;
    }
    match call.route(stream_ok) {
        Route::Listen => call.listen(app, stream_ok).await,
        Route::Session(SessionOp::SetLevel) => Ok(Outcome::Answer(call.set_level(app))),
        Route::Session(SessionOp::Subscription) => {
            Ok(Outcome::Answer(call.subscription(app).await))
        }
        Route::Relayed => Ok(call.relayed(app).await),
        Route::Modern => Ok(super::rounds::serve(app, call, stream_ok).await),
        Route::Plain => Ok(Outcome::Answer(call.serve(app, None).await)),
    }
}

/// `notifications/initialized` marks the session; `notifications/cancelled`
/// drops the legacy request it names. Others are accepted and dropped.
fn notification(app: &App, head: &Head, method: &str, params: Option<&Value>) {
    match method {
        "notifications/initialized" => {
            if let Some(id) = head.own_session(app) {
                app.sessions.mark_initialized(&id);
            }
        }
        "notifications/cancelled" => {
            let request = params.and_then(|p| p.get("requestId"));
            if let (Some(sid), Some(request)) = (head.own_session(app), request) {
                app.sessions.cancel(sid, request);
                // A call whose stream waits to be resumed is not polled:
                // dropped here, which cancels it upstream.
                drop(app.resumes.cancelled(&sid, &request.to_string()));
            }
        }
        _ => {}
    }
}

/// A modern request's own checks: a method 2026-07-28 removed (404,
/// [`modern::removed`]), then its `_meta` and headers
/// ([`modern::validate`]) and its `Mcp-Param-*` headers (400); a refusal
/// is audited ([`super::call::refused`]).
fn modern_checks(app: &App, h: &HeaderMap, call: &Call) -> Result<(), (Value, Refusal)> {
    let (method, params, who) = (call.method.as_str(), call.params.as_ref(), &call.caller.who);
    let checked = modern::removed(method)
        .map_err(|e| Refusal(StatusCode::NOT_FOUND, e))
        .and_then(|()| {
            modern::validate(h, method, params)
                .and_then(|()| modern::check_param_headers(app, h, method, params, who.policy()))
                .map_err(|e| Refusal(StatusCode::BAD_REQUEST, e))
        });
    checked.map_err(|r| {
        let bytes = call.request_bytes;
        super::call::refused(app, &call.id, method, params, who, bytes, &r.1);
        (call.id.clone(), r)
    })
}

/// Which handler of [`Call`] serves a request.
enum Route {
    Listen,
    Session(SessionOp),
    Relayed,
    Modern,
    Plain,
}

impl Call {
    /// The dispatch table: methods mcp-edge answers itself in this era,
    /// then a relayed call (SSE, when the client takes a stream), then a
    /// plain one. (Decided here, awaited by the caller: one async layer
    /// less in every connection's future.)
    fn route(&self, stream_ok: bool) -> Route {
        if let Some(op) = self.from_session {
            return Route::Session(op);
        }
        let legacy = !self.caller.modern();
        match self.method.as_str() {
            "subscriptions/listen" if !legacy => Route::Listen,
            // A modern call's head waits for its outcome; its upstream's
            // requests become MRTR rounds (super::rounds).
            m if !legacy && relayable(m) => Route::Modern,
            m if stream_ok && relayable(m) => Route::Relayed,
            _ => Route::Plain,
        }
    }
}
