//! The sandbox of stdio children (issue 23, part 2): what a child may read,
//! write and execute, its environment, and how that is enforced.
//!
//! Landlock (kernel `Documentation/userspace-api/landlock.rst`) only
//! grants: a sandboxed process reaches nothing but the [`grants`] of its
//! [`Spec`]. The default grant (`sandbox = "strict"`) is the system's
//! program and library paths, the files under `/etc` that runtimes read
//! (name resolution, TLS roots, time zone, passwd), a few device and
//! system-wide `/proc`/`/sys` files, and the child's own home (with its
//! temp directory) and working directory. Never `/run`, the config
//! directory, the rest of the state directory, the credentials directory,
//! the secret files or the audit log ([`Spec::protected`]): `config`
//! refuses operator paths that overlap those, and a default grant that
//! holds one is split around it ([`split`]: `/opt` granted entry by entry
//! but for `/opt/mcp-edge`).
//! Not `/proc` as a whole either: on a 6.18 kernel (ABI 7) a sandboxed
//! root child read `/proc/<gateway>/environ` with `/proc` granted, so the
//! child gets only its own `/proc/<pid>` ([`ruleset`], added between fork
//! and exec); what it starts gets no `/proc/<pid>` of its own.
//!
//! The ruleset is built in the parent ([`Prepared::build`]); between fork
//! and exec only raw system calls run ([`Enter::enter`]): `no_new_privs`
//! (`prctl(2)` `PR_SET_NO_NEW_PRIVS`), `landlock_restrict_self(2)`, and
//! `close_range(2)` with `CLOSE_RANGE_CLOEXEC` so that no descriptor past
//! stdio survives the exec.

mod ruleset;
mod split;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use ruleset::{kernel_abi, Enter, Prepared, Unavailable};
pub use split::{canonical, split, Split};

/// `sandbox` of a stdio upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Landlock with the default grant plus `paths_rw`/`paths_ro`, and
    /// `no_new_privs`.
    Strict,
    /// Neither Landlock nor `no_new_privs`; the environment stays explicit.
    Off,
}

impl Mode {
    /// As written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Strict => "strict",
            Mode::Off => "off",
        }
    }
}

/// What one stdio upstream's child gets: the config keys `sandbox`,
/// `paths_rw`, `paths_ro`, `network`, and its own home (resolved by
/// `config`: `<state_directory>/children/NAME`, else under the temp dir).
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// `sandbox`, default [`Mode::Strict`].
    pub mode: Mode,
    /// `paths_rw`: read, write, create, remove beneath each.
    pub paths_rw: Vec<PathBuf>,
    /// `paths_ro`: read, list and execute beneath each.
    pub paths_ro: Vec<PathBuf>,
    /// `network`, default `true`; `false` closes TCP bind and connect
    /// (Landlock ABI 4 and later).
    pub network: bool,
    /// The child's `HOME`, created 0700 at its start; its `TMPDIR` is
    /// [`Spec::tmp`].
    pub home: PathBuf,
    /// What no grant may reach, canonical ([`canonical`]): the config
    /// directory, the state directory but for the home, the secret files,
    /// the audit log, `$CREDENTIALS_DIRECTORY`, the admin socket, [`NEVER`]
    /// (filled in by `config`). A default grant holding one is split.
    pub protected: Vec<PathBuf>,
}

impl Spec {
    /// The default of an upstream named `name` whose home is `home`.
    pub fn strict(home: PathBuf) -> Spec {
        Spec {
            mode: Mode::Strict,
            paths_rw: Vec::new(),
            paths_ro: Vec::new(),
            network: true,
            home,
            protected: NEVER.iter().map(PathBuf::from).collect(),
        }
    }

    /// The child's `TMPDIR`: `tmp` in its home.
    pub fn tmp(&self) -> PathBuf {
        self.home.join("tmp")
    }
}

/// What a grant allows beneath its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read files, list directories, execute.
    Read,
    /// Everything Landlock handles (read, write, create, remove, rename).
    Write,
}

/// One path the child may reach, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The path (a directory: everything beneath it; a file: that file).
    pub path: PathBuf,
    /// What the child may do there.
    pub access: Access,
}

/// Programs and libraries (read and execute). Missing ones (`/lib64` on
/// ARM) are skipped.
pub const SYSTEM_PATHS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
];

/// The files under `/etc` that runtimes read: name resolution, TLS roots,
/// time zone, users and groups, the dynamic linker's cache.
pub const ETC_PATHS: &[&str] = &[
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/passwd",
    "/etc/group",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/mime.types",
];

/// System-wide, not per-process, kernel files that runtimes read (memory,
/// CPUs, cgroup limits; glibc's overcommit setting). Never `/proc` itself.
pub const KERNEL_PATHS: &[&str] = &[
    "/proc/meminfo",
    "/proc/stat",
    "/proc/cpuinfo",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/version",
    "/proc/sys/vm/overcommit_memory",
    "/sys/fs/cgroup",
    "/sys/devices/system/cpu",
    "/dev/urandom",
    "/dev/random",
];

