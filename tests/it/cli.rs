//! The command line: `check-config` exit codes and messages, `--version`,
//! and `serve` refusing a bad config with exit 1 and the key named.

use crate::support;

use std::process::Command;

fn bin() -> Command {
    support::gateway_command()
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn check_config_prints_resolved_config_with_secrets_masked() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "ok.toml",
        "[[upstream]]\nname = \"remote\"\nurl = \"https://mcp.example/mcp\"\nheaders = { \"X-Api-Key\" = \"s3cr3t-value\" }\n",
    );
    let out = bin().arg("check-config").arg(&p).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("remote") && stdout.contains("X-Api-Key"),
        "{stdout}"
    );
    assert!(!stdout.contains("s3cr3t-value"), "secret leaked: {stdout}");
}

#[test]
fn bad_config_exits_1_and_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "bad.toml",
        "[[upstream]]\nname = \"x\"\ntransport = \"http\"\nurl = \"ftp://nope\"\n",
    );
    for args in [
        vec!["check-config".into(), p.clone().into_os_string()],
        vec![
            "serve".into(),
            "--config".into(),
            p.clone().into_os_string(),
        ],
    ] {
        let out = bin().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("bad.toml") && err.contains("upstream[0].url"),
            "{err}"
        );
    }
    let p = write(
        &dir,
        "unknown.toml",
        "[server]\nlisten = \"127.0.0.1:1\"\nbogus_key = 1\n",
    );
    let out = bin().arg("check-config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus_key"));
}

#[test]
fn version_and_help() {
    let out = bin().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("mcp-edge {}", env!("CARGO_PKG_VERSION"))
    );
    let out = bin().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("serve") && help.contains("check-config"),
        "{help}"
    );
}

const FOUR_UPSTREAMS: &str = "[[upstream]]\nname = \"a\"\ncommand = \"x\"\n[[upstream]]\nname = \"b\"\ncommand = \"x\"\n\
    [[upstream]]\nname = \"c\"\nurl = \"https://h/mcp\"\n[[upstream]]\nname = \"d\"\ntransport = \"builtin\"\n";

#[test]
fn every_board_profile_fits_four_upstreams_in_its_heap_budget() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "four.toml", FOUR_UPSTREAMS);
    for board in ["rpi-zero-2w", "rpi4-2gb", "rpi5-8gb", "generic-arm64"] {
        let out = bin()
            .args(["check-config", "--board", board])
            .arg(&p)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{board}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("# worst-case live heap"), "{stdout}");
        assert!(
            stdout.contains(&format!("# board {board}: worst case"))
                && stdout.contains("within the heap budget"),
            "{stdout}"
        );
    }
}

/// With `server.tls_cert`/`tls_key` the estimate has a TLS item (rustls
/// state per connection and the session cache, `src/budget.rs`); without,
/// none. The four upstreams still fit the smallest board over https.
#[test]
fn check_config_counts_tls_state_in_the_heap_estimate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = support::tls::Ca::new("test CA");
    let files = support::tls::Files::write(dir.path(), &ca.server("gateway"), Some(&ca));
    let with = write(
        &dir,
        "tls.toml",
        &support::tls::config_text("", FOUR_UPSTREAMS, Some(&files)),
    );
    let without = write(
        &dir,
        "plain.toml",
        &support::tls::config_text("", FOUR_UPSTREAMS, None),
    );
    let item = format!(
        "TLS state (16 × {} KiB + {} KiB session cache)",
        mcp_edge::budget::TLS_CONNECTION_BYTES / 1024,
        mcp_edge::budget::TLS_SESSION_CACHE_BYTES / 1024
    );
    for (p, tls) in [(&with, true), (&without, false)] {
        let out = bin()
            .args(["check-config", "--board", "rpi-zero-2w"])
            .arg(p)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("within the heap budget"),
            "{}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout.contains("TLS state ("), tls, "{stdout}");
        assert_eq!(stdout.contains(&item), tls, "{stdout}");
    }
}

#[test]
fn board_defaults_apply_but_the_file_wins_and_the_budget_is_enforced() {
    let dir = tempfile::tempdir().unwrap();
    // The profile's session_capacity (32) applies; the file's max_connections wins.
    let p = write(
        &dir,
        "c.toml",
        "[server]\nmax_connections = 20\n[[upstream]]\nname = \"a\"\ncommand = \"x\"\n",
    );
    let out = bin()
        .args(["check-config"])
        .arg(&p)
        .env("MCP_EDGE_BOARD", "rpi-zero-2w")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("session_capacity = 32\n"), "{stdout}");
    assert!(stdout.contains("max_connections = 20\n"), "{stdout}");
    assert!(stdout.contains("max_result_bytes = 131072\n"), "{stdout}");

    // Capacities past the Zero's 32 MiB budget: exit 1, naming the numbers.
    let p = write(
        &dir,
        "big.toml",
        "[server]\nmax_connections = 512\nmax_body_bytes = 4194304\n[[upstream]]\nname = \"a\"\ncommand = \"x\"\n",
    );
    let out = bin()
        .args(["check-config", "--board", "rpi-zero-2w"])
        .arg(&p)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("exceeds the 32.0 MiB budget of board rpi-zero-2w"),
        "{stderr}"
    );
    // Without a board the same file is valid: the estimate is printed, nothing enforced.
    assert!(bin()
        .arg("check-config")
        .arg(&p)
        .status()
        .unwrap()
        .success());

    let out = bin()
        .args(["check-config", "--board", "pi-zero"])
        .arg(&p)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("unknown board \"pi-zero\"") && stderr.contains("rpi-zero-2w"),
        "{stderr}"
    );
}

