//! The downstream face: the accept loop, the `/mcp` endpoint for both eras,
//! request checks, framing, and the admin routes. [`App`] is the narrow
//! state it needs; the composition root ([`crate::gateway`]) builds it and
//! runs the loops.
//!
//! Connections are limited by a semaphore whose permit is taken *before*
//! `accept` and moved into the connection's task, so excess clients wait in
//! the kernel backlog instead of costing memory here. When every place is
//! taken, the loop accepts anyway and makes room by closing the connection
//! that has sat longest without a request ([`conns`]): idle or half-sent
//! connections cannot lock clients out. With TLS
//! (`server.tls_cert`), that task does the handshake first ([`tls`]); every
//! request carries who sent it as a [`Peer`] extension.

pub mod admin;
mod audited;
pub mod cancel;
pub mod checks;
pub mod conns;
pub mod endpoint;
mod gate;
pub mod listen;
pub mod modern;
pub mod reply;
mod request;
pub mod streams;
mod subscriptions;
pub mod tls;

use crate::access::{Access, Caller};
use crate::config::{ServerConfig, TlsConfig};
use crate::protocol::{self, ProtocolVersion, RpcError};
use crate::router::Router;
use crate::session::Table;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// Response body type of every handler.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Who sent a request: a request extension on every request that came
/// through [`accept_loop`] (read it with `req.extensions().get::<Peer>()`;
/// requests built elsewhere, e.g. by tests calling [`endpoint::handle`],
/// have none). Computed once per connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The remote address of the connection.
    pub addr: SocketAddr,
    /// The connection is TLS (`server.tls_cert`).
    pub tls: bool,
    /// With mTLS (`server.tls_client_ca`): the verified client certificate's
    /// subject as (attribute, value) pairs in certificate order, attribute
    /// short names upper-cased (`CN`, `O`, `OU`, `C`, …; others as dotted
    /// OIDs) ([`tls::cert_subject`]). `None` without TLS or mTLS.
    pub cert_subject: Option<Vec<(String, String)>>,
}

/// Who sent a request: its [`Caller`] within the `[[client]]` table it was
/// authenticated against (a reload may swap the table meanwhile).
#[derive(Clone)]
pub struct Who {
    /// The table.
    pub access: Arc<Access>,
    /// The caller in it.
    pub caller: Caller,
}

impl Who {
    /// What the caller may see and call.
    pub fn policy(&self) -> &crate::access::Policy {
        self.access.policy(self.caller)
    }

    /// The owner mark of sessions the caller creates.
    pub fn owner(&self) -> u64 {
        self.access.owner(self.caller)
    }

    /// The caller's name (`-` when anonymous).
    pub fn name(&self) -> &str {
        self.access.name(self.caller)
    }
}

