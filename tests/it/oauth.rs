//! Issue 22, end to end against real peers: mcp-edge (the binary) in front of
//! an MCP server that is an OAuth resource server, with tokens from a real
//! authorization server library.
//!
//! - Authorization server: npm `oidc-provider` 9.13.3 (certified OpenID/OAuth
//!   server) on Node 22, configured by `tests/interop/oauth_as.mjs`: client
//!   `edge-box-17` (client_secret_basic; client_credentials, authorization_code,
//!   refresh_token), RFC 8707 resource indicators issuing ES256 JWT access
//!   tokens whose `aud` is the MCP server's URL, 10-second access tokens
//!   unless a test says otherwise, refresh tokens rotated on every use where a
//!   test asks (reuse of a rotated one revokes the grant: oidc-provider's own
//!   refresh_token grant). Every token-endpoint request is counted from the
//!   provider's own Koa app and events (JSON lines in `as-events.jsonl`).
//! - MCP server: Python SDK mcp 1.30 FastMCP with its auth support
//!   (`tests/interop/oauth_mcp_server.py`): protected-resource metadata, 401
//!   with `WWW-Authenticate: Bearer … resource_metadata=…`, and a
//!   TokenVerifier over PyJWT that checks signature (the AS's JWKS), issuer,
//!   audience = its own URL and expiry; `/stats` counts what it accepted and
//!   refused.
//! - mcp-edge: `[upstream.oauth]` as users write it, driven with raw JSON-RPC
//!   over HTTP in legacy sessions (`crm__echo`).
//!
//! Each scenario is its own test (nextest runs them in parallel); each takes
//! the real time its acceptance bullet names (60 s of calls, a 20-second
//! outage, 30 s with a wrong secret). Assertions are about behaviour and
//! counts; the only time bounds are the ones the bullets state ("fail fast",
//! "succeed again within seconds"), with wide margins.
//!
//! Peers: `tests/interop/setup.sh` (Node 22 in `.node22`, oidc-provider in
//! `.oauth`, mcp 1.30 in `.venv1`).
#![allow(clippy::disallowed_methods)] // peers are child processes waited for in real time

use crate::support;

use crate::support::binary::{check_config, Running};
use crate::support::peers::{interop_dir, python_v1, KillOnDrop};
use crate::support::{call_tool, eventually, free_port, legacy_session};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The client secret registered at the authorization server.
const SECRET: &str = "cs-7f3a9b2e41d84c6a-edge-box-17-secret";
/// The refresh point of mcp-edge: three quarters of a token's lifetime.
const REFRESH_AT: f64 = 0.75;

// ------------------------------------------------------------------ peers

/// Spawns `cmd` with its output appended to `log` and waits until
/// 127.0.0.1:`port` accepts connections.
async fn spawn_listening(name: &str, mut cmd: Command, port: u16, log: &Path) -> KillOnDrop {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    // (A test process killed half-way leaves no peer behind.)
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = KillOnDrop(cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}")));
    let what = format!("{name} listening on {port}");
    let listening = || {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "{name} exited ({status}) before listening on {port}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        async move {
            match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                Ok(_) => Ok(()),
                Err(e) => Err(format!(
                    "{e}: {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )),
            }
        }
    };
    eventually(&what, Duration::from_secs(60), listening).await;
    child
}

/// oidc-provider, run by `oauth_as.mjs` on Node 22; can be stopped and
/// started again on the same port with the same signing key.
struct AuthServer {
    child: Option<KillOnDrop>,
    port: u16,
    config: PathBuf,
    events: PathBuf,
    log: PathBuf,
}

impl AuthServer {
    /// Starts it for the MCP server at `resource`, with `ttl`-second access
    /// tokens, rotating refresh tokens if `rotate`.
    async fn start(dir: &Path, port: u16, resource: &str, ttl: u64, rotate: bool) -> AuthServer {
        let config = dir.join("as.json");
        let cfg = json!({
            "port": port,
            "resource": resource,
            "ttl": ttl,
            "client_secret": SECRET,
            "redirect_uri": format!("http://127.0.0.1:{}/callback", free_port()),
            "rotate": rotate,
            "jwks_file": dir.join("as-key.json"),
            "events_file": dir.join("as-events.jsonl"),
        });
        std::fs::write(&config, cfg.to_string()).unwrap();
        let mut s = AuthServer {
            child: None,
            port,
            config,
            events: dir.join("as-events.jsonl"),
            log: dir.join("as.log"),
        };
        s.run().await;
        s
    }

    async fn run(&mut self) {
        let mut cmd = Command::new(node22());
        cmd.arg(interop_dir().join("oauth_as.mjs"))
            .arg(&self.config);
        let lib = interop_dir().join(".oauth/node_modules/oidc-provider");
        assert!(
            lib.exists(),
            "oidc-provider not found at {}: run tests/interop/setup.sh",
            lib.display()
        );
        self.child = Some(spawn_listening("oidc-provider", cmd, self.port, &self.log).await);
    }

    /// Kills it (its in-memory state goes; the key file stays).
    fn stop(&mut self) {
        self.child = None;
    }

    fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every line of its event file (a line being written as it is read is
    /// left for the next read).
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The token-endpoint requests it answered.
    fn token_requests(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["ev"] == "token")
            .collect()
    }

