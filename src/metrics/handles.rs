//! Metric handles resolved once and kept, so a metric update on a hot path
//! allocates nothing. With metrics 0.24 and metrics-exporter-prometheus
//! 0.18 every `metrics::counter!(…)` call looks its key up in the
//! exporter's registry and wraps the storage it finds in a new handle: 1
//! allocation with literal labels, 3 with a label given as a variable (the
//! label vector too), 5 with a per-upstream `String` label (measured with
//! the counting allocator, `tests/it/metrics_hot.rs`). A held
//! [`metrics::Counter`] is an `Arc` to the atomic itself: incrementing it
//! allocates nothing.

use super::{method_index, METHODS, REQUESTS};
use metrics::Counter;
use std::sync::OnceLock;

/// A counter handle resolved on its first use and then kept. It is kept
/// only once the Prometheus recorder ([`super::prometheus`]) is installed:
/// before that (or under another recorder) each use registers afresh, so a
/// handle taken too early never stays a no-op. Registering on first use,
/// not at start, keeps the exposition as it was: a label set appears once
/// something counted it.
pub struct LazyCounter(OnceLock<Counter>);

impl LazyCounter {
    /// An unresolved handle (usable in a `static`).
    pub const fn new() -> LazyCounter {
        LazyCounter(OnceLock::new())
    }

    /// Adds `n`; `register` (e.g. `|| metrics::counter!(NAME, "upstream" =>
    /// name.clone())`) runs only until the handle is kept.
    pub fn increment(&self, n: u64, register: impl FnOnce() -> Counter) {
        if let Some(c) = self.0.get() {
            c.increment(n);
        } else if super::installed() {
            self.0.get_or_init(register).increment(n);
        } else {
            register().increment(n);
        }
    }
}

impl Default for LazyCounter {
    fn default() -> Self {
        LazyCounter::new()
    }
}

/// `mcp_edge_requests_total{method, outcome}`: one handle per method label
/// and outcome (`ok`, `error`).
static REQUEST_COUNTERS: [[LazyCounter; 2]; METHODS.len()] =
    [const { [const { LazyCounter::new() }; 2] }; METHODS.len()];

/// Counts one downstream request in `mcp_edge_requests_total{method,
/// outcome}` (`method` bounded by [`super::method_label`]).
pub fn count_request(method: &str, ok: bool) {
    let i = method_index(method);
    REQUEST_COUNTERS[i][usize::from(!ok)].increment(1, || {
        let outcome = if ok { "ok" } else { "error" };
        metrics::counter!(REQUESTS, "method" => METHODS[i], "outcome" => outcome)
    });
}
