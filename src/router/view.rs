//! What one client sees of the merged catalog and where its requests go:
//! [`Router::dispatch_as`], its [`Policy`] (the `allow`/`deny` globs of its
//! `[[client]]`) applied to the lists and to the routes, a routed request
//! forwarded to its upstream.

use super::{names, Merged, Miss, Router, Routes, Target, TaskCaller};
use crate::protocol::param_headers::ParamHeader;
use crate::protocol::{self, Payload, RpcError};
use crate::relay::Relay;
use crate::share::{Claimant, Shares};
use crate::upstream::scopes::CapSet;
use crate::upstream::{CallEra, Upstream};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;
use wildmatch::WildMatch;

impl Router {
    /// The merged view, rebuilt if the upstream set or any upstream catalog
    /// changed since last time.
    pub fn merged(&self) -> Arc<Merged> {
        let ups = self.upstreams();
        let mut g = self.merged.lock().expect("merged lock");
        let same = g.snapshot.len() == ups.len()
            && (g.snapshot.iter().zip(ups.iter()))
                .all(|(a, u)| Arc::ptr_eq(&a.0, u) && Arc::ptr_eq(&a.1, &u.catalog()));
        if !same {
            let current = ups.iter().map(|u| (u.clone(), u.catalog())).collect();
            *g = Arc::new(self.build(current));
        }
        g.clone()
    }

    /// Handles one downstream request that is routed to upstreams (everything
    /// but the lifecycle methods, which the endpoint answers itself), as
    /// `policy` lets its client see the catalog: lists show only what it
    /// may use, and anything else gets the answer a name or URI that does
    /// not exist gets (counted as `mcp_edge_refused_total{limit="policy"}`).
    /// Tools withheld by their pins are treated the same way for every
    /// client (`limit="withheld"`).
    ///
    /// Lists, and names or URIs not found, first wait for upstreams still
    /// making their first connect attempt ([`Upstream::first_attempt`]): a
    /// client that connects right after a start or reload gets the tools of
    /// every upstream that can connect, not `Unknown tool`.
    /// Errors: -32601 unknown method, -32602 unknown tool/prompt/resource or
    /// bad params, gateway-local -31000… for upstream failures, or the
    /// upstream's own error unchanged.
    pub async fn dispatch(
        &self,
        method: &str,
        params: Option<Value>,
        relay: Option<Relay>,
        policy: &Policy,
    ) -> Result<Payload, RpcError> {
        let nobody = Claimant::NOBODY.shares;
        (self.dispatch_as(method, params, relay, policy, TaskCaller::NONE, nobody)).await
    }

