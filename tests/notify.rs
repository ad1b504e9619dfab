//! Plays systemd's notify socket around the real binary (real time, short
//! watchdog): READY=1 with a status line, WATCHDOG=1 pings while healthy —
//! also with an optional upstream dead — and STOPPING=1 on SIGTERM.

mod support;

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
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[server]\nlisten = \"127.0.0.1:0\"\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n").unwrap();
    let mut child = support::gateway_command()
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &sock_path)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 4096];
    let mut next = || {
        let n = sock.recv(&mut buf).expect("a notify datagram within 10 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
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
