//! The stdio transport: a child process speaking newline-delimited JSON-RPC on
//! stdin/stdout, logging on stderr (`../shared/spec/2026-07-28/transports-stdio.mdx`;
//! `../shared/spec/2025-11-25/transports.mdx` §stdio).
//!
//! [`open`] spawns the child and returns the connection plus its *driver*: a
//! future that reads stdout (answers go to the [`InFlight`] table) and stderr
//! (into the log) and ends, with a reason, when the child exits. The owner
//! task polls the driver; no task is spawned here.

mod child;
mod lines;
mod writer;

use super::era::{listen_params, LISTEN_ID};
use super::inflight::InFlight;
use super::ring::Ring;
use super::SendError;
use crate::config::UpstreamConfig;
use crate::limits;
use crate::logline::{printable, Throttle};
use crate::protocol::{self, Message, Payload, RpcError};
use crate::relay::{relay_request, Lane, Relay, RelayCtx};
use child::Incarnation;
pub use lines::sniff_id;
use lines::{read_line_bounded, LogBudget};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::BufReader;
use tokio::process::{Child, ChildStderr, ChildStdout};
use tokio::sync::{mpsc, Notify};
use writer::Stdin;

/// A future that runs a connection's I/O and returns why it ended.
pub type Driver = Pin<Box<dyn Future<Output = String> + Send>>;

/// Writer half and in-flight table of a stdio child.
pub struct StdioConn {
    stdin: Arc<Stdin>,
    inflight: InFlight,
    /// Number of mcp-edge's current `subscriptions/listen` on this child
    /// (its id is `mcp-edge/listen/<n>`; a new filter is a new listen).
    listens: std::sync::atomic::AtomicU64,
}

/// Spawns the child of a stdio upstream (`child::start`: its own process
/// group, `PR_SET_PDEATHSIG`, a [`crate::reaper::Marker`], no systemd
/// variables). Its stderr goes to the log and to `stderr_tail`. Returns the
/// connection, its driver, and the receiver of the ids of calls given up on
/// (for [`StdioConn::cancel`]). Errors: the spawn's I/O error text.
pub fn open(
    cfg: &UpstreamConfig,
    list_changed: Arc<Notify>,
    ctx: RelayCtx,
    stderr_tail: Arc<std::sync::Mutex<Ring>>,
) -> Result<(StdioConn, Driver, mpsc::Receiver<u64>), String> {
    let crate::config::Transport::Stdio {
        command,
        args,
        env,
        cwd,
        sandbox,
    } = &cfg.transport
    else {
        return Err("not a stdio upstream".into());
    };
    let launch = child::Launch {
        name: &cfg.name,
        command,
        args,
        env,
        cwd: cwd.as_deref(),
        sandbox,
    };
    let (mut child, incarnation) =
        child::start(&launch).map_err(|e| start_error(command, sandbox, &e))?;
    let stdin = Arc::new(Stdin::new(child.stdin.take()));
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
    let (inflight, cancel) = InFlight::new(cfg.max_in_flight, cfg.call_timeout);
    let pump = Pump {
        name: cfg.name.clone(),
        stdout,
        stderr,
        stdin: stdin.clone(),
        inflight: inflight.clone(),
        max_bytes: cfg.max_result_bytes,
        list_changed,
        ctx,
        stderr_tail,
        line: Vec::new(),
        line_cut: false,
        err_line: Vec::new(),
        err_cut: false,
        stderr_open: true,
        log_budget: LogBudget::new(tokio::time::Instant::now()),
        warnings: Throttle::new(
            limits::UPSTREAM_WARN_LOG_BURST,
            limits::UPSTREAM_WARN_LOG_PER_SECOND,
            tokio::time::Instant::now(),
        ),
        noise: 0,
        noise_total: crate::metrics::LazyCounter::new(),
    };
    Ok((
        StdioConn {
            stdin,
            inflight,
            listens: std::sync::atomic::AtomicU64::new(0),
        },
        Box::pin(pump.drive(child, incarnation)),
        cancel,
    ))
}

