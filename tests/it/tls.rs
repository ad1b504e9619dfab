//! TLS on the downstream listener (`server.tls_cert`, `tls_key`,
//! `tls_client_ca`), with certificates made by rcgen written to PEM files
//! and named in the config text the config loader reads.
//!
//! In-process: MCP over https, no plain HTTP on a TLS port, a silent client
//! does not stall accepts, a reload serves new certificate files to new
//! connections while open ones keep theirs, a reload with a bad
//! certificate or a key of another certificate is rejected and keeps the
//! old one, mTLS refuses clients without a certificate from the client CA,
//! and the client certificate's subject as the gateway reads it.
//!
//! Against the real binary (`support::binary`): a SIGHUP with new
//! certificate files serves them to new connections while a connection
//! opened before keeps its certificate and its legacy session; mTLS end to
//! end (a client named by its certificate's subject, no certificate refused
//! at the handshake, an unknown subject asked for a token); no key material
//! in `/status`, `check-config` or the log.
#![allow(clippy::disallowed_methods)] // the gateway and client connections are spawned tasks; the binary is a child process waited for in real time

use crate::support;

use crate::support::binary::{refused, Running};
use crate::support::inprocess::InProcess;
use crate::support::tls::{Ca, Conn, Files};
use mcp_edge::config::Config;
use mcp_edge::gateway::Gateway;
use rcgen::DnType;
use serde_json::{json, Value};

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
    session_with(c, &[]).await
}

