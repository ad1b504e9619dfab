//! The tasks extension through the router (`io.modelcontextprotocol/tasks`,
//! ext-tasks `specification/draft/tasks.md`; table and wire rules in
//! [`crate::tasks`]).
//!
//! - A `tools/call` goes upstream as the caller sent it: the extension is
//!   declared only when the caller declared it, so a tool with optional task
//!   support answers a caller that did not directly (no polling, and its
//!   `InputRequiredResult` reaches the caller). An upstream that answers
//!   `-32021` naming the extension (the tool requires a task, §Capability
//!   Negotiation) is asked once more with it declared. A `CreateTaskResult`
//!   (§Task Creation; also an unsolicited one) is *adopted*: for a caller
//!   that declared the extension, entered in the task table and handed on
//!   under the gateway's task id; for any other caller (every legacy one),
//!   *followed* — the gateway polls `tasks/get` at the task's
//!   `pollIntervalMs` (clamped, [`crate::tasks::poll_interval`]) until a
//!   terminal status and answers the call with the final result
//!   (`completed`), the task's JSON-RPC error (`failed`), or an error; past
//!   the upstream's `call_timeout` (counted from the call) the task is
//!   cancelled upstream and the caller gets `-31001` (§Backwards
//!   Compatibility: a client may drive the polling internally). A caller
//!   that goes away meanwhile leaves the task on the table's orphan list,
//!   which the session sweep cancels upstream ([`Router::cancel_orphans`]).
//! - `tasks/get`, `tasks/update`, `tasks/cancel` name a gateway task id:
//!   looked up (the caller's own, live), sent to its upstream with the
//!   upstream's id (`Mcp-Name` = that id, [`crate::protocol::routed_name`]),
//!   and the answer carries the gateway id wherever the upstream's stood
//!   ([`crate::tasks::rename`]); its status (a successful `tasks/cancel`:
//!   `cancelled`) is recorded. Unknown, expired or another caller's:
//!   `-32602` (§Protocol Errors); a caller that did not declare the
//!   extension: `-32021`; a legacy one: `-32601`.

use super::Router;
use crate::protocol::{self, Payload, ResultType, RpcError};
use crate::tasks::{self, Status, TaskId};
use crate::upstream::Upstream;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::time::Instant;

/// What the tasks extension needs to know of a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskCaller {
    /// Its owner mark (`crate::access::Access::owner`).
    pub owner: u64,
    /// A modern request.
    pub modern: bool,
    /// The request declared the extension in its `_meta` client capabilities.
    pub declared: bool,
}

impl TaskCaller {
    /// A caller that knows nothing of tasks (its task-backed calls are followed).
    pub const NONE: TaskCaller = TaskCaller {
        owner: 0,
        modern: false,
        declared: false,
    };
}

/// The params of a `tasks/*` request to the upstream: the caller's, with
/// the upstream's task id and the extension declared.
fn upstream_params(params: Option<&Value>, upstream_task: &str) -> Option<Value> {
    let mut p = Some(params.cloned().unwrap_or_else(|| json!({})));
    if let Some(o) = p.as_mut().and_then(Value::as_object_mut) {
        o.insert("taskId".into(), Value::String(upstream_task.into()));
    }
    tasks::declare(&mut p);
    p
}

impl Router {
    /// The task table.
    pub fn tasks(&self) -> &Arc<tasks::Tasks> {
        &self.tasks
    }

    /// True when some upstream negotiated the extension now (advertised to
    /// callers that declare it, `server/discover`).
    pub fn tasks_offered(&self) -> bool {
        self.upstreams().iter().any(|u| u.offers_tasks())
    }

