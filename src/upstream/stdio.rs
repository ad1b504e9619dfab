//! The stdio transport: a child process speaking newline-delimited JSON-RPC on
//! stdin/stdout, logging on stderr (`../shared/spec/2026-07-28/transports-stdio.mdx`;
//! `../shared/spec/2025-11-25/transports.mdx` §stdio).
//!
//! [`open`] spawns the child and returns the connection plus its *driver*: a
//! future that reads stdout (answers go to the [`InFlight`] table) and stderr
//! (into the log) and ends, with a reason, when the child exits. The owner
//! task polls the driver; no task is spawned here.

use super::inflight::InFlight;
use super::relay::{relay_request, Relay, RelayCtx};
use super::SendError;
use crate::config::UpstreamConfig;
use crate::limits;
use crate::protocol::{self, Message, RpcError};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Mutex, Notify};

/// A future that runs a connection's I/O and returns why it ended.
pub type Driver = Pin<Box<dyn Future<Output = String> + Send>>;

/// Writer half and in-flight table of a stdio child.
pub struct StdioConn {
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    inflight: InFlight,
}

/// Kills a child's whole process group when dropped (the owner task was
/// aborted, or the driver ended): grandchildren never outlive their upstream.
struct GroupKill(libc::pid_t);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: plain syscall on a process group we created; ESRCH is fine.
            unsafe { libc::killpg(self.0, libc::SIGKILL) };
        }
    }
}

fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    if pgid > 0 {
        // SAFETY: as above.
        unsafe { libc::killpg(pgid, sig) };
    }
}

/// Spawns the child of a stdio upstream in its own process group, with
/// `PR_SET_PDEATHSIG` so it dies with mcp-edge even on SIGKILL, and without
/// mcp-edge's systemd variables (`NOTIFY_SOCKET`, `WATCHDOG_*`). Its stderr
/// goes to the log and to `stderr_tail`. Errors: the spawn's I/O error text.
pub fn open(
    cfg: &UpstreamConfig,
    list_changed: Arc<Notify>,
    ctx: RelayCtx,
    stderr_tail: Arc<std::sync::Mutex<super::ring::Ring>>,
) -> Result<(StdioConn, Driver), String> {
    let crate::config::Transport::Stdio {
        command,
        args,
        env,
        cwd,
    } = &cfg.transport
    else {
        return Err("not a stdio upstream".into());
    };
    let mut cmd = Command::new(command);
    cmd.args(args)
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; it only sets a flag of the child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
    let stdin = Arc::new(Mutex::new(child.stdin.take()));
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
    let (inflight, cancel) = InFlight::new(cfg.max_in_flight, cfg.call_timeout);
    let driver = drive(
        cfg.name.clone(),
        child,
        stdout,
        stderr,
        stdin.clone(),
        inflight.clone(),
        cancel,
        cfg.max_result_bytes,
        list_changed,
        ctx,
        stderr_tail,
    );
    Ok((StdioConn { stdin, inflight }, Box::pin(driver)))
}

/// Bytes of an over-long line kept to find its JSON-RPC id.
const HEAD_BYTES: usize = 256;

/// The `"id"` of a JSON-RPC message from the first bytes of its text (a number
/// or a string without escapes), for answering an over-long message's caller.
pub fn sniff_id(head: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(head).ok().or_else(|| {
        // The head may end inside a UTF-8 sequence.
        (1..4).find_map(|cut| std::str::from_utf8(&head[..head.len().saturating_sub(cut)]).ok())
    })?;
    let at = text.find("\"id\"")?;
    let rest = text[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        let end = s.find('"')?;
        return Some(Value::String(s[..end].to_string()));
    }
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(rest.len());
    rest[..end].parse::<i64>().ok().map(Value::from)
}

