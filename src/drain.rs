//! Work in progress that a stop waits for: a count of running units (calls,
//! requests) and a way to wait until it reaches zero. Shutdown drains the
//! downstream requests (`http::App::in_flight`); a reload drains the calls
//! of an upstream it replaces (`upstream::Upstream::drained`).

use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;

/// A count of running units and a wake-up when it reaches zero.
#[derive(Debug, Default)]
pub struct Drain {
    count: AtomicUsize,
    idle: Notify,
}

/// One running unit; counted in its [`Drain`] while it lives.
#[derive(Debug)]
pub struct Running<'a>(&'a Drain);

impl Drain {
    /// An empty count.
    pub fn new() -> Self {
        Drain::default()
    }

    /// Counts one unit until the returned guard is dropped.
    pub fn enter(&self) -> Running<'_> {
        self.count.fetch_add(1, Ordering::AcqRel);
        Running(self)
    }

    /// Units running now.
    pub fn active(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Resolves once no unit runs (at once if none does).
    pub async fn drained(&self) {
        loop {
            let idle = self.idle.notified();
            if self.active() == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drained_waits_for_the_last_unit() {
        let d = Drain::new();
        d.drained().await; // nothing runs: at once
        let a = d.enter();
        let b = d.enter();
        assert_eq!(d.active(), 2);
        drop(a);
        let wait = d.drained();
        tokio::pin!(wait);
        assert!(futures_util::poll!(&mut wait).is_pending());
        drop(b);
        wait.await;
        assert_eq!(d.active(), 0);
    }
}
