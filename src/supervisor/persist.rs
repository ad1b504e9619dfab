//! Backoff state that survives restarts: per upstream, the failures in a row,
//! the wall-clock time of the next attempt, and whether it is parked awaiting
//! credentials. Kept in `<state_directory>/upstreams.json` (systemd
//! `StateDirectory=`), written atomically (temporary file, fsync, rename), so
//! a crash-restart loop does not turn into a reconnect storm. A missing or
//! corrupt file is ignored with a warning. Bounded: one small entry per
//! configured upstream (≤ `limits::MAX_UPSTREAMS`), reasons cut to 256 bytes.

use crate::limits::PERSISTED_REASON_BYTES as REASON_BYTES;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
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
    /// the file atomically. Write errors are logged, never fatal.
    pub fn put(&self, upstream: &str, saved: Option<Saved>) {
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
                    return;
                }
                g.insert(upstream.to_string(), s);
            }
            None => {
                if g.remove(upstream).is_none() {
                    return;
                }
            }
        }
        let file = FileV1 {
            version: 1,
            upstreams: g.clone(),
        };
        drop(g);
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
        let p = Persist::open(dir.path(), &["a", "b"]);
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
}
