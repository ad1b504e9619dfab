//! The era spoken with an upstream ([`UpstreamEra`]) and what it implies
//! for every request: the per-request `_meta` fields of a modern upstream,
//! their removal for a legacy one ([`adapt_params`]), and mcp-edge's own
//! `subscriptions/listen` request for list changes ([`listen_params`],
//! [`LISTEN_ID`]).

use crate::protocol::{self, ProtocolVersion};
use serde_json::{json, Map, Value};

/// The era spoken with one upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamEra {
    /// `initialize`-based, with the negotiated version.
    Legacy(ProtocolVersion),
    /// 2026-07-28: `_meta` and routing headers on every request.
    Modern,
}

/// The era a call's caller speaks, as far as the upstream cares: a
/// dual-era upstream ([`super::handshake::LegacySide`]) is spoken to in
/// the caller's era, every other in its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEra {
    /// The upstream's own era: a modern caller's calls, mcp-edge's own
    /// requests (catalog, probes, task polling), and calls that need what
    /// only the modern era has (a task created for a legacy caller).
    Own,
    /// A legacy session's call: to a dual-era upstream's legacy session.
    Legacy,
}

/// The params of mcp-edge's `initialize` to a legacy upstream in `version`
/// declaring `caps`: the first one (`upstream::handshake`), one after an
/// expired session, and one per caller's capability set
/// (`upstream::http::lanes`) alike. Its own session declares the client
/// features mcp-edge can pass on to a caller
/// — `elicitation` (form and URL), `sampling` and `roots`
/// ([`protocol::ClientCaps::RELAYED`]; 2025-11-25 lifecycle.mdx
/// §Initialization, client/*.mdx). A legacy caller gets the upstream's
/// request on its call's stream, a modern one as an `InputRequiredResult`,
/// each only if it declared the capability itself (otherwise the upstream's
/// request is answered with an error and a modern caller gets -32021).
/// Without these a server that checks its client's capabilities would
/// never ask.
pub(super) fn initialize_params(version: ProtocolVersion, caps: protocol::ClientCaps) -> Value {
    json!({
        "protocolVersion": version.as_str(),
        "capabilities": caps.to_json(),
        "clientInfo": client_info(),
    })
}

/// The `clientInfo` mcp-edge presents upstream (rmcp's `Implementation` model type).
fn client_info() -> Value {
    let i = rmcp::model::Implementation::new("mcp-edge", env!("CARGO_PKG_VERSION"));
    serde_json::to_value(i).unwrap_or_else(|_| json!({"name": "mcp-edge"}))
}

/// The `_meta` fields every modern request carries (2026-07-28 index.mdx §_meta).
fn modern_meta(meta: &mut Map<String, Value>) {
    meta.insert(
        protocol::META_PROTOCOL_VERSION.into(),
        ProtocolVersion::MODERN.as_str().into(),
    );
    meta.entry(protocol::META_CLIENT_CAPABILITIES)
        .or_insert_with(|| json!({}));
    meta.entry(protocol::META_CLIENT_INFO)
        .or_insert_with(client_info);
}

/// Adapts a caller's params to the upstream's era: a modern upstream gets the
/// per-request `_meta` fields (the caller's capabilities are kept when it sent
/// them); a legacy upstream gets the per-request `io.modelcontextprotocol/*`
/// fields (protocolVersion, clientInfo, clientCapabilities, logLevel: 2026-07-28
/// index.mdx §Per-request protocol fields) removed (it negotiated them in
/// `initialize`). Every other `_meta`
/// key (e.g. `progressToken`, vendor keys) passes unchanged.
pub fn adapt_params(era: UpstreamEra, params: Option<Value>) -> Option<Value> {
    match era {
        UpstreamEra::Modern => {
            let mut p = match params {
                Some(Value::Object(o)) => o,
                _ => Map::new(),
            };
            let meta = p.entry("_meta").or_insert_with(|| json!({}));
            if !meta.is_object() {
                *meta = json!({});
            }
            modern_meta(meta.as_object_mut().expect("object"));
            Some(Value::Object(p))
        }
        UpstreamEra::Legacy(_) => {
            let mut params = params?;
            if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
                meta.remove(protocol::META_PROTOCOL_VERSION);
                meta.remove(protocol::META_CLIENT_INFO);
                meta.remove(protocol::META_CLIENT_CAPABILITIES);
                meta.remove("io.modelcontextprotocol/logLevel");
                if meta.is_empty() {
                    params
                        .as_object_mut()
                        .expect("params object")
                        .remove("_meta");
                }
            }
            Some(params)
        }
    }
}

/// Asks a modern upstream for log messages from `floor` (a rank of
/// [`crate::relay::LOG_LEVELS`]) up, unless the caller asked
/// itself (`params._meta` made by [`adapt_params`]).
pub fn ask_log_level(params: &mut Option<Value>, floor: usize) {
    let Some(level) = crate::relay::LOG_LEVELS.get(floor) else {
        return;
    };
    if let Some(meta) = params
        .as_mut()
        .and_then(|p| p.get_mut("_meta"))
        .and_then(Value::as_object_mut)
    {
        meta.entry("io.modelcontextprotocol/logLevel")
            .or_insert_with(|| json!(level));
    }
}

/// The JSON-RPC id of mcp-edge's own `subscriptions/listen` upstream (a
/// string: call ids are numbers, so it never collides with one).
pub const LISTEN_ID: &str = "mcp-edge/listen";

/// The params of mcp-edge's `subscriptions/listen` (2026-07-28
/// patterns-subscriptions.mdx §Notification Filter): the three list kinds
/// and, when clients subscribed to some of the upstream's resources, their
/// URIs as `resourceSubscriptions`; with the modern per-request `_meta`.
pub fn listen_params(resources: &[Box<str>]) -> Option<Value> {
    let mut filter = json!({"toolsListChanged": true,
        "promptsListChanged": true, "resourcesListChanged": true});
    if !resources.is_empty() {
        filter["resourceSubscriptions"] = json!(resources);
    }
    adapt_params(
        UpstreamEra::Modern,
        Some(json!({ "notifications": filter })),
    )
}

/// Whether a call could need the bridge ([`super::input_bridge`]): a
/// modern upstream, a method a server may answer with an
/// `InputRequiredResult` (2026-07-28 patterns-mrtr.mdx §Supported
/// Requests), a legacy session's SSE relay (a modern caller handles MRTR
/// itself; a legacy caller without a stream is told by the downstream
/// face).
pub(super) fn may_bridge(
    era: UpstreamEra,
    method: &str,
    relay: Option<&crate::relay::Relay>,
) -> bool {
    era == UpstreamEra::Modern
        && matches!(method, "tools/call" | "prompts/get" | "resources/read")
        && relay.is_some_and(crate::relay::Relay::is_legacy_caller)
}
