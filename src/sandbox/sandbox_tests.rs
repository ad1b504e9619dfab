use super::*;

fn spec(home: &str) -> Spec {
    Spec::strict(PathBuf::from(home))
}

fn granted(g: &[Grant], p: &str) -> Option<Access> {
    g.iter().find(|x| x.path == Path::new(p)).map(|x| x.access)
}

/// True when some grant reaches `p` (it, or a directory above it).
fn reaches(g: &[Grant], p: &str) -> bool {
    g.iter().any(|x| Path::new(p).starts_with(&x.path))
}

#[test]
fn default_grant_is_system_paths_etc_files_home_and_cwd() {
    let s = spec("/var/lib/mcp-edge/children/fs");
    let g = grants(&s, Some(Path::new("/srv/work")));
    for p in [
        "/usr",
        "/bin",
        "/lib",
        "/opt",
        "/etc/ssl",
        "/etc/resolv.conf",
    ] {
        assert_eq!(granted(&g, p), Some(Access::Read), "{p}");
    }
    assert_eq!(granted(&g, "/dev/null"), Some(Access::Write));
    assert_eq!(granted(&g, "/srv/work"), Some(Access::Write));
    assert_eq!(
        granted(&g, "/var/lib/mcp-edge/children/fs"),
        Some(Access::Write)
    );
    assert!(reaches(&g, "/var/lib/mcp-edge/children/fs/tmp/x"));
}

#[test]
fn default_grant_never_reaches_what_the_sandbox_protects() {
    let s = spec("/var/lib/mcp-edge/children/fs");
    let g = grants(&s, None);
    for p in [
        "/run",
        "/run/credentials/mcp-edge.service/token",
        "/etc/mcp-edge/config.toml",
        "/var/lib/mcp-edge/tool-pins.json",
        "/var/lib/mcp-edge/children/other",
        "/var/lib/mcp-edge/admin.sock",
        "/var/log/mcp-edge/audit.log",
        "/proc/1/environ",
        "/proc",
        "/etc/shadow",
        "/root",
        "/home",
        "/tmp",
    ] {
        assert!(!reaches(&g, p), "{p} is reached");
    }
    // Only system-wide /proc files, never a process directory.
    for x in g.iter().filter(|x| x.path.starts_with("/proc")) {
        assert!(
            KERNEL_PATHS.contains(&x.path.to_str().unwrap()),
            "{:?}",
            x.path
        );
    }
}

#[test]
fn operator_paths_are_added_with_their_access() {
    let mut s = spec("/h");
    s.paths_rw = vec![PathBuf::from("/srv/data")];
    s.paths_ro = vec![PathBuf::from("/home/pi/venv")];
    let g = grants(&s, None);
    assert_eq!(granted(&g, "/srv/data"), Some(Access::Write));
    assert_eq!(granted(&g, "/home/pi/venv"), Some(Access::Read));
}

#[test]
fn overlap_is_either_way() {
    assert!(overlaps(Path::new("/"), Path::new("/run")));
    assert!(overlaps(Path::new("/run/x"), Path::new("/run")));
    assert!(!overlaps(Path::new("/running"), Path::new("/run")));
    assert!(!overlaps(Path::new("/srv"), Path::new("/var/lib/mcp-edge")));
}

