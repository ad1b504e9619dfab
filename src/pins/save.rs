//! Writing the pins file: when ([`Flush`]: at once, or coalesced for
//! `trust = "auto"` re-pins) and how (off the async workers, in
//! `spawn_blocking`, never under the pins lock).

use super::{file, Pins, PinsError};
use crate::limits;
use std::path::PathBuf;
use tokio::time::Instant;

/// When [`Pins::flush`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Whatever changed (approvals, reloads, shutdown).
    Now,
    /// After a catalog review: changes other than `auto` re-pins at once;
    /// `auto` re-pins alone at most once per
    /// [`limits::PINS_WRITE_MIN_INTERVAL`] (the next write carries them).
    Coalesced,
}

/// What one write needs, taken under the state lock.
struct Job {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl Pins {
    /// Takes what to write, if anything, and marks the pins clean.
    fn job(&self, when: Flush) -> Result<Option<Job>, PinsError> {
        let Some(path) = &self.path else {
            return Ok(None);
        };
        let mut st = self.state();
        if !st.dirty {
            return Ok(None);
        }
        let now = Instant::now();
        let recent = st
            .written
            .is_some_and(|w| now.saturating_duration_since(w) < limits::PINS_WRITE_MIN_INTERVAL);
        if when == Flush::Coalesced && !st.urgent && recent {
            metrics::counter!(crate::metrics::PINS_WRITES_DEFERRED).increment(1);
            return Ok(None);
        }
        if let Some(why) = &st.frozen {
            return Err(PinsError::Frozen {
                path: path.clone(),
                why: why.clone(),
            });
        }
        let bytes = file::encode(&st.table);
        if bytes.len() > limits::PINS_FILE_MAX_BYTES {
            crate::metrics::refused("pins_file_bytes");
            return Err(PinsError::TooLarge { bytes: bytes.len() });
        }
        (st.dirty, st.urgent, st.written) = (false, false, Some(now));
        Ok(Some(Job {
            path: path.clone(),
            bytes,
        }))
    }

    /// After a failed write: the pins stay changed, so the next flush tries again.
    fn failed(&self, path: PathBuf, source: std::io::Error) -> PinsError {
        self.state().touch(true);
        PinsError::Write { path, source }
    }

    /// Writes the file if the pins changed since it was last written (a
    /// no-op in memory), as `when` says. The write (fsync, rename, fsync of
    /// the directory: up to a second on an SD card) runs in
    /// `spawn_blocking`; the pins lock is not held meanwhile.
    ///
    /// # Errors
    /// [`PinsError`]; the pins stay marked changed, so the next flush tries again.
    pub async fn flush(&self, when: Flush) -> Result<(), PinsError> {
        // Held until the blocking write ends, even if this future is dropped.
        let one = self.writer.clone().lock_owned().await;
        let Some(job) = self.job(when)? else {
            return Ok(());
        };
        let Job { path, bytes } = job;
        let target = path.clone();
        let done = tokio::task::spawn_blocking(move || {
            let _one = one;
            file::write_atomically(&target, &bytes)
        })
        .await
        .unwrap_or_else(|e| {
            Err(std::io::Error::other(format!(
                "the pins writer failed: {e}"
            )))
        });
        done.map_err(|e| self.failed(path, e))
    }

    /// [`Pins::flush`] `Now`, blocking the calling thread: at start (before
    /// anything is served) and in tests.
    ///
    /// # Errors
    /// As [`Pins::flush`].
    pub fn flush_blocking(&self) -> Result<(), PinsError> {
        let _one = self
            .writer
            .try_lock()
            .expect("no other pins write runs while blocking");
        let Some(job) = self.job(Flush::Now)? else {
            return Ok(());
        };
        file::write_atomically(&job.path, &job.bytes).map_err(|e| self.failed(job.path, e))
    }
}