/// Why `command` did not start; under `sandbox = "strict"` a refused or
/// missing program gets a hint (it must be beneath a granted path).
fn start_error(command: &str, spec: &crate::sandbox::Spec, e: &child::StartError) -> String {
    let denied = matches!(e, child::StartError::Spawn(crate::reaper::SpawnError::Io(io))
        if matches!(io.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::NotFound));
    if denied && spec.mode == crate::sandbox::Mode::Strict {
        format!(
            "cannot start {command:?}: {e} (sandbox = \"strict\": the program and what it \
             reads must be beneath a granted path; add its directory to paths_ro)"
        )
    } else {
        format!("cannot start {command:?}: {e}")
    }
}

/// The driver's state: the child's output pipes, their line buffers, and
/// where what it says goes.
struct Pump {
    name: String,
    stdout: BufReader<ChildStdout>,
    stderr: BufReader<ChildStderr>,
    stdin: Arc<Stdin>,
    inflight: InFlight,
    max_bytes: usize,
    list_changed: Arc<Notify>,
    ctx: RelayCtx,
    stderr_tail: Arc<std::sync::Mutex<Ring>>,
    line: Vec<u8>,
    /// The stdout line being read is over-long (only its head is kept).
    line_cut: bool,
    err_line: Vec<u8>,
    err_cut: bool,
    stderr_open: bool,
    log_budget: LogBudget,
    /// The log budget of per-message warnings (over-long lines, noise,
    /// answers to unknown ids).
    warnings: Throttle,
    noise: u64,
    /// `mcp_edge_upstream_stdout_noise_total{upstream}`, resolved once.
    noise_total: crate::metrics::LazyCounter,
}

/// What one read of a pipe gave: a line, EOF, or an over-long line skipped.
type LineRead = std::io::Result<Result<bool, bool>>;

/// However the driver ends — its child gone, or its future dropped because
/// the owner replaced the connection (a forced reconnect, a reload) — the
/// calls still waiting on this child fail at once ("connection lost"), not
/// at their `call_timeout`: their callers hold the connection, so its
/// in-flight table outlives the driver.
impl Drop for Pump {
    fn drop(&mut self) {
        self.inflight.fail_all();
    }
}

impl Pump {
    /// Reads stdout and stderr until the child
    /// exits or its stdout ends, then stops it; returns why it ended.
    async fn drive(mut self, mut child: Child, incarnation: Incarnation) -> String {
        let reason = loop {
            let ended = tokio::select! {
                r = read_line_bounded(&mut self.stdout, &mut self.line, &mut self.line_cut, self.max_bytes) => {
                    let ended = self.on_stdout(r).await;
                    lines::line_done(&mut self.line, &mut self.line_cut);
                    ended
                }
                r = read_line_bounded(&mut self.stderr, &mut self.err_line, &mut self.err_cut, limits::STDERR_LINE_BYTES), if self.stderr_open => {
                    self.on_stderr(r);
                    lines::line_done(&mut self.err_line, &mut self.err_cut);
                    None
                }
                status = child.wait() => Some(self.on_exit(status).await),
            };
            if let Some(reason) = ended {
                break reason;
            }
        };
        // Pending calls fail now (not at their timeout).
        self.inflight.fail_all();
        self.stop(child, incarnation, reason).await
    }

    /// One read of stdout; `Some(reason)` when stdout ended.
    async fn on_stdout(&mut self, r: LineRead) -> Option<String> {
        match r {
            Err(e) => return Some(format!("reading stdout: {e}")),
            Ok(Ok(false)) => return Some("stdout closed".to_string()),
            Ok(Err(_)) => self.too_long(),
            Ok(Ok(true)) => {
                // An answer keeps the line's buffer (its result is passed
                // on as these bytes); the next line starts a new one.
                match lines::answer(&mut self.line, &self.inflight) {
                    lines::Answered::Yes => return None,
                    lines::Answered::UnknownId(n) => {
                        self.unknown_id(&Value::from(n));
                        return None;
                    }
                    lines::Answered::No => {}
                }
                let line = &self.line;
                let kind = on_line(
                    line,
                    &self.inflight,
                    &self.stdin,
                    &self.list_changed,
                    &self.ctx,
                )
                .await;
                match kind {
                    Line::Handled => {}
                    Line::Noise => self.noise(line.len().min(200)),
                    Line::UnknownId(id) => self.unknown_id(&id),
                }
            }
        }
        None
    }