#[test]
fn environment_is_explicit_and_config_wins() {
    let s = spec("/state/children/fs");
    let mut env = BTreeMap::new();
    env.insert("LANG".to_string(), "C.UTF-8".to_string());
    env.insert("API".to_string(), "x".to_string());
    let lookup = |n: &str| match n {
        "PATH" => Some(OsString::from("/usr/bin")),
        "LANG" => Some(OsString::from("de_DE.UTF-8")),
        _ => Some(OsString::from("leak")),
    };
    let e = environment(&s, &env, &lookup);
    let get = |k: &str| {
        e.iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.to_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(get("PATH"), ["/usr/bin"]);
    assert_eq!(get("HOME"), ["/state/children/fs"]);
    assert_eq!(get("TMPDIR"), ["/state/children/fs/tmp"]);
    assert_eq!(get("LANG"), ["C.UTF-8"]);
    assert_eq!(get("API"), ["x"]);
    assert_eq!(e.len(), 5, "{e:?}");
    assert!(get("CREDENTIALS_DIRECTORY").is_empty());
}

#[test]
fn mcp_edge_variables_are_forbidden_to_children() {
    for n in [
        "CREDENTIALS_DIRECTORY",
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
        crate::reaper::MARKER_VAR,
    ] {
        assert!(forbidden_env(n), "{n}");
    }
    for n in ["PATH", "HOME", "API_KEY", "LISTENER"] {
        assert!(!forbidden_env(n), "{n}");
    }
}

#[test]
fn home_is_made_private_and_a_foreign_one_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let s = spec(dir.path().join("children/fs").to_str().unwrap());
    prepare_home(&s).unwrap();
    let mode = std::fs::metadata(&s.home).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert!(s.tmp().is_dir());
    std::fs::set_permissions(&s.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(matches!(prepare_home(&s), Err(SandboxError::Home { .. })));
    std::fs::set_permissions(&s.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    prepare_home(&s).unwrap();
    // A directory above it that others may write to (a shared /tmp's).
    let children = dir.path().join("children");
    std::fs::set_permissions(&children, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = prepare_home(&s).unwrap_err().to_string();
    assert!(e.contains("writable by it alone"), "{e}");
}

#[test]
fn off_describes_no_landlock() {
    let mut s = spec("/h");
    s.mode = Mode::Off;
    let d = describe(&s, None);
    assert_eq!(d["mode"], "off");
    assert_eq!(d["landlock"], "off");
    assert_eq!(d["no_new_privs"], false);
}

#[test]
fn strict_describes_the_kernel() {
    let d = describe(&spec("/h"), None);
    assert_eq!(d["mode"], "strict");
    match kernel_abi() {
        Ok(abi) => assert_eq!(d["landlock"]["abi"], abi),
        Err(_) => assert!(d["landlock"].as_str().unwrap().starts_with("unavailable")),
    }
}

/// base/{a/, b, keep/{x, secret/s}, mcp/conf, to-mcp -> mcp, to-a -> a}
fn split_tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = canonical(dir.path());
    for d in ["a", "keep/secret", "mcp"] {
        std::fs::create_dir_all(base.join(d)).unwrap();
    }
    for f in ["b", "keep/x", "keep/secret/s", "mcp/conf"] {
        std::fs::write(base.join(f), "x").unwrap();
    }
    std::os::unix::fs::symlink(base.join("mcp"), base.join("to-mcp")).unwrap();
    std::os::unix::fs::symlink(base.join("a"), base.join("to-a")).unwrap();
    (dir, base)
}

#[test]
fn a_default_grant_is_split_around_protected_paths() {
    let (_dir, base) = split_tree();
    let protected = [base.join("keep/secret"), base.join("mcp")];
    let Split::Parts { parts, around } = split::split_with(&base, &protected, 100) else {
        panic!("not split");
    };
    let names: Vec<_> = parts
        .iter()
        .map(|p| p.strip_prefix(&base).unwrap())
        .collect();
    let want = ["a", "b", "keep/x", "to-a"].map(Path::new);
    assert_eq!(names, want, "the link to mcp is left out too");
    assert_eq!(around, protected);
    for p in &protected {
        assert!(!parts.iter().any(|g| overlaps(g, p)), "{p:?}");
    }
    // Nothing protected beneath it; beneath a protected path; too many.
    assert_eq!(
        split::split_with(&base.join("a"), &protected, 100),
        Split::Whole
    );
    let inside = split::split_with(&base.join("mcp/conf"), &protected, 100);
    assert!(
        matches!(inside, Split::Refused(ref w) if w.contains("lies in")),
        "{inside:?}"
    );
    let many = split::split_with(&base, &protected, 3);
    assert!(
        matches!(many, Split::Refused(ref w) if w.contains("entries")),
        "{many:?}"
    );
}

#[test]
fn the_plan_splits_usr_around_a_protected_path_and_says_so() {
    let share = canonical(Path::new("/usr/share"));
    if !share.is_dir() || share != Path::new("/usr/share") {
        println!("SKIPPED: no plain /usr/share");
        return;
    }
    let mut s = spec("/var/lib/mcp-edge/children/fs");
    s.protected.push(share.clone());
    let p = plan(&s, None);
    assert!(
        p.split
            .contains(&"/usr split around /usr/share".to_string()),
        "{:?}",
        p.split
    );
    let all = p.all();
    assert!(!reaches(&all, "/usr/share/zoneinfo"));
    assert!(reaches(&all, "/usr/bin/env"));
    assert!(!all.iter().any(|g| g.path == Path::new("/usr")));
    let d = describe(&s, None);
    assert_eq!(d["split"][0], "/usr split around /usr/share", "{d}");
    assert!(
        !d["paths_ro"].to_string().contains("/usr/bin"),
        "listed as split, not part by part"
    );
}
