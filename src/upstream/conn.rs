//! A live connection to an upstream, whatever its transport: the one
//! interface the owner task drives ([`Conn::open`], `close`, `listen`,
//! `notifications`, `cancel`, …) and callers send on, so the supervisor never
//! matches on the transport (only `handshake` names the built-in one, to
//! give it its fixed handshake result).
//!
//! Every connection reports the calls its callers gave up on the same way:
//! their ids arrive on [`Opened::abandoned`], and the owner task tells the
//! upstream with [`Conn::cancel`] (2025-11-25 utilities-cancellation.mdx).
//! A stdio call is always cancelled; an HTTP call only in the legacy era
//! (a modern server takes the closed response stream as the cancellation,
//! 2026-07-28 patterns-cancellation.mdx); a built-in call never.

use super::era::UpstreamEra;
use super::{builtin, stdio, streamable, SendError, Steward};
use crate::protocol::{self, Payload, RpcError};
use crate::relay;
use serde_json::Value;
use std::time::Duration;
use tokio::sync::mpsc;

pub use stdio::Driver;

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The child process could not be started.
    #[error("{0}")]
    Spawn(String),
    /// The HTTP client could not be set up.
    #[error(transparent)]
    Http(#[from] streamable::SetupError),
}

/// A connection just opened, before its handshake.
pub struct Opened {
    /// The connection.
    pub conn: Conn,
    /// Runs its I/O (a child's pipes) and ends, with the reason, when the
    /// connection does; never ends for HTTP and built-in connections.
    pub driver: Driver,
    /// Ids of the calls given up on, for [`Conn::cancel`].
    pub abandoned: Abandoned,
}

/// The ids of calls given up on (timeout, caller gone) on one connection,
/// bounded by its `max_in_flight`, with the upstream session each was on.
pub struct Abandoned(AbandonedRx);

enum AbandonedRx {
    /// A transport of one session (stdio), or none (built-in: never sends).
    One(mpsc::Receiver<u64>),
    /// A legacy HTTP upstream's, whose calls run on several sessions.
    Lanes(mpsc::Receiver<(u64, relay::Lane)>),
}

impl Abandoned {
    /// The next abandoned call id and its session; `None` once the
    /// connection can report no more (a built-in connection never reports any).
    pub async fn next(&mut self) -> Option<(u64, relay::Lane)> {
        match &mut self.0 {
            AbandonedRx::One(rx) => rx.recv().await.map(|id| (id, relay::Lane::MAIN)),
            AbandonedRx::Lanes(rx) => rx.recv().await,
        }
    }

    fn none() -> Abandoned {
        Abandoned(AbandonedRx::One(mpsc::channel(1).1))
    }
}

/// A live connection.
pub enum Conn {
    /// A child process.
    Stdio(stdio::StdioConn),
    /// A streamable-HTTP server.
    Http(Box<streamable::HttpConn>),
    /// The in-process `edge` tools.
    Builtin,
}

impl Conn {
    /// Frees the in-flight places of calls abandoned past their timeout
    /// (only a stdio child's or a 2024-11-05 HTTP+SSE stream's calls keep a
    /// slot after their caller gave up); how many.
    pub fn reclaim_stale(&self) -> usize {
        match self {
            Conn::Stdio(c) => c.reclaim_stale(),
            Conn::Http(c) => c.reclaim_stale(),
            Conn::Builtin => 0,
        }
    }

