//! The HTTP+SSE transport of protocol version 2024-11-05, served beside
//! `/mcp` for clients that speak only it (`../shared/spec/2025-11-25/transports.mdx`
//! §Backwards Compatibility: servers keep hosting its SSE and POST
//! endpoints beside the MCP endpoint).
//!
//! - `GET /sse` opens a legacy session in the one session table
//!   ([`super::sessions::Sessions::open_sse`]; the same fixed capacity
//!   and shares as any; never idle while its stream is open) and a stream
//!   holding a place in the
//!   stream pool, whose first event, `endpoint`, names where to POST:
//!   `/messages?sessionId=<the session's id>`.
//! - `POST /messages?sessionId=…` carries one JSON-RPC message. A request
//!   is handed to its session's stream ([`super::sse_links`]) and answered
//!   202 at once; its answer, and what its upstream relays meanwhile, go
//!   on the stream ([`super::sse_driver`]). A client's answer to a relayed
//!   request or a notification acts at once (a cancellation never waits
//!   behind calls).
//!
//! Both pass the same head checks as `/mcp` (Host/Origin, credentials:
//! the POST's client must own the session), and each request is the same
//! as a `/mcp` one from there on ([`super::message::one`]): rate, policy,
//! pins, audit (with the session's id), metrics. The session ends when
//! its stream closes.

use super::admission::{Accept, Head};
use super::app::{App, Body};
use super::call_stream::CallFuture;
use super::get_stream::GetStream;
use super::reply::{self, refuse, Outcome, Refusal};
use super::sse_driver::Driver;
use super::sse_links::{Answering, CallPlaces, Event, NotHanded};
use super::{admission, answered_here, message};
use crate::instance::InstanceId;
use crate::protocol::envelope::Body as Parsed;
use crate::protocol::{self, sse, Message, Outgoing};
use crate::relay::Relayed;
use crate::session::SessionId;
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The path of the stream (`GET`).
pub const SSE_PATH: &str = "/sse";
/// The path of the messages (`POST`).
pub const MESSAGES_PATH: &str = "/messages";

/// `GET /sse`: charged to the client's rate when it opens (429), a place
/// in the stream pool (503), a new session (503 when the table is full),
/// then the stream: its `endpoint` event, then the session's traffic.
pub(super) fn open(app: Arc<App>, head: &Head) -> Response<Body> {
    let who = &head.who;
    if let Err(e) = admission::charge(&app, who) {
        return Refusal(StatusCode::TOO_MANY_REQUESTS, e).into_response(Value::Null);
    }
    let place = match app.streams.take(who.access.shares(), who.owner()) {
        Ok(place) => place,
        Err((status, e)) => return Refusal(status, e).into_response(Value::Null),
    };
    let held = match app.sessions.open_sse(who.owner(), who.access.shares()) {
        Ok(held) => held,
        Err(e) => return answered_here::not_opened(e).into_response(Value::Null),
    };
    let id = held.id();
    let posted = app.sse_links.insert(place.index(), id, who.owner());
    let first = endpoint_event(&id);
    let notes = GetStream::plain(app.clone(), held, place);
    let mut r = Response::new(Driver::new(app, id, notes, posted, first).into_body());
    reply::sse_headers(&mut r);
    r
}

/// The `endpoint` event: where the client POSTs its messages (a path on
/// this origin, which clients resolve against the stream's URL).
fn endpoint_event(id: &SessionId) -> Bytes {
    let at = format!("{MESSAGES_PATH}?sessionId={}", id.to_header());
    Bytes::from(format!("event: endpoint\ndata: {at}\n\n"))
}

