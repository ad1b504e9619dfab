//! Issue 12 part 4, "no escaped descendants", black-box against the real
//! binary: a stdio upstream's grandchildren that call `setsid` (leaving the
//! upstream's process group) are re-parented to mcp-edge (a child
//! subreaper), reaped when they die, and stopped with the stdio child they
//! came from (its exit, a reload that removes it) and at gateway exit.
//! Processes are read from `/proc` here, independently of `mcp_edge::reaper`.
//!
//! Also issue 23 part 2, "every stdio server in a sandbox": a hostile stdio
//! upstream (`tests/fake/hostile.py`) and a `setsid` grandchild of it try
//! to read the gateway's secrets and environment and to approve tools.
#![allow(clippy::disallowed_methods)] // the gateway is a child process watched in real time

use crate::support;

use crate::support::binary::Running;
use crate::support::{eventually_sync, free_port};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// What a test needs of `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stat {
    state: char,
    ppid: i32,
    sid: i32,
    start: u64,
}

fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: f[0].chars().next()?,
        ppid: f[1].parse().ok()?,
        sid: f[3].parse().ok()?,
        start: f[19].parse().ok()?,
    })
}

/// The process `pid` that started at `start` still runs (not a zombie).
fn alive(pid: i32, start: u64) -> bool {
    stat(pid).is_some_and(|s| s.start == start && s.state != 'Z')
}

/// Zombie children of `parent`.
fn zombies_of(parent: i32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .filter(|s| s.ppid == parent && s.state == 'Z')
        .count()
}

/// The pids written to `path`, one a line (complete lines only).
fn pids_in(path: &Path) -> Vec<i32> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    complete
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A shell line that starts a grandchild in a session of its own
/// (`setsid`, so outside the upstream's process group) that appends its pid
/// to `pids` and sleeps; `env -i` first clears its environment.
fn setsid_sleeper(pids: &Path, clear_env: bool) -> String {
    let env = if clear_env { "env -i " } else { "" };
    format!(
        "setsid {env}sh -c 'echo $$ >> \"$1\"; exec sleep 1000' sh '{}'",
        pids.display()
    )
}

