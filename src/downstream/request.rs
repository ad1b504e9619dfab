//! One JSON-RPC message on `/mcp`, once framing is done: which era serves
//! it, the checks of that era, and the dispatch to the lifecycle methods
//! here or to the router (through [`App::call`]).
//!
//! Era per request (`../shared/spec/2026-07-28/versioning.mdx` §Backward
//! Compatibility): `initialize` opens a legacy session; a request carrying
//! modern `_meta` (or a non-legacy `MCP-Protocol-Version`) is served
//! statelessly; anything else is legacy and needs its `Mcp-Session-Id`
//! (`../shared/spec/2025-11-25/transports.mdx` §Session Management).

use super::admission::{admit, Admitted, Caller, ClientEra, Head};
use super::app::{App, Who};
use super::call::{dispatch, Call};
use super::finish::{finish, finish_audited, observe};
pub(super) use super::finish::{Answer, Outcome};
use super::reply::{refuse, Refusal};
use super::{audited, modern, reply};
use crate::protocol::{self, ClientCaps, Message, Payload, ProtocolVersion, RpcError};
use crate::session::SessionError;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::time::Instant;

/// Methods whose upstream may send request-scoped notifications or
/// server→client requests while working.
fn relayable(method: &str) -> bool {
    matches!(
        method,
        "tools/call" | "prompts/get" | "resources/read" | "completion/complete"
    )
}

/// A client's answer to a request relayed from an upstream: back to that upstream.
async fn relayed_answer(app: &App, head: &Head, id: Value, outcome: Result<Value, RpcError>) {
    let Some((up, slot, generation)) = crate::relay::parse_downstream_id(&id) else {
        return; // not ours
    };
    let session = head.own_session(app).map(|s| s.to_header());
    let (Some(upstream), Some(session)) = (app.router.by_id(up), session) else {
        return;
    };
    if !upstream
        .answer_relayed(slot, generation, &session, outcome)
        .await
    {
        tracing::info!(upstream = %upstream.name(), "dropped an answer to an unknown or expired relayed request");
    }
}

/// Serves one message: a client's answer to a relayed request, a
/// notification, or a request.
pub(super) async fn one(
    app: &Arc<App>,
    head: &Head,
    h: &HeaderMap,
    msg: Message,
    stream_ok: bool,
    request_bytes: usize,
) -> Result<Outcome, (Value, Refusal)> {
    match msg {
        Message::Response { id, outcome } => {
            relayed_answer(app, head, id, outcome).await;
            Ok(Outcome::Accepted)
        }
        Message::Notification { method, params } => {
            notification(app, head, &method, params.as_ref());
            Ok(Outcome::Accepted)
        }
        Message::Request { id, method, params } => {
            let caller = match admit(app, head, h, &method, params.as_ref()) {
                Ok(Admitted::Call(caller)) => caller,
                Ok(Admitted::Initialize(who)) => {
                    return initialize(app, id, params.as_ref(), &who).map(Outcome::Answer)
                }
                Err(r) => return Err((id, r)),
            };
            let call = Call::checked(app, h, id, method, params, caller, request_bytes)?;
            match call.route(stream_ok) {
                Route::Listen => call.listen(app, stream_ok).await,
                Route::SetLevel => Ok(Outcome::Answer(call.set_level(app))),
                Route::Subscription => Ok(Outcome::Answer(call.subscription(app).await)),
                Route::Relayed => Ok(call.relayed(app).await),
                Route::Modern => Ok(super::rounds::serve(app, call, stream_ok).await),
                Route::Plain => Ok(Outcome::Answer(call.plain(app).await)),
            }
        }
    }
}

/// `notifications/initialized` marks the session; `notifications/cancelled`
/// drops the legacy request it names. Others are accepted and dropped.
fn notification(app: &App, head: &Head, method: &str, params: Option<&Value>) {
    match method {
        "notifications/initialized" => {
            if let Some(id) = head.own_session(app) {
                app.sessions.mark_initialized(&id);
            }
        }
        "notifications/cancelled" => {
            let request = params.and_then(|p| p.get("requestId"));
            if let (Some(sid), Some(request)) = (head.own_session(app), request) {
                app.cancels.cancel(sid, request);
            }
        }
        _ => {}
    }
}

/// A modern request's own checks: a method 2026-07-28 removed (404,
/// [`modern::removed`]), then its `_meta` and headers
/// ([`modern::validate`]) and its `Mcp-Param-*` headers (400).
fn modern_checks(
    app: &App,
    h: &HeaderMap,
    method: &str,
    params: Option<&Value>,
    policy: &crate::access::Policy,
) -> Result<(), Refusal> {
    modern::removed(method).map_err(|e| Refusal(StatusCode::NOT_FOUND, e))?;
    modern::validate(h, method, params)
        .and_then(|()| modern::check_param_headers(app, h, method, params, policy))
        .map_err(|e| Refusal(StatusCode::BAD_REQUEST, e))
}