    /// Sends `tools/call` to `up`, which offers the extension, as a caller
    /// that did not declare it sent it (in its era: a legacy caller of a
    /// dual-era upstream in its legacy session) — once more, in the
    /// upstream's own era with the extension declared, when the tool
    /// requires a task — and adopts a task it answers with
    /// ([`Router::adopt_task`]).
    pub(super) async fn call_with_tasks(
        &self,
        up: Arc<Upstream>,
        params: Option<Value>,
        relay: Option<crate::relay::Relay>,
        (caller, who): (TaskCaller, crate::share::Claimant<'_>),
        era: crate::upstream::CallEra,
    ) -> Result<Payload, RpcError> {
        let t0 = Instant::now();
        let again = (params.clone(), relay.clone());
        // A task is a modern thing: asked for in the upstream's own era.
        let own = crate::upstream::CallEra::Own;
        let result = match up.call_as("tools/call", params, relay, who, era).await {
            Ok(r) => r,
            Err(e) => {
                let e = e.to_rpc();
                if !tasks::requires_tasks(&e) {
                    return Err(e);
                }
                let (mut params, relay) = again;
                tasks::declare(&mut params);
                let again = up.call_as("tools/call", params, relay, who, own).await;
                again.map_err(|e| e.to_rpc())?
            }
        };
        if result.result_type() != Some(ResultType::Task) {
            return Ok(result);
        }
        self.adopt_task(up, result, caller, t0).await
    }

    /// A `CreateTaskResult` `up` answered a `tools/call` with, begun at
    /// `t0` (also one it was not asked for: an upstream's task id never
    /// reaches a caller): handed on or followed ([`Router::adopt`]).
    pub(super) async fn adopt_task(
        &self,
        up: Arc<Upstream>,
        result: Payload,
        caller: TaskCaller,
        t0: Instant,
    ) -> Result<Payload, RpcError> {
        let adopted = Box::pin(self.adopt(up, result.into_value(), caller, t0)).await;
        adopted.map(Payload::from)
    }

    /// A `CreateTaskResult` of `up`: handed on under a gateway id to a
    /// caller that declared the extension, else followed to its end.
    async fn adopt(
        &self,
        up: Arc<Upstream>,
        mut result: Value,
        caller: TaskCaller,
        t0: Instant,
    ) -> Result<Value, RpcError> {
        let Some(upstream_task) = result
            .get("taskId")
            .and_then(Value::as_str)
            .map(String::from)
        else {
            return Err(RpcError::new(
                protocol::INTERNAL_ERROR,
                format!(
                    "upstream {:?} answered with a task without taskId",
                    up.name()
                ),
            ));
        };
        if !caller.declared {
            let deadline = t0 + up.config.call_timeout;
            let guard = Abandoned::new(&self.tasks, up.id, &upstream_task);
            let r = follow(&up, &upstream_task, &result, deadline).await;
            guard.disarm();
            return r;
        }
        let status = Status::of(&result).unwrap_or(Status::Working);
        let keep = tasks::keep_for(result.get("ttlMs").and_then(Value::as_u64));
        let now = Instant::now();
        match (self.tasks).insert(up.id, &upstream_task, caller.owner, status, keep, now) {
            Ok(id) => {
                result["taskId"] = Value::String(id.to_wire());
                Ok(result)
            }
            Err(e) => {
                cancel_upstream(&up, &upstream_task).await;
                Err(RpcError::new(
                    protocol::TASKS_FULL,
                    format!("{e}; the upstream task was cancelled"),
                )
                .with_data(json!({"upstream": up.name()})))
            }
        }
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel` of `caller`, routed by
    /// the gateway task id in `params.taskId`.
    pub(super) async fn task_request(
        &self,
        method: &str,
        params: Option<Value>,
        caller: TaskCaller,
    ) -> Result<Value, RpcError> {
        if !caller.modern {
            return Err(RpcError::new(
                protocol::METHOD_NOT_FOUND,
                format!("Method not found: {method} (the tasks extension is served to 2026-07-28 callers)"),
            ));
        }
        if !caller.declared {
            return Err(tasks::missing_capability());
        }
        let wire = params
            .as_ref()
            .and_then(|p| p.get("taskId"))
            .and_then(Value::as_str);
        let Some(wire) = wire else {
            return Err(RpcError::new(
                protocol::INVALID_PARAMS,
                "Invalid params: params.taskId must be a string",
            ));
        };
        let id = TaskId::parse(wire).ok_or_else(tasks::not_found)?;
        let (up, upstream_task) = self.task_target(&id, caller.owner)?;
        let p = upstream_params(params.as_ref(), &upstream_task);
        let mut result = (up.call(method, p).await).map_err(|e| e.to_rpc())?;
        let status = match (Status::of(&result), method) {
            (None, "tasks/cancel") => Some(Status::Cancelled),
            (s, _) => s,
        };
        if let Some(s) = status {
            self.tasks.set_status(&id, s);
        }
        let wire = id.to_wire();
        tasks::rename(&mut result, &upstream_task, &wire);
        if method == "tasks/get" {
            if let Some(o) = result.as_object_mut() {
                o.insert("taskId".into(), Value::String(wire));
            }
        }
        Ok(result)
    }

    /// The upstream and upstream task id of gateway task `id`, when it is
    /// `owner`'s and live, and its upstream is still configured.
    fn task_target(&self, id: &TaskId, owner: u64) -> Result<(Arc<Upstream>, Box<str>), RpcError> {
        if id.instance() != self.tasks.instance() {
            return Err(tasks::other_box(id, self.tasks.instance()));
        }
        let entry = (self.tasks)
            .get(id, owner, Instant::now())
            .ok_or_else(tasks::not_found)?;
        let up = self.by_id(entry.upstream).ok_or_else(tasks::not_found)?;
        Ok((up, entry.upstream_task))
    }

    /// The current state of gateway task `wire` of `owner` (a `tasks/get`
    /// upstream, under the gateway id): what a listen stream following the
    /// task sends as `notifications/tasks`.
    pub async fn task_state(&self, wire: &str, owner: u64) -> Result<Value, RpcError> {
        let caller = TaskCaller {
            owner,
            modern: true,
            declared: true,
        };
        self.task_request("tasks/get", Some(json!({"taskId": wire})), caller)
            .await
    }

    /// Cancels upstream the tasks abandoned by their callers while followed
    /// ([`crate::tasks::Tasks::orphan`]), all at once, each waiting at most
    /// [`crate::limits::TASK_CALL_MAX`] (the session sweep's work).
    pub async fn cancel_orphans(&self) {
        let orphans = self.tasks.take_orphans();
        let cancels = orphans.iter().filter_map(|(upstream, task)| {
            let up = self.by_id(*upstream)?;
            Some(async move {
                let bounded =
                    tokio::time::timeout(crate::limits::TASK_CALL_MAX, cancel_upstream(&up, task));
                if bounded.await.is_err() {
                    crate::metrics::refused("task_call_time");
                }
            })
        });
        futures_util::future::join_all(cancels).await;
    }

    /// True when `wire` names a live task of `owner`.
    pub fn task_known(&self, wire: &str, owner: u64) -> bool {
        TaskId::parse(wire).is_some_and(|id| self.task_target(&id, owner).is_ok())
    }
}

/// Best effort: `tasks/cancel` of `upstream_task` on `up` (its answer is
/// not needed; cancellation is cooperative, §Task Cancellation).
async fn cancel_upstream(up: &Upstream, upstream_task: &str) {
    let p = upstream_params(None, upstream_task);
    if let Err(e) = up.call("tasks/cancel", p).await {
        tracing::debug!(upstream = %up.name(), "tasks/cancel of an abandoned task failed: {e}");
    }
}

/// While armed, a task being followed for a caller: dropped armed (the
/// caller went away: its call was cancelled or its connection closed), the
/// task goes on the table's orphan list for the sweep to cancel upstream
/// (§Task Cancellation; the caller can no longer see its result).
struct Abandoned<'a> {
    tasks: &'a tasks::Tasks,
    upstream: usize,
    task: &'a str,
    armed: bool,
}

impl<'a> Abandoned<'a> {
    fn new(tasks: &'a tasks::Tasks, upstream: usize, task: &'a str) -> Self {
        let armed = true;
        Abandoned {
            tasks,
            upstream,
            task,
            armed,
        }
    }

    /// The follow ended (its own way): nothing to cancel.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.tasks.orphan(self.upstream, self.task);
        }
    }
}

/// Polls `tasks/get` of `upstream_task` on `up` until it ends or
/// `deadline` passes (then cancels it: `-31001`). `completed` → its
/// `result`; `failed` → its `error`; `cancelled` or `input_required` (no
/// way to put the questions to this caller) → an error naming the task.
async fn follow(
    up: &Upstream,
    upstream_task: &str,
    created: &Value,
    deadline: Instant,
) -> Result<Value, RpcError> {
    let mut last = created.clone();
    loop {
        match Status::of(&last) {
            Some(Status::Completed) => {
                return Ok(last.get("result").cloned().unwrap_or_else(|| json!({})))
            }
            Some(Status::Failed) => {
                return Err(RpcError::from_json(
                    last.get("error").unwrap_or(&Value::Null),
                ))
            }
            Some(Status::Cancelled) => {
                return Err(RpcError::new(
                    protocol::INTERNAL_ERROR,
                    format!(
                        "upstream {:?} cancelled the task behind this call",
                        up.name()
                    ),
                ))
            }
            Some(Status::InputRequired) => {
                cancel_upstream(up, upstream_task).await;
                return Err(RpcError::new(
                    protocol::INTERNAL_ERROR,
                    format!("upstream {:?}: the task behind this call asks for input, which mcp-edge cannot put to this caller; cancelled", up.name()),
                ));
            }
            Some(Status::Working) | None => {}
        }
        if Instant::now() >= deadline {
            cancel_upstream(up, upstream_task).await;
            let after = up.config.call_timeout.as_secs_f64();
            return Err(RpcError::new(
                protocol::UPSTREAM_TIMEOUT,
                format!("upstream {:?}: the task behind this call did not finish within call_timeout ({after}s); cancelled upstream", up.name()),
            )
            .with_data(json!({"upstream": up.name()})));
        }
        tokio::time::sleep_until((Instant::now() + tasks::poll_interval(&last)).min(deadline))
            .await;
        let p = upstream_params(None, upstream_task);
        last = (up.call("tasks/get", p).await).map_err(|e| e.to_rpc())?;
    }
}
