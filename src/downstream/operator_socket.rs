//! The operator socket (`server.admin_socket`): a Unix socket, mode 0600,
//! where the admin routes that change state are served (tool approval,
//! reconnect; [`super::admin`]). The TCP admin listener serves only the
//! read-only routes: any local process can reach a loopback port, and a
//! stdio server mcp-edge starts must not approve its own tools.
//!
//! Each connection's peer is read with `SO_PEERCRED` (unix(7)) and served
//! only when it is root or the gateway's own user **and** does not descend
//! from the gateway: stdio children, and whatever they start, run as the
//! gateway's user, so the uid alone cannot tell the operator from them.
//! The parent links are read from `/proc/<pid>/stat` up to pid 1; since
//! mcp-edge is the child subreaper of what it starts ([`crate::reaper`]),
//! a descendant whose parent exited (`setsid`, a double fork) is
//! re-parented to mcp-edge and still found. A peer that cannot be checked
//! (no pid, an unreadable `/proc` entry, a chain past
//! [`limits::ADMIN_PEER_ANCESTRY`]) is refused. The gateway's own process
//! (an in-process test) is served.
//!
//! A refused peer gets 403 with the reason on every route, is logged with
//! its uid and pid, audited, and counted
//! (`mcp_edge_refused_total{limit="admin_peer"}`).

use super::admin::{self, Asker, Operator};
use super::app::App;
use crate::limits;
use crate::logline::Throttle;
use crate::reaper::procfs::{Lookup, Proc};
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::sync::watch;

/// Binding the operator socket failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the operator socket {path} (set server.admin_socket to a path in a directory mcp-edge may write, or \"off\")")]
pub struct BindError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// The bound operator socket; the file is removed when this is dropped.
pub struct Socket {
    listener: UnixListener,
    path: PathBuf,
    /// The socket file's device and inode: another gateway's socket bound
    /// at the same path since is left alone.
    file: (u64, u64),
}

impl Socket {
    /// Binds `path` (its directory made, mode 0700, if only it is missing;
    /// a stale socket left by an earlier run is replaced, a live one or any
    /// other file refused) and sets its mode to 0600.
    pub fn bind(path: &Path) -> Result<Socket, BindError> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
        let fail = |source| BindError {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            // Its directory (the state directory, say) made if missing, as
            // the other users of the state directory do; never its parents.
            use std::os::unix::fs::DirBuilderExt;
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(fail(e)),
                _ => {}
            }
            // Another user who may write the directory could put a socket
            // of its own in this one's place and answer the operator.
            let mode = std::fs::metadata(dir).map_err(fail)?.permissions().mode();
            if mode & 0o022 != 0 {
                let e = std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("its directory is writable by other users (mode {:04o}): one of them could put its own socket here", mode & 0o7777),
                );
                return Err(fail(e));
            }
        }
        match std::fs::symlink_metadata(path) {
            // Stale only when nobody answers: a live socket is another
            // gateway's (a second `serve` on the same config), kept.
            Ok(m) if m.file_type().is_socket() => {
                match std::os::unix::net::UnixStream::connect(path) {
                    Ok(_) => {
                        let e = std::io::Error::new(
                            std::io::ErrorKind::AddrInUse,
                            "another process (another mcp-edge?) serves it",
                        );
                        return Err(fail(e));
                    }
                    Err(_) => std::fs::remove_file(path).map_err(fail)?,
                }
            }
            Ok(_) => {
                let e = std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "a file that is not a socket is in the way",
                );
                return Err(fail(e));
            }
            Err(_) => {}
        }
        let listener = UnixListener::bind(path).map_err(fail)?;
        let meta = std::fs::symlink_metadata(path).map_err(fail)?;
        let socket = Socket {
            listener,
            path: path.to_path_buf(),
            file: (meta.dev(), meta.ino()),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
        Ok(socket)
    }

    /// Where it is bound.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let ours =
            std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.file);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Why a peer is not served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Neither root nor the gateway's user.
    #[error("uid {uid} is neither root nor the gateway's user (uid {gateway})")]
    User {
        /// The peer's uid.
        uid: u32,
        /// The gateway's effective uid.
        gateway: u32,
    },
    /// A process the gateway started, or one of theirs.
    #[error("pid {pid} descends from the gateway (pid {gateway}): a stdio server or a process it started")]
    Descendant {
        /// The peer's pid.
        pid: i32,
        /// The gateway's pid.
        gateway: i32,
    },
    /// The peer could not be checked.
    #[error("pid {pid}: its ancestry cannot be read from /proc ({why})")]
    Unchecked {
        /// The peer's pid (0: none given).
        pid: i32,
        /// What failed.
        why: &'static str,
    },
}

