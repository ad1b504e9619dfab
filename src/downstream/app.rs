//! The downstream face's state: [`App`] (the narrow state the face needs,
//! built by the composition root), who sent a request ([`Peer`], [`Who`])
//! and the body type of every response ([`Body`]).

use super::{parked, sessions, streams};
use crate::access::{Access, OriginPolicy, Principal};
use crate::config::{ServerConfig, TlsConfig};
use crate::instance::InstanceId;
use crate::router::Router;
use crate::session::{Removal, Table};
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::watch;

/// Response body type of every handler.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Who sent a request: a request extension on every request that came
/// through [`super::accept_loop`] (read it with `req.extensions().get::<Peer>()`;
/// requests built elsewhere, e.g. by tests calling [`super::endpoint::handle`],
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
    /// OIDs) ([`super::tls_accept::cert_subject`]). `None` without TLS or mTLS.
    pub cert_subject: Option<Vec<(String, String)>>,
}

/// Who sent a request: its [`Principal`] within the `[[client]]` table it
/// was authenticated against (a reload may swap the table meanwhile).
#[derive(Clone)]
pub struct Who {
    /// The table.
    pub access: Arc<Access>,
    /// The principal in it.
    pub principal: Principal,
    /// The client's address ([`Peer::client`]); `None` when not known.
    pub peer: Option<std::net::IpAddr>,
}

impl Peer {
    /// The client's own address: the connection's (a trusted proxy's
    /// PROXY header already put the client's there, `super::accept`), or,
    /// on a connection from one of `trusted_proxies` without
    /// `proxy_protocol`, the last `X-Forwarded-For` entry when it is an
    /// address (the one the proxy added; nginx's HTTP proxy cannot send a
    /// PROXY header).
    pub fn client(
        &self,
        fleet: &crate::config::fleet::Fleet,
        headers: &http::HeaderMap,
    ) -> std::net::IpAddr {
        let own = self.addr.ip().to_canonical();
        if fleet.proxy_protocol || !fleet.trusts(own) {
            return own;
        }
        let last = (headers.get_all("x-forwarded-for").iter().next_back())
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|a| a.trim().parse().ok());
        last.map_or(own, |a: std::net::IpAddr| a.to_canonical())
    }
}

impl Who {
    /// What the caller may see and call.
    pub fn policy(&self) -> &crate::router::Policy {
        self.access.policy(self.principal)
    }

    /// The owner mark of sessions the caller creates.
    pub fn owner(&self) -> u64 {
        self.access.owner(self.principal)
    }

    /// The caller's name (`-` when anonymous).
    pub fn name(&self) -> &str {
        self.access.name(self.principal)
    }
}

/// Shared state of the downstream endpoint.
pub struct App {
    /// The address `/mcp` is served on (bound: the real port when the config says 0).
    pub(super) listen_addr: SocketAddr,
    /// `[server]` as the gateway started with it (its changes wait for a restart).
    pub(super) server: ServerConfig,
    /// The board profile's name, if any (`/status`).
    pub(super) board: Option<String>,
    /// This box's instance id (`server.instance_id`, or derived at start).
    pub(super) instance: InstanceId,
    /// Legacy sessions (fixed capacity; [`sessions::Sessions`]).
    pub(super) sessions: Arc<sessions::Sessions>,
    /// Catalog and routing.
    pub(super) router: Arc<Router>,
    /// Origin/Host policy.
    pub(super) origin: OriginPolicy,
    /// Downstream requests being answered right now (shutdown waits for them).
    pub(super) in_flight: crate::drain::Drain,
    /// Places for long-lived streams, legacy GET and `subscriptions/listen`
    /// (fixed pool of max(1, `max_connections` / 2)).
    pub(super) streams: streams::StreamPool,
    /// Set when the gateway starts shutting down: listen streams send their
    /// closing response and end.
    pub(super) stopping: watch::Sender<bool>,
    /// Set once every enabled upstream settled its first attempt (`/readyz`, `READY=1`).
    pub(super) ready: std::sync::atomic::AtomicBool,
    /// SIGTERM came: `/readyz` answers 503 while the box still serves
    /// ([`App::begin_draining`]).
    pub(super) draining: std::sync::atomic::AtomicBool,
    /// Moved on, per list kind, when an upstream's catalog really changes
    /// (or a reload swaps the upstream set); GET and listen streams then
    /// send `notifications/{tools,prompts,resources}/list_changed` for the
    /// kinds that moved.
    pub(super) catalog_gen: Arc<watch::Sender<crate::router::ListGens>>,
    /// Downstream resource subscriptions (fixed table, [`crate::subscriptions`]).
    pub(super) subscriptions: Arc<crate::subscriptions::Subscriptions>,
    /// Modern callers' calls parked for their `inputResponses` (fixed
    /// table, [`parked`]; [`super::rounds`]).
    pub(super) parked: parked::ParkedCalls,
    /// Legacy sessions' call streams whose client went before the
    /// response, waiting for it to resume them (fixed table,
    /// [`super::resume`], [`super::call_stream`]).
    pub(super) resumes: super::call_stream::Home,
    /// The open streams of the HTTP+SSE transport, found by their
    /// session's POSTs ([`super::sse_transport`]).
    pub(super) sse_links: super::sse_links::SseLinks,
    /// The outcome of the last reload, if any (`STATUS=`, `/status`).
    pub(super) last_reload: Mutex<Option<LastReload>>,
    /// The `[[client]]` table in force ([`App::set_access`] swaps it).
    pub(super) access: std::sync::RwLock<Arc<Access>>,
    /// Moved on at each [`App::set_access`]: open listen streams check
    /// that their client is still configured.
    pub(super) access_gen: watch::Sender<u64>,
    /// Log budget of refusals (401, 429, 403, refused TLS handshakes).
    pub(super) refusal_log: crate::access::Throttle,
    /// The audit log (`[audit]`), if configured: one record per
    /// `tools/call`, `prompts/get`, `resources/read` ([`crate::audit`]).
    pub(super) audit: Option<crate::audit::Audit>,
    /// TLS on `listen` as it is now: `server.tls` at start, then each
    /// reload's new certificate ([`App::set_tls`]). Read once per accepted
    /// connection; open connections keep the configuration they shook
    /// hands with. `None` = plain HTTP (turning TLS on or off waits for a
    /// restart).
    pub(super) tls: RwLock<Option<TlsConfig>>,
}

