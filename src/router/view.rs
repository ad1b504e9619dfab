//! What one client sees of the merged catalog: its [`Policy`] applied to
//! the lists and to the routes (see [`crate::access`] for the rules).

use super::{Merged, Miss, Router, Routes, Target};
use crate::access::Policy;
use crate::protocol::{self, RpcError};
use crate::upstream::Upstream;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;

impl Router {
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

    /// The answer to a `*/list` request as `policy` lets its client see it.
    pub(super) fn list(&self, m: &Merged, method: &str, policy: &Policy) -> Value {
        let named = |items: &[Value]| -> Vec<Value> {
            let allowed = |v: &&Value| {
                let name = v.get("name").and_then(Value::as_str).unwrap_or("");
                policy.is_open() || policy.allows(name)
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