/// Whether the peer `uid`/`pid` is the operator (see the module docs).
pub fn check(uid: u32, pid: Option<i32>) -> Result<Operator, Refused> {
    // SAFETY: geteuid and getpid cannot fail.
    let (me, gateway) = unsafe { (libc::geteuid(), libc::getpid()) };
    if uid != 0 && uid != me {
        return Err(Refused::User { uid, gateway: me });
    }
    let Some(pid) = pid.filter(|&p| p > 0) else {
        let why = "no peer pid";
        return Err(Refused::Unchecked { pid: 0, why });
    };
    if pid == gateway {
        return Ok(Operator { uid, pid });
    }
    if Path::new(&format!("/proc/self/task/{pid}")).exists() {
        // A thread of the gateway: its stat names the gateway's parent.
        let why = "a thread id of the gateway, not a process";
        return Err(Refused::Unchecked { pid, why });
    }
    // Root, when the gateway is not: its children keep the gateway's uid
    // (no_new_privs), so root is never one of them; and under systemd's
    // ProtectProc=invisible the gateway could not read root's /proc entry.
    if uid != 0 || me == 0 {
        descends(pid, gateway, &Proc::lookup)?;
    }
    Ok(Operator { uid, pid })
}

/// Follows `pid`'s parents (through `lookup`) to pid 1: an error when
/// `ancestor` is among them or the chain cannot be read. A parent that
/// cannot be seen while its child still names it belongs to another user
/// (`hidepid`, systemd's `ProtectProc=invisible`): no descendant of the
/// gateway, whose descendants keep its uid, has such a parent.
fn descends(pid: i32, ancestor: i32, lookup: &dyn Fn(i32) -> Lookup) -> Result<(), Refused> {
    let (mut at, mut child) = (pid, None::<Proc>);
    for _ in 0..limits::ADMIN_PEER_ANCESTRY {
        let parent = match lookup(at) {
            Lookup::Found(p) => p,
            Lookup::Gone => {
                // The peer itself gone, or its parent hidden or gone: a
                // parent is hidden when its child still names it.
                let same = |p: Proc, c: Proc| (p.ppid, p.start) == (c.ppid, c.start);
                let hidden =
                    child.is_some_and(|c| lookup(c.pid).found().is_some_and(|p| same(p, c)));
                if hidden {
                    return Ok(());
                }
                return Err(Refused::Unchecked { pid, why: "gone" });
            }
            Lookup::Unknown => {
                return Err(Refused::Unchecked {
                    pid,
                    why: "unreadable",
                })
            }
        };
        if parent.ppid == ancestor {
            return Err(Refused::Descendant {
                pid,
                gateway: ancestor,
            });
        }
        if parent.ppid <= 1 {
            return Ok(());
        }
        (at, child) = (parent.ppid, Some(parent));
    }
    Err(Refused::Unchecked {
        pid,
        why: "too many parents",
    })
}

/// Serves the admin routes on the operator socket until shutdown, one
/// connection at a time (as the TCP admin listener does), each within
/// [`limits::ADMIN_CONNECTION_TIMEOUT`].
pub async fn serve(socket: Socket, app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    // Two budgets: peers of the gateway's uid (its descendants among
    // them), and everyone else (a child flooding the socket cannot hide
    // another user's refused attempt).
    let budget = || {
        let now = tokio::time::Instant::now();
        Throttle::over(limits::ADMIN_REFUSALS_LOGGED, Duration::from_secs(60), now)
    };
    let throttles = [budget(), budget()];
    loop {
        let stream = tokio::select! {
            r = socket.listener.accept() => match r { Ok((s, _)) => s, Err(_) => continue },
            _ = shutdown.changed() => return,
        };
        let asker = match stream.peer_cred() {
            Ok(c) => match check(c.uid(), c.pid()) {
                Ok(op) => Asker::Operator(op),
                Err(why) => {
                    // SAFETY: cannot fail.
                    let ours = c.uid() == unsafe { libc::geteuid() };
                    let throttle = &throttles[usize::from(ours)];
                    refused(&app, throttle, c.uid(), c.pid(), &why);
                    answer_refused(stream, &why).await;
                    continue;
                }
            },
            Err(e) => {
                tracing::warn!("operator socket: cannot read the peer's credentials: {e}");
                continue;
            }
        };
        let a = app.clone();
        let svc = hyper::service::service_fn(move |req| {
            let (a, asker) = (a.clone(), asker.clone());
            async move { Ok::<_, std::convert::Infallible>(admin::route(a, asker, req).await) }
        });
        let _ = tokio::time::timeout(
            limits::ADMIN_CONNECTION_TIMEOUT,
            hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc),
        )
        .await;
    }
}

/// A refused peer: counted; logged and audited within
/// [`limits::ADMIN_REFUSALS_LOGGED`] a minute of `throttle` (a child that
/// connects in a loop cannot flush the audit log; the next line logged
/// says how many were not).
fn refused(app: &App, throttle: &Throttle, uid: u32, pid: Option<i32>, why: &Refused) {
    crate::metrics::refused("admin_peer");
    let Some(skipped) = throttle.allow(tokio::time::Instant::now()) else {
        return;
    };
    let pid = pid.unwrap_or(0);
    tracing::warn!(
        uid,
        pid,
        skipped,
        "operator socket: peer refused: {why} ({skipped} more refused before, not logged)"
    );
    if let Some(audit) = &app.audit {
        let op = Operator { uid, pid };
        audit.operator(op.audited("admin", None, None, "refused"));
    }
}

