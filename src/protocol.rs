//! JSON-RPC 2.0 envelope, MCP error codes, protocol versions and the SSE codec.
//!
//! The gateway reads only the envelope (`jsonrpc`, `id`, `method`, `params`)
//! and leaves payloads as [`serde_json::Value`] so unknown fields pass through
//! unchanged (`serde_json` is built with `preserve_order`, so key order too).
//!
//! Sources: `../shared/spec/2026-07-28/index.mdx` §Messages and §Error Codes;
//! `../shared/spec/2025-11-25/index.mdx` §Messages; the SSE framing of
//! `../shared/spec/2026-07-28/transports-streamable-http.mdx` §Receiving Messages.

use serde_json::{json, Map, Value};

/// JSON-RPC 2.0: invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0: the JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0: the method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC 2.0: invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC 2.0: internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP 2026-07-28 `HeaderMismatch` (transports-streamable-http.mdx §Server Validation).
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP 2026-07-28 `MissingRequiredClientCapability` (index.mdx §Error Codes).
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// MCP 2026-07-28 `UnsupportedProtocolVersion` (versioning.mdx §Protocol Version Negotiation).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// Gateway-local error: the upstream is not connected. Allocated outside the
/// JSON-RPC reserved range as index.mdx §Error Codes asks for local errors.
pub const UPSTREAM_UNAVAILABLE: i64 = -31000;
/// Gateway-local error: the upstream did not answer within its call timeout.
pub const UPSTREAM_TIMEOUT: i64 = -31001;
/// Gateway-local error: the upstream's in-flight table is full.
pub const UPSTREAM_BUSY: i64 = -31002;
/// Gateway-local error: the upstream's answer exceeded `max_result_bytes`.
pub const UPSTREAM_RESULT_TOO_LARGE: i64 = -31003;
/// Gateway-local error: the session table is full (HTTP 503).
pub const SESSIONS_FULL: i64 = -31004;
/// Gateway-local error: every long-lived stream place (legacy GET and
/// `subscriptions/listen` streams share them) is taken (HTTP 503).
pub const STREAMS_FULL: i64 = -31005;
/// Gateway-local error: the resource subscription table, or this client's
/// share of it, is full.
pub const SUBSCRIPTIONS_FULL: i64 = -31006;
/// Gateway-local error: no or unknown client credentials (HTTP 401 with
/// `WWW-Authenticate: Bearer realm="mcp-edge"`).
pub const UNAUTHORIZED: i64 = -31007;
/// Gateway-local error: the client's `rate` is used up (HTTP 429 with
/// `Retry-After`).
pub const RATE_LIMITED: i64 = -31008;
/// Gateway-local error: the table of parked calls (a modern caller's call
/// waiting for its `inputResponses`) is full.
pub const PARKED_CALLS_FULL: i64 = -31009;
/// Gateway-local error: the task table is full (or the upstream's task id
/// unusable), so a task an upstream created cannot be handed to the caller
/// (it is cancelled upstream).
pub const TASKS_FULL: i64 = -31010;
/// Gateway-local error: the client holds its share of the connections or
/// more and the places left are kept for other clients (HTTP 503,
/// `connection_share`; [`crate::share`]).
pub const CONNECTIONS_FULL: i64 = -31011;
/// JSON-RPC code of the answer to a request the client cancelled (the code
/// LSP uses; MCP defines none, and the client ignores the answer anyway).
pub const REQUEST_CANCELLED: i64 = -32800;

/// `_meta` key carrying the per-request protocol version (2026-07-28 index.mdx §_meta).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying the client's name and version.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key carrying the client's capabilities (required on modern requests).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key carrying the server's name and version on modern results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// A protocol revision mcp-edge speaks (`../shared/spec/2026-07-28/versioning.mdx` §Terminology).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// Legacy, the revision of the HTTP+SSE transport (`GET /sse`): what
    /// its older clients and servers know; spoken as 2025-03-26 is, less
    /// batches.
    V2024_11_05,
    /// Legacy, first streamable-HTTP revision; the only one allowing JSON-RPC batches.
    V2025_03_26,
    /// Legacy; introduced the `MCP-Protocol-Version` header.
    V2025_06_18,
    /// Legacy; the latest `initialize`-based revision.
    V2025_11_25,
    /// Modern: stateless, `_meta` on every request.
    V2026_07_28,
}

