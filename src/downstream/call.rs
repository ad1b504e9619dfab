//! One admitted request ([`Call`], made by [`super::admission`]) served
//! and finished: its audit record begun, the dispatch table that answers it
//! ([`dispatch`]: `ping` and `server/discover` here, everything else
//! through the router), a legacy caller's cancellation, and the finishing
//! on the way up (status and framing per era, the request metrics, the
//! audit record). A call whose upstream may send request-scoped messages
//! is served under [`reply::hold`] ([`Call::relayed`]); any other in one
//! answer ([`Call::serve`]). A modern caller's relayable call is
//! [`super::rounds`]'s, which uses the same pieces.
//!
//! The audit record ([`crate::audit`]) of one `tools/call`, `prompts/get`
//! or `resources/read`: what the request was, taken before the call
//! consumes it, and how it ended, once the answer is framed. Nothing of it
//! runs when `[audit]` is absent.
//!
//! A legacy caller that takes no SSE stream cannot be asked anything: an
//! `InputRequiredResult` for it (issue 13, part 3) becomes a clear error.

use super::admission::{Call, ClientEra};
use super::app::{App, Who};
use super::call_stream::Resumable;
use super::modern;
use super::reply::{self, Answer, Outcome};
use crate::audit::{self, Record};
pub(super) use crate::protocol::raw::json_len;
use crate::protocol::{self, ClientCaps, Outgoing, Payload, ProtocolVersion, RpcError};
use crate::relay::Relay;
use crate::router::TaskCaller;
use http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::time::Instant;

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
    mut audit: Option<Box<Pending>>,
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

/// The dispatch table of one admitted request: `ping` and `server/discover`
/// here, everything else through the router under the caller's policy.
pub(super) async fn dispatch(
    app: &App,
    method: &str,
    params: Option<Value>,
    modern: bool,
    relay: Option<Relay>,
    who: &Who,
) -> Result<Payload, RpcError> {
    match method {
        "ping" => Ok(json!({}).into()),
        "server/discover" if modern => Ok(json!({
            "supportedVersions": ProtocolVersion::supported_json(),
            "capabilities": super::task_callers::capabilities(app, params.as_ref()),
            "_meta": {protocol::META_SERVER_INFO: App::server_info()},
            "instructions": app.instructions(who.policy()),
        })
        .into()),
        _ => {
            let caller = caller(who, params.as_ref(), modern);
            let mut r = (app.router)
                .dispatch_as(
                    method,
                    params,
                    relay,
                    who.policy(),
                    caller,
                    who.access.shares(),
                )
                .await;
            // A list missing a connected upstream's part must not be
            // cached as complete: ttlMs 0 (2026-07-28 caching hints).
            if let (true, Ok(Payload::Tree(Value::Object(o)))) =
                (modern && method.ends_with("/list"), &mut r)
            {
                let partial = (app.router.upstreams().iter())
                    .any(|u| u.config.enabled && !u.status().is_ready());
                if partial {
                    o.insert("ttlMs".into(), json!(0));
                }
            }
            r
        }
    }
}

/// The tasks-extension view of a request of `who`: a modern request
/// declaring the extension in its `_meta` is a caller of it; legacy
/// requests never are (their task-backed calls are followed).
fn caller(who: &Who, params: Option<&Value>, modern: bool) -> TaskCaller {
    TaskCaller {
        owner: who.owner(),
        modern,
        declared: modern && crate::tasks::declared(params),
    }
}

impl Call {
    /// A call whose upstream may send request-scoped messages: an SSE
    /// stream relaying them, then the response; a plain answer when it
    /// relays nothing ([`reply::hold`]).
    pub(super) async fn relayed(self, app: &Arc<App>) -> Outcome {
        let (relay, rx) =
            crate::relay::Relay::new(self.caller.era.session(), app.server.sse_queue_depth);
        let (floor, caps) = self.relay_view();
        let relay = relay.with_log_floor(floor).with_caps(caps);
        let keepalive = app.server.keepalive;
        let resumable = self.resumable(app, &relay);
        let sse = self.caller.held.as_ref().is_some_and(|h| h.seen.sse);
        let app = app.clone();
        // Boxed: the call's state is not part of every connection's future.
        let fut = Box::pin(async move { self.serve(&app, Some(relay)).await.response });
        match sse {
            // Framed on the session's own stream.
            true => Outcome::Relayed(rx, fut),
            false => reply::hold(rx, fut, keepalive, resumable).await,
        }
    }

    /// A legacy session's call stream is resumable ([`call_stream`]); a
    /// 2025-11-25 session's begins with a priming event.
    fn resumable(&self, app: &App, relay: &Relay) -> Option<Resumable> {
        let ClientEra::Legacy(session, version) = self.caller.era else {
            return None;
        };
        Some(Resumable {
            session,
            request: self.id.clone(),
            home: app.resumes.clone(),
            priming: version >= ProtocolVersion::V2025_11_25,
            dropped: relay.dropped.clone(),
        })
    }

