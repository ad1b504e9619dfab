//! sd-notify (sd_notify(3)): `READY=1`, `STATUS=`, `STOPPING=1`,
//! `RELOADING=1`, and the watchdog pinger. Every call is a no-op when
//! `NOTIFY_SOCKET` is unset.
//!
//! The watchdog ping (`WATCHDOG=1`, every half `WATCHDOG_USEC`) means "making
//! progress", so it is sent only while the runtime [`Heartbeat`] is fresh
//! (the event loop is not blocked) and the gateway's [`Health`] view finds
//! nothing wrong (the composition root's rules: no owner task wedged, every
//! `required` upstream Ready within its grace). When withheld, the reason
//! goes to the log and to `STATUS=`. This module knows nothing of the
//! gateway: it reads the small [`Health`] view it is given.

use sd_notify::NotifyState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

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

/// What the watchdog pinger reads of the gateway.
pub trait Health: Send + Sync + 'static {
    /// The one-line `STATUS=`.
    fn status_line(&self) -> String;
    /// Why the gateway is not making progress now (`period` is the
    /// watchdog's), or `None` if it is.
    fn problem(&self, period: Duration) -> Option<String>;
}

/// The runtime heartbeat: a root task calls [`Heartbeat::beat`] every
/// quarter period; the pinger thread reads its age, so a blocked runtime is
/// noticed instead of merely going silent.
#[derive(Clone)]
pub struct Heartbeat {
    epoch: std::time::Instant,
    /// Milliseconds since `epoch` at the last beat.
    last: Arc<AtomicU64>,
}

impl Heartbeat {
    /// A heartbeat that beat just now.
    #[allow(clippy::disallowed_methods)] // wall time on purpose: read from a thread outside the runtime
    pub fn new() -> Heartbeat {
        Heartbeat {
            epoch: std::time::Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The runtime is alive now.
    pub fn beat(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Time since the last beat.
    pub fn age(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat::new()
    }
}

/// The systemd watchdog's pinger (sd_watchdog_enabled(3)), on its own OS
/// thread so that a blocked runtime is detected (and reported in `STATUS=`)
/// instead of merely going silent. Every `period / 2` it sends `WATCHDOG=1`
/// with a fresh `STATUS=` line while the [`Heartbeat`] is fresh and
/// [`Health::problem`] finds nothing, and withholds it otherwise
/// (`mcp_edge_watchdog_withheld_total`). Dropping the handle stops it.
pub struct Watchdog {
    stop: Option<std::sync::mpsc::Sender<()>>,
    /// Disconnected when the thread has returned.
    done: Option<std::sync::mpsc::Receiver<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Starts the pinger thread. `period` is systemd's `WATCHDOG_USEC`
    /// ([`watchdog_period`]); `heartbeat` is beaten by a task on the runtime.
    pub fn start(health: Arc<dyn Health>, heartbeat: Heartbeat, period: Duration) -> Watchdog {
        let (stop, stop_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        #[allow(clippy::disallowed_methods)] // the watchdog pinger thread, owned by Watchdog
        let thread = std::thread::Builder::new()
            .name("mcp-edge-watchdog".into())
            .spawn(move || {
                let _done = done_tx;
                let mut was_withheld = false;
                // The sleep is the wait for the stop signal (sent or dropped).
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stop_rx.recv_timeout(period / 2)
                {
                    let why = check(&*health, heartbeat.age(), period);
                    was_withheld = ping_or_withhold(&*health, why, was_withheld);
                }
            })
            .expect("spawning the watchdog thread");
        Watchdog {
            stop: Some(stop),
            done: Some(done),
            thread: Some(thread),
        }
    }
}

/// Why no ping may go out now: a stale heartbeat first, then the gateway's view.
fn check(health: &dyn Health, heartbeat_age: Duration, period: Duration) -> Option<String> {
    if heartbeat_age > period {
        return Some(format!(
            "runtime heartbeat is {} ms old (event loop blocked?)",
            heartbeat_age.as_millis()
        ));
    }
    health.problem(period)
}

/// Sends `WATCHDOG=1` with a fresh `STATUS=`, or withholds it (the reason in
/// the log once and in `STATUS=`). Returns whether it was withheld.
fn ping_or_withhold(health: &dyn Health, why: Option<String>, was_withheld: bool) -> bool {
    match why {
        None => {
            let _ = sd_notify::notify(&[
                NotifyState::Watchdog,
                NotifyState::Status(&health.status_line()),
            ]);
            metrics::counter!(PINGS_SENT).increment(1);
            if was_withheld {
                tracing::info!("watchdog pings resumed");
            }
            false
        }
        Some(why) => {
            if !was_withheld {
                tracing::error!("watchdog ping withheld: {why}");
            }
            status(&format!("watchdog withheld: {why}"));
            metrics::counter!(PINGS_WITHHELD).increment(1);
            true
        }
    }
}

impl Drop for Watchdog {
    /// Stops the pinger and waits for it, at most
    /// [`crate::limits::WATCHDOG_STOP_GRACE`]: a notify socket nobody reads
    /// (a full queue blocks the pinger's send) never holds up a shutdown;
    /// a pinger still blocked then is left to the process's exit.
    fn drop(&mut self) {
        drop(self.stop.take());
        let Some(t) = self.thread.take() else {
            return;
        };
        // The thread drops its end of `done` as it returns.
        let ended = (self.done.take())
            .map(|d| d.recv_timeout(crate::limits::WATCHDOG_STOP_GRACE))
            .is_none_or(|r| r == Err(std::sync::mpsc::RecvTimeoutError::Disconnected));
        if ended {
            let _ = t.join();
        } else {
            tracing::warn!(
                "the watchdog pinger is blocked sending to the notify socket; leaving it"
            );
        }
    }
}