/// Shared state of the downstream endpoint.
pub struct App {
    /// The address `/mcp` is served on (bound: the real port when the config says 0).
    pub listen_addr: SocketAddr,
    /// `[server]` as the gateway started with it (its changes wait for a restart).
    pub server: ServerConfig,
    /// The board profile's name, if any (`/status`).
    pub board: Option<String>,
    /// Legacy sessions (fixed capacity).
    pub sessions: Mutex<Table>,
    /// Catalog and routing.
    pub router: Router,
    /// Origin/Host policy.
    pub origin: checks::OriginPolicy,
    /// Woken (all waiters) whenever sessions are removed, so GET streams of
    /// deleted or evicted sessions end at once.
    pub sessions_changed: tokio::sync::Notify,
    /// Downstream requests being answered right now (shutdown waits for them).
    pub in_flight: crate::drain::Drain,
    /// Places for long-lived streams, legacy GET and `subscriptions/listen`
    /// (fixed pool of max(1, `max_connections` / 2)).
    pub streams: streams::StreamPool,
    /// Set when the gateway starts shutting down: listen streams send their
    /// closing response and end.
    pub stopping: watch::Sender<bool>,
    /// Set once every enabled upstream settled its first attempt (`/readyz`, `READY=1`).
    pub ready: std::sync::atomic::AtomicBool,
    /// Moved on, per list kind, when an upstream's catalog really changes
    /// (or a reload swaps the upstream set); GET and listen streams then
    /// send `notifications/{tools,prompts,resources}/list_changed` for the
    /// kinds that moved.
    pub catalog_gen: Arc<watch::Sender<crate::upstream::ListGens>>,
    /// Legacy requests being answered, cancellable by `notifications/cancelled`.
    pub cancels: Arc<cancel::Cancels>,
    /// Downstream resource subscriptions (fixed table, [`crate::subscriptions`]).
    pub subscriptions: Arc<crate::subscriptions::Subscriptions>,
    /// The outcome of the last reload, if any (`STATUS=`, `/status`).
    pub last_reload: Mutex<Option<admin::LastReload>>,
    /// The `[[client]]` table in force ([`App::set_access`] swaps it).
    access: std::sync::RwLock<Arc<Access>>,
    /// Moved on at each [`App::set_access`]: open listen streams check
    /// that their client is still configured.
    pub access_gen: watch::Sender<u64>,
    /// Log budget of refusals (401, 429, 403, refused TLS handshakes).
    pub refusal_log: crate::access::Throttle,
    /// The audit log (`[audit]`), if configured: one record per
    /// `tools/call`, `prompts/get`, `resources/read` ([`crate::audit`]).
    pub audit: Option<crate::audit::Audit>,
    /// TLS on `listen` as it is now: `server.tls` at start, then each
    /// reload's new certificate ([`App::set_tls`]). Read once per accepted
    /// connection; open connections keep the configuration they shook
    /// hands with. `None` = plain HTTP (turning TLS on or off waits for a
    /// restart).
    tls: RwLock<Option<TlsConfig>>,
}

impl App {
    /// The downstream state of a gateway listening on `listen_addr`.
    pub fn new(
        listen_addr: SocketAddr,
        server: ServerConfig,
        board: Option<String>,
        router: Router,
        catalog_gen: Arc<watch::Sender<crate::upstream::ListGens>>,
        subscriptions: Arc<crate::subscriptions::Subscriptions>,
        audit: Option<crate::audit::Audit>,
    ) -> App {
        App {
            sessions: Mutex::new(Table::new(
                server.session_capacity,
                server.session_idle_timeout,
                server.session_min_idle_before_evict,
            )),
            sessions_changed: tokio::sync::Notify::new(),
            catalog_gen,
            subscriptions,
            cancels: Default::default(),
            ready: false.into(),
            in_flight: crate::drain::Drain::new(),
            streams: streams::StreamPool::new((server.max_connections / 2).max(1)),
            stopping: watch::Sender::new(false),
            router,
            origin: checks::OriginPolicy::new(
                listen_addr,
                &server.allowed_hosts,
                &server.allowed_origins,
            ),
            last_reload: Mutex::new(None),
            access: std::sync::RwLock::new(Arc::new(Access::open())),
            access_gen: watch::Sender::new(0),
            refusal_log: crate::access::Throttle::new(tokio::time::Instant::now()),
            audit,
            tls: RwLock::new(server.tls.clone()),
            listen_addr,
            server,
            board,
        }
    }

    /// The TLS configuration new connections get (paths and `not_after`
    /// for `/status`; the key material stays inside its rustls config).
    pub fn tls(&self) -> Option<TlsConfig> {
        self.tls.read().expect("tls lock").clone()
    }

    /// Installs `tls` for the connections accepted from now on (a reload
    /// with new certificate files); open connections are not touched.
    pub fn set_tls(&self, tls: Option<TlsConfig>) {
        *self.tls.write().expect("tls lock") = tls;
    }

