//! Resource subscriptions on the upstream side: asking an upstream to
//! report changes of the URIs some downstream client subscribed to
//! (`../shared/spec/2025-11-25/server/resources.mdx` §Subscriptions), once
//! per URI and connection however many clients want it, and telling it to
//! stop when the last one is gone.
//!
//! The wanted set is the subscription table's ([`crate::subscriptions`]);
//! what this connection was asked for is [`Upstream`]'s `subscribed` set,
//! emptied on every connect. A downstream `resources/subscribe` asks at
//! once ([`Upstream::ensure_subscribed`], so the upstream's refusal reaches
//! the client); everything else — the last client leaving, a reconnect that
//! must ask again — is settled by the owner task's monitor
//! ([`Upstream::reconcile_subscriptions`]), on every table change and every
//! health tick.
//!
//! Only legacy (2025-era) upstreams that declare `resources.subscribe` are
//! asked; a modern one (2026-07-28) reports updates only on a
//! `subscriptions/listen` stream, which mcp-edge does not yet open with
//! `resourceSubscriptions`, so a subscription routed to one is refused with
//! a clear error.

use super::{CallError, Upstream, UpstreamEra};
use crate::protocol::{self, RpcError};
use serde_json::json;

impl Upstream {
    /// `Ok` when this upstream can report updates of its resources:
    /// connected, legacy era, `capabilities.resources.subscribe` true.
    /// Errors (-32602, naming the upstream) otherwise.
    pub fn can_subscribe(&self) -> Result<(), RpcError> {
        let refuse = |why: &str| {
            Err(RpcError::new(
                protocol::INVALID_PARAMS,
                format!(
                    "upstream '{}' cannot report resource updates: {why}",
                    self.name()
                ),
            ))
        };
        let Some(neg) = self.negotiated() else {
            return refuse("it is not connected");
        };
        if neg.era == UpstreamEra::Modern {
            return refuse(
                "it speaks 2026-07-28, whose resource subscriptions mcp-edge does not relay yet",
            );
        }
        let subscribe = neg
            .capabilities
            .get("resources")
            .and_then(|r| r.get("subscribe"))
            .and_then(|s| s.as_bool())
            .unwrap_or(false);
        if !subscribe {
            return refuse("it does not declare resources.subscribe");
        }
        Ok(())
    }

    /// Makes sure the current connection reports `uri`: sends
    /// `resources/subscribe` unless it was already sent on this connection.
    /// Errors: the upstream's own, or the call's (timeout, not connected).
    pub async fn ensure_subscribed(&self, uri: &str) -> Result<(), CallError> {
        if self.is_subscribed(uri) {
            return Ok(());
        }
        self.call("resources/subscribe", Some(json!({ "uri": uri })))
            .await?;
        self.subscribed
            .lock()
            .expect("subscribed lock")
            .insert(uri.into());
        Ok(())
    }

    fn is_subscribed(&self, uri: &str) -> bool {
        self.subscribed
            .lock()
            .expect("subscribed lock")
            .contains(uri)
    }

    /// A new connection was asked for nothing yet.
    pub(crate) fn forget_subscribed(&self) {
        self.subscribed.lock().expect("subscribed lock").clear();
    }

    /// Asks for every wanted URI not asked for on this connection, and
    /// unsubscribes every URI no client wants any more. Failures are logged
    /// and tried again on the next call (the owner calls this on every
    /// table change and health tick). A no-op for upstreams that cannot
    /// subscribe.
    pub(crate) async fn reconcile_subscriptions(&self) {
        if self.can_subscribe().is_err() {
            return;
        }
        let wanted = self.resources.uris_of(self.id);
        let asked: Vec<Box<str>> = self
            .subscribed
            .lock()
            .expect("subscribed lock")
            .iter()
            .cloned()
            .collect();
        for uri in wanted.iter().filter(|u| !asked.contains(u)) {
            if let Err(e) = self.ensure_subscribed(uri).await {
                tracing::info!(upstream = %self.name(), %uri, "resources/subscribe failed: {e}");
            }
        }
        for uri in asked.iter().filter(|u| !wanted.contains(u)) {
            match self
                .call("resources/unsubscribe", Some(json!({ "uri": &**uri })))
                .await
            {
                Ok(_) => {
                    self.subscribed.lock().expect("subscribed lock").remove(uri);
                }
                Err(e) => {
                    tracing::info!(upstream = %self.name(), %uri, "resources/unsubscribe failed: {e}")
                }
            }
        }
    }
}
