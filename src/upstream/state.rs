//! The state of one upstream, published on a `watch` channel by its owner
//! task. Transitions are methods that check where they start from, so the
//! supervisor cannot assign a state out of order.

use super::era::UpstreamEra;
use std::time::Duration;
use tokio::time::Instant;

/// Where one upstream is in its life cycle.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// `enabled = false` in the config.
    Disabled,
    /// A connect attempt (spawn/dial plus era handshake) is running.
    Connecting {
        /// 1 for the first attempt after a success or start, then 2, 3, …
        attempt: u32,
    },
    /// Connected and serving calls.
    Ready {
        /// The era spoken with it.
        era: UpstreamEra,
        /// When it became ready.
        since: Instant,
    },
    /// Waiting before the next attempt.
    Backoff {
        /// Failed attempts in a row.
        attempt: u32,
        /// When the next attempt starts.
        until: Instant,
        /// Why the last attempt failed.
        last_error: String,
    },
    /// Refused our credentials (HTTP 401/403): no attempts until the
    /// credential file or the config changes, or an operator asks.
    AwaitingCredentials {
        /// When it was parked.
        since: Instant,
        /// What the upstream said.
        reason: String,
    },
    /// Shutting down.
    Stopping,
}

impl Status {
    /// The state before the owner task runs.
    pub fn initial(enabled: bool) -> Status {
        if enabled {
            Status::Connecting { attempt: 1 }
        } else {
            Status::Disabled
        }
    }

    /// Start attempt number `attempt` (from any state but `Disabled`/`Stopping`).
    pub fn connect(&self, attempt: u32) -> Status {
        debug_assert!(
            !matches!(self, Status::Disabled | Status::Stopping),
            "connect from {self:?}"
        );
        Status::Connecting { attempt }
    }

    /// The attempt succeeded (only from `Connecting`).
    pub fn ready(&self, era: UpstreamEra, now: Instant) -> Status {
        debug_assert!(
            matches!(self, Status::Connecting { .. } | Status::Ready { .. }),
            "ready from {self:?}"
        );
        Status::Ready { era, since: now }
    }

    /// An attempt, or a ready connection, failed: wait until `until`.
    pub fn back_off(&self, attempt: u32, until: Instant, last_error: String) -> Status {
        debug_assert!(
            !matches!(self, Status::Disabled | Status::Stopping),
            "back_off from {self:?}"
        );
        Status::Backoff {
            attempt,
            until,
            last_error,
        }
    }

    /// The upstream refused our credentials.
    pub fn park(&self, now: Instant, reason: String) -> Status {
        debug_assert!(
            !matches!(self, Status::Disabled | Status::Stopping),
            "park from {self:?}"
        );
        Status::AwaitingCredentials { since: now, reason }
    }

    /// Shutdown (from anywhere; `Disabled` stays `Disabled`).
    pub fn stop(&self) -> Status {
        match self {
            Status::Disabled => Status::Disabled,
            _ => Status::Stopping,
        }
    }

    /// Short name, the `state` label of `mcp_edge_upstream_state`.
    pub fn name(&self) -> &'static str {
        match self {
            Status::Disabled => "disabled",
            Status::Connecting { .. } => "connecting",
            Status::Ready { .. } => "ready",
            Status::Backoff { .. } => "backoff",
            Status::AwaitingCredentials { .. } => "awaiting_credentials",
            Status::Stopping => "stopping",
        }
    }

    /// Every state name, for publishing one gauge per state.
    pub const NAMES: [&'static str; 6] = [
        "disabled",
        "connecting",
        "ready",
        "backoff",
        "awaiting_credentials",
        "stopping",
    ];

    /// True when ready.
    pub fn is_ready(&self) -> bool {
        matches!(self, Status::Ready { .. })
    }

    /// Seconds until the next attempt (Backoff only).
    pub fn retry_in(&self, now: Instant) -> Option<Duration> {
        match self {
            Status::Backoff { until, .. } => Some(until.saturating_duration_since(now)),
            _ => None,
        }
    }

    /// A one-line description for error messages and `STATUS=`, e.g.
    /// `down after 3 failed attempt(s), next attempt in 8s: connection refused`.
    pub fn describe(&self, now: Instant) -> String {
        match self {
            Status::Disabled => "disabled".into(),
            Status::Connecting { attempt } => format!("connecting (attempt {attempt})"),
            Status::Ready { .. } => "ready".into(),
            Status::Backoff { attempt, until, last_error } => format!(
                "down after {attempt} failed attempt(s), next attempt in {}s: {last_error}",
                until.saturating_duration_since(now).as_secs_f64().ceil() as u64
            ),
            Status::AwaitingCredentials { reason, .. } => format!(
                "awaiting new credentials ({reason}); no attempts until its credential file or config changes"
            ),
            Status::Stopping => "stopping".into(),
        }
    }
}
