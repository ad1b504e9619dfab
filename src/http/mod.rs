//! The downstream face: the listener, the `/mcp` endpoint for both eras, and
//! request checks. [`Gateway::start`] wires everything together.
//!
//! Connections are limited by a semaphore whose permit is taken *before*
//! `accept` and moved into the connection's task, so excess clients wait in
//! the kernel backlog instead of costing memory here.

pub mod admin;
pub mod cancel;
pub mod checks;
pub mod endpoint;
pub mod listen;
pub mod modern;
pub mod reload;
pub mod reply;
mod resources;

use crate::config::Config;
use crate::protocol::{self, ProtocolVersion, RpcError};
use crate::router::Router;
use crate::session::Table;
use crate::supervisor::{OwnedTask, Supervisor};
use crate::upstream::Upstream;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// Response body type of every handler.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Shared state of the downstream endpoint.
pub struct App {
    /// The address `/mcp` is served on (bound: the real port when the config says 0).
    pub listen_addr: SocketAddr,
    /// The config the gateway started with. Its `[server]` part is what
    /// runs; the running upstreams are [`Router::upstreams`] (a reload
    /// replaces them, not this).
    pub config: Config,
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
    pub streams: listen::StreamPool,
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
    pub resources: Arc<crate::subscriptions::Subscriptions>,
    /// The watchdog's rules (`[watchdog]`; a reload replaces them).
    pub watchdog: Mutex<crate::config::WatchdogConfig>,
    /// The outcome of the last reload, if any (`STATUS=`, `/status`).
    pub last_reload: Mutex<Option<reload::LastReload>>,
}

impl App {
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

