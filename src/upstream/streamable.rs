//! The streamable-HTTP client transport, on hyper with rustls (ring provider).
//!
//! Each request is one POST answered by JSON or an SSE stream
//! (`../shared/spec/2026-07-28/transports-streamable-http.mdx` §Sending Messages,
//! §Receiving Messages). Legacy upstreams keep the `Mcp-Session-Id` the
//! `initialize` answer carried (`../shared/spec/2025-11-25/transports.mdx`
//! §Session Management); modern ones get `MCP-Protocol-Version`, `Mcp-Method`
//! and `Mcp-Name` headers (§Request Metadata).

mod authorized;
mod lanes;
mod notifications;
mod response_body;
mod sse_wire;
mod wire;
pub use crate::protocol::parse_retry_after;
pub use notifications::NotificationsEnd;
pub use wire::header_safe;
use wire::{is_sse, refused};

use super::era::UpstreamEra;
use super::SendError;
use crate::config::{Transport, UpstreamConfig};
use crate::protocol::{self, Payload};
use crate::relay::{Lane, Relay, RelayCtx};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, Notify, Semaphore};

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A streamable-HTTP upstream.
pub struct HttpConn {
    /// The client and its credentials.
    sender: Arc<authorized::Sender>,
    /// A 2024-11-05 HTTP+SSE upstream's stream and calls (`transport =
    /// "sse"`): every message goes there instead ([`sse_wire`]).
    sse: Option<Arc<sse_wire::SseWire>>,
    url: Uri,
    /// `url` as shown in errors and logs: credentials masked
    /// ([`crate::config::mask_url`]).
    shown_url: String,
    headers: HeaderMap,
    /// The main legacy session ([`Lane::MAIN`]).
    session: RwLock<Option<HeaderValue>>,
    /// The legacy sessions of callers that declared other capabilities.
    lanes: lanes::Lanes,
    expired: std::sync::atomic::AtomicBool,
    permits: Semaphore,
    next_id: AtomicU64,
    max_bytes: usize,
    list_changed: Arc<Notify>,
    ctx: RelayCtx,
    /// What the handshake found ([`HttpConn::spoken`]).
    spoken: RwLock<Spoken>,
    /// Ids of legacy-era calls given up on (timeout, caller gone) and their
    /// sessions, for the owner task to send `notifications/cancelled`
    /// (bounded: `max_in_flight`).
    abandoned: mpsc::Sender<(u64, Lane)>,
    /// The upstream's tools that annotate parameters with `x-mcp-header`,
    /// by name (set with each catalog): their `tools/call` carries
    /// `Mcp-Param-*` headers (2026-07-28 transports-streamable-http.mdx
    /// §Custom Headers from Tool Parameters).
    param_headers:
        RwLock<std::collections::HashMap<String, Vec<crate::protocol::param_headers::ParamHeader>>>,
    /// The resource URIs a modern server's `subscriptions/listen` asks
    /// updates of ([`HttpConn::relisten`]); at most the subscription
    /// table's entries for this upstream.
    listen_uris: std::sync::Mutex<Vec<Box<str>>>,
    /// Rung when `listen_uris` changed: the open listen stream ends and is
    /// opened again at once with the new filter.
    relisten: Notify,
}

/// The eras spoken with a streamable-HTTP upstream: its own, and the
/// legacy version of its sessions when it has any (a legacy upstream, or a
/// dual-era one's legacy session beside the modern era).
#[derive(Debug, Clone, Copy)]
struct Spoken {
    own: UpstreamEra,
    legacy: Option<crate::protocol::ProtocolVersion>,
}

impl Spoken {
    /// The era of its sessions' traffic (cancellations, answers to its
    /// requests, DELETE): legacy when it has sessions.
    fn sessions(self) -> UpstreamEra {
        match (self.own, self.legacy) {
            (_, Some(v)) => UpstreamEra::Legacy(v),
            (own, None) => own,
        }
    }
}