    /// Opens a connection to the upstream as its config says: spawns the
    /// child, or prepares the HTTP client (no request yet), or the built-in
    /// tools. Its owner's act (`owner`): only the owner task opens, installs
    /// and drops connections.
    pub fn open(owner: &Steward) -> Result<Opened, OpenError> {
        use crate::config::Transport;
        let up = owner.upstream();
        let list_changed = up.owned.list_changed();
        match &up.config.transport {
            Transport::Stdio { .. } => {
                let (c, driver, abandoned) = stdio::open(
                    &up.config,
                    list_changed,
                    up.relay_ctx(),
                    up.stderr_tail.clone(),
                )
                .map_err(OpenError::Spawn)?;
                Ok(Opened {
                    conn: Conn::Stdio(c),
                    driver,
                    abandoned: Abandoned(AbandonedRx::One(abandoned)),
                })
            }
            Transport::Http { wire, .. } => {
                let parts = (&up.config, list_changed, up.relay_ctx(), up.oauth.clone());
                let (c, driver, abandoned): (_, Driver, _) = match wire {
                    crate::config::Wire::Sse => {
                        let (c, driver, ids) = streamable::HttpConn::new_sse(parts)?;
                        (c, Box::pin(driver), AbandonedRx::One(ids))
                    }
                    crate::config::Wire::Streamable => {
                        let (c, ids) = streamable::HttpConn::new(parts)?;
                        (c, Box::pin(std::future::pending()), AbandonedRx::Lanes(ids))
                    }
                };
                Ok(Opened {
                    conn: Conn::Http(Box::new(c)),
                    driver,
                    abandoned: Abandoned(abandoned),
                })
            }
            Transport::Builtin => Ok(Opened {
                conn: Conn::Builtin,
                driver: Box::pin(std::future::pending()),
                abandoned: Abandoned::none(),
            }),
        }
    }

    /// Ends the connection in order: a child's stdin is closed (it should
    /// exit; its driver runs the rest of the stop sequence), a legacy HTTP
    /// session is ended with DELETE.
    pub async fn close(&self) {
        match self {
            Conn::Stdio(c) => c.close().await,
            Conn::Http(c) => c.close().await,
            Conn::Builtin => {}
        }
    }

    /// True when its driver ends by itself after [`Conn::close`] (a child's
    /// stop sequence: EOF, TERM, KILL), so shutdown should wait for it.
    pub fn has_stop_sequence(&self) -> bool {
        matches!(self, Conn::Stdio(_))
    }

    /// Whether its transport carries legacy sessions only (the 2024-11-05
    /// HTTP+SSE transport): no era probe is sent.
    pub fn legacy_only(&self) -> bool {
        matches!(self, Conn::Http(c) if c.is_sse())
    }

    /// Whether `initialize` opens a session of its own here, beside any
    /// other era (HTTP), rather than turning the whole connection legacy
    /// (stdio: 2026-07-28 versioning.mdx §Backward Compatibility).
    pub fn has_sessions(&self) -> bool {
        matches!(self, Conn::Http(c) if !c.is_sse())
    }

    /// The handshake's outcome, for a transport that speaks per request:
    /// its own era, and the legacy version of its sessions if it has any.
    pub fn spoken(&self, own: UpstreamEra, legacy: Option<crate::protocol::ProtocolVersion>) {
        if let Conn::Http(c) = self {
            c.spoken(own, legacy);
        }
    }

    /// Ends a session an `initialize` in `version` opened that the
    /// handshake does not keep (HTTP; nothing elsewhere).
    pub async fn drop_session(&self, version: crate::protocol::ProtocolVersion) {
        if let Conn::Http(c) = self {
            c.drop_main_session(version).await;
        }
    }

    /// After the handshake: asks a modern child for its list changes
    /// ([`stdio::StdioConn::listen`]); a no-op otherwise (an HTTP upstream's
    /// list changes come on [`Conn::notifications`]).
    pub async fn listen(&self, era: UpstreamEra) -> Result<(), SendError> {
        match (self, era) {
            (Conn::Stdio(c), UpstreamEra::Modern) => c.listen(&[]).await,
            _ => Ok(()),
        }
    }

    /// A modern upstream is to report updates of `resources` (and list
    /// changes) from now on: a stdio child gets a new `subscriptions/listen`
    /// replacing the last, an HTTP server's listen stream is reopened with
    /// the new filter. A no-op for the built-in upstream.
    pub async fn relisten(&self, resources: Vec<Box<str>>) -> Result<(), SendError> {
        match self {
            Conn::Stdio(c) => c.listen(&resources).await,
            Conn::Http(c) => {
                c.relisten(resources);
                Ok(())
            }
            Conn::Builtin => Ok(()),
        }
    }

