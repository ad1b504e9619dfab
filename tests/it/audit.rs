//! The audit log in the gateway: started by [`Gateway::start`] when
//! `[audit]` is set (an unwritable path is a start error), reachable as
//! `App::audit`, written out at shutdown, and a changed `[audit]` waits for
//! a restart. Line format, rotation, the journal and a blocked writer are
//! `src/audit`'s unit tests.

use crate::support;
use mcp_edge::audit::{Outcome, Record};
use mcp_edge::config::{AuditConfig, AuditSink, Config};
use mcp_edge::gateway::{Gateway, GatewayError};
use std::path::{Path, PathBuf};

fn config(audit: Option<PathBuf>) -> Config {
    // One upstream (a config needs one), disabled: nothing is started.
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n{}",
        support::fake_block("a", "legacy", "enabled = false")
    );
    let mut c =
        Config::from_toml_str(&text, &support::origin("test.toml")).expect("valid test config");
    c.audit = audit.map(|p| AuditConfig {
        sink: AuditSink::File(p),
        max_bytes: 1 << 20,
        keep: 2,
        arguments: false,
    });
    c
}

#[tokio::test]
async fn an_unwritable_audit_path_fails_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("audit.log");
    let err = match Gateway::start(config(Some(path.clone()))).await {
        Err(e) => e,
        Ok(_) => panic!("started with an unwritable audit path"),
    };
    assert!(matches!(err, GatewayError::Audit(_)), "{err:?}");
    let msg = format!("{:#}", anyhow::Error::from(err));
    assert!(msg.contains("audit.path"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("No such file or directory"), "{msg}");
}

#[tokio::test]
async fn records_through_the_app_are_written_by_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let gw = Gateway::start(config(Some(path.clone()))).await.unwrap();
    let audit = gw.app().audit().cloned().expect("App::audit with [audit]");
    for i in 0..10 {
        audit.record(Record {
            time: std::time::SystemTime::now(),
            client: None,
            peer: None,
            session: None,
            method: "tools/call",
            upstream: Some("files".into()),
            exposed: "files__read_file".into(),
            original: Some("read_file".into()),
            outcome: Outcome::Ok,
            duration_ms: i,
            request_bytes: 10,
            response_bytes: 20,
            arguments: Some(serde_json::json!({"secret": "not written by default"})),
        });
    }
    gw.shutdown().await;
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 10, "{text}");
    assert!(!text.contains("arguments"), "{text}");
}

#[tokio::test]
async fn no_audit_section_no_handle() {
    let gw = Gateway::start(config(None)).await.unwrap();
    assert!(gw.app().audit().is_none());
    gw.shutdown().await;
}

#[tokio::test]
async fn a_changed_audit_section_waits_for_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut gw = Gateway::start(config(Some(dir.path().join("a.log"))))
        .await
        .unwrap();
    let same = gw.reload(config(Some(dir.path().join("a.log")))).await;
    assert!(!same.audit_changed && same.is_noop(), "{same}");
    let report = gw.reload(config(Some(dir.path().join("b.log")))).await;
    assert!(report.audit_changed);
    assert!(
        report
            .to_string()
            .contains("[audit] changes apply at the next restart"),
        "{report}"
    );
    gw.shutdown().await;
}

/// Calls through the endpoint while the audit writer is stuck: a FIFO
/// whose reader never reads, so the writer thread blocks once the pipe
/// buffer is full. Every call is still answered, the records past the queue
/// are dropped and counted, and the writer wrote nothing more meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn calls_are_answered_while_the_audit_writer_is_blocked() {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("audit.fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // The reader that never reads (non-blocking open: no writer yet).
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let text = "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n";
    let mut c = Config::from_toml_str(text, &support::origin("test.toml")).unwrap();
    c.audit = Some(AuditConfig {
        sink: AuditSink::File(fifo.clone()),
        max_bytes: 1 << 30,
        keep: 1,
        arguments: true,
    });
    let gw = Gateway::start(c).await.unwrap();
    gw.wait_upstreams(std::time::Duration::from_secs(10)).await;
    let audit = gw.app().audit().cloned().unwrap();
    let addr = gw.local_addr();
    // Arguments make each line large: the 64 KiB pipe fills within the first calls.
    let pad = "x".repeat(2048);
    let call = |i: u64| {
        let args = serde_json::json!({"name": "edge__uptime", "arguments": {"pad": pad}});
        support::modern(addr, serde_json::json!(i), "tools/call", args)
    };
    let mut i = 0;
    loop {
        let before = audit.written();
        for _ in 0..50 {
            i += 1;
            assert_eq!(call(i).await.status, 200);
        }
        // Fifty calls and not one line written while records wait: stuck.
        if audit.written() == before && audit.queue_free() < 1024 {
            break;
        }
        assert!(i < 5_000, "the writer never blocked");
    }
    let stuck_at = audit.written();
    let total = 2_000;
    for _ in 0..total {
        i += 1;
        let r = call(i).await;
        assert_eq!(r.status, 200, "{}", r.raw);
        assert!(r.body.get("result").is_some(), "{}", r.raw);
    }
    assert_eq!(
        audit.written(),
        stuck_at,
        "the writer stayed blocked throughout"
    );
    assert!(
        audit.dropped() >= total - 1024,
        "dropped {} of {total} with a queue of 1024",
        audit.dropped()
    );
}

