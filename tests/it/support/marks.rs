//! What the fake upstream has received. Started with `--marks FILE`
//! (`tests/fake/fake_upstream.py`), it appends `call <tool>` to FILE when a
//! `tools/call` reaches it, before acting on it, and `cancelled <id>` when a
//! `notifications/cancelled` does: a test then knows the call is in flight
//! at the upstream (or that the gateway told it to cancel) instead of
//! sleeping "long enough" for it to be.

use super::eventually::eventually_sync;
use std::time::Duration;

/// A marks file in a folder of its own, gone on drop.
pub struct Marks {
    dir: tempfile::TempDir,
    file: String,
}

impl Default for Marks {
    fn default() -> Marks {
        Marks::new()
    }
}

impl Marks {
    pub fn new() -> Marks {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("marks").display().to_string();
        Marks { dir, file }
    }

    /// The fake's flags: `--marks FILE`.
    pub fn flags(&self) -> [&str; 2] {
        ["--marks", &self.file]
    }

    /// The `paths_rw` line a sandboxed fake needs to write its marks (for
    /// the `[[upstream]]` block's extra keys).
    pub fn grant(&self) -> String {
        format!("paths_rw = [{:?}]", self.dir.path().display().to_string())
    }

    /// A `[[upstream]]` block running the fake upstream `name` (`era`) over
    /// stdio with `extra` keys, leaving its marks here.
    pub fn fake_block(&self, name: &str, era: &str, extra: &str) -> String {
        let extra = format!("{extra}\n{}", self.grant());
        super::fake_block_args(name, era, &self.flags(), &extra)
    }

    /// The marks so far, one per line.
    pub fn lines(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }

    /// Waits (up to 30 s) until `n` `tools/call`s of `tool` have reached the
    /// fake.
    pub async fn called(&self, tool: &str, n: usize) {
        let what = format!("{n} tools/call of {tool} at the fake upstream");
        self.seen(&what, |l| l == format!("call {tool}"), n).await
    }

    /// Waits (up to 30 s) until `n` `notifications/cancelled` have reached
    /// the fake.
    pub async fn cancelled(&self, n: usize) {
        let what = format!("{n} notifications/cancelled at the fake upstream");
        self.seen(&what, |l| l.starts_with("cancelled "), n).await
    }

    async fn seen(&self, what: &str, mark: impl Fn(&str) -> bool, n: usize) {
        eventually_sync(what, Duration::from_secs(30), || {
            let lines = self.lines();
            if lines.iter().filter(|l| mark(l)).count() >= n {
                Ok(())
            } else {
                Err(format!("{lines:?}"))
            }
        })
        .await
    }
}
