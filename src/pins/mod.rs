//! Tool pins: the defence against a tool definition that changes under a
//! running gateway (the "rug pull" / tool-poisoning attack).
//!
//! Each tool an upstream lists is hashed ([`digest`]: SHA-256 over the
//! canonical JSON of its name, title, description, input and output schema
//! and annotations) and compared with its *pin*, the hash recorded for that
//! upstream and tool name. One [`Pins`] store per gateway holds every
//! upstream's pins (one lock), shared by the upstream handles, which review
//! each catalog they install against it (`Upstream::set_catalog`) and record
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
//! `<dir>/tool-pins.json` ([`FILE_NAME`]), written atomically whenever they
//! change (a first listing, an approval, a change under `auto`), so a
//! restart keeps them; what is withheld is not stored but recomputed from
//! the pins and what the upstream lists. Without a directory they live in
//! memory (config loading refuses `trust = "pin"` then); with a `pin`
//! upstream the file is written at start, and a directory where it cannot
//! be written fails the start ([`Pins::open`]). A missing file
//! means nothing was pinned yet. A file that cannot be read or parsed is
//! *not* taken as empty, which would trust every tool again: it is kept
//! aside as `tool-pins.json.damaged`, every `pin` upstream starts with an
//! empty pin set, so all its tools are withheld ([`Reason::Unverified`],
//! naming the problem) until approved, and the error is logged. That keeps
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

pub use digest::Digest;
pub use file::FILE_NAME;

use crate::config::Trust;
use crate::limits;
use crate::logline::printable;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
}

/// Every upstream's pins, one per gateway (see the module docs).
pub struct Pins {
    /// `<state_directory>/tool-pins.json`; `None` = in memory only.
    path: Option<PathBuf>,
    state: Mutex<State>,
    /// One file write at a time (the state lock is not held while writing).
    writer: Mutex<()>,
}

#[derive(Default)]
struct State {
    table: file::Table,
    /// `pin` upstreams whose pins were lost to a damaged file, and why.
    unverified: BTreeMap<String, Arc<str>>,
    /// Changed since the file was last written.
    dirty: bool,
}

impl Pins {
    /// Pins kept in memory only (no `server.state_directory`).
    pub fn in_memory() -> Pins {
        Pins {
            path: None,
            state: Mutex::new(State::default()),
            writer: Mutex::new(()),
        }
    }

    /// Opens `<dir>/tool-pins.json` for `upstreams` (name and trust of each
    /// configured upstream): pins of other upstreams are dropped; a damaged
    /// file is handled as the module docs say. With a `pin` upstream the
    /// file is written at once, so a directory where pins cannot be saved
    /// fails the start rather than every restart trusting on first use.
    ///
    /// # Errors
    /// [`PinsError`] when a `pin` upstream is configured and the file
    /// cannot be written (without one, a write error is only logged).
    pub fn open(dir: &Path, upstreams: &[(&str, Trust)]) -> Result<Pins, PinsError> {
        let path = dir.join(FILE_NAME);
        let mut state = State::default();
        match file::load(&path) {
            file::Loaded::Missing => {}
            file::Loaded::Read(table) => state.table = table,
            file::Loaded::Damaged(why) => {
                let aside = path.with_extension("json.damaged");
                let _ = std::fs::copy(&path, &aside);
                tracing::error!(path = %path.display(), kept_as = %aside.display(),
                    "tool pins file unusable: {why}; every tool of the trust = \"pin\" upstreams is withheld until approved (mcp-edge tools approve UPSTREAM)");
                let why: Arc<str> = Arc::from(format!("{}: {why}", path.display()));
                for (name, _) in upstreams.iter().filter(|(_, t)| *t == Trust::Pin) {
                    state.table.insert((*name).to_owned(), BTreeMap::new());
                    state.unverified.insert((*name).to_owned(), why.clone());
                }
                state.dirty = true;
            }
        }
        let pins = Pins {
            path: Some(path),
            state: Mutex::new(state),
            writer: Mutex::new(()),
        };
        let names: Vec<&str> = upstreams.iter().map(|(n, _)| *n).collect();
        pins.retain(&names);
        let pinning = upstreams.iter().any(|(_, t)| *t == Trust::Pin);
        if pinning {
            pins.state().dirty = true; // proves the file can be written
        }
        match pins.flush() {
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

    /// Drops the pins of upstreams not in `names` (start, reload).
    pub fn retain(&self, names: &[&str]) {
        let mut st = self.state();
        let before = st.table.len();
        st.table.retain(|u, _| names.contains(&u.as_str()));
        st.unverified.retain(|u, _| names.contains(&u.as_str()));
        if st.table.len() != before {
            tracing::info!(
                "tool pins of {} upstream(s) no longer configured dropped",
                before - st.table.len()
            );
            st.dirty = true;
        }
    }

    /// Number of pins `upstream` has.
    pub fn pinned(&self, upstream: &str) -> usize {
        self.state().table.get(upstream).map_or(0, BTreeMap::len)
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
        let Some(pins) = st.table.get_mut(upstream) else {
            return first_use(st, upstream, trust, listed, complete);
        };
        let mut withheld = Vec::new();
        for (name, now) in listed {
            let pinned = pins.get(name).copied();
            if pinned == Some(*now) {
                continue;
            }
            if trust == Trust::Auto {
                log_auto(upstream, name, pinned, *now);
                pins.insert(name.clone(), *now);
                st.dirty = true;
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
        st.dirty |= prune(upstream, pins, &names, capacity);
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
        st.dirty = true;
    }

    /// Writes the file if the pins changed since it was last written (a
    /// no-op in memory). The state lock is not held while writing.
    ///
    /// # Errors
    /// [`PinsError`]; the pins stay marked changed, so the next flush tries again.
    pub fn flush(&self) -> Result<(), PinsError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let _one = self.writer.lock().expect("pins writer lock");
        let bytes = {
            let mut st = self.state();
            if !st.dirty {
                return Ok(());
            }
            st.dirty = false;
            file::encode(&st.table)
        };
        let failed = if bytes.len() > limits::PINS_FILE_MAX_BYTES {
            metrics::counter!(crate::metrics::REFUSED, "limit" => "pins_file_bytes").increment(1);
            Err(PinsError::TooLarge { bytes: bytes.len() })
        } else {
            file::write_atomically(path, &bytes).map_err(|source| PinsError::Write {
                path: path.clone(),
                source,
            })
        };
        if failed.is_err() {
            self.state().dirty = true;
        }
        failed
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
    st.dirty = true;
    Vec::new()
}

/// `trust = "auto"`: a changed or new tool is served; say so.
fn log_auto(upstream: &str, tool: &str, pinned: Option<Digest>, now: Digest) {
    match pinned {
        Some(p) => tracing::warn!(
            upstream,
            tool = %printable(tool),
            "tool definition changed (pinned {}, now {}); serving it (trust = \"auto\") and pinning the new definition",
            p.short(),
            now.short()
        ),
        None => tracing::info!(upstream, tool = %printable(tool), digest = %now.short(),
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
mod tests;
