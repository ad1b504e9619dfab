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
//! ([`Steward::reconcile_subscriptions`]), on every table change and every
//! health tick.
//!
//! Only upstreams that declare `resources.subscribe` are asked. A legacy
//! (2025-era) one gets `resources/subscribe` and `resources/unsubscribe`
//! per URI; a modern one (2026-07-28) has no such methods and reports
//! updates only on a `subscriptions/listen` stream, so mcp-edge's own
//! listen to it carries the wanted URIs as `resourceSubscriptions` and is
//! opened anew whenever that set changes ([`Upstream::relisten`]; 2026-07-28
//! patterns-subscriptions.mdx). Its `notifications/resources/updated` mark
//! the subscription table as a legacy upstream's do. A dual-era upstream
//! whose legacy session declares `resources.subscribe` is asked there, as
//! a legacy upstream (its updates come on that session's GET stream); one
//! whose modern discovery alone declares it, by its listen stream.

use super::era::{CallEra, UpstreamEra};
use super::{CallError, Steward, Upstream};
use crate::protocol::{self, Payload, RpcError};
use crate::share::Claimant;
use serde_json::json;
use serde_json::Value;

impl Upstream {
    /// [`Upstream::call`] in a dual-era upstream's legacy session when it
    /// has one (its own era otherwise).
    pub(crate) async fn call_legacy(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, CallError> {
        let call = self.call_as(method, params, None, Claimant::NOBODY, CallEra::Legacy);
        call.await.map(Payload::into_value)
    }

    /// `Ok` when this upstream can report updates of its resources:
    /// connected, `capabilities.resources.subscribe` true in either era it
    /// speaks. Errors (-32602, naming the upstream) otherwise.
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
        let legacy = neg.legacy.as_ref().map(|l| &l.capabilities);
        if !declares_subscribe(&neg.capabilities) && !legacy.is_some_and(declares_subscribe) {
            return refuse("it does not declare resources.subscribe");
        }
        Ok(())
    }

    /// Makes sure the current connection reports `uri`: sends
    /// `resources/subscribe` unless it was already sent on this connection.
    /// Serialized with [`Steward::reconcile_subscriptions`] (one lock per
    /// upstream), so the two never both ask, nor race an unsubscribe.
    /// Errors: the upstream's own, or the call's (timeout, not connected).
    pub async fn ensure_subscribed(&self, uri: &str) -> Result<(), CallError> {
        let _one_at_a_time = self.subs_lock.lock().await;
        if self.is_modern() {
            return self.relisten().await;
        }
        self.subscribe_locked(uri).await
    }

    /// Whether updates are asked for on the listen stream: a modern
    /// upstream, unless it is dual-era and its legacy session can be asked.
    fn is_modern(&self) -> bool {
        self.negotiated().is_some_and(|n| {
            let legacy = n.legacy.as_ref().map(|l| &l.capabilities);
            n.era == UpstreamEra::Modern && !legacy.is_some_and(declares_subscribe)
        })
    }

    /// A modern upstream: when the wanted URIs differ from what its listen
    /// asked for, a listen with the new set replaces it. Called under
    /// `subs_lock`.
    async fn relisten(&self) -> Result<(), CallError> {
        let wanted = self.subscriptions.uris_of(self.id);
        let same = {
            let asked = self.subscribed.lock().expect("subscribed lock");
            asked.len() == wanted.len() && wanted.iter().all(|u| asked.contains(u))
        };
        if same {
            return Ok(());
        }
        let (conn, _, generation) = self.owned.current().ok_or_else(|| self.unavailable())?;
        if let Err(e) = conn.relisten(wanted.clone()).await {
            return Err(self.name_send_error(e, generation));
        }
        if self.owned.live_generation() == Some(generation) {
            *self.subscribed.lock().expect("subscribed lock") = wanted.into_iter().collect();
        }
        Ok(())
    }

