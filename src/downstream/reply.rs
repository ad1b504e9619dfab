//! Response framing: JSON or SSE per the client's `Accept`, empty statuses,
//! and the keep-alive stream of a legacy GET
//! (`../shared/spec/2025-11-25/transports.mdx` §Sending Messages to the Server,
//! §Listening for Messages from the Server).

use super::app::{App, Body};
use super::call_stream::{CallFuture, CallStream, Core, Resumable};
use crate::instance::InstanceId;
use crate::protocol::raw::Chunks;
use crate::protocol::{self, sse, Outgoing, RpcError};
use crate::relay::Relayed;
use crate::session::SessionId;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use serde_json::Value;
use std::convert::Infallible;

pub(crate) fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into())
        .map_err(|e: Infallible| match e {})
        .boxed_unsync()
}

/// A JSON body with `status`.
pub fn json(status: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec(v).unwrap_or_default()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `status` with a JSON `{"error": why}`, `Retry-After: 1` and
/// `Connection: close`: the connection is being closed under the client.
pub fn closing(status: StatusCode, why: &str) -> Response<Body> {
    let mut r = json(status, &serde_json::json!({ "error": why }));
    let h = r.headers_mut();
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// What a path takes: its `Allow` header (OPTIONS included), and the
/// methods a CORS preflight may name.
pub type Methods = (&'static str, &'static str);

/// `/mcp`'s [`Methods`].
pub const MCP_METHODS: Methods = ("GET, POST, DELETE, OPTIONS", "GET, POST, DELETE");

/// An empty body with `status` (202 for notifications, 200 for DELETE).
pub fn empty(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = status;
    r
}

/// 405 with `Allow: GET, POST, DELETE, OPTIONS` (GET/DELETE without a legacy session:
/// `../shared/spec/2026-07-28/transports-streamable-http.mdx` §Earlier Streamable HTTP Revisions).
pub fn method_not_allowed() -> Response<Body> {
    let mut r = json(
        StatusCode::METHOD_NOT_ALLOWED,
        &serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": crate::protocol::INVALID_REQUEST,
            "message": "Method Not Allowed: use POST, or GET/DELETE with an Mcp-Session-Id"}}),
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(MCP_METHODS.0));
    r
}

/// The CORS preflight answer (Fetch standard §CORS protocol; RFC 9110
/// §9.3.7 OPTIONS) for a request whose `Origin` already passed the
/// Origin/Host check: 204, `Allow`, and, when `Origin` is present, the
/// methods of its path and the asked-for request headers echoed back (the
/// modern era's `Mcp-Param-*` names come from tool schemas and cannot be
/// listed in advance). Browsers cache it for `Access-Control-Max-Age`, 600 s.
pub fn preflight(request: &HeaderMap, (allow, methods): Methods) -> Response<Body> {
    let mut r = empty(StatusCode::NO_CONTENT);
    let h = r.headers_mut();
    h.insert(header::ALLOW, HeaderValue::from_static(allow));
    if request.contains_key(header::ORIGIN) {
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(methods),
        );
        if let Some(asked) = request.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
        }
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        // Private Network Access: a page of an allowed public origin asking
        // to reach this (private or loopback) address.
        if request
            .get("access-control-request-private-network")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
        {
            h.insert(
                "access-control-allow-private-network",
                HeaderValue::from_static("true"),
            );
        }
    }
    r
}

/// Marks `r` readable by the page at `origin` (which passed the Origin/Host
/// check): `Access-Control-Allow-Origin` echoing it, `Vary: Origin`, and
/// the response headers a client must read exposed (`Mcp-Session-Id`,
/// `Mcp-Protocol-Version`, `Retry-After`, `WWW-Authenticate`). Allowed
/// origins are loopback pages (any port) and `server.allowed_origins`; with
/// [`preflight`] this is what lets a browser client there (e.g. the MCP
/// Inspector's UI in direct mode) send JSON with MCP headers and read the
/// answers. Any other origin was already refused with 403.
pub fn allow_origin(r: &mut Response<Body>, origin: HeaderValue) {
    let h = r.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(
            "Mcp-Session-Id, Mcp-Protocol-Version, Retry-After, WWW-Authenticate",
        ),
    );
}

