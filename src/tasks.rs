//! The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663): the
//! fixed table of tasks the gateway handed to callers, and the wire rules
//! it needs.
//!
//! Spec: the extension's `specification/draft/tasks.md`
//! (modelcontextprotocol/ext-tasks; 2026-07-28 changelog.mdx item 6,
//! versioning.mdx §Extension Negotiation). An upstream that negotiated the
//! extension may answer a `tools/call` with a `CreateTaskResult`
//! (`resultType: "task"`, §Task Creation); the caller then polls
//! `tasks/get`, answers `tasks/update` and cancels with `tasks/cancel`,
//! naming the task by `taskId` (and, over HTTP, in `Mcp-Name`, §Streamable
//! HTTP: Routing Headers).
//!
//! Several upstreams mint their own ids, which may collide and which a
//! caller must not be able to forge (§Security Considerations: task ids are
//! bearer tokens). The gateway therefore never shows an upstream's id: each
//! task handed to a caller gets an entry here and the caller sees the
//! entry's [`TaskId`] — `task-` + 32 hex digits of CSPRNG output + 4 hex
//! digits of slot index (O(1) lookup, secret compared in constant time).
//! The entry holds the upstream (its process-unique id), the upstream's
//! task id, the caller's owner mark (another client presenting the id is
//! answered as for an unknown one), the last status seen and an expiry (the
//! task's `ttlMs` from creation, clamped to [`limits::TASK_TTL_MAX`]).
//!
//! The table is allocated once ([`limits::TASKS_CAPACITY`] slots and a free
//! list) and never grows; only the upstream ids are heap (freed with the
//! entry). Every method takes `now`. A full table, after dropping expired
//! entries, refuses (`mcp_edge_refused_total{limit="tasks"}`).

use crate::instance::InstanceId;
use crate::limits;
use crate::protocol::{self, RpcError};
use serde_json::{json, Map, Value};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

mod task_id;
pub use task_id::TaskId;

/// The extension identifier (§Extension Identifier).
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// A task's status (§Task Status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `working`.
    Working,
    /// `input_required`.
    InputRequired,
    /// `completed`.
    Completed,
    /// `failed`.
    Failed,
    /// `cancelled`.
    Cancelled,
}

impl Status {
    /// Parses the wire form; `None` for anything else.
    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "working" => Status::Working,
            "input_required" => Status::InputRequired,
            "completed" => Status::Completed,
            "failed" => Status::Failed,
            "cancelled" => Status::Cancelled,
            _ => return None,
        })
    }

    /// The status of a `Task`-shaped object (`status` field), if valid.
    pub fn of(task: &Value) -> Option<Status> {
        task.get("status")
            .and_then(Value::as_str)
            .and_then(Status::parse)
    }

    /// `completed`, `failed` and `cancelled` end a task.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

/// True when a capabilities object (`ClientCapabilities` or
/// `ServerCapabilities`) declares the extension (`extensions` map, §Capability
/// Negotiation).
pub fn in_capabilities(capabilities: Option<&Value>) -> bool {
    capabilities
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(EXTENSION))
        .is_some_and(|v| !v.is_null())
}

/// True when a modern request's `_meta` client capabilities declare the
/// extension (a server may still answer one that does not with a
/// `CreateTaskResult`, §Task Creation: unsolicited tasks).
pub fn declared(params: Option<&Value>) -> bool {
    in_capabilities(
        protocol::params_meta(params).and_then(|m| m.get(protocol::META_CLIENT_CAPABILITIES)),
    )
}

/// Declares the extension in the request's `_meta` client capabilities
/// (creating what is missing, keeping everything else): what the gateway
/// sends upstream for `tasks/*` requests, and for the retry of a call of a
/// caller that did not declare it when the tool requires a task
/// ([`requires_tasks`]), whose task it then follows itself.
pub fn declare(params: &mut Option<Value>) {
    let p = params.get_or_insert_with(|| json!({}));
    let Some(p) = p.as_object_mut() else { return };
    let caps = object(object(p, "_meta"), protocol::META_CLIENT_CAPABILITIES);
    (object(caps, "extensions").entry(EXTENSION)).or_insert_with(|| json!({}));
}