/// [`session`] with `extra` headers on each request (`authorization`).
async fn session_with(c: &mut Conn, extra: &[(&str, &str)]) -> String {
    let r = c.post(extra, &initialize()).await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let sid = r.header("mcp-session-id").expect("session id").to_string();
    let mut h = extra.to_vec();
    h.push(("mcp-session-id", &sid));
    let n = c
        .post(
            &h,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
    assert_eq!(n.status, 202, "{}", n.raw);
    sid
}

/// `method` in session `sid` on `c`: its result (panics on anything else).
async fn call(c: &mut Conn, sid: &str, id: u32, method: &str, params: Value) -> Value {
    call_with(c, &[], sid, id, method, params).await
}

/// [`call`] with `extra` headers (`authorization`).
async fn call_with(
    c: &mut Conn,
    extra: &[(&str, &str)],
    sid: &str,
    id: u32,
    method: &str,
    params: Value,
) -> Value {
    let mut h = extra.to_vec();
    h.extend([
        ("mcp-session-id", sid),
        ("mcp-protocol-version", "2025-11-25"),
    ]);
    let r = c
        .post(
            &h,
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.raw);
    r.body
        .get("result")
        .unwrap_or_else(|| panic!("no result: {}", r.raw))
        .clone()
}

/// The tool names of a tools/list result.
fn tool_names(list: &Value) -> Vec<String> {
    (list["tools"].as_array().unwrap().iter())
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// tools/list shows the builtin tools and tools/call of one answers.
async fn list_and_call(c: &mut Conn, sid: &str, id: u32) {
    list_and_call_with(c, &[], sid, id).await
}

/// [`list_and_call`] with `extra` headers (`authorization`).
async fn list_and_call_with(c: &mut Conn, extra: &[(&str, &str)], sid: &str, id: u32) {
    let names = tool_names(&call_with(c, extra, sid, id, "tools/list", json!({})).await);
    assert!(names.iter().any(|n| n == "edge__uptime"), "{names:?}");
    let params = json!({"name": "edge__uptime"});
    let r = call_with(c, extra, sid, id + 1, "tools/call", params).await;
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
    let counted = || refused() > before;
    let within = std::time::Duration::from_secs(10);
    support::eventually_sync("the failed handshake counted", within, counted).await;
    // The admin listener stays plain HTTP.
    let admin = format!("http://{}/healthz", gw.admin_addr().unwrap());
    let r = plain.get(admin.parse().unwrap()).await.unwrap();
    assert_eq!(r.status(), 200);

    // /status names the files, never their contents.
    let status = mcp_edge::downstream::admin::status(gw.app());
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

/// A reload whose certificate file is not PEM, or whose key belongs to
/// another certificate, is rejected whole by the config loader (the message
/// names the key at fault): new connections still get the old certificate.
/// Good files again are then applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_a_bad_certificate_keeps_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let (a, b) = (ca.server("gateway-a"), ca.server("gateway-b"));
    let files = Files::write(dir.path(), &a, None);
    let cfg = dir.path().join("tls.toml");
    let text = support::tls::config_text(SERVER, EDGE, Some(&files));
    std::fs::write(&cfg, text).unwrap();
    let gw = InProcess::start(&cfg, None).await;

    std::fs::write(&files.cert, "not a certificate\n").unwrap();
    let message = gw.reload().await;
    assert!(gw.last_reload().unwrap().rejected, "{message}");
    assert!(
        message.contains("server.tls_cert"),
        "names the key: {message}"
    );
    assert_serves(gw.addr, &ca, &a).await;

    // A valid certificate (b's) with a key that is not its own (a's).
    std::fs::write(&files.cert, &b.cert_pem).unwrap();
    let message = gw.reload().await;
    assert!(gw.last_reload().unwrap().rejected, "{message}");
    assert!(
        message.contains("server.tls_key") && message.contains("does not match"),
        "names the key: {message}"
    );
    assert!(!message.contains("PRIVATE KEY"), "{message}");
    assert_serves(gw.addr, &ca, &a).await;

    // b's own key: applied, b served to new connections.
    std::fs::write(&files.key, &b.key_pem).unwrap();
    let message = gw.reload().await;
    assert!(!gw.last_reload().unwrap().rejected, "{message}");
    assert!(message.contains("new TLS certificate"), "{message}");
    assert_serves(gw.addr, &ca, &b).await;
    gw.stop().await;
}

/// A new connection to `addr` is shown `want` and served.
async fn assert_serves(addr: std::net::SocketAddr, ca: &Ca, want: &support::tls::Issued) {
    let mut c = Conn::open(addr, ca, None).await.unwrap();
    assert!(c.server_cert == want.der, "another certificate is served");
    session(&mut c).await;
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
    let tls = config(Some(&files)).server.tls.expect("TLS loaded");
    let server = mcp_edge::downstream::tls_accept::accept(tls.rustls, server_io, addr);
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
    let got = mcp_edge::downstream::tls_accept::cert_subject(&c.der).unwrap();
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
    assert_eq!(
        mcp_edge::downstream::tls_accept::cert_subject(b"not DER"),
        None
    );
}

// The real binary.

const TOKEN: &str = "mcpe_tls-holder-token-0123456789abcd";

/// The binary's config: TLS with `files`, fixed loopback ports (admin
/// plain HTTP), then `rest` (`[[client]]`s, `[[upstream]]`s) and the
/// builtin `edge`.
fn binary_config(files: &Files, rest: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n{}\n{rest}\n{EDGE}",
        support::free_port(),
        support::free_port(),
        files.toml()
    )
}

/// The `[[client]]` holding [`TOKEN`] (no policy: it sees everything).
fn token_client() -> String {
    let digest = support::binary::sha256_hex(TOKEN);
    format!("[[client]]\nname = \"holder\"\ntoken_sha256 = \"{digest}\"\n")
}

/// `/status`, `check-config` and the log show the TLS files by path only.
async fn assert_no_key_material(gw: &Running, files: &Files) {
    let status = gw.status().await;
    assert_eq!(
        status["tls"]["cert"],
        json!(files.cert.display().to_string())
    );
    let (valid, checked) = support::binary::check_config(&gw.config);
    assert!(valid, "{checked}");
    assert!(
        checked.contains(&files.key.display().to_string()),
        "{checked}"
    );
    for (what, text) in [
        ("/status", status.to_string()),
        ("check-config", checked),
        ("the log", gw.log_text()),
    ] {
        assert!(
            !text.contains("PRIVATE KEY") && !text.contains("BEGIN"),
            "key material in {what}: {text}"
        );
    }
}

/// Serial number and subject of a DER certificate.
fn serial_and_subject(der: &[u8]) -> (Vec<u8>, String) {
    let (_, c) = x509_parser::parse_x509_certificate(der).unwrap();
    (c.raw_serial().to_vec(), c.subject().to_string())
}

/// SIGHUP after new certificate files (same paths, same CA, another
/// subject and serial): new connections get the new certificate; a
/// connection opened before keeps the old one, and its legacy session goes
/// on, on both connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_serves_new_certificate_files_to_new_connections_only() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let (a, b) = (ca.server("gateway-a"), ca.server("gateway-b"));
    let (sa, sb) = (serial_and_subject(&a.der), serial_and_subject(&b.der));
    assert!(sa.0 != sb.0 && sa.1 != sb.1, "{sa:?} {sb:?}");
    let files = Files::write(dir.path(), &a, None);
    let gw = Running::start(dir.path(), &binary_config(&files, &token_client())).await;
    let auth = format!("Bearer {TOKEN}");
    let h = [("authorization", auth.as_str())];

    // The connection opened before the reload, held open throughout (idle
    // for well under the server's 10 s HEADER_READ_TIMEOUT, which would
    // close it).
    let mut old = Conn::open(gw.addr, &ca, None).await.unwrap();
    assert!(old.server_cert == a.der, "the first certificate is served");
    // (A 401 ends its connection: the body was not read.)
    let mut other = Conn::open(gw.addr, &ca, None).await.unwrap();
    let denied = other.post(&[], &initialize()).await;
    assert_eq!(denied.status, 401, "{}", denied.raw);
    assert_eq!(denied.header("connection"), Some("close"));
    let sid = session_with(&mut old, &h).await;
    list_and_call_with(&mut old, &h, &sid, 1).await;

    Files::write(dir.path(), &b, None);
    let last = gw.reload().await;
    assert_eq!(last["rejected"], json!(false), "{last}");
    let message = last["message"].as_str().unwrap();
    assert!(message.contains("new TLS certificate"), "{message}");

    let mut new = Conn::open(gw.addr, &ca, None).await.unwrap();
    assert!(
        new.server_cert == b.der,
        "a new connection gets the new one"
    );
    list_and_call_with(&mut new, &h, &sid, 10).await;
    // The old connection: the same TLS session (a hyper connection cannot
    // reconnect), the same legacy session.
    list_and_call_with(&mut old, &h, &sid, 20).await;
    let fresh = session_with(&mut new, &h).await;
    list_and_call_with(&mut new, &h, &fresh, 30).await;

    assert_no_key_material(&gw, &files).await;
}