/// One 403 with the reason, then the connection is closed: a refused peer
/// gets no HTTP session to hold the socket with. Its request head is read
/// first (a few KiB, briefly), so a client sees the answer, not a reset.
async fn answer_refused(mut stream: tokio::net::UnixStream, why: &Refused) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = [0u8; 4096];
    let read_head = async {
        let mut n = 0;
        while n < head.len() && !head[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut head[n..]).await {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
    };
    let _ = tokio::time::timeout(limits::ADMIN_REFUSED_WRITE, read_head).await;
    let m = format!("the operator socket serves root and the gateway's user, never a process the gateway started: {why}");
    let body = serde_json::json!({ "error": m }).to_string();
    let head = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(limits::ADMIN_REFUSED_WRITE, write).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pid: i32, ppid: i32) -> Lookup {
        Lookup::Found(Proc {
            pid,
            ppid,
            pgrp: pid,
            sid: pid,
            state: b'S',
            start: 1,
        })
    }

    /// 1 ← 10 (gateway) ← 20 ← 30; 1 ← 40 ← 50.
    fn table(p: i32) -> Lookup {
        match p {
            10 => proc(10, 1),
            20 => proc(20, 10),
            30 => proc(30, 20),
            40 => proc(40, 1),
            50 => proc(50, 40),
            _ => Lookup::Gone,
        }
    }

    #[test]
    fn a_descendant_at_any_depth_is_refused_and_others_pass() {
        for p in [20, 30] {
            assert_eq!(
                descends(p, 10, &table),
                Err(Refused::Descendant {
                    pid: p,
                    gateway: 10
                })
            );
        }
        assert_eq!(descends(50, 10, &table), Ok(()));
        assert_eq!(descends(40, 10, &table), Ok(()));
    }

    #[test]
    fn a_parent_hidden_from_the_gateway_ends_the_chain_outside_it() {
        // 70 names 71, which cannot be seen (another uid under hidepid):
        // not a descendant. A peer that cannot be seen itself is refused.
        let hidden = |p| if p == 70 { proc(70, 71) } else { Lookup::Gone };
        assert_eq!(descends(70, 10, &hidden), Ok(()));
        // 80 named 81 when read, then was re-parented (81 exited): refused.
        let moved = std::cell::Cell::new(0);
        let racing = |p| match p {
            80 => {
                moved.set(moved.get() + 1);
                proc(80, if moved.get() == 1 { 81 } else { 10 })
            }
            _ => Lookup::Gone,
        };
        assert!(matches!(
            descends(80, 10, &racing),
            Err(Refused::Unchecked { .. })
        ));
    }

    #[tokio::test]
    async fn a_live_socket_or_a_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("op/admin.sock");
        let first = Socket::bind(&path).unwrap();
        let live = Socket::bind(&path).err().map(|e| e.source.kind());
        assert_eq!(live, Some(std::io::ErrorKind::AddrInUse));
        drop(first);
        assert!(!path.exists(), "removed when dropped");
        let open = std::fs::Permissions::from_mode(0o777);
        std::fs::set_permissions(dir.path().join("op"), open).unwrap();
        let e = Socket::bind(&path).err().map(|e| e.source.kind());
        assert_eq!(e, Some(std::io::ErrorKind::PermissionDenied));
    }

    #[test]
    fn an_unreadable_or_endless_chain_is_refused() {
        let gone = descends(99, 10, &table);
        assert!(matches!(gone, Err(Refused::Unchecked { pid: 99, .. })));
        let unknown = descends(5, 10, &|_| Lookup::Unknown);
        assert!(matches!(unknown, Err(Refused::Unchecked { .. })));
        // A cycle (pids reused while walking) ends at the bound.
        let cycle = descends(7, 10, &|p| proc(p, if p == 7 { 8 } else { 7 }));
        assert!(matches!(cycle, Err(Refused::Unchecked { .. })));
    }

    #[test]
    fn the_peer_user_is_checked_before_its_ancestry() {
        // SAFETY: cannot fail.
        let me = unsafe { libc::geteuid() };
        let other = if me == 65534 { 65533 } else { 65534 };
        assert!(matches!(check(other, Some(1)), Err(Refused::User { .. })));
        // This very process: served. A real child of it: refused.
        let mine = i32::try_from(std::process::id()).unwrap();
        assert!(check(me, Some(mine)).is_ok());
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let r = check(me, Some(pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(matches!(r, Err(Refused::Descendant { .. })), "{r:?}");
        assert!(matches!(check(me, None), Err(Refused::Unchecked { .. })));
    }
}
