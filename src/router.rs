//! The aggregated catalog and call routing.
//!
//! Tools and prompts of every ready upstream are merged under exposed names
//! ([`names`]), in config order and then the upstream's own order, so lists
//! are deterministic. Resource URIs pass unchanged; `resources/read` goes to
//! the upstream that listed the URI (or whose template's literal prefix it
//! matches). The merged view is rebuilt only when an upstream's catalog or
//! the upstream set changed. A reload swaps the upstream set
//! ([`Router::set_upstreams`]); routes hold the upstream itself, so a call
//! routed just before the swap still reaches the upstream it was routed to.
//!
//! The downstream face reaches upstreams only through here: the handles
//! of the set, the routes, and the few upstream types re-exported below.

pub mod names;
mod scoped;
mod task_routing;
mod view;
/// What the downstream face names of the upstreams, which it reaches only
/// through the router (it names nothing of `upstream` itself,
/// `tests/it/structure.rs`): the handle routes hand out, its status, an
/// approval's error, the list generations streams follow, and the test of
/// an answer that asks its caller for input.
pub use crate::upstream::{ApproveError, ListGens, Status, Upstream};
pub use task_routing::TaskCaller;
pub use view::{Described, Policy};

use crate::config::ToolNameRule;
use crate::protocol::{self, RpcError};
use crate::upstream::Catalog;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

/// The merged, namespaced view of every upstream's catalog.
#[derive(Default)]
pub struct Merged {
    snapshot: Vec<(Arc<Upstream>, Arc<Catalog>)>,
    /// `Tool` objects with exposed names.
    pub tools: Vec<Value>,
    tool_routes: HashMap<String, (Arc<Upstream>, String)>,
    /// Exposed names of the tools withheld by their pins (`trust = "pin"`):
    /// not in `tools` nor routed; a call is refused as the policy refuses.
    withheld: std::collections::HashSet<String>,
    /// `x-mcp-header` annotations of the tools that have any, by exposed name.
    tool_params: HashMap<String, Vec<crate::protocol::param_headers::ParamHeader>>,
    /// `Prompt` objects with exposed names.
    pub prompts: Vec<Value>,
    prompt_routes: HashMap<String, (Arc<Upstream>, String)>,
    /// `Resource` objects, unchanged.
    pub resources: Vec<Value>,
    resource_routes: HashMap<String, Arc<Upstream>>,
    /// `ResourceTemplate` objects, unchanged.
    pub templates: Vec<Value>,
    /// The upstream of each of `templates`, same order.
    template_owners: Vec<Arc<Upstream>>,
    template_routes: Vec<(String, Arc<Upstream>)>,
}

/// Routes downstream requests to upstreams.
pub struct Router {
    upstreams: RwLock<Arc<[Arc<Upstream>]>>,
    rule: ToolNameRule,
    separator: String,
    merged: Mutex<Arc<Merged>>,
    /// Set by [`Router::stop_holding`].
    stopping: tokio::sync::watch::Sender<bool>,
    /// Tasks handed to callers under gateway ids ([`crate::tasks`]).
    tasks: Arc<crate::tasks::Tasks>,
}

fn renamed(item: &Value, key: &str, exposed: &str) -> Value {
    let mut v = item.clone();
    if let Some(o) = v.as_object_mut() {
        o.insert(key.into(), exposed.into());
    }
    v
}

impl Router {
    /// A router over `upstreams` (in config order) of box `instance` (its
    /// task ids name it).
    pub fn new(
        upstreams: Vec<Arc<Upstream>>,
        rule: ToolNameRule,
        separator: String,
        instance: crate::instance::InstanceId,
    ) -> Self {
        Router {
            upstreams: RwLock::new(upstreams.into()),
            rule,
            separator,
            merged: Mutex::new(Arc::new(Merged::default())),
            stopping: tokio::sync::watch::Sender::new(false),
            tasks: Arc::new(
                crate::tasks::Tasks::new(crate::limits::TASKS_CAPACITY).with_instance(instance),
            ),
        }
    }

    /// The upstreams, in config order (a snapshot: a reload swaps the set,
    /// never edits it in place).
    pub fn upstreams(&self) -> Arc<[Arc<Upstream>]> {
        self.upstreams.read().expect("upstreams lock").clone()
    }

    /// A legacy downstream session ended: every upstream forgets the
    /// requests it relayed to that session (their answers can no longer come).
    pub fn forget_session(&self, session: &str) {
        for up in self.upstreams().iter() {
            up.forget_session(session);
        }
    }