    /// From which level log messages reach this caller: a legacy session's
    /// `logging/setLevel`, a modern request's `logLevel` (none unless asked).
    /// And which client capabilities a legacy session declared (a legacy
    /// upstream's request for another is not relayed to it; a modern
    /// caller's are checked by [`super::rounds`]).
    fn relay_view(&self) -> (Option<usize>, Option<ClientCaps>) {
        match &self.caller.era {
            ClientEra::Legacy(..) => {
                let s = self.caller.held.as_ref().map(|b| b.seen);
                let floor = s.map_or(0, |s| s.log_floor);
                (
                    Some(usize::from(floor)),
                    Some(s.map(|s| s.caps).unwrap_or_default()),
                )
            }
            ClientEra::Modern => {
                let floor = protocol::params_meta(self.params.as_ref())
                    .and_then(|m| m.get("io.modelcontextprotocol/logLevel"))
                    .and_then(Value::as_str)
                    .and_then(crate::relay::log_rank);
                (floor, None)
            }
        }
    }

    /// Serves the call through [`dispatch`] (relaying the upstream's
    /// messages to `relay`, when the caller takes a stream) and finishes it.
    /// A legacy request is cancelled by its session's
    /// `notifications/cancelled` ([`super::sessions`]: `-32800`); a modern
    /// one by closing its connection. (Written out, not a generic helper:
    /// each async layer holding the call future grows every connection's
    /// future, which `budget` counts per idle connection.)
    pub(super) async fn serve(self, app: &App, relay: Option<Relay>) -> Answer {
        let Call {
            id,
            method,
            params,
            mut caller,
            request_bytes,
            from_session: _,
        } = self;
        let _busy = app.in_flight.enter();
        let t0 = Instant::now();
        let (modern, streamed) = (caller.modern(), relay.is_some());
        let cancelled = caller.held.as_mut().and_then(|h| h.cancelled.take());
        let who = &caller.who;
        let session = caller.era.session();
        let audit = Pending::start(app, &method, params.as_ref(), session, who, request_bytes);
        let call = dispatch(app, &method, params, modern, relay, who);
        let outcome = match cancelled {
            Some(cancelled) => tokio::select! {
                outcome = call => outcome,
                Ok(()) = cancelled => Err(RpcError::new(
                    protocol::REQUEST_CANCELLED,
                    "Request cancelled by the client",
                )),
            },
            None => call.await,
        };
        let outcome = match modern || streamed {
            true => outcome,
            false => no_stream(outcome),
        };
        observe(&method, t0);
        finish_audited(audit, id, &method, modern, outcome, who)
    }
}

/// A legacy caller without an SSE stream: an `InputRequiredResult` becomes
/// an Invalid Request error naming what the upstream asked for and what the
/// client must do (accept `text/event-stream`, 2025-11-25 transports.mdx
/// §Sending Messages to the Server, item 2).
fn no_stream(outcome: Result<Payload, RpcError>) -> Result<Payload, RpcError> {
    let result = outcome?;
    if !result.is_input_required() {
        return Ok(result);
    }
    let result = result.into_value();
    let asked: Vec<&str> = (result.get("inputRequests").and_then(Value::as_object))
        .map(|o| {
            o.values()
                .filter_map(|r| r.get("method").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let msg = format!(
        "the upstream needs input from the client ({}); mcp-edge can ask a legacy client only on an SSE response: send Accept: application/json, text/event-stream",
        if asked.is_empty() { "a retry".to_string() } else { asked.join(", ") }
    );
    Err(RpcError::new(protocol::INVALID_REQUEST, msg).with_data(json!({"inputRequests": asked})))
}

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
        r.outcome = audit::Outcome::Error(e.code);
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
            r.outcome = audit::Outcome::Disconnected;
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
            peer: who.peer,
            session,
            method,
            upstream: found.upstream,
            exposed: exposed.unwrap_or_default().to_owned(),
            original: found.original,
            // `refused` is kept here until the outcome is known.
            outcome: if found.refused {
                audit::Outcome::Refused
            } else {
                audit::Outcome::Ok
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
        let refused = record.outcome == audit::Outcome::Refused;
        record.outcome = match outcome {
            Ok(r) if r.is_tool_error() => audit::Outcome::ToolError,
            Ok(_) => audit::Outcome::Ok,
            Err(_) if refused => audit::Outcome::Refused,
            Err(e) if e.code == protocol::UPSTREAM_TIMEOUT => audit::Outcome::Timeout,
            Err(e) => audit::Outcome::Error(e.code),
        };
    }

    /// What to audit if the call this round parks is never taken back
    /// (`"input_expired"`): this round's record without its arguments (the
    /// round's own line has them), kept with the parked call.
    pub(super) fn parked(&self) -> Option<Box<audit::Expiry>> {
        let mut record = self.record.clone()?;
        record.outcome = audit::Outcome::InputExpired;
        record.response_bytes = 0;
        record.arguments = None;
        Some(Box::new(audit::Expiry::new(
            record,
            self.t0,
            self.audit.clone(),
        )))
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

#[cfg(test)]
mod call_tests;
