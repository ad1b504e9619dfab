//! The processes a stdio upstream leaves behind (issue 12 part 4): mcp-edge
//! is a child subreaper, reaps what is re-parented to it, and stops every
//! descendant of a stopped stdio child, not only its process group; at exit
//! it stops every descendant it has left.
//!
//! **Why.** A stdio child runs in a process group of its own, which is
//! signalled when it stops. A descendant that calls `setsid` (or `setpgid`)
//! leaves that group, and once its parent exits the kernel re-parents it to
//! the nearest subreaper, by default init: out of reach, it outlived the
//! gateway. [`become_subreaper`] (`PR_SET_CHILD_SUBREAPER`, at the start of
//! `serve`) makes such orphans children of mcp-edge instead.
//!
//! **Whose is an orphan: the marker.** An orphan's parent is gone, so the
//! tree no longer says which stdio child it came from. Each stdio child is
//! started with `MCP_EDGE_CHILD=<gateway pid>-<n>` ([`Marker`]) in its
//! environment, which its descendants inherit. The processes of one child
//! are the descendants of mcp-edge (read from `/proc`, parent links) that
//! carry its marker in `/proc/<pid>/environ`, with all of their own
//! descendants (which may have cleared their environment). A stop
//! ([`stop_tree`]) sends SIGTERM to the child's process group and to each of
//! them by pid, waits up to the grace for them to go, then sends SIGKILL to
//! the group and to whatever carries the marker then.
//!
//! **Decision: stopped with their stdio child, not on arrival.** An orphan
//! is not killed when it is re-parented: a server may start a daemon (an
//! ssh `ControlPersist` master, a language server) that it expects to find
//! again while it runs. It goes when the stdio child it came from stops:
//! exits, is restarted, removed or changed by a reload, or the gateway
//! stops; as the child's process group always did. A descendant that both
//! leaves the tree and drops the marker (a cleared environment, or an
//! environment unreadable because it made itself not dumpable) cannot be
//! told apart: it is stopped only when mcp-edge exits, when every
//! descendant is ([`stop_tree`] with no marker). systemd's
//! `KillMode=control-group` catches what escaped even that (see
//! `systemd/mcp-edge.service`).
//!
//! **Reaping next to tokio.** tokio waits for its own children by pid (a
//! pidfd, or SIGCHLD and `waitpid(pid)`, plus a queue for children dropped
//! unreaped); a blanket `waitpid(-1)` would steal their exit status and
//! break `Child::wait`. So mcp-edge never waits for "any child": every
//! stdio child is started through [`spawn`], which records its pid and
//! start time in a fixed table ([`crate::limits::MAX_TRACKED_CHILDREN`])
//! under the lock the reaper holds while it works, so a child cannot be
//! reaped between fork and record. On each SIGCHLD the reaper
//! ([`watch_orphans`], a task of the composition root) lists mcp-edge's
//! zombie children in `/proc` and reaps, by pid, those not in the table
//! ([`reap_orphans`]). An entry goes when its process is gone (tokio reaped
//! it); the start time keeps a reused pid from passing for a tracked child.
//!
//! Linux only (`/proc`, `prctl`). Signals are sent by pid after checking
//! the pid still names the process that was collected (same start time);
//! the window between the check and the signal is the usual one of
//! `kill(2)`.

pub mod procfs;

use crate::limits;
use procfs::Proc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The environment variable that marks a stdio child and its descendants.
pub const MARKER_VAR: &str = "MCP_EDGE_CHILD";

/// One stdio child's mark, `<gateway pid>-<n>`, unique in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// `MCP_EDGE_CHILD=<value>`, as `/proc/<pid>/environ` holds it.
    entry: String,
}

impl Marker {
    /// A mark no other child of this process has.
    pub fn next() -> Marker {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Marker {
            entry: format!("{MARKER_VAR}={}-{n}", std::process::id()),
        }
    }

    /// The variable's value (what the child's environment gets).
    pub fn value(&self) -> &str {
        &self.entry[MARKER_VAR.len() + 1..]
    }

    fn carried_by(&self, pid: i32) -> bool {
        procfs::environ_has(pid, self.entry.as_bytes())
    }
}

