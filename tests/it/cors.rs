//! CORS on `/mcp`: a browser page at an allowed origin (loopback, or
//! `server.allowed_origins`) can preflight, send, and read answers and the
//! session header; a foreign origin still gets 403 and no CORS headers.

use crate::support::*;
use serde_json::json;

const APP: &str = "https://app.example";

async fn gateway() -> mcp_edge::gateway::Gateway {
    start(
        &format!("allowed_origins = [\"{APP}\"]"),
        &fake_block("a", "legacy", ""),
    )
    .await
}

#[tokio::test]
async fn preflight_from_an_allowed_origin_lists_methods_and_echoes_headers() {
    let gw = gateway().await;
    let asked = "content-type, mcp-session-id, mcp-protocol-version, mcp-method, mcp-name, mcp-param-region";
    let r = request(
        "OPTIONS",
        gw.local_addr(),
        &[
            ("origin", APP),
            ("access-control-request-method", "POST"),
            ("access-control-request-headers", asked),
        ],
        "",
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.raw);
    assert_eq!(r.header("access-control-allow-origin"), Some(APP));
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET, POST, DELETE")
    );
    assert_eq!(r.header("access-control-allow-headers"), Some(asked));
    assert_eq!(r.header("vary"), Some("Origin"));
    // A public page reaching a private address asks first (Private Network Access).
    let pna = request(
        "OPTIONS",
        gw.local_addr(),
        &[
            ("origin", APP),
            ("access-control-request-method", "POST"),
            ("access-control-request-private-network", "true"),
        ],
        "",
    )
    .await;
    assert_eq!(
        pna.header("access-control-allow-private-network"),
        Some("true")
    );
    // Without an Origin it is a plain OPTIONS: 204 with Allow, no CORS.
    let plain = request("OPTIONS", gw.local_addr(), &[], "").await;
    assert_eq!(plain.status, 204);
    assert_eq!(plain.header("allow"), Some("GET, POST, DELETE, OPTIONS"));
    assert_eq!(plain.header("access-control-allow-origin"), None);
    gw.shutdown().await;
}

#[tokio::test]
async fn answers_to_an_allowed_origin_are_readable_and_expose_the_session_id() {
    let gw = gateway().await;
    let addr = gw.local_addr();
    let init = post(addr, &[("origin", APP)], &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}}})).await;
    assert_eq!(init.status, 200, "{}", init.raw);
    assert_eq!(init.header("access-control-allow-origin"), Some(APP));
    let exposed = init.header("access-control-expose-headers").unwrap();
    assert!(exposed.contains("Mcp-Session-Id"), "{exposed}");
    let sid = init.header("mcp-session-id").unwrap().to_string();
    // Loopback pages are allowed too (a dev server on another port).
    let local = "http://localhost:5173";
    let list = post(
        addr,
        &[
            ("origin", local),
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(list.header("access-control-allow-origin"), Some(local));
    assert!(tool_names(&list).contains(&"a__echo".to_string()));
    // Errors are readable too, so the page sees the reason.
    let bad = request("POST", addr, &[("origin", APP)], "{not json").await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.header("access-control-allow-origin"), Some(APP));
    gw.shutdown().await;
}

#[tokio::test]
async fn a_foreign_origin_gets_403_without_cors_headers() {
    let gw = gateway().await;
    for method in ["OPTIONS", "POST"] {
        let r = request(
            method,
            gw.local_addr(),
            &[
                ("origin", "https://evil.example"),
                ("access-control-request-method", "POST"),
            ],
            "{}",
        )
        .await;
        assert_eq!(r.status, 403, "{method}: {}", r.raw);
        assert_eq!(r.header("access-control-allow-origin"), None, "{method}");
    }
    gw.shutdown().await;
}

/// The status line's code of a raw HTTP/1.1 `head` (and an `initialize`)
/// sent to `addr`.
async fn raw_status(addr: std::net::SocketAddr, head: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let msg = format!(
        "{head}content-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(msg.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Issue 23: two `Host` or two `Authorization` headers are a 400 (not
/// "the first wins"); an absolute-form target's authority passes the same
/// check as `Host` (403) and must be `Host`'s (400).
#[tokio::test]
async fn duplicate_hosts_and_foreign_absolute_targets_are_refused() {
    let gw = start(
        "",
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let addr = gw.local_addr();
    let port = addr.port();
    let cases = [
        (format!("POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nhost: evil.example\r\n"), 400),
        (format!("POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nauthorization: Bearer a\r\nauthorization: Bearer b\r\n"), 400),
        (format!("POST http://evil.example/mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"), 403),
        (format!("POST http://localhost:{port}/mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"), 400),
        // The control: one Host; an absolute target naming Host's authority.
        (format!("POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"), 200),
        (format!("POST http://127.0.0.1:{port}/mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"), 200),
    ];
    for (head, want) in cases {
        assert_eq!(raw_status(addr, &head).await, want, "{head}");
    }
    gw.shutdown().await;
    // The admin listener: two Host headers are a 400 there too.
    let server = "admin_listen = \"127.0.0.1:0\"";
    let gw = start(
        server,
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let admin = gw.admin_addr().unwrap();
    let host = format!("host: {admin}\r\n");
    let one = format!("GET /healthz HTTP/1.1\r\n{host}");
    let two = format!("{one}{host}");
    assert_eq!(raw_status(admin, &two).await, 400);
    assert_eq!(raw_status(admin, &one).await, 200);
    gw.shutdown().await;
}
