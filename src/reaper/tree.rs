//! A stdio child's processes, found and stopped: the walk of mcp-edge's
//! descendants ([`scan`]), signals by pid and to a process group that is
//! surely still the child's ([`Group`]), and the stops built on them. The
//! `/proc` reads and signals run on tokio's blocking pool ([`off_runtime`])
//! when called from async code.

use super::procfs::{self, Lookup, Proc};
use super::Marker;
use crate::limits;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A stdio child's process group: its id (the child's pid) and the
/// child's start time.
///
/// **Why not `killpg` at any time.** Once the leader is reaped and the group
/// is empty, its id is free: with pid reuse (`pid_max` is 32,768 on a 32-bit
/// Pi OS) it may name a new group, such as the next stdio child's. So the
/// group is signalled only while the leader is unreaped (its pid, started at
/// its start time, still exists, running or a zombie: the id cannot be
/// reused), or while a running process that carries the child's marker is
/// in it (a group id is not freed while the group has a member; the
/// processes being stopped are looked at first, then all of `/proc`, since
/// a member may have been re-parented out of mcp-edge's tree when mcp-edge
/// is no subreaper). The window between that check and the signal is
/// `kill(2)`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pgid: i32,
    start: u64,
}

impl Group {
    /// No group (a stop of every descendant).
    pub const NONE: Group = Group { pgid: 0, start: 0 };

    /// The group led by process `pid` started at `start` (0: not known).
    pub fn led_by(pid: i32, start: u64) -> Group {
        Group { pgid: pid, start }
    }

    /// Whether the id still names this group (see the type's docs):
    /// `procs` are processes being stopped, `marker` the child's.
    fn still_ours(&self, procs: &[Proc], marker: Option<&Marker>) -> bool {
        if self.pgid <= 0 {
            return false;
        }
        let leader = matches!(Proc::lookup(self.pgid),
            Lookup::Found(p) if self.start != 0 && p.start == self.start);
        let member = |p: &Proc| p.pgrp == self.pgid && !p.exited();
        leader
            || procs.iter().any(|p| member(p) && p.alive())
            || marker.is_some_and(|m| procfs::all().any(|p| member(&p) && m.carried_by(p.pid)))
    }
}

/// Runs `f` (`/proc` reads, signals) on tokio's blocking pool rather than
/// on a runtime worker; `T::default()` if it could not run to the end (a
/// panic, or the runtime shutting down).
pub async fn off_runtime<T, F>(f: F) -> T
where
    T: Default + Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("a /proc scan did not finish: {e}");
            T::default()
        }
    }
}

/// mcp-edge's living descendants that carry `marker`, with their own
/// descendants; every living descendant with `None`. Blocking: one pass
/// over `/proc` for the parent links ([`limits::MAX_PROCESSES_LISTED`]),
/// then the walk down from mcp-edge in memory, reading the environment of
/// the descendants not already under a marked one. At most
/// [`limits::MAX_DESCENDANTS`] are returned; more are counted as
/// `refused{limit="descendants"}`.
pub fn scan(marker: Option<&Marker>) -> Vec<Proc> {
    let me = std::process::id() as i32;
    let (mut links, listed_more) = procfs::links(limits::MAX_PROCESSES_LISTED);
    links.sort_unstable_by_key(|&(_, ppid)| ppid);
    let children = |parent: i32| {
        let from = links.partition_point(|&(_, pp)| pp < parent);
        let to = links.partition_point(|&(_, pp)| pp <= parent);
        links[from..to].iter().map(|&(pid, _)| pid)
    };
    // Depth first: (pid, its parent, whether the parent is kept).
    let mut stack: Vec<(i32, i32, bool)> = children(me).map(|p| (p, me, false)).collect();
    let mut kept = Vec::new();
    let mut left_out = 0u64;
    // Each link is visited once, unless pids reused mid-pass made a cycle.
    let mut visits = links.len();
    while let Some((pid, parent, parent_kept)) = stack.pop() {
        if visits == 0 {
            break;
        }
        visits -= 1;
        let keep = parent_kept || marker.is_none_or(|m| m.carried_by(pid));
        if keep && kept.len() >= limits::MAX_DESCENDANTS {
            left_out += 1;
        } else if keep {
            // Read again for the start time: still the parent's child, so
            // not a reused pid (unless the parent forked it: ours too).
            kept.extend(Proc::read(pid).filter(|p| p.ppid == parent && !p.exited()));
        }
        stack.extend(children(pid).map(|c| (c, pid, keep)));
    }
    if left_out > 0 || listed_more {
        truncated(left_out, listed_more);
    }
    kept
}

/// Counts a walk that left processes out, and warns the 1st, 2nd, 4th, 8th…
/// time (a throttle that needs no clock).
fn truncated(left_out: u64, listed_more: bool) {
    static TIMES: AtomicU64 = AtomicU64::new(0);
    metrics::counter!(crate::metrics::REFUSED, "limit" => "descendants").increment(left_out.max(1));
    let n = TIMES.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::warn!(
            "a stop found more processes than it can hold ({left_out} past limits::MAX_DESCENDANTS = {}; /proc listed past limits::MAX_PROCESSES_LISTED: {listed_more}): those are stopped only at exit ({n} such stops so far)",
            limits::MAX_DESCENDANTS
        );
    }
}