/// `POST /messages?sessionId=…` with one message of the session's client:
/// 400 without a `sessionId` or for a body that is no JSON-RPC message
/// (batches included: the transport has none) or a modern request, 404
/// for a session with no open stream of this client's, 429 when its
/// stream is not read; else 202, the answer (or the refusal of a request
/// over the in-flight bounds) on the stream.
pub(super) async fn message(
    app: &Arc<App>,
    query: Option<&str>,
    headers: HeaderMap,
    bytes: Bytes,
    mut head: Head,
) -> Response<Body> {
    let id = match session_param(query, app.instance) {
        Ok(id) => id,
        Err(refused) => return refused.into_response(Value::Null),
    };
    let msg = match protocol::envelope::parse(&bytes) {
        Ok(Parsed::One(Ok(m))) => m,
        Ok(Parsed::One(Err((id, e)))) => {
            return reply::json(StatusCode::BAD_REQUEST, &protocol::error_response(id, &e))
        }
        Ok(Parsed::Batch(_)) => {
            let why = "Invalid Request: the HTTP+SSE transport takes one message per POST";
            let r = refuse(StatusCode::BAD_REQUEST, protocol::INVALID_REQUEST, why);
            return r.into_response(Value::Null);
        }
        Err(e) => {
            let why = format!("Parse error: {e}");
            let r = refuse(StatusCode::BAD_REQUEST, protocol::PARSE_ERROR, why);
            return r.into_response(Value::Null);
        }
    };
    (head.session, head.sse) = (Some(Ok(id)), true);
    head.accept = Accept {
        sse: true,
        json: true,
    };
    match msg {
        Message::Request { .. } => request(app, id, (head, headers), msg, bytes.len()),
        _ => {
            // Its session, not its stream: a stream that finishes (its place
            // given to another) still has calls waiting for these.
            if app.sessions.owner(&id) != Some(head.who.owner()) {
                return not_handed(NotHanded::NoStream);
            }
            // Answers and notifications give no answer of their own.
            let _ = message::one(app, &head, &headers, msg, false, bytes.len()).await;
            reply::empty(StatusCode::ACCEPTED)
        }
    }
}

/// A POSTed request: 400 for a modern one (the transport carries legacy
/// sessions), else handed to the session's stream with its places (202);
/// without a place, its refusal goes on the stream as its answer (202: a
/// client's POST writer may take any other status as its session's end).
fn request(
    app: &Arc<App>,
    id: SessionId,
    (head, headers): (Head, HeaderMap),
    msg: Message,
    bytes: usize,
) -> Response<Body> {
    let Message::Request {
        id: rid, params, ..
    } = &msg
    else {
        unreachable!("called for requests")
    };
    if admission::has_modern_meta(params.as_ref()) {
        let why = "Bad Request: the HTTP+SSE transport carries legacy sessions only; \
                   send 2026-07-28 requests to /mcp";
        let r = refuse(StatusCode::BAD_REQUEST, protocol::INVALID_REQUEST, why);
        return r.into_response(Value::Null);
    }
    let (owner, shares) = (head.who.owner(), head.who.access.shares());
    let places = match app.sse_links.places(&id, owner, shares) {
        Ok(places) => places,
        Err(NotHanded::NoStream) => return not_handed(NotHanded::NoStream),
        Err(e) => return refused_on_stream(app, &id, rid.clone(), e),
    };
    let answering = answering(app.clone(), (head, headers), msg, bytes, places);
    match app.sse_links.hand(&id, answering) {
        Ok(()) => reply::empty(StatusCode::ACCEPTED),
        Err(e) => not_handed(e),
    }
}

/// Request `rid` refused a place (`e`): its error answer (-31011, with
/// `retryAfterSeconds` and the limit) handed to the stream, counted; 202.
fn refused_on_stream(app: &App, id: &SessionId, rid: Value, e: NotHanded) -> Response<Body> {
    let limit = e.limit().unwrap_or("sse_session_calls");
    let err = protocol::RpcError::new(protocol::CONNECTIONS_FULL, e.to_string())
        .with_data(serde_json::json!({"retryAfterSeconds": 1, "limit": limit}));
    let event = vec![sse::event(&protocol::error_response(rid, &err).to_string())];
    match app.sse_links.hand(id, stream::iter([event]).boxed()) {
        Ok(()) => {
            crate::metrics::refused(limit);
            reply::empty(StatusCode::ACCEPTED)
        }
        Err(e) => not_handed(e),
    }
}

/// The session named by the query's `sessionId`: 400 without one, 404 for
/// one this box could not have made (naming the box that did).
fn session_param(query: Option<&str>, here: InstanceId) -> Result<SessionId, Refusal> {
    let value =
        (query.unwrap_or_default().split('&')).find_map(|pair| pair.strip_prefix("sessionId="));
    let Some(value) = value else {
        let why = "Bad Request: POST /messages needs ?sessionId= (the URL of the stream's endpoint event)";
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            protocol::INVALID_REQUEST,
            why,
        ));
    };
    super::admission::session_id(Some(value), here).map_err(|other| match other {
        Some(issued) => reply::elsewhere(issued, here),
        None => reply::not_found(),
    })
}

