//! The upstream supervisor in virtual time (unless stated): polite backoff,
//! auth parking, Retry-After, one monitor however often it reconnects, and
//! backoff that survives a restart.
#![allow(clippy::disallowed_methods)] // real waits for child processes and file mtimes

use crate::support;
use crate::support::scripted::{http_block, scripted, Mode};
use crate::support::*;
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn a_dead_upstream_is_tried_at_most_60_times_a_day_on_a_growing_schedule() {
    let dead = "[[upstream]]\nname = \"dead\"\ntransport = \"stdio\"\ncommand = \"/nonexistent/mcp-server\"\n";
    let gw = start("", dead).await;
    let up = gw.app().router().upstreams()[0].clone();
    let mut rx = up.subscribe();
    let policy = mcp_edge::supervisor::backoff::Backoff::new(
        Duration::from_secs(1),
        2.0,
        Duration::from_secs(1800),
    )
    .unwrap();
    let day = Instant::now() + Duration::from_secs(24 * 3600);
    let mut delays = Vec::new();
    while Instant::now() < day {
        tokio::select! {
            // not ordering: the 24 virtual hours the test watches
            _ = tokio::time::sleep_until(day) => break,
            r = rx.changed() => {
                r.unwrap();
                let s = rx.borrow_and_update().clone();
                if let mcp_edge::upstream::Status::Backoff { attempt, until, .. } = s {
                    let d = until - Instant::now();
                    let base = policy.base_delay(attempt);
                    assert!(d >= base && d.as_secs_f64() < base.as_secs_f64() * 1.25 + 0.001, "attempt {attempt}: {d:?} vs base {base:?}");
                    delays.push(base);
                }
            }
        }
    }
    let attempts = up.attempts();
    println!("dead upstream, 24 simulated hours: {attempts} connect attempts");
    assert!(attempts <= 60, "{attempts} attempts");
    assert!(attempts >= 40, "the cap is 30 min, so about 50: {attempts}");
    assert!(
        delays.windows(2).all(|w| w[0] <= w[1]),
        "un-jittered delays never decrease"
    );
    assert_eq!(*delays.last().unwrap(), Duration::from_secs(1800));
}

#[tokio::test(start_paused = true)]
async fn a_401_is_tried_once_a_day_and_once_more_after_the_credential_changes() {
    let (u, url) = scripted(Mode::Unauthorized).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "old-token").unwrap();
    let gw = start(
        "",
        &http_block(
            "locked",
            &url,
            &format!("bearer_token_file = \"{}\"", token.display()),
        ),
    )
    .await;
    let up = gw.app().router().upstreams()[0].clone();
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await; // not ordering: 24 virtual hours pass
    assert_eq!(
        u.requests.lock().unwrap().len(),
        1,
        "exactly one attempt in 24 h"
    );
    assert!(
        matches!(
            up.status(),
            mcp_edge::upstream::Status::AwaitingCredentials { .. }
        ),
        "{:?}",
        up.status()
    );
    // Calls fail fast, name the upstream, and never leak the challenge.
    let sid = legacy_session(gw.local_addr(), "2025-11-25").await;
    let r = call_tool(
        gw.local_addr(),
        &sid,
        json!(1),
        "locked__hello",
        json!(null),
    )
    .await;
    let msg = r.body["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("'locked'") && msg.contains("credentials"),
        "{msg}"
    );
    assert!(!r.raw.contains("secret-realm"));
    // New credentials: exactly one more attempt. (Their mtime set a second
    // on: a coarse filesystem could give the new file the old one's.)
    let old = std::fs::metadata(&token).unwrap().modified().unwrap();
    std::fs::write(&token, "new-token").unwrap();
    let file = std::fs::File::options().write(true).open(&token).unwrap();
    file.set_modified(old + Duration::from_secs(1)).unwrap();
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await; // not ordering: 24 virtual hours pass
    assert_eq!(u.requests.lock().unwrap().len(), 2);
}