/// Queues a legacy call's id for `notifications/cancelled` unless disarmed:
/// dropped with the call's future (caller gone) or left armed by a timeout.
struct Abandon<'a> {
    to: Option<&'a mpsc::Sender<(u64, Lane)>>,
    id: u64,
    /// The session the call went to.
    lane: Lane,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if let Some(to) = self.to {
            // Closed: the connection was replaced; its session (and the
            // work on it) is gone with it.
            if let Err(mpsc::error::TrySendError::Full(_)) = to.try_send((self.id, self.lane)) {
                crate::metrics::refused("cancellations");
            }
        }
    }
}

/// What an HTTP connection is made of: its config, the catalog's wake-up,
/// what relaying needs, its OAuth client.
pub type Parts<'a> = (
    &'a UpstreamConfig,
    Arc<Notify>,
    RelayCtx,
    Option<Arc<crate::oauth::OAuth>>,
);

/// Why an HTTP upstream could not be set up (bad URL, unreadable token file, no TLS roots).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SetupError(String);

fn https_client() -> Result<HttpsClient, SetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)
        .map_err(|e| SetupError(format!("TLS set-up: {e}")))?;
    let connector = builder.https_or_http().enable_http1().build();
    // Idle keep-alive connections are bounded: a burst of concurrent calls
    // must not leave one idle connection (and its buffers) per call behind.
    // Their read buffers too: a big body is read through at most
    // UPSTREAM_READ_BUFFER at a time rather than hyper's ≈ 408 KiB.
    Ok(Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(crate::limits::UPSTREAM_IDLE_CONNECTIONS)
        .http1_max_buf_size(crate::limits::UPSTREAM_READ_BUFFER)
        .build(connector))
}