/// `Content-Type: text/event-stream`, no caching, no proxy buffering.
pub(crate) fn sse_headers(r: &mut Response<Body>) {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
}

/// A request's answer as JSON, or as a one-event SSE stream when `sse`.
pub fn answer(
    status: StatusCode,
    response: Outgoing,
    session: Option<SessionId>,
    sse_wanted: bool,
) -> Response<Body> {
    let sse = sse_wanted && status == StatusCode::OK;
    let mut r = Response::new(BodyExt::boxed_unsync(Pieces::new(response.chunks(sse))));
    *r.status_mut() = status;
    if sse {
        sse_headers(&mut r);
    } else {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some(s) = session {
        if let Ok(v) = HeaderValue::from_str(&s.to_header()) {
            r.headers_mut().insert("mcp-session-id", v);
        }
    }
    r
}

/// A body of a message's pieces ([`Outgoing::chunks`]), written in order
/// without joining them; its length is known (`Content-Length`).
struct Pieces {
    chunks: Chunks,
    next: usize,
}

impl Pieces {
    fn new(chunks: Chunks) -> Self {
        Pieces { chunks, next: 0 }
    }
}

impl hyper::body::Body for Pieces {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        while self.next < self.chunks.len() {
            let i = self.next;
            self.next += 1;
            let b = std::mem::take(&mut self.chunks[i]);
            if !b.is_empty() {
                return std::task::Poll::Ready(Some(Ok(Frame::data(b))));
            }
        }
        std::task::Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.chunks[self.next..].iter().all(Bytes::is_empty)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        let left = self.chunks[self.next..]
            .iter()
            .map(Bytes::len)
            .sum::<usize>();
        hyper::body::SizeHint::with_exact(left as u64)
    }
}

/// SSE events `notifications/resources/updated` for the URIs updated since
/// `who` last looked ([`resource_update_messages`]); `None` when there are
/// none.
pub(crate) fn resource_updates(
    app: &App,
    who: crate::subscriptions::Subscriber,
    subscription: Option<&Value>,
) -> Option<Bytes> {
    joined(resource_update_messages(app, who, subscription))
}

/// `notifications/resources/updated` (2025-11-25 schema.json
/// `ResourceUpdatedNotification`) for the URIs updated since `who` last
/// looked. With `subscription`, each carries
/// `_meta["io.modelcontextprotocol/subscriptionId"]`.
pub(crate) fn resource_update_messages(
    app: &App,
    who: crate::subscriptions::Subscriber,
    subscription: Option<&Value>,
) -> Vec<Value> {
    let uris = app.subscriptions.take_updates(who);
    let message = |uri: &str| {
        let mut params = serde_json::json!({ "uri": uri });
        if let Some(id) = subscription {
            params["_meta"] = serde_json::json!({ super::streams::META_SUBSCRIPTION_ID: id });
        }
        crate::protocol::notification("notifications/resources/updated", Some(params))
    };
    uris.iter().map(|uri| message(uri)).collect()
}

/// SSE events for the list kinds that `changed` and the client asked for
/// ([`list_changed_messages`]); `None` when there is nothing to send.
pub(crate) fn list_changed(
    changed: [bool; 3],
    wanted: [bool; 3],
    subscription: Option<&Value>,
) -> Option<Bytes> {
    joined(list_changed_messages(changed, wanted, subscription))
}