    /// Every access and refresh token it issued.
    fn issued(&self) -> Vec<String> {
        let mut v = Vec::new();
        for e in self.token_requests() {
            for k in ["access_token", "refresh_token"] {
                if let Some(t) = e[k].as_str() {
                    v.push(t.to_string());
                }
            }
        }
        v
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn node22() -> PathBuf {
    let n = interop_dir().join(".node22/bin/node");
    assert!(
        n.exists(),
        "Node 22 not found at {}: run tests/interop/setup.sh",
        n.display()
    );
    n
}

/// The OAuth-protected MCP server (`oauth_mcp_server.py`).
struct McpServer {
    _child: KillOnDrop,
    port: u16,
}

impl McpServer {
    async fn start(dir: &Path, port: u16, issuer: &str, flags: &[&str]) -> McpServer {
        let mut cmd = Command::new(python_v1());
        cmd.arg(interop_dir().join("oauth_mcp_server.py"))
            .arg(port.to_string())
            .arg(issuer)
            .args(flags);
        let log = dir.join("mcp-server.log");
        let child = spawn_listening("oauth_mcp_server.py", cmd, port, &log).await;
        McpServer {
            _child: child,
            port,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Its counters: `accepted`, `expired`, `wrong_audience`, `invalid`,
    /// `echo_calls`, `mcp_status`.
    async fn stats(&self) -> Value {
        let (code, body) =
            support::binary::admin_get(([127, 0, 0, 1], self.port).into(), "/stats").await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }
}

/// An authorization server and the MCP server it protects, on free ports.
async fn peers(dir: &Path, ttl: u64, rotate: bool) -> (AuthServer, McpServer) {
    peers_with(dir, ttl, rotate, &[]).await
}

async fn peers_with(dir: &Path, ttl: u64, rotate: bool, flags: &[&str]) -> (AuthServer, McpServer) {
    let (as_port, mcp_port) = (free_port(), free_port());
    let resource = format!("http://127.0.0.1:{mcp_port}/mcp");
    let auth = AuthServer::start(dir, as_port, &resource, ttl, rotate).await;
    let mcp = McpServer::start(dir, mcp_port, &auth.issuer(), flags).await;
    (auth, mcp)
}

// ------------------------------------------------------------------ gateway

/// The config users write: one HTTP upstream `crm` with `[upstream.oauth]`.
fn gateway_config(state: &Path, mcp_url: &str, secret_file: &Path, grant: &str) -> String {
    let scopes = if grant == "client_credentials" {
        "scopes = [\"mcp:tools\"]\n"
    } else {
        ""
    };
    format!(
        r#"[server]
listen = "127.0.0.1:{}"
admin_listen = "127.0.0.1:{}"
state_directory = "{}"

[[upstream]]
name = "crm"
transport = "http"
url = "{mcp_url}"

[upstream.oauth]
grant = "{grant}"
client_id = "edge-box-17"
client_secret_file = "{}"
{scopes}"#,
        free_port(),
        free_port(),
        state.display(),
        secret_file.display(),
    )
}

fn write_secret(path: &Path, secret: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// One `crm__echo` call and how it went.
#[derive(Debug)]
struct Outcome {
    /// Since the scenario's start.
    at: Duration,
    latency: Duration,
    /// `None`: the text came back; else the JSON-RPC error (or the raw answer).
    error: Option<Value>,
}

/// Calls `crm__echo` in session `sid`; `None` when it echoed `text`.
async fn echo(addr: SocketAddr, sid: &str, id: u64, text: &str) -> Option<Value> {
    let call = call_tool(addr, sid, json!(id), "crm__echo", json!({"text": text}));
    let r = match tokio::time::timeout(Duration::from_secs(90), call).await {
        Ok(r) => r,
        Err(_) => return Some(json!("no answer within 90 s")),
    };
    if r.body["result"]["content"][0]["text"] == text && r.body["result"]["isError"] != true {
        return None;
    }
    Some(if r.body["error"].is_object() {
        r.body["error"].clone()
    } else {
        json!(r.raw)
    })
}

/// `callers` legacy sessions calling `crm__echo` over and over with `pause`
/// between calls until `until`; every outcome.
async fn call_loop(
    addr: SocketAddr,
    callers: usize,
    pause: Duration,
    start: Instant,
    until: Instant,
) -> Vec<Outcome> {
    let mut set = tokio::task::JoinSet::new();
    for c in 0..callers {
        set.spawn(async move {
            let sid = legacy_session(addr, "2025-11-25").await;
            let mut out = Vec::new();
            let mut i = 0u64;
            while Instant::now() < until {
                i += 1;
                let t = Instant::now();
                let error = echo(addr, &sid, i, &format!("caller {c} call {i}")).await;
                out.push(Outcome {
                    at: t - start,
                    latency: t.elapsed(),
                    error,
                });
                tokio::time::sleep(pause).await; // not ordering: each caller's pace
            }
            out
        });
    }
    let mut all = Vec::new();
    while let Some(r) = set.join_next().await {
        all.extend(r.unwrap());
    }
    all.sort_by_key(|o| o.at);
    all
}

/// The upstream's `oauth` object in `/status`.
async fn oauth_status(gw: &Running) -> Value {
    let s = gw.status().await;
    s["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "crm")
        .unwrap_or_else(|| panic!("no upstream crm in {s}"))["oauth"]
        .clone()
}

/// `mcp_edge_oauth_requests_total{upstream="crm",outcome=…}` summed over
/// the outcomes `keep` accepts.
fn oauth_requests(metrics: &str, keep: impl Fn(&str) -> bool) -> u64 {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("mcp_edge_oauth_requests_total{"))
        .filter(|l| l.contains("upstream=\"crm\""))
        .filter_map(|l| {
            let outcome = l.split("outcome=\"").nth(1)?.split('"').next()?;
            let n: f64 = l.rsplit(' ').next()?.trim().parse().ok()?;
            keep(outcome).then_some(n as u64)
        })
        .sum()
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Token-endpoint requests whose time is within `from..=to` (Unix ms).
fn between(events: &[Value], from: u64, to: u64) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| (from..=to).contains(&e["t"].as_u64().unwrap()))
        .collect()
}

/// Token-endpoint requests as `grant_type outcome (detail)`, without tokens.
fn brief<'a>(events: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
    events
        .into_iter()
        .map(|e| {
            let g = e["grant_type"].as_str().unwrap_or("-");
            let o = e["outcome"].as_str().unwrap_or("-");
            match e["detail"].as_str().or(e["description"].as_str()) {
                Some(d) => format!("{g} {o} ({d})"),
                None => format!("{g} {o}"),
            }
        })
        .collect()
}

fn summary(outcomes: &[Outcome]) -> String {
    let failed: Vec<_> = outcomes.iter().filter(|o| o.error.is_some()).collect();
    format!(
        "{} calls, {} failed; first failures: {:?}",
        outcomes.len(),
        failed.len(),
        failed.iter().take(3).collect::<Vec<_>>()
    )
}

// ------------------------------------------------------------------ no secret shown

/// Fails naming where, if any of `secrets` (or, for a JWT, its signature)
/// appears in any of `texts`.
fn assert_not_shown(texts: &[(&str, String)], secrets: &[String]) {
    let mut needles: Vec<(String, String)> = Vec::new();
    for s in secrets.iter().filter(|s| s.len() >= 16) {
        let shown = format!("{}…({} chars)", &s[..6], s.len());
        needles.push((s.clone(), shown.clone()));
        if let Some(sig) = s.rsplit('.').next().filter(|g| g.len() >= 32 && *g != s) {
            needles.push((sig.to_string(), format!("signature of {shown}")));
        }
    }
    assert!(!needles.is_empty());
    for (what, text) in texts {
        for (needle, shown) in &needles {
            assert!(
                !text.contains(needle.as_str()),
                "{what} shows a secret: {shown}"
            );
        }
    }
}

/// The gateway's log, `/status`, `/metrics`, `mcp-edge status` and
/// `check-config` output: none may hold a token or the secret.
async fn assert_gateway_shows_no_secret(gw: &Running, secrets: &[String]) {
    let status = gw.status().await.to_string();
    let metrics = gw.metrics().await;
    let (ok, checked) = check_config(&gw.config);
    assert!(ok, "check-config: {checked}");
    let cli = support::gateway_command()
        .args(["status", "--config"])
        .arg(&gw.config)
        .output()
        .unwrap();
    let cli = format!(
        "{}{}",
        String::from_utf8_lossy(&cli.stdout),
        String::from_utf8_lossy(&cli.stderr)
    );
    assert!(cli.contains("crm"), "mcp-edge status: {cli}");
    assert_not_shown(
        &[
            ("the gateway's log (RUST_LOG=debug)", gw.log_text()),
            ("/status", status),
            ("/metrics", metrics),
            ("check-config", checked),
            ("mcp-edge status", cli),
        ],
        secrets,
    );
}

fn with_secret(mut issued: Vec<String>) -> Vec<String> {
    issued.push(SECRET.to_string());
    issued
}

// ------------------------------------------------------------------ scenarios

/// "With 10-second access tokens, 60 s of calls through mcp-edge all
/// succeed, and the token endpoint sees a number of requests close to
/// 60 s / the refresh point."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_seconds_of_calls_with_ten_second_tokens_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let (auth, mcp) = peers(dir.path(), 10, false).await;
    write_secret(&dir.path().join("secret"), SECRET);
    let cfg = gateway_config(
        &dir.path().join("state"),
        &mcp.url(),
        &dir.path().join("secret"),
        "client_credentials",
    );
    let began = unix_ms();
    let gw = Running::start(dir.path(), &cfg).await;

    let start = Instant::now();
    let outcomes = call_loop(
        gw.addr,
        3,
        Duration::from_millis(150),
        start,
        start + Duration::from_secs(60),
    )
    .await;
    let ended = unix_ms();
    assert!(
        outcomes.iter().all(|o| o.error.is_none()),
        "{}\n{}",
        summary(&outcomes),
        gw.log_text()
    );
    // Calls all through the 60 s, so every token's life was used.
    assert!(
        outcomes.last().unwrap().at >= Duration::from_secs(59),
        "{}",
        summary(&outcomes)
    );
    let gap = outcomes
        .windows(2)
        .map(|w| w[1].at - w[0].at)
        .max()
        .unwrap();
    assert!(gap < Duration::from_secs(3), "a {gap:?} gap between calls");

    let requests = auth.token_requests();
    let all = between(&requests, began, ended);
    assert!(
        all.iter()
            .all(|e| e["outcome"] == "ok" && e["grant_type"] == "client_credentials"),
        "{:?}",
        brief(all.iter().copied())
    );
    // The first token, then one per refresh point (7.5 s) of the time left.
    let first = all.first().expect("a token request")["t"].as_u64().unwrap();
    let refresh_every = 10_000.0 * REFRESH_AT;
    let expected = 1 + ((ended - first) as f64 / refresh_every).floor() as usize;
    let n = all.len();
    eprintln!(
        "60 s: {} calls, {n} token requests at the AS (expected ~{expected} = 1 + {:.1} s / 7.5 s)",
        outcomes.len(),
        (ended - first) as f64 / 1000.0
    );
    assert!(
        n + 2 >= expected && n <= expected + 1,
        "{n} token requests in {:.1} s, expected about {expected}: {:?}",
        (ended - began) as f64 / 1000.0,
        brief(all.iter().copied())
    );
    assert_eq!(
        oauth_requests(&gw.metrics().await, |o| o == "ok"),
        n as u64,
        "mcp_edge_oauth_requests_total counts every token request"
    );

    // The MCP server never saw an expired or foreign token.
    let stats = mcp.stats().await;
    eprintln!("60 s: MCP server {stats}");
    assert_eq!(stats["expired"], 0, "{stats}");
    assert_eq!(stats["wrong_audience"], 0, "{stats}");
    assert_eq!(stats["invalid"], 0, "{stats}");
    assert!(
        stats["echo_calls"].as_u64().unwrap() >= outcomes.len() as u64,
        "{stats}"
    );
    let state = oauth_status(&gw).await;
    assert_eq!(state["grant"], "client_credentials", "{state}");
    assert_eq!(state["token"], "valid", "{state}");
    assert_gateway_shows_no_secret(&gw, &with_secret(auth.issued())).await;
}

/// Runs `oauth_login.mjs` (a person's one-time login, scripted through
/// oidc-provider's own pages) and writes the token file mcp-edge reads,
/// `<state>/oauth/crm.json`, as a login does. Returns the answer.
fn login_and_seed(auth: &AuthServer, mcp: &McpServer, state: &Path) -> Value {
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(&auth.config).unwrap()).unwrap();
    let out = Command::new(node22())
        .arg(interop_dir().join("oauth_login.mjs"))
        .args([
            auth.issuer().as_str(),
            "edge-box-17",
            SECRET,
            cfg["redirect_uri"].as_str().unwrap(),
            mcp.url().as_str(),
            "mcp:tools offline_access",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripted login failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        auth.log_text()
    );
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    let now = unix_ms() / 1000;
    let stored = json!({
        "access_token": t["access_token"],
        "expires_at": now + t["expires_in"].as_u64().unwrap(),
        "issued_at": now,
        "refresh_token": t["refresh_token"],
        "scope": t["scope"],
        "issuer": t["issuer"],
        "token_endpoint": t["token_endpoint"],
    });
    seed_token_file(state, &stored);
    t
}

fn seed_token_file(state: &Path, stored: &Value) {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = state.join("oauth");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .unwrap();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join("crm.json"))
        .unwrap();
    f.write_all(serde_json::to_string_pretty(stored).unwrap().as_bytes())
        .unwrap();
}

/// "With rotating refresh tokens (reuse revokes the grant) 50 concurrent
/// callers across several refreshes never lose the grant."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_callers_across_rotating_refreshes_never_lose_the_grant() {
    let dir = tempfile::tempdir().unwrap();
    let (auth, mcp) = peers(dir.path(), 10, true).await;
    let state = dir.path().join("state");
    let login = login_and_seed(&auth, &mcp, &state);
    write_secret(&dir.path().join("secret"), SECRET);
    let cfg = gateway_config(
        &state,
        &mcp.url(),
        &dir.path().join("secret"),
        "authorization_code",
    );
    let began = unix_ms();
    let gw = Running::start(dir.path(), &cfg).await;

