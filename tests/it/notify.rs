//! Plays systemd's notify socket around the real binary (real time, short
//! watchdog): READY=1 with a status line, WATCHDOG=1 pings while healthy —
//! also with an optional upstream dead — and STOPPING=1 on SIGTERM.
#![allow(clippy::disallowed_methods)] // plays systemd around the real binary in real time

use crate::support;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

#[test]
fn ready_watchdog_pings_with_a_dead_optional_upstream_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[server]\nlisten = \"127.0.0.1:0\"\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n\
         [[upstream]]\nname = \"dead\"\ncommand = \"/nonexistent/server\"\n",
    )
    .unwrap();
    let mut child = support::gateway_command()
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "400000")
        .env_remove("WATCHDOG_PID")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut got: Vec<(Instant, String)> = Vec::new();
    let mut buf = [0u8; 4096];
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        if let Ok(n) = sock.recv(&mut buf) {
            got.push((
                Instant::now(),
                String::from_utf8_lossy(&buf[..n]).into_owned(),
            ));
        }
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let stop_deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < stop_deadline && !got.iter().any(|(_, m)| m.contains("STOPPING=1")) {
        if let Ok(n) = sock.recv(&mut buf) {
            got.push((
                Instant::now(),
                String::from_utf8_lossy(&buf[..n]).into_owned(),
            ));
        }
    }
    assert!(child.wait().unwrap().success());
    let ready = got
        .iter()
        .find(|(_, m)| m.contains("READY=1"))
        .expect("READY=1 sent");
    assert!(
        ready.1.contains("STATUS=1/2 upstreams ready"),
        "{}",
        ready.1
    );
    let pings: Vec<Instant> = got
        .iter()
        .filter(|(_, m)| m.contains("WATCHDOG=1"))
        .map(|(t, _)| *t)
        .collect();
    assert!(
        pings.len() >= 5,
        "pings keep coming although 'dead' is down: {got:?}"
    );
    // No gap longer than the 400 ms watchdog period between pings.
    assert!(
        pings
            .windows(2)
            .all(|w| w[1] - w[0] < Duration::from_millis(400)),
        "{got:?}"
    );
    assert!(got.iter().any(|(_, m)| m.contains("STOPPING=1")));
}

#[test]
fn sighup_reloads_without_dying_and_rejects_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let notify = support::NotifySocket::bind(dir.path(), Duration::from_secs(10));
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[server]\nlisten = \"127.0.0.1:0\"\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n").unwrap();
    let mut child = support::serve_notified(&cfg, &notify).spawn().unwrap();
    let next = || notify.next();
    assert!(next().contains("READY=1"));
    std::fs::write(&cfg, "[server]\nbogus = 1\n").unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    let reloading = next();
    assert!(
        reloading.contains("RELOADING=1") && reloading.contains("MONOTONIC_USEC="),
        "{reloading}"
    );
    let ready = next();
    assert!(
        ready.contains("READY=1") && ready.contains("reload rejected") && ready.contains("bogus"),
        "{ready}"
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "still running after SIGHUP"
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

/// Datagrams from the notify socket for `for_how_long`, each with its arrival time.
fn collect(sock: &UnixDatagram, for_how_long: Duration) -> Vec<(Instant, String)> {
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let until = Instant::now() + for_how_long;
    while Instant::now() < until {
        if let Ok(n) = sock.recv(&mut buf) {
            got.push((
                Instant::now(),
                String::from_utf8_lossy(&buf[..n]).into_owned(),
            ));
        }
    }
    got
}

/// Starts the real binary with a 400 ms watchdog and `fault` (if any) on `config`.
fn start_watched(
    dir: &std::path::Path,
    config: &str,
    fault: Option<&str>,
) -> (std::process::Child, UnixDatagram) {
    let sock_path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let cfg = dir.join("c.toml");
    std::fs::write(&cfg, config).unwrap();
    let mut cmd = support::gateway_command();
    cmd.args(["serve", "--config"])
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "400000")
        .env_remove("WATCHDOG_PID")
        .env_remove("MCP_EDGE_TEST_FAULT")
        .stderr(std::process::Stdio::null());
    if let Some(f) = fault {
        cmd.env("MCP_EDGE_TEST_FAULT", f);
    }
    (cmd.spawn().unwrap(), sock)
}

