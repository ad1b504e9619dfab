//! Reload in place. In-process ([`Gateway::serve`] driven by [`Control`]s,
//! as `main.rs` drives it by signals): one upstream changed, one untouched,
//! one added, then one removed, then a file that does not validate. A
//! session opened before the reload keeps working after it, the untouched
//! upstream's child process keeps its pid, the changed one gets a new child.
//! On the real binary (`SIGHUP`, as `systemctl reload` sends it): systemd
//! hears `RELOADING=1` then `READY=1` with what was applied, the board
//! profile stays, and `SIGTERM` is honoured while a reload waits.
#![allow(clippy::disallowed_methods)] // real waits for a child process

use crate::support::inprocess::InProcess;
use crate::support::*;
use mcp_edge::gateway::Control;
use serde_json::json;
use std::time::Duration;

/// Pids of the fake upstreams started by `parent`, by their `--name`.
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state, ppid, ...
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = after.split(' ').nth(1).unwrap().parse().unwrap();
        if ppid != parent || after.starts_with('Z') {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if let Some(i) = args.iter().position(|a| a == "--name") {
            out.push((pid, args[i + 1].clone()));
        }
    }
    out
}

/// Whether `parent` has a child running `sleep 1000` (the mute upstream).
fn mute_running(parent: u32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let pid = e.file_name().to_string_lossy().into_owned();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let Some((_, after)) = stat.rsplit_once(") ") else {
            return false;
        };
        let ppid = after.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        ppid == Some(parent) && cmdline == b"sleep\x001000\x00"
    })
}

fn pid_of(parent: u32, name: &str) -> Option<u32> {
    let found: Vec<u32> = children_of(parent)
        .into_iter()
        .filter(|(_, n)| n == name)
        .map(|(p, _)| p)
        .collect();
    assert!(found.len() <= 1, "two children named {name}: {found:?}");
    found.first().copied()
}

/// SIGKILLs the gateway if the test fails half-way (its children die with it:
/// they get SIGKILL through PR_SET_PDEATHSIG).
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
    }
}

#[tokio::test]
async fn a_reload_restarts_only_what_changed_and_keeps_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let head = "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n";
    let before = format!(
        "{head}{}{}",
        fake_block("rl-keep", "legacy", ""),
        fake_block("rl-change", "legacy", "")
    );
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, &before).unwrap();
    let gw = InProcess::start(&cfg, None).await;
    let me = std::process::id();
    let addr = gw.addr;

    let sid = legacy_session(addr, "2025-11-25").await;
    let echo = |id: i64, tool: &str, text: &str| {
        let sid = sid.clone();
        let tool = tool.to_string();
        let text = text.to_string();
        async move { call_tool(addr, &sid, json!(id), &tool, json!({"text": text})).await }
    };
    assert_eq!(
        text_of(&echo(1, "rl-keep__echo", "one").await),
        "rl-keep:one"
    );
    let keep_pid = pid_of(me, "rl-keep").expect("keep's child runs");
    let change_pid = pid_of(me, "rl-change").expect("change's child runs");

    // `rl-change` gets another config (a different call timeout, same
    // command); `rl-added` is new; `rl-keep` is byte-for-byte the same.
    let after = format!(
        "{head}{}{}{}",
        fake_block("rl-keep", "legacy", ""),
        fake_block("rl-change", "legacy", "call_timeout = \"20s\""),
        fake_block("rl-added", "legacy", "")
    );
    std::fs::write(&cfg, &after).unwrap();
    let report = gw.reload().await;
    assert_eq!(
        report,
        "reload applied: restarted rl-change; started rl-added; stopped -; 1 unchanged"
    );
    let ready = gw
        .app
        .router()
        .upstreams()
        .iter()
        .filter(|u| u.status().is_ready())
        .count();
    assert_eq!(
        ready, 3,
        "every upstream's first attempt settled before the report"
    );

    // The session opened before the reload still works, on every upstream.
    assert_eq!(
        text_of(&echo(2, "rl-keep__echo", "two").await),
        "rl-keep:two"
    );
    assert_eq!(
        text_of(&echo(3, "rl-change__echo", "three").await),
        "rl-change:three"
    );
    assert_eq!(
        text_of(&echo(4, "rl-added__echo", "four").await),
        "rl-added:four"
    );
    let list = call(addr, &sid, json!(5), "tools/list", json!({})).await;
    let names = tool_names(&list);
    assert!(names.contains(&"rl-added__echo".to_string()), "{names:?}");
    assert_eq!(
        pid_of(me, "rl-keep"),
        Some(keep_pid),
        "the untouched child kept its pid"
    );
    let new_change = pid_of(me, "rl-change").expect("change runs again");
    // pid_of also asserts there is only one child of that name: the old one is gone.
    assert_ne!(
        new_change, change_pid,
        "the changed upstream got a new child"
    );

    // Removing an upstream stops its child; its tools disappear.
    std::fs::write(
        &cfg,
        format!(
            "{head}{}{}",
            fake_block("rl-keep", "legacy", ""),
            fake_block("rl-change", "legacy", "call_timeout = \"20s\"")
        ),
    )
    .unwrap();
    let report = gw.reload().await;
    assert_eq!(
        report,
        "reload applied: restarted -; started -; stopped rl-added; 2 unchanged"
    );
    assert_eq!(
        pid_of(me, "rl-added"),
        None,
        "removed upstream's child stopped"
    );
    let gone = echo(6, "rl-added__echo", "x").await;
    assert_eq!(gone.error_code(), Some(-32602), "{}", gone.raw);
    assert_eq!(
        text_of(&echo(7, "rl-keep__echo", "still").await),
        "rl-keep:still"
    );
    assert_eq!(pid_of(me, "rl-keep"), Some(keep_pid));

    // A file that does not validate is rejected whole; the running set stays.
    std::fs::write(&cfg, format!("{head}[[upstream]]\nname = \"bad name!\"\n")).unwrap();
    let report = gw.reload().await;
    assert!(
        report.starts_with("reload rejected, the running config stays: "),
        "{report}"
    );
    assert!(gw.last_reload().unwrap().rejected);
    assert_eq!(
        text_of(&echo(8, "rl-keep__echo", "kept").await),
        "rl-keep:kept"
    );

    gw.stop().await;
    assert_eq!(pid_of(me, "rl-keep"), None, "stop ends every child");
}

