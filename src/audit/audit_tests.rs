use super::*;
use crate::config::{AuditConfig, AuditSink};
use serde_json::{json, Value};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// A record with every field set (`arguments` included).
fn full(i: u64) -> Record {
    Record {
        time: UNIX_EPOCH + Duration::from_millis(1_796_144_400_123),
        client: Some("build-agent".into()),
        peer: Some([192, 0, 2, 7].into()),
        session: Some("e1.0123456789abcdef0123456789abcdef0007".into()),
        method: "tools/call",
        upstream: Some("files".into()),
        exposed: "files__read_file".into(),
        original: Some("read_file".into()),
        outcome: Outcome::Error(-32602),
        duration_ms: 3,
        request_bytes: 120,
        response_bytes: 456 + i,
        arguments: Some(json!({"path": "/etc/hostname", "n": i})),
    }
}

/// A modern, unauthenticated, successful record without arguments.
fn plain(i: u64) -> Record {
    Record {
        time: SystemTime::now(),
        client: None,
        peer: None,
        session: None,
        method: "resources/read",
        upstream: None,
        exposed: format!("file:///r/{i}"),
        original: None,
        outcome: Outcome::Ok,
        duration_ms: i,
        request_bytes: 1,
        response_bytes: 2,
        arguments: None,
    }
}

fn file_config(path: PathBuf, max_bytes: u64, keep: u32, arguments: bool) -> AuditConfig {
    AuditConfig {
        sink: AuditSink::File(path),
        max_bytes,
        keep,
        arguments,
    }
}

fn lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

#[test]
fn a_record_has_every_field_in_order() {
    let e = Entry::new(full(0)).expect("serializes");
    let expected = r#"{"time":"2026-12-01T17:00:00.123Z","client":"build-agent","peer":"192.0.2.7","session":"legacy:e1.01234567","method":"tools/call","upstream":"files","name":"files__read_file","original":"read_file","outcome":"error","code":-32602,"duration_ms":3,"request_bytes":120,"response_bytes":456,"arguments":{"path":"/etc/hostname","n":0}}"#;
    assert_eq!(e.line, expected);
    assert_eq!(
        e.without_arguments().as_deref(),
        Some(
            r#"{"time":"2026-12-01T17:00:00.123Z","client":"build-agent","peer":"192.0.2.7","session":"legacy:e1.01234567","method":"tools/call","upstream":"files","name":"files__read_file","original":"read_file","outcome":"error","code":-32602,"duration_ms":3,"request_bytes":120,"response_bytes":456,"arguments_omitted":true}"#
        )
    );
}

#[test]
fn no_arguments_or_code_key_unless_there_and_unknowns_are_marked() {
    let e = Entry::new(plain(7)).expect("serializes");
    let v: Value = serde_json::from_str(&e.line).expect("JSON");
    let o = v.as_object().expect("object");
    assert!(!o.contains_key("arguments") && !o.contains_key("code"));
    assert_eq!(v["client"], "-");
    assert_eq!(v["session"], "modern");
    assert_eq!(v["upstream"], Value::Null);
    assert_eq!(v["original"], Value::Null);
    assert_eq!(v["outcome"], "ok");
    assert!(e.without_arguments().is_none());
    let names: Vec<&str> = [
        Outcome::Ok,
        Outcome::ToolError,
        Outcome::Error(1),
        Outcome::Timeout,
        Outcome::Refused,
        Outcome::Disconnected,
        Outcome::InputExpired,
    ]
    .iter()
    .map(|o| o.as_str())
    .collect();
    assert_eq!(
        names,
        [
            "ok",
            "tool_error",
            "error",
            "timeout",
            "refused",
            "disconnected",
            "input_expired"
        ]
    );
}