    let start = Instant::now();
    let outcomes = call_loop(
        gw.addr,
        50,
        Duration::from_millis(250),
        start,
        start + Duration::from_secs(35),
    )
    .await;
    let ended = unix_ms();
    assert!(
        outcomes.iter().all(|o| o.error.is_none()),
        "{}\n{}",
        summary(&outcomes),
        gw.log_text()
    );

    let events = auth.events();
    let revoked: Vec<_> = events
        .iter()
        .filter(|e| e["ev"] == "grant.revoked")
        .collect();
    assert!(revoked.is_empty(), "the grant was revoked: {revoked:?}");
    let requests = auth.token_requests();
    let refreshes = between(&requests, began, ended);
    eprintln!(
        "rotation: {} calls by 50 callers, {} refresh requests: {:?}",
        outcomes.len(),
        refreshes.len(),
        brief(refreshes.iter().copied())
    );
    assert!(
        refreshes
            .iter()
            .all(|e| e["grant_type"] == "refresh_token" && e["outcome"] == "ok"),
        "every token request is a successful refresh: {:?}",
        brief(refreshes.iter().copied())
    );
    // 35 s of 10-second tokens: a refresh every 7.5 s, never two at once.
    assert!(
        (3..=6).contains(&refreshes.len()),
        "{} refreshes in 35 s: {:?}",
        refreshes.len(),
        brief(refreshes.iter().copied())
    );
    // Each refresh presented the refresh token the one before it was given.
    let mut current = login["refresh_token"].as_str().unwrap().to_string();
    for e in &refreshes {
        assert_eq!(
            e["presented_refresh_token"].as_str(),
            Some(current.as_str()),
            "a refresh presented a refresh token that was not the latest"
        );
        let next = e["refresh_token"]
            .as_str()
            .expect("a rotated refresh token");
        assert_ne!(next, current, "oidc-provider rotates on every refresh");
        current = next.to_string();
    }
    // The token file holds the latest refresh token, and the grant still works.
    let stored: Value =
        serde_json::from_str(&std::fs::read_to_string(state.join("oauth/crm.json")).unwrap())
            .unwrap();
    assert_eq!(stored["refresh_token"].as_str(), Some(current.as_str()));
    let state_now = oauth_status(&gw).await;
    assert_eq!(state_now["grant"], "authorization_code", "{state_now}");
    assert_eq!(state_now["token"], "valid", "{state_now}");
    let stats = mcp.stats().await;
    eprintln!("rotation: MCP server {stats}");
    assert_eq!(stats["expired"], 0, "{stats}");
    let mut secrets = with_secret(auth.issued());
    secrets.push(login["refresh_token"].as_str().unwrap().to_string());
    assert_gateway_shows_no_secret(&gw, &secrets).await;
}