/// Reads one line of at most `max` bytes into `buf` (without the newline).
/// Returns `Ok(false)` at EOF, and `Err(true)` after skipping an over-long line.
async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Result<bool, bool>> {
    buf.clear();
    let mut too_long = false;
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok(if too_long {
                Err(true)
            } else {
                Ok(!buf.is_empty())
            });
        }
        let (chunk, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (&avail[..i], Some(i + 1)),
            None => (avail, None),
        };
        if !too_long {
            if buf.len() + chunk.len() > max {
                // Keep only a short head (to find the id), drain the rest unbuffered.
                too_long = true;
                let keep = HEAD_BYTES.saturating_sub(buf.len()).min(chunk.len());
                buf.extend_from_slice(&chunk[..keep]);
                buf.truncate(HEAD_BYTES);
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        let used = done.unwrap_or(avail.len());
        r.consume(used);
        if done.is_some() {
            return Ok(if too_long { Err(true) } else { Ok(true) });
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    name: String,
    mut child: Child,
    mut stdout: BufReader<tokio::process::ChildStdout>,
    mut stderr: BufReader<tokio::process::ChildStderr>,
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    inflight: InFlight,
    mut cancel: tokio::sync::mpsc::Receiver<u64>,
    max_bytes: usize,
    list_changed: Arc<Notify>,
    ctx: RelayCtx,
    stderr_tail: Arc<std::sync::Mutex<super::ring::Ring>>,
) -> String {
    let pgid = child.id().map(|p| p as libc::pid_t).unwrap_or(0);
    let _group = GroupKill(pgid);
    let mut line = Vec::new();
    let mut err_line = Vec::new();
    let mut stderr_open = true;
    let mut log_budget = LogBudget::new(tokio::time::Instant::now());
    let mut noise = 0u64;
    let reason = loop {
        tokio::select! {
            r = read_line_bounded(&mut stdout, &mut line, max_bytes) => match r {
                Err(e) => break format!("reading stdout: {e}"),
                Ok(Ok(false)) => break "stdout closed".to_string(),
                Ok(Err(_)) => {
                    metrics::counter!(crate::metrics::REFUSED, "limit" => "result_bytes").increment(1);
                    tracing::warn!(upstream = %name, limit = max_bytes, "dropped an over-long message from upstream");
                    if let Some(id) = sniff_id(&line) {
                        let e = RpcError::new(
                            protocol::UPSTREAM_RESULT_TOO_LARGE,
                            format!("upstream '{name}' sent a message larger than {max_bytes} bytes (max_result_bytes)"),
                        );
                        inflight.complete(&id, Err(e));
                    }
                }
                Ok(Ok(true)) => {
                    if !on_line(&name, &line, &inflight, &stdin, &list_changed, &ctx).await {
                        noise += 1;
                        metrics::counter!(crate::metrics::STDOUT_NOISE, "upstream" => name.clone()).increment(1);
                        // Rate-limited: the 1st, 10th, 100th, 1000th … line.
                        if noise.is_power_of_two() || noise.is_multiple_of(1000) || [10, 100].contains(&noise) {
                            tracing::warn!(upstream = %name, skipped = noise, "stdout line that is not JSON-RPC skipped: {}", String::from_utf8_lossy(&line[..line.len().min(200)]));
                        }
                    }
                }
            },
            r = read_line_bounded(&mut stderr, &mut err_line, limits::STDERR_LINE_BYTES), if stderr_open => match r {
                Ok(Ok(true)) => {
                    log_budget.log(&name, &err_line);
                    stderr_tail.lock().expect("stderr lock").push_line(&err_line);
                }
                Ok(Err(_)) => tracing::info!(upstream = %name, "stderr: (line longer than {} bytes cut)", limits::STDERR_LINE_BYTES),
                Ok(Ok(false)) | Err(_) => stderr_open = false,
            },
            Some(id) = cancel.recv() => {
                // A caller gave up: tell the upstream to stop
                // (2025-11-25 utilities-cancellation.mdx).
                let note = protocol::notification(
                    "notifications/cancelled",
                    Some(json!({"requestId": id, "reason": "the client went away or timed out"})),
                );
                let _ = write_line(&stdin, &note).await;
            }
            status = child.wait() => break match status {
                Ok(s) => {
                    // The child's last words are usually the real reason:
                    // drain what is left of its stderr first (briefly).
                    let _ = tokio::time::timeout(Duration::from_millis(200), async {
                        while stderr_open {
                            let Ok(Ok(true)) = read_line_bounded(&mut stderr, &mut err_line, limits::STDERR_LINE_BYTES).await else {
                                stderr_open = false;
                                continue;
                            };
                            log_budget.log(&name, &err_line);
                            stderr_tail.lock().expect("stderr lock").push_line(&err_line);
                        }
                    })
                    .await;
                    let tail = stderr_tail.lock().expect("stderr lock").last_line();
                    match tail {
                        Some(t) => format!("process exited ({s}); last stderr line: {t}"),
                        None => format!("process exited ({s})"),
                    }
                }
                Err(e) => format!("waiting for process: {e}"),
            },
        }
    };
    // Pending calls fail now (not at their timeout).
    inflight.fail_all();
    // Stop sequence (transports-stdio.mdx §Shutdown): close stdin, wait, SIGTERM
    // the group, wait, SIGKILL the group; always reap.
    stdin.lock().await.take();
    let mut reason = reason;
    if !reason.starts_with("process exited") {
        // stdout closed (or broke) first: say how the process ended, if it did.
        if let Ok(Ok(status)) = tokio::time::timeout(Duration::from_millis(200), child.wait()).await
        {
            reason = format!("{reason}; process exited ({status})");
            if let Some(t) = stderr_tail.lock().expect("stderr lock").last_line() {
                reason = format!("{reason}; last stderr line: {t}");
            }
        }
    }
    if tokio::time::timeout(limits::CHILD_STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        signal_group(pgid, libc::SIGTERM);
        if tokio::time::timeout(limits::CHILD_STOP_GRACE, child.wait())
            .await
            .is_err()
        {
            signal_group(pgid, libc::SIGKILL);
            let _ = child.wait().await;
        }
    }
    // The child is gone; whatever it forked goes too (GroupKill on drop).
    reason
}

/// The log rate limit of one child's stderr (a token bucket:
/// [`limits::STDERR_LOG_BURST`] lines at once, refilled at
/// [`limits::STDERR_LOG_PER_SECOND`]): a child printing without pause cannot
/// flood the journal or wear a Pi's SD card. Skipped lines are counted in
/// `mcp_edge_upstream_stderr_skipped_total` and named in the next line logged;
/// every line still reaches the stderr tail of `/status`.
struct LogBudget {
    tokens: f64,
    last: tokio::time::Instant,
    skipped: u64,
}

impl LogBudget {
    fn new(now: tokio::time::Instant) -> Self {
        LogBudget {
            tokens: f64::from(limits::STDERR_LOG_BURST),
            last: now,
            skipped: 0,
        }
    }

    /// True if a line may be logged at `now` (taking a token).
    fn allow(&mut self, now: tokio::time::Instant) -> bool {
        let refill = now.saturating_duration_since(self.last).as_secs_f64()
            * f64::from(limits::STDERR_LOG_PER_SECOND);
        self.tokens = (self.tokens + refill).min(f64::from(limits::STDERR_LOG_BURST));
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn log(&mut self, name: &str, line: &[u8]) {
        if !self.allow(tokio::time::Instant::now()) {
            self.skipped += 1;
            metrics::counter!(crate::metrics::STDERR_SKIPPED, "upstream" => name.to_string())
                .increment(1);
            return;
        }
        let text = String::from_utf8_lossy(line);
        match std::mem::take(&mut self.skipped) {
            0 => tracing::info!(upstream = %name, "stderr: {text}"),
            n => {
                tracing::info!(upstream = %name, "stderr: {text} ({n} earlier lines not logged: rate limit)")
            }
        }
    }
}

async fn on_line(
    name: &str,
    line: &[u8],
    inflight: &InFlight,
    stdin: &Mutex<Option<ChildStdin>>,
    list_changed: &Notify,
    ctx: &RelayCtx,
) -> bool {
    if line.iter().all(u8::is_ascii_whitespace) {
        return true;
    }
    let Ok(v) = serde_json::from_slice::<Value>(line) else {
        return false; // a banner or log line: counted as noise by the caller
    };
    match protocol::classify(v) {
        Ok(Message::Response { id, outcome }) => {
            if !inflight.complete(&id, outcome) {
                tracing::debug!(upstream = %name, %id, "answer for a request nobody waits for");
            }
        }
        Ok(Message::Notification { method, params }) => {
            if method.ends_with("/list_changed") {
                list_changed.notify_one();
            } else if method == "notifications/resources/updated" {
                ctx.resource_updated(params.as_ref());
            } else if method == "notifications/subscriptions/acknowledged" {
                // mcp-edge's own listen stream (StdioConn::listen): nobody to tell.
            } else if method == "notifications/progress" {
                let token = params.as_ref().and_then(|p| p.get("progressToken"));
                if let Some((relay, original)) = token.and_then(|t| inflight.progress_target(t)) {
                    let mut params = params.unwrap_or_default();
                    params["progressToken"] = original;
                    relay.forward(protocol::notification(&method, Some(params)));
                }
            } else if let Some(relay) = inflight.sole_relay() {
                relay.forward(protocol::notification(&method, params));
            }
        }
        Ok(Message::Request { id, method, params }) => {
            if method != "ping"
                && relay_request(ctx, inflight.sole_relay(), &id, &method, params.clone()).is_some()
            {
                return true;
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
            let _ = write_line(stdin, &reply).await;
        }
        Err(_) => return false, // JSON, but not JSON-RPC: noise too
    }
    true
}

async fn write_line(stdin: &Mutex<Option<ChildStdin>>, msg: &Value) -> Result<(), SendError> {
    let mut bytes = serde_json::to_vec(msg).map_err(|e| SendError::Transport(e.to_string()))?;
    bytes.push(b'\n');
    let mut g = stdin.lock().await;
    let w = g
        .as_mut()
        .ok_or_else(|| SendError::Transport("stdin closed".into()))?;
    w.write_all(&bytes)
        .await
        .map_err(|e| SendError::Transport(format!("writing stdin: {e}")))?;
    w.flush()
        .await
        .map_err(|e| SendError::Transport(format!("writing stdin: {e}")))
}

impl StdioConn {
    /// Sends a request with a fresh upstream id and waits for its answer.
    /// With a `relay`, the caller's `_meta.progressToken` is replaced by the
    /// upstream id (so tokens of different clients cannot collide) and
    /// restored on the way back.
    pub async fn send(
        &self,
        method: &str,
        mut params: Option<Value>,
        timeout: Duration,
        relay: Option<Relay>,
    ) -> Result<Value, SendError> {
        let original = params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .cloned();
        let mut ticket = self
            .inflight
            .reserve_relayed(relay.map(|r| (r, original)))
            .ok_or(SendError::Busy)?;
        if let Some(t) = params
            .as_mut()
            .and_then(|p| p.get_mut("_meta"))
            .and_then(|m| m.get_mut("progressToken"))
        {
            *t = json!(ticket.upstream_id());
        }
        let msg = protocol::request(json!(ticket.upstream_id()), method, params);
        write_line(&self.stdin, &msg).await?;
        match tokio::time::timeout(timeout, &mut ticket.rx).await {
            Err(_) => {
                // The ticket's drop cancels the call upstream.
                Err(SendError::Timeout)
            }
            Ok(Err(_)) => Err(SendError::Transport("connection lost".into())),
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(SendError::Rpc(e)),
        }
    }

    /// Writes a response (to a request the upstream sent us).
    pub async fn respond(&self, msg: &Value) -> Result<(), SendError> {
        write_line(&self.stdin, msg).await
    }

    /// Asks a modern (2026-07-28) child for its list changes: one
    /// `subscriptions/listen` request (id [`super::http::LISTEN_ID`]) for the
    /// three list kinds (2026-07-28 patterns-subscriptions.mdx). Its stream
    /// is the child's stdout: the acknowledgment is skipped, list_changed
    /// wakes the catalog refresh like a legacy child's, and its final
    /// response (or a refusal) is an answer nobody waits for.
    pub async fn listen(&self) -> Result<(), SendError> {
        let params = super::handshake::adapt_params(
            super::UpstreamEra::Modern,
            Some(json!({"notifications": {"toolsListChanged": true,
                "promptsListChanged": true, "resourcesListChanged": true}})),
        );
        let msg = protocol::request(
            json!(super::http::LISTEN_ID),
            "subscriptions/listen",
            params,
        );
        write_line(&self.stdin, &msg).await
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), SendError> {
        write_line(&self.stdin, &protocol::notification(method, params)).await
    }

    /// Closes stdin: the child sees EOF and should exit (transports-stdio.mdx §Shutdown).
    pub async fn close(&self) {
        self.stdin.lock().await.take();
    }
}

#[cfg(test)]
mod tests {
    use super::sniff_id;
    use serde_json::json;

    #[tokio::test(start_paused = true)]
    async fn a_chatty_child_is_logged_at_the_rate_limit() {
        let t0 = tokio::time::Instant::now();
        let mut b = super::LogBudget::new(t0);
        let burst = (0..1000).filter(|_| b.allow(t0)).count();
        assert_eq!(burst, crate::limits::STDERR_LOG_BURST as usize);
        // A simulated hour of 1,000 lines a second logs 5 a second.
        let mut logged = 0;
        for ms in 1..=3_600_000u64 {
            let now = t0 + std::time::Duration::from_millis(ms);
            if b.allow(now) {
                logged += 1;
            }
        }
        let per_s = crate::limits::STDERR_LOG_PER_SECOND as usize;
        assert!(
            (3600 * per_s - 1..=3600 * per_s + 1).contains(&logged),
            "{logged}"
        );
    }

    #[test]
    fn finds_ids_in_message_heads() {
        assert_eq!(
            sniff_id(br#"{"jsonrpc":"2.0","id":131072,"result":{"content":[{"te"#),
            Some(json!(131072))
        );
        assert_eq!(
            sniff_id(br#"{"id" : "abc", "result": "#),
            Some(json!("abc"))
        );
        assert_eq!(sniff_id(br#"{"jsonrpc":"2.0","result":{"#), None);
    }
}
