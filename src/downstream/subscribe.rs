//! Downstream resource subscriptions: `resources/subscribe` and
//! `resources/unsubscribe` of legacy sessions
//! (`../shared/spec/2025-11-25/server/resources.mdx` §Subscriptions), kept
//! in the fixed table of [`crate::subscriptions`] instead of being passed
//! through, so that two clients subscribing to one URI make one upstream
//! subscription, one client leaving does not unsubscribe the other, and the
//! upstream's `notifications/resources/updated` reaches exactly the
//! sessions that asked (on their GET stream).

use super::app::App;
use crate::protocol::{self, RpcError};
use crate::router::Policy;
use crate::subscriptions::{SubscribeError, Subscriber};
use serde_json::{json, Value};

impl App {
    /// Answers `resources/subscribe` / `resources/unsubscribe` for `who`.
    ///
    /// Subscribe: the URI must route to an upstream that `policy` shows and
    /// that can report updates
    /// (else -32602 naming why); the table must have room (else -31006,
    /// counted as `mcp_edge_refused_total{limit="resource_subscriptions"}`);
    /// the upstream is asked at once unless it already reports the URI, and
    /// its refusal is returned unchanged (the subscription is then dropped).
    /// Unsubscribe always succeeds; the upstream is told by its owner task
    /// once no client wants the URI.
    pub async fn resource_subscription(
        &self,
        who: Subscriber,
        method: &str,
        params: Option<&Value>,
        policy: &Policy,
    ) -> Result<Value, RpcError> {
        let uri = params
            .and_then(|p| p.get("uri"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                RpcError::new(protocol::INVALID_PARAMS, "params.uri must be a string")
            })?;
        if method == "resources/unsubscribe" {
            self.subscriptions.unsubscribe(who, uri);
            return Ok(json!({}));
        }
        let up = self.subscribable(uri, policy).await?;
        let added = self.subscribe_in_table(who, up.id, uri)?;
        if let Err(e) = up.ensure_subscribed(uri).await {
            // Only what this request added is taken back.
            if added {
                self.subscriptions.unsubscribe(who, uri);
            }
            return Err(e.to_rpc());
        }
        Ok(json!({}))
    }

    /// The upstream serving `uri`, if `policy` lets its client see it and
    /// it can report updates of it. Errors: -32602 "Resource not found", or
    /// why it cannot.
    pub(crate) async fn subscribable(
        &self,
        uri: &str,
        policy: &Policy,
    ) -> Result<std::sync::Arc<crate::router::Upstream>, RpcError> {
        let up = self
            .router
            .resource_owner(uri, policy)
            .await
            .ok_or_else(|| {
                RpcError::new(
                    protocol::INVALID_PARAMS,
                    format!("Resource not found: {uri}"),
                )
                .with_data(json!({"uri": uri}))
            })?;
        up.can_subscribe()?;
        Ok(up)
    }

    /// Adds the table entry (true if added, false if `who` had it); when
    /// full, sessions expired but not yet swept are ended first (with
    /// their subscriptions) and it is tried again. Errors: -31006
    /// (full, or this client's share used up), -32602 (URI too long).
    pub(crate) fn subscribe_in_table(
        &self,
        who: Subscriber,
        upstream: usize,
        uri: &str,
    ) -> Result<bool, RpcError> {
        let mut r = self.subscriptions.subscribe(who, upstream, uri);
        if matches!(r, Err(SubscribeError::Full { .. })) && self.sessions.sweep() > 0 {
            r = self.subscriptions.subscribe(who, upstream, uri);
        }
        r.map_err(|e| {
            let code = match e {
                SubscribeError::UriTooLong { .. } => protocol::INVALID_PARAMS,
                _ => {
                    crate::metrics::refused("resource_subscriptions");
                    protocol::SUBSCRIPTIONS_FULL
                }
            };
            RpcError::new(code, format!("cannot subscribe to {uri}: {e}"))
        })
    }
}
