//! The accept loop of `listen`: a place in the connection table
//! ([`super::conns`]) per connection, taken before `accept` while there is
//! room and made by closing the connection idle longest when there is not;
//! then each connection's task (TLS handshake, HTTP/1.1).

use super::app::{App, Peer};
use super::{conns, endpoint, proxied, receiving, tls_accept};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// Accepts downstream connections until shutdown (a task of the
/// composition root). While there is room, a permit of the
/// `max_connections` semaphore is taken *before* `accept`; at capacity the
/// loop accepts and makes room ([`make_room`]). Each accepted connection
/// takes a place in the [`conns::Conns`] table and moves it, with its
/// permit, into its own task, which does the TLS handshake (when `listen`
/// is TLS) and then serves HTTP/1.1 until the client leaves or the table
/// closes it.
pub async fn accept_loop(
    listener: TcpListener,
    app: Arc<App>,
    mut shutdown: watch::Receiver<bool>,
) {
    let s = &app.server;
    let permits = Arc::new(Semaphore::new(s.max_connections));
    let now = tokio::time::Instant::now;
    let conns = conns::Conns::new(s.max_connections, s.max_connections_per_peer, now());
    loop {
        let permit = permits.clone().try_acquire_owned().ok();
        let (stream, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::select! {
                        _ = tokio::time::sleep(crate::limits::ACCEPT_RETRY) => continue,
                        _ = shutdown.changed() => return,
                    }
                }
            },
            _ = shutdown.changed() => return,
        };
        let peer = conns::peer_key(addr.ip());
        // A trusted proxy's connections are many clients' (their own share
        // is taken once the PROXY header names them, `proxied`).
        let from_proxy = s.fleet.trusts(addr.ip());
        let admitted = match from_proxy {
            true => Ok(conns::Admission::Free),
            false => conns.admit(peer, now()),
        };
        let admission = match admitted {
            Ok(a) => {
                if a == conns::Admission::ClosedSamePeer {
                    crate::metrics::refused("peer_connections");
                }
                a
            }
            Err(why) => {
                refuse_connection(&app, &stream, addr, why);
                continue;
            }
        };
        let permit = match permit {
            Some(p) => p,
            None => match make_room(&app, &permits, &conns, admission, &mut shutdown).await {
                Some(p) => p,
                None => return,
            },
        };
        let place = conns.insert(peer, permit, now());
        spawn_connection(&app, stream, addr, place);
    }
}

