//! Each caller's own tools of a scoped catalog ([`crate::upstream::scopes`]):
//! the exposed names its declared client capabilities would not be shown
//! directly are left out of its `tools/list` and refused as unknown when
//! called.

use super::{Merged, Router};
use crate::protocol::{self, RpcError};
use crate::upstream::scopes::CapSet;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

impl Router {
    /// The exposed tool names of `m` that a caller that declared `set`
    /// is not shown (empty unless some upstream's catalog is scoped).
    pub(super) async fn hidden_tools(&self, m: &Merged, set: CapSet) -> HashSet<String> {
        let mut hidden = HashSet::new();
        for (up, catalog) in m.snapshot.iter().filter(|(_, c)| c.scoped) {
            let Some(visible) = up.visible_tools(catalog, set).await else {
                continue;
            };
            let index: HashMap<&str, usize> = (catalog.tools.iter().enumerate())
                .filter_map(|(i, t)| Some((t.get("name")?.as_str()?, i)))
                .collect();
            let of_up = m.tool_routes.iter().filter(|(_, (u, _))| u.id == up.id);
            for (exposed, (_, original)) in of_up {
                let i = index.get(original.as_str());
                if !i.is_some_and(|&i| visible.shows(i)) {
                    hidden.insert(exposed.clone());
                }
            }
        }
        hidden
    }

    /// `Ok` when a caller that declared the capabilities in `params` may
    /// call tool `original` of `up` (exposed as `exposed`), as found in
    /// `m`; the error of an unknown tool otherwise (counted,
    /// `limit="capability_scope"`), as the upstream's own listing for that
    /// caller would not name it. Nothing is read of `params` unless the
    /// upstream's catalog is scoped.
    pub(super) async fn may_call(
        &self,
        m: &Merged,
        up: &crate::upstream::Upstream,
        (original, exposed): (&str, &str),
        params: Option<&Value>,
    ) -> Result<(), RpcError> {
        let catalog = m.snapshot.iter().find(|(u, _)| u.id == up.id);
        let Some((_, catalog)) = catalog.filter(|(_, c)| c.scoped) else {
            return Ok(());
        };
        // Boxed: a listing may run inside it, and every call's future
        // would otherwise hold room for one.
        let serves = Box::pin(up.serves_tool(catalog, original, CapSet::of(params)));
        match serves.await {
            true => Ok(()),
            false => {
                crate::metrics::refused("capability_scope");
                Err(RpcError::new(
                    protocol::INVALID_PARAMS,
                    format!("Unknown tool: {exposed}"),
                ))
            }
        }
    }
}