/// Makes mcp-edge the subreaper of its descendants (`PR_SET_CHILD_SUBREAPER`):
/// an orphan is re-parented to it rather than to init.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl(2) sets a flag of this process; no memory is passed.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The children tokio waits for: `(pid, start time)`, `(0, 0)` when free.
type Table = [(i32, u64); limits::MAX_TRACKED_CHILDREN];

static TRACKED: Mutex<Table> = Mutex::new([(0, 0); limits::MAX_TRACKED_CHILDREN]);

fn tracked() -> MutexGuard<'static, Table> {
    TRACKED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Frees the entries of processes that are gone (reaped by tokio).
fn purge(table: &mut Table) {
    for e in table.iter_mut().filter(|e| e.0 != 0) {
        if !procfs::exists(e.0, e.1) {
            *e = (0, 0);
        }
    }
}

/// A stdio child in the table: its entry is freed once the child is gone.
#[derive(Debug)]
pub struct Tracked((i32, u64));

impl Drop for Tracked {
    fn drop(&mut self) {
        let (pid, start) = self.0;
        if !procfs::exists(pid, start) {
            let mut table = tracked();
            if let Some(e) = table.iter_mut().find(|e| **e == (pid, start)) {
                *e = (0, 0);
            }
        }
    }
}

/// Spawns `cmd` (a stdio child, which tokio will wait for) and records it,
/// so the reaper leaves its exit status to tokio. Errors: the spawn's, or
/// the table is full ([`limits::MAX_TRACKED_CHILDREN`]).
pub fn spawn(
    cmd: &mut tokio::process::Command,
) -> std::io::Result<(tokio::process::Child, Tracked)> {
    let mut table = tracked();
    let mut free = table.iter().position(|e| e.0 == 0);
    if free.is_none() {
        purge(&mut table);
        free = table.iter().position(|e| e.0 == 0);
    }
    let Some(slot) = free else {
        return Err(std::io::Error::other(format!(
            "{} child processes tracked already (limits::MAX_TRACKED_CHILDREN)",
            limits::MAX_TRACKED_CHILDREN
        )));
    };
    let child = cmd.spawn()?;
    let pid = child.id().map_or(0, |p| p as i32);
    // Not reaped yet (tokio reaps only when polled), so still readable.
    let start = Proc::read(pid).map_or(0, |p| p.start);
    table[slot] = (pid, start);
    Ok((child, Tracked((pid, start))))
}

/// Reaps, by pid, mcp-edge's zombie children that tokio does not wait for
/// (orphans re-parented to the subreaper); returns how many.
pub fn reap_orphans() -> usize {
    let me = std::process::id() as i32;
    let mut table = tracked();
    purge(&mut table);
    let mut reaped = 0;
    for p in procfs::all().filter(|p| p.ppid == me && p.state == b'Z') {
        if table.contains(&(p.pid, p.start)) {
            continue;
        }
        let mut status = 0;
        // SAFETY: waits, without blocking, for one zombie child of ours by pid.
        if unsafe { libc::waitpid(p.pid, &mut status, libc::WNOHANG) } == p.pid {
            reaped += 1;
        }
    }
    drop(table);
    if reaped > 0 {
        metrics::counter!(crate::metrics::ORPHANS_REAPED).increment(reaped as u64);
    }
    reaped
}

/// The reaper: [`reap_orphans`] now and at every SIGCHLD. A task of the
/// composition root (after [`become_subreaper`]); its handle's drop ends it.
pub async fn watch_orphans() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot watch SIGCHLD ({e}): orphans are reaped only at exit");
            return;
        }
    };
    loop {
        reap_orphans();
        if sigchld.recv().await.is_none() {
            return;
        }
    }
}