    /// Instructions naming the upstreams and their tool prefixes.
    pub fn instructions(&self) -> String {
        let sep = &self.config.server.tool_name_separator;
        let list: Vec<String> = self
            .router
            .upstreams()
            .iter()
            .filter(|u| u.config.enabled)
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

    /// Forgets the resource subscriptions of legacy sessions no longer in
    /// the table (expired or evicted); returns how many.
    pub fn forget_gone_sessions(&self) -> usize {
        let now = tokio::time::Instant::now();
        let t = self.sessions.lock().expect("sessions");
        // Lock order: sessions, then subscriptions (nowhere the reverse).
        self.resources
            .retain_sessions(|id| t.peek(id, now).is_some())
    }

    /// Answers one request after the era checks: lifecycle methods here,
    /// everything else through the router.
    pub async fn call(
        &self,
        method: &str,
        params: Option<Value>,
        modern: bool,
        relay: Option<crate::upstream::relay::Relay>,
    ) -> Result<Value, RpcError> {
        match method {
            "ping" => Ok(json!({})),
            "server/discover" if modern => Ok(json!({
                "supportedVersions": ProtocolVersion::supported_json(),
                "capabilities": App::capabilities(),
                "_meta": {protocol::META_SERVER_INFO: App::server_info()},
                "instructions": self.instructions(),
            })),
            _ => {
                let mut r = self.router.dispatch(method, params, relay).await;
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

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Binding the listen address failed.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// Binding the admin listener (`server.admin_listen`) failed: another
    /// gateway may hold it, and `mcp-edge status` would then report on that one.
    #[error("cannot open the admin listener (/metrics /status /healthz /readyz) on {addr}; set server.admin_listen to a free address, or \"off\"")]
    AdminBind {
        /// The configured (or default) address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A running gateway. Dropping it aborts its tasks; [`Gateway::shutdown`] stops it in order.
pub struct Gateway {
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    app: Arc<App>,
    supervisor: Supervisor,
    shutdown: watch::Sender<bool>,
    /// The next [`Upstream::id`] a reload hands out.
    next_id: usize,
    _tasks: Vec<OwnedTask>,
}

impl Gateway {
    /// Binds `server.listen`, starts one owner task per enabled upstream, the
    /// accept loop, the session sweep and the admin listener. Errors:
    /// [`GatewayError::Bind`], [`GatewayError::AdminBind`] (both before any
    /// upstream is started).
    pub async fn start(config: Config) -> Result<Gateway, GatewayError> {
        let catalog_gen = Arc::new(watch::channel(crate::upstream::ListGens::default()).0);
        let resources = Arc::new(crate::subscriptions::Subscriptions::new(
            crate::limits::MAX_RESOURCE_SUBSCRIPTIONS,
        ));
        let upstreams: Vec<Arc<Upstream>> = config
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, c)| {
                Upstream::new(
                    i,
                    c.clone(),
                    config.server.max_pending_server_requests,
                    catalog_gen.clone(),
                    resources.clone(),
                )
            })
            .collect();
        let listener = TcpListener::bind(config.server.listen)
            .await
            .map_err(|source| GatewayError::Bind {
                addr: config.server.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| GatewayError::Bind {
            addr: config.server.listen,
            source,
        })?;
        let s = &config.server;
        // Bound before any upstream starts, so a taken port fails cleanly.
        let admin_listener = match s.admin_listen {
            Some(m) => Some(
                TcpListener::bind(m)
                    .await
                    .map_err(|source| GatewayError::AdminBind { addr: m, source })?,
            ),
            None => None,
        };
        let app = Arc::new(App {
            sessions: Mutex::new(Table::new(
                s.session_capacity,
                s.session_idle_timeout,
                s.session_min_idle_before_evict,
            )),
            sessions_changed: tokio::sync::Notify::new(),
            catalog_gen: catalog_gen.clone(),
            resources,
            cancels: Default::default(),
            ready: false.into(),
            in_flight: crate::drain::Drain::new(),
            streams: listen::StreamPool::new((s.max_connections / 2).max(1)),
            stopping: watch::Sender::new(false),
            router: Router::new(
                upstreams.clone(),
                s.tool_names,
                s.tool_name_separator.clone(),
            ),
            origin: checks::OriginPolicy::new(addr, &s.allowed_hosts, &s.allowed_origins),
            watchdog: Mutex::new(config.watchdog.clone()),
            last_reload: Mutex::new(None),
            listen_addr: addr,
            config: config.clone(),
        });
        let persist = s.state_directory.as_ref().map(|dir| {
            let names: Vec<&str> = upstreams.iter().map(|u| u.name()).collect();
            Arc::new(crate::supervisor::persist::Persist::open(dir, &names))
        });
        let supervisor = Supervisor::start(&upstreams, persist);
        metrics::gauge!(crate::metrics::SESSIONS_CAPACITY).set(s.session_capacity as f64);
        let (shutdown, _) = watch::channel(false);
        let mut tasks = vec![
            OwnedTask::spawn(accept_loop(listener, app.clone(), shutdown.subscribe())),
            OwnedTask::spawn(sweep(app.clone(), shutdown.subscribe())),
            OwnedTask::spawn(metrics_upkeep(shutdown.subscribe())),
        ];
        let mut admin_addr = None;
        if let Some(l) = admin_listener {
            admin_addr = l.local_addr().ok();
            tasks.push(OwnedTask::spawn(admin::serve(
                l,
                app.clone(),
                shutdown.subscribe(),
            )));
        }
        Ok(Gateway {
            next_id: upstreams.len(),
            admin_addr,
            addr,
            app,
            supervisor,
            shutdown,
            _tasks: tasks,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Shared state (sessions, router, upstreams).
    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    /// Waits until every enabled upstream has settled its first attempt
    /// (ready or failed), or `budget` passed. Returns how many are ready.
    pub async fn wait_upstreams(&self, budget: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + budget;
        for up in self
            .app
            .router
            .upstreams()
            .iter()
            .filter(|u| u.config.enabled)
        {
            let mut rx = up.subscribe();
            let _ = tokio::time::timeout_at(deadline, rx.wait_for(admin::settled)).await;
        }
        self.app
            .ready
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.ready_upstreams()
    }

    /// The bound admin address (`server.admin_listen`), if any.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Number of upstreams in `Ready`.
    pub fn ready_upstreams(&self) -> usize {
        self.app
            .router
            .upstreams()
            .iter()
            .filter(|u| matches!(u.status(), crate::upstream::Status::Ready { .. }))
            .count()
    }

    /// Number of upstream owner tasks alive.
    pub fn live_owner_tasks(&self) -> usize {
        self.supervisor.live_tasks()
    }

    /// Stops accepting, lets the calls in flight finish and the
    /// `subscriptions/listen` streams send their closing response for up to
    /// `grace`, then stops every upstream (stdio children get EOF, then TERM/KILL;
    /// HTTP sessions get DELETE), waiting up to 5 s for each.
    pub async fn shutdown_within(self, grace: Duration) {
        let _ = self.shutdown.send(true);
        let app = self.app.clone();
        app.router.stop_holding();
        app.stopping.send_replace(true);
        let deadline = tokio::time::Instant::now() + grace;
        if tokio::time::timeout_at(deadline, app.in_flight.drained())
            .await
            .is_err()
        {
            tracing::warn!(
                "shutdown: {} call(s) still in flight after {grace:?}; stopping anyway",
                app.in_flight.active()
            );
        }
        // Listen streams send their closing response and end on `stopping`;
        // wait (within the same grace) until each was handed to its connection.
        if tokio::time::timeout_at(deadline, app.streams.all_closed())
            .await
            .is_err()
        {
            tracing::warn!(
                "shutdown: {} subscription stream(s) did not take their closing response within {grace:?}",
                app.streams.open()
            );
        }
        self.supervisor.shutdown(Duration::from_secs(5)).await;
    }

    /// [`Gateway::shutdown_within`] with a 10 s grace.
    pub async fn shutdown(self) {
        self.shutdown_within(Duration::from_secs(10)).await;
    }
}

async fn accept_loop(listener: TcpListener, app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(app.config.server.max_connections));
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("semaphore never closed"),
            _ = shutdown.changed() => return,
        };
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        set_user_timeout(&stream, app.config.server.keepalive * 2);
        let app = app.clone();
        // The connection's own future: lives as long as the client's socket.
        tokio::spawn(async move {
            let _permit = permit;
            let svc = hyper::service::service_fn(move |req| route(app.clone(), req));
            // A client must finish each request head within HEADER_READ_TIMEOUT,
            // so silent or half-sent connections cannot hold permits forever.
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(crate::limits::HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!("connection: {e}");
            }
        });
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

/// Folds queued histogram samples every [`crate::limits::METRICS_UPKEEP_PERIOD`].
async fn metrics_upkeep(mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(crate::limits::METRICS_UPKEEP_PERIOD) => crate::metrics::upkeep(),
            _ = shutdown.changed() => return,
        }
    }
}

/// One timer for the whole table: removes idle sessions every
/// `min(idle_timeout / 4, 60 s)` (lookups also expire lazily).
async fn sweep(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let period = (app.config.server.session_idle_timeout / 4).min(Duration::from_secs(60));
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
