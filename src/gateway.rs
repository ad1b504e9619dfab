//! The composition root: builds the tables, the supervisor and the
//! listeners from a [`Config`], and owns start, reload ([`reload`]),
//! shutdown and the systemd lifecycle ([`serve`]: `READY=1`, `STATUS=`,
//! `WATCHDOG=1`, `RELOADING=1`, `STOPPING=1`).
//!
//! `main.rs` is the command line only: it loads the config and calls
//! [`run`]. Tests start a [`Gateway`] in-process with [`Gateway::start`] and
//! drive it with [`Gateway::serve`] and a channel of [`Control`]s.
//!
//! Besides the supervisor's owner tasks, this is the one place that starts
//! long-lived tasks: the accept loop, the admin listener, the session sweep
//! and the watchdog heartbeat, each held by an
//! [`OwnedTask`] whose drop ends it.

mod health;
pub mod reload;
mod serve;

pub use reload::ReloadReport;
pub use serve::{run, Control, Controls};

use crate::config::{Config, UpstreamConfig};
use crate::downstream::App;
use crate::pins::Pins;
use crate::router::Router;
use crate::subscriptions::Subscriptions;
use crate::supervisor::{persist::Persist, OwnedTask, Supervisor};
use crate::upstream::{ListGens, Steward, Upstream};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

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
    /// The operator socket (`server.admin_socket`) could not be bound.
    #[error(transparent)]
    Operator(#[from] crate::downstream::operator_socket::BindError),
    /// The audit log (`[audit]`) could not start: its file cannot be
    /// opened for appending, or the journal is not there.
    #[error("cannot start the audit log")]
    Audit(#[from] crate::audit::AuditError),
    /// An upstream has `trust = "pin"` and its pins cannot be saved in
    /// `server.state_directory` (they would not survive a restart).
    #[error(
        "cannot keep the tool pins of the trust = \"pin\" upstreams in server.state_directory"
    )]
    Pins(#[from] crate::pins::PinsError),
}

/// A running gateway. Dropping it aborts its tasks; [`Gateway::shutdown`]
/// stops it in order.
pub struct Gateway {
    /// The board profile a reload reads its file under (`[server]` as
    /// started is [`App::server`]: its changes wait for a restart).
    board: Option<crate::config::Board>,
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    app: Arc<App>,
    /// Shared by every upstream: the list generations and the subscription table.
    shared: Shared,
    supervisor: Supervisor,
    /// The watchdog's rules (`[watchdog]`; a reload replaces them).
    watchdog: Arc<std::sync::Mutex<crate::config::WatchdogConfig>>,
    shutdown: watch::Sender<bool>,
    /// The next [`Upstream::id`] a reload hands out.
    next_id: usize,
    /// The audit writer thread (`[audit]`), for the gateway's life; its
    /// handle is [`App::audit`]. `[audit]` changes wait for a restart.
    audit: Option<crate::audit::AuditWriter>,
    /// `[audit]` as started (a reload reports a change).
    audit_config: Option<crate::config::AuditConfig>,
    _tasks: Vec<OwnedTask>,
}

/// What every upstream of one gateway shares.
#[derive(Clone)]
struct Shared {
    catalog_gen: Arc<watch::Sender<ListGens>>,
    subscriptions: Arc<Subscriptions>,
    /// The tool pins (`<state_directory>/tool-pins.json`, or in memory).
    pins: Arc<Pins>,
    max_pending: usize,
    /// `server.state_directory`: where OAuth token files live.
    state_directory: Option<std::path::PathBuf>,
}

impl Shared {
    /// What the upstreams of a gateway started with `config` share.
    fn new(config: &Config) -> Result<Shared, GatewayError> {
        Ok(Shared {
            catalog_gen: Arc::new(watch::channel(ListGens::default()).0),
            subscriptions: Arc::new(Subscriptions::new(
                crate::limits::MAX_RESOURCE_SUBSCRIPTIONS,
            )),
            pins: Arc::new(pins(config)?),
            max_pending: config.server.max_pending_server_requests,
            state_directory: config.server.state_directory.clone(),
        })
    }

    /// A new upstream for `c`, the handle and its owner's side (for the
    /// supervisor); `previous` is the one it replaces (a reload), whose
    /// OAuth client it keeps when its URL and `[upstream.oauth]` are
    /// unchanged: one renewal lock per grant, never two instances
    /// refreshing the same token.
    fn upstream(
        &self,
        id: usize,
        c: &UpstreamConfig,
        previous: Option<&Upstream>,
    ) -> (Arc<Upstream>, Steward) {
        let oauth = previous
            .and_then(|p| p.oauth_for(c))
            .or_else(|| oauth_client(c, self.state_directory.as_deref()));
        Upstream::new(
            id,
            c.clone(),
            self.max_pending,
            self.catalog_gen.clone(),
            self.subscriptions.clone(),
            self.pins.clone(),
            oauth,
        )
    }
}

