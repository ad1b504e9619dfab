//! The reading side of a stdio child ([`super::open`]'s driver): stdout
//! lines matched to the in-flight table, relayed, or answered; stderr to
//! the log and the tail.

use super::child::Incarnation;
use super::lines::{self, read_line_bounded, sniff_id, LogBudget};
use super::Stdin;
use crate::limits;
use crate::logline::{printable, Throttle};
use crate::protocol::{self, RpcError};
use crate::relay::RelayCtx;
use crate::upstream::channel::{answer, on_line, Answered, Line};
use crate::upstream::inflight::InFlight;
use crate::upstream::ring::Ring;
use serde_json::Value;
use std::sync::Arc;
use tokio::io::BufReader;
use tokio::process::{Child, ChildStderr, ChildStdout};
use tokio::sync::Notify;

/// The driver's state: the child's output pipes, their line buffers, and
/// where what it says goes.
pub(super) struct Pump {
    pub(super) name: String,
    pub(super) stdout: BufReader<ChildStdout>,
    pub(super) stderr: BufReader<ChildStderr>,
    pub(super) stdin: Arc<Stdin>,
    pub(super) inflight: InFlight,
    pub(super) max_bytes: usize,
    pub(super) list_changed: Arc<Notify>,
    pub(super) ctx: RelayCtx,
    pub(super) stderr_tail: Arc<std::sync::Mutex<Ring>>,
    pub(super) line: Vec<u8>,
    /// The stdout line being read is over-long (only its head is kept).
    pub(super) line_cut: bool,
    pub(super) err_line: Vec<u8>,
    pub(super) err_cut: bool,
    pub(super) stderr_open: bool,
    pub(super) log_budget: LogBudget,
    /// The log budget of per-message warnings (over-long lines, noise,
    /// answers to unknown ids).
    pub(super) warnings: Throttle,
    pub(super) noise: u64,
    /// `mcp_edge_upstream_stdout_noise_total{upstream}`, resolved once.
    pub(super) noise_total: crate::metrics::LazyCounter,
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
    pub(super) async fn drive(mut self, mut child: Child, incarnation: Incarnation) -> String {
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
                match answer(&mut self.line, &self.inflight) {
                    Answered::Yes => return None,
                    Answered::UnknownId(n) => {
                        self.unknown_id(&Value::from(n));
                        return None;
                    }
                    Answered::No => {}
                }
                let line = &self.line;
                match on_line(line, &self.inflight, &self.list_changed, &self.ctx) {
                    Line::Handled => {}
                    Line::Noise => self.noise(line.len().min(200)),
                    Line::UnknownId(id) => self.unknown_id(&id),
                    Line::Reply(reply) => {
                        let _ = self.stdin.message(&reply).await;
                    }
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