async fn retry_after_is_a_floor(http_date: bool) {
    let (u, url) = scripted(Mode::TooManyThen { http_date }).await;
    let t0 = Instant::now();
    let gw = start_nowait("", &http_block("busy", &url, "")).await;
    let up = gw.app().router().upstreams()[0].clone();
    up.subscribe()
        .wait_for(|s| matches!(s, mcp_edge::upstream::Status::Backoff { .. }))
        .await
        .unwrap();
    // During the window, calls fail fast with the retry time.
    let sid = legacy_session(gw.local_addr(), "2025-11-25").await;
    let r = call_tool(gw.local_addr(), &sid, json!(1), "busy__hello", json!(null)).await;
    let retry = r.body["error"]["data"]["retryAfterSeconds"]
        .as_u64()
        .unwrap_or(0);
    assert!((100..=120).contains(&retry), "{}", r.raw);
    tokio::time::sleep(Duration::from_secs(600)).await; // not ordering: the 600 virtual seconds watched
    let reqs = u.requests.lock().unwrap().clone();
    assert!(reqs.len() >= 2, "connected after the window");
    let second = reqs[1].0 - t0;
    // An HTTP date has whole seconds, and the real clock it is read against
    // moves on between the 429 and its parsing (much more under qemu), so
    // that form may land up to ~2 s short of the 120 s the server meant.
    let floor = if http_date { 118 } else { 119 };
    assert!(
        second >= Duration::from_secs(floor),
        "second request after {second:?}"
    );
    assert!(up.status().is_ready(), "{:?}", up.status());
}

#[tokio::test(start_paused = true)]
async fn retry_after_seconds_is_a_floor() {
    retry_after_is_a_floor(false).await;
}

#[tokio::test(start_paused = true)]
async fn retry_after_http_date_is_a_floor() {
    retry_after_is_a_floor(true).await;
}

