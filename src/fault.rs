//! Test-only faults for the watchdog's acceptance tests, switched on by the
//! environment variable `MCP_EDGE_TEST_FAULT` (read once) in builds with the
//! cargo feature `test-faults`, which only the tests enable (the crate's
//! dev-dependency on itself). Without it [`active`] and
//! [`block_runtime_if_asked`] are constant `false`, the variable is never
//! read, and the optimiser drops the fault branches of their callers: the
//! release binary carries no fault names (`strings` finds none).
//!
//! - `stall-owners`: every upstream owner task hangs at its next health probe,
//!   as a probe that ignores its own timeout would: the owner stops reporting
//!   progress and the watchdog must notice ([`crate::upstream::Upstream::wedged`]).
//! - `block-runtime`: once `READY=1` is sent, every tokio worker thread blocks
//!   in a synchronous sleep, as CPU-bound or blocking code on the runtime
//!   would: the runtime heartbeat goes stale and the watchdog must notice.

/// One injectable fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Owner tasks hang at their next health probe.
    StallOwners,
    /// Worker threads block after `READY=1`.
    BlockRuntime,
}

#[cfg(feature = "test-faults")]
fn configured() -> Option<Fault> {
    static F: std::sync::OnceLock<Option<Fault>> = std::sync::OnceLock::new();
    const VAR: &str = "MCP_EDGE_TEST_FAULT";
    *F.get_or_init(|| match std::env::var(VAR).ok()?.as_str() {
        "stall-owners" => Some(Fault::StallOwners),
        "block-runtime" => Some(Fault::BlockRuntime),
        other => {
            tracing::warn!("{VAR}={other:?} is not a known fault; ignored");
            None
        }
    })
}

/// True when `f` was switched on by `MCP_EDGE_TEST_FAULT`.
#[cfg(feature = "test-faults")]
pub fn active(f: Fault) -> bool {
    configured() == Some(f)
}

/// Always false: this build has no test faults.
#[cfg(not(feature = "test-faults"))]
#[inline(always)]
pub fn active(_: Fault) -> bool {
    false
}

/// With [`Fault::BlockRuntime`] on: blocks each of the runtime's `workers`
/// threads in a synchronous sleep (one task each; idle workers pick them up
/// from the shared queue) and returns true (the caller says so in
/// `STATUS=`). A no-op returning false otherwise.
#[cfg(feature = "test-faults")]
pub fn block_runtime_if_asked(workers: usize) -> bool {
    if !active(Fault::BlockRuntime) {
        return false;
    }
    tracing::warn!("test fault: blocking {workers} runtime worker thread(s)");
    for _ in 0..workers {
        // Not a supervised task: it never yields, which is the point.
        #[allow(clippy::disallowed_methods)]
        drop(tokio::spawn(async {
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(std::time::Duration::from_secs(24 * 3600));
        }));
    }
    true
}

/// Always false: this build has no test faults.
#[cfg(not(feature = "test-faults"))]
#[inline(always)]
pub fn block_runtime_if_asked(_workers: usize) -> bool {
    false
}
