//! One upstream's catalog: its tools, prompts, resources and resource
//! templates, as listed by the upstream (names not yet namespaced).
//!
//! Lists are followed page by page (`nextCursor`,
//! `../shared/spec/2025-11-25/schema.json` `PaginatedResult`) with a page cap
//! and a repeated-cursor check, so a looping upstream cannot hang a refresh.
//! Each kind keeps at most `max_catalog_entries` entries, and the whole
//! catalog at most `max_catalog_bytes` of serialized JSON; the rest are
//! dropped with a log line and `mcp_edge_catalog_dropped_total{reason}`.

use super::{Negotiated, Upstream, UpstreamEra};
use crate::limits;
use crate::protocol::raw::json_len;
use crate::protocol::{self, ClientCaps};
use serde_json::{json, Value};

/// Generation counters of the merged lists, one per kind a `list_changed`
/// notification names: `[tools, prompts, resources]` (resources and
/// resource templates together, as `notifications/resources/list_changed`
/// covers both: 2025-11-25 schema.json `ResourceListChangedNotification`).
/// Published on `App::catalog_gen`; streams compare what they saw last.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ListGens(pub [u64; 3]);

impl ListGens {
    /// The notification method of each kind, in order.
    pub const METHODS: [&'static str; 3] = [
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    ];

    /// Which kinds moved on since `seen`.
    pub fn changed_since(&self, seen: &ListGens) -> [bool; 3] {
        [0, 1, 2].map(|i| self.0[i] != seen.0[i])
    }

    /// Moves the kinds in `which` on by one.
    pub fn bump(&mut self, which: [bool; 3]) {
        for (g, on) in self.0.iter_mut().zip(which) {
            if on {
                *g = g.wrapping_add(1);
            }
        }
    }
}

/// The four lists of one upstream; each entry is the upstream's JSON, unchanged.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    /// `Tool` objects, as listed (withheld ones too: see `withheld`).
    pub tools: Vec<Value>,
    /// The tools of `tools` not served: their definitions differ from their
    /// pins under `trust = "pin"` ([`crate::pins`]). The router leaves them
    /// out of lists and answers calls to them as to unknown tools.
    pub withheld: Vec<crate::pins::Withheld>,
    /// `Prompt` objects.
    pub prompts: Vec<Value>,
    /// `Resource` objects.
    pub resources: Vec<Value>,
    /// `ResourceTemplate` objects.
    pub templates: Vec<Value>,
    /// A listing failed (transport error, timeout, error answer): its kind
    /// kept the previous entries, and the owner task lists again at the next
    /// health check.
    pub incomplete: bool,
    /// Its tools depend on the client capabilities a request declares
    /// (listed with the broadest set and with none, the names differ):
    /// each caller sees its own set's ([`super::scopes`]).
    pub scoped: bool,
    /// Which fetch listed it (increasing; kept by a copy made to withhold
    /// or approve a tool): what the sets listed for it belong to.
    pub listing: u64,
}