#[tokio::test(start_paused = true)]
async fn a_thousand_reconnects_leave_one_monitor_probing_at_its_interval() {
    // (Paused time: in-process and scripted-HTTP upstreams only.)
    let (_u, url) = scripted(Mode::Legacy).await;
    let upstreams =
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\nhealth_interval = \"30s\"\n"
            .to_string()
            + &http_block("remote", &url, "health_interval = \"30s\"");
    let gw = start("", &upstreams).await;
    let ups = gw.app().router().upstreams().to_vec();
    for up in &ups {
        let mut rx = up.subscribe();
        for _ in 0..1000 {
            let n = up.attempts();
            up.force_reconnect();
            while !(up.attempts() == n + 1 && rx.borrow().is_ready()) {
                rx.changed().await.unwrap();
            }
        }
        assert_eq!(
            up.attempts(),
            1001,
            "{}: one attempt per forced reconnect",
            up.name()
        );
    }
    let before: Vec<u64> = ups.iter().map(|u| u.probes().0 + u.probes().1).collect();
    // not ordering: ten virtual health intervals, whose probes are counted
    tokio::time::sleep(Duration::from_secs(10 * 30) + Duration::from_millis(500)).await;
    for (up, b) in ups.iter().zip(before) {
        let probes = up.probes().0 + up.probes().1 - b;
        println!(
            "{}: {probes} probes in 10 intervals after 1,000 reconnects; {} monitor(s)",
            up.name(),
            up.monitors()
        );
        assert!((9..=11).contains(&probes), "{}: {probes} probes", up.name());
        assert_eq!(up.monitors(), 1);
        assert_eq!(up.probes().1, 0, "no missed probes");
    }
    assert_eq!(gw.live_owner_tasks(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_restart_resumes_the_persisted_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let next = std::time::SystemTime::now() + Duration::from_secs(300);
    let ms = next
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    std::fs::write(
        dir.path().join("upstreams.json"),
        json!({"version": 1, "upstreams": {"a": {"failures": 7, "next_attempt_unix_ms": ms, "parked": false, "reason": "refused"}}}).to_string(),
    )
    .unwrap();
    let gw = mcp_edge::gateway::Gateway::start(
        mcp_edge::config::Config::from_toml_str(
            &format!(
                "[server]\nlisten = \"127.0.0.1:0\"\nstate_directory = \"{}\"\n{}",
                dir.path().display(),
                fake_block("a", "legacy", "")
            ),
            &support::origin("t.toml"),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let up = gw.app().router().upstreams()[0].clone();
    tokio::time::sleep(Duration::from_secs(290)).await; // not ordering: virtual time up to just before the persisted attempt
    assert_eq!(up.attempts(), 0, "no attempt before the persisted time");
    tokio::time::sleep(Duration::from_secs(20)).await; // not ordering: virtual time past it
    assert_eq!(up.attempts(), 1);
}

/// Whether process `pid` runs (exists, and is no zombie).
fn running(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next());
    state.is_some_and(|s| s != "Z")
}

/// Real processes and real time: the child's whole process group goes, on
/// stop and on crash; nothing is left as a zombie.
#[tokio::test]
async fn stdio_children_leave_no_process_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!(
        "sleep 1000 & echo $! >> {p}; echo $$ >> {p}; exec python3 {f} --era legacy --name g",
        p = pids.display(),
        f = fake_upstream().display()
    );
    // The sandboxed child writes its pids beside nothing secret: <dir> is granted.
    let block = format!(
        "[[upstream]]\nname = \"g\"\ntransport = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\nbackoff_initial = \"100ms\"\npaths_rw = [{:?}]\n{}\n",
        json!(script),
        dir.path().display().to_string(),
        support::test_grants()
    );
    let gw = start("", &block).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    // Crash: the child exits, its grandchild goes with it, a new child comes.
    let r = call_tool(addr, &sid, json!(1), "g__crash", json!(null)).await;
    assert!(r.body["error"].is_object());
    let up = gw.app().router().upstreams()[0].clone();
    let mut rx = up.subscribe();
    tokio::time::timeout(Duration::from_secs(20), async {
        rx.wait_for(|s| matches!(s, mcp_edge::upstream::Status::Backoff { .. }))
            .await
            .unwrap();
        rx.wait_for(|s| s.is_ready()).await.unwrap();
    })
    .await
    .expect("respawned");
    gw.shutdown().await;
    let all: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    let stopped = || all.iter().all(|pid| !running(*pid));
    eventually_sync(
        "every child and grandchild stopped",
        Duration::from_secs(10),
        stopped,
    )
    .await;
    assert_eq!(
        all.len(),
        4,
        "two generations of child + grandchild (one respawn after the crash): {all:?}"
    );
    let me = std::process::id().to_string();
    for pid in all {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() {
            continue; // gone and reaped
        }
        // Fields after the command: state, ppid.
        let rest: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        let (state, ppid) = (rest[0], rest[1]);
        assert_eq!(state, "Z", "process {pid} is still running: {stat}");
        // A killed grandchild is re-parented to PID 1, whose job reaping it is
        // (systemd does; some sandboxes' PID 1 does not). Never left to us.
        assert_ne!(ppid, me, "zombie {pid} left unreaped by mcp-edge");
        assert_eq!(ppid, "1", "zombie {pid} with parent {ppid}");
    }
}

#[tokio::test]
async fn a_chatty_stdio_upstream_still_works_and_its_noise_is_counted() {
    mcp_edge::metrics::prometheus();
    let script = format!("echo 'Welcome to the server v1.0!'; echo '[info] starting'; exec python3 {} --era legacy --name chatty", fake_upstream().display());
    let block = format!(
        "[[upstream]]\nname = \"chatty\"\ntransport = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\n{}\n",
        json!(script),
        support::test_grants()
    );
    let gw = start("", &block).await;
    let sid = legacy_session(gw.local_addr(), "2025-11-25").await;
    let r = call_tool(
        gw.local_addr(),
        &sid,
        json!(1),
        "chatty__echo",
        json!({"text": "hi"}),
    )
    .await;
    assert_eq!(text_of(&r), "chatty:hi");
    let noise = mcp_edge::metrics::read(mcp_edge::metrics::STDOUT_NOISE, "upstream=\"chatty\"");
    assert!(noise >= 2.0, "{noise}");
}

#[tokio::test(start_paused = true)]
async fn a_restarted_legacy_http_upstream_is_reinitialized_under_a_live_session() {
    let (u, url) = scripted(Mode::Legacy).await;
    // (Paused time: only in-process upstreams, no child processes to wait for.)
    let gw = start(
        "",
        &(http_block("remote", &url, "")
            + "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n"),
    )
    .await;
    let addr = gw.local_addr();
    // One caller declares what mcp-edge's own session declares (its calls
    // go there), one declares nothing (they go to a session of its own).
    let all = json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}});
    let sid = legacy_session_with(addr, "2025-11-25", all.clone()).await;
    let bare = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(addr, &sid, json!(1), "remote__hello", json!(null)).await;
    assert_eq!(text_of(&r), "hello from s0");
    let r = call_tool(addr, &bare, json!(1), "remote__hello", json!(null)).await;
    assert_eq!(text_of(&r), "hello from s1");
    // The upstream restarts: its old sessions are unknown (404) from now on.
    u.restart();
    let r = call_tool(addr, &sid, json!(2), "remote__hello", json!(null)).await;
    assert_eq!(
        text_of(&r),
        "hello from s2",
        "re-initialized once, retried once: {}",
        r.raw
    );
    let r = call_tool(addr, &bare, json!(2), "remote__hello", json!(null)).await;
    assert_eq!(
        text_of(&r),
        "hello from s3",
        "its own session too: {}",
        r.raw
    );
    assert_eq!(
        *u.initialized.lock().unwrap(),
        [all.clone(), json!({}), all, json!({})],
        "each session declared what its callers declared, again after the restart"
    );
    let other = call_tool(addr, &sid, json!(3), "edge__uptime", json!(null)).await;
    assert!(text_of(&other).starts_with("up "), "{}", other.raw);
    assert_eq!(
        gw.app().router().upstreams()[1].attempts(),
        1,
        "the other upstream was untouched"
    );
}