/// `notifications/{tools,prompts,resources}/list_changed` for the kinds
/// that `changed` and the client asked for (`wanted`), in that order
/// (2025-11-25 schema.json `ToolListChangedNotification` and siblings).
/// With `subscription`, each carries
/// `_meta["io.modelcontextprotocol/subscriptionId"]` (2026-07-28
/// patterns-subscriptions.mdx §Receiving Notifications).
pub(crate) fn list_changed_messages(
    changed: [bool; 3],
    wanted: [bool; 3],
    subscription: Option<&Value>,
) -> Vec<Value> {
    let kinds = crate::router::ListGens::METHODS.iter().enumerate();
    let sent = kinds.filter(|(i, _)| changed[*i] && wanted[*i]);
    let params = || {
        subscription
            .map(|id| serde_json::json!({"_meta": {super::streams::META_SUBSCRIPTION_ID: id}}))
    };
    sent.map(|(_, method)| crate::protocol::notification(method, params()))
        .collect()
}

/// The messages as SSE events, one after another; `None` for none.
fn joined(messages: Vec<Value>) -> Option<Bytes> {
    let mut out = Vec::new();
    for m in &messages {
        out.extend_from_slice(&sse::event(&m.to_string()));
    }
    (!out.is_empty()).then(|| Bytes::from(out))
}

/// What one POSTed message produced, on its way up: the one result type
/// of the pipeline (a refusal before any JSON-RPC answer is a [`Refusal`]).
pub enum Outcome {
    /// A notification or response: 202 without body.
    Accepted,
    /// A complete JSON-RPC response.
    Answer(Answer),
    /// An SSE stream relaying the upstream's messages, then the response.
    Stream(Response<Body>),
    /// A relayed call of an HTTP+SSE session, not framed here: its
    /// messages as they come, then its response, written on the session's
    /// own stream (`super::sse_transport`; [`relay_stream`] frames it as
    /// any call's stream).
    Relayed(tokio::sync::mpsc::Receiver<Relayed>, CallFuture),
}

/// What one request produced: the JSON-RPC response, the HTTP status and, for
/// `initialize`, the new session id.
pub struct Answer {
    pub(super) response: Outgoing,
    pub(super) status: StatusCode,
    pub(super) session: Option<SessionId>,
}

/// Holds a relayed call's response head until the call relays its first
/// message or ends, at most one `keepalive` period: a call that relays
/// nothing is answered as one message (JSON, or one SSE event for a
/// client that takes only SSE) with `Content-Length`, no stream; any other
/// becomes a [`call_stream`] (resumable with `resumable`, a legacy
/// session's) (2025-11-25 transports.mdx §Sending Messages to the Server,
/// item 5: the server returns either).
pub async fn hold(
    mut rx: tokio::sync::mpsc::Receiver<Relayed>,
    mut call: CallFuture,
    keepalive: std::time::Duration,
    resumable: Option<Resumable>,
) -> Outcome {
    let sleep = tokio::time::sleep(keepalive);
    tokio::pin!(sleep);
    let mut open = true;
    let first = loop {
        tokio::select! {
            biased;
            fin = &mut call => match rx.try_recv() {
                Err(_) => {
                    let (status, session) = (StatusCode::OK, None);
                    return Outcome::Answer(Answer { response: fin, status, session });
                }
                Ok(r) => {
                    let mut core = Core::answered(fin, rx, keepalive, resumable);
                    core.relayed(r);
                    return Outcome::Stream(call_stream(CallStream::new(core)));
                }
            },
            // A message, or the upstream's own stream made resumable or
            // closed to be polled: the caller's stream begins now.
            m = rx.recv(), if open => match m {
                Some(r) => break Some(r),
                None => open = false, // nothing more to relay: wait for the answer
            },
            _ = &mut sleep => break None,
        }
    };
    let mut core = Core::running(call, rx, keepalive, resumable);
    if let Some(r) = first {
        core.relayed(r);
    }
    Outcome::Stream(call_stream(CallStream::new(core)))
}