/// Kills, when dropped, the grandchildren named in its files that still run
/// (`sleep 1000`), so a failing test leaves nothing behind either.
struct Leftovers(Vec<std::path::PathBuf>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for pid in self.0.iter().flat_map(|f| pids_in(f)) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline == b"sleep\x001000\x00" {
                // SAFETY: kill(2) on a grandchild this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

fn config(upstreams: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n\n{upstreams}",
        free_port(),
        free_port()
    )
}

/// A stdio upstream running `sh script`. Unsandboxed: these scripts and
/// the pid files they write live next to the config, which a sandboxed
/// child may not reach (the sandbox has its own test below).
fn stdio_block(name: &str, script: &Path, extra: &str) -> String {
    format!(
        "[[upstream]]\nname = \"{name}\"\ntransport = \"stdio\"\ncommand = \"sh\"\nargs = [\"{}\"]\nsandbox = \"off\"\n{extra}\n",
        script.display()
    )
}

/// Counter `name` (no labels, or the label set in `name`) in a `/metrics` text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// What watching a respawning upstream for a while saw.
#[derive(Default)]
struct Watch {
    /// Grandchildren seen running, with their start time.
    seen: BTreeMap<i32, u64>,
    most_alive: usize,
    most_zombies: usize,
}

impl Watch {
    /// One look: new grandchildren (each must lead its own session, i.e.
    /// have left the upstream's process group), how many of them run, and
    /// the gateway's zombie children.
    fn look(&mut self, pids: &Path, gateway: i32) {
        for pid in pids_in(pids) {
            if let Some(s) = stat(pid).filter(|s| s.state != 'Z') {
                if self.seen.insert(pid, s.start).is_none() {
                    assert_eq!(
                        s.sid, pid,
                        "grandchild {pid} did not leave its group: {s:?}"
                    );
                }
            }
        }
        let running = self.seen.iter().filter(|(p, s)| alive(**p, **s)).count();
        self.most_alive = self.most_alive.max(running);
        self.most_zombies = self.most_zombies.max(zombies_of(gateway));
    }
}

/// The acceptance of issue 12 part 4: a stdio upstream that spawns a
/// `setsid` grandchild and exits, respawned again and again (watched until
/// six of its grandchildren were seen running, about 7 s), leaves no process
/// behind once the gateway stops; while it runs, each incarnation's
/// grandchild goes with it and no zombies pile up.
#[tokio::test]
async fn setsid_grandchildren_of_a_respawning_upstream_do_not_outlive_it() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("grandchildren");
    let _leftovers = Leftovers(vec![pids.clone()]);
    let script = dir.path().join("escaper.sh");
    let body = format!("{} &\nsleep 1\nexit 3\n", setsid_sleeper(&pids, false));
    std::fs::write(&script, body).unwrap();
    let backoff = "backoff_initial = \"100ms\"\nbackoff_factor = 1.0\nbackoff_cap = \"1s\"";
    let mut gw = Running::start(
        dir.path(),
        &config(&stdio_block("escaper", &script, backoff)),
    )
    .await;
    let gateway = gw.pid();

    let mut watch = Watch::default();
    let six_seen = || {
        watch.look(&pids, gateway);
        match watch.seen.len() {
            6.. => Ok(()),
            n => Err(format!("{n} seen: {:?}", pids_in(&pids))),
        }
    };
    let within = Duration::from_secs(60);
    eventually_sync("six grandchildren seen running", within, six_seen).await;
    // Stop while a grandchild runs, so the stop has one to end.
    let newest_running = || {
        watch.look(&pids, gateway);
        let last = pids_in(&pids).last().copied();
        let (pid, start) = last.and_then(|p| Some((p, *watch.seen.get(&p)?)))?;
        alive(pid, start).then_some(pid)
    };
    let newest = eventually_sync("a running grandchild", within, newest_running).await;
    let metrics = gw.metrics().await;
    let status = gw.terminate().await;
    assert!(status.success(), "{status}: {}", gw.log_text());

    // The reaper never took a stdio child's exit status from tokio: each
    // incarnation's end was read as its exit code.
    let log = gw.log_text();
    let exits = log.matches("process exited (exit status: 3)").count();
    assert!(!log.contains("waiting for process"), "{log}");

    // Every incarnation started before the metrics were read (each one a
    // connect attempt, whatever its outcome) had its exit read, but for the
    // last, which may still have been running then.
    let started: f64 = (metrics.lines())
        .filter(|l| l.starts_with("mcp_edge_upstream_connects_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<f64>().ok())
        .sum();
    let started = started as usize;
    let recorded = pids_in(&pids);
    let seen = watch.seen.len();
    eprintln!(
        "{started} incarnations started, {exits} exits of the upstream read, {} grandchildren recorded, {seen} seen running (each in its own session); at most {} running and {} zombie children at once; newest {newest}",
        recorded.len(),
        watch.most_alive,
        watch.most_zombies
    );
    assert!(
        seen >= 5,
        "only {seen} grandchildren seen running: {recorded:?}"
    );
    assert!(started >= 5, "only {started} incarnations: {metrics}");
    assert!(
        exits + 1 >= started,
        "{started} incarnations started but only {exits} exit statuses read: {log}"
    );
    let left: Vec<i32> = (watch.seen.iter())
        .filter(|(p, s)| alive(**p, **s))
        .map(|(p, _)| *p)
        .collect();
    assert!(
        left.is_empty(),
        "grandchildren outlived the gateway: {left:?}"
    );
    assert!(
        watch.most_alive <= 2,
        "{} grandchildren ran at once: an incarnation's were not stopped with it",
        watch.most_alive
    );
    assert!(
        watch.most_zombies <= 2,
        "{} zombie children at once",
        watch.most_zombies
    );
    let reaped = metric(&metrics, "mcp_edge_orphans_reaped_total");
    let termed = metric(
        &metrics,
        "mcp_edge_descendants_signalled_total{signal=\"TERM\"}",
    );
    assert!(reaped >= 4.0 && termed >= 4.0, "{metrics}");
}

/// Waits (up to 10 s) until `path` names a running process whose parent is
/// `gateway` (re-parented to the subreaper) and that leads its own session.
async fn orphan_in(path: &Path, gateway: i32) -> (i32, u64) {
    let orphan = || {
        let pid = *pids_in(path).first()?;
        let s = stat(pid)?;
        (s.ppid == gateway && s.sid == pid && s.state != 'Z').then_some((pid, s.start))
    };
    let what = format!("an orphan of {gateway} in {}", path.display());
    eventually_sync(&what, Duration::from_secs(10), orphan).await
}

/// A stopped stdio upstream takes its escaped grandchildren with it while
/// the gateway keeps running; another upstream's stay, and at exit the
/// gateway stops them all, even one that cleared its environment.
#[tokio::test]
async fn a_reload_that_removes_an_upstream_stops_its_escaped_grandchildren() {
    let dir = tempfile::tempdir().unwrap();
    let fake = support::fake_upstream();
    let file = |name: &str| dir.path().join(name);
    let _leftovers = Leftovers(["gone.pids", "keep.pids", "bare.pids"].map(file).to_vec());
    let script = |name: &str, sleepers: &[(&str, bool)]| {
        let mut body = String::new();
        for (pids, clear) in sleepers {
            // The subshell exits at once: the grandchild is orphaned now.
            body += &format!("( {} & )\n", setsid_sleeper(&file(pids), *clear));
        }
        body += &format!(
            "exec python3 '{}' --era legacy --name {name}\n",
            fake.display()
        );
        let path = file(&format!("{name}.sh"));
        std::fs::write(&path, body).unwrap();
        path
    };
    let gone = stdio_block("gone", &script("gone", &[("gone.pids", false)]), "");
    let keep_script = script("keep", &[("keep.pids", false), ("bare.pids", true)]);
    let keep = stdio_block("keep", &keep_script, "");
    let mut gw = Running::start(dir.path(), &config(&format!("{gone}\n{keep}"))).await;
    let gateway = gw.pid();
    let gone_orphan = orphan_in(&file("gone.pids"), gateway).await;
    let keep_orphan = orphan_in(&file("keep.pids"), gateway).await;
    let bare_orphan = orphan_in(&file("bare.pids"), gateway).await;

    // Reload without "gone".
    let text = std::fs::read_to_string(&gw.config).unwrap();
    let without = text.replace(&gone, "");
    assert_ne!(text, without);
    std::fs::write(&gw.config, without).unwrap();
    let note = gw.reload().await;
    assert_eq!(note["rejected"], false, "{note}");
    let gone = || match alive(gone_orphan.0, gone_orphan.1) {
        true => Err(gw.log_text()),
        false => Ok(()),
    };
    let what = format!("the removed upstream's grandchild {gone_orphan:?} gone");
    eventually_sync(&what, Duration::from_secs(10), gone).await;
    assert!(gw.running(), "the gateway stopped: {}", gw.log_text());
    let status = gw.status().await;
    let names: Vec<&str> = (status["upstreams"].as_array().unwrap().iter())
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["keep"], "{status}");
    assert!(
        alive(keep_orphan.0, keep_orphan.1),
        "another upstream's grandchild was stopped"
    );
    assert!(
        alive(bare_orphan.0, bare_orphan.1),
        "another upstream's grandchild was stopped"
    );

    let exit = gw.terminate().await;
    assert!(exit.success(), "{exit}: {}", gw.log_text());
    for (what, (pid, start)) in [
        ("marked", keep_orphan),
        ("environment cleared", bare_orphan),
    ] {
        assert!(
            !alive(pid, start),
            "{what} grandchild {pid} outlived the gateway"
        );
    }
}

/// One line of `tests/fake/hostile.py`'s report.
fn hostile_report(home: &Path, who: &str) -> Vec<serde_json::Value> {
    let path = home.join(format!("hostile-{who}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The secrets a hostile child goes after, laid out as a systemd service
/// has them: `<base>/creds` (`$CREDENTIALS_DIRECTORY`: a client token, the
/// TLS key), `<base>/etc/config.toml`, `<base>/state/tool-pins.json`,
/// `<base>/log/audit.log`, and a `[[client]] token_file` of its own,
/// `<base>/client.token` (0600).
fn hostile_layout(base: &Path) -> Vec<(&'static str, std::path::PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    for d in ["creds", "etc", "state", "log"] {
        std::fs::create_dir_all(base.join(d)).unwrap();
    }
    let files = [
        (
            "credential_token",
            "creds/client-token",
            "tok-SECRET-0123456789abcdef",
        ),
        (
            "tls_key",
            "creds/tls.key",
            "-----BEGIN PRIVATE KEY-----SECRET",
        ),
        (
            "pins_file",
            "state/tool-pins.json",
            r#"{"version": 1, "upstreams": {"other": {"t": "abc"}}}"#,
        ),
        ("audit_log", "log/audit.log", "{\"secret\": \"audit\"}\n"),
        (
            "client_token_file",
            "client.token",
            "cWsWlSxcx25du_GAHgSvjCkb0Cg_Kam_pAn_JUCI",
        ),
    ];
    let mut out: Vec<_> = files
        .iter()
        .map(|(what, rel, body)| {
            std::fs::write(base.join(rel), body).unwrap();
            (*what, base.join(rel))
        })
        .collect();
    let token = base.join("client.token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    out.push(("config_file", base.join("etc/config.toml")));
    out
}

/// What one run of the hostile fixture left: `/status` and the child's
/// and the grandchild's reports.
struct HostileRun {
    status: serde_json::Value,
    reports: Vec<serde_json::Value>,
}

/// Runs the gateway binary, with `$CREDENTIALS_DIRECTORY` and a secret in
/// its environment, in front of `tests/fake/hostile.py` (`sandbox_keys` in
/// its `[[upstream]]`), until the grandchild has reported.
async fn run_hostile(base: &Path, sandbox_keys: &str) -> HostileRun {
    let targets = hostile_layout(base);
    let (creds, state) = (base.join("creds"), base.join("state"));
    let admin_port = free_port();
    let mut args: Vec<String> = vec![support::repo_path("tests/fake/hostile.py")];
    for (flag, value) in [
        ("--creds", creds.display().to_string()),
        (
            "--admin-socket",
            state.join("admin.sock").display().to_string(),
        ),
        ("--admin", format!("127.0.0.1:{admin_port}")),
    ] {
        args.extend([flag.to_string(), value]);
    }
    for (what, path) in &targets {
        args.extend(["--target".into(), format!("{what}={}", path.display())]);
    }
    args.extend(["--then".into(), support::python_executable()]);
    args.push(support::fake_upstream().display().to_string());
    args.extend(["--era", "legacy", "--name", "hostile"].map(String::from));
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{admin_port}\"\n\
         state_directory = {state:?}\n\n[audit]\npath = {:?}\n\n\
         [[client]]\nname = \"operator\"\ntoken_file = {:?}\n\n\
         [[upstream]]\nname = \"hostile\"\ncommand = \"python3\"\nargs = {}\ntrust = \"pin\"\n{sandbox_keys}\n",
        free_port(),
        base.join("log/audit.log"),
        base.join("client.token"),
        serde_json::to_string(&args).unwrap(),
    );
    let secret = Path::new("hunter2-gateway-environment-secret");
    let env = [
        ("CREDENTIALS_DIRECTORY", creds.as_path()),
        ("MCP_EDGE_TEST_SECRET", secret),
    ];
    let mut gw = Running::start_with_env(&base.join("etc"), &config, &env).await;
    let home = state.join("children/hostile");
    let reported = || match hostile_report(&home, "grandchild").is_empty() {
        true => Err(gw.log_text()),
        false => Ok(()),
    };
    eventually_sync("the grandchild's report", Duration::from_secs(20), reported).await;
    let status = gw.status().await;
    let gateway = gw.pid();
    gw.terminate().await;
    let mut reports = hostile_report(&home, "child");
    let grandchild = hostile_report(&home, "grandchild");
    assert!(
        !reports.is_empty() && !grandchild.is_empty(),
        "no report: {}",
        gw.log_text()
    );
    // Its parent had exited: it was re-parented to the gateway (the child
    // subreaper) before its attempts.
    for a in &grandchild {
        assert_eq!(a["ppid"], gateway, "grandchild not orphaned: {a}");
    }
    reports.extend(grandchild);
    for a in &reports {
        println!("{} {} {}: {}", a["who"], a["what"], a["path"], a["detail"]);
    }
    HostileRun { status, reports }
}

/// The acceptance of issue 23 part 2 (its Landlock half): every attempt of
/// the hostile child and of its `setsid` grandchild to read a secret or the
/// gateway's environment fails, and so does every attempt to approve a tool
/// (the operator socket refuses a descendant; the TCP listener is
/// read-only). Without Landlock the parts that need it are skipped.
#[tokio::test]
async fn a_hostile_stdio_upstream_and_its_grandchild_reach_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let abi = mcp_edge::sandbox::kernel_abi();
    match abi {
        Ok(v) => println!("Landlock ABI {v}"),
        Err(why) => println!("Landlock unavailable ({why}): the parts that need it are SKIPPED"),
    }
    let run = run_hostile(dir.path(), &support::test_grants()).await;
    let sandbox = &run.status["upstreams"][0]["sandbox"];
    println!("sandbox of the hostile upstream: {sandbox:#}");
    let mut leaks = Vec::new();
    for a in &run.reports {
        let (what, ok) = (a["what"].as_str().unwrap(), a["ok"] == true);
        let landlock_part = !matches!(what, "admin_socket" | "tcp_approve" | "own_environment");
        if !landlock_part {
            assert!(!ok, "{} {what}: not refused: {a}", a["who"]);
        } else if what == "own_environment" {
            assert!(!ok, "the child's environment has mcp-edge's variables: {a}");
        } else if landlock_part && abi.is_err() {
            println!("SKIPPED (needs Landlock): {} {what}", a["who"]);
        } else if landlock_part && ok {
            leaks.push(a.to_string());
        }
    }
    assert!(leaks.is_empty(), "reached:\n{}", leaks.join("\n"));
    if let Ok(v) = abi {
        assert_eq!(sandbox["landlock"]["abi"], v, "{sandbox}");
        assert_eq!(sandbox["mode"], "strict");
    }
}

/// The control: with `sandbox = "off"` the same fixture reads the secrets
/// and the gateway's environment (its attempts can succeed, so their
/// failure above is the sandbox's doing); its own environment stays
/// explicit even then.
#[tokio::test]
async fn without_the_sandbox_the_hostile_fixture_reads_the_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_hostile(dir.path(), "sandbox = \"off\"").await;
    let ok = |who: &str, what: &str| {
        run.reports
            .iter()
            .find(|a| a["who"] == who && a["what"] == what)
            .map(|a| a["ok"] == true)
    };
    for who in ["child", "grandchild"] {
        for what in [
            "credential_token",
            "tls_key",
            "config_file",
            "gateway_environ",
        ] {
            assert_eq!(ok(who, what), Some(true), "{who} {what}");
        }
        assert_eq!(ok(who, "own_environment"), Some(false), "{who}");
        // Approval is refused without the sandbox too: by the peer check.
        assert_eq!(ok(who, "admin_socket"), Some(false), "{who}");
        assert_eq!(ok(who, "tcp_approve"), Some(false), "{who}");
    }
    assert_eq!(run.status["upstreams"][0]["sandbox"]["mode"], "off");
}

/// Removes a directory made for one test, even when the test panics.
struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Review of issue 23, finding 1: the config, the state directory, the
/// audit log, the credentials and a client's `token_file` all lie beneath
/// `/opt`, which the default grant covers (a usual hand install). The
/// default grant is split around them: every read attempt still fails, and
/// `/status` says how `/opt` was granted.
#[tokio::test]
async fn a_hostile_child_reaches_no_secret_beneath_a_default_grant() {
    let abi = mcp_edge::sandbox::kernel_abi();
    let opt = Path::new("/opt");
    if abi.is_err() || !opt.is_dir() {
        println!("SKIPPED: needs Landlock ({abi:?}) and /opt");
        return;
    }
    let base = opt.join(format!("mcp-edge-test-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let _remove = RemoveDir(base.clone());
    let run = run_hostile(&base, &support::test_grants()).await;
    let sandbox = &run.status["upstreams"][0]["sandbox"];
    println!("sandbox of the hostile upstream: {sandbox:#}");
    let split = sandbox["split"].to_string();
    assert!(
        split.contains(&format!("/opt split around {}", base.display())),
        "{sandbox}"
    );
    assert_eq!(sandbox["refused"], serde_json::json!([]), "{sandbox}");
    assert_eq!(sandbox["enforced"], "full", "{sandbox}");
    let mut tried = 0;
    for a in &run.reports {
        let what = a["what"].as_str().unwrap();
        assert!(a["ok"] == false, "{} {what}: reached: {a}", a["who"]);
        tried += usize::from(
            a["path"]
                .as_str()
                .unwrap()
                .starts_with(&*base.to_string_lossy()),
        );
    }
    // Child and grandchild each: five files, the credentials, the socket.
    assert!(tried >= 14, "{tried} attempts beneath {}", base.display());
}

/// Issue 23 part 2: `python3` and `node` from the system serve a real MCP
/// stdio server unchanged under the default sandbox (no `paths_ro`): the
/// server script lives in the child's working directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python3_and_node_serve_unchanged_under_the_default_sandbox() {
    let work = tempfile::tempdir().unwrap();
    let node_ok = std::process::Command::new("node")
        .arg("-v")
        .output()
        .is_ok();
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        println!("SKIPPED: no /usr/bin/python3");
        return;
    }
    std::fs::copy(support::fake_upstream(), work.path().join("server.py")).unwrap();
    std::fs::copy(
        support::repo_path("tests/fake/hello_node.js"),
        work.path().join("server.js"),
    )
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let cwd = work.path().display();
    let mut upstreams = format!(
        "[[upstream]]\nname = \"py\"\ncommand = \"{}\"\nargs = [\"server.py\", \"--era\", \"legacy\", \"--name\", \"py\"]\ncwd = \"{cwd}\"\n",
        python.display()
    );
    if node_ok {
        upstreams += &format!(
            "\n[[upstream]]\nname = \"js\"\ncommand = \"node\"\nargs = [\"server.js\"]\ncwd = \"{cwd}\"\n"
        );
    } else {
        println!("SKIPPED (node part): no node on PATH");
    }
    let server = format!("state_directory = \"{}\"", state.path().display());
    let gw = support::start(&server, &upstreams).await;
    assert_eq!(gw.ready_upstreams(), 1 + usize::from(node_ok));
    let addr = gw.local_addr();
    let sid = support::legacy_session(addr, "2025-11-25").await;
    let r = support::call_tool(
        addr,
        &sid,
        1.into(),
        "py__echo",
        serde_json::json!({"text": "hi"}),
    )
    .await;
    assert_eq!(support::text_of(&r), "py:hi", "{:?}", r.body);
    if node_ok {
        let r =
            support::call_tool(addr, &sid, 2.into(), "js__hello", serde_json::Value::Null).await;
        let text = support::text_of(&r);
        println!("{text}");
        assert!(
            text.starts_with("hello from node") && text.contains("rss true"),
            "{:?}",
            r.body
        );
        let home = state.path().join("children/js");
        assert!(text.ends_with(&home.display().to_string()), "{text}");
    }
}

/// A grant that a child turns into a symlink to the state directory (its
/// own `paths_rw` lets it) grants nothing at its next start: each grant is
/// checked where it is opened (found by a new user's trial of issue 23).
#[tokio::test]
async fn a_grant_a_child_turned_into_a_symlink_grants_nothing() {
    if let Err(why) = mcp_edge::sandbox::kernel_abi() {
        println!("SKIPPED: Landlock unavailable ({why}): nothing is granted or refused");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (data, state) = (dir.path().join("data"), dir.path().join("state"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("tool-pins.json"), "{}").unwrap();
    let sub = data.join("sub");
    let args = serde_json::json!([
        support::repo_path("tests/fake/symlink_grant.py"),
        sub,
        state,
        "--",
        support::fake_upstream(),
        "--name",
        "evil"
    ]);
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\nstate_directory = {state:?}\n\n\
         [[upstream]]\nname = \"evil\"\ncommand = \"python3\"\nargs = {args}\nbackoff_initial = \"100ms\"\n\
         paths_rw = [{data:?}, {sub:?}]\n{}\n",
        free_port(),
        free_port(),
        support::test_grants(),
    );
    let etc = dir.path().join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    let gw = Running::start(&etc, &config).await;
    let report = state.join("children/evil/report.txt");
    let written = || {
        let text = std::fs::read_to_string(&report).unwrap_or_default();
        (!text.is_empty()).then_some(text)
    };
    let got = eventually_sync("the child's report", Duration::from_secs(20), written).await;
    assert!(std::fs::symlink_metadata(&sub).unwrap().is_symlink());
    assert!(got.starts_with("DENIED"), "{got}\n{}", gw.log_text());
    let m = gw.metrics().await;
    let escaped = "mcp_edge_sandbox_degraded_total{upstream=\"evil\",reason=\"grant_escaped\"}";
    assert!(m.lines().any(|l| l.starts_with(escaped)), "{m}");
}
