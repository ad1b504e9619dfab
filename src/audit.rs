//! The audit log (`[audit]`): one JSON line per `tools/call`,
//! `prompts/get` and `resources/read`, written by one dedicated thread
//! behind a bounded queue, so that writing never holds up a call.
//!
//! ## The line
//!
//! One compact JSON object per line (UTF-8, `\n`-terminated), keys in
//! this order; users grep these names, so they are a file format:
//!
//! | key | value |
//! |---|---|
//! | `time` | when the request arrived, RFC 3339 UTC with milliseconds (`2026-12-01T17:00:00.123Z`) |
//! | `client` | the `[[client]]` name, `"-"` when unauthenticated |
//! | `peer` | the client's IP address: the connection's, or the one a trusted proxy gave (`server.trusted_proxies`: its PROXY protocol header, or the last `X-Forwarded-For` entry); `null` when not known |
//! | `session` | `"modern"`, or `"legacy:"` + the `Mcp-Session-Id`'s instance id, `.`, and the first 8 characters after it (the whole id is a bearer secret) |
//! | `method` | `tools/call`, `prompts/get` or `resources/read` |
//! | `upstream` | the upstream's name; `null` when the call was not routed (unknown name, refused) |
//! | `name` | the exposed tool or prompt name, or the resource URI, as the client sent it: at most [`AUDIT_FIELD_BYTES`](crate::limits::AUDIT_FIELD_BYTES) bytes of it (the rest cut, marked `…[cut N bytes]`), control and Unicode format characters escaped ([`crate::logline::capped`]) |
//! | `original` | the name at the upstream; `null` when not routed (capped and escaped like `name`) |
//! | `outcome` | `ok`, `tool_error` (`isError: true`), `error` (a JSON-RPC error), `timeout`, `refused` (outside the client's `allow`/`deny`, or a tool withheld by its pin under `trust = "pin"`; a request over its `rate` gets 429 at the door and no line), `disconnected` (the caller went away before the answer; the call may have run), `input_expired` (a modern call parked for its caller's `inputResponses` that no retry took back in time: cancelled upstream; a line of its own, after the round's) |
//! | `code` | the JSON-RPC error code; present only with `"outcome":"error"` |
//! | `duration_ms` | from the request's arrival to its answer |
//! | `request_bytes`, `response_bytes` | downstream body sizes |
//! | `arguments` | the call's arguments, last; present only with `arguments = true` (C1 and Unicode format characters as JSON `\uXXXX` escapes) |
//!
//! ```text
//! {"time":"2026-12-01T17:00:00.123Z","client":"build-agent","peer":"192.0.2.7","session":"modern","method":"tools/call","upstream":"files","name":"files__read_file","original":"read_file","outcome":"ok","duration_ms":3,"request_bytes":120,"response_bytes":456}
//! ```
//!
//! ## Queue and writer
//!
//! [`Audit::record`] serializes the record on the caller and `try_send`s
//! it to a queue of at most [`AUDIT_QUEUE_DEPTH`] records and
//! [`AUDIT_QUEUE_BYTES`] bytes. A full queue (a writer that cannot keep
//! up: slow disk, a journal that throttles) drops the record and counts
//! it (`mcp_edge_audit_dropped_total`, [`Audit::dropped`]); the call goes
//! on unharmed. One OS thread (`mcp-edge-audit`, owned by
//! [`AuditWriter`]) takes records off the queue and does the blocking
//! writes, so no tokio worker ever waits on the disk.
//!
//! The sink is opened at start: a file path that cannot be opened for
//! appending, or a journal socket that is not there, is a start error
//! naming `audit.path`. A write that fails later (disk full, EIO, the
//! journal gone) is counted (`mcp_edge_audit_write_errors_total`), logged
//! at most once per [`AUDIT_ERROR_LOG_PERIOD`], and the writer goes on
//! with the next record (reopening the file first).
//!
//! ## Rotation
//!
//! A file is rotated by size before a line that would take it past
//! `max_bytes`: `path.(keep-1)` → `path.keep` … `path` → `path.1`, then a
//! fresh `path`; so there are at most `keep` rotated files besides the
//! current one, each at most `max_bytes`, and lines are never split. A
//! single line longer than `max_bytes` goes into a fresh file alone. This
//! is our own code, not the `file-rotate` crate: its byte limit either cuts
//! a line in two (`ContentLimit::Bytes`) or lets a file grow past the limit
//! (`BytesSurpassed`), and it always pulls in `chrono` and `flate2`.
//!
//! ## Journal
//!
//! `path = "journal"` sends each record as one datagram of the journal's
//! native protocol: `MESSAGE=` the JSON line, `SYSLOG_IDENTIFIER=mcp-edge-audit`,
//! `PRIORITY=6`, and `MCP_EDGE_CLIENT`, `MCP_EDGE_METHOD`,
//! `MCP_EDGE_UPSTREAM`, `MCP_EDGE_NAME`, `MCP_EDGE_OUTCOME` (so
//! `journalctl SYSLOG_IDENTIFIER=mcp-edge-audit MCP_EDGE_OUTCOME=refused`
//! works). Own code again: `libsystemd` brings nix, nom, uuid, sha2 and
//! hmac for one `send`; `systemd-journal-logger` is a `log`-facade logger
//! with a fixed socket path. A record too large for one datagram is sent
//! with `"arguments_omitted":true` instead of its arguments.

