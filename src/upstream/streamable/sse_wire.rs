//! The HTTP+SSE transport of protocol version 2024-11-05, client side
//! (`transport = "sse"`; `../shared/spec/2025-11-25/transports.mdx`
//! §Backwards Compatibility names it; it is what the 2024-11-05 revision
//! calls "HTTP with SSE"):
//!
//! - The client opens a GET stream at the configured `url`. Its first event
//!   (`event: endpoint`) names, as a URI reference resolved against `url`,
//!   where messages are POSTed; it must be on the same origin (scheme, host
//!   and port), or the connection fails.
//! - Every message is its own POST there, answered 202 Accepted; every
//!   message of the server — answers, notifications, its requests — comes
//!   as an `event: message` on the stream.
//!
//! So the stream is the connection, as a child's stdout is for stdio: the
//! reader ([`drive`]) is the connection's driver, polled by the upstream's
//! owner task; calls wait in an [`InFlight`] table for their answers
//! ([`crate::upstream::channel`], shared with stdio). When the stream ends
//! the connection does, and the owner reconnects with its backoff.
//! Headers, `bearer_token_file` and `[upstream.oauth]` apply to the GET and
//! to every POST alike ([`Sender`]). The era is always legacy: the
//! 2026-07-28 probe is answered with an error on the stream, and the
//! handshake falls back to `initialize`.

