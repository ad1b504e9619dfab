//! The stdio transport: a child process speaking newline-delimited JSON-RPC on
//! stdin/stdout, logging on stderr (`../shared/spec/2026-07-28/transports-stdio.mdx`;
//! `../shared/spec/2025-11-25/transports.mdx` §stdio).
//!
//! [`open`] spawns the child and returns the connection plus its *driver*: a
//! future that reads stdout (answers go to the [`InFlight`] table) and stderr
//! (into the log) and ends, with a reason, when the child exits. The owner
//! task polls the driver; no task is spawned here ([`pump`]: the reading
//! side). A call's whole way down is here: its slot, then its line written.
//!
//! Writing to a child's stdin (`../shared/spec/2026-07-28/transports-stdio.mdx`:
//! one JSON-RPC message per line).
//!
//! Every caller serializes its message straight into one shared queue; a
//! request's caller then yields once, so the requests woken in the same turn
//! of the runtime queue theirs too; whichever caller then holds the pipe writes everything
//! queued, its own line and the others, in one `write` (under the benchmark's
//! load about four lines per `write`, one per line before). Callers that find their
//! line already written return at once. So under load several messages go
//! out per system call, with no task of its own and no copy per message.
//! The buffers keep at most [`limits::STDIN_BUFFER_KEEP`] bytes between
//! bursts.
//!
//! A caller dropped in the middle of a write (its client went away) leaves
//! the rest of that write behind in the pipe's state; the next writer
//! finishes it first, so lines are never cut or reordered.

mod child;
mod lines;
mod pump;
use pump::Pump;
#[cfg(test)]
mod stdio_tests;

use super::era::{listen_params, LISTEN_ID};
use super::inflight::InFlight;
use super::ring::Ring;
use super::SendError;
use crate::config::UpstreamConfig;
use crate::limits;
use crate::logline::Throttle;
use crate::protocol::{self, Payload};
use crate::relay::{Relay, RelayCtx};
pub use lines::sniff_id;
use lines::LogBudget;
use serde_json::{json, Value};
use std::future::Future;
use std::io::Write as _;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::io::BufReader;
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, Notify};

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
    /// place, [`super::Callers`]) until it is freed.
    pub async fn send(
        &self,
        method: &str,
        mut params: Option<Value>,
        timeout: Duration,
        relay: Option<Relay>,
        claim: Option<super::Claim>,
    ) -> Result<Payload, SendError> {
        let original = params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .cloned();
        let mut ticket = self
            .inflight
            .reserve_relayed(
                relay.map(|r| (r, original)),
                claim,
                super::channel::asks(method),
            )
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

/// A child's stdin, shared by every caller of the connection.
pub(super) struct Stdin {
    pipe: tokio::sync::Mutex<Pipe>,
    queued: std::sync::Mutex<Vec<u8>>,
}

/// The writer's side: the pipe (closed: `None`), the batch being written
/// and how much of it is written.
struct Pipe {
    w: Option<ChildStdin>,
    batch: Vec<u8>,
    done: usize,
    /// `write` calls made (tests check the coalescing with it).
    #[cfg(test)]
    writes: usize,
}

impl Stdin {
    pub(super) fn new(w: Option<ChildStdin>) -> Self {
        Stdin {
            pipe: tokio::sync::Mutex::new(Pipe {
                w,
                batch: Vec::new(),
                done: 0,
                #[cfg(test)]
                writes: 0,
            }),
            queued: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Writes a request line `{"jsonrpc":"2.0","id":id,"method":…,"params":…}`.
    pub(super) async fn request(
        &self,
        id: u64,
        method: &str,
        params: Option<&Value>,
    ) -> Result<(), SendError> {
        self.queue(|b| {
            let _ = write!(b, "{{\"jsonrpc\":\"2.0\",\"id\":{id}");
            b.extend_from_slice(b",\"method\":");
            let _ = serde_json::to_writer(&mut *b, method);
            if let Some(p) = params {
                b.extend_from_slice(b",\"params\":");
                let _ = serde_json::to_writer(&mut *b, p);
            }
            b.push(b'}');
        });
        // Let the tasks already woken (requests read in the same turn of
        // the runtime) queue their lines first: then one `write` carries
        // them all, and the child is woken once, not once per line. A
        // caller dropped here leaves its line queued; its ticket's
        // `notifications/cancelled` follows through `message`, whose flush
        // writes both.
        tokio::task::yield_now().await;
        self.flush().await
    }

    /// Writes `msg` as one line, at once (answers to the child's requests
    /// and notifications are rare; one must not wait for a flush that may
    /// never come when its caller goes away).
    pub(super) async fn message(&self, msg: &Value) -> Result<(), SendError> {
        self.queue(|b| {
            let _ = serde_json::to_writer(&mut *b, msg);
        });
        self.flush().await
    }

    /// Closes the pipe: the child sees EOF.
    pub(super) async fn close(&self) {
        let mut p = self.pipe.lock().await;
        p.w.take();
        p.batch = Vec::new();
        p.done = 0;
    }

    fn queue(&self, fill: impl FnOnce(&mut Vec<u8>)) {
        let mut q = self.queued.lock().expect("stdin queue");
        fill(&mut q);
        q.push(b'\n');
    }

    /// Writes what is queued (unless a writer before took it already):
    /// first the rest of a batch a dropped writer left, then the queue,
    /// which holds this caller's line unless an earlier batch took it.
    async fn flush(&self) -> Result<(), SendError> {
        let mut pipe = self.pipe.lock().await;
        let p = &mut *pipe;
        if p.done < p.batch.len() {
            p.write_batch().await?;
        }
        p.batch.clear();
        p.done = 0;
        std::mem::swap(&mut *self.queued.lock().expect("stdin queue"), &mut p.batch);
        p.write_batch().await?;
        if p.batch.capacity() > limits::STDIN_BUFFER_KEEP {
            p.batch = Vec::new();
            p.done = 0;
        }
        Ok(())
    }
}

impl Pipe {
    /// Writes the batch from where it stands; a failed write drops it (the
    /// pipe is gone: the connection fails its calls).
    async fn write_batch(&mut self) -> Result<(), SendError> {
        if self.done >= self.batch.len() {
            return Ok(());
        }
        let Some(w) = self.w.as_mut() else {
            self.batch.clear();
            self.done = 0;
            return Err(SendError::Transport("stdin closed".into()));
        };
        while self.done < self.batch.len() {
            #[cfg(test)]
            {
                self.writes += 1;
            }
            let failed = match w.write(&self.batch[self.done..]).await {
                Ok(0) => "pipe closed".to_string(),
                Ok(n) => {
                    self.done += n;
                    continue;
                }
                Err(e) => e.to_string(),
            };
            self.batch.clear();
            self.done = 0;
            return Err(SendError::Transport(format!("writing stdin: {failed}")));
        }
        Ok(())
    }
}
