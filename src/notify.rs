//! sd-notify: `READY=1`, `STATUS=`, `STOPPING=1` (sd_notify(3)). Every call is
//! a no-op when `NOTIFY_SOCKET` is unset. (The watchdog comes with a later issue.)

use sd_notify::NotifyState;

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