/// A reload asked for while the gateway still waits for its upstreams is
/// kept and served once it is ready, as a queued SIGHUP would be.
#[tokio::test]
async fn a_reload_asked_for_during_start_is_served_after_ready() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n{}",
            fake_block_args("rq-slow", "legacy", &["--slow-start", "1500"], "")
        ),
    )
    .unwrap();
    let gw = InProcess::spawn(&cfg, None).await;
    gw.controls.send(Control::Reload).await.unwrap();
    // Watched until the reload is reported: never a report while the
    // gateway is not ready yet (the slow upstream takes 1.5 s to start).
    let ready = || gw.app.is_ready();
    let mut waited = false;
    let served = || {
        let (was_ready, report) = (ready(), gw.last_reload());
        assert!(
            was_ready || report.is_none(),
            "a reload before READY: {report:?}"
        );
        waited |= !was_ready;
        report.map(|r| r.message)
    };
    let report = eventually_sync("the queued reload served", Duration::from_secs(30), served).await;
    assert!(
        waited,
        "the reload was asked for while the gateway still waited"
    );
    assert_eq!(
        report,
        "reload applied: restarted -; started -; stopped -; 1 unchanged"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_reload_keeps_the_board_profile_and_sigterm_is_honoured_while_upstreams_start() {
    let dir = tempfile::tempdir().unwrap();
    let notify = NotifySocket::bind(dir.path(), Duration::from_secs(30));
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n{}",
            fake_block("keep", "legacy", "")
        ),
    )
    .unwrap();
    let mut child = serve_notified(&cfg, &notify)
        .env("MCP_EDGE_BOARD", "rpi4-2gb")
        .spawn()
        .unwrap();
    let _kill = KillOnDrop(child.id());
    let next = || notify.next();
    let ready = next();
    assert!(
        ready.contains("READY=1") && ready.contains("0/128 sessions"),
        "{ready}"
    );
    let keep = pid_of(child.id(), "keep").unwrap();
    // The same file again: nothing changes (the board's defaults still apply).
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    assert!(next().contains("RELOADING=1"));
    let ready = next();
    assert!(
        ready.contains("restarted -; started -; stopped -; 1 unchanged")
            && !ready.contains("[server]")
            && ready.contains("0/128 sessions"),
        "{ready}"
    );
    assert_eq!(pid_of(child.id(), "keep"), Some(keep));

    // A reload adding an upstream that never answers its handshake: SIGTERM
    // during the wait for it stops the gateway at once, not after startup_timeout.
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n{}\
             [[upstream]]\nname = \"mute\"\ncommand = \"sleep\"\nargs = [\"1000\"]\nstartup_timeout = \"60s\"\n",
            fake_block("keep", "legacy", "")
        ),
    )
    .unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    assert!(next().contains("RELOADING=1"));
    // The reload waits for the new upstream, whose child never answers.
    let mute = || mute_running(child.id());
    eventually_blocking(
        "the mute upstream's child started",
        Duration::from_secs(20),
        mute,
    );
    let t0 = std::time::Instant::now();
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(next().contains("STOPPING=1"));
    assert!(child.wait().unwrap().success());
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "stopped {:?} after SIGTERM",
        t0.elapsed()
    );
}
