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

#[cfg(test)]
mod tests {
    use super::Stdin;
    use serde_json::json;
    use serde_json::Value;
    use std::process::Stdio;
    use tokio::io::AsyncReadExt;

    /// `sh -c script` with its stdin behind a [`Stdin`] and its stdout.
    fn piped(script: &str) -> (tokio::process::Child, Stdin, tokio::process::ChildStdout) {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("sh");
        let stdin = Stdin::new(child.stdin.take());
        let stdout = child.stdout.take().expect("stdout");
        (child, stdin, stdout)
    }

    /// A writer dropped while the pipe is full (the child reads late)
    /// leaves its batch half written; the next caller finishes it and
    /// then writes its own line: both lines arrive whole, in order.
    #[tokio::test]
    async fn a_write_cut_short_is_finished_by_the_next_writer() {
        let (_child, stdin, mut stdout) = piped("sleep 0.5; cat");
        let big = json!({"x": "a".repeat(1 << 20)});
        // cat's output is read all along (a full stdout pipe would stop it
        // reading its stdin).
        let read = async {
            let mut out = String::new();
            stdout.read_to_string(&mut out).await.expect("read");
            out
        };
        let write = async {
            let cut =
                tokio::time::timeout(std::time::Duration::from_millis(50), stdin.message(&big))
                    .await;
            assert!(cut.is_err(), "a 1 MiB line cannot fit the pipe at once");
            stdin.request(7, "ping", None).await.expect("written");
            stdin.close().await;
        };
        let (out, ()) = tokio::join!(read, write);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{} bytes", out.len());
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(lines[0]).unwrap(),
            big
        );
        assert_eq!(lines[1], r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#);
    }

    /// Requests made in the same turn of the runtime go out in one `write`,
    /// whole and in the order they were made.
    #[tokio::test]
    async fn lines_queued_together_go_out_in_one_write() {
        let (_child, stdin, mut stdout) = piped("cat");
        let params = json!({"name": "echo", "arguments": {"text": "hi"}});
        let one = |id| stdin.request(id, "tools/call", Some(&params));
        let (a, b, c, d) = tokio::join!(one(1), one(2), one(3), one(4));
        for r in [a, b, c, d] {
            r.expect("written");
        }
        assert_eq!(stdin.pipe.lock().await.writes, 1, "four lines, one write");
        stdin.close().await;
        let mut out = String::new();
        stdout.read_to_string(&mut out).await.expect("read");
        let ids: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("a whole line")["id"].clone())
            .collect();
        assert_eq!(ids, [json!(1), json!(2), json!(3), json!(4)]);
    }
}