/// Numbers the fetches ([`Catalog::listing`]).
static LISTINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Catalog {
    /// Which list kinds (`[tools, prompts, resources]`, see [`ListGens`])
    /// differ between `self` and `other` (entries compared as JSON; the
    /// served tools change when a tool is withheld or approved too).
    pub fn differs(&self, other: &Catalog) -> [bool; 3] {
        let same_withheld = self.withheld.len() == other.withheld.len()
            && (self.withheld.iter().zip(&other.withheld)).all(|(a, b)| a.tool == b.tool);
        // A scoped catalog listed anew may show a caller's set other tools
        // even when the broadest listing is the same.
        let rescoped = (self.scoped || other.scoped) && self.listing != other.listing;
        [
            self.tools != other.tools || !same_withheld || rescoped,
            self.prompts != other.prompts,
            self.resources != other.resources || self.templates != other.templates,
        ]
    }

    /// Lists everything the upstream's capabilities announce. A failing list
    /// leaves that kind empty (logged) rather than failing the connection.
    pub async fn fetch(up: &Upstream, neg: &Negotiated) -> Catalog {
        let previous = up.catalog();
        let mut c = Catalog {
            listing: LISTINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            ..Catalog::default()
        };
        let mut budget = Budget {
            bytes_left: up.config.max_catalog_bytes,
            max_entries: up.config.max_catalog_entries,
        };
        // A listing that fails keeps what the last one found (none on a new
        // connection) and marks the catalog incomplete: the owner task lists
        // again on its next health tick instead of hiding the upstream's
        // tools until a reconnect.
        let mut kind = |got: Option<Vec<Value>>, before: &Vec<Value>| match got {
            Some(v) => v,
            None => {
                tracing::info!(upstream = %up.name(), "the catalog is incomplete: listing again at the next health check");
                c.incomplete = true;
                before.clone()
            }
        };
        let all = CapSet::BROADEST;
        let mut unscoped_unknown = false;
        if neg.has("tools") {
            let got = list_all(up, "tools/list", "tools", all, &mut budget).await;
            let listed = got.is_some();
            c.tools = kind(got, &previous.tools);
            // The built-in tools are the same for every caller.
            let builtin = matches!(up.config.transport, crate::config::Transport::Builtin);
            c.scoped = match (listed, neg.era) {
                (true, UpstreamEra::Modern) if builtin => false,
                (true, UpstreamEra::Modern) => match scoped(up, &c.tools).await {
                    Some(scoped) => scoped,
                    None => {
                        unscoped_unknown = true; // listed again at the next health check
                        previous.scoped
                    }
                },
                (false, _) => previous.scoped,
                (true, UpstreamEra::Legacy(_)) => false,
            };
        }
        if neg.has("prompts") {
            let got = list_all(up, "prompts/list", "prompts", all, &mut budget).await;
            c.prompts = kind(got, &previous.prompts);
        }
        if neg.has("resources") {
            let got = list_all(up, "resources/list", "resources", all, &mut budget).await;
            c.resources = kind(got, &previous.resources);
            let (method, key) = ("resources/templates/list", "resourceTemplates");
            let got = list_all(up, method, key, all, &mut budget).await;
            c.templates = kind(got, &previous.templates);
        }
        c.incomplete |= unscoped_unknown;
        c
    }

    /// Whether tool `name` runs only as a task (its `execution.taskSupport`
    /// is `"required"`: ext-tasks §Tool-Level Negotiation).
    pub fn task_required(&self, name: &str) -> bool {
        let tool = self
            .tools
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(name));
        let support = tool.and_then(|t| t.get("execution")?.get("taskSupport")?.as_str());
        support == Some("required")
    }

    /// How many of `tools` are served.
    pub fn served_tools(&self) -> usize {
        let withheld: std::collections::HashSet<&str> =
            self.withheld.iter().map(|w| w.tool.as_str()).collect();
        let served = |t: &&Value| {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            !withheld.contains(name)
        };
        self.tools.iter().filter(served).count()
    }
}

impl Upstream {
    /// Whether `method` with `params` calls a tool whose catalog entry
    /// says it runs only as a task.
    pub(super) fn task_required(&self, method: &str, params: &Option<Value>) -> bool {
        let name = params.as_ref().and_then(|p| p["name"].as_str());
        method == "tools/call" && name.is_some_and(|n| self.catalog().task_required(n))
    }
}

/// Whether a modern upstream's `tools` (listed with the broadest set)
/// depend on the capabilities declared: listed again declaring none, the
/// names differ ([`super::scopes`]); `None` when that listing failed.
async fn scoped(up: &Upstream, tools: &[Value]) -> Option<bool> {
    let mut budget = Budget {
        bytes_left: up.config.max_catalog_bytes,
        max_entries: up.config.max_catalog_entries,
    };
    let none = list_all(up, "tools/list", "tools", CapSet::NONE, &mut budget).await;
    none.map(|n| !same_names(tools, &n))
}

/// The client capabilities a listing depends on: those mcp-edge relays
/// ([`ClientCaps`]) and whether the tasks extension is declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapSet {
    caps: ClientCaps,
    tasks: bool,
}

impl CapSet {
    /// What mcp-edge lists its catalogs with.
    pub const BROADEST: CapSet = CapSet {
        caps: ClientCaps::RELAYED,
        tasks: true,
    };
    /// Nothing declared.
    pub const NONE: CapSet = CapSet {
        caps: ClientCaps::NONE,
        tasks: false,
    };

    /// The set a request declared in its `_meta` client capabilities (a
    /// legacy session's are put there at admission).
    pub fn of(params: Option<&Value>) -> CapSet {
        let caps =
            protocol::params_meta(params).and_then(|m| m.get(protocol::META_CLIENT_CAPABILITIES));
        CapSet {
            caps: ClientCaps::parse(caps),
            tasks: crate::tasks::in_capabilities(caps),
        }
    }

    /// The `_meta` of a listing that declares this set.
    fn meta(self) -> Value {
        let mut caps = self.caps.to_json();
        if self.tasks {
            caps["extensions"] = json!({ crate::tasks::EXTENSION: {} });
        }
        json!({ protocol::META_CLIENT_CAPABILITIES: caps })
    }

    /// The params of a listing (page `cursor`) that declares this set.
    pub(super) fn list_params(self, cursor: Option<&str>) -> Value {
        let mut p = json!({ "_meta": self.meta() });
        if let Some(c) = cursor {
            p["cursor"] = json!(c);
        }
        p
    }
}

