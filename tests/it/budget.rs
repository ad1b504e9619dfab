//! Measures the per-entry costs that `src/budget.rs` multiplies by the
//! capacities, with the counting allocator installed in this test binary,
//! and fails if any measurement exceeds its constant there: the worst-case
//! estimate of `mcp-edge check-config` is built from upper bounds of this
//! build. Real time, real sockets, the fake upstream as a child process (its
//! memory is its own). It runs alone in its process (`support::heap`), so
//! nothing else allocates while it measures. Run with `--nocapture` to see
//! the figures.
#![allow(clippy::large_futures)] // read buffers on the stack on purpose: heap is what is measured

use crate::support;
use crate::support::heap::settled_live;
use crate::support::tls::{Ca, Files};
use crate::support::*;
use mcp_edge::alloc::{live_bytes, peak_bytes, reset_peak};
use mcp_edge::budget;
use rcgen::DnType;
use rustls::pki_types::ServerName;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens `n` streams with `open` over a settled baseline, reports the live
/// heap each holds against `constant`, then closes them.
async fn each_held(
    what: &str,
    constant: usize,
    n: usize,
    mut open: impl AsyncFnMut(usize) -> TcpStream,
) {
    let mut held = Vec::with_capacity(n);
    let base = settled_live().await;
    for i in 0..n {
        held.push(open(i).await);
    }
    let each = settled_live().await.saturating_sub(base) / n;
    report(what, each as f64, constant as f64);
}

/// Reads from `s` into `buf` (after its first `n` bytes) until `needle`
/// appears; the bytes held.
async fn read_until(s: &mut TcpStream, buf: &mut [u8], mut n: usize, needle: &[u8]) -> usize {
    while !buf[..n].windows(needle.len()).any(|w| w == needle) {
        let r = s.read(&mut buf[n..]).await.unwrap();
        assert!(
            r > 0,
            "stream closed before {:?}",
            std::str::from_utf8(needle)
        );
        n += r;
    }
    n
}

/// One POST of `body` to `path` on its own connection: 202.
async fn post_raw(addr: SocketAddr, path: &str, body: &str) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut s).await.0, 202);
}

/// An HTTP+SSE session opened (`GET /sse`) and initialized; its stream.
async fn sse_session(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let get = b"GET /sse HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n";
    s.write_all(get).await.unwrap();
    let mut buf = [0u8; 4096];
    let n = read_until(&mut s, &mut buf, 0, b"sessionId=").await;
    let n = read_until(&mut s, &mut buf, n, b"\n\n").await;
    let text = std::str::from_utf8(&buf[..n]).unwrap();
    let at = text.find("/messages?sessionId=").unwrap();
    let path = text[at..].split('\n').next().unwrap().to_string();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}"#;
    post_raw(addr, &path, init).await;
    read_until(&mut s, &mut buf, 0, b"\"id\":0").await;
    post_raw(
        addr,
        &path,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    s
}

/// Reads one HTTP response head, then `Content-Length` bytes of body (or
/// until EOF without one) into a stack buffer: no heap on the client side.
async fn read_response<S: AsyncRead + Unpin>(s: &mut S) -> (u16, usize) {
    let mut buf = [0u8; 16 * 1024];
    let mut head = [0u8; 4096];
    let mut n = 0;
    loop {
        let r = s.read(&mut head[n..n + 1]).await.unwrap();
        assert_eq!(r, 1, "connection closed in the response head");
        n += 1;
        if head[..n].ends_with(b"\r\n\r\n") {
            break;
        }
    }
    let text = std::str::from_utf8(&head[..n]).unwrap();
    let status: u16 = text[9..12].parse().unwrap();
    let len = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(usize::MAX);
    let mut got = 0;
    while got < len {
        let want = (len - got).min(buf.len());
        let r = s.read(&mut buf[..want]).await.unwrap();
        if r == 0 {
            break;
        }
        got += r;
    }
    (status, got)
}

