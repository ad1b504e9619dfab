//! The owner task's side of the handle: installing and dropping the live
//! connection (by generation), loss reports from calls, and the retry
//! windows; all in [`Shared`](super::Shared) under one lock, or on the loss
//! `watch`.

use super::{Conn, Link, Live, Loss, Negotiated, Upstream};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl Upstream {
    /// Makes `conn` the live connection (the owner task, after the
    /// handshake) and returns its generation: one more than the previous
    /// connection's, never reused, so a loss report names exactly one
    /// connection ([`Loss::conn`]).
    pub(crate) fn install(&self, conn: Arc<Conn>, negotiated: Negotiated) -> u64 {
        let mut shared = self.shared.write().expect("shared lock");
        let link = &mut shared.link;
        link.generation += 1;
        let generation = link.generation;
        link.live = Some(Live {
            conn,
            negotiated: Arc::new(negotiated),
            generation,
        });
        generation
    }

    /// Drops the live connection (the owner task, when it ended) and empties
    /// the catalog.
    pub(crate) fn uninstall(&self) {
        self.shared.write().expect("shared lock").link.live = None;
        self.clear_catalog();
    }

    fn with_link<T>(&self, f: impl FnOnce(&Link) -> T) -> T {
        f(&self.shared.read().expect("shared lock").link)
    }

    /// The live connection, what its handshake learnt, and its generation.
    pub(super) fn current(&self) -> Option<(Arc<Conn>, Arc<Negotiated>, u64)> {
        self.with_link(|l| {
            l.live
                .as_ref()
                .map(|l| (l.conn.clone(), l.negotiated.clone(), l.generation))
        })
    }

    /// Generation of the live connection ([`Upstream::install`]), if connected.
    pub(crate) fn live_generation(&self) -> Option<u64> {
        self.with_link(|l| l.live.as_ref().map(|l| l.generation))
    }

    /// What the handshake learnt, while connected.
    pub fn negotiated(&self) -> Option<Arc<Negotiated>> {
        self.with_link(|l| l.live.as_ref().map(|l| l.negotiated.clone()))
    }

    /// Waits until traffic reports that the connection of generation `conn`
    /// failed; reports about other (older) connections are ignored, and one
    /// made before the wait began is seen at once.
    pub(crate) async fn loss_of(&self, conn: u64) -> Loss {
        let mut rx = self.signals.loss.subscribe();
        let found = rx
            .wait_for(|l| l.as_ref().is_some_and(|l| l.conn == conn))
            .await
            .ok()
            .and_then(|l| l.clone());
        match found {
            Some(loss) => loss,
            // The sender lives as long as `self`: not reached.
            None => std::future::pending().await,
        }
    }

    /// A call reports that its connection failed. A report about an older
    /// connection than the last one reported never replaces it, so a late
    /// report cannot hide the live connection's loss from the owner.
    pub(super) fn lose(&self, loss: Loss) {
        self.signals.loss.send_if_modified(|last| {
            if last.as_ref().is_some_and(|l| l.conn > loss.conn) {
                return false;
            }
            *last = Some(loss);
            true
        });
    }

    /// Sets the Retry-After floor for calls (capped by `retry_after_cap`).
    pub(crate) fn set_retry_floor(&self, after: Duration) -> Duration {
        let after = after.min(self.config.retry_after_cap);
        self.shared.write().expect("shared lock").retry_floor = Some(Instant::now() + after);
        after
    }

    /// Time left in the Retry-After window, if one is open.
    pub(super) fn retry_window(&self) -> Option<Duration> {
        let floor = self.shared.read().expect("shared lock").retry_floor?;
        let left = floor.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// The owner task entered a backoff window whose un-jittered end is
    /// `at` (a `connect_on_demand` call may wake it from then on).
    pub(crate) fn set_earliest_retry(&self, at: Instant) {
        self.shared.write().expect("shared lock").earliest_retry = Some(at);
    }
}