    /// [`Router::dispatch`] for a `caller` of the tasks extension
    /// ([`task_routing`]): `tasks/*` routed by gateway task id, task results of
    /// `tools/call` adopted; a call routed to an upstream takes one of its
    /// in-flight places within the caller's client's share under `shares`
    /// ([`Upstream::call_as`]).
    pub async fn dispatch_as(
        &self,
        method: &str,
        params: Option<Value>,
        relay: Option<Relay>,
        policy: &Policy,
        caller: TaskCaller,
        shares: &Shares,
    ) -> Result<Payload, RpcError> {
        let cursor = params.as_ref().and_then(|p| p.get("cursor"));
        if method.ends_with("/list") && cursor.is_some_and(|c| !c.is_null()) {
            return Err(RpcError::new(
                protocol::INVALID_PARAMS,
                "Invalid cursor: mcp-edge returns complete lists",
            ));
        }
        match method {
            "logging/setLevel" => return Ok(json!({}).into()),
            "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
                return Ok(self.listed(method, params.as_ref(), policy).await.into());
            }
            "tasks/get" | "tasks/update" | "tasks/cancel" => {
                return (self.task_request(method, params, caller).await).map(Payload::from)
            }
            "tools/call"
            | "prompts/get"
            | "resources/read"
            | "completion/complete" => {}
            // Legacy sessions' are answered by the endpoint (the gateway keeps
            // them); 2026-07-28 removed both in favour of subscriptions/listen.
            "resources/subscribe" | "resources/unsubscribe" => {
                return Err(RpcError::new(
                    protocol::METHOD_NOT_FOUND,
                    format!("Method not found: {method} (2026-07-28: use subscriptions/listen with resourceSubscriptions)"),
                ))
            }
            _ => {
                return Err(RpcError::new(
                    protocol::METHOD_NOT_FOUND,
                    format!("Method not found: {method}"),
                ))
            }
        }
        let mut m = self.merged();
        let target = match self.target(&m, method, params.as_ref(), policy) {
            Err(miss) if miss.unknown && self.first_attempts().await => {
                m = self.merged();
                self.target(&m, method, params.as_ref(), policy)
            }
            found => found,
        }
        .map_err(|miss| {
            if let Some(limit) = miss.refused {
                crate::metrics::refused(limit);
            }
            miss.error
        })?;
        if let (Some(original), "tools/call") = (&target.original, method) {
            let exposed = params.as_ref().and_then(|p| p["name"].as_str());
            let names = (original.as_str(), exposed.unwrap_or(""));
            (self.may_call(&m, &target.up, names, params.as_ref())).await?;
        }
        let mut params = params;
        if let (Some(original), Some(p)) = (target.original, params.as_mut()) {
            if method == "completion/complete" {
                p["ref"]["name"] = Value::String(original);
            } else {
                p["name"] = Value::String(original);
            }
        }
        let who = Claimant {
            shares,
            owner: caller.owner,
        };
        self.forward(target.up, method, params, relay, caller, who)
            .await
    }

    /// A `*/list` request's answer, once upstreams still making their
    /// first attempt have made it: the merged list as `policy` and the
    /// capabilities declared in `params` let the caller see it.
    async fn listed(&self, method: &str, params: Option<&Value>, policy: &Policy) -> Value {
        self.first_attempts().await;
        let m = self.merged();
        let hidden = match method {
            // Boxed: listings may run inside it (see `may_call`).
            "tools/list" => Box::pin(self.hidden_tools(&m, CapSet::of(params))).await,
            _ => HashSet::new(),
        };
        self.list(&m, method, policy, &hidden)
    }

    async fn forward(
        &self,
        up: Arc<Upstream>,
        method: &str,
        params: Option<Value>,
        relay: Option<Relay>,
        caller: TaskCaller,
        who: Claimant<'_>,
    ) -> Result<Payload, RpcError> {
        let era = match caller.modern {
            true => CallEra::Own,
            false => CallEra::Legacy,
        };
        if method != "tools/call" {
            return (up.call_as(method, params, relay, who, era).await).map_err(|e| e.to_rpc());
        }
        // A caller that did not declare the tasks extension, calling an
        // upstream that offers it, may be sent again with it declared
        // ([`task_routing`]); otherwise the call goes straight, and only a
        // task it answers with is adopted.
        if !caller.declared && up.offers_tasks() {
            return self
                .call_with_tasks(up, params, relay, (caller, who), era)
                .await;
        }
        let t0 = tokio::time::Instant::now();
        let result = up.call_as(method, params, relay, who, era).await;
        let result = result.map_err(|e| e.to_rpc())?;
        match result.result_type() == Some(protocol::ResultType::Task) {
            false => Ok(result),
            true => self.adopt_task(up, result, caller, t0).await,
        }
    }

    /// Where a `tools/call`, `prompts/get`, `resources/*` or
    /// `completion/complete` request goes, found in `m`; a name or URI
    /// outside `policy` is missed as if it did not exist.
    fn target(
        &self,
        m: &Merged,
        method: &str,
        params: Option<&Value>,
        policy: &Policy,
    ) -> Result<Target, Miss> {
        let bad = |message: &str| Miss {
            error: RpcError::new(protocol::INVALID_PARAMS, message),
            unknown: false,
            refused: None,
        };
        let uri_target = |uri: &str| self.uri_target(m, uri, policy);
        let name_target = |kind: &str, routes: &Routes, name: &str| {
            let withheld = (kind == "tool").then_some(&m.withheld);
            self.name_target(kind, routes, withheld, name, policy)
        };
        let Some(params) = params else {
            return Err(bad(if method.starts_with("resources/") {
                "params.uri must be a string"
            } else {
                "missing params"
            }));
        };
        match method {
            "tools/call" | "prompts/get" => {
                let name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("params.name must be a string"))?;
                if name.len() > names::LONGEST {
                    return Err(Miss {
                        error: RpcError::new(protocol::INVALID_PARAMS, format!(
                            "Invalid params: params.name is {} bytes, longer than any exposed name ({} at most)",
                            name.len(), names::LONGEST)),
                        unknown: false,
                        refused: Some("name_length"),
                    });
                }
                if method == "tools/call" {
                    name_target("tool", &m.tool_routes, name)
                } else {
                    name_target("prompt", &m.prompt_routes, name)
                }
            }
            "completion/complete" => {
                let r = params.get("ref").unwrap_or(&Value::Null);
                match r.get("type").and_then(Value::as_str) {
                    Some("ref/prompt") => {
                        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                        name_target("prompt", &m.prompt_routes, name)
                    }
                    Some("ref/resource") => {
                        uri_target(r.get("uri").and_then(Value::as_str).unwrap_or(""))
                    }
                    _ => Err(bad("params.ref must be a ref/prompt or ref/resource")),
                }
            }
            _ => uri_target(
                params
                    .get("uri")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("params.uri must be a string"))?,
            ),
        }
    }

    /// Whether `policy` lets its client see `up`'s resources: it admits the
    /// upstream's namespace (`<prefix><separator>`, when the prefix is not
    /// empty) or one of its exposed tools or prompts.
    pub(super) fn resources_visible(
        &self,
        m: &Merged,
        up: &Arc<Upstream>,
        policy: &Policy,
    ) -> bool {
        if policy.is_open() {
            return true;
        }
        let prefix = &up.config.prefix;
        if !prefix.is_empty() && policy.allows(&format!("{prefix}{}", self.separator)) {
            return true;
        }
        let mut names = m.tool_routes.iter().chain(m.prompt_routes.iter());
        names.any(|(name, (u, _))| Arc::ptr_eq(u, up) && policy.allows(name))
    }

    /// Whether `policy` lets its client know of `up` at all (named in
    /// `instructions`): the rule of [`Router::resources_visible`] on the
    /// current catalog.
    pub fn shows(&self, up: &Arc<Upstream>, policy: &Policy) -> bool {
        policy.is_open() || self.resources_visible(&self.merged(), up, policy)
    }

    /// The answer to a `*/list` request as `policy` lets its client see it,
    /// without the `hidden` tools (not shown to its capabilities,
    /// [`Router::hidden_tools`]).
    pub(super) fn list(
        &self,
        m: &Merged,
        method: &str,
        policy: &Policy,
        hidden: &HashSet<String>,
    ) -> Value {
        let named = |items: &[Value]| -> Vec<Value> {
            let allowed = |v: &&Value| {
                let name = v.get("name").and_then(Value::as_str).unwrap_or("");
                (policy.is_open() || policy.allows(name)) && !hidden.contains(name)
            };
            items.iter().filter(allowed).cloned().collect()
        };
        // Visibility per upstream, decided once per list.
        let mut seen: Vec<(usize, bool)> = Vec::new();
        let mut visible = |up: &Arc<Upstream>| match seen.iter().find(|(id, _)| *id == up.id) {
            Some((_, v)) => *v,
            None => {
                let v = self.resources_visible(m, up, policy);
                seen.push((up.id, v));
                v
            }
        };
        match method {
            "tools/list" => json!({"tools": named(&m.tools)}),
            "prompts/list" => json!({"prompts": named(&m.prompts)}),
            "resources/list" => {
                let shown = m.resources.iter().filter(|r| {
                    let uri = r.get("uri").and_then(Value::as_str).unwrap_or("");
                    m.resource_routes.get(uri).is_some_and(&mut visible)
                });
                json!({"resources": shown.cloned().collect::<Vec<_>>()})
            }
            _ => {
                let pairs = m.templates.iter().zip(&m.template_owners);
                let shown: Vec<Value> = pairs
                    .filter(|(_, up)| visible(up))
                    .map(|(t, _)| t.clone())
                    .collect();
                json!({"resourceTemplates": shown})
            }
        }
    }

    /// The upstream of resource `uri`, when `policy` shows it.
    pub(super) fn uri_target(
        &self,
        m: &Merged,
        uri: &str,
        policy: &Policy,
    ) -> Result<Target, Miss> {
        let found = self.route_uri(m, uri);
        let hidden = (found.as_ref()).is_some_and(|up| !self.resources_visible(m, up, policy));
        match found {
            Some(up) if !hidden => Ok(Target { up, original: None }),
            _ => Err(Miss {
                error: RpcError::new(
                    protocol::INVALID_PARAMS,
                    format!("Resource not found: {uri}"),
                )
                .with_data(json!({"uri": uri})),
                unknown: !hidden,
                refused: hidden.then_some("policy"),
            }),
        }
    }

    /// The `x-mcp-header` annotations of exposed tool `name` as a client
    /// under `policy` sees it (empty when it has none, is unknown, or the
    /// policy withholds it: then the call is answered as an unknown tool):
    /// a modern downstream request must send the matching `Mcp-Param-*`
    /// headers.
    pub fn param_headers(&self, name: &str, policy: &Policy) -> Vec<ParamHeader> {
        if !policy.allows(name) {
            return Vec::new();
        }
        (self.merged().tool_params.get(name).cloned()).unwrap_or_default()
    }

    /// The upstream and own name of exposed `name` in `routes`, when
    /// `policy` allows it and it is not `withheld` by its pin; otherwise the
    /// answer of a name that does not exist.
    pub(super) fn name_target(
        &self,
        kind: &str,
        routes: &Routes,
        withheld: Option<&HashSet<String>>,
        name: &str,
        policy: &Policy,
    ) -> Result<Target, Miss> {
        let refused = if !policy.allows(name) {
            Some("policy")
        } else if !routes.contains_key(name) && withheld.is_some_and(|w| w.contains(name)) {
            Some("withheld")
        } else {
            None
        };
        if refused.is_some() {
            return Err(Miss {
                error: RpcError::new(protocol::INVALID_PARAMS, format!("Unknown {kind}: {name}")),
                unknown: false,
                refused,
            });
        }
        routes
            .get(name)
            .map(|(up, original)| Target {
                up: up.clone(),
                original: Some(original.clone()),
            })
            .ok_or_else(|| Miss {
                error: self.unknown(kind, name),
                unknown: true,
                refused: None,
            })
    }

    /// Where a `tools/call`, `prompts/get` or `resources/read` would go for
    /// a client under `policy`, found in the catalog as it is (no waiting):
    /// for the audit log.
    pub fn describe(&self, method: &str, params: Option<&Value>, policy: &Policy) -> Described {
        match self.target(&self.merged(), method, params, policy) {
            Ok(t) => Described {
                upstream: Some(t.up.name().to_string()),
                original: t.original.or_else(|| {
                    let uri = params.and_then(|p| p.get("uri")).and_then(Value::as_str);
                    uri.map(String::from)
                }),
                refused: false,
            },
            Err(miss) => Described {
                upstream: None,
                original: None,
                refused: miss.refused.is_some(),
            },
        }
    }
}

