//! The upstream's side of the tool pins ([`crate::pins`]): every catalog
//! the owner task installs is reviewed against the pins, and an operator's
//! approval puts withheld tools back into service. Both replace the catalog
//! whole under its lock, so an approval and a refresh never undo each
//! other; the pins file is written after the lock is released.

use super::{Catalog, Upstream};
use crate::logline::printable;
use crate::pins::{self, Withheld};
use std::collections::HashSet;
use std::sync::Arc;

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

impl Upstream {
    /// Installs a freshly listed catalog (the owner task), its tools
    /// reviewed against the pins: under `trust = "pin"` the changed and new
    /// ones are withheld; under `"auto"` changes are logged and pinned.
    /// Clients are told of the kinds that changed (withheld tools included).
    pub(crate) fn set_catalog(&self, mut c: Catalog) {
        if let Some(live) = self.shared.read().expect("shared lock").link.live.as_ref() {
            live.conn.set_param_headers(&c.tools);
        }
        // Hashed before the lock: the catalog can be a megabyte.
        let listed = pins::digest::listed(&c.tools);
        let (name, trust, capacity) = (
            self.name(),
            self.config.trust,
            self.config.max_catalog_entries,
        );
        {
            let mut cur = self.catalog.write().expect("catalog lock");
            c.withheld = self
                .pins
                .review(name, trust, capacity, &listed, !c.incomplete);
            log_newly_withheld(name, &cur.withheld, &c.withheld);
            self.publish(&mut cur, c);
        }
        if let Err(e) = self.pins.flush() {
            tracing::warn!(upstream = %name, "tool pins not saved: {e}");
        }
    }

    /// Empties the catalog (the connection ended: nothing is listed, nothing withheld).
    pub(crate) fn clear_catalog(&self) {
        let mut cur = self.catalog.write().expect("catalog lock");
        self.publish(&mut cur, Catalog::default());
    }

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

    /// How many tool definitions are pinned for this upstream.
    pub fn pinned(&self) -> usize {
        self.pins.pinned(self.name())
    }

    /// An operator approves withheld tool `tool` (`None`: every withheld
    /// tool): the definition listed now is pinned, the pins file written,
    /// and the tool served from the next request on (clients get
    /// `notifications/tools/list_changed`). Returns what was approved
    /// (empty when nothing was withheld and no tool was named).
    ///
    /// # Errors
    /// [`ApproveError::NotWithheld`] for a tool it does not withhold, or
    /// when it is not connected (nothing is listed, so nothing reviewed);
    /// [`ApproveError::NotSaved`] when the approval holds but the file
    /// could not be written.
    pub fn approve(&self, tool: Option<&str>) -> Result<Vec<Withheld>, ApproveError> {
        let name = self.name();
        let chosen = {
            let mut cur = self.catalog.write().expect("catalog lock");
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
                    state: (!status.is_ready())
                        .then(|| status.describe(tokio::time::Instant::now())),
                });
            }
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
        match self.pins.flush() {
            Ok(()) => Ok(chosen),
            Err(source) => Err(ApproveError::NotSaved {
                upstream: name.to_owned(),
                approved: chosen,
                source,
            }),
        }
    }
}

/// A warning for each tool withheld now that was not withheld (as it is)
/// before, with the command that approves it.
fn log_newly_withheld(upstream: &str, before: &[Withheld], now: &[Withheld]) {
    let seen: HashSet<(&str, pins::Digest)> =
        before.iter().map(|w| (w.tool.as_str(), w.now)).collect();
    for w in now
        .iter()
        .filter(|w| !seen.contains(&(w.tool.as_str(), w.now)))
    {
        let tool = printable(&w.tool);
        tracing::warn!(upstream, tool = %tool, reason = w.reason_name(),
            "tool withheld (trust = \"pin\"): {}; to serve it: mcp-edge tools approve {upstream} '{tool}'", w.detail());
    }
}