/// Polls with calls until the gateway holds a token fresh from the
/// authorization server (at least `fresh` of it left); returns its
/// `valid_until_unix`.
async fn wait_for_fresh_token(gw: &Running, sid: &str, fresh: Duration) -> u64 {
    let mut id = 10_000;
    let fresh_token = || {
        id += 1;
        let id = id;
        async move {
            if let Some(e) = echo(gw.addr, sid, id, "warm-up").await {
                panic!("call before the outage failed: {e}\n{}", gw.log_text());
            }
            let s = oauth_status(gw).await;
            let until = s["valid_until_unix"].as_u64();
            until
                .filter(|u| u * 1000 >= unix_ms() + fresh.as_millis() as u64)
                .ok_or_else(|| s.to_string())
        }
    };
    let what = format!("a token with {fresh:?} left");
    eventually(&what, Duration::from_secs(30), fresh_token).await
}

/// "The authorization server stopped for 20 s: calls fail fast with a
/// clear error, token requests back off, and calls succeed again within
/// seconds after it returns." (And while the token in hand is valid, calls
/// go on with it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorization_server_outage_fails_calls_fast_backs_off_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let (mut auth, mcp) = peers(dir.path(), 10, false).await;
    write_secret(&dir.path().join("secret"), SECRET);
    let cfg = gateway_config(
        &dir.path().join("state"),
        &mcp.url(),
        &dir.path().join("secret"),
        "client_credentials",
    );
    let gw = Running::start(dir.path(), &cfg).await;
    let sid = legacy_session(gw.addr, "2025-11-25").await;
    let valid_until = wait_for_fresh_token(&gw, &sid, Duration::from_millis(8500)).await;
    let failed_before = oauth_requests(&gw.metrics().await, |o| o != "ok");

    auth.stop();
    let start = Instant::now();
    let stopped_ms = unix_ms();
    let mut outcomes = Vec::new();
    let mut states = std::collections::BTreeSet::new();
    let mut id = 0;
    let mut back: Option<Instant> = None;
    loop {
        if back.is_none() && start.elapsed() >= Duration::from_secs(20) {
            auth.run().await;
            back = Some(Instant::now());
        }
        id += 1;
        let t = Instant::now();
        let error = echo(gw.addr, &sid, id, &format!("call {id}")).await;
        let ok = error.is_none();
        outcomes.push(Outcome {
            at: t - start,
            latency: t.elapsed(),
            error,
        });
        let token = oauth_status(&gw).await["token"]
            .as_str()
            .unwrap()
            .to_string();
        states.insert(token.split(':').next().unwrap().to_string());
        if let Some(b) = back {
            if ok {
                break;
            }
            assert!(
                b.elapsed() < Duration::from_secs(60),
                "no call succeeded within 60 s of the authorization server's return: {}\n{}",
                summary(&outcomes),
                gw.log_text()
            );
        }
        // not ordering: a call every 200 ms through the 20 s outage and after (what it samples)
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let back = back.unwrap();
    let recovered = outcomes.last().unwrap().at.saturating_sub(back - start);
    let during: Vec<&Outcome> = outcomes.iter().filter(|o| o.at < back - start).collect();
    let failed: Vec<&&Outcome> = during.iter().filter(|o| o.error.is_some()).collect();
    let attempts = oauth_requests(&gw.metrics().await, |o| o != "ok") - failed_before;
    eprintln!(
        "outage: token valid until {} s after the stop; {} calls during the 20 s outage, {} failed \
         (first failure at {:?}); {attempts} failed token requests; token states seen {states:?}; \
         first success {recovered:?} after the AS returned",
        (valid_until * 1000).saturating_sub(stopped_ms) as f64 / 1000.0,
        during.len(),
        failed.len(),
        failed.first().map(|o| o.at),
    );
    if let Some(o) = failed.first() {
        eprintln!("outage: first failure {}", o.error.as_ref().unwrap());
    }

    // The token in hand serves while it is valid (a failed refresh keeps it).
    let valid_for = Duration::from_millis((valid_until * 1000).saturating_sub(stopped_ms));
    for o in during
        .iter()
        .filter(|o| o.at + o.latency + Duration::from_secs(1) < valid_for)
    {
        assert!(
            o.error.is_none(),
            "a call while the token was valid failed: {o:?}"
        );
    }
    // Once it expired: every call fails, at once, with a clear error naming the upstream.
    assert!(failed.len() >= 10, "{}", summary(&outcomes));
    for o in &failed {
        let e = o.error.as_ref().unwrap();
        let msg = e["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with("upstream 'crm' has no access token:"),
            "unclear error: {e}"
        );
        assert_eq!(e["data"]["upstream"], "crm", "{e}");
        // "Fail fast": not held for a token request timeout (10-20 s).
        assert!(
            o.latency < Duration::from_secs(5),
            "a failing call took {o:?}"
        );
    }
    // Token requests backed off (1 s × 1.5^n): a handful in 20 s, not one per call.
    assert!(
        (2..=8).contains(&attempts),
        "{attempts} failed token requests during a 20 s outage ({} calls)",
        during.len()
    );
    assert!(
        states.contains("backing_off"),
        "token states seen: {states:?}"
    );
    // And back within seconds of the authorization server's return.
    assert!(
        recovered < Duration::from_secs(15),
        "first success {recovered:?} after the return"
    );
    let after = auth
        .token_requests()
        .into_iter()
        .filter(|e| e["t"].as_u64().unwrap() > stopped_ms)
        .collect::<Vec<_>>();
    assert!(
        !after.is_empty() && after.len() <= 2 && after.iter().all(|e| e["outcome"] == "ok"),
        "token requests after the return: {:?}",
        brief(&after)
    );
    // (The MCP server may have refused the expiring token once: its `exp` is
    // whole seconds, so it can end up to 1 s before `expires_in` says.)
    eprintln!("outage: MCP server {}", mcp.stats().await);
    assert_gateway_shows_no_secret(&gw, &with_secret(auth.issued())).await;
}