/// The refusal of a message not handed to its stream: 404, or 429 with
/// `Retry-After: 1` (its stream not read), counted by its limit.
fn not_handed(e: NotHanded) -> Response<Body> {
    let Some(limit) = e.limit() else {
        return reply::not_found().into_response(Value::Null);
    };
    crate::metrics::refused(limit);
    let err = protocol::RpcError::new(protocol::INVALID_REQUEST, e.to_string())
        .with_data(serde_json::json!({"retryAfterSeconds": 1, "limit": limit}));
    Refusal(StatusCode::TOO_MANY_REQUESTS, err).into_response(Value::Null)
}

/// The events answering request `msg` of `head`'s client, as its
/// stream will poll them: served as any request ([`message::one`], taking
/// a stream), each event written whole in its pieces; `places` are given
/// back with the last.
fn answering(
    app: Arc<App>,
    (head, headers): (Head, HeaderMap),
    msg: Message,
    bytes: usize,
    places: CallPlaces,
) -> Answering {
    let answered = async move {
        let outcome = message::one(&app, &head, &headers, msg, true, bytes).await;
        (outcome, places)
    };
    stream::once(answered)
        .flat_map(|(outcome, places)| match outcome {
            Ok(Outcome::Accepted) => stream::empty().boxed(),
            Ok(Outcome::Answer(a)) => stream::iter([pieces(a.response)]).boxed(),
            Ok(Outcome::Relayed(rx, call)) => Relaying::new(rx, call, places).into_stream(),
            // Only a modern request is answered so (refused before).
            Ok(Outcome::Stream(_)) => stream::empty().boxed(),
            Err((id, r)) => {
                let error = protocol::error_response(id, &r.1);
                stream::iter([vec![sse::event(&error.to_string())]]).boxed()
            }
        })
        .boxed()
}

/// A response as one `message` event, in its pieces (not joined).
fn pieces(response: Outgoing) -> Event {
    let chunks = response.chunks(true);
    chunks.into_iter().filter(|b| !b.is_empty()).collect()
}

/// A relayed call of an HTTP+SSE session being answered: its upstream's
/// messages as they come, then its response, each a `message` event.
struct Relaying {
    rx: mpsc::Receiver<Relayed>,
    /// `None` once it answered.
    call: Option<CallFuture>,
    answer: Option<Outgoing>,
    _places: CallPlaces,
}

impl Relaying {
    fn new(rx: mpsc::Receiver<Relayed>, call: CallFuture, places: CallPlaces) -> Self {
        Relaying {
            rx,
            call: Some(call),
            answer: None,
            _places: places,
        }
    }

    fn into_stream(self) -> Answering {
        stream::unfold(self, |mut r| async move {
            let event = r.next().await?;
            Some((event, r))
        })
        .boxed()
    }

    /// The next event: a relayed message, or (the messages still queued
    /// first) the response; `None` after it.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(call) = self.call.as_mut() {
                let answered = tokio::select! {
                    biased;
                    Some(m) = self.rx.recv() => match m {
                        Relayed::Message(v) => return Some(vec![sse::event(&v.to_string())]),
                        // Polling cues: nothing to write on this stream.
                        Relayed::Resumable | Relayed::Polled => None,
                    },
                    answer = call => Some(answer),
                };
                if answered.is_some() {
                    (self.answer, self.call) = (answered, None);
                }
                continue;
            }
            match self.rx.try_recv() {
                Ok(Relayed::Message(v)) => return Some(vec![sse::event(&v.to_string())]),
                Ok(_) => continue,
                Err(_) => return self.answer.take().map(pieces),
            }
        }
    }
}

/// What a path of this transport takes (`GET /sse`, `POST /messages`).
pub(super) fn methods(path: &str) -> reply::Methods {
    match path {
        SSE_PATH => ("GET, OPTIONS", "GET"),
        _ => ("POST, OPTIONS", "POST"),
    }
}

/// 405 for a method a path of this transport does not take.
pub(super) fn method_not_allowed(path: &str) -> Response<Body> {
    let (allow, _) = methods(path);
    let why = format!("Method Not Allowed: {path} takes {allow}");
    let mut r = refuse(
        StatusCode::METHOD_NOT_ALLOWED,
        protocol::INVALID_REQUEST,
        why,
    )
    .into_response(Value::Null);
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}
