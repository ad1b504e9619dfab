//! Tool pins: the defence against a tool definition that changes under a
//! running gateway (the "rug pull" / tool-poisoning attack).
//!
//! Each tool an upstream lists is hashed ([`digest`]: SHA-256 over the
//! canonical JSON of the whole definition but `_meta` and `icons`, so
//! unknown fields fail closed) and compared with its *pin*, the hash recorded for that
//! upstream and tool name. One [`Pins`] store per gateway holds every
//! upstream's pins (one lock), shared by the upstream handles, which review
//! each catalog they install against it (`Steward::set_catalog`) and record
//! an operator's approval (`Upstream::approve`).
//!
//! - **Trust on first use.** An upstream with no pins at all (a fresh state
//!   directory, or an upstream new to the config) gets every tool of its
//!   first complete listing pinned and served.
//! - `trust = "auto"` (the default): a changed tool is logged (a warning
//!   naming upstream and tool) and its new hash recorded; a new tool is
//!   pinned as it comes. Nothing is withheld.
//! - `trust = "pin"`: a tool whose hash differs from its pin
//!   ([`Reason::Changed`]), or that has no pin ([`Reason::New`]), is
//!   [`Withheld`]: left out of lists and answered as an unknown tool, until
//!   approved. A tool that returns to its pinned definition is served again.
//!
//! **Storage.** With `server.state_directory`, the pins live in
//! `<dir>/tool-pins.json` ([`FILE_NAME`]), written atomically when they
//! change ([`Flush`]: at once, but `auto` re-pins alone at most once per
//! [`limits::PINS_WRITE_MIN_INTERVAL`]; shutdown writes what is pending),
//! off the async workers, so a restart keeps them; what is withheld is not stored but recomputed from
//! the pins and what the upstream lists. Without a directory they live in
//! memory (config loading refuses `trust = "pin"` then); with a `pin`
//! upstream the file is written at start, and a directory where it cannot
//! be written fails the start ([`Pins::open`]). A missing file
//! means nothing was pinned yet. A file that cannot be read or parsed is
//! *not* taken as empty, which would trust every tool again: every `pin`
//! upstream starts with an empty pin set, so all its tools are withheld
//! ([`Reason::Unverified`], naming the problem) until approved, and the
//! error is logged naming the path. A corrupt file is kept aside as
//! `tool-pins.json.damaged`, then replaced (after a restart its tools show
//! as `new`: the reason is not stored). A file that cannot be read
//! (permissions, I/O), or whose copy aside fails, is left untouched and
//! not written this run ([`PinsError::Frozen`]): its pins may be fine, and
//! approvals hold in memory until a restart. That keeps
//! the gateway (and its admin listener, through which the operator
//! approves) running on a remote box, where refusing to start would need
//! someone at a shell. `auto` upstreams start over.
//!
//! **Bounds.** Pins of tools an upstream no longer lists are kept (a tool
//! that comes back unchanged is served) while the upstream has at most
//! `max_catalog_entries` pins; past that they are dropped. A listing never
//! holds more than `max_catalog_entries` tools, so each upstream holds at
//! most that many pins. Pins of upstreams no longer in the config are
//! dropped at start and at reload (added back, such an upstream is trusted
//! on first use again). The file is at most [`limits::PINS_FILE_MAX_BYTES`].

pub mod digest;
mod file;
mod save;

pub use digest::Digest;
pub use file::FILE_NAME;
pub use save::Flush;

use crate::config::Trust;
use crate::limits;
use crate::logline::{printable, Throttle};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// Why a tool is withheld.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// It has no pin: listed after the upstream's first connection.
    New,
    /// Its definition differs from the pinned one.
    Changed {
        /// The pinned digest.
        pinned: Digest,
    },
    /// The pins file could not be read at start, so nothing of this
    /// upstream can be verified.
    Unverified {
        /// What was wrong with the file.
        why: Arc<str>,
    },
}

/// One tool an upstream lists that is not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    /// The upstream's own name of the tool.
    pub tool: String,
    /// The digest of the definition it lists now (what an approval pins).
    pub now: Digest,
    /// Why.
    pub reason: Reason,
}