/// A legacy HTTP upstream's GET stream is read (its list_changed refreshes
/// the catalog) and, when the server ends it, asked again only after
/// `health_interval`: one GET per interval, never a tight loop.
#[tokio::test(start_paused = true)]
async fn a_legacy_get_stream_is_read_and_reopened_once_per_interval() {
    let (u, url) = scripted(Mode::LegacyGet).await;
    let gw = start("", &http_block("remote", &url, "health_interval = \"30s\"")).await;
    let count = |what: &str| {
        u.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, m)| m == what)
            .count()
    };
    let (gets0, lists0) = (count("GET"), count("tools/list"));
    // not ordering: ten virtual health intervals, whose GET streams are counted
    tokio::time::sleep(Duration::from_secs(10 * 30) + Duration::from_millis(500)).await;
    let gets = count("GET") - gets0;
    let lists = count("tools/list") - lists0;
    assert!(
        (9..=11).contains(&gets),
        "{gets} GET streams in 10 intervals"
    );
    assert!(
        lists >= gets,
        "each list_changed refreshed the catalog: {lists} lists, {gets} GETs"
    );
    assert_eq!(
        gw.app().router().upstreams()[0].attempts(),
        1,
        "no reconnects"
    );
}

/// A legacy server sends what a session's calls caused (e.g. a tool's
/// `tools/list_changed`) on that session's GET stream, so the session a
/// caller's capability set got of its own has its stream read too, opened
/// once the session is.
#[tokio::test(start_paused = true)]
async fn each_upstream_session_has_its_get_stream_read() {
    let (u, url) = scripted(Mode::LegacyGet).await;
    let gw = start("", &http_block("remote", &url, "health_interval = \"30s\"")).await;
    let addr = gw.local_addr();
    let gets_at_least = |n: usize| {
        let u = &u;
        move || {
            let gets = u.gets.lock().unwrap().clone();
            (gets.len() >= n).then_some(gets)
        }
    };
    let within = Duration::from_secs(10);
    let first = eventually_sync("the first GET stream", within, gets_at_least(1)).await;
    assert_eq!(first, ["s0"], "mcp-edge's own session");
    // A caller that declared nothing: its calls run in a session "s1".
    let bare = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(addr, &bare, json!(1), "remote__hello", json!(null)).await;
    assert_eq!(text_of(&r), "hello from s1", "{}", r.raw);
    let two = eventually_sync(
        "the caller's session's GET stream",
        within,
        gets_at_least(2),
    )
    .await;
    assert_eq!(two, ["s0", "s1"], "its stream opened");
    let lists = |u: &support::scripted::Upstream| {
        let r = u.requests.lock().unwrap();
        r.iter().filter(|(_, m)| m == "tools/list").count()
    };
    let before = lists(&u);
    // Each stream sends a list_changed and ends; both are asked again
    // after the interval, and each list_changed refreshes the catalog.
    tokio::time::sleep(Duration::from_secs(30)).await; // not ordering: one virtual health interval
    let gets = eventually_sync("both streams asked again", within, gets_at_least(4)).await;
    assert_eq!(gets.len(), 4, "{gets:?}");
    assert!(gets[2..].contains(&"s1".to_string()), "{gets:?}");
    assert!(lists(&u) > before, "the catalog was refreshed");
    // The upstream restarts; the caller's next call opens its session anew,
    // and that session's stream is read at once, not an interval later
    // (the old one's was waiting to be asked again). Which number the new
    // session gets depends on whether mcp-edge's own session was opened
    // again first (under qemu it sometimes is), so the test reads it from
    // the answer.
    u.restart();
    let r = call_tool(addr, &bare, json!(2), "remote__hello", json!(null)).await;
    let answered = text_of(&r);
    let new = answered
        .strip_prefix("hello from ")
        .unwrap_or_else(|| panic!("{}", r.raw))
        .to_string();
    assert!(
        !["s0", "s1"].contains(&new.as_str()),
        "a new session: {}",
        r.raw
    );
    eventually_sync("the new session's stream", within, || {
        let gets = u.gets.lock().unwrap().clone();
        gets[4..].contains(&new).then_some(gets)
    })
    .await;
}