impl ProtocolVersion {
    /// All supported versions, newest first (the `supported` list of -32022 errors).
    pub const ALL: [ProtocolVersion; 5] = [
        ProtocolVersion::V2026_07_28,
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_03_26,
        ProtocolVersion::V2024_11_05,
    ];
    /// The newest legacy revision, chosen when a client asks for an unknown one
    /// (2025-11-25 lifecycle.mdx §Version Negotiation).
    pub const LATEST_LEGACY: ProtocolVersion = ProtocolVersion::V2025_11_25;
    /// The modern revision.
    pub const MODERN: ProtocolVersion = ProtocolVersion::V2026_07_28;

    /// Parses a version string such as `"2025-06-18"`; `None` if unsupported.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The wire form, e.g. `"2025-11-25"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2024_11_05 => "2024-11-05",
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
        }
    }

    /// Whether requests after `initialize` carry `MCP-Protocol-Version`
    /// (2025-06-18 and later; `../shared/spec/2025-11-25/transports.mdx`
    /// §Protocol Version Header).
    pub fn has_version_header(self) -> bool {
        self >= ProtocolVersion::V2025_06_18
    }

    /// Whether it is a revision of streamable HTTP (2024-11-05 is the
    /// HTTP+SSE transport's only).
    pub fn streamable(self) -> bool {
        self != ProtocolVersion::V2024_11_05
    }

    /// True for the `initialize`-based revisions.
    pub fn is_legacy(self) -> bool {
        self != ProtocolVersion::V2026_07_28
    }

    /// The `supported` array for an `UnsupportedProtocolVersionError` and
    /// `server/discover`: the revisions of streamable HTTP (2024-11-05 is
    /// the HTTP+SSE transport's only).
    pub fn supported_json() -> Value {
        let streamable = Self::ALL.iter().filter(|v| v.streamable());
        Value::Array(
            streamable
                .map(|v| Value::String(v.as_str().into()))
                .collect(),
        )
    }
}

/// A JSON-RPC error object (`{"code", "message", "data"?}`).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// Error code (JSON-RPC, MCP, or gateway-local range -31000…).
    pub code: i64,
    /// Human-readable message.
    pub message: String,
    /// Optional structured detail.
    pub data: Option<Value>,
}

impl RpcError {
    /// Builds an error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
    /// Adds `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
    /// The error as a JSON object.
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("code".into(), self.code.into());
        o.insert("message".into(), self.message.clone().into());
        if let Some(d) = &self.data {
            o.insert("data".into(), d.clone());
        }
        Value::Object(o)
    }
    /// Reads an error object received from a peer; a malformed one becomes -32603.
    pub fn from_json(v: &Value) -> Self {
        let code = v
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(INTERNAL_ERROR);
        let message = v
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("malformed error object from upstream")
            .to_string();
        RpcError {
            code,
            message,
            data: v.get("data").cloned(),
        }
    }
    /// `UnsupportedProtocolVersion` (-32022) listing supported versions.
    pub fn unsupported_version(requested: &str) -> Self {
        RpcError::new(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version").with_data(
            json!({"supported": ProtocolVersion::supported_json(), "requested": requested}),
        )
    }
    /// True for the errors that identify a modern peer (versioning.mdx §Backward Compatibility).
    pub fn is_modern_error(&self) -> bool {
        matches!(
            self.code,
            HEADER_MISMATCH | MISSING_CLIENT_CAPABILITY | UNSUPPORTED_PROTOCOL_VERSION
        )
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

/// One classified incoming JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: `id` is a string or number and is echoed unchanged.
    Request {
        /// The caller's id, kept in its original JSON type.
        id: Value,
        /// Method name.
        method: String,
        /// Params object, if any.
        params: Option<Value>,
    },
    /// A notification (no `id`).
    Notification {
        /// Method name.
        method: String,
        /// Params object, if any.
        params: Option<Value>,
    },
    /// A response to a request we sent (`result` or `error`).
    Response {
        /// The id we sent.
        id: Value,
        /// `Ok(result)` or `Err(error object)`.
        outcome: Result<Value, RpcError>,
    },
}

/// Classifies one JSON value as a JSON-RPC message.
///
/// Errors: -32600 (`INVALID_REQUEST`) with the id when one could be read
/// (JSON-RPC 2.0 §5: the id is `null` when it could not be determined).
pub fn classify(v: Value) -> Result<Message, (Value, RpcError)> {
    let Value::Object(mut o) = v else {
        return Err((
            Value::Null,
            RpcError::new(INVALID_REQUEST, "Invalid Request: not a JSON object"),
        ));
    };
    Fields {
        version_ok: o.get("jsonrpc").and_then(Value::as_str) == Some("2.0"),
        id: o.remove("id"),
        method: o.remove("method"),
        params: o.remove("params"),
        result: o.remove("result"),
        error: o.remove("error"),
    }
    .classify()
}