/// Devices a child may read and write.
pub const DEVICE_PATHS: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// Paths the default grant never includes, whatever is configured
/// (`config` refuses operator paths that overlap them).
pub const NEVER: &[&str] = &["/run", "/etc/mcp-edge"];

/// Every grant of a child, and what became of the default grants that
/// hold a protected path.
#[derive(Debug, Default)]
pub struct Plan {
    /// What the ruleset grants, but for [`Plan::parts`].
    pub grants: Vec<Grant>,
    /// What the ruleset grants in place of the default grants split.
    pub parts: Vec<Grant>,
    /// Default grants split around protected paths ("/opt split around
    /// /opt/mcp-edge").
    pub split: Vec<String>,
    /// Default grants left out, and why.
    pub refused: Vec<String>,
}

/// Every grant of `spec` for a child working in `cwd` (when set): the
/// default list (each split around [`Spec::protected`], [`split`]), the
/// home, the working directory, then the operator's. Lists directories
/// when a default grant must be split: in the parent, before the fork.
pub fn plan(spec: &Spec, cwd: Option<&Path>) -> Plan {
    let read = |p: &Path| Grant {
        path: p.to_path_buf(),
        access: Access::Read,
    };
    let mut plan = Plan::default();
    for p in SYSTEM_PATHS.iter().chain(ETC_PATHS).chain(KERNEL_PATHS) {
        let path = Path::new(p);
        match split(path, &spec.protected) {
            Split::Whole => plan.grants.push(read(path)),
            Split::Parts { parts, around } => {
                plan.parts.extend(parts.iter().map(|q| read(q)));
                let around = split::shown(&around);
                plan.split.push(format!("{p} split around {around}"));
            }
            Split::Refused(why) => plan.refused.push(why),
        }
    }
    let write = |p: &Path| Grant {
        path: p.to_path_buf(),
        access: Access::Write,
    };
    let out = &mut plan.grants;
    out.extend(DEVICE_PATHS.iter().map(|p| write(Path::new(p))));
    out.push(write(&spec.home));
    out.extend(cwd.map(write));
    out.extend(spec.paths_rw.iter().map(|p| write(p)));
    out.extend(spec.paths_ro.iter().map(|p| read(p)));
    plan
}

impl Plan {
    /// Everything the ruleset grants.
    pub fn all(&self) -> Vec<Grant> {
        self.grants.iter().chain(&self.parts).cloned().collect()
    }
}

/// Everything [`plan`] grants.
pub fn grants(spec: &Spec, cwd: Option<&Path>) -> Vec<Grant> {
    plan(spec, cwd).all()
}

/// True when one of `a` and `b` is beneath (or is) the other: granting
/// `a` would grant `b` or part of it.
pub fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The variable is mcp-edge's own and never a child's: systemd's
/// credentials, notify socket, watchdog and socket activation, and the
/// reaper's marker ([`crate::reaper::MARKER_VAR`]).
pub fn forbidden_env(name: &str) -> bool {
    name == "CREDENTIALS_DIRECTORY"
        || name == "NOTIFY_SOCKET"
        || name == crate::reaper::MARKER_VAR
        || name.starts_with("WATCHDOG_")
        || name.starts_with("LISTEN_")
}

