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

pub mod names;

use crate::config::ToolNameRule;
use crate::protocol::{self, RpcError};
use crate::upstream::relay::Relay;
use crate::upstream::{Catalog, Upstream};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

/// The merged, namespaced view of every upstream's catalog.
#[derive(Default)]
pub struct Merged {
    snapshot: Vec<(Arc<Upstream>, Arc<Catalog>)>,
    /// `Tool` objects with exposed names.
    pub tools: Vec<Value>,
    tool_routes: HashMap<String, (Arc<Upstream>, String)>,
    /// `Prompt` objects with exposed names.
    pub prompts: Vec<Value>,
    prompt_routes: HashMap<String, (Arc<Upstream>, String)>,
    /// `Resource` objects, unchanged.
    pub resources: Vec<Value>,
    resource_routes: HashMap<String, Arc<Upstream>>,
    /// `ResourceTemplate` objects, unchanged.
    pub templates: Vec<Value>,
    template_routes: Vec<(String, Arc<Upstream>)>,
}

/// Routes downstream requests to upstreams.
pub struct Router {
    upstreams: RwLock<Arc<[Arc<Upstream>]>>,
    rule: ToolNameRule,
    separator: String,
    merged: Mutex<Arc<Merged>>,
}

fn renamed(item: &Value, key: &str, exposed: &str) -> Value {
    let mut v = item.clone();
    if let Some(o) = v.as_object_mut() {
        o.insert(key.into(), exposed.into());
    }
    v
}

impl Router {
    /// A router over `upstreams` (in config order).
    pub fn new(upstreams: Vec<Arc<Upstream>>, rule: ToolNameRule, separator: String) -> Self {
        Router {
            upstreams: RwLock::new(upstreams.into()),
            rule,
            separator,
            merged: Mutex::new(Arc::new(Merged::default())),
        }
    }

    /// The upstreams, in config order (a snapshot: a reload swaps the set,
    /// never edits it in place).
    pub fn upstreams(&self) -> Arc<[Arc<Upstream>]> {
        self.upstreams.read().expect("upstreams lock").clone()
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

    /// The merged view, rebuilt if the upstream set or any upstream catalog
    /// changed since last time.
    pub fn merged(&self) -> Arc<Merged> {
        let current: Vec<(Arc<Upstream>, Arc<Catalog>)> = self
            .upstreams()
            .iter()
            .map(|u| (u.clone(), u.catalog()))
            .collect();
        let mut g = self.merged.lock().expect("merged lock");
        let same = g.snapshot.len() == current.len()
            && g.snapshot
                .iter()
                .zip(&current)
                .all(|(a, b)| Arc::ptr_eq(&a.0, &b.0) && Arc::ptr_eq(&a.1, &b.1));
        if !same {
            *g = Arc::new(self.build(current));
        }
        g.clone()
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
        let mut m = Merged::default();
        for (up, cat) in &snapshot {
            self.expose_all("tool", up, &cat.tools, &mut m.tools, &mut m.tool_routes);
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

    async fn forward(
        &self,
        up: Arc<Upstream>,
        method: &str,
        params: Option<Value>,
        relay: Option<Relay>,
    ) -> Result<Value, RpcError> {
        up.call_relayed(method, params, relay)
            .await
            .map_err(|e| e.to_rpc())
    }

    /// Handles one downstream request that is routed to upstreams (everything
    /// but the lifecycle methods, which the endpoint answers itself).
    /// Errors: -32601 unknown method, -32602 unknown tool/prompt/resource or
    /// bad params, gateway-local -31000… for upstream failures, or the
    /// upstream's own error unchanged.
    pub async fn dispatch(
        &self,
        method: &str,
        params: Option<Value>,
        relay: Option<Relay>,
    ) -> Result<Value, RpcError> {
        let cursor = params.as_ref().and_then(|p| p.get("cursor"));
        if method.ends_with("/list") && cursor.is_some_and(|c| !c.is_null()) {
            return Err(RpcError::new(
                protocol::INVALID_PARAMS,
                "Invalid cursor: mcp-edge returns complete lists",
            ));
        }
        let m = self.merged();
        match method {
            "tools/list" => Ok(json!({"tools": m.tools})),
            "prompts/list" => Ok(json!({"prompts": m.prompts})),
            "resources/list" => Ok(json!({"resources": m.resources})),
            "resources/templates/list" => Ok(json!({"resourceTemplates": m.templates})),
            "tools/call" | "prompts/get" => {
                let (kind, routes) = if method == "tools/call" {
                    ("tool", &m.tool_routes)
                } else {
                    ("prompt", &m.prompt_routes)
                };
                let mut params = params
                    .ok_or_else(|| RpcError::new(protocol::INVALID_PARAMS, "missing params"))?;
                let name = params.get("name").and_then(Value::as_str).ok_or_else(|| {
                    RpcError::new(protocol::INVALID_PARAMS, "params.name must be a string")
                })?;
                let (up, original) = routes
                    .get(name)
                    .cloned()
                    .ok_or_else(|| self.unknown(kind, name))?;
                params["name"] = Value::String(original);
                self.forward(up, method, Some(params), relay).await
            }
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                let uri = params
                    .as_ref()
                    .and_then(|p| p.get("uri"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        RpcError::new(protocol::INVALID_PARAMS, "params.uri must be a string")
                    })?;
                let up = self.route_uri(&m, uri).ok_or_else(|| {
                    RpcError::new(
                        protocol::INVALID_PARAMS,
                        format!("Resource not found: {uri}"),
                    )
                    .with_data(json!({"uri": uri}))
                })?;
                self.forward(up, method, params, relay).await
            }
            "completion/complete" => {
                let mut params = params
                    .ok_or_else(|| RpcError::new(protocol::INVALID_PARAMS, "missing params"))?;
                let r = params.get("ref").cloned().unwrap_or(Value::Null);
                let up = match r.get("type").and_then(Value::as_str) {
                    Some("ref/prompt") => {
                        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                        let (up, original) = m
                            .prompt_routes
                            .get(name)
                            .cloned()
                            .ok_or_else(|| self.unknown("prompt", name))?;
                        params["ref"]["name"] = Value::String(original);
                        up
                    }
                    Some("ref/resource") => {
                        let uri = r.get("uri").and_then(Value::as_str).unwrap_or("");
                        self.route_uri(&m, uri).ok_or_else(|| {
                            RpcError::new(
                                protocol::INVALID_PARAMS,
                                format!("Resource not found: {uri}"),
                            )
                        })?
                    }
                    _ => {
                        return Err(RpcError::new(
                            protocol::INVALID_PARAMS,
                            "params.ref must be a ref/prompt or ref/resource",
                        ))
                    }
                };
                self.forward(up, method, Some(params), relay).await
            }
            "logging/setLevel" => Ok(json!({})),
            _ => Err(RpcError::new(
                protocol::METHOD_NOT_FOUND,
                format!("Method not found: {method}"),
            )),
        }
    }
}
