//! Writing to a child's stdin (`../shared/spec/2026-07-28/transports-stdio.mdx`:
//! one JSON-RPC message per line).
//!
//! Every caller serializes its message straight into one shared queue;
//! whichever caller then holds the pipe writes everything queued, its own
//! line and any queued meanwhile, in one `write`. Callers that find their
//! line already written return at once. So under load several messages go
//! out per system call, with no task of its own and no copy per message.
//! The buffers keep at most [`limits::STDIN_BUFFER_KEEP`] bytes between
//! bursts.
//!
//! A caller dropped in the middle of a write (its client went away) leaves
//! the rest of that write behind in the pipe's state; the next writer
//! finishes it first, so lines are never cut or reordered.

use super::SendError;
use crate::limits;
use serde_json::Value;
use std::io::Write as _;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;

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
}

impl Stdin {
    pub(super) fn new(w: Option<ChildStdin>) -> Self {
        Stdin {
            pipe: tokio::sync::Mutex::new(Pipe {
                w,
                batch: Vec::new(),
                done: 0,
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
        self.flush().await
    }

    /// Writes `msg` as one line.
    pub(super) async fn message(&self, msg: &Value) -> Result<(), SendError> {
        self.queue(|b| {
            let _ = serde_json::to_writer(&mut *b, msg);
        });
        self.flush().await
    }

    /// Closes the pipe: the child sees EOF.
    pub(super) async fn close(&self) {
        self.pipe.lock().await.w.take();
    }

    fn queue(&self, fill: impl FnOnce(&mut Vec<u8>)) {
        let mut q = self.queued.lock().expect("stdin queue");
        fill(&mut q);
        q.push(b'\n');
    }

    /// Writes what is queued (unless a writer before took it already).
    async fn flush(&self) -> Result<(), SendError> {
        let mut pipe = self.pipe.lock().await;
        let p = &mut *pipe;
        // A writer dropped mid-write left the rest of its batch: first that.
        if p.done == p.batch.len() {
            p.batch.clear();
            p.done = 0;
            std::mem::swap(&mut *self.queued.lock().expect("stdin queue"), &mut p.batch);
        }
        let w =
            p.w.as_mut()
                .ok_or_else(|| SendError::Transport("stdin closed".into()))?;
        while p.done < p.batch.len() {
            match w.write(&p.batch[p.done..]).await {
                Ok(0) => return Err(SendError::Transport("writing stdin: pipe closed".into())),
                Ok(n) => p.done += n,
                Err(e) => return Err(SendError::Transport(format!("writing stdin: {e}"))),
            }
        }
        if p.batch.capacity() > limits::STDIN_BUFFER_KEEP {
            p.batch = Vec::new();
            p.done = 0;
        }
        Ok(())
    }
}
