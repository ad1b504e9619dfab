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

mod accept;
pub mod admin;
mod answer;
mod audited;
pub mod cancel;
pub mod checks;
pub mod conns;
pub mod endpoint;
mod era;
mod gate;
mod legacy_input;
pub mod listen;
pub mod media;
pub mod modern;
pub mod mrtr;
pub mod operator;
pub mod parked;
pub mod reply;
mod request;
pub mod streams;
mod subscriptions;
mod tasks;
pub mod tls;

pub use accept::accept_loop;

use crate::access::{Access, Caller};
use crate::config::{ServerConfig, TlsConfig};
use crate::protocol::{self, Payload, ProtocolVersion, RpcError};
use crate::router::Router;
use crate::session::Table;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::watch;

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
    /// Modern callers' calls parked for their `inputResponses` (fixed
    /// table, [`parked`]; [`mrtr`]).
    pub parked: parked::ParkedCalls,
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
            parked: parked::ParkedCalls::new(
                crate::limits::PARKED_CALLS,
                crate::limits::PARKED_CALL_TTL,
                tokio::time::Instant::now(),
            ),
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

    /// What a session that has just left the table held goes: its GET
    /// streams end, its relayed requests and resource subscriptions are
    /// forgotten (a session evicted or expired by `initialize`).
    pub fn session_ended(&self, id: crate::session::SessionId) {
        self.sessions_changed.notify_waiters();
        let header = id.to_header();
        for up in self.router.upstreams().iter() {
            up.forget_session(&header);
        }
        (self.subscriptions).remove_subscriber(crate::subscriptions::Subscriber::Session(id));
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
    ) -> Result<Payload, RpcError> {
        match method {
            "ping" => Ok(json!({}).into()),
            "server/discover" if modern => Ok(json!({
                "supportedVersions": ProtocolVersion::supported_json(),
                "capabilities": tasks::capabilities(self, params.as_ref()),
                "_meta": {protocol::META_SERVER_INFO: App::server_info()},
                "instructions": self.instructions(who.policy()),
            })
            .into()),
            _ => {
                let caller = tasks::caller(who, params.as_ref(), modern);
                let mut r = (self.router)
                    .dispatch_as(
                        method,
                        params,
                        relay,
                        who.policy(),
                        caller,
                        who.access.shares(),
                    )
                    .await;
                // A list missing a connected upstream's part must not be
                // cached as complete: ttlMs 0 (2026-07-28 caching hints).
                if let (true, Ok(Payload::Tree(Value::Object(o)))) =
                    (modern && method.ends_with("/list"), &mut r)
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

async fn route(
    app: Arc<App>,
    req: Request<conns::Marked<Incoming>>,
) -> Result<Response<Body>, Infallible> {
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
/// `min(idle_timeout / 4, 60 s, 10 s)` (lookups also expire lazily), and
/// parked calls whose time is up ([`mrtr::expire`]); expires tasks and
/// cancels the abandoned ones ([`crate::router::Router::cancel_orphans`]). A task of the
/// composition root.
pub async fn sweep_sessions(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let period = (app.server.session_idle_timeout / 4)
        .min(crate::limits::SESSION_SWEEP_MAX_PERIOD)
        .min(crate::limits::PARKED_SWEEP_PERIOD);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.changed() => return,
        }
        let expired = {
            let mut t = app.sessions.lock().expect("sessions");
            let expired = t.expire(tokio::time::Instant::now());
            metrics::gauge!(crate::metrics::SESSIONS_ACTIVE).set(t.len() as f64);
            expired
        };
        if expired > 0 {
            app.sessions_changed.notify_waiters();
        }
        // Subscriptions of sessions that expired, or were evicted for a new
        // one since the last sweep, go too; and expired tasks, and tasks
        // abandoned by their callers are cancelled upstream.
        app.forget_gone_sessions();
        app.router.tasks().expire(tokio::time::Instant::now());
        app.router.cancel_orphans().await;
        mrtr::expire(&app, tokio::time::Instant::now()).await;
    }
}