/// The object at `o[k]`, made one (empty) if missing or not an object.
fn object<'a>(o: &'a mut Map<String, Value>, k: &str) -> &'a mut Map<String, Value> {
    let v = o.entry(k).or_insert_with(|| json!({}));
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("made an object")
}

/// `-32021` naming the extension (§Capability Negotiation, §Error Handling).
pub fn missing_capability() -> RpcError {
    RpcError::new(
        protocol::MISSING_CLIENT_CAPABILITY,
        "Missing required client capability",
    )
    .with_data(json!({"requiredCapabilities": {"extensions": {EXTENSION: {}}}}))
}

/// True when an upstream's error is `-32021` naming the extension in
/// `data.requiredCapabilities` (a tool that must run as a task, §Capability
/// Negotiation, §Error Handling).
pub fn requires_tasks(e: &RpcError) -> bool {
    e.code == protocol::MISSING_CLIENT_CAPABILITY
        && in_capabilities(e.data.as_ref().and_then(|d| d.get("requiredCapabilities")))
}

/// Replaces every string equal to `upstream` in `v` with `gateway` (an
/// upstream's answer about its task, wherever it names it: the caller must
/// only ever see the gateway's id, §Security Considerations).
pub fn rename(v: &mut Value, upstream: &str, gateway: &str) {
    match v {
        Value::String(s) if s == upstream => *s = gateway.into(),
        Value::Array(a) => a.iter_mut().for_each(|x| rename(x, upstream, gateway)),
        Value::Object(o) => o.values_mut().for_each(|x| rename(x, upstream, gateway)),
        _ => {}
    }
}

/// `-32602` for an id that names no task of this caller (§Protocol Errors).
pub fn not_found() -> RpcError {
    RpcError::new(
        protocol::INVALID_PARAMS,
        "Failed to retrieve task: Task not found or expired",
    )
}

/// The error for a task id another box handed out (the `not_found` of a
/// fleet, naming both boxes).
pub fn other_box(id: &TaskId, here: InstanceId) -> RpcError {
    let what = format!("Failed to retrieve task: {}", id.to_wire());
    let (message, data) = crate::instance::elsewhere(&what, id.instance, here);
    RpcError::new(protocol::INVALID_PARAMS, message).with_data(data)
}

/// How long the gateway keeps a task created with `ttl_ms` (`ttlMs`;
/// `None` = unlimited): clamped to [`limits::TASK_TTL_MAX`].
pub fn keep_for(ttl_ms: Option<u64>) -> Duration {
    ttl_ms
        .map(Duration::from_millis)
        .unwrap_or(limits::TASK_TTL_DEFAULT)
        .min(limits::TASK_TTL_MAX)
}

/// How long to wait before the next `tasks/get` of a task whose last
/// state suggested `pollIntervalMs` (clamped to the limits).
pub fn poll_interval(task: &Value) -> Duration {
    task.get("pollIntervalMs")
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
        .unwrap_or(limits::TASK_POLL_DEFAULT)
        .clamp(limits::TASK_POLL_MIN, limits::TASK_POLL_MAX)
}

/// What the table keeps of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The upstream that runs it ([`crate::upstream::Upstream::id`]).
    pub upstream: usize,
    /// The upstream's own task id.
    pub upstream_task: Box<str>,
    /// The owner mark of the caller it was handed to.
    pub owner: u64,
    /// The last status seen (creation, `tasks/get`, a notification).
    pub status: Status,
    /// When the gateway forgets it.
    pub expires: Instant,
}

/// Errors of [`Tasks::insert`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TasksError {
    /// Every slot holds a live task.
    #[error("task table full ({capacity} tasks kept); try again when one expires")]
    Full {
        /// [`limits::TASKS_CAPACITY`] (or the test's capacity).
        capacity: usize,
    },
    /// The upstream's task id is empty or longer than [`limits::MAX_TASK_ID_BYTES`].
    #[error(
        "upstream task id is empty or longer than {} bytes",
        limits::MAX_TASK_ID_BYTES
    )]
    BadId,
    /// The CSPRNG failed (getrandom).
    #[error("no randomness for a task id: {0}")]
    Random(String),
}