const PERIOD: Duration = Duration::from_millis(400);

fn pings(got: &[(Instant, String)]) -> Vec<Instant> {
    got.iter()
        .filter(|(_, m)| m.contains("WATCHDOG=1"))
        .map(|(t, _)| *t)
        .collect()
}

fn first(got: &[(Instant, String)], needle: &str) -> Instant {
    got.iter()
        .find(|(_, m)| m.contains(needle))
        .unwrap_or_else(|| panic!("no datagram with {needle:?}: {got:?}"))
        .0
}

#[test]
fn a_required_upstream_down_past_its_grace_withholds_pings() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, sock) = start_watched(
        dir.path(),
        "[server]\nlisten = \"127.0.0.1:0\"\n[watchdog]\nrequired_grace = \"1s\"\n\
         [[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n\
         [[upstream]]\nname = \"needed\"\ncommand = \"/nonexistent/server\"\nrequired = true\n",
        None,
    );
    let got = collect(&sock, Duration::from_secs(4));
    let ready = first(&got, "READY=1");
    let withheld = first(
        &got,
        "STATUS=watchdog withheld: required upstream 'needed' not ready",
    );
    let p = pings(&got);
    assert!(!p.is_empty(), "pings came while within the grace: {got:?}");
    // The grace runs from start-up (just before READY); the pinger checks
    // every half period: pings stop within grace + two periods of READY.
    let last = *p.last().unwrap();
    assert!(
        last < ready + Duration::from_secs(1) + 2 * PERIOD,
        "a ping {:?} after READY: {got:?}",
        last - ready
    );
    assert!(
        last < withheld,
        "no ping after the withheld status: {got:?}"
    );
    assert!(
        got.last().unwrap().0 > withheld + 2 * PERIOD,
        "observed long enough after withholding"
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

#[test]
fn stalled_owner_tasks_withhold_pings() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, sock) = start_watched(
        dir.path(),
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\nhealth_interval = \"1s\"\n\
         probe_timeout = \"100ms\"\ncall_timeout = \"1s\"\n",
        Some("stall-owners"),
    );
    let got = collect(&sock, Duration::from_secs(5));
    let ready = first(&got, "READY=1");
    let withheld = first(
        &got,
        "STATUS=watchdog withheld: upstream 'edge' stuck in ready",
    );
    let p = pings(&got);
    assert!(p.len() >= 2, "healthy at first: {got:?}");
    // The owner hangs at its first probe (1 s after Ready); its own deadline
    // is health_interval + call_timeout past its last progress, plus one
    // period of margin; pings stop within two periods of that.
    let last = *p.last().unwrap();
    assert!(
        last < ready + Duration::from_secs(2) + PERIOD + 2 * PERIOD,
        "a ping {:?} after READY: {got:?}",
        last - ready
    );
    assert!(
        last < withheld,
        "no ping after the withheld status: {got:?}"
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_blocked_runtime_withholds_pings_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, sock) = start_watched(
        dir.path(),
        "[server]\nlisten = \"127.0.0.1:0\"\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
        Some("block-runtime"),
    );
    let got = collect(&sock, Duration::from_secs(3));
    let blocked = first(&got, "STATUS=test fault: blocking the runtime");
    first(&got, "STATUS=watchdog withheld: runtime heartbeat is");
    // Pings stop within two periods of the block (the pinger runs on its own
    // thread, so it can still say why in STATUS=).
    assert!(
        pings(&got).iter().all(|t| *t < blocked + 2 * PERIOD),
        "{got:?}"
    );
    // A blocked runtime can't handle SIGTERM; systemd would SIGABRT/SIGKILL it.
    child.kill().unwrap();
    child.wait().unwrap();
}
