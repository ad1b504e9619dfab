//! Upstream MCP servers: one shared connection per configured upstream.
//!
//! An [`Upstream`] is the shared face of one configured server: callers use
//! [`Upstream::call`]; the supervisor's owner task connects, installs the live
//! [`Conn`] and replaces it after a failure. Transports: [`stdio`] (child
//! process, newline-delimited JSON-RPC), [`http`] (streamable HTTP client) and
//! [`builtin`] (the in-process `edge` tools). [`handshake`] decides the era.

pub mod builtin;
pub mod catalog;
pub mod handshake;
pub mod http;
pub mod inflight;
pub mod relay;
pub mod stdio;

use crate::config::UpstreamConfig;
use crate::protocol::{self, RpcError};
use serde_json::Value;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{watch, Notify};

pub use catalog::Catalog;
pub use handshake::{Negotiated, UpstreamEra};

/// The state of one upstream, published on a `watch` channel.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// `enabled = false` in the config.
    Disabled,
    /// A connect attempt (spawn/dial plus era handshake) is running.
    Connecting,
    /// Connected and serving calls.
    Ready {
        /// The era spoken with it.
        era: UpstreamEra,
    },
    /// Waiting before the next attempt.
    Backoff {
        /// Failed attempts in a row.
        attempt: u32,
        /// Delay until the next attempt.
        delay: Duration,
        /// Why the last attempt failed.
        last_error: String,
    },
    /// Shutting down.
    Stopping,
}

impl Status {
    /// A short human description, used in error messages to callers.
    pub fn describe(&self) -> String {
        match self {
            Status::Disabled => "disabled".into(),
            Status::Connecting => "connecting".into(),
            Status::Ready { .. } => "ready".into(),
            Status::Backoff {
                attempt,
                delay,
                last_error,
            } => format!(
                "down after {attempt} failed attempt(s), retrying within {}s: {last_error}",
                delay.as_secs().max(1)
            ),
            Status::Stopping => "stopping".into(),
        }
    }
}

/// Why one call to an upstream failed. Converted into a JSON-RPC error naming
/// the upstream by [`CallError::to_rpc`].
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Not connected; carries the state description.
    #[error("upstream '{name}' is not available ({state})")]
    Unavailable {
        /// Upstream name.
        name: String,
        /// [`Status::describe`].
        state: String,
    },
    /// No answer within the call timeout.
    #[error("upstream '{name}' did not answer within {after:?}")]
    Timeout {
        /// Upstream name.
        name: String,
        /// The configured `call_timeout`.
        after: Duration,
    },
    /// The in-flight table is full.
    #[error("upstream '{name}' has {capacity} requests in flight; try again later")]
    Busy {
        /// Upstream name.
        name: String,
        /// Its `max_in_flight`.
        capacity: usize,
    },
    /// The answer exceeded `max_result_bytes`.
    #[error("upstream '{name}' sent a message larger than {limit} bytes")]
    TooLarge {
        /// Upstream name.
        name: String,
        /// Its `max_result_bytes`.
        limit: usize,
    },
    /// The connection failed during the call.
    #[error("upstream '{name}' transport error: {reason}")]
    Transport {
        /// Upstream name.
        name: String,
        /// What failed.
        reason: String,
    },
    /// The upstream answered with a JSON-RPC error: forwarded unchanged.
    #[error("{0}")]
    Rpc(RpcError),
}

impl CallError {
    /// The JSON-RPC error for the downstream caller.
    pub fn to_rpc(&self) -> RpcError {
        let code = match self {
            CallError::Rpc(e) => return e.clone(),
            CallError::Unavailable { .. } | CallError::Transport { .. } => {
                protocol::UPSTREAM_UNAVAILABLE
            }
            CallError::Timeout { .. } => protocol::UPSTREAM_TIMEOUT,
            CallError::Busy { .. } => protocol::UPSTREAM_BUSY,
            CallError::TooLarge { .. } => protocol::UPSTREAM_RESULT_TOO_LARGE,
        };
        RpcError::new(code, self.to_string())
    }
}

/// Transport-level outcome of one request, before it is named for a caller.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The peer answered with a JSON-RPC error.
    #[error("{0}")]
    Rpc(RpcError),
    /// No answer in time.
    #[error("timed out")]
    Timeout,
    /// The in-flight table is full.
    #[error("in-flight table full")]
    Busy,
    /// The answer exceeded the size limit.
    #[error("message too large")]
    TooLarge,
    /// HTTP 401/403 or an OAuth challenge.
    #[error("authorization required (HTTP {0})")]
    Auth(u16),
    /// An HTTP error status; `rpc` is the JSON-RPC error in the body, if any.
    #[error("HTTP {status}{}", rpc.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    Http {
        /// Status code.
        status: u16,
        /// JSON-RPC error found in the body.
        rpc: Option<RpcError>,
    },
    /// The legacy HTTP session expired (404 with a session id).
    #[error("session expired")]
    SessionExpired,
    /// Connection lost, bad framing, I/O error.
    #[error("{0}")]
    Transport(String),
}

