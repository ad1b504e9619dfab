//! The `/mcp` endpoint: POST, GET and DELETE for both eras; the body read
//! within its limits, batches, and the framing of what one message
//! produced. Each message is served by [`super::request`].

use super::admission::Head;
use super::app::{App, Body};
use super::checks::HeadError;
use super::reply;
use super::reply::{refuse, Refusal};
use super::request::{one, Answer, Outcome};
use crate::protocol::envelope::Body as Parsed;
use crate::protocol::{self, Message, ProtocolVersion, RpcError};
use crate::session::SessionError;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use std::sync::Arc;
use tokio::time::Instant;

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
    match app.origin.check_head(req.headers(), req.uri()) {
        Ok(()) => {}
        Err(HeadError::Malformed { limit, why }) => {
            crate::metrics::refused(limit);
            if let Some(skipped) = app.refusal_log.allow(Instant::now()) {
                tracing::info!(skipped, "400: {why}");
            }
            let m = format!("Bad request: {why}");
            return refuse(StatusCode::BAD_REQUEST, protocol::INVALID_REQUEST, m)
                .into_response(Value::Null);
        }
        Err(HeadError::Forbidden(why)) => return forbidden(&app, &why),
    }
    let origin = req.headers().get(http::header::ORIGIN).cloned();
    let mut resp = if req.method() == Method::OPTIONS {
        // A CORS preflight carries no credentials (Fetch §CORS-preflight request).
        reply::preflight(req.headers())
    } else {
        match super::admission::head(&app, &req) {
            Err(refused) => refused,
            Ok(head) => match *req.method() {
                Method::POST => post(app, req, head).await,
                Method::GET => get(app, &head),
                Method::DELETE => delete(app, &head),
                _ => reply::method_not_allowed(),
            },
        }
    };
    if let Some(origin) = origin {
        reply::allow_origin(&mut resp, origin);
    }
    resp
}

/// The 403 of a `Host`, target authority or `Origin` not allowed.
fn forbidden(app: &App, why: &str) -> Response<Body> {
    metrics::counter!(crate::metrics::FORBIDDEN).increment(1);
    if let Some(skipped) = app.refusal_log.allow(Instant::now()) {
        tracing::info!(skipped, "403: {why}");
    }
    refuse(
        StatusCode::FORBIDDEN,
        protocol::INVALID_REQUEST,
        format!("Forbidden: {why}"),
    )
    .into_response(Value::Null)
}

/// A legacy session's GET stream: charged to the client's rate when it
/// opens (429), then a place in the stream pool under the client's share
/// (503), then the session's own bound (429).
fn get(app: Arc<App>, head: &Head) -> Response<Body> {
    let id = match head.session() {
        Err(r) => return r.into_response(Value::Null),
        Ok(None) => return reply::method_not_allowed(),
        Ok(Some(id)) => id,
    };
    let who = &head.who;
    if let Err(e) = super::admission::charge(&app, who) {
        return Refusal(StatusCode::TOO_MANY_REQUESTS, e).into_response(Value::Null);
    }
    // The session's own stream first (the owner checked, at most `max`, in
    // one lookup): only a live session of this client's may cost another
    // client a stream place; a refused place gives the session's back.
    let max = crate::limits::MAX_STREAMS_PER_SESSION;
    let held = match (app.sessions).open_stream(id, who.owner(), max) {
        Ok(held) => held,
        Err(e @ SessionError::TooManyStreams { .. }) => {
            return refuse(
                StatusCode::TOO_MANY_REQUESTS,
                protocol::INVALID_REQUEST,
                e.to_string(),
            )
            .into_response(Value::Null)
        }
        Err(_) => return super::admission::not_found().into_response(Value::Null),
    };
    match app.streams.take(who.access.shares(), who.owner()) {
        Ok(place) => reply::session_stream(app.clone(), held, place),
        Err((status, e)) => Refusal(status, e).into_response(Value::Null),
    }
}

