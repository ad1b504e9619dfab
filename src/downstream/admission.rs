//! Admission: whether a request on `/mcp` may come in, who sent it, in
//! which era and session it acts, decided once, before anything is served.
//!
//! Two steps. [`head`], once per HTTP request, before the body is read:
//! - `Host`, target authority and `Origin` (DNS-rebinding protection,
//!   `../shared/spec/2026-07-28/transports-streamable-http.mdx` §Security &
//!   Endpoint; `../shared/spec/2025-11-25/transports.mdx` §Security
//!   Warning): loopback hosts on any port, the listen address's own host,
//!   `server.allowed_hosts` / `server.allowed_origins` (403). Strict heads:
//!   two `Authorization` or two `Host` headers are a 400 (RFC 9110 §5.3,
//!   RFC 9112 §3.2); an absolute-form target's authority (RFC 9112 §3.2.2)
//!   passes the `Host` check too and must name the same authority as `Host`;
//! - what `Accept` allows ([`Accept`], RFC 9110 §12.5.1);
//! - the caller's credentials ([`crate::access::Access::authenticate`]: 401
//!   with `WWW-Authenticate: Bearer realm="mcp-edge"`, RFC 6750 §3);
//! - the `Mcp-Session-Id` it names, parsed once.
//!
//! [`admit`], per JSON-RPC request once the message is read: its charge to
//! the client's rate (429 with `Retry-After`; GET streams are charged as
//! they open; notifications, answers and DELETE never, so a client over
//! its rate can still cancel, answer and end its session), its era
//! (`../shared/spec/2026-07-28/versioning.mdx` §Backward Compatibility) and,
//! when legacy, its session in one lookup: owner checked, touched, held
//! busy, the request registered for cancellation (2025-11-25
//! basic/transports.mdx §Session Management: another client's session is
//! an unknown one, 404). The result is the one request type, [`Call`].
//! Refusals are counted in `mcp_edge_refused_total` and logged under
//! [`crate::access::Throttle`].

use super::app::{App, Body, Peer, Who};
use super::reply::{self, refuse, Refusal};
use super::sessions::Held;
use crate::access::{AuthError, HeadError};
use crate::instance::InstanceId;
use crate::protocol::{self, ProtocolVersion, RpcError};
use crate::session::SessionId;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;
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
    /// What its `Accept` allows.
    pub(super) accept: Accept,
    /// Its `Mcp-Session-Id`: `None` when absent, `Some(Err)` when it is no
    /// id this box could have made — `Err(Some(box))` when it is another
    /// box's (as an unknown session to a legacy request, named in the
    /// answer; ignored by a modern one).
    pub(super) session: Option<Result<SessionId, Option<InstanceId>>>,
    /// Sent on the HTTP+SSE transport ([`super::sse_transport`]): `session`
    /// is the one its stream opened, named by its `sessionId`.
    pub(super) sse: bool,
    /// This box (an id of another is refused naming both).
    pub(super) here: InstanceId,
}