/// The name of a `Tool` object.
pub(super) fn tool_name(t: &Value) -> Option<&str> {
    t.get("name").and_then(Value::as_str)
}

/// Whether two listings name the same tools (in any order).
pub(super) fn same_names(a: &[Value], b: &[Value]) -> bool {
    let names = |v: &[Value]| -> std::collections::BTreeSet<String> {
        v.iter().filter_map(tool_name).map(String::from).collect()
    };
    names(a) == names(b)
}

/// What is left of one upstream's catalog limits while it is being listed.
pub(super) struct Budget {
    pub(super) bytes_left: usize,
    pub(super) max_entries: usize,
}

/// Every page of `method`, each request declaring `set`; `None` when a
/// page request failed (limits only shorten the list).
pub(super) async fn list_all(
    up: &Upstream,
    method: &str,
    key: &str,
    set: CapSet,
    budget: &mut Budget,
) -> Option<Vec<Value>> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    // Every cursor seen so far, to catch a looping upstream; at most one per page.
    let mut seen: heapless::Vec<String, { limits::MAX_LIST_PAGES }> = heapless::Vec::new();
    for _ in 0..limits::MAX_LIST_PAGES {
        let params = set.list_params(cursor.as_deref());
        let page = match up.call(method, Some(params)).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(upstream = %up.name(), "{method} failed: {}", crate::logline::printable(&e.to_string()));
                return None;
            }
        };
        if let Some(items) = page.get(key).and_then(Value::as_array) {
            for item in items {
                if out.len() >= budget.max_entries {
                    metrics::counter!(crate::metrics::CATALOG_DROPPED, "reason" => "catalog_entries").increment(1);
                    crate::metrics::refused("catalog_entries");
                    tracing::warn!(upstream = %up.name(), "{method}: more than {} entries (max_catalog_entries); the rest are left out", budget.max_entries);
                    return Some(out);
                }
                let size = json_len(item);
                if size > budget.bytes_left {
                    metrics::counter!(crate::metrics::CATALOG_DROPPED, "reason" => "catalog_bytes")
                        .increment(1);
                    crate::metrics::refused("catalog_bytes");
                    tracing::warn!(upstream = %up.name(), "{method}: an entry of {size} bytes left out: catalog over max_catalog_bytes");
                    continue;
                }
                budget.bytes_left -= size;
                out.push(item.clone());
            }
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() => {
                if seen.iter().any(|s| s == next) {
                    tracing::warn!(upstream = %up.name(), "{method}: cursor {next:?} repeated; stopping");
                    return Some(out);
                }
                if seen.push(next.to_string()).is_err() {
                    break; // page cap reached
                }
                cursor = Some(next.to_string());
            }
            _ => return Some(out),
        }
    }
    tracing::warn!(upstream = %up.name(), "{method}: more than {} pages; stopping", limits::MAX_LIST_PAGES);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat(tools: &[&str], prompts: &[&str], templates: &[&str]) -> Catalog {
        let named = |xs: &[&str]| xs.iter().map(|n| json!({"name": n})).collect();
        Catalog {
            tools: named(tools),
            prompts: named(prompts),
            resources: Vec::new(),
            templates: templates
                .iter()
                .map(|t| json!({"uriTemplate": t}))
                .collect(),
            withheld: Vec::new(),
            incomplete: false,
            scoped: false,
            listing: 0,
        }
    }

    #[test]
    fn only_the_kinds_that_differ_move_on() {
        let a = cat(&["echo"], &["greet"], &[]);
        assert_eq!(
            a.differs(&a.clone()),
            [false; 3],
            "a same-list refresh announces nothing"
        );
        assert_eq!(
            a.differs(&cat(&["echo", "add"], &["greet"], &[])),
            [true, false, false]
        );
        assert_eq!(a.differs(&cat(&["echo"], &[], &[])), [false, true, false]);
        // Templates are announced as a resource list change.
        assert_eq!(
            a.differs(&cat(&["echo"], &["greet"], &["x://{id}"])),
            [false, false, true]
        );
        let mut g = ListGens::default();
        let seen = g;
        g.bump([false, true, false]);
        assert_eq!(g.changed_since(&seen), [false, true, false]);
        g.bump([true, true, true]);
        assert_eq!(g.changed_since(&seen), [true, true, true]);
        assert_eq!(g.changed_since(&g), [false; 3]);
        // Withholding a tool (or approving it) changes the served tools.
        let mut w = a.clone();
        w.withheld.push(crate::pins::Withheld {
            tool: "echo".into(),
            now: crate::pins::digest::of(&json!({"name": "echo"})),
            reason: crate::pins::Reason::New,
        });
        assert_eq!(a.differs(&w), [true, false, false]);
        assert_eq!((a.served_tools(), w.served_tools()), (1, 0));
    }
}
