//! The per-request service of a connection and the `/mcp` endpoint: POST
//! for both eras, GET and DELETE handed to [`super::session_verbs`]; the
//! head admitted, the request received
//! on its connection ([`super::receiving`]; a body not received whole is
//! answered here), batches, one message admitted, checked in its era and
//! routed ([`one`]), and the framing of what it produced.

use super::admission::{self, Entry, Head};
use super::app::{App, Body, Peer, Who};
use super::reply::{refuse, Refusal};
use super::reply::{Answer, Outcome};
use super::{message, receiving, reply, session_verbs, sse_transport};
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
            if let "/mcp" | sse_transport::SSE_PATH | sse_transport::MESSAGES_PATH =
                req.uri().path()
            {
                return Ok(handle(app, req).await);
            }
            // Marked like any request: busy while answered.
            let receiving = !hyper::body::Body::is_end_stream(req.body());
            let Ok(busy) = conn_of(&req).enter(receiving, None) else {
                return Ok(closed());
            };
            Ok(unmark(Some(busy), elsewhere(&app, &req)))
        }
    })
}

/// A request for another path than the MCP endpoints: `GET /readyz` and
/// `GET /healthz` as on the admin listener, for a balancer or a kubelet
/// that cannot reach the loopback-only admin listener (no credentials, no
/// `Host` check: they tell nothing but a word), else 404.
fn elsewhere<B>(app: &App, req: &Request<B>) -> Response<Body> {
    let text = |status, body: &'static str| {
        let mut r = Response::new(reply::full(bytes::Bytes::from_static(body.as_bytes())));
        *r.status_mut() = status;
        let plain = http::HeaderValue::from_static("text/plain");
        r.headers_mut().insert(http::header::CONTENT_TYPE, plain);
        r
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/readyz") => {
            let (status, why) = app.readiness();
            text(status, why)
        }
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
        (_, path) => {
            let e = format!("no such path {path}; the MCP endpoint is /mcp (/sse for the 2024-11-05 HTTP+SSE transport)");
            reply::json(StatusCode::NOT_FOUND, &json!({ "error": e }))
        }
    }
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
    // Counted from the door: shutdown sets `stopping` (which admission
    // reads) before it waits for this count, so a request either is
    // refused at the door or is waited for ([`App::begin_stopping`]).
    let door = app.clone();
    let _door = door.in_flight.enter();
    let entry = admission::head(&app, &req);
    let origin = req.headers().get(http::header::ORIGIN).cloned();
    let tracker = req.extensions().get::<receiving::Tracker>().cloned();
    let (busy, mut resp) = match entry {
        Ok(Entry::Request(head)) if req.method() == Method::POST => {
            let claim = Some((head.who.access.shares(), head.who.owner()));
            let until = Instant::now() + crate::limits::BODY_READ_TIMEOUT;
            let bounds = (app.server.max_body_bytes, until);
            match receiving::receive(tracker.as_ref(), claim, req, bounds).await {
                Ok(r) => (r.busy, posted(app, r.parts, r.body, head).await),
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
                Ok(Entry::Preflight) => {
                    let methods = match req.uri().path() {
                        "/mcp" => reply::MCP_METHODS,
                        path => sse_transport::methods(path),
                    };
                    reply::preflight(req.headers(), methods)
                }
                Ok(Entry::Request(head)) => match (req.method(), req.uri().path()) {
                    (&Method::GET, "/mcp") => session_verbs::get(app, &head, req.headers()).await,
                    (&Method::DELETE, "/mcp") => session_verbs::delete(app, &head),
                    (&Method::GET, sse_transport::SSE_PATH) => sse_transport::open(app, &head),
                    (_, "/mcp") => reply::method_not_allowed(),
                    (_, path) => sse_transport::method_not_allowed(path),
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

/// A POST received whole: on `/mcp` ([`post`]), or a message of the
/// HTTP+SSE transport ([`sse_transport::message`]; `POST /sse` is 405).
async fn posted(
    app: Arc<App>,
    parts: http::request::Parts,
    body: bytes::Bytes,
    head: Head,
) -> Response<Body> {
    match parts.uri.path() {
        "/mcp" => post(app, parts.headers, body, head).await,
        sse_transport::MESSAGES_PATH => {
            sse_transport::message(&app, parts.uri.query(), parts.headers, body, head).await
        }
        path => sse_transport::method_not_allowed(path),
    }
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
    match message::one(&app, &head, &headers, msg, media.sse, bytes.len()).await {
        Ok(Outcome::Accepted) => reply::empty(StatusCode::ACCEPTED),
        Ok(Outcome::Answer(Answer {
            response,
            session,
            status,
        })) => reply::answer(status, response, session, sse),
        Ok(Outcome::Stream(r)) => r,
        Ok(Outcome::Relayed(rx, call)) => reply::relay_stream(rx, call, app.server.keepalive),
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
    match message::one(app, head, h, m, false, size).await {
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
