//! Heap measurements inside the one test binary. Its counting allocator
//! (`#[global_allocator]` in `tests/it/main.rs`) counts every thread of the
//! process, so a test that reads `live_bytes` must be alone in it: under
//! nextest it is (one process per test); under `cargo test`, whose tests
//! share the process as threads, [`alone`] runs it again by itself in a
//! child process of this binary, and the copy in the shared process only
//! reports the child's verdict. No lock among the heap tests would do:
//! every other test allocates too.
//!
//! [`settled_live`] is the live heap once it has stopped moving: a
//! gateway's tasks wind down (closed connections torn down on its side,
//! pooled connections dropped) some time after the test's last request.

use mcp_edge::alloc::live_bytes;
use std::time::{Duration, Instant};

/// Set in the child process [`alone`] starts.
const ALONE: &str = "MCP_EDGE_TEST_ALONE";

/// Whether the heap test `name` (`module::test`, as the harness names it)
/// runs here: true when it is alone in this process (nextest, or the child
/// this function starts). Otherwise it runs `name` alone in a child process,
/// panics if that failed (with its output) and returns false.
pub fn alone(name: &str) -> bool {
    let process_per_test =
        std::env::var("NEXTEST_EXECUTION_MODE").as_deref() == Ok("process-per-test");
    if process_per_test || std::env::var_os(ALONE).is_some() {
        harness_waits();
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, "1")
        .output()
        .expect("the test binary runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name}, alone in a process of its own, failed:\n{text}"
    );
    assert!(
        text.contains("1 passed"),
        "{name} did not run alone (a wrong name?):\n{text}"
    );
    print!("{name}, alone in a process of its own:\n{text}");
    false
}

/// Waits (up to 10 s) until the test harness's main thread sleeps,
/// waiting for this test (which runs on a thread of its own): its first
/// wait allocates what it blocks with (the channel's waker, about 144 B,
/// kept), and a heap test that read its baseline before that counted it as
/// a residue now and then. Where its state cannot be read, it goes on.
fn harness_waits() {
    let pid = std::process::id();
    // SAFETY: gettid(2) has no preconditions.
    if unsafe { libc::gettid() } as u32 == pid {
        return; // the test runs on the main thread itself
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{pid}/stat"));
        let Ok(stat) = stat else {
            return;
        };
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next());
        if state == Some("S") {
            return;
        }
        std::thread::sleep(Duration::from_millis(2)); // not ordering: the poll interval of a wait for the harness
    }
    eprintln!("note: the test harness's main thread never slept; measuring anyway");
}

/// `alone!(fn_name)`: [`alone`] for the test function `fn_name` of the
/// calling module (`tests/it/<module>.rs`).
#[macro_export]
macro_rules! alone {
    ($test:ident) => {
        $crate::support::heap::alone(
            concat!(module_path!(), "::", stringify!($test))
                .strip_prefix("it::")
                .unwrap(),
        )
    };
}

/// [`super::eventually_sync`] for a heap test: polls `cond` every 20 ms on a
/// tokio timer, which allocates nothing (eventually's blocking-pool pause
/// would be counted), for up to `within`; then panics naming `what`.
pub async fn until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await; // not ordering: the poll interval of `until`
    }
}

/// The live heap once the gateway's tasks have settled: read every 200 ms
/// until two readings in a row agree within 256 B (up to 20 s). A fixed
/// pause was not enough on a loaded machine or under qemu: connections the
/// test had closed were still being torn down on the gateway's side, and
/// their buffers were counted as what the next step cost (1.8 MB for the TLS
/// session cache, 160 connections of ≈ 11 KiB each, on a busy aarch64 run).
/// It waits on a tokio timer, which allocates nothing, not with
/// [`super::eventually`], whose blocking-pool pause would be counted.
pub async fn settled_live() -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = live_bytes();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await; // not ordering: the interval of two heap readings that must agree
        let now = live_bytes();
        if now.abs_diff(last) <= 256 {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "the live heap still moves after 20 s: {last} B, then {now} B"
        );
        last = now;
    }
}