impl Withheld {
    /// `new`, `changed` or `unverified`.
    pub fn reason_name(&self) -> &'static str {
        match self.reason {
            Reason::New => "new",
            Reason::Changed { .. } => "changed",
            Reason::Unverified { .. } => "unverified",
        }
    }

    /// One line for operators, starting with the reason.
    pub fn detail(&self) -> String {
        match &self.reason {
            Reason::New => format!(
                "new (listed after the upstream's first connection, not pinned); now {}",
                self.now.short()
            ),
            Reason::Changed { pinned } => format!(
                "changed (pinned {}, now {})",
                pinned.short(),
                self.now.short()
            ),
            Reason::Unverified { why } => format!(
                "unverified (the pins file could not be read at start: {why}); now {}",
                self.now.short()
            ),
        }
    }

    /// As `/status` shows it.
    pub fn to_json(&self) -> Value {
        let pinned = match &self.reason {
            Reason::Changed { pinned } => Some(pinned.short()),
            _ => None,
        };
        json!({
            "tool": self.tool,
            "reason": self.reason_name(),
            "pinned": pinned,
            "now": self.now.short(),
            "now_sha256": self.now.hex(),
            "detail": self.detail(),
        })
    }
}

/// Why the pins could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum PinsError {
    /// Writing the file failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The pins file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file would be larger than [`limits::PINS_FILE_MAX_BYTES`].
    #[error(
        "the pins file would be {bytes} bytes, over limits::PINS_FILE_MAX_BYTES ({}); not written",
        limits::PINS_FILE_MAX_BYTES
    )]
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// The file found at start could not be read, or not kept aside: it is
    /// left untouched and not written during this run.
    #[error("{} is left untouched this run ({why}); pins changed since the start live in memory only", path.display())]
    Frozen {
        /// The pins file.
        path: PathBuf,
        /// Why it is not written.
        why: Arc<str>,
    },
}

/// Every upstream's pins, one per gateway (see the module docs).
pub struct Pins {
    /// `<state_directory>/tool-pins.json`; `None` = in memory only.
    path: Option<PathBuf>,
    state: Mutex<State>,
    /// One file write at a time (the state lock is not held while writing;
    /// the guard moves into the blocking write, so a dropped caller cannot
    /// let a second write start on the same temporary file).
    writer: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct State {
    table: file::Table,
    /// `pin` upstreams whose pins were lost to a damaged file, and why.
    unverified: BTreeMap<String, Arc<str>>,
    /// Changed since the file was last written.
    dirty: bool,
    /// Changed by more than `auto` re-pins: the next flush writes at once.
    urgent: bool,
    /// When the file was last written (a coalesced flush waits
    /// [`limits::PINS_WRITE_MIN_INTERVAL`] after it).
    written: Option<Instant>,
    /// The file must not be written this run: why ([`PinsError::Frozen`]).
    frozen: Option<Arc<str>>,
    /// Per upstream: the budget of log lines about its tools.
    logs: BTreeMap<String, Throttle>,
}

impl State {
    /// Marks the pins changed (`urgent`: not only by an `auto` re-pin).
    fn touch(&mut self, urgent: bool) {
        self.dirty = true;
        self.urgent |= urgent;
    }

    /// `Some(n)` when a line about `upstream`'s tools may be logged now
    /// (`n` skipped before it), per [`limits::PINS_LOG_BURST`].
    fn log_allowed(&mut self, upstream: &str) -> Option<u64> {
        let now = Instant::now();
        if !self.logs.contains_key(upstream) {
            let t = Throttle::over(limits::PINS_LOG_BURST, limits::PINS_LOG_PER, now);
            self.logs.insert(upstream.to_owned(), t);
        }
        self.logs[upstream].allow(now)
    }