    /// `skipped: n` when a per-message warning may be logged now (`n`
    /// earlier ones were not), `None` when this one is not logged.
    fn warn_allowed(&self) -> Option<u64> {
        self.warnings.allow(tokio::time::Instant::now())
    }

    /// An answer for no call in flight (never sent, answered, or given up):
    /// counted in `refused{limit="unknown_id"}`, logged within the budget.
    fn unknown_id(&self, id: &Value) {
        crate::metrics::refused("unknown_id");
        if let Some(skipped) = self.warn_allowed() {
            let id: String = id.to_string().chars().take(64).collect();
            let id = printable(&id);
            tracing::debug!(upstream = %self.name, %id, skipped, "answer for a request nobody waits for");
        }
    }

    /// An over-long message was skipped: its caller (found by the id in
    /// its first bytes) gets an error.
    fn too_long(&self) {
        let (name, max_bytes) = (&self.name, self.max_bytes);
        crate::metrics::refused("result_bytes");
        if let Some(skipped) = self.warn_allowed() {
            tracing::warn!(upstream = %name, limit = max_bytes, skipped, "dropped an over-long message from upstream");
        }
        if let Some(id) = sniff_id(&self.line) {
            let e = RpcError::new(
                protocol::UPSTREAM_RESULT_TOO_LARGE,
                format!("upstream '{name}' sent a message larger than {max_bytes} bytes (max_result_bytes)"),
            );
            self.inflight.complete(&id, Err(e));
        }
    }

    /// A stdout line that is not JSON-RPC was skipped: counted, and logged
    /// (its first `shown` bytes, [`printable`]) within the warning budget.
    fn noise(&mut self, shown: usize) {
        self.noise += 1;
        let (name, noise) = (&self.name, self.noise);
        self.noise_total.increment(
            1,
            || metrics::counter!(crate::metrics::STDOUT_NOISE, "upstream" => name.clone()),
        );
        if let Some(skipped) = self.warn_allowed() {
            let text = printable(&self.line[..shown]);
            tracing::warn!(upstream = %name, noise, skipped, "stdout line that is not JSON-RPC skipped: {text}");
        }
    }

    /// One read of stderr: the line goes to the log (rate-limited) and the tail.
    fn on_stderr(&mut self, r: LineRead) {
        match r {
            Ok(Ok(true)) => self.keep_stderr_line(),
            Ok(Err(_)) => self.log_budget.log(&self.name, &self.err_line, true),
            Ok(Ok(false)) | Err(_) => self.stderr_open = false,
        }
    }

    fn keep_stderr_line(&self) {
        self.log_budget.log(&self.name, &self.err_line, false);
        self.stderr_tail
            .lock()
            .expect("stderr lock")
            .push_line(&self.err_line);
    }

    /// The child exited: why, with its last stderr line. The child's last
    /// words are usually the real reason: what is left of its stderr is
    /// drained first (briefly).
    async fn on_exit(&mut self, status: std::io::Result<std::process::ExitStatus>) -> String {
        let s = match status {
            Ok(s) => s,
            Err(e) => return format!("waiting for process: {e}"),
        };
        let _ = tokio::time::timeout(crate::limits::CHILD_EXIT_DRAIN, async {
            while self.stderr_open {
                let r = read_line_bounded(
                    &mut self.stderr,
                    &mut self.err_line,
                    &mut self.err_cut,
                    limits::STDERR_LINE_BYTES,
                )
                .await;
                match r {
                    Ok(Ok(true)) => self.keep_stderr_line(),
                    _ => self.stderr_open = false,
                }
                lines::line_done(&mut self.err_line, &mut self.err_cut);
            }
        })
        .await;
        match self.stderr_tail.lock().expect("stderr lock").last_line() {
            Some(t) => format!("process exited ({s}); last stderr line: {t}"),
            None => format!("process exited ({s})"),
        }
    }

