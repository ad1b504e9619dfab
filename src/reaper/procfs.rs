//! The process table as `/proc` shows it (proc(5)): one process's
//! `stat` line, the listing of every process, and whether a process's
//! environment holds an entry. Reads use stack buffers; a process that
//! vanishes while it is read is skipped.
//!
//! A read that fails for another reason than "no such process" (`EMFILE`
//! under a connection flood, `ENOMEM`, …) says nothing about the process:
//! it is [`Lookup::Unknown`], never taken for [`Lookup::Gone`], since the
//! reaper frees a tracked child's entry only once the child is gone.

use std::io::Read;

/// One process: the fields of `/proc/<pid>/stat` a stop and the reaper use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    /// Process id.
    pub pid: i32,
    /// Parent's process id (a subreaper's once the parent exited).
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
    /// Session id (a process that called `setsid` leads its own).
    pub sid: i32,
    /// `R`, `S`, `D`, `Z` (zombie), …
    pub state: u8,
    /// Start time after boot, in clock ticks: with the pid it names one
    /// process (pids are reused).
    pub start: u64,
}

/// What reading one process's `/proc/<pid>/stat` told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The process (running or a zombie).
    Found(Proc),
    /// There is no such process (`ENOENT`, `ESRCH`).
    Gone,
    /// The read failed otherwise (`EMFILE`, `ENOMEM`, an unparsable line):
    /// the process may well exist.
    Unknown,
}

impl Lookup {
    /// The process, if it was read.
    pub fn found(self) -> Option<Proc> {
        match self {
            Lookup::Found(p) => Some(p),
            Lookup::Gone | Lookup::Unknown => None,
        }
    }

    /// Whether this says for sure that process `pid` started at `start` is
    /// gone (reaped): no such pid, or the pid names another process now.
    /// `start` 0 (not known) matches any process with the pid.
    pub fn gone(self, start: u64) -> bool {
        match self {
            Lookup::Gone => true,
            Lookup::Found(p) => start != 0 && p.start != start,
            Lookup::Unknown => false,
        }
    }
}

/// `ENOENT` or `ESRCH`: the process does not exist (any more).
fn no_such_process(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH))
}

impl Proc {
    /// `/proc/<pid>/stat`, or `None` when it cannot be read (see [`Proc::lookup`]).
    pub fn read(pid: i32) -> Option<Proc> {
        Proc::lookup(pid).found()
    }

    /// `/proc/<pid>/stat`: the process, [`Lookup::Gone`] when there is no
    /// such process, [`Lookup::Unknown`] when the read failed otherwise.
    pub fn lookup(pid: i32) -> Lookup {
        // Fields 1 to 22 fit: 7 digits, a 16-byte name in parentheses and
        // 20 numbers of at most 20 digits.
        let mut buf = [0u8; 512];
        let read =
            std::fs::File::open(format!("/proc/{pid}/stat")).and_then(|mut f| f.read(&mut buf));
        match read {
            Ok(n) => Proc::parse(&buf[..n]).map_or(Lookup::Unknown, Lookup::Found),
            Err(e) if no_such_process(&e) => Lookup::Gone,
            Err(_) => Lookup::Unknown,
        }
    }

    /// Parses a `stat` line (proc(5)): `pid (comm) state ppid pgrp session
    /// … starttime …`; `comm` may hold spaces and parentheses, so the
    /// fields are counted from its last `)`.
    pub fn parse(stat: &[u8]) -> Option<Proc> {
        let open = stat.iter().position(|&c| c == b'(')?;
        let close = stat.iter().rposition(|&c| c == b')')?;
        let pid = number(stat[..open].trim_ascii())?;
        let mut fields = stat.get(close + 1..)?.split(u8::is_ascii_whitespace);
        fields.next(); // the space after `)`
        let state = *fields.next()?.first()?;
        let ppid = number(fields.next()?)?;
        let pgrp = number(fields.next()?)?;
        let sid = number(fields.next()?)?;
        // Fields 7 to 21 (tty_nr … itrealvalue), then starttime (22).
        let start = number(fields.nth(15)?)?;
        Some(Proc {
            pid: i32::try_from(pid).ok()?,
            ppid: i32::try_from(ppid).ok()?,
            pgrp: i32::try_from(pgrp).ok()?,
            sid: i32::try_from(sid).ok()?,
            state,
            start,
        })
    }

    /// Exited: a zombie waiting to be reaped, or dead.
    pub fn exited(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }

    /// Whether this very process (same pid and start time) still runs.
    pub fn alive(&self) -> bool {
        Proc::read(self.pid).is_some_and(|p| p.start == self.start && !p.exited())
    }
}

fn number(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Every process in `/proc` (threads are not listed, only thread groups).
pub fn all() -> impl Iterator<Item = Proc> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            Proc::read(pid)
        })
}