use super::authorized::Sender;
use super::wire::{is_sse, read_body, refused};
use crate::protocol::{self, sse, Payload};
use crate::relay::{Relay, RelayCtx};
use crate::upstream::channel::{answer, on_line, Answered, Line};
use crate::upstream::inflight::InFlight;
use crate::upstream::SendError;
use bytes::Bytes;
use http::{header, HeaderMap, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// The largest body of a POST's answer read (it is `Accepted`, or an
/// error's text).
const POST_ANSWER_BYTES: usize = 4096;

/// Where messages go, as the stream said.
#[derive(Clone, Debug)]
enum Endpoint {
    /// The stream is opening, its `endpoint` event not seen yet.
    Waiting,
    At(Uri),
    /// The stream could not be opened, or named no usable endpoint
    /// (the error waits in [`SseWire::failure`] for the first caller).
    Failed,
}

/// One 2024-11-05 connection: what its POSTs and its reader share.
pub(super) struct SseWire {
    sender: Arc<Sender>,
    url: Uri,
    headers: HeaderMap,
    endpoint: watch::Sender<Endpoint>,
    /// Why the stream failed, for the first caller to report (its class —
    /// refused credentials, Retry-After — decides the owner's next step).
    failure: Mutex<Option<SendError>>,
    /// The calls waiting for their answers on the stream.
    pub(super) inflight: InFlight,
    list_changed: Arc<Notify>,
    ctx: RelayCtx,
    max_bytes: usize,
    /// The bound of a POST of mcp-edge's own answer to the server's
    /// request (`probe_timeout`), sent from the reader.
    reply_timeout: Duration,
}

impl SseWire {
    /// The wire of an upstream at `url`, sending with `sender` and
    /// `headers`; its calls get a table of `max_in_flight` places, each
    /// abandoned one held at most `call_timeout` (its ids come out of the
    /// returned receiver, to be cancelled).
    pub(super) fn new(
        cfg: &crate::config::UpstreamConfig,
        (sender, url, headers): (Arc<Sender>, Uri, HeaderMap),
        list_changed: Arc<Notify>,
        ctx: RelayCtx,
    ) -> (SseWire, tokio::sync::mpsc::Receiver<u64>) {
        let (inflight, cancel) = InFlight::new(cfg.max_in_flight, cfg.call_timeout);
        let wire = SseWire {
            sender,
            url,
            headers,
            endpoint: watch::Sender::new(Endpoint::Waiting),
            failure: Mutex::new(None),
            inflight,
            list_changed,
            ctx,
            max_bytes: cfg.max_result_bytes,
            reply_timeout: cfg.probe_timeout,
        };
        (wire, cancel)
    }

    /// Sends a request with a fresh upstream id and waits up to `timeout`
    /// for its answer on the stream. With a `relay`, the caller's
    /// `_meta.progressToken` is replaced by the upstream id and restored on
    /// the way back (as for stdio); the slot holds `claim` (its client's
    /// place) until it is freed, past its caller when abandoned. A POST
    /// refused frees the slot at once: the server never took the request.
    pub(super) async fn send(
        &self,
        method: &str,
        mut params: Option<Value>,
        timeout: Duration,
        (relay, claim): (Option<Relay>, Option<crate::upstream::Claim>),
    ) -> Result<Payload, SendError> {
        let original = progress_token(&mut params).map(|t| t.clone());
        let asks = crate::upstream::channel::asks(method);
        let mut ticket = (self.inflight)
            .reserve_relayed(relay.map(|r| (r, original)), claim, asks)
            .ok_or(SendError::Busy)?;
        if let Some(t) = progress_token(&mut params) {
            *t = json!(ticket.upstream_id());
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let msg = protocol::request(json!(ticket.upstream_id()), method, params);
        let posted = tokio::time::timeout_at(deadline, self.post(&msg)).await;
        if let Ok(Err(refused)) = posted {
            let not_taken = protocol::RpcError::new(protocol::INTERNAL_ERROR, "not sent");
            self.inflight
                .complete_n(ticket.upstream_id(), Err(not_taken));
            return Err(refused);
        }
        posted.map_err(|_| SendError::Timeout)??;
        match tokio::time::timeout_at(deadline, &mut ticket.rx).await {
            // The ticket's drop queues the call for cancellation upstream.
            Err(_) => Err(SendError::Timeout),
            Ok(Err(_)) => Err(SendError::Transport("the SSE stream ended".into())),
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(SendError::Rpc(e)),
        }
    }

    /// POSTs one message to the endpoint the stream named (waiting for it
    /// while the stream opens); any 2xx is success.
    pub(super) async fn post(&self, msg: &Value) -> Result<(), SendError> {
        let to = self.endpoint().await?;
        let body = serde_json::to_vec(msg).map_err(|e| SendError::Transport(e.to_string()))?;
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(to)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| SendError::Transport(e.to_string()))?;
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let resp = self.sender.authorized(req).await?;
        refused(&resp)?;
        let status = resp.status();
        let _ = read_body(resp.into_body(), POST_ANSWER_BYTES).await;
        match status.is_success() {
            true => Ok(()),
            false => Err(SendError::Http {
                status: status.as_u16(),
                rpc: None,
            }),
        }
    }

    /// The endpoint, once the stream named it; the stream's failure if it
    /// could not.
    async fn endpoint(&self) -> Result<Uri, SendError> {
        let mut rx = self.endpoint.subscribe();
        loop {
            match rx.borrow_and_update().clone() {
                Endpoint::At(uri) => return Ok(uri),
                Endpoint::Failed => return Err(self.failure()),
                Endpoint::Waiting => {}
            }
            if rx.changed().await.is_err() {
                return Err(SendError::Transport("the SSE stream ended".into()));
            }
        }
    }

    /// Why the stream failed: the error itself for the first caller, the
    /// same class (refused credentials, Retry-After, an HTTP status) for
    /// the others.
    fn failure(&self) -> SendError {
        let mut kept = self.failure.lock().expect("failure lock");
        match kept.take() {
            Some(e) => {
                *kept = Some(copy(&e));
                e
            }
            None => SendError::Transport("the SSE stream failed".into()),
        }
    }

    fn fail(&self, e: SendError) {
        *self.failure.lock().expect("failure lock") = Some(e);
        self.endpoint.send_replace(Endpoint::Failed);
    }
}

/// `e` again, of the same class where the class decides what happens next.
fn copy(e: &SendError) -> SendError {
    match e {
        SendError::Auth(status) => SendError::Auth(*status),
        SendError::RetryAfter { status, after } => SendError::RetryAfter {
            status: *status,
            after: *after,
        },
        SendError::Http { status, rpc } => SendError::Http {
            status: *status,
            rpc: rpc.clone(),
        },
        other => SendError::Transport(other.to_string()),
    }
}

/// A request's `_meta.progressToken`, if it has one.
fn progress_token(params: &mut Option<Value>) -> Option<&mut Value> {
    params.as_mut()?.get_mut("_meta")?.get_mut("progressToken")
}

/// The connection's driver: opens the stream, learns the endpoint, and
/// reads every message until the stream ends (the reason returned; the
/// calls still waiting fail at once). A stream that cannot be opened
/// fails the callers waiting for its endpoint with why (refused
/// credentials, Retry-After, …), and the driver waits for the owner to
/// close the connection.
pub(super) async fn drive(wire: Arc<SseWire>) -> String {
    let _ended = Ended(&wire);
    let body = match open(&wire).await {
        Ok(body) => body,
        Err(e) => {
            let why = e.to_string();
            tracing::debug!(url = %wire.sender.shown_url, "SSE stream: {}", crate::logline::printable(&why));
            wire.fail(e);
            return std::future::pending().await;
        }
    };
    read(&wire, body).await
}

/// However the driver ends — the stream ended, or the owner dropped it
/// (a reconnect, missed probes, shutdown) — nothing more is POSTed to the
/// endpoint and every call waiting fails at once.
struct Ended<'a>(&'a SseWire);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        // In this order: a call reserving in between finds no endpoint.
        self.0.endpoint.send_replace(Endpoint::Failed);
        self.0.inflight.fail_all();
    }
}

