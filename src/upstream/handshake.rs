//! Era detection and the opening exchange with an upstream.
//!
//! - `era = "modern"`: `server/discover` (`../shared/spec/2026-07-28/server-discover.mdx`).
//! - `era = "legacy"`: `initialize` + `notifications/initialized`
//!   (`../shared/spec/2025-11-25/lifecycle.mdx` §Initialization).
//! - `era = "auto"`: probe with `server/discover`; a `DiscoverResult` or a
//!   recognized modern error means modern, anything else (other error, HTTP
//!   4xx without a modern body, timeout) means legacy
//!   (`../shared/spec/2026-07-28/versioning.mdx` §Backward Compatibility;
//!   `transports-stdio.mdx` and `transports-streamable-http.mdx` §Backward Compatibility).
//!   An HTTP upstream that answered `server/discover` is then offered an
//!   `initialize` too: a dual-era server (versioning.mdx §Terminology)
//!   opens a legacy session, and legacy callers are spoken to there, each
//!   in its own era (§Backward Compatibility: "A dual-era server **MAY**
//!   serve both eras concurrently on the same endpoint"; an `initialize`
//!   selects legacy semantics scoped to the session on HTTP, but to the
//!   whole process on stdio, so a stdio upstream keeps one era).

use super::era::{adapt_params, initialize_params, CallEra, UpstreamEra};
use super::{Conn, SendError};
use crate::config::EraPreference;
use crate::limits;
use crate::protocol::{self, Payload, ProtocolVersion};
use serde_json::{json, Value};
use std::time::Duration;

/// What the opening exchange learnt about an upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Negotiated {
    /// The era (and legacy version) in use.
    pub era: UpstreamEra,
    /// The upstream's `capabilities` object.
    pub capabilities: Value,
    /// The upstream's `serverInfo` (`Implementation`), if it sent one.
    pub server_info: Option<Value>,
    /// The upstream's `instructions`, if any.
    pub instructions: Option<String>,
    /// A dual-era upstream's legacy session, opened beside the modern
    /// era (`era = "auto"`, HTTP): legacy callers are spoken to there.
    pub legacy: Option<LegacySide>,
}

/// What a dual-era upstream's `initialize` answered.
#[derive(Debug, Clone, PartialEq)]
pub struct LegacySide {
    /// The legacy version negotiated.
    pub version: ProtocolVersion,
    /// Its `capabilities` in that session (they may differ from the
    /// modern discovery result's: `resources.subscribe`, say).
    pub capabilities: Value,
}

impl Negotiated {
    /// True when the upstream declared capability `name` (e.g. `"tools"`).
    pub fn has(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(|v| !v.is_null())
    }

    /// The era a call is spoken in: a legacy caller's in the legacy
    /// session of a dual-era upstream, every other in the upstream's own.
    pub fn era_for(&self, call: CallEra) -> UpstreamEra {
        match (call, &self.legacy) {
            (CallEra::Legacy, Some(l)) => UpstreamEra::Legacy(l.version),
            _ => self.era,
        }
    }

    /// The protocol versions spoken with the upstream, its own era's first.
    pub fn versions(&self) -> Vec<&'static str> {
        let own = match self.era {
            UpstreamEra::Modern => ProtocolVersion::MODERN,
            UpstreamEra::Legacy(v) => v,
        };
        let legacy = self.legacy.as_ref().map(|l| l.version.as_str());
        std::iter::once(own.as_str()).chain(legacy).collect()
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// Transport or protocol failure during the exchange.
    #[error("{step}: {source}")]
    Send {
        /// `server/discover` or `initialize`.
        step: &'static str,
        /// What went wrong.
        source: SendError,
    },
    /// The upstream answered with something mcp-edge cannot speak.
    #[error("{0}")]
    Incompatible(String),
}

/// Runs the opening exchange for the configured era.
pub async fn open(conn: &Conn, era: EraPreference) -> Result<Negotiated, HandshakeError> {
    if let Conn::Builtin = conn {
        return Ok(Negotiated {
            era: UpstreamEra::Modern,
            capabilities: json!({"tools": {}}),
            server_info: Some(
                json!({"name": "mcp-edge-builtin", "version": env!("CARGO_PKG_VERSION")}),
            ),
            instructions: None,
            legacy: None,
        });
    }
    let n = match era {
        EraPreference::Modern => discover(conn, limits::CONNECT_TIMEOUT).await,
        EraPreference::Legacy => initialize(conn, limits::CONNECT_TIMEOUT).await,
        // The 2024-11-05 HTTP+SSE transport carries legacy sessions only.
        EraPreference::Auto if conn.legacy_only() => {
            initialize(conn, limits::CONNECT_TIMEOUT).await
        }
        EraPreference::Auto => auto(conn).await,
    }?;
    conn.spoken(n.era, n.legacy.as_ref().map(|l| l.version));
    Ok(n)
}