fn modern_call(tool: &str, args: serde_json::Value) -> Vec<u8> {
    modern_call_accepting(tool, args, "application/json, text/event-stream")
}

fn modern_call_accepting(tool: &str, args: serde_json::Value, accept: &str) -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": args, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: {accept}\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Peak heap above the settled baseline while `request` is answered, per
/// `per` bytes; the answer must have at least `answer` bytes.
async fn peak_per_byte(addr: SocketAddr, request: &[u8], per: usize, answer: usize) -> f64 {
    let base = settled_live();
    let base = base.await;
    reset_peak();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let (status, got) = read_response(&mut s).await;
    assert_eq!(status, 200);
    assert!(got >= answer, "an answer of {got} bytes, {answer} wanted");
    drop(s);
    (peak_bytes().saturating_sub(base)) as f64 / per as f64
}

fn report(what: &str, measured: f64, constant: f64) {
    println!("{what:<40} measured {measured:>12.1}   constant {constant:>10}");
    assert!(
        measured <= constant,
        "{what}: measured {measured:.1} exceeds src/budget.rs's {constant}"
    );
}

#[tokio::test]
async fn per_entry_costs_stay_below_the_budget_constants() {
    if !crate::alone!(per_entry_costs_stay_below_the_budget_constants) {
        return;
    }
    mcp_edge::metrics::prometheus();

    // Fixed: an idle gateway with the built-in upstream, everything included.
    let gw = start(
        "",
        "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
    )
    .await;
    let addr = gw.local_addr();
    let fixed = settled_live().await;
    report("fixed (bytes)", fixed as f64, budget::FIXED_BYTES as f64);

    // Idle keep-alive connections (one request answered on each).
    const CONNS: usize = 64;
    let base = settled_live().await;
    let mut conns = Vec::with_capacity(CONNS);
    for _ in 0..CONNS {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_response(&mut s).await.0, 404);
        conns.push(s);
    }
    let per_conn = (settled_live().await.saturating_sub(base)) / CONNS;
    report(
        "idle connection (bytes)",
        per_conn as f64,
        budget::CONNECTION_BYTES as f64,
    );
    drop(conns);
    partial_heads(addr).await;

    // GET streams of legacy sessions (each on its own connection).
    const STREAMS: usize = 32;
    let mut sids = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        sids.push(legacy_session(addr, "2025-11-25").await);
    }
    let get_stream = async |i: usize| {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\
             Mcp-Session-Id: {}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n",
            sids[i]
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut head = [0u8; 1024];
        let n = s.read(&mut head).await.unwrap();
        assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &head[..n]);
        s
    };
    let a_stream = budget::STREAM_BYTES + budget::CONNECTION_BYTES;
    let what = "GET stream incl. its connection (bytes)";
    each_held(what, a_stream, STREAMS, get_stream).await;

    // Idle sessions of the HTTP+SSE transport, each with its stream's
    // connection (initialized by POSTs on connections since closed): what
    // a GET stream's place costs, at most.
    let what = "idle HTTP+SSE session incl. its stream's connection (bytes)";
    each_held(what, a_stream, 32, async |_| sse_session(addr).await).await;

    // A large request body: read, parsed, then refused by the tool.
    const BODY: usize = 512 * 1024;
    let req = modern_call("edge__uptime", json!({"pad": "p".repeat(BODY)}));
    let factor = peak_per_byte(addr, &req, BODY, 0).await;
    report(
        "request body (heap per byte)",
        factor,
        budget::BODY_FACTOR as f64,
    );
    gw.shutdown().await;

    // A queued relayed message: a progress notification as the relay keeps it.
    const DEPTH: usize = 32;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
        "progressToken": "mcp-edge:0:12:3", "progress": 7, "total": 10, "message": "step 7 of 10 (fake)"}});
    let base = live_bytes();
    let (relay, rx) = mcp_edge::relay::Relay::new(None, DEPTH);
    for _ in 0..DEPTH {
        assert!(relay.forward(note.clone()));
    }
    let per_msg = (live_bytes().saturating_sub(base)) / DEPTH;
    report(
        "queued relayed message (bytes)",
        per_msg as f64,
        budget::QUEUED_MESSAGE_BYTES as f64,
    );
    drop((relay, rx));

    // A call stream's replay buffer, full of progress notifications as
    // written (ID line and event), each kept with its place.
    let base = live_bytes();
    let mut replay = mcp_edge::downstream::resume::Replay::new(1);
    let limit = mcp_edge::limits::SSE_REPLAY_BYTES;
    for n in 1..=(limit / 40) as u64 {
        let id = mcp_edge::downstream::resume::EventId { stream: 12, n }.line();
        let event = mcp_edge::protocol::sse::event_after(&id, &note.to_string());
        replay.push(mcp_edge::downstream::resume::Event::Message(event));
    }
    assert!(
        replay.after(1).is_err(),
        "the buffer overflowed: the oldest went"
    );
    report(
        "full replay buffer (bytes)",
        live_bytes().saturating_sub(base) as f64,
        budget::REPLAY_STREAM_BYTES as f64,
    );
    drop(replay);

    // One stdio upstream (tables, stderr ring, small catalog), then its big results.
    let before = {
        let gw = start(
            "",
            "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
        )
        .await;
        let l = settled_live().await;
        gw.shutdown().await;
        l
    };
    let gw = start(
        "",
        &format!(
            "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n{}",
            fake_block("f", "legacy", "")
        ),
    )
    .await;
    let addr = gw.local_addr();
    let per_upstream = settled_live().await.saturating_sub(before);
    report(
        "stdio upstream, small catalog (bytes)",
        per_upstream as f64,
        (budget::UPSTREAM_BYTES + mcp_edge::limits::STDERR_TAIL_BYTES) as f64,
    );
    const RESULT: usize = 512 * 1024;
    let req = modern_call("f__big", json!({"bytes": RESULT}));
    let factor = peak_per_byte(addr, &req, RESULT, RESULT).await;
    report(
        "result (heap per byte)",
        factor,
        budget::RESULT_FACTOR as f64, // the line's buffer is the result
    );
    gw.shutdown().await;
    http_result_costs(RESULT).await;

    // Catalog: 400 generated tools of ~1 KiB against none.
    let mut live = Vec::new();
    let mut size = 0;
    for tools in ["0", "400"] {
        let gw = start("", &fake_block_args("f", "legacy", &["--tools", tools], "")).await;
        let sid = legacy_session(gw.local_addr(), "2025-11-25").await;
        let list = call(gw.local_addr(), &sid, json!(1), "tools/list", json!({})).await;
        size = list.raw.len();
        drop(list);
        live.push(settled_live().await);
        gw.shutdown().await;
    }
    let factor = live[1].saturating_sub(live[0]) as f64 / size as f64;
    report(
        "catalog, kept + merged (heap per byte)",
        factor,
        budget::CATALOG_FACTOR as f64,
    );

    pin_costs();
    tls_connection_costs(per_conn).await;
}

