//! The audit record of one `tools/call`, `prompts/get` or `resources/read`
//! ([`crate::audit`]): what the request was, taken before the call
//! consumes it, and how it ended, once the answer is framed. Nothing here
//! runs when `[audit]` is absent.

use super::app::{App, Who};
use super::parked::Expiry;
use crate::audit::{Outcome, Record};
pub(super) use crate::protocol::raw::json_len;
use crate::protocol::{self, Outgoing, Payload, RpcError};
use serde_json::Value;
use std::time::SystemTime;
use tokio::time::Instant;

/// The methods audited, as the `&'static str` the record keeps.
fn audited(method: &str) -> Option<&'static str> {
    ["tools/call", "prompts/get", "resources/read"]
        .into_iter()
        .find(|m| *m == method)
}

/// Audits a call its era's own checks refused before it reached the
/// router (a modern request's headers against its body, `-32020`,
/// `../shared/spec/2026-07-28/transports-streamable-http.mdx` §Server
/// Validation; its
/// `_meta`, `-32602`/`-32022`; a removed method): `"error"` with the code
/// answered, `upstream` and `original` null (not routed).
pub(super) fn refused(
    app: &App,
    id: &Value,
    method: &str,
    params: Option<&Value>,
    who: &Who,
    request_bytes: usize,
    e: &RpcError,
) {
    let Some(mut p) = Pending::start(app, method, params, None, who, request_bytes) else {
        return;
    };
    if let Some(r) = p.record.as_mut() {
        (r.upstream, r.original) = (None, None);
        r.outcome = Outcome::Error(e.code);
    }
    p.done(&Outgoing::Tree(protocol::error_response(id.clone(), e)));
}

/// An audited call under way. Dropped before [`Pending::done`] (the
/// caller closed its connection, so the call's future was dropped), it
/// still records the call, as `disconnected`.
pub(super) struct Pending {
    record: Option<Record>,
    t0: Instant,
    audit: crate::audit::Audit,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut r) = self.record.take() {
            r.outcome = Outcome::Disconnected;
            r.duration_ms = self.t0.elapsed().as_millis() as u64;
            self.audit.record(r);
        }
    }
}

impl Pending {
    /// The record of `method` with `params` from `who` in legacy `session`
    /// (`None`: a modern request), when the gateway keeps an audit log and
    /// the method is audited.
    pub(super) fn start(
        app: &App,
        method: &str,
        params: Option<&Value>,
        session: Option<String>,
        who: &Who,
        request_bytes: usize,
    ) -> Option<Box<Pending>> {
        let audit = app.audit.as_ref()?;
        let method = audited(method)?;
        let key = if method == "resources/read" {
            "uri"
        } else {
            "name"
        };
        let exposed = params.and_then(|p| p.get(key)).and_then(Value::as_str);
        let found = app.router.describe(method, params, who.policy());
        let record = Record {
            time: SystemTime::now(),
            client: who.access.required().then(|| who.name().to_owned()),
            session,
            method,
            upstream: found.upstream,
            exposed: exposed.unwrap_or_default().to_owned(),
            original: found.original,
            // `refused` is kept here until the outcome is known.
            outcome: if found.refused {
                Outcome::Refused
            } else {
                Outcome::Ok
            },
            duration_ms: 0,
            request_bytes: request_bytes as u64,
            response_bytes: 0,
            arguments: audit
                .wants_arguments()
                .then(|| params.and_then(|p| p.get("arguments")).cloned())
                .flatten(),
        };
        // Boxed: every connection's future has room for the call's state,
        // and a record is large (`budget`'s idle connection cost).
        Some(Box::new(Pending {
            record: Some(record),
            t0: Instant::now(),
            audit: audit.clone(),
        }))
    }

    /// Notes how the call ended (before its answer is framed).
    pub(super) fn judge(&mut self, outcome: &Result<Payload, RpcError>) {
        let Some(record) = self.record.as_mut() else {
            return;
        };
        let refused = record.outcome == Outcome::Refused;
        record.outcome = match outcome {
            Ok(r) if r.is_tool_error() => Outcome::ToolError,
            Ok(_) => Outcome::Ok,
            Err(_) if refused => Outcome::Refused,
            Err(e) if e.code == protocol::UPSTREAM_TIMEOUT => Outcome::Timeout,
            Err(e) => Outcome::Error(e.code),
        };
    }

    /// What to audit if the call this round parks is never taken back
    /// (`"input_expired"`): this round's record without its arguments (the
    /// round's own line has them), kept with the parked call.
    pub(super) fn parked(&self) -> Option<Box<Expiry>> {
        let mut record = self.record.clone()?;
        record.outcome = Outcome::InputExpired;
        record.response_bytes = 0;
        record.arguments = None;
        Some(Box::new(Expiry::new(record, self.t0, self.audit.clone())))
    }

    /// Hands the record of the call answered with `response` to the writer
    /// (never waits).
    pub(super) fn done(mut self: Box<Self>, response: &Outgoing) {
        if let Some(mut r) = self.record.take() {
            r.duration_ms = self.t0.elapsed().as_millis() as u64;
            r.response_bytes = response.len() as u64;
            self.audit.record(r);
        }
    }
}
