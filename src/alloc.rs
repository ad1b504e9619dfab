//! A counting global allocator: live bytes, peak bytes and allocation count,
//! exported as `mcp_edge_heap_live_bytes`, `mcp_edge_heap_peak_bytes` and
//! `mcp_edge_heap_allocations_total`, and readable by tests and benchmarks.
//! RSS (`VmRSS` of `/proc/self/status`, proc(5)) is the second gauge,
//! `mcp_edge_process_resident_memory_bytes`.
//!
//! The binary installs it with
//! `#[global_allocator] static ALLOC: mcp_edge::alloc::Counting = mcp_edge::alloc::Counting;`;
//! a test or benchmark binary does the same to measure. Without it the
//! counters stay at zero. Cost: two relaxed atomic read-modify-writes and a
//! load per allocation (a third read-modify-write when the peak rises).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

/// The counting allocator (wraps [`System`]).
pub struct Counting;

/// `n` more bytes live. The peak is read before it is raised: in steady
/// state the live total stays under it, and a plain load costs far less than
/// `fetch_max`'s compare-and-swap loop (this runs on every allocation).
#[inline]
fn grew(n: usize) {
    let live = LIVE.fetch_add(n, Relaxed) + n;
    if live > PEAK.load(Relaxed) {
        PEAK.fetch_max(live, Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to `System`; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
            ALLOCS.fetch_add(1, Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
            ALLOCS.fetch_add(1, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Relaxed);
            }
            ALLOCS.fetch_add(1, Relaxed);
        }
        p
    }
}

/// Bytes currently allocated through the counting allocator.
pub fn live_bytes() -> usize {
    LIVE.load(Relaxed)
}

/// Highest [`live_bytes`] seen since start (or the last [`reset_peak`]).
pub fn peak_bytes() -> usize {
    PEAK.load(Relaxed)
}

/// Allocations (including reallocations) since start.
pub fn allocations() -> u64 {
    ALLOCS.load(Relaxed)
}

/// Sets the peak to the current live bytes (benchmarks measure phases).
pub fn reset_peak() {
    PEAK.store(LIVE.load(Relaxed), Relaxed);
}

/// Resident set size in bytes from `/proc/self/status` (`VmRSS`, proc(5));
/// `None` where procfs is absent.
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
