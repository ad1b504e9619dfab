//! sd-notify (sd_notify(3)): `READY=1`, `STATUS=`, `STOPPING=1`, and the
//! watchdog. Every call is a no-op when `NOTIFY_SOCKET` is unset.
//!
//! The watchdog ping (`WATCHDOG=1`, every half `WATCHDOG_USEC`) means "making
//! progress", so it is sent only while (a) a runtime heartbeat is fresh (the
//! event loop is not blocked), (b) no upstream owner task is wedged past its
//! own deadline ([`crate::upstream::Upstream::wedged`]) and (c) every
//! upstream marked `required = true` has been Ready within
//! `watchdog.required_grace`. A merely unreachable optional upstream in
//! Backoff never withholds it: restarting the box would not revive a remote
//! server. When withheld, the reason goes to the log and to `STATUS=`.

use crate::http::App;
use sd_notify::NotifyState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
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

/// Tells systemd a reload started (`RELOADING=1` with `MONOTONIC_USEC=`, as
/// `Type=notify-reload` wants; harmless for `Type=notify`).
pub fn reloading() {
    let mut states = vec![NotifyState::Reloading];
    if let Ok(now) = NotifyState::monotonic_usec_now() {
        states.push(now);
    }
    let _ = sd_notify::notify(&states);
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

/// The one-line status, e.g. `2/3 upstreams ready, 12/256 sessions, heap 3.1 MiB`,
/// plus a note while the last reload was rejected or left `[server]` changes pending.
pub fn status_line(app: &App) -> String {
    let ups = app.router.upstreams();
    let enabled = ups.iter().filter(|u| u.config.enabled).count();
    let ready = ups.iter().filter(|u| u.status().is_ready()).count();
    let (n, cap) = {
        let t = app.sessions.lock().expect("sessions");
        (t.len(), t.capacity())
    };
    let mut line = format!(
        "{ready}/{enabled} upstreams ready, {n}/{cap} sessions, heap {:.1} MiB",
        crate::alloc::live_bytes() as f64 / (1024.0 * 1024.0)
    );
    // Kept visible until the next reload: `systemctl status` shows STATUS=.
    if let Some(r) = &*app.last_reload.lock().expect("last_reload lock") {
        if r.rejected {
            line.push_str("; last reload rejected (see the log or /status)");
        } else if r.server_pending {
            line.push_str("; [server] changes wait for a restart");
        }
    }
    line
}

/// Why the gateway is not healthy now, or `None` if it is: (a) the runtime
/// heartbeat is older than `period`; (b) an owner task is wedged past its own
/// deadline plus `period`; (c) a `required` upstream has been away from Ready
/// longer than `watchdog.required_grace`.
pub fn unhealthy(app: &App, heartbeat_age: Duration, period: Duration) -> Option<String> {
    if heartbeat_age > period {
        return Some(format!(
            "runtime heartbeat is {} ms old (event loop blocked?)",
            heartbeat_age.as_millis()
        ));
    }
    let now = Instant::now();
    let grace = app.watchdog.lock().expect("watchdog lock").required_grace;
    let ups = app.router.upstreams();
    let enabled = || ups.iter().filter(|u| u.config.enabled);
    enabled()
        .find_map(|u| u.wedged(now, period))
        .or_else(|| enabled().find_map(|u| u.required_down(now, grace)))
}

/// The systemd watchdog (sd_watchdog_enabled(3)): a heartbeat task on the
/// runtime and a pinger on its own OS thread, so a blocked runtime is
/// detected (and reported in `STATUS=`) instead of merely going silent.
/// Every `period / 2` the pinger sends `WATCHDOG=1` with a fresh `STATUS=`
/// line while [`unhealthy`] finds nothing, and withholds it otherwise (the
/// reason in the log once and in `STATUS=`; `mcp_edge_watchdog_withheld_total`).
/// Dropping the handle stops both.
pub struct Watchdog {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _heartbeat: crate::supervisor::OwnedTask,
}

impl Watchdog {
    /// Starts the heartbeat (on the current runtime) and the pinger thread.
    /// `period` is systemd's `WATCHDOG_USEC` ([`watchdog_period`]).
    pub fn start(app: Arc<App>, period: Duration) -> Watchdog {
        let epoch = std::time::Instant::now();
        let beat = Arc::new(AtomicU64::new(0));
        let b = beat.clone();
        let heartbeat = crate::supervisor::OwnedTask::spawn(async move {
            let mut iv = tokio::time::interval(period / 4);
            loop {
                iv.tick().await;
                b.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
            }
        });
        let (stop, stop_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("mcp-edge-watchdog".into())
            .spawn(move || {
                let mut was_withheld = false;
                // The sleep is the wait for the stop signal (sent or dropped).
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stop_rx.recv_timeout(period / 2)
                {
                    let age = epoch
                        .elapsed()
                        .saturating_sub(Duration::from_millis(beat.load(Ordering::Relaxed)));
                    match unhealthy(&app, age, period) {
                        None => {
                            let _ = sd_notify::notify(&[
                                NotifyState::Watchdog,
                                NotifyState::Status(&status_line(&app)),
                            ]);
                            metrics::counter!(PINGS_SENT).increment(1);
                            if was_withheld {
                                tracing::info!("watchdog pings resumed");
                            }
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
            })
            .expect("spawning the watchdog thread");
        Watchdog {
            stop: Some(stop),
            thread: Some(thread),
            _heartbeat: heartbeat,
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
