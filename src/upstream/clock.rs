//! The clocks read about an upstream (the owner writes them:
//! [`super::Steward::transition`], `progressed`, `attempt_started`): when
//! the current state was entered and last made progress (the watchdog's
//! [`Upstream::wedged`]), when it was last Ready (`required_grace`,
//! [`Upstream::required_down`]), and when its first connect attempt
//! started ([`Upstream::first_attempt`]).

use super::{Status, Upstream};
use std::time::Duration;

impl Upstream {
    /// How long a request may wait for the first attempt: from its start
    /// (or, until the owner task starts it, from creation — a reload starts
    /// a changed upstream only after the old one drained and stopped),
    /// `startup_timeout` for the handshake + `call_timeout` for the first
    /// catalog request + [`crate::limits::FIRST_ATTEMPT_MARGIN`].
    fn first_attempt_deadline(&self) -> tokio::time::Instant {
        let from = self.owned.first_started().unwrap_or(self.created);
        from + self.config.startup_timeout
            + self.config.call_timeout
            + crate::limits::FIRST_ATTEMPT_MARGIN
    }

    /// True while a request should wait for this upstream's first connect
    /// attempt: enabled, `Connecting`, no second attempt started yet, and
    /// the wait's bound ([`Upstream::first_attempt`]) not yet passed at `now`.
    pub fn first_attempt_pending(&self, now: tokio::time::Instant) -> bool {
        (self.owned).status_is(|s| matches!(s, Status::Connecting { .. }))
            && self.attempts() <= 1
            && now < self.first_attempt_deadline()
    }

    /// Resolves once the first connect attempt settled (Ready with its
    /// catalog loaded, Backoff, Parked, …), or at its bound:
    /// `startup_timeout` + `call_timeout` + 1 s after the attempt started.
    /// At once when it settled long ago. A request that needs the merged
    /// catalog waits on this, so a client connecting right after a
    /// (re)start sees every upstream that can connect, not an empty list.
    pub async fn first_attempt(&self) {
        let mut rx = self.owned.subscribe();
        // The predicate reads the status it is given: borrowing the watch
        // again inside `wait_for` would take its lock twice.
        let settled = |s: &Status| !matches!(s, Status::Connecting { .. }) || self.attempts() > 1;
        loop {
            // The bound moves once the owner task starts the attempt.
            let deadline = self.first_attempt_deadline();
            if tokio::time::timeout_at(deadline, rx.wait_for(settled))
                .await
                .is_ok()
                || deadline == self.first_attempt_deadline()
            {
                return;
            }
        }
    }

    /// `Some(reason)` when the owner task looks wedged: a connect attempt, a
    /// backoff wait, or (while Ready) a probe round that has outlived its own
    /// deadline by `margin`. Deadlines: Connecting `startup_timeout`; Backoff
    /// its retry time; Ready `health_interval` + the longer of
    /// `probe_timeout` and `call_timeout` (a catalog refresh) since the last
    /// progress report.
    pub fn wedged(&self, now: tokio::time::Instant, margin: Duration) -> Option<String> {
        let (since, progress) = self.owned.entered_and_progress();
        let status = self.status();
        let c = &self.config;
        let late = match &status {
            Status::Connecting { .. } => {
                now.saturating_duration_since(since) > c.startup_timeout + margin
            }
            Status::Backoff { until, .. } => now.saturating_duration_since(*until) > margin,
            Status::Ready { .. } => {
                now.saturating_duration_since(progress)
                    > c.health_interval + c.probe_timeout.max(c.call_timeout) + margin
            }
            _ => false,
        };
        late.then(|| {
            format!(
                "upstream '{}' stuck in {} (no progress for {:?})",
                self.name(),
                status.name(),
                now.saturating_duration_since(progress.max(since))
            )
        })
    }

    /// `Some(reason)` when this upstream is `required` and has been away from
    /// Ready for longer than `grace` (since start, or since it was last Ready).
    pub fn required_down(&self, now: tokio::time::Instant, grace: Duration) -> Option<String> {
        if !self.config.required || !self.config.enabled {
            return None;
        }
        let status = self.status();
        if status.is_ready() {
            return None;
        }
        let last_ready = self.owned.last_ready();
        let away = now.saturating_duration_since(last_ready);
        (away > grace).then(|| {
            format!(
                "required upstream '{}' not ready for {}s (grace {}s): {}",
                self.name(),
                away.as_secs(),
                grace.as_secs(),
                status.describe(now)
            )
        })
    }
}