/// What [`Router::describe`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Described {
    /// The upstream's name; `None` when it does not route.
    pub upstream: Option<String>,
    /// The name (or URI) at the upstream.
    pub original: Option<String>,
    /// It exists, but the client's policy (or the tool's pin) withholds it.
    pub refused: bool,
}

/// The policy that withholds nothing ([`Policy::open`]).
static OPEN: Policy = Policy {
    allow: None,
    deny: Vec::new(),
};

/// A client's `allow`/`deny` globs over exposed tool and prompt names
/// (deny wins), built by [`crate::access`] from its `[[client]]`: what it
/// sees of the catalog and may call. A resource belongs to the upstream
/// that listed it, and a client sees an upstream's resources when its
/// policy admits the upstream's namespace (`<prefix><separator>` against
/// the globs, so `files__*` admits it) or any of the upstream's tools or
/// prompts ([`Router::shows`]).
pub struct Policy {
    /// `None`: everything.
    allow: Option<Vec<WildMatch>>,
    deny: Vec<WildMatch>,
}

impl Policy {
    /// The policy of a caller no `[[client]]` restricts: everything.
    pub fn open() -> &'static Policy {
        &OPEN
    }

    /// The policy of `allow` (absent = everything) and `deny`.
    pub fn new(allow: Option<&[String]>, deny: &[String]) -> Policy {
        let globs = |v: &[String]| v.iter().map(|g| WildMatch::new(g)).collect::<Vec<_>>();
        Policy {
            allow: allow.map(globs),
            deny: globs(deny),
        }
    }

    /// True when nothing is withheld (no `allow`, no `deny`): lists pass
    /// unfiltered.
    pub fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }

    /// Whether an exposed tool or prompt name (or an upstream namespace
    /// `<prefix><separator>`) may be used: matched by `allow` (or no
    /// `allow`), and by no `deny`.
    pub fn allows(&self, name: &str) -> bool {
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|a| a.iter().any(|g| g.matches(name)));
        allowed && !self.deny.iter().any(|g| g.matches(name))
    }
}