/// A gateway with one `[[client]]` ([`FLOOD_TOKEN`]), the builtin `edge`
/// upstream, bodies up to 2 MiB and an audit file of at most 1 MiB.
async fn client_gateway(dir: &Path) -> Gateway {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\nmax_body_bytes = {}\n\n\
         [[client]]\nname = \"flooder\"\ntoken_sha256 = \"{}\"\n\n\
         [audit]\npath = \"{}/audit.jsonl\"\nmax_bytes = {}\nkeep = 5\n\n\
         [[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
        2 << 20,
        support::binary::sha256_hex(FLOOD_TOKEN),
        dir.display(),
        1 << 20,
    );
    let c = Config::from_toml_str(&text, &support::origin("test.toml")).expect("valid test config");
    let gw = Gateway::start(c).await.expect("starts");
    gw.wait_upstreams(std::time::Duration::from_secs(10)).await;
    gw
}

const FLOOD_TOKEN: &str = "mcpe_Flood-client-token-0123456789abcdefGHIJ";

/// The audit file's lines once there are at least `n` of them.
async fn audit_lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    let what = format!("{n} audit lines in {}", path.display());
    let text = support::eventually_sync(&what, std::time::Duration::from_secs(10), || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        (text.lines().count() >= n).then_some(text)
    })
    .await;
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Issue 23: 60 refused `tools/call`s with 1 MiB names from a client leave
/// the audit log under 1 MiB, unrotated: each name is refused before it is
/// looked up (-32602, `limit="name_length"`) and written cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_calls_with_1_mib_names_do_not_flush_the_audit_log() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let gw = client_gateway(dir.path()).await;
    let addr = gw.local_addr();
    let auth = format!("Bearer {FLOOD_TOKEN}");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}});
    let r = support::post(addr, &[("authorization", &auth)], &init).await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let sid = r.header("mcp-session-id").unwrap().to_string();
    let name = format!("edge__{}", "n".repeat(1 << 20));
    for i in 1..=60 {
        let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": name, "arguments": {}}});
        let h = [("authorization", auth.as_str()), ("mcp-session-id", &sid)];
        let r = support::post(addr, &h, &call).await;
        assert_eq!((r.status, r.error_code()), (200, Some(-32602)), "{i}");
        assert!(r.raw.len() < 4096, "the answer does not echo the name");
    }
    let path = dir.path().join("audit.jsonl");
    let lines = audit_lines(&path, 60).await;
    gw.shutdown().await;
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "audit log after 60 calls with 1 MiB names: {size} bytes, {} lines",
        lines.len()
    );
    assert!(size < 1 << 20, "{size} bytes");
    assert!(!dir.path().join("audit.jsonl.1").exists(), "rotated");
    assert_eq!(lines.len(), 60);
    for l in &lines {
        assert_eq!(
            (l["client"].as_str(), l["outcome"].as_str()),
            (Some("flooder"), Some("refused"))
        );
        let n = l["name"].as_str().unwrap();
        assert!(
            n.starts_with("edge__nnn") && n.ends_with(" bytes]") && n.len() < 300,
            "{n}"
        );
    }
}

/// Issue 23: a modern call refused for a header that does not match its
/// body (-32020) is audited, as an error with that code, not routed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_mismatch_is_audited() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let gw = client_gateway(dir.path()).await;
    let auth = format!("Bearer {FLOOD_TOKEN}");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "edge__uptime", "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let h = [
        ("authorization", auth.as_str()),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "edge__other"),
    ];
    let r = support::post(gw.local_addr(), &h, &body).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "{}", r.raw);
    let lines = audit_lines(&dir.path().join("audit.jsonl"), 1).await;
    gw.shutdown().await;
    let l = &lines[0];
    assert_eq!(l["outcome"], "error", "{l}");
    assert_eq!(l["code"], -32020, "{l}");
    assert_eq!(l["name"], "edge__uptime", "{l}");
    assert_eq!(l["upstream"], serde_json::Value::Null, "{l}");
    assert_eq!(l["client"], "flooder", "{l}");
}