/// The GET that opens the stream, checked: an SSE answer, or why not.
async fn open(wire: &SseWire) -> Result<hyper::body::Incoming, SendError> {
    let mut req = Request::builder()
        .method(Method::GET)
        .uri(wire.url.clone())
        .header(header::ACCEPT, "text/event-stream")
        .body(Full::new(Bytes::new()))
        .map_err(|e| SendError::Transport(e.to_string()))?;
    for (k, v) in &wire.headers {
        req.headers_mut().insert(k.clone(), v.clone());
    }
    let resp = wire.sender.authorized(req).await?;
    refused(&resp)?;
    if !resp.status().is_success() || !is_sse(resp.headers()) {
        return Err(SendError::Transport(format!(
            "GET {}: HTTP {} ({}), not an SSE stream: is it a 2024-11-05 HTTP+SSE server?",
            wire.sender.shown_url,
            resp.status().as_u16(),
            resp.headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("no content type")
        )));
    }
    Ok(resp.into_body())
}

/// Reads the stream: its first event names the endpoint, every later one
/// is a message. Returns why it ended.
async fn read(wire: &SseWire, mut body: hyper::body::Incoming) -> String {
    let mut dec = sse::Decoder::new(wire.max_bytes);
    let mut events = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => return format!("the SSE stream broke: {e}"),
        };
        let Some(data) = frame.data_ref() else {
            continue;
        };
        if dec.push(data, &mut |e| events.push(e)).is_err() {
            crate::metrics::refused("result_bytes");
            return format!(
                "an SSE event over {} bytes (max_result_bytes)",
                wire.max_bytes
            );
        }
        for event in events.drain(..) {
            if let Err(why) = on_event(wire, event).await {
                return why;
            }
        }
    }
    "the SSE stream ended".into()
}

/// One event: the endpoint first, then messages; `Err` ends the stream.
async fn on_event(wire: &SseWire, event: String) -> Result<(), String> {
    if matches!(*wire.endpoint.borrow(), Endpoint::Waiting) {
        let to = same_origin(&wire.url, event.trim())?;
        wire.endpoint.send_replace(Endpoint::At(to));
        return Ok(());
    }
    let mut bytes = event.into_bytes();
    match answer(&mut bytes, &wire.inflight) {
        Answered::Yes | Answered::UnknownId(_) => return Ok(()),
        Answered::No => {}
    }
    if let Line::Reply(reply) = on_line(&bytes, &wire.inflight, &wire.list_changed, &wire.ctx) {
        // Bounded: the stream is not read meanwhile.
        match tokio::time::timeout(wire.reply_timeout, wire.post(&reply)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!("answering the upstream's request: {e}"),
            Err(_) => tracing::debug!("answering the upstream's request: no answer in time"),
        }
    }
    Ok(())
}

/// The endpoint `reference` names, resolved against the stream's `base`:
/// only on the same origin (a server must not send mcp-edge's credentials
/// elsewhere).
fn same_origin(base: &Uri, reference: &str) -> Result<Uri, String> {
    let shown = crate::logline::capped(reference, 200);
    let bad = |why: &str| format!("the SSE stream's endpoint {shown:?} {why}");
    let to: Uri = match reference.starts_with('/') {
        true => {
            let origin = base.authority().ok_or_else(|| bad("has no origin"))?;
            let scheme = base.scheme_str().unwrap_or("http");
            format!("{scheme}://{origin}{reference}").parse()
        }
        false => reference.parse(),
    }
    .map_err(|e| bad(&format!("is not a URL: {e}")))?;
    let origin = |u: &Uri| {
        (
            u.scheme_str().map(str::to_owned),
            u.authority().map(|a| a.as_str().to_ascii_lowercase()),
        )
    };
    if to.authority().is_none() || origin(&to) != origin(base) {
        return Err(bad("is not on the stream's origin"));
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::same_origin;

    #[test]
    fn the_endpoint_is_resolved_on_the_streams_origin_only() {
        let base: http::Uri = "http://127.0.0.1:8000/sse".parse().unwrap();
        let to = same_origin(&base, "/messages/?session_id=ab12").unwrap();
        assert_eq!(
            to.to_string(),
            "http://127.0.0.1:8000/messages/?session_id=ab12"
        );
        let abs = same_origin(&base, "http://127.0.0.1:8000/message?sessionId=1").unwrap();
        assert_eq!(abs.path(), "/message");
        for bad in [
            "http://evil.example/messages",
            "https://127.0.0.1:8000/m",
            "http://127.0.0.1:9/m",
            "not a url",
        ] {
            assert!(same_origin(&base, bad).is_err(), "{bad}");
        }
    }
}