struct Slot {
    secret: [u8; 16],
    entry: Option<Entry>,
}

struct Inner {
    slots: Box<[Slot]>,
    /// Indices of empty slots (capacity reserved at start).
    free: Vec<u16>,
    /// Upstream tasks a caller abandoned while the gateway followed them
    /// (upstream id, upstream task id), to be cancelled by the sweep: at
    /// most [`limits::TASK_ORPHANS`] (capacity reserved at start).
    orphans: Vec<(usize, Box<str>)>,
}

/// The fixed-capacity task table (one lock; every method takes `now`).
pub struct Tasks {
    inner: Mutex<Inner>,
    /// The box whose ids these are ([`Tasks::with_instance`]).
    instance: InstanceId,
}

impl Tasks {
    /// A table of `capacity` slots (at most 65,536), allocated now.
    pub fn new(capacity: usize) -> Tasks {
        let capacity = capacity.clamp(1, usize::from(u16::MAX) + 1);
        let slots = (0..capacity)
            .map(|_| Slot {
                secret: [0; 16],
                entry: None,
            })
            .collect();
        let free = (0..capacity).rev().map(|i| i as u16).collect();
        Tasks {
            inner: Mutex::new(Inner {
                slots,
                free,
                orphans: Vec::with_capacity(limits::TASK_ORPHANS),
            }),
            instance: InstanceId::DEFAULT,
        }
    }

    /// The table of box `instance`: its ids name it, and another box's
    /// are never found here.
    pub fn with_instance(mut self, instance: InstanceId) -> Tasks {
        self.instance = instance;
        self
    }

    /// The box whose ids these are.
    pub fn instance(&self) -> InstanceId {
        self.instance
    }

    /// Slots in the table.
    pub fn capacity(&self) -> usize {
        self.inner.lock().expect("tasks").slots.len()
    }

    /// Entries held now (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        let t = self.inner.lock().expect("tasks");
        t.slots.len() - t.free.len()
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Enters a task `upstream_task` of upstream `upstream`, handed to the
    /// caller with owner mark `owner`, kept for `keep` from `now`. Expired
    /// entries are dropped first when no slot is free; a table still full
    /// refuses (counted in `refused{limit="tasks"}`), as does a bad id.
    pub fn insert(
        &self,
        upstream: usize,
        upstream_task: &str,
        owner: u64,
        status: Status,
        keep: Duration,
        now: Instant,
    ) -> Result<TaskId, TasksError> {
        if upstream_task.is_empty() || upstream_task.len() > limits::MAX_TASK_ID_BYTES {
            crate::metrics::refused("tasks");
            return Err(TasksError::BadId);
        }
        let mut t = self.inner.lock().expect("tasks");
        if t.free.is_empty() {
            expire_locked(&mut t, now);
        }
        let Some(i) = t.free.pop() else {
            crate::metrics::refused("tasks");
            return Err(TasksError::Full {
                capacity: t.slots.len(),
            });
        };
        let mut secret = [0u8; 16];
        if let Err(e) = getrandom::fill(&mut secret) {
            t.free.push(i);
            return Err(TasksError::Random(e.to_string()));
        }
        let slot = &mut t.slots[usize::from(i)];
        slot.secret = secret;
        slot.entry = Some(Entry {
            upstream,
            upstream_task: upstream_task.into(),
            owner,
            status,
            expires: now + keep,
        });
        Ok(TaskId {
            instance: self.instance,
            secret,
            slot: i,
        })
    }

    /// The entry `id` names, when it is live at `now` and `owner`'s; an
    /// expired one is dropped. Another caller's task is `None` too.
    pub fn get(&self, id: &TaskId, owner: u64, now: Instant) -> Option<Entry> {
        let mut t = self.inner.lock().expect("tasks");
        let i = find(&t, id).filter(|_| id.instance == self.instance)?;
        let e = t.slots[i].entry.as_ref().expect("found");
        if e.expires <= now {
            release(&mut t, i);
            return None;
        }
        (e.owner == owner).then(|| e.clone())
    }