    /// Every `pin` upstream of `upstreams` starts with an empty pin set,
    /// its tools withheld as unverified because of `why`.
    fn distrust(&mut self, upstreams: &[(&str, Trust)], why: &Arc<str>) {
        for (name, _) in upstreams.iter().filter(|(_, t)| *t == Trust::Pin) {
            self.table.insert((*name).to_owned(), BTreeMap::new());
            self.unverified.insert((*name).to_owned(), why.clone());
        }
        self.touch(true);
    }
}

/// The state read from `path` at start (see the module docs on a file
/// that cannot be read or is damaged).
fn load_state(path: &Path, upstreams: &[(&str, Trust)]) -> State {
    let mut state = State::default();
    match file::load(path) {
        file::Loaded::Missing => {}
        file::Loaded::Read(table) => state.table = table,
        file::Loaded::Unreadable(why) => {
            tracing::error!(path = %path.display(),
                "tool pins file cannot be read: {why}; it is left untouched and not written this run, and every tool of the trust = \"pin\" upstreams is withheld until approved (approvals hold until a restart); fix its permissions and restart");
            let why: Arc<str> = Arc::from(format!("{}: {why}", path.display()));
            state.distrust(upstreams, &why);
            state.frozen = Some(why);
        }
        file::Loaded::Damaged(why) => {
            let aside = path.with_extension("json.damaged");
            let why: Arc<str> = Arc::from(format!("{}: {why}", path.display()));
            state.distrust(upstreams, &why);
            match std::fs::copy(path, &aside) {
                Ok(_) => tracing::error!(path = %path.display(), kept_as = %aside.display(),
                    "tool pins file unusable: {why}; every tool of the trust = \"pin\" upstreams is withheld until approved (mcp-edge tools approve UPSTREAM)"),
                Err(e) => {
                    tracing::error!(path = %path.display(),
                        "tool pins file unusable: {why}; it cannot be kept as {}: {e}, so it is left untouched and not written this run; every tool of the trust = \"pin\" upstreams is withheld until approved (approvals hold until a restart)", aside.display());
                    state.frozen = Some(Arc::from(format!(
                        "cannot keep it as {}: {e}",
                        aside.display()
                    )));
                }
            }
        }
    }
    state
}

impl Pins {
    /// Pins kept in memory only (no `server.state_directory`).
    pub fn in_memory() -> Pins {
        Pins {
            path: None,
            state: Mutex::new(State::default()),
            writer: Arc::default(),
        }
    }

    /// Opens `<dir>/tool-pins.json` for `upstreams` (name and trust of each
    /// configured upstream): pins of other upstreams are dropped; a damaged
    /// or unreadable file is handled as the module docs say. With a `pin`
    /// upstream the file is written at once (blocking: this runs at start),
    /// so a directory where pins cannot be saved fails the start rather than
    /// every restart trusting on first use.
    ///
    /// # Errors
    /// [`PinsError`] when a `pin` upstream is configured and the file
    /// cannot be written (without one, a write error is only logged).
    pub fn open(dir: &Path, upstreams: &[(&str, Trust)]) -> Result<Pins, PinsError> {
        let path = dir.join(FILE_NAME);
        let pins = Pins {
            state: Mutex::new(load_state(&path, upstreams)),
            path: Some(path),
            writer: Arc::default(),
        };
        let names: Vec<&str> = upstreams.iter().map(|(n, _)| *n).collect();
        pins.retain(&names);
        if pins.state().frozen.is_some() {
            return Ok(pins); // kept running, the original untouched (logged)
        }
        let pinning = upstreams.iter().any(|(_, t)| *t == Trust::Pin);
        if pinning {
            pins.state().touch(true); // proves the file can be written
        }
        match pins.flush_blocking() {
            Err(e) if pinning => Err(e),
            Err(e) => {
                tracing::warn!("tool pins not saved: {e}");
                Ok(pins)
            }
            Ok(()) => Ok(pins),
        }
    }

    /// The pins file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("pins lock")
    }

    /// `Some(n)` when a line about `upstream`'s tools may be logged now
    /// (`n` lines were skipped before it); `None`: skip this one.
    pub fn log_allowed(&self, upstream: &str) -> Option<u64> {
        self.state().log_allowed(upstream)
    }

    /// Drops the pins of upstreams not in `names` (start, reload).
    pub fn retain(&self, names: &[&str]) {
        let mut st = self.state();
        let before = st.table.len();
        st.table.retain(|u, _| names.contains(&u.as_str()));
        st.unverified.retain(|u, _| names.contains(&u.as_str()));
        st.logs.retain(|u, _| names.contains(&u.as_str()));
        if st.table.len() != before {
            tracing::info!(
                "tool pins of {} upstream(s) no longer configured dropped",
                before - st.table.len()
            );
            st.touch(true);
        }
    }

    /// Number of pins `upstream` has.
    pub fn pinned(&self, upstream: &str) -> usize {
        self.state().table.get(upstream).map_or(0, BTreeMap::len)
    }

    /// The digest pinned for `upstream`'s tool `tool`, if any.
    pub fn pin_of(&self, upstream: &str, tool: &str) -> Option<Digest> {
        self.state().table.get(upstream)?.get(tool).copied()
    }

