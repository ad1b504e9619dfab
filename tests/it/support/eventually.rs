//! Waiting on observable state instead of sleeping a fixed time:
//! [`eventually`] polls a condition until it holds or a deadline passes, and
//! fails naming what it waited for and what it saw last.
//!
//! Both the deadline and the poll interval are real time, the interval
//! spent on tokio's blocking pool: a test whose clock is paused
//! (`start_paused`) keeps its virtual time still while it waits, since
//! tokio does not auto-advance a paused clock while a `spawn_blocking` task
//! runs. So a wait for sockets or child processes never moves the
//! gateway's timers on; a test that means time to pass says so with a
//! `sleep` of its own.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(20);

/// What one poll saw: done (with a value), or not yet, with a description
/// of what was seen for the failure message (empty: nothing to add).
pub trait Seen {
    type Value;
    fn done(self) -> Result<Self::Value, String>;
}

impl Seen for bool {
    type Value = ();
    fn done(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err(String::new())
        }
    }
}

impl<T> Seen for Option<T> {
    type Value = T;
    fn done(self) -> Result<T, String> {
        self.ok_or_else(String::new)
    }
}

impl<T> Seen for Result<T, String> {
    type Value = T;
    fn done(self) -> Result<T, String> {
        self
    }
}

/// Polls `check` (an async condition) every [`POLL`] until it is done or
/// `within` has passed; returns its value, or panics with
/// `waited {within} for {what}` and the last thing it saw.
pub async fn eventually<S, F>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> F,
) -> S::Value
where
    S: Seen,
    F: Future<Output = S>,
{
    let deadline = Instant::now() + within;
    loop {
        match check().await.done() {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => give_up(what, within, &last),
            Err(_) => pause(POLL).await,
        }
    }
}

/// [`eventually`] with a condition that needs no `await` (a counter, a
/// file, a lock), polled from async code.
pub async fn eventually_sync<S: Seen>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> S,
) -> S::Value {
    eventually(what, within, || std::future::ready(check())).await
}

/// [`eventually`] for a test without a runtime: polls `check` on this
/// thread, sleeping [`POLL`] between polls.
pub fn eventually_blocking<S: Seen>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> S,
) -> S::Value {
    let deadline = Instant::now() + within;
    loop {
        match check().done() {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => give_up(what, within, &last),
            Err(_) => std::thread::sleep(POLL), // not ordering: the poll interval of eventually_blocking
        }
    }
}

fn give_up(what: &str, within: Duration, last: &str) -> ! {
    if last.is_empty() {
        panic!("waited {within:?} for {what}");
    }
    panic!("waited {within:?} for {what}; last seen: {last}");
}

/// `d` of real time without moving a paused clock (see the module's doc).
async fn pause(d: Duration) {
    tokio::task::spawn_blocking(move || std::thread::sleep(d)) // not ordering: the poll interval of eventually
        .await
        .expect("the poll interval's blocking task");
}