/// A live connection.
pub enum Conn {
    /// A child process.
    Stdio(stdio::StdioConn),
    /// A streamable-HTTP server.
    Http(Box<http::HttpConn>),
    /// The in-process `edge` tools.
    Builtin,
}

impl Conn {
    /// Sends one request and waits up to `timeout` for its answer.
    pub async fn send(
        &self,
        method: &str,
        params: Option<Value>,
        era: UpstreamEra,
        timeout: Duration,
        relay: Option<relay::Relay>,
    ) -> Result<Value, SendError> {
        match self {
            Conn::Stdio(c) => c.send(method, params, timeout, relay).await,
            Conn::Http(c) => c.send(method, params, era, timeout, relay).await,
            Conn::Builtin => builtin_send(method, params.as_ref()).await,
        }
    }

    /// Sends a JSON-RPC response to a request the upstream sent.
    pub async fn respond(&self, msg: &Value) -> Result<(), SendError> {
        match self {
            Conn::Stdio(c) => c.respond(msg).await,
            Conn::Http(c) => c.respond(msg).await,
            Conn::Builtin => Ok(()),
        }
    }

    /// Sends one notification (no answer expected).
    pub async fn notify(
        &self,
        method: &str,
        params: Option<Value>,
        era: UpstreamEra,
    ) -> Result<(), SendError> {
        match self {
            Conn::Stdio(c) => c.notify(method, params).await,
            Conn::Http(c) => c.notify(method, params, era).await,
            Conn::Builtin => Ok(()),
        }
    }
}

async fn builtin_send(method: &str, params: Option<&Value>) -> Result<Value, SendError> {
    match method {
        "tools/list" => Ok(builtin::list_tools()),
        "tools/call" => {
            let name = params
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let args = params.and_then(|p| p.get("arguments"));
            builtin::call_tool(name, args)
                .await
                .map_err(|e| SendError::Rpc(RpcError::new(protocol::INVALID_PARAMS, e.to_string())))
        }
        "ping" => Ok(serde_json::json!({})),
        _ => Err(SendError::Rpc(RpcError::new(
            protocol::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        ))),
    }
}

struct Live {
    conn: Arc<Conn>,
    negotiated: Arc<Negotiated>,
}

/// The shared face of one configured upstream (cheap to share behind `Arc`).
pub struct Upstream {
    /// Position in the config (the order lists are merged in).
    pub index: usize,
    /// Its validated config.
    pub config: UpstreamConfig,
    live: RwLock<Option<Live>>,
    catalog: RwLock<Arc<Catalog>>,
    status: watch::Sender<Status>,
    /// Woken when traffic sees a transport error: the owner task reconnects.
    pub(crate) lost: Notify,
    /// Woken by `notifications/*/list_changed`: the owner task refreshes the catalog.
    pub(crate) list_changed: Arc<Notify>,
    reinit: tokio::sync::Mutex<()>,
    /// Server→client requests relayed to downstream clients, awaiting answers.
    pub(crate) pending: Arc<relay::Pending>,
}