    /// Records the status last seen of task `id` (no-op when it is gone).
    pub fn set_status(&self, id: &TaskId, status: Status) {
        let mut t = self.inner.lock().expect("tasks");
        if let Some(i) = find(&t, id).filter(|_| id.instance == self.instance) {
            if let Some(e) = t.slots[i].entry.as_mut() {
                e.status = status;
            }
        }
    }

    /// Notes task `upstream_task` of upstream `upstream`, whose caller went
    /// away while the gateway followed it, for [`Tasks::take_orphans`]. A
    /// full list refuses (`refused{limit="task_orphans"}`): the task then
    /// runs on upstream until its own end or ttl.
    pub fn orphan(&self, upstream: usize, upstream_task: &str) -> bool {
        let mut t = self.inner.lock().expect("tasks");
        if t.orphans.len() == limits::TASK_ORPHANS {
            crate::metrics::refused("task_orphans");
            return false;
        }
        t.orphans.push((upstream, upstream_task.into()));
        true
    }

    /// The abandoned tasks noted since the last call (the list is emptied,
    /// its capacity kept).
    pub fn take_orphans(&self) -> Vec<(usize, Box<str>)> {
        let mut t = self.inner.lock().expect("tasks");
        t.orphans.drain(..).collect()
    }

    /// Drops every entry expired at `now`; returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        expire_locked(&mut self.inner.lock().expect("tasks"), now)
    }
}

