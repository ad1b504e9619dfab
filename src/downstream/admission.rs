//! Admission: who sent a request on `/mcp` and in which era and session it
//! acts, decided once, before anything is served.
//!
//! Two steps, each run once per request. [`head`], before the body is
//! read: the caller's credentials ([`crate::access::Access::authenticate`]:
//! 401 with `WWW-Authenticate: Bearer realm="mcp-edge"`, RFC 6750 §3); with
//! `[[client]]`s, the connection becomes one of the client's places in the
//! connection table ([`super::conns::Tracker::claim`]: 503 naming
//! `connection_share`, and the connection closed, when the client holds
//! its share and the places left are kept for others); and the
//! `Mcp-Session-Id` it names, parsed once. [`admit`], per JSON-RPC request
//! once the message is read: its charge to the client's rate (429 with
//! `Retry-After`; a GET stream is charged as it opens; notifications,
//! answers and DELETE are not charged,
//! so a client over its rate can still cancel, answer and end its
//! session), its era (`../shared/spec/2026-07-28/versioning.mdx` §Backward
//! Compatibility) and, for a legacy request, its session taken with one
//! lookup that checks the owner, touches it and holds it busy
//! (`../shared/spec/2025-11-25/basic/transports.mdx` §Session Management:
//! another client's session is answered as an unknown one, 404). The
//! result is a [`Caller`]; everything after admission takes it.
//! Refusals are counted in `mcp_edge_refused_total` (`auth`, `rate`) and
//! logged with the peer address under [`crate::access::Throttle`].

use super::app::{App, Body, Peer, Who};
use super::reply::{refuse, Refusal};
use super::sessions::Held;
use crate::access::AuthError;
use crate::protocol::{self, ProtocolVersion, RpcError};
use crate::session::SessionId;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The era a downstream client speaks, per message (the upstream face has
/// [`crate::upstream::UpstreamEra`]; config has its own preference).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ClientEra {
    /// In a legacy session with this negotiated version.
    Legacy(SessionId, ProtocolVersion),
    /// Modern, stateless.
    Modern,
}

impl ClientEra {
    /// The legacy session id as sent, `None` for a modern request.
    pub(super) fn session(&self) -> Option<String> {
        match self {
            ClientEra::Legacy(sid, _) => Some(sid.to_header()),
            ClientEra::Modern => None,
        }
    }
}

/// What a request's head says, read once ([`head`]).
pub(super) struct Head {
    /// Who sent it.
    pub(super) who: Who,
    /// Its `Mcp-Session-Id`: `None` when absent, `Some(Err)` when it is no
    /// id mcp-edge could have made (as an unknown session to a legacy
    /// request; ignored by a modern one).
    pub(super) session: Option<Result<SessionId, ()>>,
}

impl Head {
    /// The session id, or the refusal of a malformed one (404 as for an
    /// unknown session); `Ok(None)` when absent.
    pub(super) fn session(&self) -> Result<Option<SessionId>, Refusal> {
        match self.session {
            None => Ok(None),
            Some(Ok(id)) => Ok(Some(id)),
            Some(Err(())) => Err(not_found()),
        }
    }

    /// The session id of a well-formed header that names a session of
    /// this caller's still in the table (expired but not yet swept counts:
    /// its calls may still run): what a cancellation or an answer to a
    /// relayed request may act for.
    pub(super) fn own_session(&self, app: &App) -> Option<SessionId> {
        let id = self.session.and_then(Result::ok)?;
        (app.sessions.owner(&id) == Some(self.who.owner())).then_some(id)
    }
}

/// One admitted request: who, in which era, holding which session.
pub(super) struct Caller {
    /// Who sent it.
    pub(super) who: Who,
    /// Its era (and legacy session).
    pub(super) era: ClientEra,
    /// A legacy request's hold on its session for as long as it is served
    /// (the session as found: version, declared capabilities, log floor).
    pub(super) held: Option<Held>,
}

impl Caller {
    /// Whether the request is modern (stateless).
    pub(super) fn modern(&self) -> bool {
        self.era == ClientEra::Modern
    }
}

/// The head's step: the caller (or the 401 to send instead) and its
/// session id, parsed once.
pub(super) fn head<B>(app: &App, req: &Request<B>) -> Result<Head, Response<Body>> {
    let access = app.access();
    let peer = req.extensions().get::<Peer>();
    let authorization = req.headers().get(http::header::AUTHORIZATION);
    let subject = peer.and_then(|p| p.cert_subject.as_deref());
    let principal = match access.authenticate(authorization.map(HeaderValue::as_bytes), subject) {
        Ok(p) => p,
        Err(e) => return Err(unauthorized(app, peer, e)),
    };
    let who = Who { access, principal };
    if let Some(conn) = req.extensions().get::<super::conns::Tracker>() {
        if let Err(e) = conn.claim(who.access.shares(), who.owner()) {
            return Err(over_share(app, &who, e));
        }
    }
    let session = (req.headers().get("mcp-session-id"))
        .map(|v| v.to_str().ok().and_then(SessionId::parse).ok_or(()));
    Ok(Head { who, session })
}

