//! A stdio child process: how it is started (its own process group,
//! `PR_SET_PDEATHSIG`, a [`Marker`] in an otherwise explicit environment,
//! in its sandbox ([`crate::sandbox`]), tracked for the reaper) and how it and everything it started are stopped
//! (transports-stdio.mdx §Shutdown, then [`crate::reaper`] for the
//! descendants that left its process group).

use crate::limits;
use crate::reaper::{self, Group, Marker, Tracked};
use crate::sandbox::{self, Mode, Prepared};
use std::process::Stdio;
use tokio::process::{Child, Command};

/// One started child: what its stop needs. Dropped before its stop ran (the
/// owner task was aborted), it kills the child's process group (while it
/// is surely the child's: [`Group`]) and every process carrying its marker
/// at once.
pub(super) struct Incarnation {
    group: Group,
    marker: Marker,
    _tracked: Tracked,
    stopped: bool,
}

impl Drop for Incarnation {
    fn drop(&mut self) {
        if !self.stopped {
            reaper::kill_tree(self.marker.clone(), self.group);
        }
    }
}

/// Why a child did not start.
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    /// Its sandbox could not be prepared (home, ruleset).
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    /// The spawn failed (or the reaper's table is full).
    #[error(transparent)]
    Spawn(#[from] reaper::SpawnError),
}

/// What a stdio child is started with (`Transport::Stdio`).
pub(super) struct Launch<'a> {
    pub name: &'a str,
    pub command: &'a str,
    pub args: &'a [String],
    pub env: &'a std::collections::BTreeMap<String, String>,
    pub cwd: Option<&'a std::path::Path>,
    pub sandbox: &'a sandbox::Spec,
}

/// Starts the child of a stdio upstream: `command` with `args` in `cwd`,
/// its own process group, `PR_SET_PDEATHSIG` so it dies with mcp-edge even
/// on SIGKILL, piped stdio, killed when dropped; an explicit environment
/// ([`sandbox::environment`] and the reaper's [`Marker`]: nothing of
/// mcp-edge's own, such as `CREDENTIALS_DIRECTORY` or `NOTIFY_SOCKET`);
/// under `sandbox = "strict"` `no_new_privs` and the Landlock ruleset
/// built here, before the fork ([`sandbox::Prepared`]); descriptors past
/// stdio close at the exec.
pub(super) fn start(l: &Launch<'_>) -> Result<(Child, Incarnation), StartError> {
    sandbox::prepare_home(l.sandbox)?;
    let (prepared, refused) = match l.sandbox.mode {
        Mode::Strict => {
            let plan = sandbox::plan(l.sandbox, l.cwd);
            let spec = l.sandbox;
            // What the config check refused, checked again where each
            // grant is opened now; the child's home (in the state
            // directory) is its own.
            // (canonical, as the protected paths and an opened path are:
            // under DynamicUser= the state directory is a symlink).
            let home = std::fs::canonicalize(&spec.home).unwrap_or_else(|_| spec.home.clone());
            let allowed = |real: &std::path::Path| {
                real.starts_with(&home)
                    || !spec.protected.iter().any(|p| sandbox::overlaps(real, p))
            };
            let built = Prepared::build(&plan.all(), spec.network, &allowed)?;
            (built, plan.refused)
        }
        Mode::Off => (Prepared::off(), Vec::new()),
    };
    if l.sandbox.mode == Mode::Strict {
        degraded(l, &prepared, &refused);
    }
    let marker = Marker::next();
    let mut cmd = Command::new(l.command);
    let lookup = |name: &str| std::env::var_os(name);
    cmd.args(l.args)
        .env_clear()
        .envs(sandbox::environment(l.sandbox, l.env, &lookup))
        .env(reaper::MARKER_VAR, marker.value())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let enter = prepared.enter();
    // SAFETY: only async-signal-safe system calls on plain values run
    // between fork and exec (prctl; `Enter::enter`: prctl, open, the
    // landlock calls, close, close_range); nothing allocates or locks.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            enter.enter()
        });
    }
    if let Some(dir) = l.cwd {
        cmd.current_dir(dir);
    }
    let (child, tracked) = reaper::spawn(&mut cmd)?;
    drop(prepared);
    Ok((
        child,
        Incarnation {
            group: tracked.group(),
            marker,
            _tracked: tracked,
            stopped: false,
        },
    ))
}

/// A strict child that starts with less than its grant (no Landlock, an
/// operator's path missing, a default grant left out because it could not
/// be split around a protected path: `refused`): counted each time,
/// warned about at most once per [`limits::SANDBOX_WARN_PERIOD`].
fn degraded(l: &Launch<'_>, prepared: &Prepared, refused: &[String]) {
    // Missing default paths (`/lib32`, `/etc/pki`, …) are normal; an
    // operator's path that is missing is not.
    let operator = |p: &std::path::PathBuf| {
        l.sandbox.paths_rw.contains(p)
            || l.sandbox.paths_ro.contains(p)
            || l.cwd == Some(p.as_path())
    };
    let missing: Vec<_> = prepared.missing.iter().filter(|p| operator(p)).collect();
    let reason = if !prepared.landlocked() {
        "landlock_unavailable"
    } else if !prepared.escaped.is_empty() {
        "grant_escaped"
    } else if !missing.is_empty() {
        "path_missing"
    } else if !refused.is_empty() {
        "default_refused"
    } else {
        return;
    };
    let name = l.name.to_owned();
    metrics::counter!(crate::metrics::SANDBOX_DEGRADED, "upstream" => name, "reason" => reason)
        .increment(1);
    static LAST: std::sync::Mutex<Option<tokio::time::Instant>> = std::sync::Mutex::new(None);
    let now = tokio::time::Instant::now();
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if last.is_some_and(|t| now.duration_since(t) < limits::SANDBOX_WARN_PERIOD) {
        return;
    }
    *last = Some(now);
    match sandbox::kernel_abi() {
        Err(why) => tracing::warn!(
            upstream = l.name,
            "sandbox degraded: Landlock {why}; the child runs with no_new_privs and an \
             explicit environment only (see /status)"
        ),
        Ok(_) if !prepared.escaped.is_empty() => tracing::warn!(
            upstream = l.name,
            escaped = ?prepared.escaped,
            "sandbox: granted paths that now lead to a protected path (a symlink?) were left out"
        ),
        Ok(_) if !missing.is_empty() => tracing::warn!(
            upstream = l.name,
            ?missing,
            "sandbox: configured paths that do not exist were skipped"
        ),
        Ok(_) => tracing::warn!(
            upstream = l.name,
            ?refused,
            "sandbox: default grants holding a protected path were left out (see /status)"
        ),
    }
}

impl Incarnation {
    /// After stdin was closed: up to [`limits::CHILD_STOP_GRACE`] for the
    /// child to exit, then SIGTERM to its group and to every process
    /// carrying its marker, again the grace, then SIGKILL; the child is
    /// always reaped. Then what it left behind (descendants that left its
    /// group, re-parented to mcp-edge) gets the same SIGTERM, grace, SIGKILL.
    pub(super) async fn stop(mut self, child: &mut Child) {
        let grace = limits::CHILD_STOP_GRACE;
        let (marker, group) = (Some(self.marker.clone()), self.group);
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            reaper::signal_tree(marker.clone(), group, libc::SIGTERM).await;
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                reaper::signal_tree(marker.clone(), group, libc::SIGKILL).await;
                let _ = child.wait().await;
            }
        }
        // The child is reaped: its group is signalled only if one of the
        // processes stopped now is still in it.
        reaper::stop_tree(marker, group, grace).await;
        self.stopped = true;
    }
}
