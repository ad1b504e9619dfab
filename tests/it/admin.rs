//! The admin listener (`server.admin_listen`): /metrics, /healthz, /readyz,
//! /status, read-only; the reconnect action on the operator socket
//! (`server.admin_socket`), and the `mcp-edge status` CLI against them.

use crate::support;
use crate::support::*;
use serde_json::Value;

async fn get(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    use http_body_util::{BodyExt, Full};
    let client: hyper_util::client::legacy::Client<_, Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    (
        status,
        String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned(),
    )
}

/// Family names as parsed by prometheus_client's text parser (fails on bad syntax).
async fn parse_with_prometheus_client(text: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(support::peers::python_v1())
        .args([
            "-c",
            "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as f\nfor m in f(sys.stdin.read()): print(m.name)",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .await
        .unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "prometheus_client rejected /metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_metrics_readiness_and_reconnect() {
    mcp_edge::metrics::prometheus();
    let upstreams = "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n\n[[upstream]]\nname = \"dead\"\ntransport = \"stdio\"\ncommand = \"/nonexistent/server\"\n";
    let dir = tempfile::tempdir().unwrap();
    let server = format!(
        "admin_listen = \"127.0.0.1:0\"\nadmin_socket = \"{}/admin.sock\"",
        dir.path().display()
    );
    let gw = start(&server, upstreams).await;
    let admin = gw.admin_addr().expect("admin listener bound");
    let socket = gw
        .admin_socket()
        .expect("operator socket bound")
        .to_path_buf();
    assert_eq!(get(admin, "GET", "/healthz").await.0, 200);
    assert_eq!(get(admin, "GET", "/readyz").await.0, 200);
    let (status, body) = get(admin, "GET", "/status").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["upstreams"][0]["state"], "ready");
    assert_eq!(v["upstreams"][1]["state"], "backoff");
    assert!(v["upstreams"][1]["detail"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/server"));
    assert!(v["heap"]["live_bytes"].is_u64() && v["sessions"]["capacity"] == 256);
    let (_, metrics) = get(admin, "GET", "/metrics").await;
    // A real parser (Python prometheus_client, pinned in requirements-v1.txt) reads it all.
    let parsed = parse_with_prometheus_client(&metrics).await;
    for name in [
        "mcp_edge_upstream_state",
        "mcp_edge_upstream_connects",
        "mcp_edge_upstream_owner_tasks",
        "mcp_edge_sessions_capacity",
        "mcp_edge_upstream_backoff_seconds",
    ] {
        assert!(
            parsed.lines().any(|l| l == name),
            "{name} missing from parsed families:\n{parsed}"
        );
    }
    // The TCP listener is read-only: no stderr tail, no action.
    assert!(v["upstreams"][1]["stderr_tail"].is_null(), "{v}");
    let (code, body) = get(admin, "POST", "/upstreams/dead/reconnect").await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("server.admin_socket"), "{body}");
    let (_, full) = operator_request(&socket, "GET", "/status", &[], "").await;
    let full: Value = serde_json::from_str(&full).unwrap();
    assert!(full["upstreams"][1]["stderr_tail"].is_string(), "{full}");
    assert_eq!(v["admin_socket"], socket.display().to_string());
    // Operator action on the operator socket: an immediate attempt.
    let dead = gw.app().router().upstreams()[1].clone();
    let before = dead.attempts();
    let reconnect = |p: &'static str| operator_request(&socket, "POST", p, &[], "");
    assert_eq!(reconnect("/upstreams/dead/reconnect").await.0, 202);
    let attempted = || dead.attempts() > before;
    let within = std::time::Duration::from_secs(10);
    support::eventually_sync("an attempt after the reconnect", within, attempted).await;
    assert_eq!(reconnect("/upstreams/nope/reconnect").await.0, 404);
    // The CLI renders the same document as a table.
    let url = format!("http://{admin}");
    let out = tokio::task::spawn_blocking(move || {
        support::gateway_command()
            .args(["status", "--url", &url])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        table.contains("edge") && table.contains("ready") && table.contains("backoff"),
        "{table}"
    );
    assert!(
        table.contains("access: anyone on loopback (no [[client]])  (plain http)"),
        "{table}"
    );
}

/// Raw HTTP/1.1 `method path` with `extra` header lines; the status code.
async fn raw_status(addr: std::net::SocketAddr, method: &str, path: &str, extra: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out[9..12].parse().unwrap()
}

/// A web page can reach a loopback port: every admin route refuses what a
/// browser sends (an `Origin`), and a `Host` other than loopback or the
/// admin address (DNS rebinding), so a page can neither read `/status` nor
/// force reconnects; the same requests without those headers are served
/// (the reads: actions are not served on TCP at all).
#[tokio::test]
async fn browsers_are_refused_on_every_admin_route() {
    mcp_edge::metrics::prometheus();
    let gw = start(
        "admin_listen = \"127.0.0.1:0\"",
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let admin = gw.admin_addr().expect("admin listener bound");
    let local = format!("Host: {admin}\r\n");
    let origin = format!("{local}Origin: http://attacker.example\r\n");
    let rebound = "Host: attacker.example:9737\r\n";
    for (method, path) in [("GET", "/status"), ("POST", "/upstreams/edge/reconnect")] {
        assert_eq!(
            raw_status(admin, method, path, &origin).await,
            403,
            "{method} {path}"
        );
        assert_eq!(
            raw_status(admin, method, path, rebound).await,
            403,
            "{method} {path}"
        );
        let served = raw_status(admin, method, path, &local).await;
        let want = if method == "GET" { 200 } else { 403 };
        assert_eq!(served, want, "{method} {path}");
    }
}