    /// The stop sequence (transports-stdio.mdx §Shutdown): close stdin,
    /// then [`Incarnation::stop`] (wait, SIGTERM, wait, SIGKILL; the
    /// child's escaped descendants too). Returns `reason`, with how the
    /// process ended when stdout ended first.
    async fn stop(self, mut child: Child, incarnation: Incarnation, mut reason: String) -> String {
        self.stdin.close().await;
        if !reason.starts_with("process exited") {
            // stdout closed (or broke) first: say how the process ended, if it did.
            if let Ok(Ok(status)) =
                tokio::time::timeout(crate::limits::CHILD_EXIT_DRAIN, child.wait()).await
            {
                reason = format!("{reason}; process exited ({status})");
                if let Some(t) = self.stderr_tail.lock().expect("stderr lock").last_line() {
                    reason = format!("{reason}; last stderr line: {t}");
                }
            }
        }
        incarnation.stop(&mut child).await;
        reason
    }
}

/// What one stdout line was.
enum Line {
    Handled,
    /// Not JSON-RPC.
    Noise,
    /// An answer for no call in flight.
    UnknownId(Value),
}

/// Handles one stdout line.
async fn on_line(
    line: &[u8],
    inflight: &InFlight,
    stdin: &Stdin,
    list_changed: &Notify,
    ctx: &RelayCtx,
) -> Line {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Line::Handled;
    }
    let Ok(v) = serde_json::from_slice::<Value>(line) else {
        return Line::Noise; // a banner or log line: counted as noise by the caller
    };
    match protocol::classify(v) {
        Ok(Message::Response { id, outcome }) => {
            // mcp-edge's own listens end with a response nobody waits for
            // (one per filter change: `StdioConn::listen`).
            let own_listen = id.as_str().is_some_and(|s| s.starts_with(LISTEN_ID));
            if !own_listen && !inflight.complete(&id, outcome.map(Payload::from)) {
                return Line::UnknownId(id);
            }
        }
        Ok(Message::Notification { method, params }) => {
            on_notification(method, params, inflight, list_changed, ctx)
        }
        Ok(Message::Request { id, method, params }) => {
            on_request(id, method, params, inflight, stdin, ctx).await
        }
        Err(_) => return Line::Noise, // JSON, but not JSON-RPC: noise too
    }
    Line::Handled
}

/// A notification from the child: list changes wake the catalog refresh,
/// resource updates mark the subscription table, progress goes to the call
/// whose (rewritten) token it names, anything else to the sole relayed call.
fn on_notification(
    method: String,
    params: Option<Value>,
    inflight: &InFlight,
    list_changed: &Notify,
    ctx: &RelayCtx,
) {
    match method.as_str() {
        m if m.ends_with("/list_changed") => list_changed.notify_one(),
        "notifications/resources/updated" => ctx.resource_updated(params.as_ref()),
        // mcp-edge's own listen stream (StdioConn::listen): nobody to tell.
        "notifications/subscriptions/acknowledged" => {}
        "notifications/progress" => {
            let token = params.as_ref().and_then(|p| p.get("progressToken"));
            if let Some((relay, original)) = token.and_then(|t| inflight.progress_target(t)) {
                let mut params = params.unwrap_or_default();
                params["progressToken"] = original;
                relay.forward(protocol::notification(&method, Some(params)));
            }
        }
        _ => {
            if let Some(relay) = inflight.sole_relay() {
                relay.forward(protocol::notification(&method, params));
            }
        }
    }
}

/// A request from the child: relayed to the sole relayed call's client, or
/// answered here (`ping`, an empty `roots/list`) or refused.
async fn on_request(
    id: Value,
    method: String,
    params: Option<Value>,
    inflight: &InFlight,
    stdin: &Stdin,
    ctx: &RelayCtx,
) {
    if method != "ping"
        && relay_request(
            ctx,
            inflight.sole_relay(),
            (&id, Lane::MAIN),
            &method,
            params.clone(),
        )
        .is_some()
    {
        return;
    }
    // Nobody to ask: answer the harmless ones, refuse the rest.
    let reply = match method.as_str() {
        "ping" => protocol::result_response(id, json!({})),
        "roots/list" => protocol::result_response(id, json!({"roots": []})),
        _ => protocol::error_response(
            id,
            &RpcError::new(
                protocol::METHOD_NOT_FOUND,
                format!("mcp-edge has no client to relay {method} to"),
            ),
        ),
    };
    let _ = stdin.message(&reply).await;
}