/// A place for a connection accepted while every place was taken: the
/// connection idle longest is told to close once it has been so for the
/// grace period (unless `admission` already closed one of its peer's), and
/// its permit taken once it has finished; while every connection is busy,
/// waits for one to end or become idle. A closing connection that takes
/// longer than a grace period (flushing a response to a slow client) gets
/// another one closed beside it. With `[[client]]`s, the connection closed
/// is one of the client furthest over its share. `None` at shutdown.
async fn make_room(
    app: &App,
    permits: &Arc<Semaphore>,
    conns: &conns::Conns,
    admission: conns::Admission,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let mut closed = admission == conns::Admission::ClosedSamePeer;
    loop {
        let idle = conns.idle_again();
        tokio::pin!(idle);
        idle.as_mut().enable();
        if let Ok(p) = permits.clone().try_acquire_owned() {
            return Some(p);
        }
        let wait = if closed {
            closed = false;
            Some(crate::limits::CONNECTION_YIELD_GRACE)
        } else {
            let access = app.access();
            match conns.close_oldest_idle(tokio::time::Instant::now(), access.shares()) {
                conns::Yield::Closed => {
                    crate::metrics::refused("idle_connections");
                    Some(crate::limits::CONNECTION_YIELD_GRACE)
                }
                conns::Yield::After(d) => Some(d),
                conns::Yield::AllBusy => None,
            }
        };
        let timer = async {
            match wait {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            p = permits.clone().acquire_owned() => return Some(p.expect("semaphore never closed")),
            _ = idle => {}
            _ = timer => {}
            _ = shutdown.changed() => return None,
        }
    }
}

/// Spawns the task of one accepted connection; it holds `place` (and so
/// its permit) until it ends.
fn spawn_connection(
    app: &Arc<App>,
    stream: tokio::net::TcpStream,
    addr: SocketAddr,
    place: conns::Place<tokio::sync::OwnedSemaphorePermit>,
) {
    let _ = stream.set_nodelay(true);
    set_user_timeout(&stream, app.server.keepalive * 2);
    // Read once: a reload installing a new certificate meanwhile
    // reaches the next connection, not this one.
    let tls = app.tls_for_connection();
    let app = app.clone();
    // The connection's own future: lives as long as the client's socket,
    // or until the table gives its place to a newer connection.
    #[allow(clippy::disallowed_methods)]
    // one task per accepted connection, bounded by its permit
    tokio::spawn(async move {
        let place = place; // held until the connection ends: its permit too
        let tracker = receiving::Tracker::of(&place);
        let mut stream = stream;
        let addr = tokio::select! {
            r = client_of(&app, &mut stream, addr, &place) => match r {
                Some(client) => client,
                None => return,
            },
            _ = tracker.closed() => return,
        };
        let Some(config) = tls else {
            let peer = Peer {
                addr,
                tls: false,
                cert_subject: None,
            };
            return serve_connection(app, stream, peer, tracker).await;
        };
        // Boxed: the TLS state (handshake, rustls connection) is not
        // part of every plain connection's task (`budget`'s idle cost).
        Box::pin(serve_tls(app, config, stream, addr, tracker)).await;
    });
}

/// The client of a connection from `addr` (`server.proxy_protocol`:
/// [`proxied::client_of`]), its place then counted as that client's;
/// `None` when the connection is refused (counted, logged, closed).
async fn client_of(
    app: &App,
    stream: &mut tokio::net::TcpStream,
    addr: SocketAddr,
    place: &conns::Place<tokio::sync::OwnedSemaphorePermit>,
) -> Option<SocketAddr> {
    let refused = match proxied::client_of(stream, addr, &app.server.fleet).await {
        Ok(client) if client == addr => return Some(addr),
        Ok(client) => {
            let key = conns::peer_key(client.ip());
            match place.conns.rekey(place, key, tokio::time::Instant::now()) {
                Ok(a) => {
                    if a == conns::Admission::ClosedSamePeer {
                        crate::metrics::refused("peer_connections");
                    }
                    return Some(client);
                }
                Err(why) => {
                    refuse_connection(app, stream, client, why);
                    return None;
                }
            }
        }
        Err(e) => e,
    };
    crate::metrics::refused(refused.limit());
    if let Some(skipped) = app.refusal_log.allow(tokio::time::Instant::now()) {
        tracing::warn!(skipped, %addr, "connection refused: {refused} (server.proxy_protocol)");
    }
    None
}

/// Closes a connection refused over its peer's share, with a 503 written
/// if the socket takes it at once (it never waits for the client; over TLS
/// nothing is written, as no handshake was made). What the client already
/// sent is read and dropped first, so the close is a FIN the client can
/// read the answer before, not a reset.
fn refuse_connection(
    app: &App,
    stream: &tokio::net::TcpStream,
    addr: SocketAddr,
    why: conns::Refusal,
) {
    crate::metrics::refused("peer_connections");
    if let Some(skipped) = app.refusal_log.allow(tokio::time::Instant::now()) {
        tracing::info!(skipped, %addr, "connection refused: {why} (server.max_connections_per_peer)");
    }
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        if !matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
    if app.tls_for_connection().is_some() {
        return;
    }
    let body = format!(
        r#"{{"error":"{why}; server.max_connections_per_peer = {}"}}"#,
        app.server.max_connections_per_peer
    );
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let _ = stream.try_write(format!("{head}{body}").as_bytes());
}

/// The TLS handshake of one connection, then [`serve_connection`]; a close
/// from the table during the handshake drops it.
async fn serve_tls(
    app: Arc<App>,
    config: Arc<rustls::ServerConfig>,
    stream: tokio::net::TcpStream,
    addr: SocketAddr,
    tracker: receiving::Tracker,
) {
    let shake = tokio::select! {
        r = tls_accept::accept(config, stream, addr) => r,
        _ = tracker.closed() => return,
    };
    match shake {
        Ok((stream, peer)) => serve_connection(app, stream, peer, tracker).await,
        Err(e) => {
            crate::metrics::refused("tls_handshake");
            if let Some(skipped) = app.refusal_log.allow(tokio::time::Instant::now()) {
                tracing::info!(skipped, "TLS handshake refused: {e}");
            }
        }
    }
}

/// Serves HTTP/1.1 on one connection (plain TCP or TLS), every request
/// carrying `peer` as an extension and marked in the connection table
/// (idle while its body arrives, busy until its response body ends). When
/// the table closes the connection: shut down gracefully after an answer
/// (what hyper still holds of it goes out, within
/// `limits::CONNECTION_CLOSE_FLUSH`), else dropped (a fresh connection,
/// half a head, or a body arriving: nothing to finish).
async fn serve_connection<S>(app: Arc<App>, io: S, peer: Peer, tracker: receiving::Tracker)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let addr = peer.addr;
    // Each request enters the endpoint's service, marked by the
    // connection's tracker ([`receiving::Tracker::enter`]).
    let svc = endpoint::service(app, peer, tracker.clone());
    // A client must finish each request head within HEADER_READ_TIMEOUT,
    // so silent or half-sent connections cannot hold permits forever; and
    // within MAX_REQUEST_HEAD_BYTES, else hyper answers 431 and closes. The
    // read buffer is bounded by the same figure (a read may fill the spare
    // capacity of its allocation past it), heads and body chunks alike.
    let head = crate::limits::MAX_REQUEST_HEAD_BYTES;
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(crate::limits::HEADER_READ_TIMEOUT)
        .max_header_size(head)
        .max_buf_size(head)
        .serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let served = tokio::select! {
        r = conn.as_mut() => r,
        _ = tracker.closed() => {
            tracing::debug!(%addr, "closing an idle connection to admit a new one");
            if !tracker.closes_gracefully() {
                return;
            }
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(crate::limits::CONNECTION_CLOSE_FLUSH, conn).await {
                Ok(r) => r,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = served {
        if e.is_parse_too_large() {
            crate::metrics::refused("head_bytes");
        }
        tracing::debug!("connection: {e}");
    }
}

/// Sets `TCP_USER_TIMEOUT` (tcp(7)): a peer that vanished without FIN or RST
/// leaves our keep-alive comments unacknowledged, and the kernel fails the
/// socket after `t`, ending the stream and freeing what it held.
fn set_user_timeout(stream: &tokio::net::TcpStream, t: Duration) {
    use std::os::fd::AsRawFd;
    let ms: libc::c_uint = t.as_millis().try_into().unwrap_or(libc::c_uint::MAX);
    // SAFETY: a valid socket fd and a correctly sized option value.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            &ms as *const libc::c_uint as *const libc::c_void,
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!("TCP_USER_TIMEOUT: {}", std::io::Error::last_os_error());
    }
}