/// An SSE response that streams the messages relayed during a call
/// (`rx`), then the call's final response (`call`), then ends; a keep-alive
/// comment goes out every `keepalive` while nothing else does. Dropping the
/// body (client gone) drops the call, which frees its in-flight slot.
pub fn relay_stream(
    rx: tokio::sync::mpsc::Receiver<Relayed>,
    call: CallFuture,
    keepalive: std::time::Duration,
) -> Response<Body> {
    call_stream(CallStream::new(Core::running(call, rx, keepalive, None)))
}

/// The SSE response of a call stream.
pub fn call_stream(body: CallStream) -> Response<Body> {
    let mut r = Response::new(BodyExt::boxed_unsync(body));
    sse_headers(&mut r);
    r
}

/// An SSE response of the given events, then its end.
pub fn events(events: Bytes) -> Response<Body> {
    let mut r = Response::new(full(events));
    sse_headers(&mut r);
    r
}

/// 404 "Session not found": an unknown, ended, malformed or another
/// client's session id.
pub(super) fn not_found() -> Refusal {
    refuse(
        StatusCode::NOT_FOUND,
        protocol::INVALID_REQUEST,
        "Session not found",
    )
}

/// 404 for a session id another box of the fleet issued (the balancer sent
/// it here: that box is gone, or the balancer does not route by the id's
/// box): as "Session not found", so the client initializes again, with
/// both boxes named.
pub(super) fn elsewhere(issued: InstanceId, here: InstanceId) -> Refusal {
    let (why, data) = crate::instance::elsewhere("Session not found: the session id", issued, here);
    Refusal(
        StatusCode::NOT_FOUND,
        RpcError::new(protocol::INVALID_REQUEST, why).with_data(data),
    )
}

/// The `-31008` of a client over its rate: `data.retryAfterSeconds` (which
/// becomes `Retry-After`) is `wait` rounded up, at least 1.
pub(super) fn rate_limited(client: &str, wait: std::time::Duration) -> RpcError {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let msg = format!("Too many requests: client {client:?} is over its rate");
    RpcError::new(protocol::RATE_LIMITED, msg)
        .with_data(serde_json::json!({"retryAfterSeconds": secs}))
}

/// The 401 of a request without a known caller's credentials, with its
/// challenge (`WWW-Authenticate: Bearer realm="mcp-edge"`, RFC 6750 §3)
/// and `Connection: close` (the body was not read, RFC 9112 §9.6).
pub(super) fn unauthorized(e: crate::access::AuthError) -> Response<Body> {
    use crate::access::AuthError;
    let challenge = match e {
        AuthError::Missing | AuthError::UnknownCertificate => r#"Bearer realm="mcp-edge""#,
        AuthError::Malformed => r#"Bearer realm="mcp-edge", error="invalid_request""#,
        AuthError::Unknown => r#"Bearer realm="mcp-edge", error="invalid_token""#,
    };
    let err = RpcError::new(protocol::UNAUTHORIZED, format!("Unauthorized: {e}"));
    let mut r = json(
        StatusCode::UNAUTHORIZED,
        &protocol::error_response(Value::Null, &err),
    );
    let h = r.headers_mut();
    h.insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// An HTTP-level refusal: status plus JSON-RPC error (id null).
pub(super) struct Refusal(pub(super) StatusCode, pub(super) RpcError);

pub(super) fn refuse(status: StatusCode, code: i64, msg: impl Into<String>) -> Refusal {
    Refusal(status, RpcError::new(code, msg))
}

impl Refusal {
    /// The HTTP answer; an error whose `data.retryAfterSeconds` is set also
    /// gets a `Retry-After` header (RFC 9110 §10.2.3).
    pub(super) fn into_response(self, id: Value) -> Response<Body> {
        let retry = self
            .1
            .data
            .as_ref()
            .and_then(|d| d.get("retryAfterSeconds"))
            .and_then(Value::as_u64);
        let mut r = json(self.0, &protocol::error_response(id, &self.1));
        if let Some(secs) = retry {
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, secs.into());
        }
        r
    }
}
