//! The systemd unit is valid and hardened: `systemd-analyze verify` prints
//! nothing (some bad values only warn, exit 0), and the offline security
//! exposure is ≤ 2.5. The unit's ExecStart is pointed at the built binary in
//! a temporary copy (verify needs the executable to exist).

use std::process::Command;

fn unit_copy(dir: &std::path::Path) -> std::path::PathBuf {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/mcp-edge.service"
    ))
    .unwrap();
    let p = dir.join("mcp-edge.service");
    std::fs::write(
        &p,
        unit.replace("/usr/bin/mcp-edge", env!("CARGO_BIN_EXE_mcp-edge")),
    )
    .unwrap();
    p
}

#[test]
fn unit_verifies_cleanly_and_is_hardened() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_copy(dir.path());
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze (Debian package systemd; .ci/run installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "verify: {stderr}"
    );
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(&unit)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let level: f64 = text
        .lines()
        .find_map(|l| l.split("exposure level for mcp-edge.service: ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}"));
    println!("systemd-analyze security exposure: {level}");
    assert!(level <= 2.5, "exposure {level}");
}

#[test]
fn board_memory_drop_ins_verify() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_copy(dir.path());
    let base = std::fs::read_to_string(&unit).unwrap();
    for board in ["rpi-zero-2w", "rpi4-2gb", "rpi5-8gb", "generic-arm64"] {
        let src = format!(
            "{}/board/{board}/mcp-edge.service.d/memory.conf",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&src).unwrap();
        assert!(
            text.contains("MemoryHigh=") && text.contains("MemoryMax="),
            "{board}"
        );
        // A drop-in's [Service] lines merge into the unit: verify the merged text.
        std::fs::write(&unit, format!("{base}\n{text}")).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "{board}: {stderr}"
        );
    }
}