/// A big result from an HTTP upstream (the fake in `--http` mode, its own
/// process), answered in JSON and as an SSE event, and pretty-printed to a
/// caller that takes only SSE (its line breaks become spaces in place),
/// against `RESULT_FACTOR`, as a stdio upstream's.
async fn http_result_costs(result: usize) {
    for (framing, flag, accept) in [
        ("JSON", "--http", "application/json, text/event-stream"),
        ("SSE", "--sse", "application/json, text/event-stream"),
        ("pretty JSON to SSE", "--pretty", "text/event-stream"),
    ] {
        let fake = fake_upstream().display().to_string();
        let mut child = tokio::process::Command::new("python3")
            .args([&fake, "--http", flag, "--era", "legacy", "--name", "h"])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 fake_upstream.py --http");
        let mut port = String::new();
        let mut out = tokio::io::BufReader::new(child.stdout.take().expect("stdout"));
        tokio::io::AsyncBufReadExt::read_line(&mut out, &mut port)
            .await
            .expect("the fake's port");
        let url = format!("http://127.0.0.1:{}/mcp", port.trim());
        let block = format!("[[upstream]]\nname = \"h\"\ntransport = \"http\"\nurl = \"{url}\"\n");
        let gw = start("", &block).await;
        assert_eq!(gw.ready_upstreams(), 1, "the fake's HTTP mode serves");
        let req = modern_call_accepting("h__big", json!({"bytes": result}), accept);
        let factor = peak_per_byte(gw.local_addr(), &req, result, result).await;
        report(
            &format!("HTTP result, {framing} (heap per byte)"),
            factor,
            budget::RESULT_FACTOR as f64,
        );
        gw.shutdown().await;
    }
}

