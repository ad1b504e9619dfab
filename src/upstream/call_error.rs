//! Why a call or a send to an upstream failed.

use crate::protocol::{self, RpcError};
use std::time::Duration;

/// Why one call to an upstream failed. Converted into a JSON-RPC error naming
/// the upstream by [`CallError::to_rpc`].
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Not connected; carries the state description and, in Backoff, the
    /// seconds until the next attempt.
    #[error("upstream '{name}' is not available ({state})")]
    Unavailable {
        /// Upstream name.
        name: String,
        /// [`Status::describe`].
        state: String,
        /// Seconds until the next connect attempt, if one is scheduled.
        retry_in_secs: Option<u64>,
    },
    /// The upstream asked us to wait (HTTP 429/503 `Retry-After`).
    #[error("upstream '{name}' asked to retry after {}s", retry_in.as_secs_f64().ceil() as u64)]
    RetryLater {
        /// Upstream name.
        name: String,
        /// Time left in its Retry-After window.
        retry_in: Duration,
    },
    /// No answer within the call timeout.
    #[error("upstream '{name}' did not answer within {after:?}")]
    Timeout {
        /// Upstream name.
        name: String,
        /// The configured `call_timeout`.
        after: Duration,
    },
    /// The in-flight table is full.
    #[error("upstream '{name}' has {capacity} requests in flight; try again later")]
    Busy {
        /// Upstream name.
        name: String,
        /// Its `max_in_flight`.
        capacity: usize,
    },
    /// The client holds its share of the upstream's in-flight places or
    /// more, and the places left are kept for other clients ([`crate::share`]).
    #[error(
        "upstream '{name}': this client has {held} of its {capacity} requests in flight, its \
         share is {share}, and the places left are kept for other clients (upstream_share); \
         try again later"
    )]
    Share {
        /// Upstream name.
        name: String,
        /// The client's calls in flight there.
        held: usize,
        /// Its share, in whole calls.
        share: usize,
        /// Its `max_in_flight`.
        capacity: usize,
    },
    /// The answer exceeded `max_result_bytes`.
    #[error("upstream '{name}' sent a message larger than {limit} bytes")]
    TooLarge {
        /// Upstream name.
        name: String,
        /// Its `max_result_bytes`.
        limit: usize,
    },
    /// The connection failed during the call.
    #[error("upstream '{name}' transport error: {reason}")]
    Transport {
        /// Upstream name.
        name: String,
        /// What failed.
        reason: String,
    },
    /// No access token for the upstream (its authorization server refused,
    /// is down, or a login is needed): the upstream itself was not asked.
    #[error("upstream '{name}' has no access token: {reason}")]
    NoToken {
        /// Upstream name.
        name: String,
        /// Why ([`crate::oauth::OAuthError`], never a token).
        reason: String,
    },
    /// The upstream answered with a JSON-RPC error: forwarded unchanged.
    #[error("{0}")]
    Rpc(RpcError),
    /// The upstream cut this one request's SSE answer before its response
    /// and it could not be resumed: the caller's error, not the
    /// upstream's health.
    #[error("upstream '{name}' cut this call's answer: {reason}")]
    StreamCut {
        /// Upstream name.
        name: String,
        /// How, and why it was not resumed.
        reason: String,
    },
    /// The upstream answered this one request with a body that is no
    /// JSON-RPC response mcp-edge can read: the caller's error, not the
    /// upstream's health.
    #[error("upstream '{name}' answered with a body mcp-edge cannot read: {reason}")]
    Malformed {
        /// Upstream name.
        name: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The upstream refused this one request with an HTTP 4xx and no
    /// JSON-RPC error: the caller's error, not the upstream's health.
    #[error("upstream '{name}' refused the request (HTTP {status})")]
    Refused {
        /// Upstream name.
        name: String,
        /// The 4xx status.
        status: u16,
    },
}

