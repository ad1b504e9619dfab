//! A stdio child process: how it is started (its own process group,
//! `PR_SET_PDEATHSIG`, a [`Marker`] in its environment, tracked for the
//! reaper) and how it and everything it started are stopped
//! (transports-stdio.mdx §Shutdown, then [`crate::reaper`] for the
//! descendants that left its process group).

use crate::limits;
use crate::reaper::{self, Group, Marker, Tracked};
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

/// Starts the child of a stdio upstream: `command` with `args`, `env` and
/// `cwd`, in its own process group, with `PR_SET_PDEATHSIG` so it dies with
/// mcp-edge even on SIGKILL, without mcp-edge's systemd variables
/// (`NOTIFY_SOCKET`, `WATCHDOG_*`), piped stdio, killed when dropped.
pub(super) fn start(
    command: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    cwd: Option<&std::path::Path>,
) -> Result<(Child, Incarnation), reaper::SpawnError> {
    let marker = Marker::next();
    let mut cmd = Command::new(command);
    cmd.args(args)
        .envs(env)
        .env(reaper::MARKER_VAR, marker.value())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; it only sets a flag of the child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let (child, tracked) = reaper::spawn(&mut cmd)?;
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
