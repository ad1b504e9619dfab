//! Catalogs per capability set. A 2026-07-28 request carries its client
//! capabilities in `_meta` (`../shared/spec/2026-07-28/index.mdx` §_meta),
//! and a server may answer `tools/list` by them: a tool that runs only as a
//! task listed only to callers that declare the tasks extension, one that
//! asks the client things only to callers that can answer (SEP-2575,
//! 2026-07-28 versioning.mdx §Protocol Version Negotiation; ext-tasks
//! §Capability Negotiation). Each caller should see — and call — what its
//! own capabilities would get directly.
//!
//! - The catalog is listed declaring the broadest set mcp-edge serves
//!   ([`CapSet::BROADEST`]: every client capability it relays, and the tasks
//!   extension, whose tasks it can follow for any caller).
//! - A modern upstream's tools are listed once more declaring nothing. If
//!   the names differ, the catalog is *scoped* ([`super::Catalog::scoped`]);
//!   otherwise (most servers) nothing more is ever asked.
//! - For a scoped catalog, a caller that declared another set sees only the
//!   tools a listing with its own set shows, and an `Unknown tool` for the
//!   rest. The listing is made on its first request, and kept as a bitmap
//!   over the catalog's tools ([`Visible`]) in a fixed table of
//!   `limits::UPSTREAM_CAPABILITY_SESSIONS` sets per upstream, emptied when
//!   the catalog is listed anew. When the table is full, a new set gets
//!   the broadest catalog (counted, `limit="capability_catalogs"`); so
//!   does a set whose listing fails, until `health_interval` has passed
//!   (logged).
//!
//! A tool its set's listing shows but the broadest does not is not served;
//! prompts and resources are listed once, with the broadest set.

pub use super::catalog::CapSet;
use super::catalog::{list_all, tool_name, Budget, Catalog};
use super::Upstream;
use crate::limits::UPSTREAM_CAPABILITY_SESSIONS;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// Which of a catalog's tools one set sees: a bit per tool, in the
/// catalog's order.
#[derive(Debug)]
pub struct Visible(Box<[u64]>);

impl Visible {
    /// The tools of `catalog` named in `names`.
    fn of(catalog: &Catalog, names: &[Value]) -> Visible {
        let listed: std::collections::HashSet<&str> = names.iter().filter_map(tool_name).collect();
        let mut bits = vec![0u64; catalog.tools.len().div_ceil(64)].into_boxed_slice();
        for (i, t) in catalog.tools.iter().enumerate() {
            if tool_name(t).is_some_and(|n| listed.contains(n)) {
                bits[i / 64] |= 1 << (i % 64);
            }
        }
        Visible(bits)
    }

    /// Whether the catalog's tool `index` is shown.
    pub fn shows(&self, index: usize) -> bool {
        self.0
            .get(index / 64)
            .is_some_and(|w| w & (1 << (index % 64)) != 0)
    }
}

/// One upstream's table of the sets listed for its current catalog.
#[derive(Default)]
pub(super) struct Scopes {
    table: Mutex<Table>,
    /// Held while a set is listed: concurrent first requests of one set
    /// list it once.
    listing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Table {
    /// The listing the sets belong to ([`Catalog::listing`]; a newer one
    /// empties the table, an approval's copy of the catalog does not).
    of: u64,
    /// Per set: what it sees, or (`None`) when its listing failed, until
    /// when the broadest catalog is shown instead of asking again.
    sets: heapless::Vec<(CapSet, Entry), UPSTREAM_CAPABILITY_SESSIONS>,
}

#[derive(Clone)]
enum Entry {
    Listed(Arc<Visible>),
    Failed(Instant),
}

/// What the table knows of a set.
enum Found {
    Listed(Arc<Visible>),
    /// Shown the broadest catalog (its listing failed a moment ago, or
    /// the table is full).
    Broadest,
    /// To be listed.
    Missing,
}

impl Scopes {
    fn find(&self, catalog: &Catalog, set: CapSet, now: Instant) -> Found {
        let mut t = self.table.lock().expect("scopes lock");
        if catalog.listing > t.of {
            *t = Table {
                of: catalog.listing,
                sets: heapless::Vec::new(),
            };
        }
        let current = catalog.listing == t.of;
        match t.sets.iter().find(|(s, _)| *s == set).map(|(_, e)| e) {
            Some(Entry::Listed(v)) if current => Found::Listed(v.clone()),
            Some(Entry::Failed(until)) if current && now < *until => Found::Broadest,
            Some(_) => Found::Missing,
            None if current && t.sets.is_full() => {
                crate::metrics::refused("capability_catalogs");
                Found::Broadest
            }
            None => Found::Missing,
        }
    }