/// "A wrong client secret: at most 2 token requests in 30 s, then a reload
/// with the right one works."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_client_secret_asks_at_most_twice_in_30_s_then_a_reload_with_the_right_one_works() {
    const WRONG: &str = "cs-wrong-0b1c2d3e4f5a6b7c-not-the-secret";
    let dir = tempfile::tempdir().unwrap();
    let (auth, mcp) = peers(dir.path(), 10, false).await;
    let secret_file = dir.path().join("secret");
    write_secret(&secret_file, WRONG);
    let cfg = gateway_config(
        &dir.path().join("state"),
        &mcp.url(),
        &secret_file,
        "client_credentials",
    );
    let began = unix_ms();
    let gw = Running::start(dir.path(), &cfg).await;
    let start = Instant::now();
    let outcomes = call_loop(
        gw.addr,
        1,
        Duration::from_millis(500),
        start,
        start + Duration::from_secs(30),
    )
    .await;
    let fixed_at = unix_ms();
    let requests = auth.token_requests();
    let in_30s = between(&requests, began, fixed_at);
    let state = oauth_status(&gw).await;
    let upstream = gw.status().await["upstreams"][0].clone();
    eprintln!(
        "wrong secret: upstream state {}: {}",
        upstream["state"], upstream["detail"]
    );
    eprintln!(
        "wrong secret: {} calls in 30 s, {} token requests at the AS {:?}; /status oauth {state}; \
         first error {:?}",
        outcomes.len(),
        in_30s.len(),
        in_30s.iter().map(|e| &e["outcome"]).collect::<Vec<_>>(),
        outcomes.first().and_then(|o| o.error.as_ref()),
    );
    assert!(
        outcomes.iter().all(|o| o.error.is_some()),
        "{}",
        summary(&outcomes)
    );
    assert!(
        outcomes.len() >= 10 && outcomes.last().unwrap().at >= Duration::from_secs(29),
        "{}",
        summary(&outcomes)
    );
    for o in &outcomes {
        let e = o.error.as_ref().unwrap();
        assert!(
            e["message"].as_str().unwrap_or_default().contains("'crm'"),
            "the error names the upstream: {e}"
        );
    }
    assert!(
        !in_30s.is_empty() && in_30s.len() <= 2,
        "{} token requests in 30 s: {:?}",
        in_30s.len(),
        brief(in_30s.iter().copied())
    );
    assert!(
        in_30s.iter().all(|e| e["outcome"] == "invalid_client"),
        "{:?}",
        brief(in_30s.iter().copied())
    );
    let token = state["token"].as_str().unwrap_or_default();
    assert!(token.starts_with("parked"), "{state}");
    assert_eq!(
        state["last_token_request"]["outcome"], "invalid_client",
        "{state}"
    );

    // The operator puts the right secret in place and reloads.
    write_secret(&secret_file, SECRET);
    let reload = gw.reload().await;
    assert_eq!(reload["rejected"], false, "{reload}");
    let sid = legacy_session(gw.addr, "2025-11-25").await;
    let (mut id, g) = (0, &gw);
    let call_works = || {
        id += 1;
        let (id, sid) = (id, &sid);
        async move {
            match echo(g.addr, sid, id, "after the reload").await {
                Some(e) => Err(format!("{e}\n{}", g.log_text())),
                None => Ok(()),
            }
        }
    };
    eventually(
        "a call that works after the reload",
        Duration::from_secs(30),
        call_works,
    )
    .await;
    let after = auth.token_requests();
    let after: Vec<_> = between(&after, fixed_at, unix_ms());
    eprintln!(
        "wrong secret: after the reload {:?}",
        after.iter().map(|e| &e["outcome"]).collect::<Vec<_>>()
    );
    assert!(
        !after.is_empty() && after.len() <= 2 && after.iter().all(|e| e["outcome"] == "ok"),
        "{:?}",
        brief(after.iter().copied())
    );
    assert_eq!(oauth_status(&gw).await["token"], "valid");
    let mut secrets = with_secret(auth.issued());
    secrets.push(WRONG.to_string());
    assert_gateway_shows_no_secret(&gw, &secrets).await;
}