/// Tool pins: 1,024 tools pinned, then every one changed and withheld —
/// the pins, the withheld list a catalog keeps, and the set of exposed
/// withheld names the merged view keeps — against `PIN_BYTES`.
fn pin_costs() {
    use mcp_edge::config::Trust;
    use mcp_edge::pins::{digest, Pins};
    const N: usize = 1024;
    let listing = |desc: &str| -> Vec<(String, digest::Digest)> {
        (0..N)
            .map(|i| {
                let tool = json!({"name": format!("tool_{i:04}"), "description": desc});
                (format!("tool_{i:04}"), digest::of(&tool))
            })
            .collect()
    };
    let (v1, v2) = (listing("first"), listing("second"));
    let base = live_bytes();
    let pins = Pins::in_memory();
    assert!(pins.review("u", Trust::Pin, N, &v1, true).is_empty());
    let withheld = pins.review("u", Trust::Pin, N, &v2, true);
    assert_eq!(withheld.len(), N);
    let exposed: std::collections::HashSet<String> =
        withheld.iter().map(|w| format!("u__{}", w.tool)).collect();
    let per_pin = (live_bytes().saturating_sub(base)) / N;
    report(
        "tool pin, withheld (bytes)",
        per_pin as f64,
        budget::PIN_BYTES as f64,
    );
    drop((pins, withheld, exposed));
}

/// Connections each holding an unterminated request head just under
/// `limits::MAX_REQUEST_HEAD_BYTES` (hyper's read buffer at its largest,
/// waiting for the rest): the worst case of a connection before its body,
/// against `CONNECTION_BYTES`.
async fn partial_heads(addr: SocketAddr) {
    const CONNS: usize = 64;
    let pad = vec![b'p'; mcp_edge::limits::MAX_REQUEST_HEAD_BYTES - 256];
    let base = settled_live().await;
    let mut conns = Vec::with_capacity(CONNS);
    for _ in 0..CONNS {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ")
            .await
            .unwrap();
        s.write_all(&pad).await.unwrap();
        conns.push(s);
    }
    let per_conn = (settled_live().await.saturating_sub(base)) / CONNS;
    report(
        "connection in a partial head (bytes)",
        per_conn as f64,
        budget::CONNECTION_BYTES as f64,
    );
    drop(conns);
}

const EDGE: &str = "[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n";

/// Opens `n` connections over TLS with `client`, answers one request on
/// each, then keeps only the TCP sockets: the client's rustls state is
/// dropped (nothing is sent), so what stays on the heap is the gateway's
/// side alone, as with the plain connections (the server's connection is
/// idle, waiting for the next request on its TLS stream).
async fn idle_tls_connections(
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
    n: usize,
) -> Vec<TcpStream> {
    let connector = tokio_rustls::TlsConnector::from(client.clone());
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::IpAddress(addr.ip().into());
        let mut tls = connector.connect(name, tcp).await.unwrap();
        tls.write_all(b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        tls.flush().await.unwrap();
        assert_eq!(read_response(&mut tls).await.0, 404);
        conns.push(tls.into_inner().0);
    }
    conns
}

