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
//! `KillMode=mixed` catches what escaped even that once mcp-edge has
//! exited (see `systemd/mcp-edge.service`).
//!
//! **Reaping next to tokio.** tokio waits for its own children by pid (a
//! pidfd, or SIGCHLD and `waitpid(pid)`, plus a queue for children dropped
//! unreaped); a blanket `waitpid(-1)` would steal their exit status and
//! break `Child::wait`. So mcp-edge never waits for "any child": every
//! stdio child is started through [`spawn`], which records its pid and
//! start time in a fixed table ([`crate::limits::MAX_TRACKED_CHILDREN`])
//! under a lock taken before the fork. On each SIGCHLD the reaper
//! ([`Reaper::watch`], a task of the composition root) lists mcp-edge's
//! zombie children in `/proc` and, for each, under that lock, reads it
//! again and reaps it by pid unless the table holds it ([`reap_orphans`]):
//! a stdio child that is already a zombie was recorded before the reaper
//! could take the lock. An entry goes only when `/proc` says its process is
//! gone (tokio reaped it; a read that fails otherwise, such as `EMFILE`,
//! keeps it: [`procfs::Lookup`]); the start time keeps a reused pid from
//! passing for a tracked child, and an entry whose start time could not be
//! read (0) covers its pid whatever the start.
//!
//! Linux only (`/proc`, `prctl`). Signals are sent by pid after checking
//! the pid still names the process that was collected (same start time),
//! and to a process group only while its id is surely the child's
//! ([`Group`]); the window between the check and the signal is the usual
//! one of `kill(2)`. The `/proc` walks run on tokio's blocking pool
//! ([`scan`] is called through `off_runtime`).

pub mod procfs;
mod tree;

use crate::limits;
use procfs::{Lookup, Proc};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
pub use tree::{kill_tree, scan, signal, signal_tree, stop_tree, Group};

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

/// Why mcp-edge is not made a subreaper ([`Reaper::start`]).
#[derive(Debug, thiserror::Error)]
pub enum ReaperError {
    /// `/proc` cannot be listed or read: orphans could not be found.
    #[error("/proc is unusable ({0})")]
    Proc(std::io::Error),
    /// No SIGCHLD stream: orphans would never be reaped.
    #[error("cannot watch SIGCHLD ({0})")]
    Sigchld(std::io::Error),
    /// `prctl(PR_SET_CHILD_SUBREAPER)` failed.
    #[error("prctl(PR_SET_CHILD_SUBREAPER) failed ({0})")]
    Prctl(std::io::Error),
}

/// Why a stdio child was not started ([`spawn`]).
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The table of children tokio waits for is full.
    #[error(
        "{} child processes tracked already (limits::MAX_TRACKED_CHILDREN)",
        limits::MAX_TRACKED_CHILDREN
    )]
    Full,
    /// The spawn itself failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// mcp-edge as a child subreaper that reaps its orphans: made by
/// [`Reaper::start`], run by [`Reaper::watch`].
pub struct Reaper {
    sigchld: tokio::signal::unix::Signal,
}

impl Reaper {
    /// Checks that `/proc` is usable and SIGCHLD can be watched, then makes
    /// mcp-edge the subreaper of its descendants (`PR_SET_CHILD_SUBREAPER`):
    /// an orphan is re-parented to it rather than to init. Without either,
    /// it stays no subreaper: orphans it could not reap would pile up as
    /// zombies. Inside a runtime.
    pub fn start() -> Result<Reaper, ReaperError> {
        use tokio::signal::unix::{signal, SignalKind};
        procfs::usable().map_err(ReaperError::Proc)?;
        let sigchld = signal(SignalKind::child()).map_err(ReaperError::Sigchld)?;
        // SAFETY: prctl(2) sets a flag of this process; no memory is passed.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(ReaperError::Prctl(std::io::Error::last_os_error()));
        }
        Ok(Reaper { sigchld })
    }

    /// The reaper: [`reap_orphans`] (off the runtime) now and at every
    /// SIGCHLD. A task of the composition root; its handle's drop ends it.
    pub async fn watch(mut self) {
        loop {
            reap().await;
            if self.sigchld.recv().await.is_none() {
                return;
            }
        }
    }
}

/// The children tokio waits for: `(pid, start time)`, [`FREE`] when free;
/// start time 0 when it could not be read.
type Table = [(i32, u64); limits::MAX_TRACKED_CHILDREN];

const FREE: (i32, u64) = (0, 0);

static TRACKED: Mutex<Table> = Mutex::new([FREE; limits::MAX_TRACKED_CHILDREN]);

fn tracked() -> MutexGuard<'static, Table> {
    TRACKED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Frees the entries (those `which` picks) of processes `look` says are
/// surely gone (reaped by tokio); an unknown read keeps the entry.
fn purge(table: &mut Table, which: impl Fn(&(i32, u64)) -> bool, look: impl Fn(i32) -> Lookup) {
    for e in table.iter_mut().filter(|e| e.0 != 0 && which(e)) {
        if look(e.0).gone(e.1) {
            *e = FREE;
        }
    }
}

/// Whether `p` is a tracked child: its pid is in the table with its start
/// time, or with start time 0 (not known: any process with the pid).
fn holds(table: &Table, p: &Proc) -> bool {
    (table.iter()).any(|&(pid, start)| pid == p.pid && (start == p.start || start == 0))
}

/// A stdio child in the table: its entry is freed once the child is gone.
#[derive(Debug)]
pub struct Tracked((i32, u64));