#[test]
fn client_supplied_fields_are_capped_and_escaped() {
    let mut r = full(1);
    r.exposed = format!("evil\u{202E}{}", "n".repeat(1 << 20));
    r.original = Some("x\u{2028}y\u{85}".into());
    r.arguments = Some(serde_json::json!({"q": "a\u{202E}b\u{85}c"}));
    let e = Entry::new(r).expect("serializes");
    assert!(e.line.len() < 1024, "{} bytes", e.line.len());
    assert!(!e.line.chars().any(invisible), "{}", e.line);
    let v: Value = serde_json::from_str(&e.line).expect("still JSON");
    let name = v["name"].as_str().unwrap();
    assert!(name.starts_with("evil\\u{202E}nnn"), "{name}");
    let cut = (1 << 20) + "evil\u{202E}".len() - crate::limits::AUDIT_FIELD_BYTES;
    assert!(name.ends_with(&format!("…[cut {cut} bytes]")), "{name}");
    assert_eq!(v["original"], "x\\u{2028}y\\x85");
    // Arguments keep their value (JSON escapes), with no raw character.
    assert_eq!(v["arguments"]["q"], "a\u{202E}b\u{85}c");
    assert!(e.line.contains("a\\u202eb\\u0085c"), "{}", e.line);
    assert_eq!(e.name, name, "the journal's field is the line's");
}

fn invisible(c: char) -> bool {
    crate::logline::is_format(c) || ('\u{80}'..='\u{9f}').contains(&c)
}

#[tokio::test]
async fn n_calls_make_n_lines_without_arguments_by_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let (audit, writer) =
        Audit::start(&file_config(path.clone(), 1 << 20, 2, false)).expect("start");
    assert!(!audit.wants_arguments());
    for i in 0..100 {
        audit.record(full(i));
    }
    assert!(writer.close(Duration::from_secs(10)).await);
    let got = lines(&path);
    assert_eq!(got.len(), 100);
    for (i, v) in got.iter().enumerate() {
        assert_eq!(v["response_bytes"], 456 + i as u64);
        assert!(v.get("arguments").is_none(), "no arguments by default");
    }
    assert_eq!((audit.written(), audit.dropped()), (100, 0));
}

#[tokio::test]
async fn arguments_are_written_when_configured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let (audit, writer) =
        Audit::start(&file_config(path.clone(), 1 << 20, 2, true)).expect("start");
    assert!(audit.wants_arguments());
    audit.record(full(5));
    assert!(writer.close(Duration::from_secs(10)).await);
    let got = lines(&path);
    assert_eq!(
        got[0]["arguments"],
        json!({"path": "/etc/hostname", "n": 5})
    );
}

/// The record numbers in the rotated files (oldest first) and the current one.
fn numbers_in(f: &RotatingFile, path: &Path, keep: u32) -> (Vec<u64>, usize) {
    let mut all = Vec::new();
    let mut files = 0;
    let paths = (1..=keep).rev().map(|n| f.rotated(n)).chain([path.into()]);
    for p in paths {
        if let Ok(meta) = std::fs::metadata(&p) {
            files += 1;
            assert!(
                meta.len() <= 300,
                "{} has {} bytes",
                p.display(),
                meta.len()
            );
            all.extend(
                lines(&p)
                    .iter()
                    .map(|v| v["duration_ms"].as_u64().expect("n")),
            );
        }
    }
    (all, files)
}

#[test]
fn rotation_keeps_keep_files_of_at_most_max_bytes_and_drops_the_oldest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let keep = 3;
    let mut f = RotatingFile::open(&path, 300, keep).expect("open");
    for i in 0..60u64 {
        let overflowed = f.rotated(keep).exists();
        let e = Entry::new(plain(i)).expect("entry");
        f.write_line(&e.line).expect("write");
        let (all, files) = numbers_in(&f, &path, keep);
        assert!(files <= keep as usize + 1);
        // The newest lines, in order, none missing ...
        let first = all[0];
        assert_eq!(all, (first..=i).collect::<Vec<_>>());
        // ... and none lost before the oldest kept file is overwritten.
        if !overflowed {
            assert_eq!(first, 0, "after record {i}");
        }
    }
    assert!(f.rotated(keep).exists() && !f.rotated(keep + 1).exists());
}

#[test]
fn a_line_longer_than_max_bytes_goes_alone_into_a_fresh_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let mut f = RotatingFile::open(&path, 50, 2).expect("open");
    f.write_line("short").expect("write");
    let long = "x".repeat(80);
    f.write_line(&long).expect("write");
    f.write_line("after").expect("write");
    let read = |p: &Path| std::fs::read_to_string(p).expect("read");
    assert_eq!(read(&f.rotated(2)), "short\n");
    assert_eq!(read(&f.rotated(1)), format!("{long}\n"));
    assert_eq!(read(&path), "after\n");
}

