//! sd-notify (sd_notify(3)): `READY=1`, `STATUS=`, `STOPPING=1`, and the
//! watchdog. Every call is a no-op when `NOTIFY_SOCKET` is unset.
//!
//! The watchdog ping (`WATCHDOG=1`, every half `WATCHDOG_USEC`) means "making
//! progress", so it is sent only while (a) a runtime heartbeat is fresh (the
//! event loop is not blocked) and (b) no upstream owner task is wedged past
//! its own deadline ([`crate::upstream::Upstream::wedged`]). A merely
//! unreachable upstream in Backoff never withholds it: restarting the box
//! would not revive a remote server. When withheld, the reason goes to the
//! log and to `STATUS=`.

use crate::http::App;
use sd_notify::NotifyState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Counter: watchdog pings sent.
pub const PINGS_SENT: &str = "mcp_edge_watchdog_pings_total";
/// Counter: watchdog pings withheld (unhealthy).
pub const PINGS_WITHHELD: &str = "mcp_edge_watchdog_withheld_total";

/// Tells systemd the gateway is ready, with a status line.
pub fn ready(status: &str) {
    let _ = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Updates the one-line status.
pub fn status(status: &str) {
    let _ = sd_notify::notify(&[NotifyState::Status(status)]);
}

/// Tells systemd the gateway is stopping.
pub fn stopping() {
    let _ = sd_notify::notify(&[NotifyState::Stopping]);
}

/// The watchdog period systemd asked for (`WATCHDOG_USEC`, checked against
/// `WATCHDOG_PID`), if any.
pub fn watchdog_period() -> Option<Duration> {
    sd_notify::watchdog_enabled()
}

/// The one-line status, e.g. `2/3 upstreams ready, 12/256 sessions, heap 3.1 MiB`.
pub fn status_line(app: &App) -> String {
    let ups = app.router.upstreams();
    let enabled = ups.iter().filter(|u| u.config.enabled).count();
    let ready = ups.iter().filter(|u| u.status().is_ready()).count();
    let (n, cap) = {
        let t = app.sessions.lock().expect("sessions");
        (t.len(), t.capacity())
    };
    format!(
        "{ready}/{enabled} upstreams ready, {n}/{cap} sessions, heap {:.1} MiB",
        crate::alloc::live_bytes() as f64 / (1024.0 * 1024.0)
    )
}

/// Why the gateway is not healthy now, or `None` if it is.
fn unhealthy(app: &App, heartbeat_age: Duration, period: Duration) -> Option<String> {
    if heartbeat_age > period {
        return Some(format!(
            "runtime heartbeat is {heartbeat_age:?} old (event loop blocked?)"
        ));
    }
    let now = Instant::now();
    let margin = period;
    app.router
        .upstreams()
        .iter()
        .filter(|u| u.config.enabled)
        .find_map(|u| u.wedged(now, margin))
}

/// Pings the watchdog every `period / 2` while healthy, and keeps `STATUS=`
/// current. Runs until shutdown.
pub async fn watchdog(app: Arc<App>, period: Duration, mut shutdown: watch::Receiver<bool>) {
    let start = Instant::now();
    let beat = Arc::new(AtomicU64::new(0));
    let b = beat.clone();
    // The heartbeat: a tiny future on the same runtime; if the runtime stalls, it goes stale.
    let heartbeat = async move {
        let mut iv = tokio::time::interval(period / 4);
        loop {
            iv.tick().await;
            b.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
    };
    let pinger = async {
        let mut iv = tokio::time::interval(period / 2);
        let mut was_withheld = false;
        loop {
            iv.tick().await;
            let age = start
                .elapsed()
                .saturating_sub(Duration::from_millis(beat.load(Ordering::Relaxed)));
            match unhealthy(&app, age, period) {
                None => {
                    let _ = sd_notify::notify(&[
                        NotifyState::Watchdog,
                        NotifyState::Status(&status_line(&app)),
                    ]);
                    metrics::counter!(PINGS_SENT).increment(1);
                    was_withheld = false;
                }
                Some(why) => {
                    if !was_withheld {
                        tracing::error!("watchdog ping withheld: {why}");
                    }
                    was_withheld = true;
                    status(&format!("watchdog withheld: {why}"));
                    metrics::counter!(PINGS_WITHHELD).increment(1);
                }
            }
        }
    };
    tokio::select! {
        _ = heartbeat => {}
        _ = pinger => {}
        _ = shutdown.changed() => {}
    }
}