impl CallError {
    /// The JSON-RPC error for the downstream caller.
    pub fn to_rpc(&self) -> RpcError {
        let code = match self {
            CallError::Rpc(e) => return e.clone(),
            CallError::Unavailable {
                name,
                retry_in_secs,
                ..
            } => {
                let mut data = serde_json::json!({"upstream": name});
                if let Some(s) = retry_in_secs {
                    data["retryAfterSeconds"] = (*s).into();
                }
                return RpcError::new(protocol::UPSTREAM_UNAVAILABLE, self.to_string())
                    .with_data(data);
            }
            CallError::RetryLater { name, retry_in } => {
                let secs = retry_in.as_secs_f64().ceil() as u64;
                return RpcError::new(protocol::UPSTREAM_UNAVAILABLE, self.to_string())
                    .with_data(serde_json::json!({"upstream": name, "retryAfterSeconds": secs}));
            }
            CallError::NoToken { name, .. } => {
                return RpcError::new(protocol::UPSTREAM_UNAVAILABLE, self.to_string())
                    .with_data(serde_json::json!({"upstream": name, "reason": "oauth"}));
            }
            CallError::Share { name, .. } => {
                let data = serde_json::json!({"upstream": name, "limit": "upstream_share",
                    "retryAfterSeconds": 1});
                return RpcError::new(protocol::UPSTREAM_BUSY, self.to_string()).with_data(data);
            }
            CallError::Refused { name, status } => {
                return RpcError::new(protocol::INTERNAL_ERROR, self.to_string())
                    .with_data(serde_json::json!({"upstream": name, "httpStatus": status}));
            }
            CallError::StreamCut { name, .. } | CallError::Malformed { name, .. } => {
                return RpcError::new(protocol::INTERNAL_ERROR, self.to_string())
                    .with_data(serde_json::json!({"upstream": name}));
            }
            CallError::Transport { .. } => protocol::UPSTREAM_UNAVAILABLE,
            CallError::Timeout { .. } => protocol::UPSTREAM_TIMEOUT,
            CallError::Busy { .. } => protocol::UPSTREAM_BUSY,
            CallError::TooLarge { .. } => protocol::UPSTREAM_RESULT_TOO_LARGE,
        };
        RpcError::new(code, self.to_string())
    }
}

/// Transport-level outcome of one request, before it is named for a caller.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The peer answered with a JSON-RPC error.
    #[error("{0}")]
    Rpc(RpcError),
    /// No answer in time.
    #[error("timed out")]
    Timeout,
    /// The in-flight table is full.
    #[error("in-flight table full")]
    Busy,
    /// The answer exceeded the size limit.
    #[error("message too large")]
    TooLarge,
    /// HTTP 401/403 or an OAuth challenge.
    #[error("authorization required (HTTP {0})")]
    Auth(u16),
    /// An HTTP error status; `rpc` is the JSON-RPC error in the body, if any.
    #[error("HTTP {status}{}", rpc.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    Http {
        /// Status code.
        status: u16,
        /// JSON-RPC error found in the body.
        rpc: Option<RpcError>,
    },
    /// HTTP 429/503 with a `Retry-After` (RFC 9110 §10.2.3), already parsed.
    #[error("HTTP {status}, retry after {after:?}")]
    RetryAfter {
        /// 429 or 503.
        status: u16,
        /// The delay the upstream asked for.
        after: Duration,
    },
    /// The legacy HTTP session expired (404 with a session id).
    #[error("session expired")]
    SessionExpired,
    /// Connection lost, bad framing, I/O error.
    #[error("{0}")]
    Transport(String),
    /// No access token could be had from the upstream's authorization
    /// server (`[upstream.oauth]`).
    #[error("no access token: {0}")]
    OAuth(Box<crate::oauth::OAuthError>),
    /// This request's SSE answer was cut before its response and could
    /// not be resumed (after an event with an ID: the connection itself
    /// was fine).
    #[error("{0}")]
    StreamCut(String),
    /// A successful answer to this one request that cannot be read as one
    /// JSON-RPC response (not JSON, several JSON texts, no response): this
    /// request's failure, not the connection's.
    #[error("{0}")]
    Malformed(String),
}
