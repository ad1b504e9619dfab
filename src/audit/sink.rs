//! Where the writer thread puts lines: a file rotated by size, or the
//! systemd journal's native socket. Both are opened (connected) at start,
//! so a path that cannot be written is a start error.

use super::line::Entry;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// The journal's native-protocol socket (systemd.journal-fields(7),
/// "Native Protocol").
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// `SYSLOG_IDENTIFIER=` of audit entries in the journal.
pub const JOURNAL_IDENTIFIER: &str = "mcp-edge-audit";

/// Why the audit log could not start.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The file cannot be opened for appending (missing directory,
    /// permission, read-only file system).
    #[error("audit.path {path}: cannot open for appending")]
    Open {
        /// The configured file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `audit.path = "journal"` but the journal socket cannot be reached.
    #[error("audit.path = \"journal\": cannot reach the journal at {socket}")]
    Journal {
        /// The socket tried.
        socket: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The writer thread could not be started.
    #[error("audit: cannot start the writer thread")]
    Thread(#[source] io::Error),
}

/// An open sink.
#[derive(Debug)]
pub enum Sink {
    /// A file rotated by size.
    File(RotatingFile),
    /// The journal.
    Journal(Journal),
}

impl Sink {
    /// Writes one entry.
    pub fn write(&mut self, e: &Entry) -> io::Result<()> {
        match self {
            Sink::File(f) => f.write_line(&e.line),
            Sink::Journal(j) => j.send(e),
        }
    }

    /// Flushes what is buffered (nothing is: each line is one `write`).
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::File(f) => f.file.as_mut().map_or(Ok(()), |f| f.flush()),
            Sink::Journal(_) => Ok(()),
        }
    }
}

/// A file rotated by size: before a line that would take it past
/// `max_bytes`, `path.(keep-1)` → `path.keep`, …, `path` → `path.1`, and a
/// fresh `path` is opened (`keep = 0`: the file is just emptied). A line
/// longer than `max_bytes` goes into a fresh file alone (that file is then
/// larger than `max_bytes`).
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    /// `None` after a failed write: reopened before the next one.
    file: Option<File>,
    /// Bytes in the current file as far as we know (written whole).
    len: u64,
}

impl RotatingFile {
    /// Opens (creates) `path` for appending.
    pub fn open(path: &Path, max_bytes: u64, keep: u32) -> Result<RotatingFile, AuditError> {
        let open_error = |source| AuditError::Open {
            path: path.to_path_buf(),
            source,
        };
        let file = append(path).map_err(open_error)?;
        let len = file.metadata().map_err(open_error)?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            max_bytes,
            keep,
            file: Some(file),
            len,
        })
    }

    /// Appends `line` and a newline in one `write`, rotating first if needed.
    pub fn write_line(&mut self, line: &str) -> io::Result<()> {
        let mut buf = Vec::with_capacity(line.len() + 2);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        if self.len > 0 && self.len.saturating_add(buf.len() as u64) > self.max_bytes {
            self.rotate()?;
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => self.reopen(&mut buf)?,
        };
        if let Err(e) = file.write_all(&buf) {
            // Part of the line may be in the file: reopen and check next time.
            self.file = None;
            return Err(e);
        }
        self.len += buf.len() as u64;
        Ok(())
    }

    /// Opens the file again after a failed write or a rotation. If a failed
    /// write left part of a line, `buf` gets a newline in front so that the
    /// next line starts on its own.
    fn reopen(&mut self, buf: &mut Vec<u8>) -> io::Result<&mut File> {
        let file = append(&self.path)?;
        let len = file.metadata()?.len();
        if len != self.len && len > 0 {
            buf.insert(0, b'\n');
        }
        self.len = len;
        Ok(self.file.insert(file))
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        if self.keep == 0 {
            File::create(&self.path)?;
        } else {
            for i in (1..self.keep).rev() {
                rename_if_there(&self.rotated(i), &self.rotated(i + 1))?;
            }
            rename_if_there(&self.path, &self.rotated(1))?;
        }
        self.len = 0;
        Ok(())
    }

    /// `path.n`.
    pub fn rotated(&self, n: u32) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    }
}

fn append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // Owner and group only: lines name clients and, with `arguments`,
    // may hold what they sent (an existing file keeps its mode).
    (OpenOptions::new().create(true).append(true))
        .mode(0o640)
        .open(path)
}

fn rename_if_there(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// The journal's native protocol over a datagram socket: one datagram per
/// entry, `KEY=value\n` fields (the binary length-prefixed form for a value
/// with a newline).
#[derive(Debug)]
pub struct Journal {
    socket: UnixDatagram,
}

impl Journal {
    /// Connects to the journal socket at `path` ([`JOURNAL_SOCKET`] outside tests).
    pub fn connect(path: &Path) -> Result<Journal, AuditError> {
        let error = |source| AuditError::Journal {
            socket: path.to_path_buf(),
            source,
        };
        let socket = UnixDatagram::unbound().map_err(error)?;
        socket.connect(path).map_err(error)?;
        Ok(Journal { socket })
    }

    /// Sends `e`. A datagram too large for the socket (arguments of a big
    /// call) is sent again without the arguments
    /// (`"arguments_omitted":true`); it is never split.
    pub fn send(&self, e: &Entry) -> io::Result<()> {
        match self.socket.send(&datagram(e, &e.line)) {
            Err(err) if err.raw_os_error() == Some(libc::EMSGSIZE) => {
                let Some(line) = e.without_arguments() else {
                    return Err(err);
                };
                self.socket.send(&datagram(e, &line)).map(drop)
            }
            r => r.map(drop),
        }
    }
}

/// The native-protocol payload of `e` with `MESSAGE=line`.
pub fn datagram(e: &Entry, line: &str) -> Vec<u8> {
    let mut d = Vec::with_capacity(line.len() + 256);
    field(&mut d, "MESSAGE", line);
    field(&mut d, "SYSLOG_IDENTIFIER", JOURNAL_IDENTIFIER);
    field(&mut d, "PRIORITY", "6");
    field(&mut d, "MCP_EDGE_CLIENT", &e.client);
    field(&mut d, "MCP_EDGE_METHOD", e.method);
    field(&mut d, "MCP_EDGE_UPSTREAM", &e.upstream);
    field(&mut d, "MCP_EDGE_NAME", &e.name);
    field(&mut d, "MCP_EDGE_OUTCOME", e.outcome);
    d
}

/// One field: `KEY=value\n`, or `KEY\n<u64 LE length><value>\n` when the
/// value holds a newline.
fn field(d: &mut Vec<u8>, key: &str, value: &str) {
    d.extend_from_slice(key.as_bytes());
    if value.contains('\n') {
        d.push(b'\n');
        d.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        d.push(b'=');
    }
    d.extend_from_slice(value.as_bytes());
    d.push(b'\n');
}