impl HttpConn {
    /// Prepares the client: parses the URL, reads `bearer_token_file` (trimmed)
    /// into `Authorization: Bearer …`, loads the system's TLS roots. Also
    /// returns the receiver of the ids of legacy calls given up on, for
    /// [`HttpConn::cancel`].
    pub fn new(
        (cfg, list_changed, ctx, oauth): Parts<'_>,
    ) -> Result<(Self, mpsc::Receiver<(u64, Lane)>), SetupError> {
        let Transport::Http {
            url,
            headers,
            bearer_token_file,
            ..
        } = &cfg.transport
        else {
            return Err(SetupError("not an http upstream".into()));
        };
        let shown_url = crate::config::mask_url(url);
        let url: Uri = url.parse().map_err(|e| SetupError(format!("url: {e}")))?;
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| SetupError(format!("headers.{k}: {e}")))?;
            let mut value = HeaderValue::from_str(v.expose())
                .map_err(|e| SetupError(format!("headers.{k}: {e}")))?;
            // Configured header values are secrets (API keys): never shown.
            value.set_sensitive(true);
            map.insert(name, value);
        }
        if let Some(path) = bearer_token_file {
            let token = std::fs::read_to_string(path)
                .map_err(|e| SetupError(format!("bearer_token_file {}: {e}", path.display())))?;
            let mut v =
                HeaderValue::from_str(&format!("Bearer {}", token.trim())).map_err(|_| {
                    SetupError(format!(
                        "bearer_token_file {}: not a valid token",
                        path.display()
                    ))
                })?;
            v.set_sensitive(true);
            map.insert(header::AUTHORIZATION, v);
        }
        let (abandoned, abandoned_rx) = mpsc::channel(cfg.max_in_flight.max(1));
        if let Some(o) = &oauth {
            o.connection_opened();
        }
        let sender = Arc::new(authorized::Sender {
            client: https_client()?,
            oauth,
            shown_url: shown_url.clone(),
        });
        let conn = HttpConn {
            sender,
            sse: None,
            abandoned,
            param_headers: RwLock::new(Default::default()),
            listen_uris: std::sync::Mutex::new(Vec::new()),
            relisten: Notify::new(),
            url,
            shown_url,
            headers: map,
            session: RwLock::new(None),
            lanes: lanes::Lanes::new(),
            expired: false.into(),
            permits: Semaphore::new(cfg.max_in_flight),
            next_id: AtomicU64::new(1),
            max_bytes: cfg.max_result_bytes,
            list_changed,
            ctx,
            spoken: RwLock::new(Spoken {
                own: UpstreamEra::Modern,
                legacy: None,
            }),
        };
        Ok((conn, abandoned_rx))
    }

    /// A 2024-11-05 HTTP+SSE upstream (`transport = "sse"`): the
    /// connection, its driver (the stream's reader, [`sse_wire::drive`]) and
    /// the receiver of the ids of calls given up on.
    pub fn new_sse(
        (cfg, list_changed, ctx, oauth): Parts<'_>,
    ) -> Result<
        (
            Self,
            impl std::future::Future<Output = String> + Send,
            mpsc::Receiver<u64>,
        ),
        SetupError,
    > {
        let parts = (cfg, list_changed.clone(), ctx.clone(), oauth);
        let (mut conn, _) = HttpConn::new(parts)?;
        let parts = (conn.sender.clone(), conn.url.clone(), conn.headers.clone());
        let (wire, cancel) = sse_wire::SseWire::new(cfg, parts, list_changed, ctx);
        let wire = Arc::new(wire);
        conn.sse = Some(wire.clone());
        Ok((conn, sse_wire::drive(wire), cancel))
    }

    /// Whether it speaks the 2024-11-05 HTTP+SSE transport.
    pub fn is_sse(&self) -> bool {
        self.sse.is_some()
    }

    /// Frees the places of calls abandoned past their timeout (only a
    /// 2024-11-05 upstream's calls hold one after their caller gave up).
    pub fn reclaim_stale(&self) -> usize {
        self.sse.as_ref().map_or(0, |w| w.inflight.reclaim_stale())
    }

    /// Records which of the upstream's tools annotate parameters with
    /// `x-mcp-header` (from its `tools/list`).
    pub fn set_param_headers(&self, tools: &[Value]) {
        use crate::protocol::param_headers::annotations;
        let map = tools
            .iter()
            .filter_map(|t| {
                let name = t.get("name")?.as_str()?;
                let a = annotations(t.get("inputSchema")?).ok()?;
                (!a.is_empty()).then(|| (name.to_string(), a))
            })
            .collect();
        *self.param_headers.write().expect("param_headers lock") = map;
    }

    fn insert_param_headers(&self, h: &mut HeaderMap, params: Option<&Value>) {
        let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
            return;
        };
        let map = self.param_headers.read().expect("param_headers lock");
        let Some(annotated) = map.get(name) else {
            return;
        };
        let args = params.and_then(|p| p.get("arguments"));
        for (header, text) in crate::protocol::param_headers::to_send(annotated, args) {
            if let Ok(n) = HeaderName::from_bytes(header.as_bytes()) {
                h.insert(n, header_safe(&text));
            }
        }
    }

    /// Records the handshake's outcome: its own era, and a dual-era
    /// upstream's legacy version ([`super::handshake::LegacySide`]).
    pub fn spoken(&self, own: UpstreamEra, legacy: Option<crate::protocol::ProtocolVersion>) {
        let legacy = match own {
            UpstreamEra::Legacy(v) => Some(v),
            UpstreamEra::Modern => legacy,
        };
        *self.spoken.write().expect("spoken lock") = Spoken { own, legacy };
    }

    fn spoken_now(&self) -> Spoken {
        *self.spoken.read().expect("spoken lock")
    }

    /// True after a 404 ended the legacy session (cleared by the next `initialize`).
    pub fn session_expired(&self) -> bool {
        self.expired.load(Ordering::Acquire)
    }

    fn build(
        &self,
        method: &str,
        body: &Value,
        era: UpstreamEra,
        params: Option<&Value>,
        lane: Lane,
    ) -> Result<Request<Full<Bytes>>, SendError> {
        let bytes = serde_json::to_vec(body).map_err(|e| SendError::Transport(e.to_string()))?;
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| SendError::Transport(e.to_string()))?;
        let h = req.headers_mut();
        for (k, v) in &self.headers {
            h.insert(k.clone(), v.clone());
        }
        match era {
            UpstreamEra::Modern => {
                h.insert(
                    "mcp-protocol-version",
                    HeaderValue::from_static("2026-07-28"),
                );
                if let Ok(v) = HeaderValue::from_str(method) {
                    if !method.is_empty() {
                        h.insert("mcp-method", v);
                    }
                }
                if let Some(name) = protocol::routed_name(method, params) {
                    h.insert("mcp-name", header_safe(name));
                }
                if method == "tools/call" {
                    self.insert_param_headers(h, params);
                }
            }
            UpstreamEra::Legacy(v) => {
                if method != "initialize" {
                    if v.has_version_header() {
                        h.insert("mcp-protocol-version", HeaderValue::from_static(v.as_str()));
                    }
                    if let Some(s) = self.session_of(lane) {
                        h.insert("mcp-session-id", s);
                    }
                }
            }
        }
        Ok(req)
    }

    /// Sends one request; waits up to `timeout` for the answer.
    pub async fn send(
        &self,
        method: &str,
        params: Option<Value>,
        era: UpstreamEra,
        timeout: Duration,
        relay: Option<Relay>,
        claim: Option<crate::upstream::Claim>,
    ) -> Result<Payload, SendError> {
        let _permit = self.permits.try_acquire().map_err(|_| SendError::Busy)?;
        if let Some(w) = &self.sse {
            return w.send(method, params, timeout, (relay, claim)).await;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = protocol::request(json!(id), method, params);
        // Legacy servers do not take a closed stream as cancellation
        // (2025-11-25 transports.mdx §Sending Messages to the Server: "SHOULD
        // NOT be interpreted as the client cancelling"), so a call given up on
        // is cancelled explicitly (2025-11-25 utilities-cancellation.mdx;
        // never `initialize`). Modern ones treat the closed stream as the
        // cancellation (2026-07-28 patterns-cancellation.mdx §Transport-Specific).
        let deadline = tokio::time::Instant::now() + timeout;
        let lane = match self.lane_for(method, era, relay.as_ref()) {
            Ok(lane) => lane,
            // Boxed: once per lane, and it holds a whole exchange.
            Err((caps, v)) => Box::pin(tokio::time::timeout_at(
                deadline,
                self.open_lane_of(caps, v),
            ))
            .await
            .map_err(|_| SendError::Timeout)??,
        };
        let mut abandon = Abandon {
            to: (matches!(era, UpstreamEra::Legacy(_)) && method != "initialize")
                .then_some(&self.abandoned),
            id,
            lane,
        };
        let sent = self.session_of(lane);
        let req = self.build(method, &msg, era, msg.get("params"), lane)?;
        let exchange = self.exchange(req, method, id, relay.as_ref(), lane, era);
        let outcome = match tokio::time::timeout_at(deadline, exchange).await {
            Ok(Err(SendError::Http { status: 404, .. }))
                if sent.is_some() && method != "initialize" =>
            {
                if lane == Lane::MAIN {
                    // The caller re-initializes and retries.
                    self.expired.store(true, Ordering::Release);
                    return Err(SendError::SessionExpired);
                }
                // A caller's lane is opened again and the request sent once
                // more (2025-11-25 transports.mdx §Session Management, item 4).
                // Boxed: rare, and it holds two more exchanges.
                let again = self.resend_in_lane(lane, sent, &msg, era, relay.as_ref());
                Box::pin(tokio::time::timeout_at(deadline, again)).await
            }
            other => other,
        };
        if outcome.is_ok() {
            abandon.to = None; // answered (or failed): nothing left to cancel
        }
        outcome.unwrap_or(Err(SendError::Timeout))
    }

    /// [`HttpConn::send`] of `msg` again in `lane` after its session
    /// `ended` (404): opened again first (unless a concurrent call did).
    async fn resend_in_lane(
        &self,
        lane: Lane,
        ended: Option<HeaderValue>,
        msg: &Value,
        era: UpstreamEra,
        relay: Option<&Relay>,
    ) -> Result<Payload, SendError> {
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        let id = msg.get("id").and_then(Value::as_u64).unwrap_or(0);
        self.reopen_lane(lane, ended, era).await?;
        let req = self.build(method, msg, era, msg.get("params"), lane)?;
        self.exchange(req, method, id, relay, lane, era).await
    }

    /// The session id `lane` sends with, if open.
    fn session_of(&self, lane: Lane) -> Option<HeaderValue> {
        if lane == Lane::MAIN {
            self.session.read().expect("session lock").clone()
        } else {
            self.lanes.open_session(lane)
        }
    }

    /// Sends one notification (expects 202 Accepted).
    pub async fn notify(
        &self,
        method: &str,
        params: Option<Value>,
        era: UpstreamEra,
    ) -> Result<(), SendError> {
        let msg = protocol::notification(method, params);
        if let Some(w) = &self.sse {
            return w.post(&msg).await;
        }
        self.post_expecting_no_answer(self.build(method, &msg, era, None, Lane::MAIN)?)
            .await
    }

    /// Re-runs `initialize` + `notifications/initialized` in `era` (the
    /// legacy version negotiated before) after the session expired (404).
    /// A no-op when another caller already did it.
    pub async fn reinitialize(&self, era: UpstreamEra) -> Result<(), SendError> {
        if !self.session_expired() {
            return Ok(()); // another caller already re-initialized
        }
        let UpstreamEra::Legacy(v) = era else {
            return Err(SendError::Transport("404 from a modern upstream".into()));
        };
        let params = super::era::initialize_params(v, protocol::ClientCaps::RELAYED);
        self.send(
            "initialize",
            Some(params),
            era,
            crate::limits::CONNECT_TIMEOUT,
            None,
            None,
        )
        .await?;
        self.notify("notifications/initialized", None, era).await
    }

    /// Tells the upstream to stop working on call `id`: `notifications/cancelled`
    /// (2025-11-25 utilities-cancellation.mdx §Cancellation Flow) in the
    /// legacy session of `lane`, where the call went.
    pub async fn cancel(&self, id: u64, lane: Lane) -> Result<(), SendError> {
        let era = self.spoken_now().sessions();
        let reason = "the downstream caller gave up (timeout or disconnect)";
        let msg = protocol::notification(
            "notifications/cancelled",
            Some(json!({"requestId": id, "reason": reason})),
        );
        if let Some(w) = &self.sse {
            return w.post(&msg).await;
        }
        self.post_expecting_no_answer(self.build(
            "notifications/cancelled",
            &msg,
            era,
            None,
            lane,
        )?)
        .await
    }

    /// POSTs `req` (sent in `era`, in the session of `lane`) and reads its
    /// answer: the response to `id` in a JSON body or an SSE stream
    /// (relaying what comes before it).
    async fn exchange(
        &self,
        req: Request<Full<Bytes>>,
        method: &str,
        id: u64,
        relay: Option<&Relay>,
        lane: Lane,
        era: UpstreamEra,
    ) -> Result<Payload, SendError> {
        let resp = self.authorized(req).await?;
        let status = resp.status();
        refused(&resp)?;
        if method == "initialize" && status.is_success() {
            if let Some(s) = resp.headers().get("mcp-session-id") {
                if lane == Lane::MAIN {
                    *self.session.write().expect("session lock") = Some(s.clone());
                    self.expired.store(false, Ordering::Release);
                } else {
                    self.lanes.set_session(lane, Some(s.clone()));
                }
            }
        }
        let sse = is_sse(resp.headers());
        if sse && status.is_success() {
            self.read_sse_answer(resp.into_body(), id, relay, (lane, era))
                .await
        } else {
            let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
            (self.read_json_answer(resp.into_body(), status, content_type.as_ref())).await
        }
    }

    /// POSTs a JSON-RPC response (to a request the upstream sent) in the
    /// session of `lane`, where the request came from (in the modern era
    /// when it came on a stateless request's stream).
    pub async fn respond(&self, msg: &Value, lane: Lane) -> Result<(), SendError> {
        if let Some(w) = &self.sse {
            return w.post(msg).await;
        }
        let era = match lane {
            Lane::STATELESS => UpstreamEra::Modern,
            _ => self.spoken_now().sessions(),
        };
        self.post_expecting_no_answer(self.build("", msg, era, None, lane)?)
            .await
    }

    /// POSTs a notification or response: any 2xx (202 Accepted) is success.
    async fn post_expecting_no_answer(&self, req: Request<Full<Bytes>>) -> Result<(), SendError> {
        let resp = self.authorized(req).await?;
        let status = resp.status();
        let _ = resp.into_body().collect().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(SendError::Http {
                status: status.as_u16(),
                rpc: None,
            })
        }
    }
}
