//! Reload in place (`SIGHUP`, as `systemctl reload` sends it) on the real
//! binary: one upstream changed, one untouched, one added. A session opened
//! before the reload keeps working after it, the untouched upstream's child
//! process keeps its pid, the changed one gets a new child, and systemd hears
//! `RELOADING=1` then `READY=1` with what was applied.

mod support;
use serde_json::json;
use std::time::Duration;
use support::*;

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
async fn sighup_restarts_only_what_changed_and_keeps_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let notify = NotifySocket::bind(dir.path(), Duration::from_secs(30));
    let port = free_port();
    let head = format!("[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"off\"\n");
    let before = format!(
        "{head}{}{}",
        fake_block("keep", "legacy", ""),
        fake_block("change", "legacy", "")
    );
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, &before).unwrap();
    let mut child = serve_notified(&cfg, &notify).spawn().unwrap();
    let gw = child.id();
    let _kill = KillOnDrop(gw);
    let next = || notify.next();
    let ready = next();
    assert!(
        ready.contains("READY=1") && ready.contains("2/2 upstreams ready"),
        "{ready}"
    );
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    let sid = legacy_session(addr, "2025-11-25").await;
    let echo = |id: i64, tool: &str, text: &str| {
        let sid = sid.clone();
        let tool = tool.to_string();
        let text = text.to_string();
        async move { call_tool(addr, &sid, json!(id), &tool, json!({"text": text})).await }
    };
    assert_eq!(text_of(&echo(1, "keep__echo", "one").await), "keep:one");
    let keep_pid = pid_of(gw, "keep").expect("keep's child runs");
    let change_pid = pid_of(gw, "change").expect("change's child runs");

    // `change` gets another config (a different call timeout, same command);
    // `added` is new; `keep` is byte-for-byte the same.
    let after = format!(
        "{head}{}{}{}",
        fake_block("keep", "legacy", ""),
        fake_block("change", "legacy", "call_timeout = \"20s\""),
        fake_block("added", "legacy", "")
    );
    std::fs::write(&cfg, &after).unwrap();
    unsafe { libc::kill(gw as i32, libc::SIGHUP) };
    let reloading = next();
    assert!(
        reloading.contains("RELOADING=1") && reloading.contains("MONOTONIC_USEC="),
        "{reloading}"
    );
    let ready = next();
    assert!(ready.contains("READY=1"), "{ready}");
    assert!(
        ready.contains("restarted change; started added; stopped -; 1 unchanged"),
        "{ready}"
    );
    assert!(ready.contains("3/3 upstreams ready"), "{ready}");

    // The session opened before the reload still works, on every upstream.
    assert_eq!(text_of(&echo(2, "keep__echo", "two").await), "keep:two");
    assert_eq!(
        text_of(&echo(3, "change__echo", "three").await),
        "change:three"
    );
    assert_eq!(text_of(&echo(4, "added__echo", "four").await), "added:four");
    let list = call(addr, &sid, json!(5), "tools/list", json!({})).await;
    let names = tool_names(&list);
    assert!(names.contains(&"added__echo".to_string()), "{names:?}");

    assert_eq!(
        pid_of(gw, "keep"),
        Some(keep_pid),
        "the untouched child kept its pid"
    );
    let new_change = pid_of(gw, "change").expect("change runs again");
    // pid_of also asserts there is only one child named "change": the old one is gone.
    assert_ne!(
        new_change, change_pid,
        "the changed upstream got a new child"
    );

    // Removing an upstream stops its child; its tools disappear.
    std::fs::write(
        &cfg,
        format!(
            "{head}{}{}",
            fake_block("keep", "legacy", ""),
            fake_block("change", "legacy", "call_timeout = \"20s\"")
        ),
    )
    .unwrap();
    unsafe { libc::kill(gw as i32, libc::SIGHUP) };
    assert!(next().contains("RELOADING=1"));
    let ready = next();
    assert!(
        ready.contains("restarted -; started -; stopped added; 2 unchanged"),
        "{ready}"
    );
    assert_eq!(
        pid_of(gw, "added"),
        None,
        "removed upstream's child stopped"
    );
    let gone = echo(6, "added__echo", "x").await;
    assert_eq!(gone.error_code(), Some(-32602), "{}", gone.raw);
    assert_eq!(text_of(&echo(7, "keep__echo", "still").await), "keep:still");
    assert_eq!(pid_of(gw, "keep"), Some(keep_pid));

    unsafe { libc::kill(gw as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
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
    std::thread::sleep(Duration::from_millis(500));
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