/// A legacy HTTP server does not take a closed stream as cancellation, so
/// a call the gateway gives up on (its timeout, or its caller gone) is
/// cancelled with `notifications/cancelled`; an answered call is not.
#[tokio::test(start_paused = true)]
async fn abandoned_calls_on_a_legacy_http_upstream_are_cancelled() {
    let (u, url) = scripted(Mode::Legacy).await;
    let gw = start("", &http_block("remote", &url, "call_timeout = \"2s\"")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let hello = call_tool(addr, &sid, json!(1), "remote__hello", json!(null)).await;
    assert_eq!(text_of(&hello), "hello from s1", "the caller's own session");
    // 1. The call times out downstream.
    let hung = call_tool(addr, &sid, json!(2), "remote__hang", json!(null)).await;
    assert!(hung.raw.contains("did not answer"), "{}", hung.raw);
    // 2. The caller goes away before the answer.
    let up = gw.app().router().upstreams()[0].clone();
    let dropped = tokio::time::timeout(
        Duration::from_millis(500),
        up.call("tools/call", Some(json!({"name": "hang"}))),
    )
    .await;
    assert!(dropped.is_err(), "the hang tool never answers");
    let two_cancelled = || u.cancelled.lock().unwrap().len() >= 2;
    let within = Duration::from_secs(10);
    eventually_sync("both abandoned calls cancelled", within, two_cancelled).await;
    let calls = u.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(
        *u.cancelled.lock().unwrap(),
        [
            (calls[1].clone(), "s1".into()),
            (calls[2].clone(), "s0".into())
        ],
        "exactly the two abandoned calls are cancelled, by the ids the upstream saw, \
         each in the session it was sent in (the caller's; mcp-edge's own)"
    );
}

/// Real binary, real processes: SIGTERM to mcp-edge takes its stdio
/// children's whole process groups with it, and it exits 0.
#[test]
fn sigterm_of_mcp_edge_leaves_no_child_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!(
        "sleep 1000 & echo $! >> {p}; echo $$ >> {p}; exec python3 {f} --era legacy --name g",
        p = pids.display(),
        f = fake_upstream().display()
    );
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        // Unsandboxed: the pid file lies beside the config, out of a sandbox's reach.
        format!("[server]\nlisten = \"127.0.0.1:0\"\n[[upstream]]\nname = \"g\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\nsandbox = \"off\"\n", json!(script)),
    )
    .unwrap();
    let notify = NotifySocket::bind(dir.path(), Duration::from_secs(20));
    let mut child = serve_notified(&cfg, &notify).spawn().unwrap();
    // READY=1: its upstream made its first attempt (and wrote its pids).
    let ready = notify.next();
    assert!(ready.contains("READY=1"), "{ready}");
    let started = std::fs::read_to_string(&pids).map(|s| s.lines().count());
    assert_eq!(started.ok(), Some(2), "the upstream's child and grandchild");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let all: Vec<i32> = (std::fs::read_to_string(&pids).unwrap().lines())
        .map(|l| l.trim().parse().unwrap())
        .collect();
    let stopped = || all.iter().all(|pid| !running(*pid));
    eventually_blocking("the children stopped", Duration::from_secs(10), stopped);
    for pid in std::fs::read_to_string(&pids).unwrap().lines() {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .map(|r| r.1.split_whitespace().next().unwrap_or("").to_string())
            .unwrap_or_default();
        assert!(
            stat.is_empty() || state == "Z",
            "process {pid} still running after SIGTERM: {stat}"
        );
    }
}

/// Credentials in an upstream URL (userinfo, query) never leave the config:
/// not in the error a client gets while the upstream is down, not in `/status`.
#[tokio::test]
async fn a_down_http_upstreams_credentials_stay_secret() {
    let url = "http://user:SECRETPW@127.0.0.1:1/mcp?api_key=SECRETQ";
    let gw = start("", &http_block("h", url, "")).await;
    let addr = gw.local_addr();
    let sid = legacy_session(addr, "2025-11-25").await;
    let r = call_tool(addr, &sid, json!(1), "h__x", json!(null)).await;
    assert!(r.error_code().is_some(), "{}", r.raw);
    assert!(
        r.raw.contains("127.0.0.1:1"),
        "the reason still names the host: {}",
        r.raw
    );
    let status = mcp_edge::downstream::admin::status(gw.app()).to_string();
    for shown in [&r.raw, &status] {
        assert!(!shown.contains("SECRET"), "{shown}");
    }
    gw.shutdown().await;
}