mod line;
mod operator_record;
mod sink;

pub use line::{Entry, Outcome, Record, SESSION_ID_CHARS};
pub use operator_record::{Action, Operator};
pub use sink::{AuditError, Journal, RotatingFile, Sink, JOURNAL_IDENTIFIER, JOURNAL_SOCKET};

use crate::config::{AuditConfig, AuditSink};
use crate::limits::{AUDIT_ERROR_LOG_PERIOD, AUDIT_QUEUE_BYTES, AUDIT_QUEUE_DEPTH};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// What travels on the queue.
enum Msg {
    Entry(Entry),
    /// Sent by [`AuditWriter::close`]: write nothing after this.
    Close,
}

/// Counters shared by the handles and the writer thread.
#[derive(Default)]
struct Counters {
    /// Bytes of the entries in the queue ([`Entry::cost`]).
    queued_bytes: AtomicUsize,
    dropped: AtomicU64,
    written: AtomicU64,
    write_errors: AtomicU64,
}

/// The handle calls are recorded through: cheap to clone, never blocks.
#[derive(Clone)]
pub struct Audit {
    tx: mpsc::Sender<Msg>,
    arguments: bool,
    counters: Arc<Counters>,
}

/// Owns the writer thread. [`AuditWriter::close`] lets it write what is
/// queued and waits for it; dropping the handle asks it to stop (when the
/// queue has room for the request; otherwise it stops once every
/// [`Audit`] handle is gone) without waiting.
pub struct AuditWriter {
    tx: mpsc::Sender<Msg>,
    done: Option<oneshot::Receiver<()>>,
}

impl Audit {
    /// Opens the sink of `cfg` and starts the writer thread. Errors name
    /// `audit.path` ([`AuditError`]).
    pub fn start(cfg: &AuditConfig) -> Result<(Audit, AuditWriter), AuditError> {
        let sink = match &cfg.sink {
            AuditSink::File(path) => Sink::File(RotatingFile::open(path, cfg.max_bytes, cfg.keep)?),
            AuditSink::Journal => Sink::Journal(Journal::connect(Path::new(JOURNAL_SOCKET))?),
        };
        Audit::start_with(sink, cfg.arguments)
    }

    /// [`Audit::start`] with an opened sink (tests: a journal socket of their own).
    pub fn start_with(sink: Sink, arguments: bool) -> Result<(Audit, AuditWriter), AuditError> {
        let (tx, rx) = mpsc::channel(AUDIT_QUEUE_DEPTH);
        let (done_tx, done) = oneshot::channel();
        let counters = Arc::new(Counters::default());
        let c = counters.clone();
        #[allow(clippy::disallowed_methods)] // the audit writer thread, owned by AuditWriter
        std::thread::Builder::new()
            .name("mcp-edge-audit".into())
            .spawn(move || {
                write_all(sink, rx, &c);
                drop(done_tx);
            })
            .map_err(AuditError::Thread)?;
        let audit = Audit {
            tx: tx.clone(),
            arguments,
            counters,
        };
        let writer = AuditWriter {
            tx,
            done: Some(done),
        };
        Ok((audit, writer))
    }

    /// Whether arguments are written (`[audit] arguments`): callers clone
    /// a call's arguments into [`Record::arguments`] only when this is true
    /// (otherwise [`Audit::record`] drops them).
    pub fn wants_arguments(&self) -> bool {
        self.arguments
    }

    /// Queues `r` for the writer; never waits. A full queue (or a stopped
    /// writer) drops it and counts it (`mcp_edge_audit_dropped_total`).
    pub fn record(&self, mut r: Record) {
        if !self.arguments {
            r.arguments = None;
        }
        match Entry::new(r) {
            Some(entry) => self.queue(entry),
            None => self.write_error(),
        }
    }

