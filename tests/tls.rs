//! TLS on the downstream listener (`server.tls_cert`, `tls_key`,
//! `tls_client_ca`), in-process with certificates made by rcgen: MCP over
//! https, no plain HTTP on a TLS port, a silent client does not stall
//! accepts, a reload serves new certificate files to new connections while
//! open ones keep theirs, a reload with a bad certificate keeps the old one,
//! mTLS refuses clients without a certificate from the client CA, and the
//! client certificate's subject as the gateway reads it.
//!
//! Until the config loader reads the `tls_*` keys, the gateways here start
//! from a config whose `server.tls` is built by `support::tls::tls_config`.
#![allow(clippy::disallowed_methods)] // the gateway and client connections are spawned tasks

mod support;

use mcp_edge::config::Config;
use mcp_edge::gateway::Gateway;
use rcgen::DnType;
use serde_json::{json, Value};
use support::inprocess::InProcess;
use support::tls::{tls_config, Ca, Conn, Files};

const EDGE: &str = "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n";

const SERVER: &str = "admin_listen = \"off\"";

/// The test config with `files` as its TLS (`None`: plain HTTP).
fn config(files: Option<&Files>) -> Config {
    support::tls::config(SERVER, EDGE, files)
}

async fn start(files: &Files) -> Gateway {
    support::tls::start(SERVER, EDGE, files).await
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "tls-test", "version": "1"}}})
}

/// initialize + notifications/initialized on `c`; the session id.
async fn session(c: &mut Conn) -> String {
    let r = c.post(&[], &initialize()).await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let sid = r.header("mcp-session-id").expect("session id").to_string();
    let n = c
        .post(
            &[("mcp-session-id", &sid)],
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
    assert_eq!(n.status, 202);
    sid
}

/// `method` in session `sid` on `c`: its result (panics on anything else).
async fn call(c: &mut Conn, sid: &str, id: u32, method: &str, params: Value) -> Value {
    let r = c
        .post(
            &[
                ("mcp-session-id", sid),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.raw);
    r.body
        .get("result")
        .unwrap_or_else(|| panic!("no result: {}", r.raw))
        .clone()
}

/// tools/list shows the builtin tools and tools/call of one answers.
async fn list_and_call(c: &mut Conn, sid: &str, id: u32) {
    let list = call(c, sid, id, "tools/list", json!({})).await;
    let names: Vec<&str> = (list["tools"].as_array().unwrap().iter())
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"edge__uptime"), "{names:?}");
    let r = call(
        c,
        sid,
        id + 1,
        "tools/call",
        json!({"name": "edge__uptime"}),
    )
    .await;
    assert_eq!(r["isError"], json!(false), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_https_and_no_plain_http_on_the_tls_port() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let server = ca.server("gateway-a");
    let files = Files::write(dir.path(), &server, None);
    let gw = support::tls::start("admin_listen = \"127.0.0.1:0\"", EDGE, &files).await;
    let addr = gw.local_addr();

    let mut c = Conn::open(addr, &ca, None).await.unwrap();
    assert_eq!(c.server_cert, server.der);
    let sid = session(&mut c).await;
    list_and_call(&mut c, &sid, 1).await;

    // Plain HTTP to the TLS port gets no HTTP answer, and is counted.
    let refused = || mcp_edge::metrics::read(mcp_edge::metrics::REFUSED, "limit=\"tls_handshake\"");
    let before = refused();
    let plain: hyper_util::client::legacy::Client<_, http_body_util::Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let r = plain
        .request(support::mcp_request("POST", addr, &[], &body, true))
        .await;
    assert!(
        r.is_err(),
        "plain HTTP answered: {:?}",
        r.map(|r| r.status())
    );
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while refused() <= before {
        assert!(tokio::time::Instant::now() < deadline, "not counted");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The admin listener stays plain HTTP.
    let admin = format!("http://{}/healthz", gw.admin_addr().unwrap());
    let r = plain.get(admin.parse().unwrap()).await.unwrap();
    assert_eq!(r.status(), 200);

    // /status names the files, never their contents.
    let status = mcp_edge::http::admin::status(gw.app());
    let tls = &status["tls"];
    assert_eq!(
        tls["cert"],
        json!(files.cert.display().to_string()),
        "{tls}"
    );
    assert_eq!(tls["client_ca"], Value::Null);
    assert!(tls["not_after"].as_str().is_some_and(|s| !s.is_empty()));
    let text = status.to_string();
    assert!(
        !text.contains("BEGIN") && !text.contains("server.key"),
        "{text}"
    );
    gw.shutdown().await;
}

/// The handshake runs in the connection's task: a client that connects and
/// says nothing does not keep the next one from being served (were the
/// handshake in the accept loop, the next one would be served only once the
/// silent one was dropped at its handshake timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_does_not_stall_accepts() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let server = ca.server("gateway-a");
    let gw = start(&Files::write(dir.path(), &server, None)).await;
    let mut silent = std::net::TcpStream::connect(gw.local_addr()).unwrap();
    let mut c = Conn::open(gw.local_addr(), &ca, None).await.unwrap();
    session(&mut c).await;
    silent.set_nonblocking(true).unwrap();
    match silent.read(&mut [0u8; 1]) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the silent connection ended before the next was served: {other:?}"),
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_new_certificate_files_to_new_connections_only() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let (a, b) = (ca.server("gateway-a"), ca.server("gateway-b"));
    let mut gw = start(&Files::write(dir.path(), &a, None)).await;
    let addr = gw.local_addr();
    let mut old = Conn::open(addr, &ca, None).await.unwrap();
    let sid = session(&mut old).await;

    // The same paths, new contents.
    let files = Files::write(dir.path(), &b, None);
    let report = gw.reload(config(Some(&files))).await;
    assert!(report.tls_reloaded && !report.server_changed, "{report:?}");
    assert!(
        report.to_string().contains("new TLS certificate"),
        "{report}"
    );

    let mut new = Conn::open(addr, &ca, None).await.unwrap();
    assert_eq!(
        new.server_cert, b.der,
        "a new connection gets the new certificate"
    );
    list_and_call(&mut new, &sid, 10).await;
    assert_eq!(old.server_cert, a.der);
    list_and_call(&mut old, &sid, 20).await;

    // Turning TLS off waits for a restart: new connections stay on TLS.
    let report = gw.reload(config(None)).await;
    assert!(
        report.server_changed && report.tls_pending && !report.tls_reloaded,
        "{report:?}"
    );
    assert!(report.to_string().contains("next restart"), "{report}");
    let mut again = Conn::open(addr, &ca, None).await.unwrap();
    assert_eq!(again.server_cert, b.der);
    list_and_call(&mut again, &sid, 30).await;
    gw.shutdown().await;
}

/// A reload whose certificate file is not PEM is rejected whole: the
/// listener keeps serving the certificate it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_a_bad_certificate_keeps_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let a = ca.server("gateway-a");
    let files = Files::write(dir.path(), &a, None);
    let gw = Gateway::start(config(Some(&files))).await.unwrap();
    let cfg = dir.path().join("tls.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{SERVER}\n{}\n{EDGE}",
        files.toml()
    );
    std::fs::write(&cfg, text).unwrap();
    let gw = InProcess::serve(gw, &cfg);
    gw.wait_ready().await;

    std::fs::write(&files.cert, "not a certificate\n").unwrap();
    let message = gw.reload().await;
    let last = gw.last_reload().unwrap();
    assert!(last.rejected, "{message}");
    assert!(message.contains("tls_cert"), "names the key: {message}");

    let mut c = Conn::open(gw.addr, &ca, None).await.unwrap();
    assert_eq!(c.server_cert, a.der, "the old certificate is still served");
    session(&mut c).await;
    gw.stop().await;
}