#[test]
fn keep_zero_empties_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let mut f = RotatingFile::open(&path, 10, 0).expect("open");
    f.write_line("aaaaaaa").expect("write");
    f.write_line("bbbbbbb").expect("write");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), "bbbbbbb\n");
    assert!(!f.rotated(1).exists());
}

#[test]
fn an_unwritable_path_is_a_start_error_naming_audit_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("missing").join("audit.log");
    let err = Audit::start(&file_config(path.clone(), 1000, 1, false))
        .err()
        .expect("a start error");
    let msg = format!("{:#}", anyhow::Error::from(err));
    assert!(msg.contains("audit.path"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("No such file or directory"), "{msg}");
}

#[test]
fn a_missing_journal_is_a_start_error_naming_audit_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = Journal::connect(&dir.path().join("socket")).expect_err("no journal");
    let msg = format!("{:#}", anyhow::Error::from(err));
    assert!(msg.contains("audit.path = \"journal\""), "{msg}");
    assert!(msg.contains("No such file or directory"), "{msg}");
}

#[tokio::test]
async fn a_full_disk_is_counted_not_fatal() {
    let (audit, writer) =
        Audit::start(&file_config("/dev/full".into(), 1 << 20, 1, false)).expect("start");
    for i in 0..5 {
        audit.record(plain(i));
    }
    assert!(writer.close(Duration::from_secs(10)).await);
    assert_eq!((audit.written(), audit.write_errors()), (0, 5));
}

/// Parses a native-protocol datagram into (key, value) pairs.
fn journal_fields(mut d: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while !d.is_empty() {
        let nl = d.iter().position(|b| *b == b'\n').expect("newline");
        let head = std::str::from_utf8(&d[..nl]).expect("utf-8");
        if let Some((k, v)) = head.split_once('=') {
            out.push((k.to_string(), v.to_string()));
            d = &d[nl + 1..];
        } else {
            let len = u64::from_le_bytes(d[nl + 1..nl + 9].try_into().expect("8 bytes")) as usize;
            let v = &d[nl + 9..nl + 9 + len];
            out.push((
                head.to_string(),
                String::from_utf8(v.to_vec()).expect("utf-8"),
            ));
            assert_eq!(d[nl + 9 + len], b'\n');
            d = &d[nl + 10 + len..];
        }
    }
    out
}

#[tokio::test]
async fn journal_entries_are_native_protocol_datagrams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("journal.socket");
    let server = UnixDatagram::bind(&socket).expect("bind");
    let sink = Sink::Journal(Journal::connect(&socket).expect("connect"));
    let (audit, writer) = Audit::start_with(sink, true).expect("start");
    let mut r = plain(1);
    // A newline (a configured name's): the binary form. A client's is escaped.
    r.client = Some("two\nlines".into());
    r.exposed = "file:///a\nb".into();
    audit.record(r);
    // Too large for one datagram: sent without its arguments.
    let mut big = full(2);
    // (2 MiB: over the default socket send buffer (net.core.wmem_default), within AUDIT_QUEUE_BYTES.)
    big.arguments = Some(json!({"blob": "x".repeat(2 << 20)}));
    audit.record(big);
    assert!(writer.close(Duration::from_secs(10)).await);
    let mut buf = vec![0u8; 1 << 16];
    let n = server.recv(&mut buf).expect("first datagram");
    let f = journal_fields(&buf[..n]);
    let keys: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "MESSAGE",
            "SYSLOG_IDENTIFIER",
            "PRIORITY",
            "MCP_EDGE_CLIENT",
            "MCP_EDGE_METHOD",
            "MCP_EDGE_UPSTREAM",
            "MCP_EDGE_NAME",
            "MCP_EDGE_OUTCOME"
        ]
    );
    let message: Value = serde_json::from_str(&f[0].1).expect("MESSAGE is the JSON line");
    assert_eq!(message["name"], "file:///a\\nb");
    assert_eq!(message["client"], "two\nlines");
    let values: Vec<&str> = f[1..].iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(
        values,
        [
            "mcp-edge-audit",
            "6",
            "two\nlines",
            "resources/read",
            "-",
            "file:///a\\nb",
            "ok"
        ]
    );
    let n = server.recv(&mut buf).expect("second datagram");
    let f = journal_fields(&buf[..n]);
    let message: Value = serde_json::from_str(&f[0].1).expect("JSON");
    assert_eq!(message["arguments_omitted"], true);
    assert!(message.get("arguments").is_none());
    assert_eq!((audit.written(), audit.write_errors()), (2, 0));
}