impl StdioConn {
    /// [`InFlight::reclaim_stale`] of this child's table.
    pub fn reclaim_stale(&self) -> usize {
        self.inflight.reclaim_stale()
    }
}

impl StdioConn {
    /// Sends a request with a fresh upstream id and waits for its answer.
    /// With a `relay`, the caller's `_meta.progressToken` is replaced by the
    /// upstream id (so tokens of different clients cannot collide) and
    /// restored on the way back. The slot holds `claim` (its client's
    /// place, [`super::inflight::Callers`]) until it is freed.
    pub async fn send(
        &self,
        method: &str,
        mut params: Option<Value>,
        timeout: Duration,
        relay: Option<Relay>,
        claim: Option<super::inflight::Claim>,
    ) -> Result<Payload, SendError> {
        let original = params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .cloned();
        let mut ticket = self
            .inflight
            .reserve_relayed(relay.map(|r| (r, original)), claim)
            .ok_or(SendError::Busy)?;
        if let Some(t) = params
            .as_mut()
            .and_then(|p| p.get_mut("_meta"))
            .and_then(|m| m.get_mut("progressToken"))
        {
            *t = json!(ticket.upstream_id());
        }
        // Writing counts against the call's time too: a child that stops
        // reading its stdin fills the pipe, and the write would wait for it
        // (a write cut short is finished by the next writer, so dropping it
        // cuts no line).
        let deadline = tokio::time::Instant::now() + timeout;
        let line = (self.stdin).request(ticket.upstream_id(), method, params.as_ref());
        tokio::time::timeout_at(deadline, line)
            .await
            .map_err(|_| SendError::Timeout)??;
        match tokio::time::timeout_at(deadline, &mut ticket.rx).await {
            Err(_) => {
                // The ticket's drop queues the call for cancellation upstream (the owner task sends it).
                Err(SendError::Timeout)
            }
            Ok(Err(_)) => Err(SendError::Transport("connection lost".into())),
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(SendError::Rpc(e)),
        }
    }

    /// Writes a response (to a request the upstream sent us).
    pub async fn respond(&self, msg: &Value) -> Result<(), SendError> {
        self.stdin.message(msg).await
    }

    /// Asks a modern (2026-07-28) child for its list changes and for
    /// updates of `resources`: one `subscriptions/listen` request (id
    /// `mcp-edge/listen/<n>`, [`LISTEN_ID`]) for the three list kinds and
    /// those URIs (2026-07-28 patterns-subscriptions.mdx). Its stream is the
    /// child's stdout: the acknowledgment is skipped, list_changed wakes the
    /// catalog refresh like a legacy child's, `notifications/resources/updated`
    /// marks the subscription table, and its final response (or a refusal)
    /// is an answer nobody waits for. A listen sent before is cancelled
    /// first (§Cancellation: `notifications/cancelled` naming its id), so
    /// a new set of URIs replaces the old one.
    pub async fn listen(&self, resources: &[Box<str>]) -> Result<(), SendError> {
        use std::sync::atomic::Ordering;
        let n = self.listens.fetch_add(1, Ordering::Relaxed);
        if n > 0 {
            let old = format!("{LISTEN_ID}/{}", n - 1);
            let reason = "mcp-edge replaces this subscription with a new filter";
            self.notify(
                "notifications/cancelled",
                Some(json!({"requestId": old, "reason": reason})),
            )
            .await?;
        }
        let id = format!("{LISTEN_ID}/{n}");
        let msg = protocol::request(json!(id), "subscriptions/listen", listen_params(resources));
        self.stdin.message(&msg).await
    }

    /// A caller gave up on call `id`: tells the upstream to stop
    /// (2025-11-25 utilities-cancellation.mdx).
    pub async fn cancel(&self, id: u64) -> Result<(), SendError> {
        let note = protocol::notification(
            "notifications/cancelled",
            Some(json!({"requestId": id, "reason": "the client went away or timed out"})),
        );
        self.stdin.message(&note).await
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), SendError> {
        (self.stdin)
            .message(&protocol::notification(method, params))
            .await
    }

    /// Closes stdin: the child sees EOF and should exit (transports-stdio.mdx §Shutdown).
    pub async fn close(&self) {
        self.stdin.close().await;
    }
}
