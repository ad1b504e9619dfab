//! The downstream side of the tasks extension (`io.modelcontextprotocol/tasks`,
//! ext-tasks `specification/draft/tasks.md`): who counts as a caller of it,
//! what `server/discover` advertises, and the `taskIds` of a
//! `subscriptions/listen` stream (§Task Status Notifications). Routing and
//! the table are [`crate::router`]'s and [`crate::tasks`]'.

use super::app::App;
use serde_json::{json, Value};

/// The capabilities of a `server/discover` answer: [`App::capabilities`],
/// plus the extension when the request declared it and an upstream
/// offers it now (§Capability Negotiation; 2026-07-28 versioning.mdx
/// §Extension Negotiation).
pub(super) fn capabilities(app: &App, params: Option<&Value>) -> Value {
    let mut caps = App::capabilities();
    if crate::tasks::declared(params) && app.router.tasks_offered() {
        caps["extensions"] = json!({ crate::tasks::EXTENSION: {} });
    }
    caps
}

/// The `notifications.taskIds` of a listen request (§Task Status
/// Notifications): -32602 when not an array of strings, -32021 when the
/// request asks for some without declaring the extension.
pub(super) fn asked(params: Option<&Value>) -> Result<Vec<&str>, crate::protocol::RpcError> {
    use crate::protocol::{RpcError, INVALID_PARAMS};
    let ids = match params
        .and_then(|p| p.get("notifications"))
        .and_then(|n| n.get("taskIds"))
    {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
            a.iter().filter_map(Value::as_str).collect::<Vec<_>>()
        }
        Some(_) => {
            return Err(RpcError::new(
                INVALID_PARAMS,
                "params.notifications.taskIds must be an array of task id strings",
            ))
        }
    };
    if !ids.is_empty() && !crate::tasks::declared(params) {
        return Err(crate::tasks::missing_capability());
    }
    Ok(ids)
}

/// One task a listen stream follows.
struct Item {
    wire: String,
    /// Status and `lastUpdatedAt` of the state last sent.
    seen: Option<String>,
    due: tokio::time::Instant,
}

/// The tasks a listen stream follows: each is polled upstream
/// (`tasks/get` through the router, at its `pollIntervalMs`, clamped), and
/// every change of status or `lastUpdatedAt` becomes a `notifications/tasks`
/// carrying the whole task as `tasks/get` shows it, under the gateway id
/// (§Task Status Notifications). The first state is sent at once; a task
/// that ends, expires or is forgotten is no longer followed. Nothing is
/// queued: a stream that is not read is not polled.
pub(super) struct Followed {
    owner: u64,
    items: Vec<Item>,
}

impl Followed {
    /// The ids among `asked` that name live tasks of `owner` (distinct, at
    /// most [`crate::limits::MAX_TASKS_PER_LISTEN`]).
    pub(super) fn new(app: &App, asked: Vec<&str>, owner: u64) -> Followed {
        let now = tokio::time::Instant::now();
        let mut items: Vec<Item> = Vec::new();
        for wire in asked {
            if items.iter().any(|i| i.wire == wire) {
                continue;
            }
            if items.len() == crate::limits::MAX_TASKS_PER_LISTEN {
                crate::metrics::refused("tasks_per_listen");
                continue;
            }
            if app.router.task_known(wire, owner) {
                let (wire, seen, due) = (wire.to_string(), None, now);
                items.push(Item { wire, seen, due });
            }
        }
        Followed { owner, items }
    }

    /// The honoured ids, for the acknowledgment.
    pub(super) fn ids(&self) -> Vec<Value> {
        (self.items.iter())
            .map(|i| Value::String(i.wire.clone()))
            .collect()
    }

    /// True when it follows nothing.
    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Resolves when the next task is due for a poll (never when none is followed).
    pub(super) async fn due(&self) {
        match self.items.iter().map(|i| i.due).min() {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    /// Polls the tasks that are due, all at once, each waiting at most
    /// [`crate::limits::TASK_CALL_MAX`] (one that takes longer is polled
    /// again later, `refused{limit="task_call_time"}`); the SSE events of
    /// those that changed.
    pub(super) async fn poll(&mut self, app: &App, subscription: &Value) -> Option<bytes::Bytes> {
        let now = tokio::time::Instant::now();
        let owner = self.owner;
        let states =
            futures_util::future::join_all((self.items.iter()).filter(|i| i.due <= now).map(
                |i| async move {
                    let state = app.router.task_state(&i.wire, owner);
                    tokio::time::timeout(crate::limits::TASK_CALL_MAX, state).await
                },
            ))
            .await;
        let mut states = states.into_iter();
        let mut out = Vec::new();
        (self.items).retain_mut(|item| {
            if item.due > now {
                return true;
            }
            let Some(state) = states.next() else {
                return true;
            };
            item.update(state, subscription, &mut out)
        });
        (!out.is_empty()).then(|| bytes::Bytes::from(out))
    }
}

impl Item {
    /// Takes in the outcome of one poll: a changed state becomes an event
    /// in `out`; false when the task is no longer followed (ended, or gone).
    fn update(
        &mut self,
        state: Result<Result<Value, crate::protocol::RpcError>, tokio::time::error::Elapsed>,
        subscription: &Value,
        out: &mut Vec<u8>,
    ) -> bool {
        let retry = tokio::time::Instant::now() + crate::limits::TASK_POLL_MAX;
        let state = match state {
            Ok(Ok(state)) => state,
            Ok(Err(e)) if e.code == crate::protocol::INVALID_PARAMS => return false,
            Ok(Err(_)) => {
                self.due = retry;
                return true;
            }
            Err(_) => {
                crate::metrics::refused("task_call_time");
                self.due = retry;
                return true;
            }
        };
        let status = crate::tasks::Status::of(&state);
        let next = crate::tasks::poll_interval(&state);
        let key = format!("{}|{}", state["status"], state["lastUpdatedAt"]);
        if self.seen.as_deref() != Some(key.as_str()) {
            self.seen = Some(key);
            out.extend_from_slice(&notification(state, subscription));
        }
        self.due = tokio::time::Instant::now() + next;
        !status.is_some_and(crate::tasks::Status::is_terminal)
    }
}

/// `notifications/tasks` of one task state (a `tasks/get` result without
/// its `resultType` and `_meta`), stamped with the subscription id.
fn notification(mut state: Value, subscription: &Value) -> bytes::Bytes {
    if let Some(o) = state.as_object_mut() {
        o.remove("resultType");
        o.insert(
            "_meta".into(),
            json!({ super::streams::META_SUBSCRIPTION_ID: subscription }),
        );
    }
    let n = crate::protocol::notification("notifications/tasks", Some(state));
    crate::protocol::sse::event(&n.to_string())
}