/// A FIFO whose reader has not read yet.
fn fifo(dir: &Path) -> (PathBuf, std::fs::File) {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("audit.fifo");
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    // Non-blocking, so the open does not wait for the writer.
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .expect("open the reader");
    (path, reader)
}

/// Fills the pipe of the fifo at `path` with lines "f" until it would block.
fn fill(path: &std::path::Path) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut w = (std::fs::OpenOptions::new().write(true))
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .expect("open a filler");
    let chunk = "f\n".repeat(2048);
    while w.write_all(chunk.as_bytes()).is_ok() {}
}

/// Reads `reader` (made blocking) to its end; returns the lines.
fn read_to_end(mut reader: std::fs::File) -> Vec<String> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    // SAFETY: a valid fd; clears O_NONBLOCK.
    unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_SETFL, 0) };
    let mut text = String::new();
    reader.read_to_string(&mut text).expect("read the fifo");
    text.lines().map(str::to_string).collect()
}

#[tokio::test]
async fn a_blocked_writer_drops_and_counts_while_record_returns_at_once() {
    crate::metrics::prometheus();
    let dropped_metric = || crate::metrics::read(crate::metrics::AUDIT_DROPPED, "");
    let dropped_before = dropped_metric();
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, reader) = fifo(dir.path());
    // The pipe is filled first (lines "f", never read until the end): once
    // the writer took the first record, it is stuck writing it until the
    // reader reads.
    fill(&path);
    let (audit, writer) = Audit::start(&file_config(path, u64::MAX, 1, true)).expect("start");
    audit.record(full(0));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while audit.queue_free() < AUDIT_QUEUE_DEPTH {
        assert!(
            tokio::time::Instant::now() < deadline,
            "writer never took it"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // The writer is blocked: every call returns (no await in between, so a
    // record() that waited would hang here), the queue fills, the rest is
    // dropped and counted.
    let n = 5 * AUDIT_QUEUE_DEPTH as u64;
    for i in 0..n {
        audit.record(plain(i));
    }
    assert_eq!(audit.written(), 0, "the writer was blocked all along");
    assert_eq!(audit.dropped(), n - AUDIT_QUEUE_DEPTH as u64);
    assert_eq!(dropped_metric() - dropped_before, audit.dropped() as f64);
    // Unblock: the queued records are written, the dropped ones are not.
    let drained = tokio::task::spawn_blocking(move || read_to_end(reader));
    assert!(writer.close(Duration::from_secs(30)).await);
    let mut lines = drained.await.expect("reader");
    lines.retain(|l| l != "f");
    assert_eq!(lines.len(), 1 + AUDIT_QUEUE_DEPTH);
    assert_eq!(audit.written(), 1 + AUDIT_QUEUE_DEPTH as u64);
    let last: Value = serde_json::from_str(&lines[AUDIT_QUEUE_DEPTH]).expect("JSON");
    assert_eq!(last["duration_ms"], AUDIT_QUEUE_DEPTH as u64 - 1);
}

#[test]
fn arguments_past_their_cap_leave_only_their_size() {
    let mut r = full(0);
    let big = "x".repeat(crate::limits::AUDIT_ARGUMENTS_BYTES);
    r.arguments = Some(json!({ "text": big }));
    let e = Entry::new(r).unwrap();
    let v: Value = serde_json::from_str(&e.line).unwrap();
    assert_eq!(v["arguments_omitted"], true, "{}", e.line);
    let n = v["arguments_bytes"].as_u64().unwrap();
    assert!(n as usize > crate::limits::AUDIT_ARGUMENTS_BYTES);
    assert!(v.get("arguments").is_none() && e.arguments_at.is_none());
    assert!(e.line.len() < 1024, "{} bytes", e.line.len());
    // At the cap they are written whole.
    let mut r = full(0);
    let fits = crate::limits::AUDIT_ARGUMENTS_BYTES - r#"{"text":""}"#.len();
    r.arguments = Some(json!({ "text": "y".repeat(fits) }));
    let v: Value = serde_json::from_str(&Entry::new(r).unwrap().line).unwrap();
    assert_eq!(v["arguments"]["text"].as_str().unwrap().len(), fits);
}