/// With `tls_client_ca` a client certificate from that CA is required.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_requires_a_client_certificate_from_the_client_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, clients, other) = (
        Ca::new("test CA"),
        Ca::new("client CA"),
        Ca::new("other CA"),
    );
    let server = ca.server("gateway-a");
    let gw = start(&Files::write(dir.path(), &server, Some(&clients))).await;
    let addr = gw.local_addr();

    let robot = clients.issue(&[(DnType::CommonName, "robot-1")], &[]);
    let mut c = Conn::open(addr, &ca, Some(&robot)).await.unwrap();
    session(&mut c).await;

    let stranger = other.issue(&[(DnType::CommonName, "robot-1")], &[]);
    for (what, id) in [("no certificate", None), ("another CA's", Some(&stranger))] {
        // TLS 1.3: the client's side may finish before the server refuses;
        // then the first request fails.
        let refused = match Conn::open(addr, &ca, id).await {
            Err(_) => true,
            Ok(mut c) => c.try_post(&[], &initialize()).await.is_err(),
        };
        assert!(refused, "{what}: served");
    }
    gw.shutdown().await;
}

/// The handshake's side of mTLS: the peer the gateway's requests carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_of_an_mtls_connection_carries_the_client_certificate_subject() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, clients) = (Ca::new("test CA"), Ca::new("client CA"));
    let files = Files::write(dir.path(), &ca.server("gateway-a"), Some(&clients));
    let robot = clients.issue(
        &[
            (DnType::CommonName, "robot-1"),
            (DnType::OrganizationName, "Acme"),
        ],
        &[],
    );
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let addr: std::net::SocketAddr = "192.0.2.7:4242".parse().unwrap();
    let server = mcp_edge::http::tls::accept(tls_config(&files).rustls, server_io, addr);
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(
        support::tls::client_config(&ca, Some(&robot)),
    ));
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let client = connector.connect(name, client_io);
    let (server, client) = tokio::join!(server, client);
    client.expect("client handshake");
    let (_, peer) = server.expect("server handshake");
    assert_eq!(peer.addr, addr);
    assert!(peer.tls);
    let subject = [("CN", "robot-1"), ("O", "Acme")].map(|(a, v)| (a.to_string(), v.to_string()));
    assert_eq!(peer.cert_subject, Some(subject.to_vec()));
}

#[test]
fn cert_subject_lists_attributes_in_certificate_order() {
    let ca = Ca::new("test CA");
    let c = ca.issue(
        &[
            (DnType::CountryName, "CH"),
            (DnType::StateOrProvinceName, "Zürich"),
            (DnType::LocalityName, "Zürich"),
            (DnType::OrganizationName, "Acme Robotics"),
            (DnType::OrganizationalUnitName, "edge"),
            (DnType::CommonName, "robot-1"),
            (DnType::CustomDnType(vec![1, 3, 6, 1, 4, 1, 55555, 1]), "x"),
        ],
        &[],
    );
    let got = mcp_edge::http::tls::cert_subject(&c.der).unwrap();
    let want = [
        ("C", "CH"),
        ("ST", "Zürich"),
        ("L", "Zürich"),
        ("O", "Acme Robotics"),
        ("OU", "edge"),
        ("CN", "robot-1"),
        ("1.3.6.1.4.1.55555.1", "x"),
    ]
    .map(|(a, v)| (a.to_string(), v.to_string()));
    assert_eq!(got, want.to_vec());
    assert_eq!(mcp_edge::http::tls::cert_subject(b"not DER"), None);
}