/// Opens `n` connections whose TLS handshake stops half-way: the client
/// sends its hello and reads the server's whole flight, then says nothing
/// more (its rustls state dropped, the socket kept), so the gateway holds
/// each in its handshake, waiting for the client's certificate or Finished.
async fn stalled_tls_handshakes(
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
    n: usize,
) -> Vec<TcpStream> {
    let mut conns = Vec::with_capacity(n);
    let mut buf = [0u8; 16 * 1024];
    for _ in 0..n {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::IpAddress(addr.ip().into());
        let mut c = rustls::ClientConnection::new(client.clone(), name).unwrap();
        let mut hello = Vec::new();
        c.write_tls(&mut hello).unwrap();
        tcp.write_all(&hello).await.unwrap();
        // The server's flight ends with its Finished; then the client has
        // its own flight to write.
        while !c.wants_write() {
            let r = tcp.read(&mut buf).await.unwrap();
            assert!(r > 0, "the gateway closed a handshake");
            c.read_tls(&mut &buf[..r]).unwrap();
            c.process_new_packets().unwrap();
        }
        conns.push(tcp);
    }
    conns
}

/// Idle keep-alive connections over TLS, then with mTLS (a client
/// certificate verified), against `CONNECTION_BYTES + TLS_CONNECTION_BYTES`
/// and, less the `plain` idle connection, against `TLS_CONNECTION_BYTES`; and
/// connections stalled half-way through their handshake.
/// First `CACHE_FILL` handshakes fill rustls' server session cache (256
/// stateful TLS 1.3 tickets, two per full handshake; bounded, shared by all
/// connections), so the measured connections only replace entries in it;
/// what filling it cost is printed, against `TLS_SESSION_CACHE_BYTES`.
async fn tls_connection_costs(plain: usize) {
    const CONNS: usize = 64;
    const CACHE_FILL: usize = 160;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("budget CA");
    let client_ca = Ca::new("budget client CA");
    let id = client_ca.issue(&[(DnType::CommonName, "budget-client")], &[]);
    for mtls in [false, true] {
        let files = Files::write(
            dir.path(),
            &ca.server("gateway"),
            mtls.then_some(&client_ca),
        );
        let gw = support::tls::start("", EDGE, &files).await;
        let addr = gw.local_addr();
        let mut client = support::tls::client_config(&ca, mtls.then_some(&id));
        client.resumption = rustls::client::Resumption::disabled();
        let client = Arc::new(client);
        let what = if mtls { "mTLS" } else { "TLS" };

        let before = settled_live().await;
        drop(idle_tls_connections(addr, &client, CACHE_FILL).await);
        let cache = settled_live().await.saturating_sub(before);
        report(
            &format!("{what} session cache, full (bytes)"),
            cache as f64,
            budget::TLS_SESSION_CACHE_BYTES as f64,
        );

        let base = settled_live().await;
        let conns = idle_tls_connections(addr, &client, CONNS).await;
        let per_conn = (settled_live().await.saturating_sub(base)) / CONNS;
        report(
            &format!("idle {what} connection (bytes)"),
            per_conn as f64,
            (budget::CONNECTION_BYTES + budget::TLS_CONNECTION_BYTES) as f64,
        );
        report(
            &format!("{what} state, over plain (bytes)"),
            per_conn.saturating_sub(plain) as f64,
            budget::TLS_CONNECTION_BYTES as f64,
        );
        drop(conns);

        let base = settled_live().await;
        let conns = stalled_tls_handshakes(addr, &client, CONNS).await;
        let per_conn = (settled_live().await.saturating_sub(base)) / CONNS;
        report(
            &format!("{what} connection in handshake (bytes)"),
            per_conn as f64,
            (budget::CONNECTION_BYTES + budget::TLS_CONNECTION_BYTES) as f64,
        );
        drop(conns);
        gw.shutdown().await;
    }
}
