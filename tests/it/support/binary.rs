//! The gateway binary as a black box ([`Running`]): started on a config
//! file, read through its admin listener (plain HTTP on loopback:
//! [`admin_get`], [`Running::status`], [`Running::metrics`]), signalled as
//! systemd would ([`Running::reload`], [`Running::terminate`]) and heard as
//! systemd hears it (its `NOTIFY_SOCKET`), killed on drop
//! (tests/it/access.rs, tests/it/tls.rs, tests/it/reaper.rs).

use super::eventually::{eventually, eventually_sync};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The gateway binary serving `config`, killed on drop; stderr goes to a file.
pub struct Running {
    child: std::process::Child,
    /// `server.listen` (the config's `listen = "127.0.0.1:PORT"` line).
    pub addr: SocketAddr,
    /// `server.admin_listen` (its `admin_listen = "127.0.0.1:PORT"` line).
    pub admin: SocketAddr,
    /// The config file, `<dir>/config.toml`.
    pub config: PathBuf,
    /// Its stderr (`RUST_LOG=debug`).
    pub log: PathBuf,
    /// Its `NOTIFY_SOCKET` (`<dir>/gateway-notify.sock`, read without blocking).
    notify: std::os::unix::net::UnixDatagram,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// Writes `config` to `<dir>/config.toml`, runs `serve` on it and waits
    /// (up to 30 s) for `/readyz`. `config` has its `listen` and
    /// `admin_listen` on 127.0.0.1 with fixed ports.
    pub async fn start(dir: &Path, config: &str) -> Running {
        Running::start_as(dir, config, None, &[]).await
    }

    /// [`Running::start`] with extra environment variables for the gateway.
    pub async fn start_with_env(dir: &Path, config: &str, env: &[(&str, &Path)]) -> Running {
        Running::start_as(dir, config, None, env).await
    }

    /// [`Running::start`] as user and group `uid` (the test runs as root),
    /// with extra environment variables `env`.
    pub async fn start_as(
        dir: &Path,
        config: &str,
        uid: Option<u32>,
        env: &[(&str, &Path)],
    ) -> Running {
        use std::os::unix::process::CommandExt;
        let mut command = super::gateway_command();
        if let Some(u) = uid {
            command.uid(u).gid(u);
        }
        Running::start_command(dir, config, command, env).await
    }

    /// [`Running::start`] with `command` as the gateway binary (given
    /// `serve --config <dir>/config.toml`).
    pub async fn start_command(
        dir: &Path,
        config: &str,
        mut command: std::process::Command,
        env: &[(&str, &Path)],
    ) -> Running {
        let path = dir.join("config.toml");
        std::fs::write(&path, config).unwrap();
        let log = dir.join("stderr.log");
        let notify_path = dir.join("gateway-notify.sock");
        let _ = std::fs::remove_file(&notify_path); // an earlier gateway's, in the same folder
        let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
        notify.set_nonblocking(true).unwrap();
        // A gateway run as another user may send to it too.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&notify_path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let child = command
            .args(["serve", "--config"])
            .arg(&path)
            .env("RUST_LOG", "debug")
            .env("NOTIFY_SOCKET", &notify_path)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("gateway binary starts");
        let port = |key: &str| -> u16 {
            let line = config.lines().find(|l| l.starts_with(key)).unwrap();
            line.rsplit(':')
                .next()
                .unwrap()
                .trim_matches('"')
                .parse()
                .unwrap()
        };
        let r = Running {
            child,
            addr: ([127, 0, 0, 1], port("listen")).into(),
            admin: ([127, 0, 0, 1], port("admin_listen")).into(),
            config: path,
            log,
            notify,
        };
        r.wait_ready().await;
        r
    }

    async fn wait_ready(&self) {
        let what = format!("/readyz on {}", self.admin);
        let ready = || async {
            let (code, body) = admin_get(self.admin, "/readyz").await;
            match code {
                200 => Ok(()),
                _ => Err(format!("{code} {body}\n{}", self.log_text())),
            }
        };
        eventually(&what, Duration::from_secs(30), ready).await
    }

    /// The gateway's process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Sends SIGTERM (as `systemctl stop` does) and waits (up to 60 s)
    /// for it to exit; returns its exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        assert_eq!(rc, 0, "SIGTERM: {}", std::io::Error::last_os_error());
        let log = self.log.clone();
        let pid = self.pid();
        let child = &mut self.child;
        eventually_sync(
            "the gateway's exit after SIGTERM",
            Duration::from_secs(60),
            || {
                let exited = child.try_wait().unwrap();
                if exited.is_none()
                    && std::fs::read_to_string(&log)
                        .unwrap_or_default()
                        .contains("draining")
                {
                    // A second SIGTERM cuts the drain short (`server.drain_grace`).
                    // SAFETY: kill(2) on our own child's pid.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                }
                exited.ok_or_else(|| std::fs::read_to_string(&log).unwrap_or_default())
            },
        )
        .await
    }

    /// What it wrote to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET /status`, parsed.
    pub async fn status(&self) -> Value {
        let (code, body) = admin_get(self.admin, "/status").await;
        assert_eq!(code, 200, "/status: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/status: {e}: {body}"))
    }

    /// `GET /metrics`, the Prometheus text.
    pub async fn metrics(&self) -> String {
        let (code, body) = admin_get(self.admin, "/metrics").await;
        assert_eq!(code, 200, "/metrics: {body}");
        body
    }

    /// Sends SIGHUP (as `systemctl reload` does) and waits (up to 60 s)
    /// for what systemd would hear, `RELOADING=1` then `READY=1` (sent once
    /// the outcome is in `/status`); returns `/status`'s `last_reload`
    /// (`{rejected, server_pending, message, at_unix}`).
    pub async fn reload(&self) -> Value {
        self.notified(); // what earlier events left in the socket
                         // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGHUP) };
        assert_eq!(rc, 0, "SIGHUP: {}", std::io::Error::last_os_error());
        let mut heard = Vec::new();
        eventually_sync(
            "RELOADING=1, then READY=1 on the notify socket",
            Duration::from_secs(60),
            || {
                heard.extend(self.notified());
                let reloading = heard.iter().position(|m| m.contains("RELOADING=1"));
                match reloading {
                    Some(i) if heard[i..].iter().any(|m| m.contains("READY=1")) => Ok(()),
                    _ => Err(format!("{heard:?}\n{}", self.log_text())),
                }
            },
        )
        .await;
        self.status().await["last_reload"].clone()
    }

    /// The datagrams the gateway sent to its `NOTIFY_SOCKET` since the last
    /// look (e.g. `READY=1\nSTATUS=…`).
    pub fn notified(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.notify.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }
}

/// `GET path` on the admin listener at `addr`: status (0 when nothing
/// answers) and body.
pub async fn admin_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let req = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (status, body)
}

/// `mcp_edge_refused_total{limit="LIMIT"}` in a `/metrics` text (0 when absent).
pub fn refused(metrics: &str, limit: &str) -> u64 {
    let prefix = format!("mcp_edge_refused_total{{limit=\"{limit}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
}

/// The SHA-256 of `token`, hex (`token_sha256`).
pub fn sha256_hex(token: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// `mcp-edge check-config CONFIG`: exit success and stdout + stderr.
pub fn check_config(config: &Path) -> (bool, String) {
    let out = super::gateway_command()
        .arg("check-config")
        .arg(config)
        .output()
        .expect("check-config runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
