//! Test-only faults for the watchdog's acceptance tests, switched on by the
//! environment variable `MCP_EDGE_TEST_FAULT` (read once). Unset in
//! production; the unit file never sets it.
//!
//! - `stall-owners`: every upstream owner task hangs at its next health probe,
//!   as a probe that ignores its own timeout would: the owner stops reporting
//!   progress and the watchdog must notice ([`crate::upstream::Upstream::wedged`]).
//! - `block-runtime`: once `READY=1` is sent, every tokio worker thread blocks
//!   in a synchronous sleep, as CPU-bound or blocking code on the runtime
//!   would: the runtime heartbeat goes stale and the watchdog must notice.

use std::sync::OnceLock;

/// The name of the environment variable.
pub const VAR: &str = "MCP_EDGE_TEST_FAULT";

/// One injectable fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Owner tasks hang at their next health probe.
    StallOwners,
    /// Worker threads block after `READY=1`.
    BlockRuntime,
}

fn configured() -> Option<Fault> {
    static F: OnceLock<Option<Fault>> = OnceLock::new();
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
pub fn active(f: Fault) -> bool {
    configured() == Some(f)
}

/// With [`Fault::BlockRuntime`] on: says so in `STATUS=`, then blocks each
/// of the runtime's `workers` threads in a synchronous sleep (one task each;
/// idle workers pick them up from the shared queue). A no-op otherwise.
pub fn block_runtime_if_asked(workers: usize) {
    if !active(Fault::BlockRuntime) {
        return;
    }
    tracing::warn!("test fault: blocking {workers} runtime worker thread(s)");
    crate::notify::status("test fault: blocking the runtime");
    for _ in 0..workers {
        // Not a supervised task: it never yields, which is the point.
        drop(tokio::spawn(async {
            std::thread::sleep(std::time::Duration::from_secs(24 * 3600));
        }));
    }
}