#[test]
fn a_taken_admin_port_is_a_clear_start_error() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p = write(
        &dir,
        "c.toml",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"{}\"\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
            taken.local_addr().unwrap()
        ),
    );
    let out = bin().args(["serve", "--config"]).arg(&p).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot open the admin listener") && stderr.contains("server.admin_listen"),
        "{stderr}"
    );
}

#[test]
fn status_cli_accepts_url_without_scheme_and_explains_an_off_admin_listener() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "c.toml",
        "[server]\nadmin_listen = \"off\"\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    );
    let out = bin().args(["status", "--config"]).arg(&p).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("server.admin_listen is \"off\""),
        "{stderr}"
    );
    // No scheme: http:// is assumed (nothing listens there: a connect error, not "invalid format").
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = bin()
        .args(["upstream", "reconnect", "x", "--url", &free.to_string()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains(&format!("http://{free}/upstreams/x/reconnect")),
        "{stderr}"
    );
    // An empty MCP_EDGE_BOARD means no board.
    let out = bin()
        .args(["check-config"])
        .arg(&p)
        .env("MCP_EDGE_BOARD", "")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `mcp-edge check-config … | head -1`: a reader that goes away ends the
/// command quietly (SIGPIPE, like any Unix tool), never with a panic.
#[test]
fn a_closed_pipe_ends_check_config_quietly() {
    let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/config.toml");
    for _ in 0..5 {
        let mut child = support::gateway_command()
            .arg("check-config")
            .arg(&cfg)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before anything is written
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!stderr.contains("Broken pipe"), "{stderr}");
    }
}

/// `status --config` on a file the gateway would reject still asks the
/// admin listener that file names (the moment an operator needs it most).
#[test]
fn status_reads_the_admin_address_of_a_file_that_does_not_validate() {
    let dir = tempfile::tempdir().unwrap();
    // `metrics_listen`: the deprecated alias of `admin_listen`.
    for key in ["admin_listen", "metrics_listen"] {
        let cfg = write(
            &dir,
            "broken.toml",
            &format!("[server]\n{key} = \"127.0.0.1:1\"\nno_such_key = 1\n"),
        );
        let out = bin()
            .arg("status")
            .arg("--config")
            .arg(&cfg)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains("does not validate"), "{stderr}");
        assert!(
            stderr.contains("127.0.0.1:1"),
            "it asked the named listener: {stderr}"
        );
    }
}

/// `token new NAME` output: (token, `[[client]]` block).
fn token_new(name: &str) -> (String, String) {
    let out = bin().args(["token", "new", name]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let token = stdout
        .lines()
        .find(|l| !l.starts_with('#') && !l.is_empty())
        .unwrap()
        .to_owned();
    let block = &stdout[stdout.find("[[client]]").expect(&stdout)..];
    assert!(
        stdout.contains(&format!("Authorization: Bearer {token}")),
        "{stdout}"
    );
    (token, block.to_owned())
}

#[test]
fn token_new_prints_a_fresh_token_and_a_client_block_that_loads() {
    let (token, block) = token_new("build-agent");
    let (other, _) = token_new("build-agent");
    assert_ne!(token, other);
    assert!(
        token.starts_with("mcpe_") && token.len() == 5 + 43,
        "{token}"
    );
    let hex: String = mcp_edge::config::token_sha256(&token)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        block.trim_end(),
        format!("[[client]]\nname = \"build-agent\"\ntoken_sha256 = \"{hex}\"")
    );
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[server]\nlisten = \"0.0.0.0:0\"\n\n[[upstream]]\nname = \"e\"\ntransport = \"builtin\"\n\n{block}"
    );
    let p = write(&dir, "net.toml", &text);
    let out = bin().arg("check-config").arg(&p).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&hex), "{stdout}");
    // The same token in a token_file: same digest, and never shown.
    let tok = write(&dir, "tok", &format!("{token}\n"));
    let text = text.replace(
        &format!("token_sha256 = \"{hex}\""),
        &format!("token_file = {tok:?}"),
    );
    let p = write(&dir, "file.toml", &text);
    let cfg = mcp_edge::config::Config::load(&p).unwrap();
    match &cfg.clients[0].credential {
        mcp_edge::config::Credential::Token { sha256, .. } => {
            assert_eq!(sha256.expose(), &mcp_edge::config::token_sha256(&token))
        }
        other => panic!("{other:?}"),
    }
    let out = bin().arg("check-config").arg(&p).output().unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&token));
    for bad in ["", "a b", "x/y", &"n".repeat(33)] {
        let out = bin().args(["token", "new", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("[A-Za-z0-9_-]"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn an_open_listen_without_clients_is_refused_by_serve_and_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let up = "[[upstream]]\nname = \"e\"\ntransport = \"builtin\"\n";
    let p = write(
        &dir,
        "open.toml",
        &format!("[server]\nlisten = \"0.0.0.0:0\"\n\n{up}"),
    );
    for args in [
        vec!["check-config".into(), p.clone().into_os_string()],
        vec![
            "serve".into(),
            "--config".into(),
            p.clone().into_os_string(),
        ],
    ] {
        let out = bin().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        for says in [
            "open.toml",
            "server.listen",
            "[[client]]",
            "allow_unauthenticated",
        ] {
            assert!(err.contains(says), "{says} not in {err}");
        }
    }
    let p = write(
        &dir,
        "allowed.toml",
        &format!("[server]\nlisten = \"0.0.0.0:0\"\nallow_unauthenticated = true\n\n{up}"),
    );
    let out = bin().arg("check-config").arg(&p).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
