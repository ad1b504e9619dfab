//! `mcp_edge_request_duration_seconds{method}`: a Prometheus histogram kept
//! in fixed atomic buckets written here, one set per `method` label
//! ([`super::METHODS`], a fixed list), allocated with the program (statics).
//! An observation is two relaxed `fetch_add`s: nothing is queued, nothing
//! allocated, and no upkeep folds anything, so live heap does not depend on
//! the request rate. [`render`] writes the family in the text exposition
//! format (0.0.4) exactly as metrics-exporter-prometheus wrote it before
//! (`# TYPE … histogram`, cumulative `_bucket{method,le}` lines ending with
//! `le="+Inf"`, `_sum`, `_count`, a blank line after the family), to be
//! appended to the exporter's own render.

use super::{METHODS, REQUEST_DURATION};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds (seconds) of `mcp_edge_request_duration_seconds`' buckets.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// [`DURATION_BUCKETS`] in nanoseconds, what an observation is compared with
/// (`tests::bounds_agree` checks the two lists name the same bounds).
const BOUNDS_NANOS: [u64; 12] = [
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    5_000_000_000,
    30_000_000_000,
];

/// Slots per series: one per bound, and one past the last bound (`+Inf`).
const SLOTS: usize = BOUNDS_NANOS.len() + 1;

/// One label value's histogram.
struct Series {
    /// Observations per bucket, not cumulative: slot `i` counts those in
    /// (bound `i - 1`, bound `i`], the last slot those above every bound.
    /// Their total is the count, so `+Inf` and `_count` always agree.
    slots: [AtomicU64; SLOTS],
    /// Sum of the observations in nanoseconds (wraps after 584 years).
    sum_nanos: AtomicU64,
}

impl Series {
    const fn new() -> Series {
        Series {
            slots: [const { AtomicU64::new(0) }; SLOTS],
            sum_nanos: AtomicU64::new(0),
        }
    }
}

/// One series per entry of [`METHODS`], same order.
static SERIES: [Series; METHODS.len()] = [const { Series::new() }; METHODS.len()];

/// Records `elapsed` under the method label at `index` in [`METHODS`]
/// (an observation equal to a bound falls in that bound's bucket, as
/// Prometheus' `le` says).
pub(super) fn observe(index: usize, elapsed: Duration) {
    let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
    let series = &SERIES[index];
    let slot = BOUNDS_NANOS.partition_point(|b| *b < nanos);
    series.slots[slot].fetch_add(1, Relaxed);
    series.sum_nanos.fetch_add(nanos, Relaxed);
}

/// Appends the family to `out`: a series for each method label observed at
/// least once (as the exporter showed only label sets it had seen), nothing
/// at all before the first observation.
pub(super) fn render(out: &mut String) {
    let mut typed = false;
    for (label, series) in METHODS.iter().zip(&SERIES) {
        let slots: [u64; SLOTS] = std::array::from_fn(|i| series.slots[i].load(Relaxed));
        let count: u64 = slots.iter().sum();
        if count == 0 {
            continue;
        }
        if !typed {
            let _ = writeln!(out, "# TYPE {REQUEST_DURATION} histogram");
            typed = true;
        }
        let mut cumulative = 0;
        for (le, n) in DURATION_BUCKETS.iter().zip(slots) {
            cumulative += n;
            let _ = writeln!(
                out,
                "{REQUEST_DURATION}_bucket{{method=\"{label}\",le=\"{le}\"}} {cumulative}"
            );
        }
        let sum = series.sum_nanos.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "{REQUEST_DURATION}_bucket{{method=\"{label}\",le=\"+Inf\"}} {count}\n\
             {REQUEST_DURATION}_sum{{method=\"{label}\"}} {sum}\n\
             {REQUEST_DURATION}_count{{method=\"{label}\"}} {count}"
        );
    }
    if typed {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_agree() {
        for (s, n) in DURATION_BUCKETS.iter().zip(BOUNDS_NANOS) {
            assert_eq!(*s, n as f64 / 1e9, "{s} s vs {n} ns");
        }
        assert!(BOUNDS_NANOS.windows(2).all(|w| w[0] < w[1]));
    }

    /// The rendered lines of the series of `label`.
    fn rendered(label: &str) -> Vec<String> {
        let mut out = String::new();
        render(&mut out);
        let needle = format!("method=\"{label}\"");
        out.lines()
            .filter(|l| l.contains(&needle))
            .map(String::from)
            .collect()
    }

    #[test]
    fn observations_land_in_cumulative_buckets() {
        // "resources/unsubscribe" is observed by no other unit test.
        let i = METHODS
            .iter()
            .position(|m| *m == "resources/unsubscribe")
            .unwrap();
        observe(i, Duration::from_micros(300)); // ≤ 0.001
        observe(i, Duration::from_millis(1)); // on the bound: still ≤ 0.001
        observe(i, Duration::from_millis(7)); // ≤ 0.01
        observe(i, Duration::from_secs(31)); // only +Inf
        let lines = rendered("resources/unsubscribe");
        let m = "mcp_edge_request_duration_seconds";
        let l = "method=\"resources/unsubscribe\"";
        let expected: Vec<String> = [
            ("0.001", 2),
            ("0.0025", 2),
            ("0.005", 2),
            ("0.01", 3),
            ("0.025", 3),
            ("0.05", 3),
            ("0.1", 3),
            ("0.25", 3),
            ("0.5", 3),
            ("1", 3),
            ("5", 3),
            ("30", 3),
            ("+Inf", 4),
        ]
        .iter()
        .map(|(le, n)| format!("{m}_bucket{{{l},le=\"{le}\"}} {n}"))
        .chain([
            format!("{m}_sum{{{l}}} 31.0083"),
            format!("{m}_count{{{l}}} 4"),
        ])
        .collect();
        assert_eq!(lines, expected);
    }

    #[test]
    fn the_family_is_typed_once_and_ends_with_a_blank_line() {
        let i = METHODS.iter().position(|m| *m == "ping").unwrap();
        observe(i, Duration::from_micros(50));
        let mut out = String::new();
        render(&mut out);
        assert!(out.starts_with("# TYPE mcp_edge_request_duration_seconds histogram\n"));
        assert_eq!(out.matches("# TYPE").count(), 1);
        assert!(out.ends_with("\n\n"), "{out}");
        assert!(!out.ends_with("\n\n\n"), "{out}");
        assert_eq!(rendered("ping").len(), 15, "13 buckets, sum, count");
    }
}
