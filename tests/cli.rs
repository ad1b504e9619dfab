//! The command line: `check-config` exit codes and messages, `--version`,
//! and `serve` refusing a bad config with exit 1 and the key named.

mod support;

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