    /// Reads an HTTP upstream's notification streams (a legacy GET stream
    /// per session, or a modern `subscriptions/listen`), each reopened
    /// `again_after` it ends; never returns. Pending at once for other
    /// transports.
    pub async fn notifications(&self, name: &str, again_after: Duration) {
        let Conn::Http(c) = self else {
            return std::future::pending().await;
        };
        c.read_all_notifications(name, again_after).await
    }

    /// Tells the upstream to stop working on abandoned call `id`, sent on
    /// `lane` (`notifications/cancelled`).
    pub async fn cancel(&self, id: u64, lane: relay::Lane) -> Result<(), SendError> {
        match self {
            Conn::Stdio(c) => c.cancel(id).await,
            Conn::Http(c) => c.cancel(id, lane).await,
            Conn::Builtin => Ok(()),
        }
    }

    /// Records which of the upstream's `tools` annotate parameters with
    /// `x-mcp-header` (HTTP only: their calls carry `Mcp-Param-*` headers).
    pub fn set_param_headers(&self, tools: &[Value]) {
        if let Conn::Http(c) = self {
            c.set_param_headers(tools);
        }
    }

    /// After [`SendError::SessionExpired`] (legacy HTTP only): a new session
    /// with `initialize` in `era`, unless another caller made one already.
    pub async fn reinitialize(&self, era: UpstreamEra) -> Result<(), SendError> {
        match self {
            Conn::Http(c) => c.reinitialize(era).await,
            _ => Ok(()),
        }
    }

    /// Whether a call in `era` can meet [`SendError::SessionExpired`]
    /// (a legacy HTTP upstream's session).
    pub fn may_expire(&self, era: UpstreamEra) -> bool {
        matches!((self, era), (Conn::Http(_), UpstreamEra::Legacy(_)))
    }

    /// Sends one request and waits up to `timeout` for its answer. A stdio
    /// call keeps its client's `claim` while its slot is taken (past its
    /// caller, when abandoned); elsewhere the caller's hold is enough.
    pub async fn send(
        &self,
        method: &str,
        params: Option<Value>,
        era: UpstreamEra,
        timeout: Duration,
        relay: Option<relay::Relay>,
        claim: Option<super::Claim>,
    ) -> Result<Payload, SendError> {
        match self {
            Conn::Stdio(c) => c.send(method, params, timeout, relay, claim).await,
            // Boxed: an HTTP exchange (hyper's client, an SSE answer read
            // to its end, a caller's session opened or re-opened on the way)
            // is ~2.9 KB of state, which every request future of the
            // endpoint would otherwise carry (clippy::large_futures). One
            // allocation beside the ~90 of an HTTP call.
            Conn::Http(c) => Box::pin(c.send(method, params, era, timeout, relay, claim)).await,
            Conn::Builtin => builtin_send(method, params.as_ref())
                .await
                .map(Payload::from),
        }
    }

    /// Sends a JSON-RPC response to a request the upstream sent on `lane`.
    pub async fn respond(&self, msg: &Value, lane: relay::Lane) -> Result<(), SendError> {
        match self {
            Conn::Stdio(c) => c.respond(msg).await,
            Conn::Http(c) => c.respond(msg, lane).await,
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
            match builtin::call_tool(name, args).await {
                Ok(r) => Ok(r),
                // Bad arguments are a tool error the model can read and fix
                // (2025-11-25 schema.json CallToolResult.isError); an unknown
                // tool is a protocol error.
                Err(e @ builtin::BuiltinError::InvalidArguments(_)) => Ok(serde_json::json!({
                    "content": [{"type": "text", "text": e.to_string()}],
                    "isError": true
                })),
                Err(e) => Err(SendError::Rpc(RpcError::new(
                    protocol::INVALID_PARAMS,
                    e.to_string(),
                ))),
            }
        }
        "ping" => Ok(serde_json::json!({})),
        _ => Err(SendError::Rpc(RpcError::new(
            protocol::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        ))),
    }
}