    /// Replaces the upstream set (config order). Routing uses the new set
    /// from the next request on; the merged lists are rebuilt on next use.
    pub fn set_upstreams(&self, upstreams: Vec<Arc<Upstream>>) {
        *self.upstreams.write().expect("upstreams lock") = upstreams.into();
    }

    /// The upstream with [`Upstream::id`] `id`, if it is still in the set.
    pub fn by_id(&self, id: usize) -> Option<Arc<Upstream>> {
        self.upstreams().iter().find(|u| u.id == id).cloned()
    }

    fn expose_all(
        &self,
        kind: &str,
        up: &Arc<Upstream>,
        items: &[Value],
        out: &mut Vec<Value>,
        routes: &mut HashMap<String, (Arc<Upstream>, String)>,
    ) {
        for item in items {
            let Some(original) = item.get("name").and_then(Value::as_str) else {
                metrics::counter!(crate::metrics::CATALOG_DROPPED, "reason" => "invalid_name")
                    .increment(1);
                tracing::warn!(upstream = %up.name(), "{kind} without a name left out");
                continue;
            };
            let exposed = names::expose(self.rule, &up.config.prefix, &self.separator, original);
            if let Some((other, _)) = routes.get(&exposed) {
                metrics::counter!(crate::metrics::CATALOG_DROPPED, "reason" => "clash")
                    .increment(1);
                tracing::warn!(upstream = %up.name(), "{kind} {original:?} left out: exposed name {exposed:?} already taken by upstream {:?}", other.name());
                continue;
            }
            out.push(renamed(item, "name", &exposed));
            routes.insert(exposed, (up.clone(), original.to_string()));
        }
    }

    fn build(&self, snapshot: Vec<(Arc<Upstream>, Arc<Catalog>)>) -> Merged {
        use crate::protocol::param_headers::annotations;
        let mut m = Merged::default();
        for (up, cat) in &snapshot {
            // A tool withheld by its pin is not served (crate::pins).
            let mut withheld = std::collections::HashSet::with_capacity(cat.withheld.len());
            for w in &cat.withheld {
                let exposed = names::expose(self.rule, &up.config.prefix, &self.separator, &w.tool);
                m.withheld.insert(exposed);
                withheld.insert(w.tool.as_str());
            }
            // A tool whose x-mcp-header annotations break the rules is left
            // out (2026-07-28 transports-streamable-http.mdx §Schema
            // Extension: clients MUST exclude it).
            let valid: Vec<Value> = cat
                .tools
                .iter()
                .filter(|t| {
                    let name = t.get("name").and_then(Value::as_str).unwrap_or("");
                    !withheld.contains(name)
                })
                .filter(|t| match t.get("inputSchema").map(annotations) {
                    Some(Err(why)) => {
                        metrics::counter!(crate::metrics::CATALOG_DROPPED, "reason" => "invalid_x_mcp_header")
                            .increment(1);
                        tracing::warn!(upstream = %up.name(), tool = ?t.get("name"), "tool left out: {why}");
                        false
                    }
                    _ => true,
                })
                .cloned()
                .collect();
            self.expose_all("tool", up, &valid, &mut m.tools, &mut m.tool_routes);
            self.expose_all(
                "prompt",
                up,
                &cat.prompts,
                &mut m.prompts,
                &mut m.prompt_routes,
            );
            for r in &cat.resources {
                if let Some(uri) = r.get("uri").and_then(Value::as_str) {
                    if m.resource_routes.contains_key(uri) {
                        metrics::counter!(crate::metrics::CATALOG_DROPPED, "reason" => "clash")
                            .increment(1);
                        continue;
                    }
                    m.resource_routes.insert(uri.to_string(), up.clone());
                    m.resources.push(r.clone());
                }
            }
            for t in &cat.templates {
                if let Some(tpl) = t.get("uriTemplate").and_then(Value::as_str) {
                    let prefix = tpl.split('{').next().unwrap_or("").to_string();
                    m.template_routes.push((prefix, up.clone()));
                    m.templates.push(t.clone());
                    m.template_owners.push(up.clone());
                }
            }
        }
        for t in &m.tools {
            let (Some(name), Some(schema)) =
                (t.get("name").and_then(Value::as_str), t.get("inputSchema"))
            else {
                continue;
            };
            if let Ok(a) = annotations(schema) {
                if !a.is_empty() {
                    m.tool_params.insert(name.to_string(), a);
                }
            }
        }
        // Longest literal prefix wins when templates overlap.
        m.template_routes
            .sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        m.snapshot = snapshot;
        m
    }