    /// The rustls configuration for one new connection, if `listen` is TLS.
    fn tls_for_connection(&self) -> Option<Arc<rustls::ServerConfig>> {
        let t = self.tls.read().expect("tls lock");
        t.as_ref().map(|t| t.rustls.clone())
    }

    /// The capabilities mcp-edge announces in `initialize` and `server/discover`.
    /// `listChanged`: a legacy session's GET stream, or a modern
    /// `subscriptions/listen` stream, is told when the merged lists change
    /// (an upstream connects, drops, or says its list changed). `subscribe`:
    /// resource subscriptions are kept by mcp-edge ([`crate::subscriptions`])
    /// and relayed for upstreams that can report updates; others get a
    /// clear error.
    pub fn capabilities() -> Value {
        json!({"tools": {"listChanged": true}, "prompts": {"listChanged": true},
            "resources": {"listChanged": true, "subscribe": true}, "completions": {}, "logging": {}})
    }

    /// `Implementation` of mcp-edge (2025-11-25 schema.json `Implementation`; rmcp's model type).
    pub fn server_info() -> Value {
        let i = rmcp::model::Implementation::new("mcp-edge", env!("CARGO_PKG_VERSION"))
            .with_title("mcp-edge MCP gateway");
        serde_json::to_value(i).unwrap_or_else(|_| json!({"name": "mcp-edge"}))
    }

    /// Instructions naming the upstreams `policy` shows (see
    /// [`Router::shows`]) and their tool prefixes.
    pub fn instructions(&self, policy: &crate::access::Policy) -> String {
        let sep = &self.server.tool_name_separator;
        let list: Vec<String> = self
            .router
            .upstreams()
            .iter()
            .filter(|u| u.config.enabled && self.router.shows(u, policy))
            .map(|u| {
                if u.config.prefix.is_empty() {
                    format!("'{}' (unprefixed)", u.name())
                } else {
                    format!("'{}' (tools named {}{}…)", u.name(), u.config.prefix, sep)
                }
            })
            .collect();
        format!(
            "mcp-edge gateway aggregating upstream MCP servers: {}.",
            list.join(", ")
        )
    }

    /// The `[[client]]` table in force.
    pub fn access(&self) -> Arc<Access> {
        self.access.read().expect("access").clone()
    }

    /// Puts `access` in force (start, reload): requests authenticated from
    /// now on use it; requests under way keep the table they started with.
    /// What belonged to a client no longer in it ends now: its legacy
    /// sessions (and so their GET streams and subscriptions) and its
    /// `subscriptions/listen` streams (told through `access_gen`).
    pub fn set_access(&self, access: Access) {
        let access = Arc::new(access);
        *self.access.write().expect("access") = access.clone();
        let mut t = self.sessions.lock().expect("sessions");
        let gone = t.revoke(|owner| access.knows(owner));
        metrics::gauge!(crate::metrics::SESSIONS_ACTIVE).set(t.len() as f64);
        drop(t);
        if !gone.is_empty() {
            tracing::info!(
                sessions = gone.len(),
                "ended the sessions of clients no longer configured"
            );
            self.sessions_changed.notify_waiters();
        }
        for id in gone {
            let header = id.to_header();
            for up in self.router.upstreams().iter() {
                up.forget_session(&header);
            }
            (self.subscriptions).remove_subscriber(crate::subscriptions::Subscriber::Session(id));
        }
        self.access_gen.send_modify(|g| *g += 1);
    }

    /// Forgets the resource subscriptions of legacy sessions no longer in
    /// the table (expired or evicted); returns how many.
    pub fn forget_gone_sessions(&self) -> usize {
        let now = tokio::time::Instant::now();
        let t = self.sessions.lock().expect("sessions");
        // Lock order: sessions, then subscriptions (nowhere the reverse).
        self.subscriptions
            .retain_sessions(|id| t.peek(id, now).is_some())
    }