/// Which handler of [`Call`] serves a request.
enum Route {
    Listen,
    SetLevel,
    Subscription,
    Relayed,
    Modern,
    Plain,
}

impl Call {
    /// The admitted request after its era's own checks: a modern one's
    /// headers and `_meta` (refusals audited), a legacy one's declared
    /// client capabilities put where a modern upstream reads them.
    fn checked(
        app: &App,
        h: &HeaderMap,
        id: Value,
        method: String,
        params: Option<Value>,
        caller: Caller,
        request_bytes: usize,
    ) -> Result<Call, (Value, Refusal)> {
        let params = match &caller.held {
            Some(held) => super::legacy_input::declare_caps(held.seen.caps, &method, params),
            None => {
                let (p, who) = (params.as_ref(), &caller.who);
                if let Err(r) = modern_checks(app, h, &method, p, who.policy()) {
                    audited::refused(app, &id, &method, p, who, request_bytes, &r.1);
                    return Err((id, r));
                }
                params
            }
        };
        Ok(Call {
            id,
            method,
            params,
            caller,
            request_bytes,
        })
    }

    /// The dispatch table: methods mcp-edge answers itself in this era,
    /// then a relayed call (SSE, when the client takes a stream), then a
    /// plain one. (Decided here, awaited by the caller: one async layer
    /// less in every connection's future.)
    fn route(&self, stream_ok: bool) -> Route {
        let legacy = !self.caller.modern();
        match self.method.as_str() {
            "subscriptions/listen" if !legacy => Route::Listen,
            "logging/setLevel" if legacy => Route::SetLevel,
            "resources/subscribe" | "resources/unsubscribe" if legacy => Route::Subscription,
            // A modern call's head waits for its outcome; its upstream's
            // requests become MRTR rounds (super::rounds).
            m if !legacy && relayable(m) => Route::Modern,
            m if stream_ok && relayable(m) => Route::Relayed,
            _ => Route::Plain,
        }
    }

    /// A modern `subscriptions/listen`: the SSE stream of [`super::listen`].
    async fn listen(self, app: &Arc<App>, stream_ok: bool) -> Result<Outcome, (Value, Refusal)> {
        let opened = super::listen::open(
            app,
            self.id.clone(),
            self.params.as_ref(),
            stream_ok,
            &self.caller.who,
        )
        .await;
        crate::metrics::count_request("subscriptions/listen", opened.is_ok());
        match opened {
            Ok(stream) => Ok(Outcome::Stream(stream)),
            // A bad filter is an ordinary JSON-RPC error, framed as the client asked.
            Err((StatusCode::OK, e)) => Ok(Outcome::Answer(Answer {
                response: protocol::error_response(self.id, &e).into(),
                status: StatusCode::OK,
                session: None,
            })),
            Err((status, e)) => Err((self.id, Refusal(status, e))),
        }
    }

    /// A legacy `logging/setLevel`: kept per session and applied to the log
    /// messages relayed to it (the upstreams are shared, so their own level
    /// is not set). -32602 for an unknown level.
    fn set_level(self, app: &App) -> Answer {
        let ClientEra::Legacy(sid, _) = &self.caller.era else {
            unreachable!("dispatched for legacy sessions only")
        };
        let level = (self.params.as_ref())
            .and_then(|p| p.get("level"))
            .and_then(Value::as_str);
        let outcome = match level.and_then(crate::relay::log_rank) {
            Some(rank) => {
                app.sessions.set_log_floor(sid, rank as u8);
                Ok(json!({}))
            }
            None => Err(RpcError::new(
                protocol::INVALID_PARAMS,
                format!(
                    "params.level must be one of {}",
                    crate::relay::LOG_LEVELS.join(", ")
                ),
            )),
        };
        self.answer_legacy(outcome)
    }

    /// A legacy `resources/subscribe` / `resources/unsubscribe`, kept in
    /// the subscription table ([`super::subscribe`]).
    async fn subscription(self, app: &App) -> Answer {
        let ClientEra::Legacy(sid, _) = &self.caller.era else {
            unreachable!("dispatched for legacy sessions only")
        };
        let _busy = app.in_flight.enter();
        let t0 = Instant::now();
        let who = crate::subscriptions::Subscriber::Session(*sid);
        let policy = self.caller.who.policy();
        let outcome =
            (app.resource_subscription(who, &self.method, self.params.as_ref(), policy)).await;
        observe(&self.method, t0);
        self.answer_legacy(outcome)
    }

    /// The answer of a request mcp-edge answers itself for a legacy session.
    fn answer_legacy(self, outcome: Result<Value, RpcError>) -> Answer {
        let outcome = outcome.map(Payload::from);
        finish(self.id, &self.method, false, outcome, &self.caller.who)
    }