impl Tracked {
    /// The child's process group (it leads one: `process_group(0)`).
    pub fn group(&self) -> Group {
        Group::led_by(self.0 .0, self.0 .1)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let (pid, start) = self.0;
        if Proc::lookup(pid).gone(start) {
            let mut table = tracked();
            if let Some(e) = table.iter_mut().find(|e| **e == (pid, start)) {
                *e = FREE;
            }
        }
    }
}

/// Spawns `cmd` (a stdio child, which tokio will wait for) and records it,
/// so the reaper leaves its exit status to tokio. Errors: the spawn's, or
/// the table is full ([`limits::MAX_TRACKED_CHILDREN`], counted as
/// `refused{limit="tracked_children"}`).
///
/// The table's lock is held across the fork (`cmd.spawn()`): the reaper
/// checks the table under it just before each `waitpid`, so a child that
/// exits at once cannot be reaped between fork and record. Nothing else is
/// done under it but one `/proc` read (and, only when the table is full, a
/// purge): the section is a fork/exec long.
pub fn spawn(
    cmd: &mut tokio::process::Command,
) -> Result<(tokio::process::Child, Tracked), SpawnError> {
    let mut table = tracked();
    let mut free = table.iter().position(|e| e.0 == 0);
    if free.is_none() {
        purge(&mut table, |_| true, Proc::lookup);
        free = table.iter().position(|e| e.0 == 0);
    }
    let Some(slot) = free else {
        crate::metrics::refused("tracked_children");
        return Err(SpawnError::Full);
    };
    let child = cmd.spawn()?;
    let pid = child.id().map_or(0, |p| p as i32);
    // Not reaped yet (tokio reaps only when polled), so still readable; if
    // the read fails all the same, 0 makes the entry cover the pid.
    let start = Proc::lookup(pid).found().map_or(0, |p| p.start);
    table[slot] = (pid, start);
    Ok((child, Tracked((pid, start))))
}

/// Reaps, by pid, mcp-edge's zombie children that tokio does not wait for
/// (orphans re-parented to the subreaper); returns how many. Blocking
/// (`/proc`): from async code, [`reap`]. The listing is read without the
/// lock; each zombie is read again and reaped under it.
pub fn reap_orphans() -> usize {
    let me = std::process::id() as i32;
    // Entries whose start time is not known cover their pid: free the stale ones.
    purge(&mut tracked(), |e| e.1 == 0, Proc::lookup);
    let mut reaped = 0;
    for z in procfs::all().filter(|p| p.ppid == me && p.state == b'Z') {
        let table = tracked();
        // Under the lock no stdio child is being started: a zombie with
        // this pid now is either in the table or an orphan.
        let Some(p) = Proc::read(z.pid).filter(|p| p.ppid == me && p.state == b'Z') else {
            continue;
        };
        if holds(&table, &p) {
            continue;
        }
        let mut status = 0;
        // SAFETY: waits, without blocking, for one zombie child of ours by pid.
        if unsafe { libc::waitpid(p.pid, &mut status, libc::WNOHANG) } == p.pid {
            reaped += 1;
        }
    }
    if reaped > 0 {
        metrics::counter!(crate::metrics::ORPHANS_REAPED).increment(reaped as u64);
    }
    reaped
}

/// [`reap_orphans`] on tokio's blocking pool.
pub async fn reap() -> usize {
    tree::off_runtime(reap_orphans).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits until child `pid` has exited (a zombie: nobody waited yet).
    async fn zombie(pid: i32) {
        while Proc::read(pid).is_some_and(|p| p.state != b'Z') {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
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

    /// A table holding `entries`, the rest free.
    fn table(entries: &[(i32, u64)]) -> Table {
        let mut t = [FREE; limits::MAX_TRACKED_CHILDREN];
        t[..entries.len()].copy_from_slice(entries);
        t
    }

    fn zombie_proc(pid: i32, start: u64) -> Proc {
        let (ppid, pgrp, sid, state) = (1, pid, pid, b'Z');
        Proc {
            pid,
            ppid,
            pgrp,
            sid,
            state,
            start,
        }
    }

    /// A failed `/proc` read (EMFILE under a connection flood) never frees
    /// an entry: only "no such process" or another start time does.
    #[test]
    fn an_unknown_read_keeps_a_tracked_entry() {
        let entries = [(10, 100), (11, 0), (12, 120), (13, 130)];
        let mut t = table(&entries);
        purge(&mut t, |_| true, |_| Lookup::Unknown);
        assert_eq!(&t[..4], &entries);
        let look = |pid| match pid {
            10 => Lookup::Gone,
            11 => Lookup::Found(zombie_proc(11, 555)),
            12 => Lookup::Found(zombie_proc(12, 999)),
            _ => Lookup::Unknown,
        };
        purge(&mut t, |_| true, look);
        // 10 gone; 11's start is not known (kept); 12's pid names another process.
        assert_eq!(&t[..4], &[FREE, (11, 0), FREE, (13, 130)]);
    }

    /// An entry whose start time was not read covers its pid whatever the
    /// zombie's start time; a known start must match.
    #[test]
    fn an_entry_without_start_time_covers_its_pid() {
        let t = table(&[(11, 0), (12, 120)]);
        assert!(holds(&t, &zombie_proc(11, 777)));
        assert!(holds(&t, &zombie_proc(12, 120)));
        assert!(!holds(&t, &zombie_proc(12, 121)));
        assert!(!holds(&t, &zombie_proc(13, 0)));
    }

    #[test]
    fn markers_are_unique_and_name_this_process() {
        let (a, b) = (Marker::next(), Marker::next());
        assert_ne!(a, b);
        assert!(a.value().starts_with(&format!("{}-", std::process::id())));
        assert_eq!(a.entry, format!("MCP_EDGE_CHILD={}", a.value()));
    }
}
