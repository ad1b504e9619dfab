//! Issue 12 part 5, black-box against the real binary: what a hostile
//! stdio upstream prints reaches the log with its control bytes escaped,
//! its per-message warnings within their budget, and its answers to ids
//! the gateway never sent counted in `refused{limit="unknown_id"}`.
#![allow(clippy::disallowed_methods)] // the gateway is a child process waited for in real time

use crate::support;

use crate::support::binary::{refused, Running};
use crate::support::{eventually, free_port};
use std::time::{Duration, Instant};

const FLOOD: u64 = 300;

#[tokio::test]
async fn a_noisy_upstream_leaves_clean_bounded_logs_and_counted_unknown_ids() {
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n\n{}",
        free_port(),
        free_port(),
        support::fake_block_args(
            "noisy",
            "legacy",
            &["--noisy", &FLOOD.to_string()],
            "max_result_bytes = 1024"
        ),
    );
    let gw = Running::start(dir.path(), &config).await;
    let flood_counted = || async {
        let metrics = gw.metrics().await;
        if refused(&metrics, "unknown_id") >= FLOOD {
            Ok(metrics)
        } else {
            Err(metrics)
        }
    };
    let what = format!("{FLOOD} answers to unknown ids counted");
    let metrics = eventually(&what, Duration::from_secs(10), flood_counted).await;
    assert_eq!(refused(&metrics, "unknown_id"), FLOOD, "{metrics}");
    let log = std::fs::read(&gw.log).unwrap();
    let secs = t0.elapsed().as_secs() + 1;
    let text = String::from_utf8(log.clone()).expect("the log is UTF-8");

    // No raw control byte but the line ends; no C1 control either.
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| c != '\n' && c.is_control())
        .collect();
    assert!(raw.is_empty(), "raw control characters {raw:?} in:\n{text}");
    // The forged line (a CR to overwrite the line on a terminal) is there, escaped.
    assert!(
        text.contains(r"forged\r2099-01-01 ERROR fake line\0\x1B[31m\x7F\x85\x9B end"),
        "{text}"
    );

    // Per-message warnings: burst + rate × elapsed, not one per message.
    let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count() as u64;
    let warnings = count("dropped an over-long message")
        + count("not JSON-RPC skipped")
        + count("nobody waits for");
    let (burst, rate) = (
        u64::from(mcp_edge::limits::UPSTREAM_WARN_LOG_BURST),
        u64::from(mcp_edge::limits::UPSTREAM_WARN_LOG_PER_SECOND),
    );
    assert!(
        warnings >= 1 && warnings <= burst + rate * secs,
        "{warnings} warnings in {secs} s"
    );
    let stderr_lines = count("stderr: ");
    let (burst, rate) = (
        u64::from(mcp_edge::limits::STDERR_LOG_BURST),
        u64::from(mcp_edge::limits::STDERR_LOG_PER_SECOND),
    );
    assert!(
        stderr_lines >= 1 && stderr_lines <= burst + rate * secs,
        "{stderr_lines} stderr lines in {secs} s"
    );
}