    /// A call whose upstream may send request-scoped messages: an SSE
    /// stream relaying them, then the response; a plain answer when it
    /// relays nothing ([`reply::hold`]).
    async fn relayed(self, app: &Arc<App>) -> Outcome {
        let (relay, rx) =
            crate::relay::Relay::new(self.caller.era.session(), app.server.sse_queue_depth);
        let (floor, caps) = self.relay_view();
        let relay = relay.with_log_floor(floor).with_caps(caps);
        let keepalive = app.server.keepalive;
        // Registered now, so a cancellation sent as soon as the stream
        // opens finds the request.
        let cancel = match self.caller.era {
            ClientEra::Legacy(sid, _) => Some(app.cancels.register(sid, &self.id)),
            ClientEra::Modern => None,
        };
        let app = app.clone();
        let fut = async move {
            let Call {
                id,
                method,
                params,
                caller,
                request_bytes,
            } = self;
            let _busy = app.in_flight.enter();
            let t0 = Instant::now();
            let (who, modern) = (&caller.who, caller.modern());
            let session = caller.era.session();
            let audit = audited::Pending::start(
                &app,
                &method,
                params.as_ref(),
                session,
                who,
                request_bytes,
            );
            let call = dispatch(&app, &method, params, modern, Some(relay), who);
            let outcome = match cancel {
                Some((_registered, cancelled)) => super::cancel::cancellable(call, cancelled).await,
                None => call.await,
            };
            observe(&method, t0);
            finish_audited(audit, id, &method, modern, outcome, who).response
        };
        match reply::hold(rx, Box::pin(fut), keepalive).await {
            reply::Held::Answer(response) => Outcome::Answer(Answer {
                response,
                status: StatusCode::OK,
                session: None,
            }),
            reply::Held::Stream(r) => Outcome::Stream(r),
        }
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

    /// Any other request: through [`dispatch`], answered in one response.
    async fn plain(self, app: &App) -> Answer {
        let Call {
            id,
            method,
            params,
            caller,
            request_bytes,
        } = self;
        let _busy = app.in_flight.enter();
        let t0 = Instant::now();
        let (who, modern, era) = (&caller.who, caller.modern(), caller.era);
        let session = era.session();
        let audit =
            audited::Pending::start(app, &method, params.as_ref(), session, who, request_bytes);
        let call = dispatch(app, &method, params, modern, None, who);
        // A legacy request can be cancelled by its session's
        // `notifications/cancelled` ([`super::cancel`]); a modern one by
        // closing its connection. (Written out, not a generic helper: each
        // async layer holding the call future grows every connection's
        // future, which `budget` counts per idle connection.)
        let outcome = match era {
            ClientEra::Legacy(sid, _) => {
                let (_registered, cancelled) = app.cancels.register(sid, &id);
                super::legacy_input::no_stream(super::cancel::cancellable(call, cancelled).await)
            }
            ClientEra::Modern => call.await,
        };
        observe(&method, t0);
        finish_audited(audit, id, &method, modern, outcome, who)
    }
}

/// `initialize`: version negotiation and a new session owned by `who`
/// (`../shared/spec/2025-11-25/lifecycle.mdx` §Version Negotiation).
fn initialize(
    app: &App,
    id: Value,
    params: Option<&Value>,
    who: &Who,
) -> Result<Answer, (Value, Refusal)> {
    let asked = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let Some(asked) = asked else {
        return Ok(Answer {
            response: protocol::error_response(
                id,
                &RpcError::new(
                    protocol::INVALID_PARAMS,
                    "Invalid params: initialize needs params.protocolVersion",
                ),
            )
            .into(),
            status: StatusCode::OK,
            session: None,
        });
    };
    let version = match ProtocolVersion::parse(asked) {
        Some(v) if v.is_legacy() => v,
        _ => ProtocolVersion::LATEST_LEGACY,
    };
    let caps = ClientCaps::parse(params.and_then(|p| p.get("capabilities")));
    let sid = match app
        .sessions
        .open(version, who.owner(), caps, who.access.shares())
    {
        Ok(s) => s,
        Err(
            e @ (SessionError::Full { retry_after, .. } | SessionError::Share { retry_after, .. }),
        ) => {
            let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            let limit = match e {
                SessionError::Share { .. } => "session_share",
                _ => "session_capacity",
            };
            let r = RpcError::new(protocol::SESSIONS_FULL, e.to_string())
                .with_data(json!({"retryAfterSeconds": secs, "limit": limit}));
            return Err((id, Refusal(StatusCode::SERVICE_UNAVAILABLE, r)));
        }
        Err(e) => {
            return Err((
                id,
                refuse(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    protocol::INTERNAL_ERROR,
                    e.to_string(),
                ),
            ))
        }
    };
    crate::metrics::count_request("initialize", true);
    let result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": App::capabilities(),
        "serverInfo": App::server_info(),
        "instructions": app.instructions(who.policy()),
    });
    Ok(Answer {
        response: protocol::result_response(id, result).into(),
        status: StatusCode::OK,
        session: Some(sid),
    })
}