/// The OAuth client of an HTTP upstream with `[upstream.oauth]`.
fn oauth_client(
    c: &UpstreamConfig,
    state_directory: Option<&std::path::Path>,
) -> Option<Arc<crate::oauth::OAuth>> {
    let crate::config::Transport::Http {
        url,
        oauth: Some(o),
        ..
    } = &c.transport
    else {
        return None;
    };
    Some(Arc::new(crate::oauth::OAuth::new(
        &c.name,
        url,
        o,
        state_directory,
        c.retry_after_cap,
    )))
}

impl Gateway {
    /// Binds `server.listen` and the admin listener, opens the audit log,
    /// then starts one owner task per enabled upstream, the accept loop,
    /// the session sweep and the admin listener.
    /// Errors: [`GatewayError::Bind`], [`GatewayError::AdminBind`],
    /// [`GatewayError::Audit`], [`GatewayError::Pins`] (all before any
    /// upstream is started).
    pub async fn start(config: Config) -> Result<Gateway, GatewayError> {
        let s = &config.server;
        let listener = bind(s.listen, |addr, source| GatewayError::Bind { addr, source }).await?;
        let addr = listener.local_addr().map_err(|source| GatewayError::Bind {
            addr: s.listen,
            source,
        })?;
        // Bound before any upstream starts, so a taken port fails cleanly.
        let admin = match s.admin_listen {
            Some(m) => {
                Some(bind(m, |addr, source| GatewayError::AdminBind { addr, source }).await?)
            }
            None => None,
        };
        let (audit, audit_writer) = match &config.audit {
            Some(a) => {
                let (handle, writer) = crate::audit::Audit::start(a)?;
                (Some(handle), Some(writer))
            }
            None => (None, None),
        };
        let shared = Shared::new(&config)?;
        // After the pins: a state directory at fault is reported as such.
        let operator = match &s.admin_socket {
            Some(p) => Some(crate::downstream::operator_socket::Socket::bind(p)?),
            None => None,
        };
        let (upstreams, owners): (Vec<Arc<Upstream>>, Vec<Steward>) =
            (config.upstreams.iter().enumerate())
                .map(|(i, c)| shared.upstream(i, c, None))
                .unzip();
        let instance = (s.fleet.instance_id)
            .unwrap_or_else(|| crate::instance::InstanceId::derived(addr.port()));
        let router = Router::new(
            upstreams.clone(),
            s.tool_names,
            s.tool_name_separator.clone(),
            instance,
        );
        let app = Arc::new(App::new(
            (addr, instance),
            s.clone(),
            config.board.as_ref().map(|b| b.name.clone()),
            router,
            shared.catalog_gen.clone(),
            shared.subscriptions.clone(),
            audit,
        ));
        app.set_access(crate::access::Access::new(
            &config,
            tokio::time::Instant::now(),
        ));
        if config.clients.is_empty() && !addr.ip().is_loopback() {
            // Only with server.allow_unauthenticated: config loading refuses otherwise.
            tracing::warn!(listen = %addr, "serving every tool to anyone who can reach {addr}: no [[client]] is configured and server.allow_unauthenticated = true");
        }
        let supervisor = Supervisor::start(owners, persist(&config, &upstreams));
        metrics::gauge!(crate::metrics::SESSIONS_CAPACITY).set(s.session_capacity as f64);
        instance_info(instance);
        let (shutdown, _) = watch::channel(false);
        let admin_addr = admin.as_ref().and_then(|l| l.local_addr().ok());
        let tasks = root_tasks(&app, listener, (admin, operator), &shutdown);
        Ok(Gateway {
            watchdog: Arc::new(std::sync::Mutex::new(config.watchdog.clone())),
            next_id: upstreams.len(),
            audit: audit_writer,
            audit_config: config.audit,
            board: config.board,
            admin_addr,
            addr,
            app,
            shared,
            supervisor,
            shutdown,
            _tasks: tasks,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound admin address (`server.admin_listen`), if any.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The operator socket (`server.admin_socket`), if any.
    pub fn admin_socket(&self) -> Option<&std::path::Path> {
        self.app.server().admin_socket.as_deref()
    }

    /// The downstream face's state (sessions, router, upstreams).
    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    /// Waits until every enabled upstream has settled its first attempt
    /// (ready or failed), or `budget` passed; then reports ready
    /// (`/readyz`). Returns how many upstreams are ready.
    pub async fn wait_upstreams(&self, budget: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + budget;
        for up in self.enabled() {
            let mut rx = up.subscribe();
            let _ =
                tokio::time::timeout_at(deadline, rx.wait_for(crate::downstream::admin::settled))
                    .await;
        }
        self.app.set_ready();
        self.ready_upstreams()
    }

    fn enabled(&self) -> Vec<Arc<Upstream>> {
        let ups = self.app.router().upstreams();
        ups.iter().filter(|u| u.config.enabled).cloned().collect()
    }

    /// Number of upstreams in `Ready`.
    pub fn ready_upstreams(&self) -> usize {
        let ups = self.app.router().upstreams();
        ups.iter().filter(|u| u.status().is_ready()).count()
    }

    /// Number of upstream owner tasks alive.
    pub fn live_owner_tasks(&self) -> usize {
        self.supervisor.live_tasks()
    }

    /// Stops accepting, lets the calls in flight finish, ends the legacy
    /// sessions, lets the `subscriptions/listen` streams send their closing
    /// response for up to `grace`, then stops every upstream (stdio children get EOF, then
    /// TERM/KILL; HTTP sessions get DELETE), waiting up to
    /// [`crate::limits::OWNER_STOP_GRACE`] for each.
    pub async fn shutdown_within(self, grace: Duration) {
        let _ = self.shutdown.send(true);
        let app = self.app.clone();
        app.router().stop_holding();
        app.begin_stopping();
        let deadline = tokio::time::Instant::now() + grace;
        if tokio::time::timeout_at(deadline, app.in_flight().drained())
            .await
            .is_err()
        {
            let n = app.in_flight().active();
            tracing::warn!(
                "shutdown: {n} call(s) still in flight after {grace:?}; stopping anyway"
            );
        }
        // The legacy sessions end like any other ending (their GET streams
        // close; counted as `reason="shutdown"`).
        (app.sessions()).end_where(|_| false, crate::session::Removal::Shutdown);
        // Listen streams send their closing response and end on `stopping`;
        // wait (within the same grace) until each was handed to its connection.
        if tokio::time::timeout_at(deadline, app.streams().all_closed())
            .await
            .is_err()
        {
            let n = app.streams().open();
            tracing::warn!("shutdown: {n} subscription stream(s) did not take their closing response within {grace:?}");
        }
        self.supervisor
            .shutdown(crate::limits::OWNER_STOP_GRACE)
            .await;
        // Pins whose write was put off (`auto` re-pins, see `pins::Flush`).
        if let Err(e) = self.shared.pins.flush(crate::pins::Flush::Now).await {
            tracing::warn!("shutdown: tool pins not saved: {e}");
        }
        // Last: the calls that ended above were recorded; write them.
        if let Some(w) = self.audit {
            if !w.close(crate::limits::AUDIT_CLOSE_GRACE).await {
                tracing::warn!(
                    "shutdown: the audit writer did not write its queue within {:?}",
                    crate::limits::AUDIT_CLOSE_GRACE
                );
            }
        }
    }

    /// [`Gateway::shutdown_within`] with [`crate::limits::SHUTDOWN_GRACE`].
    pub async fn shutdown(self) {
        self.shutdown_within(crate::limits::SHUTDOWN_GRACE).await;
    }
}

/// `mcp_edge_instance_info{instance, version} 1`.
fn instance_info(instance: crate::instance::InstanceId) {
    let version = env!("CARGO_PKG_VERSION");
    let labels = [
        ("instance", instance.to_string()),
        ("version", version.into()),
    ];
    metrics::gauge!(crate::metrics::INSTANCE_INFO, &labels).set(1.0);
}

async fn bind(
    addr: SocketAddr,
    error: impl FnOnce(SocketAddr, std::io::Error) -> GatewayError,
) -> Result<TcpListener, GatewayError> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    };
    let listen = |s: tokio::net::TcpSocket| {
        s.set_reuseaddr(true)?;
        s.bind(addr)?;
        s.listen(crate::limits::LISTEN_BACKLOG)
    };
    socket
        .and_then(listen)
        .map_err(|source| error(addr, source))
}

/// The tool pins: `<state_directory>/tool-pins.json`, or in memory only
/// (config loading refuses `trust = "pin"` without a state directory).
fn pins(config: &Config) -> Result<Pins, crate::pins::PinsError> {
    let Some(dir) = config.server.state_directory.as_ref() else {
        return Ok(Pins::in_memory());
    };
    let ups: Vec<_> = (config.upstreams.iter())
        .map(|u| (u.name.as_str(), u.trust))
        .collect();
    Pins::open(dir, &ups)
}

/// The backoff memory (`server.state_directory`), if configured.
fn persist(config: &Config, upstreams: &[Arc<Upstream>]) -> Option<Arc<Persist>> {
    let dir = config.server.state_directory.as_ref()?;
    let names: Vec<&str> = upstreams.iter().map(|u| u.name()).collect();
    Some(Arc::new(Persist::open(dir, &names)))
}

/// The root's long-lived tasks, each ending on `shutdown` (or when dropped).
fn root_tasks(
    app: &Arc<App>,
    listener: TcpListener,
    (admin, operator): (
        Option<TcpListener>,
        Option<crate::downstream::operator_socket::Socket>,
    ),
    shutdown: &watch::Sender<bool>,
) -> Vec<OwnedTask> {
    let mut tasks = vec![
        OwnedTask::spawn(crate::downstream::accept_loop(
            listener,
            app.clone(),
            shutdown.subscribe(),
        )),
        OwnedTask::spawn(crate::downstream::sweep_sessions(
            app.clone(),
            shutdown.subscribe(),
        )),
    ];
    if let Some(l) = admin {
        let serve = crate::downstream::admin::serve(l, app.clone(), shutdown.subscribe());
        tasks.push(OwnedTask::spawn(serve));
    }
    if let Some(socket) = operator {
        let serve =
            crate::downstream::operator_socket::serve(socket, app.clone(), shutdown.subscribe());
        tasks.push(OwnedTask::spawn(serve));
    }
    tasks
}
