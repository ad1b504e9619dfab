//! The supervisor: one owner task per enabled upstream. With the composition
//! root ([`crate::gateway`], whose tasks use [`OwnedTask`]) it is the only
//! place that spawns long-lived tasks.
//!
//! Each owner task ([`owner`]) runs connect, health probing and reconnect as
//! one loop, so a reconnect can never start a second monitor. It holds its
//! upstream's [`Steward`], the owner's side made together with the handle:
//! one per upstream, so one owner. The task is
//! held by an [`OwnerHandle`] whose drop aborts it; every sleep also listens
//! for shutdown. The retry policy ([`backoff`]) and its persistence across
//! restarts ([`persist`]) live here and nowhere else.

pub use crate::backoff;
pub(crate) mod owner;
pub mod persist;

use crate::upstream::{Steward, Upstream};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Owns one upstream's task: dropping it aborts the task.
pub struct OwnerHandle {
    /// The upstream this task serves.
    pub upstream: Arc<Upstream>,
    /// Asks this owner (only) to stop in order.
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl OwnerHandle {
    /// Asks the owner to stop (stdio child: EOF, then TERM/KILL; HTTP: DELETE)
    /// and waits up to `grace`; past it the task is aborted.
    async fn stop(mut self, grace: Duration) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.as_mut() {
            if tokio::time::timeout(grace, t).await.is_ok() {
                self.task = None;
            }
        }
    }
}

impl Drop for OwnerHandle {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Every owner task, keyed by upstream name (at most one per name: a
/// replacement is started only after its predecessor stopped).
pub struct Supervisor {
    owners: Vec<OwnerHandle>,
    persist: Option<Arc<persist::Persist>>,
}

impl Supervisor {
    /// Starts one owner task per enabled upstream, each given its
    /// upstream's owner side (made with the handle, [`Upstream::new`]);
    /// `persist` (from `server.state_directory`) carries backoff across
    /// restarts.
    pub fn start(owners: Vec<Steward>, persist: Option<Arc<persist::Persist>>) -> Supervisor {
        let mut s = Supervisor {
            owners: Vec::with_capacity(owners.len()),
            persist,
        };
        for steward in owners {
            s.start_one(steward);
        }
        s
    }

    /// Starts the owner of `steward`'s upstream (a task only if it is
    /// enabled; a disabled upstream's owner side is dropped, as nothing
    /// will change it). The caller must have stopped any owner of the same
    /// name first ([`Supervisor::stop_one`]); a second one is refused with
    /// a log line.
    pub fn start_one(&mut self, steward: Steward) {
        let up = steward.upstream().clone();
        if self.owners.iter().any(|o| o.upstream.name() == up.name()) {
            tracing::error!(upstream = %up.name(), "an owner task already runs for this name; not starting a second");
            return;
        }
        let (stop, stop_rx) = watch::channel(false);
        // The supervisor is one of the two places that start long-lived tasks.
        #[allow(clippy::disallowed_methods)]
        let task = (up.config.enabled)
            .then(|| tokio::spawn(owner::run(steward, stop_rx, self.persist.clone())));
        self.owners.push(OwnerHandle {
            upstream: up,
            stop,
            task,
        });
    }

    /// Stops the owner of upstream `name` in order, waiting up to `grace`
    /// (then aborting it), and forgets its persisted backoff (a changed or
    /// removed upstream starts over). False if there was none.
    pub async fn stop_one(&mut self, name: &str, grace: Duration) -> bool {
        let Some(i) = self.owners.iter().position(|o| o.upstream.name() == name) else {
            return false;
        };
        let owner = self.owners.remove(i);
        owner.stop(grace).await;
        if let Some(p) = &self.persist {
            p.put(name, None);
        }
        true
    }

    /// Number of owner tasks running (one per enabled upstream, never more).
    pub fn live_tasks(&self) -> usize {
        self.owners
            .iter()
            .filter(|o| o.task.as_ref().is_some_and(|t| !t.is_finished()))
            .count()
    }

    /// Asks every owner to stop (closing stdio children, ending HTTP sessions)
    /// at once and waits up to `grace` for each.
    pub async fn shutdown(mut self, grace: Duration) {
        for o in &self.owners {
            let _ = o.stop.send(true);
        }
        for o in self.owners.drain(..) {
            o.stop(grace).await;
        }
    }
}

/// A long-lived task owned by its handle: dropping the handle aborts it.
pub struct OwnedTask(JoinHandle<()>);

impl OwnedTask {
    /// Spawns `fut` (the one sanctioned way to start a long-lived task outside an upstream).
    #[allow(clippy::disallowed_methods)] // the sanctioned spawn, used by the gateway root
    pub fn spawn(fut: impl Future<Output = ()> + Send + 'static) -> OwnedTask {
        OwnedTask(tokio::spawn(fut))
    }
}

impl Drop for OwnedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