/// The parent links `(pid, ppid)` of the processes that run (zombies left
/// out), at most `cap` of them; and whether `/proc` listed more. Eight bytes
/// a process: a tree is walked in memory from one pass over `/proc`.
pub fn links(cap: usize) -> (Vec<(i32, i32)>, bool) {
    let mut links = Vec::new();
    for p in all().filter(|p| !p.exited()) {
        if links.len() >= cap {
            return (links, true);
        }
        links.push((p.pid, p.ppid));
    }
    (links, false)
}

/// Whether `/proc` can be listed and read (this process's `stat`).
pub fn usable() -> std::io::Result<()> {
    std::fs::read_dir("/proc")?;
    match Proc::lookup(std::process::id() as i32) {
        Lookup::Found(_) => Ok(()),
        Lookup::Gone | Lookup::Unknown => Err(std::io::Error::other("/proc/self/stat unreadable")),
    }
}

/// Whether the environment `pid` was started with (`/proc/<pid>/environ`)
/// holds exactly `entry` (`NAME=value`). False when it cannot be read
/// (gone, a zombie, another user's, or not dumpable).
pub fn environ_has(pid: i32, entry: &[u8]) -> bool {
    let Ok(mut f) = std::fs::File::open(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let mut m = Matcher::new(entry);
    let mut buf = [0u8; 4096];
    loop {
        match f.read(&mut buf) {
            Ok(0) | Err(_) => return m.at_end(),
            Ok(n) if m.feed(&buf[..n]) => return true,
            Ok(_) => {}
        }
    }
}

/// Finds `entry` as a whole NUL-separated item of a stream, chunk by
/// chunk: the stream is read as if it began with a NUL and `entry` is
/// matched between two NULs (or a NUL and the end). Since `entry` holds no
/// NUL, a mismatch can only restart at the byte that broke it.
struct Matcher<'a> {
    entry: &'a [u8],
    /// Bytes of `NUL entry` matched so far (1: just after a NUL).
    at: usize,
}

impl<'a> Matcher<'a> {
    fn new(entry: &'a [u8]) -> Self {
        Matcher { entry, at: 1 }
    }

    /// The byte expected after `at` matched bytes of `NUL entry NUL`.
    fn expected(&self) -> u8 {
        match self.at {
            0 => 0,
            i if i <= self.entry.len() => self.entry[i - 1],
            _ => 0,
        }
    }

    /// Feeds a chunk; true once `NUL entry NUL` was seen.
    fn feed(&mut self, chunk: &[u8]) -> bool {
        for &b in chunk {
            if b == self.expected() {
                self.at += 1;
                if self.at == self.entry.len() + 2 {
                    return true;
                }
            } else {
                self.at = usize::from(b == 0);
            }
        }
        false
    }

    /// At the end of the stream: the last item was `entry` (no final NUL).
    fn at_end(&self) -> bool {
        self.at == self.entry.len() + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let line = b"4242 (a) b (c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100\n";
        let p = Proc::parse(line).unwrap();
        assert_eq!(
            (p.pid, p.ppid, p.pgrp, p.sid, p.state, p.start),
            (4242, 17, 4242, 4242, b'S', 987654)
        );
        assert_eq!(Proc::parse(b"12 (x"), None);
    }

    #[test]
    fn this_process_reads_as_itself() {
        let me = Proc::read(std::process::id() as i32).unwrap();
        assert!(me.alive() && !Proc::lookup(me.pid).gone(me.start));
        assert!(!Proc::lookup(me.pid).gone(0));
        assert!(Proc::lookup(me.pid).gone(me.start + 1));
        assert!(all().any(|p| p.pid == me.pid && p.start == me.start));
    }

    #[test]
    fn a_missing_process_is_gone_and_an_unknown_one_is_not() {
        // pid_max is at most 2^22: this pid never exists.
        assert_eq!(Proc::lookup(i32::MAX), Lookup::Gone);
        assert!(Lookup::Gone.gone(0) && Lookup::Gone.gone(7));
        assert!(!Lookup::Unknown.gone(0) && !Lookup::Unknown.gone(7));
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert!(!no_such_process(&emfile));
        assert!(no_such_process(&std::io::Error::from_raw_os_error(
            libc::ESRCH
        )));
    }

    #[test]
    fn the_matcher_finds_whole_entries_only() {
        let entry = b"MCP_EDGE_CHILD=1-2";
        let found = |chunks: &[&[u8]]| {
            let mut m = Matcher::new(entry);
            chunks.iter().any(|c| m.feed(c)) || m.at_end()
        };
        assert!(found(&[b"MCP_EDGE_CHILD=1-2\0PATH=/bin\0"]));
        assert!(found(&[b"A=1\0MCP_EDGE_CH", b"ILD=1-2\0"]));
        assert!(found(&[b"A=1\0MCP_EDGE_CHILD=1-2"]));
        assert!(found(&[b"MCP_EDGE_CHILD=1\0MCP_EDGE_CHILD=1-2\0"]));
        assert!(!found(&[b"MCP_EDGE_CHILD=1-23\0"]));
        assert!(!found(&[b"XMCP_EDGE_CHILD=1-2\0"]));
        assert!(!found(&[b"A=MCP_EDGE_CHILD=1-2\0"]));
        assert!(!found(&[b""]));
    }
}
