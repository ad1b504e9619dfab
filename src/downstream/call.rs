//! One admitted request, the one request type of the downstream pipeline
//! ([`Call`]: made by [`super::request`] once [`super::admission`] let it
//! in, served there or by [`super::rounds`]), and the dispatch table that
//! answers it ([`dispatch`]): the lifecycle methods mcp-edge answers
//! itself, everything else through the router.

use super::admission::Caller;
use super::app::{App, Who};
use crate::protocol::{self, Payload, ProtocolVersion, RpcError};
use serde_json::{json, Value};

/// One admitted request.
pub(super) struct Call {
    pub(super) id: Value,
    pub(super) method: String,
    pub(super) params: Option<Value>,
    pub(super) caller: Caller,
    /// Size of the message as received (the audit log's `request_bytes`).
    pub(super) request_bytes: usize,
}

/// The dispatch table of one admitted request: `ping` and `server/discover`
/// here, everything else through the router under the caller's policy.
pub(super) async fn dispatch(
    app: &App,
    method: &str,
    params: Option<Value>,
    modern: bool,
    relay: Option<crate::relay::Relay>,
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
            let caller = super::task_callers::caller(who, params.as_ref(), modern);
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