/// Issue 22: "`invalid_client` parks the upstream until the secret or key
/// file changes", as a 401 parks it today (which the watchdog knows), rather
/// than retrying its connects on the reconnect backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_client_parks_the_upstream_not_just_its_token_requests() {
    let dir = tempfile::tempdir().unwrap();
    let (auth, mcp) = peers(dir.path(), 10, false).await;
    let secret_file = dir.path().join("secret");
    write_secret(&secret_file, "cs-wrong-0b1c2d3e4f5a6b7c-not-the-secret");
    let cfg = gateway_config(
        &dir.path().join("state"),
        &mcp.url(),
        &secret_file,
        "client_credentials",
    );
    let gw = Running::start(dir.path(), &cfg).await;
    let parked = || async {
        let s = gw.status().await["upstreams"][0].clone();
        match s["state"].as_str() {
            Some("awaiting_credentials") => Ok(()),
            _ => Err(s.to_string()),
        }
    };
    let what = "the upstream parked (awaiting_credentials) after an invalid_client";
    eventually(what, Duration::from_secs(20), parked).await;
    let requests = auth.token_requests();
    assert_eq!(requests.len(), 1, "{:?}", brief(&requests));
}

/// "A restart with a valid stored token makes no token request before its
/// first successful call." Plus: the token file is 0600 in a 0700 folder,
/// and what a restart reads from it is not shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_valid_stored_token_makes_no_token_request_before_its_first_call() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // Five-minute tokens: nothing is due for a refresh during the test.
    let (auth, mcp) = peers(dir.path(), 300, false).await;
    let state = dir.path().join("state");
    write_secret(&dir.path().join("secret"), SECRET);
    let cfg = gateway_config(
        &state,
        &mcp.url(),
        &dir.path().join("secret"),
        "client_credentials",
    );
    let (first_dir, second_dir) = (dir.path().join("first"), dir.path().join("second"));
    std::fs::create_dir_all(&first_dir).unwrap();
    std::fs::create_dir_all(&second_dir).unwrap();

    let mut first = Running::start(&first_dir, &cfg).await;
    let sid = legacy_session(first.addr, "2025-11-25").await;
    assert_eq!(
        echo(first.addr, &sid, 1, "before").await,
        None,
        "{}",
        first.log_text()
    );
    assert_eq!(
        auth.token_requests().len(),
        1,
        "{:?}",
        brief(&auth.token_requests())
    );
    let file = state.join("oauth/crm.json");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600, "token file mode");
    assert_eq!(mode(&state.join("oauth")), 0o700, "token folder mode");
    let valid_until = oauth_status(&first).await["valid_until_unix"].clone();
    // `/status` shows the expiry the token file keeps (computed once), so
    // a restart that reads the file shows the same second.
    let stored: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(stored["expires_at"], valid_until, "status vs token file");
    assert!(first.terminate().await.success());
    let first_log = first.log_text();
    drop(first);

    let before = auth.token_requests().len();
    let second = Running::start(&second_dir, &cfg).await;
    let sid = legacy_session(second.addr, "2025-11-25").await;
    assert_eq!(
        echo(second.addr, &sid, 1, "after").await,
        None,
        "{}",
        second.log_text()
    );
    assert_eq!(
        auth.token_requests().len(),
        before,
        "a token request before the first call after the restart: {:?}",
        brief(&auth.token_requests())
    );
    let metrics = second.metrics().await;
    assert_eq!(oauth_requests(&metrics, |_| true), 0, "{metrics}");
    let s = oauth_status(&second).await;
    assert_eq!(s["token"], "valid", "{s}");
    assert_eq!(s["valid_until_unix"], valid_until, "{s}");
    eprintln!(
        "restart: {before} token request(s) in all; MCP server {}",
        mcp.stats().await
    );
    assert_eq!(mode(&file), 0o600, "token file mode after the restart");

    // Nothing secret in either run's output, nor in the Debug output of
    // what the gateway keeps (its config, the token file, the credentials).
    let secrets = with_secret(auth.issued());
    assert_not_shown(&[("the first run's log", first_log)], &secrets);
    assert_gateway_shows_no_secret(&second, &secrets).await;
    let config = mcp_edge::config::Config::load(&second.config).unwrap();
    let stored = mcp_edge::oauth::store::load(&file).unwrap().unwrap();
    assert!(stored.access_token.is_some());
    let credentials = mcp_edge::oauth::token::Credentials::Basic(mcp_edge::config::Secret::new(
        SECRET.to_string(),
    ));
    let basic = mcp_edge::oauth::token::basic("edge-box-17", SECRET);
    assert_not_shown(
        &[
            ("Debug of the config", format!("{config:?}")),
            ("Debug of the token file", format!("{stored:?}")),
            (
                "Debug of the client credentials",
                format!("{credentials:?}"),
            ),
            ("Debug of the Basic header", format!("{basic:?}")),
        ],
        &secrets,
    );
}