/// What the composition root and tests read of the downstream state (its
/// fields are the face's own, `pub(super)`: nothing outside `http` sees them).
impl App {
    /// The address `/mcp` is served on.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
    }

    /// `[server]` as the gateway started with it.
    pub fn server(&self) -> &ServerConfig {
        &self.server
    }

    /// The legacy session service.
    pub fn sessions(&self) -> &Arc<sessions::Sessions> {
        &self.sessions
    }

    /// Catalog and routing.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// The pool of long-lived stream places.
    pub fn streams(&self) -> &streams::StreamPool {
        &self.streams
    }

    /// Downstream requests being answered right now.
    pub fn in_flight(&self) -> &crate::drain::Drain {
        &self.in_flight
    }

    /// Downstream resource subscriptions.
    pub fn subscriptions(&self) -> &Arc<crate::subscriptions::Subscriptions> {
        &self.subscriptions
    }

    /// Modern callers' parked calls.
    pub fn parked(&self) -> &parked::ParkedCalls {
        &self.parked
    }

    /// The audit log, if configured.
    pub fn audit(&self) -> Option<&crate::audit::Audit> {
        self.audit.as_ref()
    }

    /// The box is leaving its fleet (SIGTERM): `/readyz` answers 503 from
    /// now, so a balancer's health check takes it out while it still
    /// serves (`server.drain_grace`), and every legacy session open now is
    /// told to initialize again ([`crate::session::Table::drain`]): an idle
    /// one ends now (its next request is answered 404); one with requests
    /// in flight is still served until the last of them ends, then ends.
    pub fn begin_draining(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let n = self.sessions.drain();
        tracing::info!(
            "draining: /readyz answers 503; {n} idle legacy session(s) told to initialize again"
        );
    }

    /// What `GET /readyz` answers (on the admin listener and on `listen`):
    /// 200 once every upstream settled its first attempt, 503 before that
    /// and from SIGTERM on.
    pub(super) fn readiness(&self) -> (http::StatusCode, &'static str) {
        use http::StatusCode;
        if self.is_draining() {
            let why = "draining: this box is stopping (SIGTERM); send new work elsewhere\n";
            (StatusCode::SERVICE_UNAVAILABLE, why)
        } else if self.is_ready() {
            (StatusCode::OK, "ready\n")
        } else {
            let why = "starting: upstreams not settled yet\n";
            (StatusCode::SERVICE_UNAVAILABLE, why)
        }
    }

    /// Whether [`App::begin_draining`] was called.
    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether shutdown began ([`App::begin_stopping`]): new requests are refused.
    pub(super) fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Every enabled upstream settled its first attempt (`/readyz`, `READY=1`).
    pub fn set_ready(&self) {
        self.ready.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether [`App::set_ready`] was called.
    pub fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Streams parked now, waiting for their clients (`downstream::resume`).
    pub fn sse_parked(&self) -> usize {
        self.resumes.len()
    }

    /// Streams resumed with `Last-Event-ID` so far (`downstream::resume`).
    pub fn sse_resumed(&self) -> u64 {
        self.resumes.resumed()
    }

    /// The gateway starts shutting down: listen streams send their closing
    /// response and end; requests that reach admission from now on are
    /// refused (`admission::stopping`), and those already past it are
    /// counted in [`App::in_flight`] from the door (`endpoint::handle`),
    /// so the shutdown's wait covers them.
    pub fn begin_stopping(&self) {
        self.stopping.send_replace(true);
        // Sessions opened while draining are told too.
        self.sessions.drain();
        // Parked call streams are not waited for: their calls end now.
        drop(self.resumes.close());
    }

    /// Records the outcome of a reload (`STATUS=`, `/status`).
    pub fn set_last_reload(&self, note: LastReload) {
        *self.last_reload.lock().expect("last_reload lock") = Some(note);
    }

    /// The outcome of the last reload, if any.
    pub fn last_reload(&self) -> Option<LastReload> {
        self.last_reload.lock().expect("last_reload lock").clone()
    }
}

