//! Which era serves one downstream message, and the legacy session it
//! acts in (`../shared/spec/2026-07-28/versioning.mdx` §Backward
//! Compatibility; `../shared/spec/2025-11-25/transports.mdx` §Session
//! Management): [`decide_era`], with the hold a legacy request keeps on its
//! session's idle clock ([`Held`]).

use super::reply::{refuse, Refusal};
use super::sessions::Held;
use super::App;
use crate::protocol::{self, ProtocolVersion};
use crate::session::SessionId;
use http::{HeaderMap, StatusCode};
use serde_json::Value;
use std::sync::Arc;

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

pub(super) fn session_header(h: &HeaderMap) -> Result<Option<SessionId>, Refusal> {
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

/// The era of one message of `owner`'s, and for a legacy one the hold on
/// its session ([`super::sessions::Sessions::enter`]: one lookup).
pub(super) fn decide_era(
    app: &Arc<App>,
    h: &HeaderMap,
    method: &str,
    params: Option<&Value>,
    owner: u64,
) -> Result<(ClientEra, Option<Held>), Refusal> {
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
        return Ok((ClientEra::Modern, None));
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
    match app.sessions.enter(id, owner) {
        Ok(held) => Ok((ClientEra::Legacy(id, held.seen.version), Some(held))),
        Err(_) => Err(refuse(
            StatusCode::NOT_FOUND,
            protocol::INVALID_REQUEST,
            "Session not found",
        )),
    }
}

/// Whether a request carries the modern per-request protocol version in
/// `_meta`: an `initialize` that does is a modern request for a removed
/// method, not a legacy handshake (`../shared/spec/2026-07-28/versioning.mdx`
/// §Backward Compatibility with Initialization-Based Versions).
pub(super) fn has_modern_meta(params: Option<&Value>) -> bool {
    protocol::params_meta(params).is_some_and(|m| m.get(protocol::META_PROTOCOL_VERSION).is_some())
}