/// The Python SDK's own protected-resource metadata (`AuthSettings`) names
/// an authorization server whose issuer has no path with a trailing slash
/// (pydantic's URL type: `http://127.0.0.1:P` becomes `http://127.0.0.1:P/`),
/// while the server's metadata says `http://127.0.0.1:P`. Both spell the
/// same URL (RFC 3986 §6.2.3: an empty path is `/`); a gateway in front of
/// such a server must still get its tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdks_own_metadata_with_a_trailing_slash_issuer_works() {
    let dir = tempfile::tempdir().unwrap();
    let (auth, mcp) = peers_with(dir.path(), 300, false, &["--sdk-metadata"]).await;
    let prm = support::binary::admin_get(
        ([127, 0, 0, 1], mcp.port).into(),
        "/.well-known/oauth-protected-resource/mcp",
    )
    .await
    .1;
    assert!(prm.contains(&format!("\"{}/\"", auth.issuer())), "{prm}");
    write_secret(&dir.path().join("secret"), SECRET);
    let cfg = gateway_config(
        &dir.path().join("state"),
        &mcp.url(),
        &dir.path().join("secret"),
        "client_credentials",
    );
    let gw = Running::start(dir.path(), &cfg).await;
    let sid = legacy_session(gw.addr, "2025-11-25").await;
    let e = echo(gw.addr, &sid, 1, "hello").await;
    assert_eq!(e, None, "/status oauth: {}", oauth_status(&gw).await);
    assert_eq!(auth.token_requests().len(), 1);
}