    /// Answers one request of `who` after the era checks: lifecycle
    /// methods here, everything else through the router under `who`'s policy.
    pub async fn call(
        &self,
        method: &str,
        params: Option<Value>,
        modern: bool,
        relay: Option<crate::upstream::relay::Relay>,
        who: &Who,
    ) -> Result<Value, RpcError> {
        match method {
            "ping" => Ok(json!({})),
            "server/discover" if modern => Ok(json!({
                "supportedVersions": ProtocolVersion::supported_json(),
                "capabilities": App::capabilities(),
                "_meta": {protocol::META_SERVER_INFO: App::server_info()},
                "instructions": self.instructions(who.policy()),
            })),
            _ => {
                let mut r = (self.router)
                    .dispatch(method, params, relay, who.policy())
                    .await;
                // A list missing a connected upstream's part must not be
                // cached as complete: ttlMs 0 (2026-07-28 caching hints).
                if let (true, Ok(Value::Object(o))) = (modern && method.ends_with("/list"), &mut r)
                {
                    let partial = self
                        .router
                        .upstreams()
                        .iter()
                        .any(|u| u.config.enabled && !u.status().is_ready());
                    if partial {
                        o.insert("ttlMs".into(), json!(0));
                    }
                }
                r
            }
        }
    }
}

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
        let admission = match conns.admit(addr.ip(), now()) {
            Ok(a) => {
                if a == conns::Admission::ClosedSamePeer {
                    metrics::counter!(crate::metrics::REFUSED, "limit" => "peer_connections")
                        .increment(1);
                }
                a
            }
            Err(why) => {
                refuse_connection(&app, stream, addr, why);
                continue;
            }
        };
        let permit = match (permit, admission) {
            (Some(p), _) => p,
            // The peer's own oldest is closing: its permit comes back.
            (None, conns::Admission::ClosedSamePeer) => tokio::select! {
                p = permits.clone().acquire_owned() => p.expect("semaphore never closed"),
                _ = shutdown.changed() => return,
            },
            (None, conns::Admission::Free) => {
                match make_room(&permits, &conns, &mut shutdown).await {
                    Some(p) => p,
                    None => return,
                }
            }
        };
        let place = conns.insert(addr.ip(), permit, now());
        spawn_connection(&app, stream, addr, place);
    }
}

/// A place for a connection accepted while every place was taken: the
/// connection head-less longest is told to close once it has been so for
/// the grace period, and its permit taken once it has; while every
/// connection is busy, waits for one to end or become head-less. `None` at
/// shutdown.
async fn make_room(
    permits: &Arc<Semaphore>,
    conns: &conns::Conns,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    loop {
        let headless = conns.headless_again();
        tokio::pin!(headless);
        headless.as_mut().enable();
        if let Ok(p) = permits.clone().try_acquire_owned() {
            return Some(p);
        }
        let (wait, closed) = match conns.close_oldest_headless(tokio::time::Instant::now()) {
            conns::Yield::Closed => {
                metrics::counter!(crate::metrics::REFUSED, "limit" => "idle_connections")
                    .increment(1);
                (None, true)
            }
            conns::Yield::After(d) => (Some(d), false),
            conns::Yield::AllBusy => (None, false),
        };
        let of_age = async {
            match wait {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            p = permits.clone().acquire_owned() => return Some(p.expect("semaphore never closed")),
            _ = headless, if !closed => {}
            _ = of_age => {}
            _ = shutdown.changed() => return None,
        }
    }
}

/// Spawns the task of one accepted connection; it holds `place` (and so
/// its permit) until it ends, and drops the socket when the table closes it.
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
        let tracker = place.tracker();
        let served = async move {
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
        };
        tokio::select! {
            _ = served => {}
            _ = place.slot().closed() => tracing::debug!(%addr, "closed an idle connection to admit a new one"),
        }
    });
}