/// The 503 of a request whose client holds its share of the connections
/// (counted as `connection_share`); the connection ends with it.
fn over_share(app: &App, who: &Who, e: super::conns::ShareRefusal) -> Response<Body> {
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

/// What [`admit`] found a request to be.
pub(super) enum Admitted {
    /// A legacy `initialize`: a new session for this caller.
    Initialize(Who),
    /// Any other request.
    Call(Caller),
}

/// A request's step: its charge to the rate, its era and, when legacy,
/// its session (one lookup).
pub(super) fn admit(
    app: &Arc<App>,
    head: &Head,
    h: &HeaderMap,
    method: &str,
    params: Option<&Value>,
) -> Result<Admitted, Refusal> {
    charge(app, &head.who).map_err(|e| Refusal(StatusCode::TOO_MANY_REQUESTS, e))?;
    let who = head.who.clone();
    if method == "initialize" && !has_modern_meta(params) {
        return Ok(Admitted::Initialize(who));
    }
    let Some(id) = legacy_session(h, head, method, params)? else {
        return Ok(Admitted::Call(Caller {
            who,
            era: ClientEra::Modern,
            held: None,
        }));
    };
    let held = app
        .sessions
        .enter(id, who.owner())
        .map_err(|_| not_found())?;
    Ok(Admitted::Call(Caller {
        era: ClientEra::Legacy(id, held.seen.version),
        who,
        held: Some(held),
    }))
}

/// `None` for a modern request (per-request `_meta` version, or a modern
/// `MCP-Protocol-Version` without a session); for a legacy one, its
/// session id (needed), with a legacy header version if any
/// (2025-11-25 transports.mdx §Protocol Version Header: absent →
/// 2025-03-26; unsupported → 400).
fn legacy_session(
    h: &HeaderMap,
    head: &Head,
    method: &str,
    params: Option<&Value>,
) -> Result<Option<SessionId>, Refusal> {
    let header_version = h.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    let legacy_header = header_version
        .and_then(ProtocolVersion::parse)
        .is_some_and(|v| v.is_legacy());
    // A modern request ignores any Mcp-Session-Id (2026-07-28 is
    // stateless), well-formed or not.
    if has_modern_meta(params)
        || (header_version.is_some() && !legacy_header && head.session.is_none())
    {
        return Ok(None);
    }
    let Some(id) = head.session()? else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            protocol::INVALID_REQUEST,
            format!("Bad Request: {method} needs an Mcp-Session-Id (send initialize first) or modern _meta"),
        ));
    };
    match header_version {
        Some(hv) if !legacy_header => Err(refuse(
            StatusCode::BAD_REQUEST,
            protocol::INVALID_REQUEST,
            format!("Bad Request: unsupported MCP-Protocol-Version {hv:?} in a legacy session"),
        )),
        _ => Ok(Some(id)),
    }
}

/// Whether a request carries the modern per-request protocol version in
/// `_meta`: an `initialize` that does is a modern request for a removed
/// method, not a legacy handshake (`../shared/spec/2026-07-28/versioning.mdx`
/// §Backward Compatibility with Initialization-Based Versions).
pub(super) fn has_modern_meta(params: Option<&Value>) -> bool {
    protocol::params_meta(params).is_some_and(|m| m.get(protocol::META_PROTOCOL_VERSION).is_some())
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

/// Takes one request from `who`'s rate (a single request, each request
/// of a batch, or a stream when opened); the error to answer when it is
/// used up (with `data.retryAfterSeconds`, which becomes `Retry-After`),
/// counted as `mcp_edge_refused_total{limit="rate"}`.
pub(super) fn charge(app: &App, who: &Who) -> Result<(), RpcError> {
    let wait = match who.access.admit(who.principal, Instant::now()) {
        Ok(()) => return Ok(()),
        Err(wait) => wait,
    };
    crate::metrics::refused("rate");
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

fn peer_addr(peer: Option<&Peer>) -> String {
    peer.map_or_else(|| "-".to_owned(), |p| p.addr.to_string())
}

fn unauthorized(app: &App, peer: Option<&Peer>, e: AuthError) -> Response<Body> {
    crate::metrics::refused("auth");
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