/// mTLS end to end: `agent-a` is named by its certificate's subject alone
/// and held to its policy; no certificate is refused at the handshake (and
/// counted); a certificate from the client CA that names no client must
/// bring a token, and with one it is that token's client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_names_clients_by_certificate_subject_or_token() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, client_ca) = (Ca::new("test CA"), Ca::new("client CA"));
    let files = Files::write(dir.path(), &ca.server("gateway-a"), Some(&client_ca));
    let rest = format!(
        "[[client]]\nname = \"agent-a\"\ncert_subject = \"CN=agent-a, O=Site\"\nallow = [\"edge__*\"]\n\n{}\n{}",
        token_client(),
        support::fake_block("fake", "legacy", "")
    );
    let gw = Running::start(dir.path(), &binary_config(&files, &rest)).await;
    let (addr, init) = (gw.addr, initialize());

    // No client certificate: refused at the handshake (TLS 1.3: the
    // client's side may finish first; then the first request fails).
    let before = refused(&gw.metrics().await, "tls_handshake");
    let served = match Conn::open(addr, &ca, None).await {
        Err(_) => false,
        Ok(mut c) => c.try_post(&[], &init).await.is_ok(),
    };
    assert!(!served, "served without a client certificate");
    let counted = || async { refused(&gw.metrics().await, "tls_handshake") > before };
    let within = std::time::Duration::from_secs(10);
    support::eventually("the refused handshake counted", within, counted).await;

    // agent-a's certificate, no Authorization: it is agent-a.
    let site = |cn| [(DnType::CommonName, cn), (DnType::OrganizationName, "Site")];
    let agent = client_ca.issue(&site("agent-a"), &[]);
    let mut c = Conn::open(addr, &ca, Some(&agent)).await.unwrap();
    let agent_sid = session(&mut c).await;
    let names = tool_names(&call(&mut c, &agent_sid, 1, "tools/list", json!({})).await);
    assert!(names.iter().any(|n| n == "edge__uptime"), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("edge__")), "{names:?}");
    let r = call(
        &mut c,
        &agent_sid,
        2,
        "tools/call",
        json!({"name": "edge__uptime"}),
    )
    .await;
    assert_eq!(r["isError"], json!(false), "{r}");

    // A certificate from the client CA naming no client, no token: 401.
    let stranger = client_ca.issue(&site("agent-b"), &[]);
    let mut s = Conn::open(addr, &ca, Some(&stranger)).await.unwrap();
    let r = s.post(&[], &init).await;
    assert_eq!(r.status, 401, "{}", r.raw);
    assert_eq!(
        r.header("www-authenticate"),
        Some(r#"Bearer realm="mcp-edge""#)
    );
    // The same certificate with the token: the token's client, which sees
    // everything, and not agent-a (whose session is unknown to it).
    let mut s = Conn::open(addr, &ca, Some(&stranger)).await.unwrap();
    let auth = format!("Bearer {TOKEN}");
    let h = [("authorization", auth.as_str())];
    let sid = session_with(&mut s, &h).await;
    let names = tool_names(&call_with(&mut s, &h, &sid, 3, "tools/list", json!({})).await);
    assert!(names.iter().any(|n| n == "fake__echo"), "{names:?}");
    assert!(names.iter().any(|n| n == "edge__uptime"), "{names:?}");
    let mut foreign = h.to_vec();
    foreign.push(("mcp-session-id", &agent_sid));
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}});
    assert_eq!(s.post(&foreign, &body).await.status, 404);

    let status = gw.status().await;
    assert_eq!(
        status["tls"]["client_ca"],
        json!(files.client_ca.as_ref().unwrap().display().to_string())
    );
    assert_no_key_material(&gw, &files).await;
}