    /// Records what `set` sees of `catalog` (nothing for an older
    /// catalog's listing: used for its request only).
    fn keep(&self, catalog: &Catalog, set: CapSet, entry: Entry) {
        let mut t = self.table.lock().expect("scopes lock");
        if catalog.listing != t.of {
            return;
        }
        match t.sets.iter_mut().find(|(s, _)| *s == set) {
            Some((_, e)) => *e = entry,
            None => {
                let _ = t.sets.push((set, entry)); // full: checked by `find`
            }
        }
    }
}

impl Upstream {
    /// Which tools of `catalog` (this upstream's) a caller that declared
    /// `set` sees; `None`: every one (an unscoped catalog, the broadest
    /// set, a full table, a listing that failed within the last
    /// `health_interval`).
    pub async fn visible_tools(&self, catalog: &Catalog, set: CapSet) -> Option<Arc<Visible>> {
        if !catalog.scoped || set == CapSet::BROADEST {
            return None;
        }
        let found = || self.scopes.find(catalog, set, Instant::now());
        match found() {
            Found::Listed(v) => return Some(v),
            Found::Broadest => return None,
            Found::Missing => {}
        }
        let _one = self.scopes.listing.lock().await;
        match found() {
            Found::Listed(v) => return Some(v),
            Found::Broadest => return None,
            Found::Missing => {}
        }
        let mut budget = Budget {
            bytes_left: self.config.max_catalog_bytes,
            max_entries: self.config.max_catalog_entries,
        };
        let listed = list_all(self, "tools/list", "tools", set, &mut budget).await;
        let Some(names) = listed else {
            tracing::info!(upstream = %self.name(), "a caller's capability set could not be listed: shown every tool until the next try");
            let until = Instant::now() + self.config.health_interval;
            self.scopes.keep(catalog, set, Entry::Failed(until));
            return None;
        };
        let v = Arc::new(Visible::of(catalog, &names));
        self.scopes.keep(catalog, set, Entry::Listed(v.clone()));
        Some(v)
    }

    /// Whether a caller that declared `set` may call tool `original` (the
    /// upstream's own name): shown by its set's listing.
    pub async fn serves_tool(&self, catalog: &Catalog, original: &str, set: CapSet) -> bool {
        let Some(visible) = self.visible_tools(catalog, set).await else {
            return true;
        };
        let index = catalog
            .tools
            .iter()
            .position(|t| tool_name(t) == Some(original));
        index.is_some_and(|i| visible.shows(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_set_is_read_from_meta_and_declared_again_the_same() {
        let p = json!({"_meta": {"io.modelcontextprotocol/clientCapabilities":
            {"sampling": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}}});
        let set = CapSet::of(Some(&p));
        assert_ne!(set, CapSet::NONE);
        assert_ne!(set, CapSet::BROADEST);
        assert_eq!(CapSet::of(Some(&set.list_params(None))), set);
        assert_eq!(CapSet::of(None), CapSet::NONE);
        let b = CapSet::BROADEST.list_params(Some("c2"));
        assert_eq!(CapSet::of(Some(&b)), CapSet::BROADEST);
        assert_eq!(b["cursor"], "c2");
    }

    #[test]
    fn visible_marks_the_listed_tools_of_the_catalog() {
        let names = |n: &[&str]| -> Vec<Value> { n.iter().map(|n| json!({"name": n})).collect() };
        let catalog = Catalog {
            tools: (0..70).map(|i| json!({"name": format!("t{i}")})).collect(),
            ..Default::default()
        };
        let v = Visible::of(&catalog, &names(&["t0", "t65", "elsewhere"]));
        assert!(v.shows(0) && v.shows(65));
        assert!(!v.shows(1) && !v.shows(64) && !v.shows(70));
        assert!(super::super::catalog::same_names(
            &names(&["a", "b"]),
            &names(&["b", "a"])
        ));
        assert!(!super::super::catalog::same_names(
            &names(&["a"]),
            &names(&["a", "b"])
        ));
    }
}