/// The child's whole environment (it starts from an empty one): `PATH`
/// (mcp-edge's, else `/usr/local/bin:/usr/bin:/bin`), `HOME` and `TMPDIR`
/// (its own), `LANG` (mcp-edge's, when set), then the config's `env`.
pub fn environment(
    spec: &Spec,
    env: &BTreeMap<String, String>,
    lookup: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<(OsString, OsString)> {
    let path = lookup("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut out = vec![
        ("PATH".into(), path),
        ("HOME".into(), spec.home.clone().into_os_string()),
        ("TMPDIR".into(), spec.tmp().into_os_string()),
    ];
    if let Some(lang) = lookup("LANG") {
        out.push(("LANG".into(), lang));
    }
    for (k, v) in env {
        out.retain(|(name, _)| name != k.as_str());
        out.push((k.into(), v.into()));
    }
    out
}

/// Errors of preparing a child's sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The home (or its temp directory) could not be made, or is not a
    /// private directory of this user.
    #[error("child home {path}: {reason}")]
    Home {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The kernel refused the ruleset (not its absence: that degrades).
    #[error("landlock ruleset: {0}")]
    Ruleset(String),
}

/// Makes `spec`'s home and temp directory, each 0700; an existing one must
/// be a directory (not a symlink) owned by this user and closed to others,
/// and so must the two above it be owned by this user and not writable by
/// others (a per-uid directory under a shared `/tmp` made by someone else
/// is refused).
pub fn prepare_home(spec: &Spec) -> Result<(), SandboxError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let home_err = |path: &Path, reason: String| SandboxError::Home {
        path: path.to_path_buf(),
        reason,
    };
    if !spec.home.is_absolute() {
        return Err(home_err(&spec.home, "not an absolute path".into()));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(spec.tmp())
        .map_err(|e| home_err(&spec.tmp(), e.to_string()))?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    // The two directories above the home (`children` and the state or
    // per-uid directory) must be ours and closed to writers: whoever can
    // rename in them could swap the home after the check.
    let above = spec.home.ancestors().skip(1).take(2);
    for dir in above {
        let m = std::fs::metadata(dir).map_err(|e| home_err(dir, e.to_string()))?;
        if m.uid() != uid || m.mode() & 0o022 != 0 {
            return Err(home_err(
                dir,
                format!("must belong to uid {uid} and be writable by it alone"),
            ));
        }
    }
    for dir in [spec.home.clone(), spec.tmp()] {
        let m = std::fs::symlink_metadata(&dir).map_err(|e| home_err(&dir, e.to_string()))?;
        if !m.is_dir() || m.uid() != uid || m.mode() & 0o077 != 0 {
            return Err(home_err(
                &dir,
                format!(
                    "must be a directory of uid {uid} with mode 0700 (is uid {}, mode {:o})",
                    m.uid(),
                    m.mode() & 0o7777
                ),
            ));
        }
    }
    Ok(())
}

/// What a child of `spec` (working in `cwd`) gets, for `/status` and
/// `check-config`: mode, Landlock ABI or why it is unavailable, what is
/// enforced, the granted paths (present and missing; a split default
/// grant as "/opt split around /opt/mcp-edge", not entry by entry), the
/// default grants left out (`refused`, then `degraded`), network, home.
pub fn describe(spec: &Spec, cwd: Option<&Path>) -> serde_json::Value {
    use serde_json::json;
    let base = json!({
        "mode": spec.mode.as_str(),
        "home": spec.home.display().to_string(),
        "tmp": spec.tmp().display().to_string(),
        "environment": "explicit: PATH, HOME, TMPDIR, LANG, the marker, the config's env",
    });
    if spec.mode == Mode::Off {
        let mut v = base;
        v["landlock"] = json!("off");
        v["no_new_privs"] = json!(false);
        v["network"] = json!("open");
        return v;
    }
    let (mut ro, mut rw, mut missing) = (Vec::new(), Vec::new(), Vec::new());
    let plan = plan(spec, cwd);
    for g in plan.grants {
        let shown = g.path.display().to_string();
        if !g.path.exists() && g.path != spec.home {
            missing.push(shown);
        } else if g.access == Access::Read {
            ro.push(shown);
        } else {
            rw.push(shown);
        }
    }
    ro.push("/proc/<pid> of the child itself (not of what it starts)".into());
    let mut v = base;
    v["no_new_privs"] = json!(true);
    v["paths_ro"] = json!(ro);
    v["paths_rw"] = json!(rw);
    v["missing"] = json!(missing);
    v["split"] = json!(plan.split);
    v["refused"] = json!(plan.refused);
    if !plan.refused.is_empty() {
        v["degraded"] = json!("default grants left out (see refused); the child may miss files");
    }
    let (landlock, enforced, network) = enforcement(spec);
    v["landlock"] = landlock;
    v["enforced"] = json!(enforced);
    v["network"] = json!(network);
    v
}

/// Landlock's state for `spec` on this kernel: the ABI (or why there is
/// none), `full`/`partial: …`/`none`, and what the network rule does.
fn enforcement(spec: &Spec) -> (serde_json::Value, String, &'static str) {
    use serde_json::json;
    match kernel_abi() {
        Err(why) => (
            json!(format!("unavailable: {why}")),
            "none: no filesystem rules (no_new_privs and the explicit environment only)".into(),
            "open",
        ),
        Ok(abi) => {
            let mut gaps = Vec::new();
            if abi < 2 {
                gaps.push("cross-directory rename (ABI 2)");
            }
            if abi < 3 {
                gaps.push("truncate (ABI 3)");
            }
            if abi < 5 {
                gaps.push("device ioctl (ABI 5)");
            }
            if abi < 6 {
                gaps.push("signals and abstract sockets (ABI 6)");
            }
            let network = match (spec.network, abi >= 4) {
                (true, _) => "open",
                (false, true) => "closed: TCP bind and connect (UDP stays open)",
                (false, false) => "open: network = false needs Landlock ABI 4",
            };
            if !spec.network && abi < 4 {
                gaps.push("network = false (ABI 4)");
            }
            let enforced = if gaps.is_empty() {
                "full".to_string()
            } else {
                format!("partial: not {}", gaps.join(", "))
            };
            (json!({ "abi": abi }), enforced, network)
        }
    }
}

#[cfg(test)]
mod sandbox_tests;
