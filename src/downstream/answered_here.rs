//! The requests mcp-edge answers itself in one era, past admission:
//! `initialize` (a new legacy session), a legacy session's
//! `logging/setLevel` and `resources/subscribe`/`unsubscribe`, and a
//! modern `subscriptions/listen` (the stream of [`super::listen`]).
//! (`ping` and `server/discover` are rows of [`super::call::dispatch`].)

use super::admission::{Call, ClientEra};
use super::app::{App, Who};
use super::call::{finish, observe};
use super::reply::{refuse, Refusal};
use super::reply::{Answer, Outcome};
use crate::protocol::{self, ClientCaps, Payload, ProtocolVersion, RpcError};
use crate::session::{SessionError, SessionId};
use http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::time::Instant;

impl Call {
    /// A modern `subscriptions/listen`: the SSE stream of [`super::listen`].
    pub(super) async fn listen(
        self,
        app: &Arc<App>,
        stream_ok: bool,
    ) -> Result<Outcome, (Value, Refusal)> {
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
    pub(super) fn set_level(self, app: &App) -> Answer {
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
    pub(super) async fn subscription(self, app: &App) -> Answer {
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
}

/// `initialize`: version negotiation and a new session owned by `who`
/// (`../shared/spec/2025-11-25/lifecycle.mdx` §Version Negotiation); in
/// `sse`, a session of the HTTP+SSE transport made when its stream opened
/// (`../shared/spec/2024-11-05` has no `Mcp-Session-Id`: the stream's
/// `sessionId` names it), that session's version and capabilities set
/// instead. A version mcp-edge does not speak there gets its newest legacy
/// one.
pub(super) fn initialize(
    app: &App,
    id: Value,
    params: Option<&Value>,
    who: &Who,
    sse: Option<SessionId>,
) -> Result<Answer, (Value, Refusal)> {
    let asked = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let Some(asked) = asked else {
        let e = RpcError::new(
            protocol::INVALID_PARAMS,
            "Invalid params: initialize needs params.protocolVersion",
        );
        return Ok(Answer {
            response: protocol::error_response(id, &e).into(),
            status: StatusCode::OK,
            session: None,
        });
    };
    let version = match ProtocolVersion::parse(asked) {
        Some(v) if v.is_legacy() && (sse.is_some() || v.streamable()) => v,
        _ => ProtocolVersion::LATEST_LEGACY,
    };
    let caps = ClientCaps::parse(params.and_then(|p| p.get("capabilities")));
    let opened = match sse {
        None => (app.sessions).open(version, who.owner(), caps, who.access.shares()),
        Some(sid) => (app.sessions)
            .initialize_sse(&sid, who.owner(), (version, caps))
            .map(|()| sid),
    };
    let sid = opened.map_err(|e| (id.clone(), not_opened(e)))?;
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
        // An HTTP+SSE session has no header to carry its id.
        session: sse.is_none().then_some(sid),
    })
}

/// Why no session: 503 for a full table (`session_capacity`) or a client
/// at its share (`session_share`), with when to retry; 404 for an
/// HTTP+SSE session gone meanwhile; 500 without randomness.
pub(super) fn not_opened(e: SessionError) -> Refusal {
    match e {
        SessionError::Full { retry_after, .. } | SessionError::Share { retry_after, .. } => {
            let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            let limit = match e {
                SessionError::Share { .. } => "session_share",
                _ => "session_capacity",
            };
            let r = RpcError::new(protocol::SESSIONS_FULL, e.to_string())
                .with_data(json!({"retryAfterSeconds": secs, "limit": limit}));
            Refusal(StatusCode::SERVICE_UNAVAILABLE, r)
        }
        SessionError::NotFound => super::reply::not_found(),
        e => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            protocol::INTERNAL_ERROR,
            e.to_string(),
        ),
    }
}
