//! What one request produced, and its finishing: status, framing of the
//! result or error per era, the request metrics and the audit record.

use super::app::{Body, Who};
use super::{audited, modern};
use crate::protocol::{self, Outgoing, Payload, RpcError};
use crate::session::SessionId;
use http::{Response, StatusCode};
use serde_json::Value;
use tokio::time::Instant;

/// What one POSTed message produced.
pub(super) enum Outcome {
    /// A notification or response: 202 without body.
    Accepted,
    /// A complete JSON-RPC response.
    Answer(Answer),
    /// An SSE stream relaying the upstream's messages, then the response.
    Stream(Response<Body>),
}

/// What one request produced: the JSON-RPC response, the HTTP status and, for
/// `initialize`, the new session id.
pub(super) struct Answer {
    pub(super) response: Outgoing,
    pub(super) status: StatusCode,
    pub(super) session: Option<SessionId>,
}

/// Status and framing of a finished call ([`modern::error_status`] for a
/// modern caller's error; a modern result [`modern::decorate`]d).
pub(super) fn finish(
    id: Value,
    method: &str,
    modern: bool,
    outcome: Result<Payload, RpcError>,
    who: &Who,
) -> Answer {
    let outcome = match outcome {
        Err(e) if modern => Err(modern::modernize_error(e)),
        other => other,
    };
    let status = match &outcome {
        Err(e) if modern => modern::error_status(e),
        _ => StatusCode::OK,
    };
    crate::metrics::count_request(method, outcome.is_ok());
    let response = match outcome {
        Ok(r) if modern => {
            // With clients, what a list shows depends on who asks.
            let per_caller = who.access.required();
            Outgoing::result(id, modern::decorate(method, r, per_caller))
        }
        Ok(r) => Outgoing::result(id, r),
        Err(e) => protocol::error_response(id, &e).into(),
    };
    Answer {
        response,
        status,
        session: None,
    }
}

/// [`finish`], with the call's audit record (if one is kept) told the
/// outcome and handed the answer.
pub(super) fn finish_audited(
    mut audit: Option<Box<audited::Pending>>,
    id: Value,
    method: &str,
    modern: bool,
    outcome: Result<Payload, RpcError>,
    who: &Who,
) -> Answer {
    if let Some(a) = audit.as_mut() {
        a.judge(&outcome);
    }
    let answer = finish(id, method, modern, outcome, who);
    if let Some(a) = audit {
        a.done(&answer.response);
    }
    answer
}

/// Records the request's duration in `mcp_edge_request_duration_seconds{method}`.
pub(super) fn observe(method: &str, t0: Instant) {
    crate::metrics::observe_duration(method, t0.elapsed());
}
