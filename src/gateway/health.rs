//! The gateway's health as the watchdog and `STATUS=` see it
//! ([`crate::notify::Health`]).
//!
//! The ping means "making progress", so it is withheld while (a) an upstream
//! owner task is wedged past its own deadline
//! ([`crate::upstream::Upstream::wedged`]) or (b) an upstream marked
//! `required = true` has been away from Ready longer than
//! `watchdog.required_grace`. A merely unreachable optional upstream in
//! Backoff never withholds it: restarting the box would not revive a remote
//! server. (The runtime heartbeat is checked by the pinger itself.)

use crate::config::WatchdogConfig;
use crate::downstream::App;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A small view of the running gateway: its downstream state and the
/// watchdog's rules.
pub(super) struct HealthView {
    pub(super) app: Arc<App>,
    pub(super) rules: Arc<Mutex<WatchdogConfig>>,
}

impl crate::notify::Health for HealthView {
    /// e.g. `2/3 upstreams ready, 12/256 sessions, heap 3.1 MiB`, plus a note
    /// while the last reload was rejected or left `[server]` changes pending.
    fn status_line(&self) -> String {
        let app = &self.app;
        let ups = app.router().upstreams();
        let enabled = ups.iter().filter(|u| u.config.enabled).count();
        let ready = ups.iter().filter(|u| u.status().is_ready()).count();
        let (n, cap) = app.sessions().count();
        let mut line = format!(
            "{ready}/{enabled} upstreams ready, {n}/{cap} sessions, heap {:.1} MiB",
            crate::alloc::live_bytes() as f64 / (1024.0 * 1024.0)
        );
        // Kept visible until the next reload: `systemctl status` shows STATUS=.
        if let Some(r) = &app.last_reload() {
            if r.rejected {
                line.push_str("; last reload rejected (see the log or /status)");
            } else if r.server_pending {
                line.push_str("; [server] changes wait for a restart");
            }
        }
        line
    }

    /// (a) an owner task wedged past its own deadline plus `period`; (b) a
    /// `required` upstream away from Ready longer than its grace.
    fn problem(&self, period: Duration) -> Option<String> {
        let now = tokio::time::Instant::now();
        let grace = self.rules.lock().expect("watchdog lock").required_grace;
        let ups = self.app.router().upstreams();
        let enabled = || ups.iter().filter(|u| u.config.enabled);
        enabled()
            .find_map(|u| u.wedged(now, period))
            .or_else(|| enabled().find_map(|u| u.required_down(now, grace)))
    }
}