impl Head {
    /// The session id, or the refusal of a malformed one or another box's
    /// (404 as for an unknown session: the client initializes again);
    /// `Ok(None)` when absent.
    pub(super) fn session(&self) -> Result<Option<SessionId>, Refusal> {
        match self.session {
            None => Ok(None),
            Some(Ok(id)) => Ok(Some(id)),
            Some(Err(None)) => Err(reply::not_found()),
            Some(Err(Some(issued))) => Err(reply::elsewhere(issued, self.here)),
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

/// What a request's head is ([`head`]).
pub(super) enum Entry {
    /// A CORS preflight (`OPTIONS`) from an allowed origin: it carries no
    /// credentials (Fetch §CORS-preflight request).
    Preflight,
    /// Any other request, from a known caller.
    Request(Head),
    /// The 401 of a request from an allowed origin without a known
    /// caller's credentials.
    Unauthorized(Response<Body>),
}

/// The head's step: `Host`/`Origin` (400, 403), then, unless it is a
/// preflight, the caller (or the 401 to send instead), what it accepts and
/// its session id, parsed once.
pub(super) fn head<B>(app: &App, req: &Request<B>) -> Result<Entry, Response<Body>> {
    match app.origin.check_head(req.headers(), req.uri()) {
        Ok(()) => {}
        Err(HeadError::Malformed { limit, why }) => {
            crate::metrics::refused(limit);
            let why = format!("Bad request: {why}");
            return Err(head_refusal(app, StatusCode::BAD_REQUEST, why));
        }
        Err(HeadError::Forbidden(why)) => {
            metrics::counter!(crate::metrics::FORBIDDEN).increment(1);
            let why = format!("Forbidden: {why}");
            return Err(head_refusal(app, StatusCode::FORBIDDEN, why));
        }
    }
    if req.method() == http::Method::OPTIONS {
        return Ok(Entry::Preflight);
    }
    if app.is_stopping() {
        return Err(stopping(req));
    }
    let access = app.access();
    let peer = req.extensions().get::<Peer>();
    let client = peer.map(|p| p.client(&app.server.fleet, req.headers()));
    let authorization = req.headers().get(header::AUTHORIZATION);
    let subject = peer.and_then(|p| p.cert_subject.as_deref());
    let principal = match access.authenticate(authorization.map(HeaderValue::as_bytes), subject) {
        Ok(p) => p,
        Err(e) => return Ok(Entry::Unauthorized(unauthorized(app, client, e))),
    };
    let session =
        (req.headers().get("mcp-session-id")).map(|v| session_id(v.to_str().ok(), app.instance));
    Ok(Entry::Request(Head {
        who: Who {
            access,
            principal,
            peer: client,
        },
        accept: Accept::of(req.headers()),
        session,
        sse: false,
        here: app.instance,
    }))
}

/// A session id of box `here`'s; `Err(Some(box))` for another box's,
/// `Err(None)` for no id at all.
pub(super) fn session_id(
    value: Option<&str>,
    here: InstanceId,
) -> Result<SessionId, Option<InstanceId>> {
    match value.and_then(SessionId::parse) {
        Some(id) if id.instance() == here => Ok(id),
        Some(id) => Err(Some(id.instance())),
        None => Err(None),
    }
}

/// A request that arrived after shutdown began (the drain's grace is over
/// and calls in flight are finishing): a legacy session's gets 404 (its
/// session ended; the client initializes again, on another box), anything
/// else 503 with `Retry-After: 1` and `Connection: close` (nothing was
/// done: a balancer may send it to another box).
fn stopping<B>(req: &Request<B>) -> Response<Body> {
    crate::metrics::refused("stopping");
    let session = req.headers().contains_key("mcp-session-id")
        || (req.uri().query()).is_some_and(|q| q.contains("sessionId="));
    if session {
        let why = "Session not found: this mcp-edge is stopping; initialize again";
        return refuse(StatusCode::NOT_FOUND, protocol::INVALID_REQUEST, why)
            .into_response(Value::Null);
    }
    let why = "this mcp-edge is stopping; send the request again (to another box)";
    let err = RpcError::new(protocol::INTERNAL_ERROR, why)
        .with_data(serde_json::json!({"retryAfterSeconds": 1, "limit": "stopping"}));
    let mut resp = Refusal(StatusCode::SERVICE_UNAVAILABLE, err).into_response(Value::Null);
    resp.headers_mut()
        .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
    resp
}

/// The 400 or 403 of a head refused before credentials are read.
fn head_refusal(app: &App, status: StatusCode, why: String) -> Response<Body> {
    if let Some(skipped) = app.refusal_log.allow(Instant::now()) {
        tracing::info!(skipped, "{}: {why}", status.as_u16());
    }
    refuse(status, protocol::INVALID_REQUEST, why).into_response(Value::Null)
}

/// One admitted request: the one request type of the pipeline, made here
/// and taken by everything after admission.
pub(super) struct Call {
    pub(super) id: Value,
    pub(super) method: String,
    /// A legacy session's call carries the capabilities the session
    /// declared ([`declare_caps`]).
    pub(super) params: Option<Value>,
    pub(super) caller: Caller,
    /// Size of the message as received (the audit log's `request_bytes`).
    pub(super) request_bytes: usize,
    /// A legacy session's request answered from the session's own state,
    /// decided here ([`SessionOp`]).
    pub(super) from_session: Option<SessionOp>,
}

/// A legacy session's request answered here at once from the session's
/// own state, never sent upstream: not registered for cancellation, and
/// served by `answered_here`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum SessionOp {
    /// `logging/setLevel`: the session's log floor.
    SetLevel,
    /// `resources/subscribe` or `resources/unsubscribe`.
    Subscription,
}

impl SessionOp {
    /// What `method` is, when a legacy session's request of it is one.
    fn of(method: &str) -> Option<SessionOp> {
        match method {
            "logging/setLevel" => Some(SessionOp::SetLevel),
            "resources/subscribe" | "resources/unsubscribe" => Some(SessionOp::Subscription),
            _ => None,
        }
    }
}

/// What [`admit`] found a request to be. Returned once and taken apart at
/// once, never kept: boxing the larger variant would cost every call an
/// allocation to save bytes of a value that lives for one match.
#[allow(clippy::large_enum_variant)]
pub(super) enum Admitted {
    /// A legacy `initialize`: a new session for this caller (id, params).
    Initialize(Who, Value, Option<Value>),
    /// Any other request.
    Call(Call),
}

/// A request's step: its charge to the rate, its era and, when legacy,
/// its session (one lookup, which also registers it for cancellation).
pub(super) fn admit(
    app: &Arc<App>,
    head: &Head,
    h: &HeaderMap,
    (id, method, params): (Value, String, Option<Value>),
    request_bytes: usize,
) -> Result<Admitted, (Value, Refusal)> {
    if let Err(e) = charge(app, &head.who) {
        return Err((id, Refusal(StatusCode::TOO_MANY_REQUESTS, e)));
    }
    let who = head.who.clone();
    if method == "initialize" && !has_modern_meta(params.as_ref()) {
        return Ok(Admitted::Initialize(who, id, params));
    }
    let sid = match legacy_session(h, head, &method, params.as_ref()) {
        Err(r) => return Err((id, r)),
        Ok(sid) => sid,
    };
    let (caller, params, from_session) = match sid {
        None => (
            Caller {
                who,
                era: ClientEra::Modern,
                held: None,
            },
            params,
            None,
        ),
        Some(sid) => {
            // Registered for cancellation unless answered at once.
            let op = SessionOp::of(&method);
            let Ok(held) = app
                .sessions
                .enter(sid, who.owner(), op.is_none().then_some(&id))
            else {
                return Err((id, reply::not_found()));
            };
            let params = declare_caps(held.seen.caps, &method, params);
            let era = ClientEra::Legacy(sid, held.seen.version);
            (
                Caller {
                    who,
                    era,
                    held: Some(held),
                },
                params,
                op,
            )
        }
    };
    let call = Call {
        id,
        method,
        params,
        caller,
        request_bytes,
        from_session,
    };
    Ok(Admitted::Call(call))
}

/// `params` of a legacy session's call that a modern upstream may answer
/// with an `InputRequiredResult` (`tools/call`, `prompts/get`,
/// `resources/read`: `../shared/spec/2026-07-28/patterns-mrtr.mdx`
/// §Supported Requests), with the capabilities the session declared at
/// `initialize` as the modern `_meta["io.modelcontextprotocol/clientCapabilities"]`
/// (2026-07-28 index.mdx §_meta; any value the client put there replaced),
/// so the upstream asks only for what the caller can give, and its
/// `tools/list` shows the tools a listing with them would
/// (`upstream::scopes`);
/// `upstream::era::adapt_params` keeps it for a modern upstream and removes
/// it for a legacy one.
fn declare_caps(
    caps: protocol::ClientCaps,
    method: &str,
    mut params: Option<Value>,
) -> Option<Value> {
    if !matches!(
        method,
        "tools/call" | "prompts/get" | "resources/read" | "tools/list"
    ) {
        return params;
    }
    if method == "tools/list" && params.is_none() {
        params = Some(json!({}));
    }
    if let Some(Value::Object(p)) = params.as_mut() {
        let meta = p.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(m) = meta {
            m.insert(protocol::META_CLIENT_CAPABILITIES.into(), caps.to_json());
        }
    }
    params
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
    // 2024-11-05 is the HTTP+SSE transport's revision only.
    let legacy_header = header_version
        .and_then(ProtocolVersion::parse)
        .is_some_and(|v| v.is_legacy() && (head.sse || v.streamable()));
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
    Err(reply::rate_limited(who.name(), wait))
}

/// The 401 of unknown credentials, logged with the client's address.
fn unauthorized(app: &App, client: Option<std::net::IpAddr>, e: AuthError) -> Response<Body> {
    crate::metrics::refused("auth");
    if let Some(skipped) = app.refusal_log.allow(Instant::now()) {
        let peer = client.map_or_else(|| "-".to_owned(), |p| p.to_string());
        tracing::warn!(%peer, skipped, "401: {e}");
    }
    super::reply::unauthorized(e)
}

/// What the `Accept` header's media ranges allow, read in one pass (RFC 9110
/// §12.5.1): each comma-separated range compared whole, ASCII case ignored,
/// parameters after `;` skipped except `q=0` ("not acceptable"). The most
/// specific range that names a type decides: `text/event-stream` over
/// `text/*` over `*/*`. Nothing is allocated; this runs on every POST.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct Accept {
    /// `text/event-stream`: relayed messages can be streamed.
    pub sse: bool,
    /// `application/json`
    pub json: bool,
}

/// What the ranges said of one type, at each specificity (`None`: not named).
#[derive(Default)]
struct Said {
    exact: Option<bool>,
    subtype_any: Option<bool>,
}

impl Said {
    fn verdict(&self, any: Option<bool>) -> bool {
        self.exact.or(self.subtype_any).or(any).unwrap_or(false)
    }
}

/// Records `ok` for one level: acceptable once any range accepts it.
fn say(level: &mut Option<bool>, ok: bool) {
    *level = Some(level.unwrap_or(false) || ok);
}

impl Accept {
    /// Reads the request's `Accept` headers.
    pub fn of(h: &HeaderMap) -> Accept {
        let (mut sse, mut json, mut any) = (Said::default(), Said::default(), None);
        let ranges =
            (h.get_all(header::ACCEPT).iter()).flat_map(|v| v.as_bytes().split(|&b| b == b','));
        for range in ranges {
            let mut parts = range.split(|&b| b == b';');
            let media = parts.next().unwrap_or_default().trim_ascii();
            let ok = !parts.any(|p| is_q_zero(p.trim_ascii()));
            match media {
                b"*/*" => say(&mut any, ok),
                m if m.eq_ignore_ascii_case(b"text/event-stream") => say(&mut sse.exact, ok),
                m if m.eq_ignore_ascii_case(b"application/json") => say(&mut json.exact, ok),
                m if m.eq_ignore_ascii_case(b"text/*") => say(&mut sse.subtype_any, ok),
                m if m.eq_ignore_ascii_case(b"application/*") => say(&mut json.subtype_any, ok),
                _ => {}
            }
        }
        Accept {
            sse: sse.verdict(any),
            json: json.verdict(any),
        }
    }

    /// SSE but not JSON: every answer goes as an SSE stream.
    pub fn sse_only(self) -> bool {
        self.sse && !self.json
    }
}

/// `q=0`, `q=0.`, `q=0.000` (RFC 9110 §12.4.2): "not acceptable".
fn is_q_zero(param: &[u8]) -> bool {
    match param.split_first() {
        Some((q, rest)) if q.eq_ignore_ascii_case(&b'q') => match rest.trim_ascii_start() {
            [b'=', v @ ..] => {
                let v = v.trim_ascii();
                v.first() == Some(&b'0') && v[1..].iter().all(|&b| b == b'.' || b == b'0')
            }
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod admission_tests;
