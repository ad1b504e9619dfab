//! Who may send a request on `/mcp`, before anything else is read: the
//! caller's credentials ([`crate::access::Access::authenticate`]: 401 with
//! `WWW-Authenticate: Bearer realm="mcp-edge"`, RFC 6750 §3) and whether
//! the legacy session it names is its own (404 as for an unknown id,
//! `../shared/spec/2025-11-25/basic/transports.mdx` §Session Management).
//! With `[[client]]`s, the connection becomes one of the client's places in
//! the connection table ([`super::conns::Tracker::claim`]: 503 naming
//! `connection_share`, and the connection closed, when the client holds
//! its share and the places left are kept for others).
//! Then, once the message is read, each JSON-RPC *request* is charged to
//! the client's rate ([`charge`]: 429 with `Retry-After`), and so is each
//! GET stream as it opens; notifications, answers and DELETE are not, so a
//! client over its rate can still cancel, answer and end its session. Each
//! refusal is counted in `mcp_edge_refused_total` (`auth`, `rate`,
//! `connection_share`) and logged with the peer address under
//! [`crate::access::Throttle`].

use super::era::session_header;
use super::reply::refuse;
use super::{App, Body, Peer, Who};
use crate::access::AuthError;
use crate::protocol::{self, RpcError};
use http::{HeaderValue, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::Instant;

/// The caller of `req`, or the refusal to send instead.
pub(super) fn admit<B>(app: &App, req: &Request<B>) -> Result<Who, Response<Body>> {
    let access = app.access();
    let peer = req.extensions().get::<Peer>();
    let authorization = req.headers().get(http::header::AUTHORIZATION);
    let subject = peer.and_then(|p| p.cert_subject.as_deref());
    let caller = match access.authenticate(authorization.map(HeaderValue::as_bytes), subject) {
        Ok(c) => c,
        Err(e) => return Err(unauthorized(app, peer, e)),
    };
    let who = Who { access, caller };
    if let Some(conn) = req.extensions().get::<super::conns::Tracker>() {
        if let Err(e) = conn.claim(who.access.shares(), who.owner()) {
            return Err(over_share(app, &who, e));
        }
    }
    // A session presented by another caller is answered as an unknown one.
    if let Ok(Some(id)) = session_header(req.headers()) {
        // Expired but not yet swept counts too: its calls may still run.
        let owner = app.sessions.lock().expect("sessions").owner(&id);
        if owner.is_some_and(|o| o != who.owner()) {
            let r = refuse(
                StatusCode::NOT_FOUND,
                protocol::INVALID_REQUEST,
                "Session not found",
            );
            return Err(r.into_response(Value::Null));
        }
    }
    Ok(who)
}

/// Takes one request from `who`'s rate (a single request, or each
/// request of a batch); the error to answer when it is used up (with
/// `data.retryAfterSeconds`, which becomes `Retry-After`), counted as
/// `mcp_edge_refused_total{limit="rate"}`.
pub(super) fn charge(app: &App, who: &Who) -> Result<(), RpcError> {
    let wait = match who.access.admit(who.caller, Instant::now()) {
        Ok(()) => return Ok(()),
        Err(wait) => wait,
    };
    metrics::counter!(crate::metrics::REFUSED, "limit" => "rate").increment(1);
    if let Some(skipped) = app.refusal_log.allow(Instant::now()) {
        tracing::info!(client = who.name(), skipped, "429: over its rate");
    }
    Err(rate_error(who, wait))
}

fn rate_error(who: &Who, wait: Duration) -> RpcError {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    RpcError::new(
        protocol::RATE_LIMITED,
        format!(
            "Too many requests: client {:?} is over its rate",
            who.name()
        ),
    )
    .with_data(json!({"retryAfterSeconds": secs}))
}

/// The 503 of a request whose client holds its share of the connections
/// (counted as `connection_share`); the connection ends with it.
fn over_share(app: &App, who: &Who, e: super::conns::ShareRefusal) -> Response<Body> {
    metrics::counter!(crate::metrics::REFUSED, "limit" => "connection_share").increment(1);
    if let Some(skipped) = app.refusal_log.allow(Instant::now()) {
        tracing::info!(client = who.name(), skipped, "503: {e}");
    }
    let err = RpcError::new(protocol::CONNECTIONS_FULL, e.to_string())
        .with_data(json!({"retryAfterSeconds": 1, "limit": "connection_share"}));
    let mut r =
        super::reply::Refusal(StatusCode::SERVICE_UNAVAILABLE, err).into_response(Value::Null);
    // The body was not read: say the connection ends (RFC 9112 §9.6).
    let h = r.headers_mut();
    h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    r
}

fn peer_addr(peer: Option<&Peer>) -> String {
    peer.map_or_else(|| "-".to_owned(), |p| p.addr.to_string())
}

fn unauthorized(app: &App, peer: Option<&Peer>, e: AuthError) -> Response<Body> {
    metrics::counter!(crate::metrics::REFUSED, "limit" => "auth").increment(1);
    if let Some(skipped) = app.refusal_log.allow(Instant::now()) {
        let peer = peer_addr(peer);
        tracing::warn!(%peer, skipped, "401: {e}");
    }
    let challenge = match e {
        AuthError::Missing | AuthError::UnknownCertificate => r#"Bearer realm="mcp-edge""#,
        AuthError::Malformed => r#"Bearer realm="mcp-edge", error="invalid_request""#,
        AuthError::Unknown => r#"Bearer realm="mcp-edge", error="invalid_token""#,
    };
    let err = RpcError::new(protocol::UNAUTHORIZED, format!("Unauthorized: {e}"));
    let mut r = super::reply::json(
        StatusCode::UNAUTHORIZED,
        &protocol::error_response(Value::Null, &err),
    );
    let h = r.headers_mut();
    h.insert(
        http::header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    // The body was not read: say the connection ends (RFC 9112 §9.6).
    h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    r
}
