//! Backoff state that survives restarts: per upstream, the failures in a row,
//! the wall-clock time of the next attempt, and whether it is parked awaiting
//! credentials. Kept in `<state_directory>/upstreams.json` (systemd
//! `StateDirectory=`), written atomically (temporary file, fsync, rename), so
//! a crash-restart loop does not turn into a reconnect storm. Written on the
//! blocking pool: an fsync on an SD card can take a good part of a second,
//! and the runtime has one thread for every connection. A missing or
//! corrupt file is ignored with a warning. Bounded: one small entry per
//! configured upstream (≤ `limits::MAX_UPSTREAMS`), reasons cut to 256 bytes.

use crate::limits::PERSISTED_REASON_BYTES as REASON_BYTES;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// File name inside the state directory.
pub const FILE_NAME: &str = "upstreams.json";

/// What is remembered of one upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saved {
    /// Failed attempts in a row.
    pub failures: u32,
    /// Next attempt, milliseconds since the Unix epoch (0 = none scheduled).
    pub next_attempt_unix_ms: u64,
    /// Parked awaiting credentials.
    pub parked: bool,
    /// The last error.
    pub reason: String,
}

impl Saved {
    /// How long from `now` until the saved next attempt (zero if past).
    pub fn wait_from(&self, now: SystemTime) -> Duration {
        let at = UNIX_EPOCH + Duration::from_millis(self.next_attempt_unix_ms);
        at.duration_since(now).unwrap_or(Duration::ZERO)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileV1 {
    version: u32,
    upstreams: BTreeMap<String, Saved>,
}

/// The state file of one gateway.
#[derive(Debug)]
pub struct Persist {
    path: PathBuf,
    state: Mutex<BTreeMap<String, Saved>>,
    /// Held while the file is written: one writer at a time, each writing
    /// the state as it is then (so the last write has the newest).
    writing: Mutex<()>,
}

impl Persist {
    /// Opens `<dir>/upstreams.json`, keeping only entries of upstreams in
    /// `names`; a missing or corrupt file starts empty (corrupt: with a warning).
    pub fn open(dir: &Path, names: &[&str]) -> Persist {
        let path = dir.join(FILE_NAME);
        let mut state = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<FileV1>(&bytes) {
                Ok(f) if f.version == 1 => f.upstreams,
                Ok(f) => {
                    tracing::warn!(path = %path.display(), "ignoring state file of unknown version {}", f.version);
                    BTreeMap::new()
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), "ignoring corrupt state file: {e}");
                    BTreeMap::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring unreadable state file: {e}");
                BTreeMap::new()
            }
        };
        state.retain(|k, _| names.contains(&k.as_str()));
        Persist {
            path,
            state: Mutex::new(state),
            writing: Mutex::new(()),
        }
    }

    /// The saved entry of `upstream`, if any.
    pub fn get(&self, upstream: &str) -> Option<Saved> {
        self.state
            .lock()
            .expect("persist lock")
            .get(upstream)
            .cloned()
    }

    /// Records `saved` for `upstream` (or forgets it with `None`) and writes
    /// the file atomically, on the blocking pool when there is a runtime.
    /// Write errors are logged, never fatal.
    pub fn put(self: &Arc<Self>, upstream: &str, saved: Option<Saved>) {
        if !self.record(upstream, saved) {
            return;
        }
        let me = Arc::clone(self);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || me.write())),
            Err(_) => me.write(),
        }
    }

    /// Changes the state; false when nothing changed.
    fn record(&self, upstream: &str, saved: Option<Saved>) -> bool {
        let mut g = self.state.lock().expect("persist lock");
        match saved {
            Some(mut s) => {
                if s.reason.len() > REASON_BYTES {
                    let mut cut = REASON_BYTES;
                    while !s.reason.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    s.reason.truncate(cut);
                }
                if g.get(upstream) == Some(&s) {
                    return false;
                }
                g.insert(upstream.to_string(), s);
                true
            }
            None => g.remove(upstream).is_some(),
        }
    }

    /// Writes the state as it is now.
    fn write(&self) {
        let _one = self.writing.lock().expect("persist write lock");
        let file = FileV1 {
            version: 1,
            upstreams: self.state.lock().expect("persist lock").clone(),
        };
        if let Err(e) = write_atomically(&self.path, &file) {
            tracing::warn!(path = %self.path.display(), "cannot write state file: {e}");
        }
    }
}

fn write_atomically(path: &Path, file: &FileV1) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec_pretty(file)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Milliseconds since the Unix epoch of `now + after`.
pub fn unix_ms_after(after: Duration) -> u64 {
    (SystemTime::now() + after)
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_ignores_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let p = Arc::new(Persist::open(dir.path(), &["a", "b"]));
        let s = Saved {
            failures: 3,
            next_attempt_unix_ms: unix_ms_after(Duration::from_secs(60)),
            parked: false,
            reason: "x".repeat(1000),
        };
        p.put("a", Some(s.clone()));
        let again = Persist::open(dir.path(), &["a", "b"]);
        let got = again.get("a").unwrap();
        assert_eq!(got.failures, 3);
        assert_eq!(got.reason.len(), 256);
        assert!(got.wait_from(SystemTime::now()) > Duration::from_secs(50));
        // An entry of an upstream no longer configured is dropped.
        assert!(Persist::open(dir.path(), &["b"]).get("a").is_none());
        std::fs::write(dir.path().join(FILE_NAME), b"{not json").unwrap();
        assert!(Persist::open(dir.path(), &["a"]).get("a").is_none());
    }

    /// Inside a runtime the file is written on the blocking pool; however
    /// those writes interleave, the file ends with the newest state.
    #[tokio::test]
    async fn writes_off_the_runtime_end_with_the_newest_state() {
        let dir = tempfile::tempdir().unwrap();
        let p = Arc::new(Persist::open(dir.path(), &["a"]));
        for failures in 1..=50 {
            p.put(
                "a",
                Some(Saved {
                    failures,
                    next_attempt_unix_ms: 0,
                    parked: false,
                    reason: String::new(),
                }),
            );
        }
        let mut last = None;
        for _ in 0..200 {
            last = Persist::open(dir.path(), &["a"])
                .get("a")
                .map(|s| s.failures);
            if last == Some(50) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(last, Some(50));
    }
}
