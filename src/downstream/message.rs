//! One JSON-RPC message of a client, whichever transport brought it (a
//! POST on `/mcp`, a batch's item, a POST of the HTTP+SSE transport):
//! a client's answer to a relayed request handed back to its upstream, a
//! notification acted on, or a request admitted ([`admit`]), checked in its
//! era and routed to its handler ([`Call::route`], the dispatch table).

use super::admission::{admit, Admitted, Call, Head, SessionOp};
use super::app::App;
use super::reply::{Outcome, Refusal};
use super::{answered_here, modern};
use crate::protocol::{Message, RpcError};
use http::{HeaderMap, StatusCode};
use serde_json::Value;
use std::sync::Arc;

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
/// notification, or a request: admitted ([`admit`]), checked in its era,
/// then routed ([`Call::route`]).
pub(super) async fn one(
    app: &Arc<App>,
    head: &Head,
    h: &HeaderMap,
    msg: Message,
    stream_ok: bool,
    request_bytes: usize,
) -> Result<Outcome, (Value, Refusal)> {
    if !matches!(msg, Message::Request { .. }) {
        // An answer or notification naming another box's session (or no
        // session id at all) is refused as a request would be: 404, so it
        // is not dropped unseen (a balancer that sent it to the wrong box).
        head.session().map_err(|refused| (Value::Null, refused))?;
    }
    let request = match msg {
        Message::Response { id, outcome } => {
            relayed_answer(app, head, id, outcome).await;
            return Ok(Outcome::Accepted);
        }
        Message::Notification { method, params } => {
            notification(app, head, &method, params.as_ref());
            return Ok(Outcome::Accepted);
        }
        Message::Request { id, method, params } => (id, method, params),
    };
    let call = match admit(app, head, h, request, request_bytes)? {
        Admitted::Call(call) => call,
        Admitted::Initialize(who, id, params) => {
            let sse = head
                .sse
                .then_some(head.session())
                .and_then(|s| s.ok().flatten());
            let answered = answered_here::initialize(app, id, params.as_ref(), &who, sse);
            return answered.map(Outcome::Answer);
        }
    };
    if call.caller.modern() {
        modern_checks(app, h, &call)?;
    }
    match call.route(stream_ok) {
        Route::Listen => call.listen(app, stream_ok).await,
        Route::Session(SessionOp::SetLevel) => Ok(Outcome::Answer(call.set_level(app))),
        Route::Session(SessionOp::Subscription) => {
            Ok(Outcome::Answer(call.subscription(app).await))
        }
        Route::Relayed => Ok(call.relayed(app).await),
        Route::Modern => Ok(super::rounds::serve(app, call, stream_ok).await),
        Route::Plain => Ok(Outcome::Answer(call.serve(app, None).await)),
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
                app.sessions.cancel(sid, request);
                // A call whose stream waits to be resumed is not polled:
                // dropped here, which cancels it upstream.
                drop(app.resumes.cancelled(&sid, &request.to_string()));
            }
        }
        _ => {}
    }
}

/// A modern request's own checks: a method 2026-07-28 removed (404,
/// [`modern::removed`]), then its `_meta` and headers
/// ([`modern::validate`]) and its `Mcp-Param-*` headers (400); a refusal
/// is audited ([`super::call::refused`]).
fn modern_checks(app: &App, h: &HeaderMap, call: &Call) -> Result<(), (Value, Refusal)> {
    let (method, params, who) = (call.method.as_str(), call.params.as_ref(), &call.caller.who);
    let checked = modern::removed(method)
        .map_err(|e| Refusal(StatusCode::NOT_FOUND, e))
        .and_then(|()| {
            modern::validate(h, method, params)
                .and_then(|()| modern::check_param_headers(app, h, method, params, who.policy()))
                .map_err(|e| Refusal(StatusCode::BAD_REQUEST, e))
        });
    checked.map_err(|r| {
        let bytes = call.request_bytes;
        super::call::refused(app, &call.id, method, params, who, bytes, &r.1);
        (call.id.clone(), r)
    })
}

/// Which handler of [`Call`] serves a request.
enum Route {
    Listen,
    Session(SessionOp),
    Relayed,
    Modern,
    Plain,
}

impl Call {
    /// The dispatch table: methods mcp-edge answers itself in this era,
    /// then a relayed call (SSE, when the client takes a stream), then a
    /// plain one. (Decided here, awaited by the caller: one async layer
    /// less in every connection's future.)
    fn route(&self, stream_ok: bool) -> Route {
        if let Some(op) = self.from_session {
            return Route::Session(op);
        }
        let legacy = !self.caller.modern();
        match self.method.as_str() {
            "subscriptions/listen" if !legacy => Route::Listen,
            // A modern call's head waits for its outcome; its upstream's
            // requests become MRTR rounds (super::rounds).
            m if !legacy && relayable(m) => Route::Modern,
            m if stream_ok && relayable(m) => Route::Relayed,
            _ => Route::Plain,
        }
    }
}