/// Closes a connection refused over its peer's share, with a 503 written
/// if the socket takes it at once (it never waits for the client).
fn refuse_connection(
    app: &App,
    stream: tokio::net::TcpStream,
    addr: SocketAddr,
    why: conns::Refusal,
) {
    metrics::counter!(crate::metrics::REFUSED, "limit" => "peer_connections").increment(1);
    if let Some(skipped) = app.refusal_log.allow(tokio::time::Instant::now()) {
        tracing::info!(skipped, %addr, "connection refused: {why} (server.max_connections_per_peer)");
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

/// The TLS handshake of one connection, then [`serve_connection`].
async fn serve_tls(
    app: Arc<App>,
    config: Arc<rustls::ServerConfig>,
    stream: tokio::net::TcpStream,
    addr: SocketAddr,
    tracker: conns::Tracker,
) {
    match tls::accept(config, stream, addr).await {
        Ok((stream, peer)) => serve_connection(app, stream, peer, tracker).await,
        Err(e) => {
            metrics::counter!(crate::metrics::REFUSED, "limit" => "tls_handshake").increment(1);
            if let Some(skipped) = app.refusal_log.allow(tokio::time::Instant::now()) {
                tracing::info!(skipped, "TLS handshake refused: {e}");
            }
        }
    }
}

/// Serves HTTP/1.1 on one connection (plain TCP or TLS), every request
/// carrying `peer` as an extension and marked busy in the connection table
/// until its response body ends.
async fn serve_connection<S>(app: Arc<App>, io: S, peer: Peer, tracker: conns::Tracker)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let peer = Arc::new(peer);
    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(Peer::clone(&peer));
        let busy = tracker.begin();
        let app = app.clone();
        async move {
            let Some(busy) = busy else {
                return Ok::<_, Infallible>(reply::closing(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "connection closed to admit a newer one; retry",
                ));
            };
            let res = route(app, req).await?;
            // The connection stays busy until hyper drops the body, written.
            Ok(res.map(|b| busy.hold(b).boxed_unsync()))
        }
    });
    // A client must finish each request head within HEADER_READ_TIMEOUT,
    // so silent or half-sent connections cannot hold permits forever; and
    // within MAX_REQUEST_HEAD_BYTES, else hyper answers 431 and closes. The
    // read buffer is bounded by the same figure (a read may fill the spare
    // capacity of its allocation past it), heads and body chunks alike.
    let head = crate::limits::MAX_REQUEST_HEAD_BYTES;
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(crate::limits::HEADER_READ_TIMEOUT)
        .max_header_size(head)
        .max_buf_size(head)
        .serve_connection(TokioIo::new(io), svc)
        .await
    {
        if e.is_parse_too_large() {
            metrics::counter!(crate::metrics::REFUSED, "limit" => "head_bytes").increment(1);
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

async fn route(app: Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    if req.uri().path() == "/mcp" {
        Ok(endpoint::handle(app, req).await)
    } else {
        Ok(reply::json(
            StatusCode::NOT_FOUND,
            &json!({"error": format!("no such path {}; the MCP endpoint is /mcp", req.uri().path())}),
        ))
    }
}

/// One timer for the whole table: removes idle sessions every
/// `min(idle_timeout / 4, 60 s)` (lookups also expire lazily). A task of the
/// composition root.
pub async fn sweep_sessions(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let period = (app.server.session_idle_timeout / 4).min(crate::limits::SESSION_SWEEP_MAX_PERIOD);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.changed() => return,
        }
        let mut t = app.sessions.lock().expect("sessions");
        let expired = t.expire(tokio::time::Instant::now());
        metrics::gauge!(crate::metrics::SESSIONS_ACTIVE).set(t.len() as f64);
        drop(t);
        if expired > 0 {
            app.sessions_changed.notify_waiters();
        }
        // Subscriptions of sessions that expired, or were evicted for a new
        // one since the last sweep, go too.
        app.forget_gone_sessions();
    }
}