/// Sends `sig` to `group` while it is surely the child's ([`Group`]; the
/// child's `marker`) and to each of `procs` that still runs; returns how
/// many of `procs` were signalled. Blocking (a `/proc` read per process).
pub fn signal(procs: &[Proc], group: Group, marker: Option<&Marker>, sig: libc::c_int) -> usize {
    if group.still_ours(procs, marker) {
        // SAFETY: kill(2) on a process group just checked to be ours; ESRCH is fine.
        unsafe { libc::killpg(group.pgid, sig) };
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

/// [`scan`] then [`signal`], off the runtime: `sig` to `group` and to every
/// process carrying `marker` (every descendant with `None`).
pub async fn signal_tree(marker: Option<Marker>, group: Group, sig: libc::c_int) -> usize {
    off_runtime(move || signal(&scan(marker.as_ref()), group, marker.as_ref(), sig)).await
}

/// Stops what a stdio child left behind (`marker`, its `group`), or with
/// `None` every descendant of mcp-edge: SIGTERM, up to `grace` for them to
/// go (looked at every [`limits::DESCENDANT_POLL`]), then SIGKILL to the
/// group and to whatever carries the marker then. Returns how many
/// processes it found. The scans and signals run off the runtime.
pub async fn stop_tree(marker: Option<Marker>, group: Group, grace: Duration) -> usize {
    let m = marker.clone();
    let procs: Arc<[Proc]> = off_runtime(move || {
        let procs = scan(m.as_ref());
        signal(&procs, group, m.as_ref(), libc::SIGTERM);
        procs
    })
    .await
    .into();
    let any_alive = |procs: &Arc<[Proc]>| {
        let procs = procs.clone();
        off_runtime(move || procs.iter().any(Proc::alive))
    };
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline && any_alive(&procs).await {
        tokio::time::sleep(limits::DESCENDANT_POLL).await;
    }
    let found = procs.len();
    off_runtime(move || {
        let left = if procs.iter().any(Proc::alive) {
            scan(marker.as_ref())
        } else {
            Vec::new()
        };
        signal(&left, group, marker.as_ref(), libc::SIGKILL)
    })
    .await;
    found
}

/// At once and without waiting: SIGKILL to `group` and to everything
/// carrying `marker` (a stdio child's owner task was aborted). Called from
/// a `Drop`: on the blocking pool inside a runtime, else right here.
pub fn kill_tree(marker: Marker, group: Group) {
    let kill = move || signal(&scan(Some(&marker)), group, Some(&marker), libc::SIGKILL);
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(kill)),
        Err(_) => {
            kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child in a process group of its own, carrying `marker`, that
    /// starts a grandchild and waits. Tracked, so that a concurrent test's
    /// [`super::super::reap_orphans`] leaves it alone.
    fn marked_child(marker: &Marker) -> (tokio::process::Child, super::super::Tracked) {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "sleep 30 & wait"])
            .env(super::super::MARKER_VAR, marker.value())
            .process_group(0)
            .kill_on_drop(true);
        super::super::spawn(&mut cmd).unwrap()
    }

    #[tokio::test]
    async fn a_scan_finds_a_marked_tree_and_nothing_else() {
        let marker = Marker::next();
        let (mut child, tracked) = marked_child(&marker);
        let pid = child.id().unwrap() as i32;
        let mut found = Vec::new();
        for _ in 0..200 {
            found = off_runtime({
                let m = marker.clone();
                move || scan(Some(&m))
            })
            .await;
            if found.len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(found.iter().any(|p| p.pid == pid), "{found:?}");
        assert!(found.iter().any(|p| p.ppid == pid), "{found:?}");
        let other = Marker::next();
        assert!(off_runtime(move || scan(Some(&other))).await.is_empty());
        // The stop ends child and grandchild (which holds the test's stdout).
        let group = tracked.group();
        let stopped = stop_tree(Some(marker), group, Duration::from_secs(2)).await;
        assert!(stopped >= 2, "{stopped}");
        assert!(found.iter().all(|p| !p.alive()), "{found:?}");
        child.wait().await.unwrap();
    }

    /// A group is ours while its leader is unreaped (even a zombie), not
    /// once it is reaped and the group is empty: its id may be reused.
    #[tokio::test]
    async fn a_reaped_leaders_group_is_not_signalled() {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "exit 0"]).process_group(0);
        let (mut child, tracked) = super::super::spawn(&mut cmd).unwrap();
        let pid = child.id().unwrap() as i32;
        let group = tracked.group();
        assert_eq!(group, Group::led_by(pid, Proc::read(pid).unwrap().start));
        assert!(group.still_ours(&[], None));
        while Proc::read(pid).is_some_and(|p| p.state != b'Z') {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            group.still_ours(&[], None),
            "a zombie leader holds its group id"
        );
        child.wait().await.unwrap();
        assert!(!group.still_ours(&[], Some(&Marker::next())));
        assert!(!Group::led_by(pid, 0).still_ours(&[], None));
        assert!(!Group::NONE.still_ours(&[], None));
    }
}