/// mcp-edge's living descendants that carry `marker`, with their own
/// descendants; every living descendant with `None`. At most
/// [`limits::MAX_DESCENDANTS`]. Parent links are followed from mcp-edge down
/// (a pass over `/proc` per level, so the set stays bounded).
pub fn tree(marker: Option<&Marker>) -> Vec<Proc> {
    let me = std::process::id() as i32;
    // Each descendant found, and whether it is kept.
    let mut found: Vec<(Proc, bool)> = Vec::new();
    loop {
        let before = found.len();
        for p in procfs::all().filter(|p| !p.exited()) {
            if found.len() >= limits::MAX_DESCENDANTS {
                break;
            }
            if found.iter().any(|(f, _)| f.pid == p.pid) {
                continue;
            }
            let parent_kept = if p.ppid == me {
                Some(false)
            } else {
                found.iter().find(|(f, _)| f.pid == p.ppid).map(|f| f.1)
            };
            if let Some(parent_kept) = parent_kept {
                let kept = parent_kept || marker.is_none_or(|m| m.carried_by(p.pid));
                found.push((p, kept));
            }
        }
        if found.len() == before {
            break;
        }
    }
    found
        .into_iter()
        .filter_map(|(p, k)| k.then_some(p))
        .collect()
}

/// Sends `sig` to process group `pgid` (if > 0) and to each of `procs` that
/// still runs; returns how many of `procs` were signalled.
pub fn signal(procs: &[Proc], pgid: i32, sig: libc::c_int) -> usize {
    if pgid > 0 {
        // SAFETY: kill(2) on a process group we created; ESRCH is fine.
        unsafe { libc::killpg(pgid, sig) };
    }
    let mut sent = 0;
    for p in procs.iter().filter(|p| p.alive()) {
        // SAFETY: kill(2) on a descendant of ours, just checked to be it.
        if unsafe { libc::kill(p.pid, sig) } == 0 {
            sent += 1;
        }
    }
    let name = if sig == libc::SIGKILL { "KILL" } else { "TERM" };
    if sent > 0 {
        metrics::counter!(crate::metrics::DESCENDANTS_SIGNALLED, "signal" => name)
            .increment(sent as u64);
    }
    sent
}

/// Stops what a stdio child left behind (`marker`, its process group
/// `pgid`), or with `None` every descendant of mcp-edge: SIGTERM, up to
/// `grace` for them to go, then SIGKILL to the group and to whatever
/// carries the marker then. Returns how many processes it found.
pub async fn stop_tree(marker: Option<&Marker>, pgid: i32, grace: Duration) -> usize {
    let procs = tree(marker);
    signal(&procs, pgid, libc::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    while procs.iter().any(Proc::alive) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(limits::DESCENDANT_POLL).await;
    }
    let left = if procs.iter().any(Proc::alive) {
        tree(marker)
    } else {
        Vec::new()
    };
    signal(&left, pgid, libc::SIGKILL);
    procs.len()
}

/// At once and without waiting: SIGKILL to process group `pgid` and to
/// everything carrying `marker` (a stdio child's owner task was aborted).
pub fn kill_tree(marker: &Marker, pgid: i32) {
    signal(&tree(Some(marker)), pgid, libc::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits until child `pid` has exited (a zombie: nobody waited yet).
    async fn zombie(pid: i32) {
        while Proc::read(pid).is_some_and(|p| p.state != b'Z') {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn the_reaper_leaves_tracked_children_to_tokio() {
        let exits = |code: u8| {
            let mut cmd = tokio::process::Command::new("sh");
            cmd.args(["-c", &format!("exit {code}")]);
            cmd
        };
        let (mut tracked, _entry) = spawn(&mut exits(7)).unwrap();
        let mut untracked = exits(9).spawn().unwrap();
        zombie(tracked.id().unwrap() as i32).await;
        zombie(untracked.id().unwrap() as i32).await;
        assert_eq!(reap_orphans(), 1);
        assert_eq!(tracked.wait().await.unwrap().code(), Some(7));
        // The untracked one was reaped here: tokio finds no child to wait for.
        assert!(untracked.wait().await.is_err());
    }

    #[test]
    fn markers_are_unique_and_name_this_process() {
        let (a, b) = (Marker::next(), Marker::next());
        assert_ne!(a, b);
        assert!(a.value().starts_with(&format!("{}-", std::process::id())));
        assert_eq!(a.entry, format!("MCP_EDGE_CHILD={}", a.value()));
    }
}