    /// Reviews what `upstream` lists now (`listed`: name and digest of each
    /// tool, [`digest::listed`]) under `trust`, and returns the tools to
    /// withhold. `complete`: the listing had no failure (only a complete
    /// one is pinned on first use). `capacity` is its `max_catalog_entries`.
    pub fn review(
        &self,
        upstream: &str,
        trust: Trust,
        capacity: usize,
        listed: &[(String, Digest)],
        complete: bool,
    ) -> Vec<Withheld> {
        let mut guard = self.state();
        let st = &mut *guard;
        if !st.table.contains_key(upstream) {
            return first_use(st, upstream, trust, listed, complete);
        }
        let mut withheld = Vec::new();
        for (name, now) in listed {
            let pinned = st.table.get(upstream).and_then(|p| p.get(name)).copied();
            if pinned == Some(*now) {
                continue;
            }
            if trust == Trust::Auto {
                if let Some(skipped) = st.log_allowed(upstream) {
                    log_auto(upstream, name, pinned, *now, skipped);
                }
                let pins = st.table.entry(upstream.to_owned()).or_default();
                pins.insert(name.clone(), *now);
                st.touch(false);
                continue;
            }
            let reason = match (pinned, st.unverified.get(upstream)) {
                (Some(pinned), _) => Reason::Changed { pinned },
                (None, Some(why)) => Reason::Unverified { why: why.clone() },
                (None, None) => Reason::New,
            };
            withheld.push(Withheld {
                tool: name.clone(),
                now: *now,
                reason,
            });
        }
        let names: HashSet<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
        let pins = st.table.entry(upstream.to_owned()).or_default();
        if prune(upstream, pins, &names, capacity) {
            st.touch(false);
        }
        withheld
    }

    /// Pins `chosen` (name and digest of the definition listed now) for
    /// `upstream`: an operator approved them. `listed` names every tool the
    /// upstream lists now (pins of others may go, see [`Pins::review`]).
    pub fn approve(
        &self,
        upstream: &str,
        chosen: &[(String, Digest)],
        capacity: usize,
        listed: &HashSet<&str>,
    ) {
        let mut guard = self.state();
        let st = &mut *guard;
        let pins = st.table.entry(upstream.to_owned()).or_default();
        for (name, d) in chosen {
            pins.insert(name.clone(), *d);
        }
        prune(upstream, pins, listed, capacity);
        st.unverified.remove(upstream);
        st.touch(true);
    }
}

/// An upstream without pins: a complete listing is pinned whole and
/// served (trust on first use); an incomplete one is not pinned (a failed
/// `tools/list` would pin an empty set), and under `pin` its tools wait
/// for the next, complete listing.
fn first_use(
    st: &mut State,
    upstream: &str,
    trust: Trust,
    listed: &[(String, Digest)],
    complete: bool,
) -> Vec<Withheld> {
    if !complete {
        if trust == Trust::Auto {
            return Vec::new();
        }
        let new = |(tool, now): &(String, Digest)| Withheld {
            tool: tool.clone(),
            now: *now,
            reason: Reason::New,
        };
        return listed.iter().map(new).collect();
    }
    tracing::info!(
        upstream,
        tools = listed.len(),
        trust = trust.as_str(),
        "first connection: tool definitions pinned (trust on first use)"
    );
    st.table
        .insert(upstream.to_owned(), listed.iter().cloned().collect());
    st.touch(true);
    Vec::new()
}

/// `trust = "auto"`: a changed or new tool is served; say so.
/// (`skipped`: lines of this upstream left out before, by its log budget).
fn log_auto(upstream: &str, tool: &str, pinned: Option<Digest>, now: Digest, skipped: u64) {
    match pinned {
        Some(p) => tracing::warn!(
            upstream,
            tool = %printable(tool),
            skipped,
            "tool definition changed (pinned {}, now {}); serving it (trust = \"auto\") and pinning the new definition",
            p.short(),
            now.short()
        ),
        None => tracing::info!(upstream, tool = %printable(tool), digest = %now.short(), skipped,
            "new tool pinned (trust = \"auto\")"),
    }
}

/// Past `capacity` pins, drops those of tools not in `listed`. True if any went.
fn prune(
    upstream: &str,
    pins: &mut BTreeMap<String, Digest>,
    listed: &HashSet<&str>,
    capacity: usize,
) -> bool {
    if pins.len() <= capacity {
        return false;
    }
    let before = pins.len();
    pins.retain(|name, _| listed.contains(name.as_str()));
    tracing::info!(
        upstream,
        "{} pin(s) of tools no longer listed dropped (more than max_catalog_entries = {capacity})",
        before - pins.len()
    );
    true
}

#[cfg(test)]
mod pins_tests;