    /// A line that could not be made: counted as a write error.
    fn write_error(&self) {
        self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::metrics::AUDIT_WRITE_ERRORS).increment(1);
    }

    /// Queues `entry` for the writer; never waits (see [`Audit::record`]).
    fn queue(&self, entry: Entry) {
        let cost = entry.cost();
        let before = self
            .counters
            .queued_bytes
            .fetch_add(cost, Ordering::Relaxed);
        // One entry alone is always admitted (it is at most a request body).
        let fits = before == 0 || before + cost <= AUDIT_QUEUE_BYTES;
        if !fits || self.tx.try_send(Msg::Entry(entry)).is_err() {
            self.counters
                .queued_bytes
                .fetch_sub(cost, Ordering::Relaxed);
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(crate::metrics::AUDIT_DROPPED).increment(1);
        }
    }

    /// Records dropped by this log so far (also in `mcp_edge_audit_dropped_total`).
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// Records written so far.
    pub fn written(&self) -> u64 {
        self.counters.written.load(Ordering::Relaxed)
    }

    /// Records that could not be written so far (also in
    /// `mcp_edge_audit_write_errors_total`).
    pub fn write_errors(&self) -> u64 {
        self.counters.write_errors.load(Ordering::Relaxed)
    }

    /// Places free in the queue right now.
    pub fn queue_free(&self) -> usize {
        self.tx.capacity()
    }
}

impl AuditWriter {
    /// Lets the writer write what is queued (records arriving after this
    /// are not written) and waits up to `grace` for it. Returns whether it
    /// finished in time; if not, the thread is left to finish on its own.
    pub async fn close(mut self, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        let Some(done) = self.done.take() else {
            return true;
        };
        let closed = tokio::time::timeout_at(deadline, async {
            // Err: the thread is gone already, so `done` resolves at once.
            let _ = self.tx.send(Msg::Close).await;
            let _ = done.await;
        });
        closed.await.is_ok()
    }
}

impl Drop for AuditWriter {
    fn drop(&mut self) {
        if self.done.is_some() {
            let _ = self.tx.try_send(Msg::Close);
        }
    }
}

/// The writer thread: takes entries off the queue until it is closed.
fn write_all(mut sink: Sink, mut rx: mpsc::Receiver<Msg>, c: &Counters) {
    let mut log = ErrorLog::default();
    while let Some(Msg::Entry(e)) = rx.blocking_recv() {
        let result = sink.write(&e);
        c.queued_bytes.fetch_sub(e.cost(), Ordering::Relaxed);
        match result {
            Ok(()) => {
                c.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => {
                c.write_errors.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(crate::metrics::AUDIT_WRITE_ERRORS).increment(1);
                log.error(&err);
            }
        }
    }
    if let Err(err) = sink.flush() {
        log.error(&err);
    }
}

/// Write errors, logged at most once per [`AUDIT_ERROR_LOG_PERIOD`].
#[derive(Default)]
struct ErrorLog {
    last: Option<tokio::time::Instant>,
    skipped: u64,
}

impl ErrorLog {
    fn error(&mut self, err: &std::io::Error) {
        let now = tokio::time::Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < AUDIT_ERROR_LOG_PERIOD)
        {
            self.skipped += 1;
            return;
        }
        let skipped = std::mem::take(&mut self.skipped);
        tracing::warn!(
            "audit: cannot write a record: {err} ({skipped} more not logged since the last report; all in mcp_edge_audit_write_errors_total)"
        );
        self.last = Some(now);
    }
}

/// The audit record of a parked call (`downstream::call::Pending::parked`), written when
/// the call expires unclaimed ([`Expiry::expired`]); dropped unwritten when
/// a retry takes the call back. (Servers "MUST NOT assume that clients
/// will ... retry the original request",
/// `../shared/spec/2026-07-28/patterns-mrtr.mdx` §Server Requirements
/// (Basic Workflow): a round never retried is legal, and the log says so.)
pub struct Expiry {
    record: Record,
    t0: Instant,
    audit: Audit,
}

impl Expiry {
    /// The record to write if the call expires, of a call begun at `t0`.
    pub fn new(record: Record, t0: Instant, audit: Audit) -> Self {
        Expiry { record, t0, audit }
    }

    /// Audits the parked call as `input_expired` (never waits).
    pub fn expired(self) {
        let mut r = self.record;
        r.duration_ms = self.t0.elapsed().as_millis() as u64;
        self.audit.record(r);
    }
}

#[cfg(test)]
mod audit_tests;