fn delete(app: Arc<App>, head: &Head) -> Response<Body> {
    match head.session() {
        Err(r) => r.into_response(Value::Null),
        Ok(None) => reply::method_not_allowed(),
        Ok(Some(id)) => {
            // Everything the session owned goes now: its GET streams end,
            // its relayed requests and subscriptions are forgotten.
            if app.sessions.owner(&id) == Some(head.who.owner())
                && app.sessions.end(&id, crate::session::Removal::Deleted)
            {
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

/// The request's body, whole, within `server.max_body_bytes` and
/// `limits::BODY_READ_TIMEOUT`. A body over the limit (declared, or found
/// so while reading) gets 413 with `Connection: close`, after the rest of
/// it is read and discarded within bounds ([`discard`]) so that the client
/// can read the refusal.
async fn read_body<B>(
    app: &App,
    req: Request<B>,
) -> Result<(HeaderMap, bytes::Bytes), Response<Body>>
where
    B: hyper::body::Body<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let limit = app.server.max_body_bytes;
    let drain = crate::limits::REFUSED_BODY_DRAIN_BYTES.max(limit.saturating_mul(2));
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // A client that waits for `100 Continue` sends nothing unless asked:
    // its refusal goes out at once, the body never read.
    let waits = req.headers().contains_key(http::header::EXPECT);
    let (parts, body) = req.into_parts();
    let mut body = std::pin::pin!(body);
    if let Some(n) = declared.filter(|&n| n > limit as u64) {
        if !waits && n <= drain as u64 {
            discard(&mut body, drain).await;
        }
        return Err(too_large(limit));
    }
    let collected = tokio::time::timeout(
        crate::limits::BODY_READ_TIMEOUT,
        http_body_util::Limited::new(&mut body, limit).collect(),
    )
    .await
    .map_err(|_| {
        crate::metrics::refused("body_read_time");
        refuse(
            StatusCode::REQUEST_TIMEOUT,
            protocol::INVALID_REQUEST,
            format!(
                "Request body not received within {} s",
                crate::limits::BODY_READ_TIMEOUT.as_secs()
            ),
        )
        .into_response(Value::Null)
    })?;
    match collected {
        Ok(c) => Ok((parts.headers, c.to_bytes())),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            discard(&mut body, drain - limit).await;
            Err(too_large(limit))
        }
        Err(e) => Err(refuse(
            StatusCode::BAD_REQUEST,
            protocol::PARSE_ERROR,
            format!("Parse error: reading body: {e}"),
        )
        .into_response(Value::Null)),
    }
}

/// 413 for a body over `limit` (counted as `refused{limit="body_bytes"}`),
/// closing the connection: what is left of the body is not read.
fn too_large(limit: usize) -> Response<Body> {
    crate::metrics::refused("body_bytes");
    let mut resp = refuse(
        StatusCode::PAYLOAD_TOO_LARGE,
        protocol::INVALID_REQUEST,
        format!("Request body larger than {limit} bytes (server.max_body_bytes)"),
    )
    .into_response(Value::Null);
    resp.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    resp
}

/// Reads and drops up to `bound` more bytes of a refused body, within
/// `limits::REFUSED_BODY_DRAIN_TIME` (nginx's lingering close): a client
/// that writes its whole body before reading the answer can then read the
/// 413 instead of meeting a reset. One frame at a time (at most hyper's
/// read buffer), nothing kept.
async fn discard<B>(body: &mut B, bound: usize)
where
    B: hyper::body::Body<Data = bytes::Bytes> + Unpin,
{
    let drain = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |d| d.len());
            if seen > bound {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(crate::limits::REFUSED_BODY_DRAIN_TIME, drain).await;
}

async fn post<B>(app: Arc<App>, req: Request<B>, head: Head) -> Response<Body>
where
    B: hyper::body::Body<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (headers, bytes) = match read_body(&app, req).await {
        Ok(x) => x,
        Err(refused) => return refused,
    };
    let media = super::media::Accept::of(&headers);
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
        Some(_) => super::audited::json_len(&item),
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
    match app.sessions.enter(sid, head.who.owner()) {
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