/// `era = "auto"`: `server/discover`, then, for an HTTP upstream that
/// answered it, an `initialize` to learn whether it is dual-era; on a
/// failed discovery the fallback to `initialize`.
async fn auto(conn: &Conn) -> Result<Negotiated, HandshakeError> {
    match discover(conn, limits::ERA_PROBE_TIMEOUT).await {
        Ok(mut n) => {
            if conn.has_sessions() {
                n.legacy = dual(conn).await;
            }
            Ok(n)
        }
        // Refused credentials, no token to be had, or "come back later"
        // say nothing about the era: no fallback request (it would be
        // refused the same way, and its error would hide this one).
        // Neither does an upstream we could not reach at all.
        Err(
            e @ HandshakeError::Send {
                source:
                    SendError::Auth(_)
                    | SendError::OAuth(_)
                    | SendError::RetryAfter { .. }
                    | SendError::Transport(_),
                ..
            },
        ) => Err(e),
        Err(e @ HandshakeError::Incompatible(_)) => Err(e),
        Err(HandshakeError::Send { source, .. }) => {
            if let SendError::Rpc(r) | SendError::Http { rpc: Some(r), .. } = &source {
                if r.is_modern_error() {
                    return Err(HandshakeError::Incompatible(format!(
                        "upstream is modern but refused server/discover: {r}"
                    )));
                }
            }
            tracing::debug!(error = %crate::logline::printable(&source.to_string()), "server/discover probe failed; falling back to initialize");
            initialize(conn, limits::CONNECT_TIMEOUT).await
        }
    }
}

/// The legacy session of a modern HTTP upstream that also speaks a legacy
/// era, the whole exchange within `limits::ERA_PROBE_TIMEOUT`; `None` (a
/// modern-only server: 400 for a request without the modern fields, or any
/// other failure) leaves it modern only, and a session opened half-way is
/// ended.
async fn dual(conn: &Conn) -> Option<LegacySide> {
    let probe = initialize(conn, limits::ERA_PROBE_TIMEOUT);
    let why = match tokio::time::timeout(limits::ERA_PROBE_TIMEOUT, probe).await {
        Ok(Ok(Negotiated {
            era: UpstreamEra::Legacy(version),
            capabilities,
            ..
        })) => {
            return Some(LegacySide {
                version,
                capabilities,
            })
        }
        Ok(Ok(_)) => "initialize answered in no legacy era".to_string(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {:?}", limits::ERA_PROBE_TIMEOUT),
    };
    tracing::debug!(error = %crate::logline::printable(&why), "no legacy session beside the modern era: modern only");
    conn.drop_session(ProtocolVersion::LATEST_LEGACY).await;
    None
}

async fn discover(conn: &Conn, timeout: Duration) -> Result<Negotiated, HandshakeError> {
    let params = adapt_params(UpstreamEra::Modern, None);
    let r = conn
        .send(
            "server/discover",
            params,
            UpstreamEra::Modern,
            timeout,
            None,
            None,
        )
        .await
        .map(Payload::into_value)
        .map_err(|source| HandshakeError::Send {
            step: "server/discover",
            source,
        })?;
    let versions = r.get("supportedVersions").and_then(Value::as_array);
    let speaks = versions.is_some_and(|v| {
        v.iter()
            .any(|x| x.as_str() == Some(ProtocolVersion::MODERN.as_str()))
    });
    if !speaks {
        return Err(HandshakeError::Incompatible(format!(
            "server/discover lists no version mcp-edge speaks: {}",
            versions
                .map(|v| Value::Array(v.clone()).to_string())
                .unwrap_or_else(|| "none".into())
        )));
    }
    Ok(Negotiated {
        era: UpstreamEra::Modern,
        capabilities: r.get("capabilities").cloned().unwrap_or_else(|| json!({})),
        server_info: r
            .get("_meta")
            .and_then(|m| m.get(protocol::META_SERVER_INFO))
            .cloned(),
        instructions: r
            .get("instructions")
            .and_then(Value::as_str)
            .map(String::from),
        legacy: None,
    })
}

async fn initialize(conn: &Conn, timeout: Duration) -> Result<Negotiated, HandshakeError> {
    let asked = ProtocolVersion::LATEST_LEGACY;
    let params = initialize_params(asked, crate::protocol::ClientCaps::RELAYED);
    let r = conn
        .send(
            "initialize",
            Some(params),
            UpstreamEra::Legacy(asked),
            timeout,
            None,
            None,
        )
        .await
        .map(Payload::into_value)
        .map_err(|source| HandshakeError::Send {
            step: "initialize",
            source,
        })?;
    let got = r
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = match ProtocolVersion::parse(got) {
        Some(v) if v.is_legacy() => v,
        _ => {
            return Err(HandshakeError::Incompatible(format!(
                "initialize answered protocolVersion {got:?}, which mcp-edge does not speak"
            )))
        }
    };
    let era = UpstreamEra::Legacy(version);
    conn.notify("notifications/initialized", None, era)
        .await
        .map_err(|source| HandshakeError::Send {
            step: "notifications/initialized",
            source,
        })?;
    Ok(Negotiated {
        era,
        capabilities: r.get("capabilities").cloned().unwrap_or_else(|| json!({})),
        server_info: r.get("serverInfo").cloned(),
        instructions: r
            .get("instructions")
            .and_then(Value::as_str)
            .map(String::from),
        legacy: None,
    })
}