    /// The upstream whose namespace `exposed` falls in, when it is not ready
    /// (so a call to a down upstream's tool gets an error naming it).
    fn owner_by_prefix(&self, exposed: &str) -> Option<Arc<Upstream>> {
        self.upstreams()
            .iter()
            .find(|u| {
                !u.config.prefix.is_empty()
                    && exposed.starts_with(&format!("{}{}", u.config.prefix, self.separator))
            })
            .cloned()
    }

    fn unknown(&self, kind: &str, name: &str) -> RpcError {
        if let Some(up) = self.owner_by_prefix(name) {
            if up.negotiated().is_none() {
                // Names the upstream, its state and the next retry time.
                return up.unavailable().to_rpc();
            }
        }
        RpcError::new(protocol::INVALID_PARAMS, format!("Unknown {kind}: {name}"))
    }

    fn route_uri(&self, m: &Merged, uri: &str) -> Option<Arc<Upstream>> {
        if let Some(u) = m.resource_routes.get(uri) {
            return Some(u.clone());
        }
        if let Some((_, u)) = m
            .template_routes
            .iter()
            .find(|(p, _)| !p.is_empty() && uri.starts_with(p.as_str()))
        {
            return Some(u.clone());
        }
        // A single upstream serving resources takes every URI.
        let all = self.upstreams();
        let mut with = all
            .iter()
            .filter(|u| u.negotiated().is_some_and(|n| n.has("resources")));
        match (with.next(), with.next()) {
            (Some(u), None) => Some(u.clone()),
            _ => None,
        }
    }

    /// Waits for the first connect attempt of every upstream still making
    /// it (each bounded by [`Upstream::first_attempt`]; all released at once
    /// by [`Router::stop_holding`]). True if it waited (counted in
    /// `mcp_edge_requests_held_total`).
    async fn first_attempts(&self) -> bool {
        let all = self.upstreams();
        let now = tokio::time::Instant::now();
        if !all.iter().any(|u| u.first_attempt_pending(now)) {
            return false;
        }
        let mut stopping = self.stopping.subscribe();
        if *stopping.borrow() {
            return false;
        }
        metrics::counter!(crate::metrics::REQUESTS_HELD).increment(1);
        let all_settled = async {
            for up in all.iter() {
                up.first_attempt().await;
            }
        };
        tokio::select! {
            _ = all_settled => {}
            _ = stopping.wait_for(|s| *s) => {}
        }
        true
    }

    /// The upstream serving resource `uri` (listed, or matched by a
    /// template, or the only one serving resources) when `policy` lets its
    /// client see that upstream's resources, after waiting for upstreams
    /// still making their first attempt if it is not found at once.
    pub async fn resource_owner(&self, uri: &str, policy: &Policy) -> Option<Arc<Upstream>> {
        {
            let m = self.merged();
            if let Some(up) = self.route_uri(&m, uri) {
                return self.resources_visible(&m, &up, policy).then_some(up);
            }
        }
        if !self.first_attempts().await {
            return None;
        }
        let m = self.merged();
        self.route_uri(&m, uri)
            .filter(|up| self.resources_visible(&m, up, policy))
    }

    /// Ends every wait for first attempts now, and stops new ones: the
    /// gateway is shutting down, and a held request should be answered
    /// with what there is rather than keep the shutdown waiting.
    pub fn stop_holding(&self) {
        self.stopping.send_replace(true);
    }
}

/// Exposed name → (upstream, its own name).
type Routes = HashMap<String, (Arc<Upstream>, String)>;

/// Where a routed request goes.
struct Target {
    up: Arc<Upstream>,
    /// The upstream's own name of the tool or prompt (`params.name`, or
    /// `params.ref.name` of a completion), when it was exposed under another.
    original: Option<String>,
}

/// A request [`Router::target`] could not route.
struct Miss {
    error: RpcError,
    /// The name or URI is not (yet) in the merged catalog, as opposed to
    /// malformed params: worth another look once connecting upstreams settle.
    unknown: bool,
    /// It exists, but is withheld: by the caller's policy (`"policy"`) or
    /// by its pin (`"withheld"`); the `limit` label it is counted under.
    refused: Option<&'static str>,
}