    async fn subscribe_locked(&self, uri: &str) -> Result<(), CallError> {
        if self.is_subscribed(uri) {
            return Ok(());
        }
        let conn = self.owned.live_generation();
        self.call_legacy("resources/subscribe", Some(json!({ "uri": uri })))
            .await?;
        // Recorded only for the connection that was asked: a reconnect in
        // between started from nothing, and the owner asks it again.
        if conn.is_some() && self.owned.live_generation() == conn {
            self.subscribed
                .lock()
                .expect("subscribed lock")
                .insert(uri.into());
        }
        Ok(())
    }

    fn is_subscribed(&self, uri: &str) -> bool {
        self.subscribed
            .lock()
            .expect("subscribed lock")
            .contains(uri)
    }

    /// A new connection — or a legacy HTTP session re-initialized after a
    /// 404 — was asked for nothing yet; the owner is woken to ask again.
    pub(super) fn forget_subscribed(&self) {
        self.subscribed.lock().expect("subscribed lock").clear();
        self.subscriptions
            .wanted
            .send_modify(|g| *g = g.wrapping_add(1));
    }
}

/// Whether `capabilities` declare `resources.subscribe`.
fn declares_subscribe(capabilities: &serde_json::Value) -> bool {
    let subscribe = capabilities
        .get("resources")
        .and_then(|r| r.get("subscribe"));
    subscribe.and_then(|s| s.as_bool()).unwrap_or(false)
}

impl Steward {
    /// Asks for every wanted URI not asked for on this connection, and
    /// unsubscribes every URI no client wants any more (re-checked just
    /// before, under the same lock as [`Upstream::ensure_subscribed`]). Each
    /// call is bounded by `probe_timeout` and reported as progress, so the
    /// owner's monitor never looks wedged; failures are logged and tried
    /// again on the next change or health tick. An error answer to an
    /// unsubscribe (e.g. -32601) counts as done. A no-op for upstreams that
    /// cannot subscribe, and when a client's subscribe holds the lock for
    /// longer than `probe_timeout` (the next round catches up).
    pub(crate) async fn reconcile_subscriptions(&self) {
        let up = &**self.upstream();
        if up.can_subscribe().is_err() {
            return;
        }
        let Ok(_one_at_a_time) =
            tokio::time::timeout(up.config.probe_timeout, up.subs_lock.lock()).await
        else {
            return;
        };
        if up.is_modern() {
            if let Err(e) = up.relisten().await {
                tracing::info!(upstream = %up.name(), "subscriptions/listen with new resources failed: {}", crate::logline::printable(&e.to_string()));
            }
            self.progressed();
            return;
        }
        let bound = up.config.probe_timeout;
        let wanted = up.subscriptions.uris_of(up.id);
        let asked: Vec<Box<str>> = up
            .subscribed
            .lock()
            .expect("subscribed lock")
            .iter()
            .cloned()
            .collect();
        for uri in wanted.iter().filter(|u| !asked.contains(u)) {
            match tokio::time::timeout(bound, up.subscribe_locked(uri)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::info!(upstream = %up.name(), uri = %crate::logline::printable(&**uri), "resources/subscribe failed: {}", crate::logline::printable(&e.to_string()))
                }
                Err(_) => {
                    tracing::info!(upstream = %up.name(), uri = %crate::logline::printable(&**uri), "resources/subscribe: no answer within {bound:?}")
                }
            }
            self.progressed();
        }
        for uri in asked.iter() {
            if up.subscriptions.uris_of(up.id).contains(uri) {
                continue; // wanted again meanwhile
            }
            let call = up.call_legacy("resources/unsubscribe", Some(json!({ "uri": &**uri })));
            let done = match tokio::time::timeout(bound, call).await {
                Ok(Ok(_)) | Ok(Err(CallError::Rpc(_))) => true,
                Ok(Err(e)) => {
                    tracing::info!(upstream = %up.name(), uri = %crate::logline::printable(&**uri), "resources/unsubscribe failed: {}", crate::logline::printable(&e.to_string()));
                    false
                }
                Err(_) => false,
            };
            if done {
                up.subscribed.lock().expect("subscribed lock").remove(uri);
            }
            self.progressed();
        }
    }
}