impl App {
    /// The downstream state of gateway `instance` listening on `listen_addr`.
    pub fn new(
        (listen_addr, instance): (SocketAddr, InstanceId),
        server: ServerConfig,
        board: Option<String>,
        router: Router,
        catalog_gen: Arc<watch::Sender<crate::router::ListGens>>,
        subscriptions: Arc<crate::subscriptions::Subscriptions>,
        audit: Option<crate::audit::Audit>,
    ) -> App {
        let router = Arc::new(router);
        let table = Table::new(
            server.session_capacity,
            server.session_idle_timeout,
            server.session_min_idle_before_evict,
        )
        .with_instance(instance);
        App {
            sessions: Arc::new(sessions::Sessions::new(
                table,
                router.clone(),
                subscriptions.clone(),
            )),
            catalog_gen,
            subscriptions,
            ready: false.into(),
            draining: false.into(),
            in_flight: crate::drain::Drain::new(),
            streams: streams::StreamPool::new((server.max_connections / 2).max(1)),
            sse_links: super::sse_links::SseLinks::new(
                (server.max_connections / 2).max(1),
                server.max_connections,
            ),
            stopping: watch::Sender::new(false),
            router,
            origin: OriginPolicy::new(listen_addr, &server.allowed_hosts, &server.allowed_origins),
            last_reload: Mutex::new(None),
            parked: parked::ParkedCalls::new(
                crate::limits::PARKED_CALLS,
                crate::limits::PARKED_CALL_TTL,
                tokio::time::Instant::now(),
            )
            .of_fleet(instance, server.fleet.state_key.as_ref().map(|(_, k)| k)),
            resumes: Arc::new(super::resume::Parked::new(
                crate::limits::SSE_PARKED_STREAMS,
            )),
            access: std::sync::RwLock::new(Arc::new(Access::open())),
            access_gen: watch::Sender::new(0),
            refusal_log: crate::access::Throttle::new(tokio::time::Instant::now()),
            audit,
            tls: RwLock::new(server.tls.clone()),
            listen_addr,
            server,
            board,
            instance,
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
    pub(super) fn tls_for_connection(&self) -> Option<Arc<rustls::ServerConfig>> {
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
    pub fn instructions(&self, policy: &crate::router::Policy) -> String {
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
        let gone = (self.sessions).end_where(|owner| access.knows(owner), Removal::Revoked);
        if gone > 0 {
            tracing::info!(
                sessions = gone,
                "ended the sessions of clients no longer configured"
            );
        }
        self.access_gen.send_modify(|g| *g += 1);
    }
}

/// The outcome of the last reload, kept for `STATUS=` and `/status` (the
/// watchdog refreshes `STATUS=`, so a one-off message would vanish).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastReload {
    /// The config file was rejected; the running config stays.
    pub rejected: bool,
    /// `[server]` changed and waits for a restart.
    pub server_pending: bool,
    /// The one-line report or the rejection reason.
    pub message: String,
    /// When, in seconds since the Unix epoch.
    pub at_unix: u64,
}

impl LastReload {
    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    /// A reload that was applied (`server_pending`: `[server]` changed).
    pub fn applied(message: &str, server_pending: bool) -> Self {
        LastReload {
            rejected: false,
            server_pending,
            message: message.to_string(),
            at_unix: Self::now(),
        }
    }

    /// A rejected reload and why.
    pub fn rejected(message: String) -> Self {
        LastReload {
            rejected: true,
            server_pending: false,
            message,
            at_unix: Self::now(),
        }
    }
}