/// The members of a JSON-RPC message object that decide what it is (each
/// `None` when absent; a `null` member is `Some(Value::Null)`).
pub(crate) struct Fields {
    /// `"jsonrpc": "2.0"` is there.
    pub version_ok: bool,
    pub id: Option<Value>,
    pub method: Option<Value>,
    pub params: Option<Value>,
    pub result: Option<Value>,
    pub error: Option<Value>,
}

impl Fields {
    /// The rules of [`classify`], shared with [`envelope::parse`].
    pub(crate) fn classify(self) -> Result<Message, (Value, RpcError)> {
        let Fields {
            version_ok,
            id,
            method,
            params,
            result,
            error,
        } = self;
        let id_for_err = match &id {
            Some(i @ (Value::String(_) | Value::Number(_))) => i.clone(),
            _ => Value::Null,
        };
        let bad = |m: &str| Err((id_for_err.clone(), RpcError::new(INVALID_REQUEST, m)));
        if !version_ok {
            return bad("Invalid Request: \"jsonrpc\" must be \"2.0\"");
        }
        if let Some(id) = &id {
            if !matches!(id, Value::String(_) | Value::Number(_)) {
                return bad("Invalid Request: \"id\" must be a string or a number");
            }
        }
        if params.as_ref().is_some_and(|p| !p.is_object()) {
            return bad("Invalid Request: \"params\" must be an object");
        }
        match (method, id) {
            (Some(Value::String(method)), Some(id)) => Ok(Message::Request { id, method, params }),
            (Some(Value::String(method)), None) => Ok(Message::Notification { method, params }),
            (Some(_), _) => bad("Invalid Request: \"method\" must be a string"),
            (None, Some(id)) => match (result, error) {
                (Some(r), _) => Ok(Message::Response { id, outcome: Ok(r) }),
                (None, Some(e)) => Ok(Message::Response {
                    id,
                    outcome: Err(RpcError::from_json(&e)),
                }),
                (None, None) => bad("Invalid Request: no \"method\", \"result\" or \"error\""),
            },
            (None, None) => bad("Invalid Request: no \"method\""),
        }
    }
}

/// `{"jsonrpc":"2.0","id":id,"result":result}`.
pub fn result_response(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// `{"jsonrpc":"2.0","id":id,"error":{…}}`; `id` is `null` when unknown.
pub fn error_response(id: Value, err: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": err.to_json()})
}

/// A request object; `params` omitted when `None`.
pub fn request(id: Value, method: &str, params: Option<Value>) -> Value {
    let mut o = Map::new();
    o.insert("jsonrpc".into(), "2.0".into());
    o.insert("id".into(), id);
    o.insert("method".into(), method.into());
    if let Some(p) = params {
        o.insert("params".into(), p);
    }
    Value::Object(o)
}

/// A notification object; `params` omitted when `None`.
pub fn notification(method: &str, params: Option<Value>) -> Value {
    let mut o = Map::new();
    o.insert("jsonrpc".into(), "2.0".into());
    o.insert("method".into(), method.into());
    if let Some(p) = params {
        o.insert("params".into(), p);
    }
    Value::Object(o)
}

/// The `_meta` object of a params object, if present.
pub fn params_meta(params: Option<&Value>) -> Option<&Map<String, Value>> {
    params?.get("_meta")?.as_object()
}

/// The `params.name` (tools/call, prompts/get) or `params.uri` (resources/read)
/// that the `Mcp-Name` header mirrors (transports-streamable-http.mdx §Standard Request Headers),
/// or the `params.taskId` of the tasks extension's requests (ext-tasks
/// tasks.md §Streamable HTTP: Routing Headers).
pub fn routed_name<'a>(method: &str, params: Option<&'a Value>) -> Option<&'a str> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    params?.get(key)?.as_str()
}

/// Parses `Retry-After` (RFC 9110 §10.2.3): delta-seconds or an HTTP-date
/// (relative to `now`; a date in the past means zero).
pub fn parse_retry_after(v: &str, now: std::time::SystemTime) -> Option<std::time::Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(std::time::Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(now)
            .unwrap_or(std::time::Duration::ZERO),
    )
}

pub mod caps;
pub mod envelope;
pub mod param_headers;
pub mod proxy_header;
pub mod raw;
pub mod sse;

pub use caps::ClientCaps;
pub use raw::{split_response, Outgoing, Payload, RawResult, ResultType};

#[cfg(test)]
mod retry_after_tests {
    use super::parse_retry_after;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    #[test]
    fn retry_after_both_forms() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:51:37 GMT", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", SystemTime::now()), None);
    }
}