fn find(t: &Inner, id: &TaskId) -> Option<usize> {
    let slot = t.slots.get(usize::from(id.slot))?;
    let diff = (slot.secret.iter())
        .zip(id.secret.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    (diff == 0 && slot.entry.is_some()).then_some(usize::from(id.slot))
}

fn release(t: &mut Inner, i: usize) {
    t.slots[i].entry = None;
    t.slots[i].secret = [0; 16];
    t.free.push(i as u16);
}

fn expire_locked(t: &mut Inner, now: Instant) -> usize {
    let mut n = 0;
    for i in 0..t.slots.len() {
        if t.slots[i].entry.as_ref().is_some_and(|e| e.expires <= now) {
            release(t, i);
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn ids_round_trip_and_reject_anything_else() {
        let t = Tasks::new(4);
        let now = Instant::now();
        let id = t.insert(1, "up-1", 7, Status::Working, MIN, now).unwrap();
        let wire = id.to_wire();
        assert!(wire.starts_with("task-edge.") && wire.len() == 46, "{wire}");
        assert_eq!(TaskId::parse(&wire), Some(id));
        for bad in [
            "",
            "task-",
            "up-1",
            &wire[..45],
            &wire.replace("task-", "tusk-"),
            &wire.replace("task-edge.", "task-"),
        ] {
            assert_eq!(TaskId::parse(bad), None, "{bad}");
        }
        assert_eq!(TaskId::parse(&format!("{wire}0")), None);
    }

    #[test]
    fn an_entry_is_found_only_by_its_id_and_owner() {
        let t = Tasks::new(4);
        let now = Instant::now();
        let a = t.insert(1, "same", 7, Status::Working, MIN, now).unwrap();
        let b = t.insert(2, "same", 7, Status::Working, MIN, now).unwrap();
        assert_ne!(a, b, "one upstream id on two upstreams: two tasks");
        let e = t.get(&a, 7, now).unwrap();
        assert_eq!((e.upstream, &*e.upstream_task), (1, "same"));
        assert_eq!(t.get(&b, 7, now).unwrap().upstream, 2);
        assert_eq!(t.get(&a, 8, now), None, "another caller's task is unknown");
        // A forged id: the right slot, another secret.
        let mut forged = a.to_wire();
        // Change one digit of the secret (the id is `task-edge.` + hex digits).
        let flipped = if &forged[10..11] == "0" { "1" } else { "0" };
        forged.replace_range(10..11, flipped);
        assert_ne!(forged, a.to_wire());
        assert_eq!(t.get(&TaskId::parse(&forged).unwrap(), 7, now), None);
        // The same id under another box's name is not this box's task.
        let moved = a.to_wire().replacen("task-edge.", "task-e2.", 1);
        assert_eq!(t.get(&TaskId::parse(&moved).unwrap(), 7, now), None);
        t.set_status(&a, Status::Completed);
        assert_eq!(t.get(&a, 7, now).unwrap().status, Status::Completed);
    }

    #[test]
    fn full_refuses_until_an_entry_expires_then_drains_to_empty() {
        let t = Tasks::new(3);
        let now = Instant::now();
        for i in 0..3 {
            let keep = MIN * (i + 1);
            t.insert(1, &format!("u{i}"), 0, Status::Working, keep, now)
                .unwrap();
        }
        assert_eq!(
            t.insert(1, "u3", 0, Status::Working, MIN, now),
            Err(TasksError::Full { capacity: 3 })
        );
        // The first expires at +60 s: its slot is taken by the next insert.
        let later = now + MIN;
        let id = t.insert(1, "u3", 0, Status::Working, MIN, later).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(&id, 0, later + MIN), None, "expired on lookup");
        assert_eq!(t.expire(now + MIN * 3), 2);
        assert!(t.is_empty());
    }

    #[test]
    fn bad_upstream_ids_are_refused() {
        let t = Tasks::new(2);
        let now = Instant::now();
        let long = "x".repeat(limits::MAX_TASK_ID_BYTES + 1);
        assert_eq!(
            t.insert(1, "", 0, Status::Working, MIN, now),
            Err(TasksError::BadId)
        );
        assert_eq!(
            t.insert(1, &long, 0, Status::Working, MIN, now),
            Err(TasksError::BadId)
        );
        assert!(t.is_empty());
    }

    #[test]
    fn a_slot_costs_what_the_budget_says() {
        let slot = std::mem::size_of::<Slot>() + std::mem::size_of::<u16>();
        assert!(slot <= crate::budget::TASK_SLOT_BYTES, "{slot} B");
    }

    #[test]
    fn orphans_are_bounded_and_taken_once() {
        let t = Tasks::new(1);
        for i in 0..limits::TASK_ORPHANS {
            assert!(t.orphan(1, &format!("u{i}")));
        }
        assert!(!t.orphan(1, "one-more"), "a full list refuses");
        let taken = t.take_orphans();
        assert_eq!(taken.len(), limits::TASK_ORPHANS);
        assert_eq!((taken[0].0, &*taken[0].1), (1, "u0"));
        assert!(t.take_orphans().is_empty());
        assert!(t.orphan(2, "again"), "room again");
    }

    #[test]
    fn wire_helpers() {
        let mut p = Some(json!({"name": "x", "_meta": {"k": 1}}));
        assert!(!declared(p.as_ref()));
        declare(&mut p);
        assert!(declared(p.as_ref()));
        assert_eq!(p.as_ref().unwrap()["_meta"]["k"], 1, "other keys kept");
        let mut none = None;
        declare(&mut none);
        assert!(declared(none.as_ref()));
        assert_eq!(keep_for(None), limits::TASK_TTL_DEFAULT);
        assert_eq!(keep_for(Some(u64::MAX)), limits::TASK_TTL_MAX);
        assert_eq!(
            poll_interval(&json!({"pollIntervalMs": 1})),
            limits::TASK_POLL_MIN
        );
        assert_eq!(
            Status::of(&json!({"status": "input_required"})),
            Some(Status::InputRequired)
        );
        assert!(Status::Cancelled.is_terminal() && !Status::Working.is_terminal());
        let mut v = json!({"taskId": "u1", "task": {"taskId": "u1", "n": ["u1", "x"]}});
        rename(&mut v, "u1", "g");
        assert_eq!(
            v,
            json!({"taskId": "g", "task": {"taskId": "g", "n": ["g", "x"]}})
        );
        assert!(requires_tasks(&missing_capability()));
        let other = RpcError::new(protocol::MISSING_CLIENT_CAPABILITY, "x")
            .with_data(json!({"requiredCapabilities": {"sampling": {}}}));
        assert!(!requires_tasks(&other));
    }
}