/// A new user's finding: after an outage long enough for the upstream to be
/// marked down (its health probes cannot get a token), it came back only at
/// the reconnect backoff's next attempt, minutes later. An upstream down
/// only for want of a token is tried again on the token requests' schedule
/// (at most a minute apart) and at once when a token arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_down_for_want_of_a_token_recovers_within_seconds_of_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (mut auth, mcp) = peers(dir.path(), 10, false).await;
    write_secret(&dir.path().join("secret"), SECRET);
    let cfg = gateway_config(
        &dir.path().join("state"),
        &mcp.url(),
        &dir.path().join("secret"),
        "client_credentials",
    )
    .replace(
        "\n\n[upstream.oauth]",
        "\nhealth_interval = \"1s\"\nprobe_timeout = \"500ms\"\nprobe_misses = 1\nbackoff_initial = \"2s\"\n\n[upstream.oauth]",
    );
    let gw = Running::start(dir.path(), &cfg).await;
    let sid = legacy_session(gw.addr, "2025-11-25").await;
    assert!(echo(gw.addr, &sid, 1, "before").await.is_none());
    auth.stop();
    // Down once the token has expired (9 s) and a probe missed; with the
    // reconnect backoff (2 s doubling) its attempts would then be about
    // 2, 4, 8 and 16 s apart, the next one some 27 s after the return.
    let start = Instant::now();
    let down = || async {
        let s = gw.status().await["upstreams"][0].clone();
        match s["state"].as_str() {
            Some("backoff") => Ok(()),
            _ => Err(s.to_string()),
        }
    };
    eventually(
        "the upstream marked down (backoff)",
        Duration::from_secs(45),
        down,
    )
    .await;
    // not ordering: the outage lasts 45 s, so the reconnect backoff grows past 16 s (the premise)
    tokio::time::sleep_until(start + Duration::from_secs(45)).await;
    auth.run().await;
    let back = Instant::now();
    let (mut id, g) = (1, &gw);
    let call_works = || {
        id += 1;
        let (id, sid) = (id, &sid);
        async move {
            match echo(g.addr, sid, id, "after").await {
                Some(e) => Err(format!("{e}; {}", g.log_text())),
                None => Ok(()),
            }
        }
    };
    let what = "a call that works after the authorization server's return";
    eventually(what, Duration::from_secs(20), call_works).await;
    eprintln!(
        "down for want of a token: first call succeeded {:?} after the server returned",
        back.elapsed()
    );
}