impl Upstream {
    /// A not-yet-connected upstream whose table of relayed server→client
    /// requests holds `max_pending` entries (`server.max_pending_server_requests`).
    pub fn new(index: usize, config: UpstreamConfig, max_pending: usize) -> Arc<Self> {
        let initial = if config.enabled {
            Status::Connecting
        } else {
            Status::Disabled
        };
        Arc::new(Upstream {
            index,
            config,
            live: RwLock::new(None),
            catalog: RwLock::new(Arc::new(Catalog::default())),
            status: watch::channel(initial).0,
            lost: Notify::new(),
            list_changed: Arc::new(Notify::new()),
            reinit: tokio::sync::Mutex::new(()),
            pending: Arc::new(relay::Pending::new(max_pending)),
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// A receiver of status changes.
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    pub(crate) fn set_status(&self, s: Status) {
        let ready = matches!(s, Status::Ready { .. });
        metrics::gauge!(crate::metrics::UPSTREAM_READY, "upstream" => self.config.name.clone())
            .set(if ready { 1.0 } else { 0.0 });
        self.status.send_replace(s);
    }

    /// The current catalog (empty while not connected).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().expect("catalog lock").clone()
    }

    pub(crate) fn set_catalog(&self, c: Catalog) {
        *self.catalog.write().expect("catalog lock") = Arc::new(c);
    }

    /// What the handshake learnt, while connected.
    pub fn negotiated(&self) -> Option<Arc<Negotiated>> {
        self.live
            .read()
            .expect("live lock")
            .as_ref()
            .map(|l| l.negotiated.clone())
    }

    pub(crate) fn install(&self, conn: Arc<Conn>, negotiated: Negotiated) {
        *self.live.write().expect("live lock") = Some(Live {
            conn,
            negotiated: Arc::new(negotiated),
        });
    }

    pub(crate) fn uninstall(&self) {
        *self.live.write().expect("live lock") = None;
        self.set_catalog(Catalog::default());
    }

    fn current(&self) -> Option<(Arc<Conn>, Arc<Negotiated>)> {
        self.live
            .read()
            .expect("live lock")
            .as_ref()
            .map(|l| (l.conn.clone(), l.negotiated.clone()))
    }

    /// Calls `method` on this upstream with the caller's `params` (adapted to
    /// the upstream's era by [`handshake::adapt_params`]) and returns the
    /// `result`. Errors name the upstream ([`CallError`]); a transport error
    /// also wakes the owner task to reconnect.
    pub async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, CallError> {
        self.call_relayed(method, params, None).await
    }

    /// [`Upstream::call`] whose request-scoped notifications and server→client
    /// requests are relayed to the caller through `relay` ([`relay`]).
    pub async fn call_relayed(
        &self,
        method: &str,
        params: Option<Value>,
        relay: Option<relay::Relay>,
    ) -> Result<Value, CallError> {
        let (conn, neg) = self.current().ok_or_else(|| CallError::Unavailable {
            name: self.config.name.clone(),
            state: self.status().describe(),
        })?;
        let params = handshake::adapt_params(neg.era, params);
        let timeout = self.config.call_timeout;
        let first = conn
            .send(method, params.clone(), neg.era, timeout, relay.clone())
            .await;
        let outcome = match first {
            Err(SendError::SessionExpired) => {
                // Legacy HTTP session ended upstream: one re-initialize, one retry
                // (2025-11-25 transports.mdx §Session Management, item 4).
                if let Conn::Http(h) = &*conn {
                    let _g = self.reinit.lock().await;
                    handshake::reinitialize(h, &neg)
                        .await
                        .map_err(|e| self.name_send_error(e))?;
                }
                conn.send(method, params, neg.era, timeout, relay).await
            }
            other => other,
        };
        outcome.map_err(|e| self.name_send_error(e))
    }

    /// Passes a downstream client's answer to a relayed server→client request
    /// (slot and generation parsed from its id by [`relay::parse_downstream_id`])
    /// back to the upstream. `false` when no such request awaits `session`'s answer.
    pub async fn answer_relayed(
        &self,
        slot: usize,
        generation: u32,
        session: &str,
        outcome: Result<Value, crate::protocol::RpcError>,
    ) -> bool {
        let Some(upstream_id) = self.pending.take(slot, generation, session) else {
            return false;
        };
        let Some((conn, _)) = self.current() else {
            return false;
        };
        let msg = match outcome {
            Ok(r) => protocol::result_response(upstream_id, r),
            Err(e) => protocol::error_response(upstream_id, &e),
        };
        conn.respond(&msg).await.is_ok()
    }

    /// Forgets the relayed requests awaiting `session`'s answer (session ended).
    pub fn forget_session(&self, session: &str) {
        self.pending.forget_session(session);
    }

    /// What a transport needs to relay this upstream's server→client requests.
    pub(crate) fn relay_ctx(&self) -> relay::RelayCtx {
        relay::RelayCtx {
            index: self.index,
            pending: self.pending.clone(),
            max_age: self.config.call_timeout,
        }
    }

    fn name_send_error(&self, e: SendError) -> CallError {
        let name = self.config.name.clone();
        match e {
            SendError::Rpc(r) => CallError::Rpc(r),
            SendError::Timeout => CallError::Timeout {
                name,
                after: self.config.call_timeout,
            },
            SendError::Busy => {
                metrics::counter!(crate::metrics::REFUSED, "limit" => "in_flight").increment(1);
                CallError::Busy {
                    name,
                    capacity: self.config.max_in_flight,
                }
            }
            SendError::TooLarge => {
                metrics::counter!(crate::metrics::REFUSED, "limit" => "result_bytes").increment(1);
                CallError::TooLarge {
                    name,
                    limit: self.config.max_result_bytes,
                }
            }
            other => {
                self.lost.notify_one();
                CallError::Transport {
                    name,
                    reason: other.to_string(),
                }
            }
        }
    }
}
