//! The streamable-HTTP client transport, on hyper with rustls (ring provider).
//!
//! Each request is one POST answered by JSON or an SSE stream
//! (`../shared/spec/2026-07-28/transports-streamable-http.mdx` §Sending Messages,
//! §Receiving Messages). Legacy upstreams keep the `Mcp-Session-Id` the
//! `initialize` answer carried (`../shared/spec/2025-11-25/transports.mdx`
//! §Session Management); modern ones get `MCP-Protocol-Version`, `Mcp-Method`
//! and `Mcp-Name` headers (§Request Metadata).

mod notifications;
mod wire;
pub use notifications::NotificationsEnd;
use wire::{chain, is_sse, read_body, refused};
pub use wire::{header_safe, parse_retry_after};

use super::era::UpstreamEra;
use super::relay::{relay_request, Relay, RelayCtx};
use super::SendError;
use crate::config::{Transport, UpstreamConfig};
use crate::protocol::{self, sse, Message, Payload, RawResult, RpcError};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
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
    client: HttpsClient,
    url: Uri,
    /// `url` as shown in errors and logs: credentials masked
    /// ([`crate::config::mask_url`]).
    shown_url: String,
    headers: HeaderMap,
    session: RwLock<Option<HeaderValue>>,
    expired: std::sync::atomic::AtomicBool,
    permits: Semaphore,
    next_id: AtomicU64,
    max_bytes: usize,
    list_changed: Arc<Notify>,
    ctx: RelayCtx,
    era: RwLock<UpstreamEra>,
    /// Ids of legacy-era calls given up on (timeout, caller gone), for the
    /// owner task to send `notifications/cancelled` (bounded: `max_in_flight`).
    abandoned: mpsc::Sender<u64>,
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

/// Queues a legacy call's id for `notifications/cancelled` unless disarmed:
/// dropped with the call's future (caller gone) or left armed by a timeout.
struct Abandon<'a> {
    to: Option<&'a mpsc::Sender<u64>>,
    id: u64,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if let Some(to) = self.to {
            // Closed: the connection was replaced; its session (and the
            // work on it) is gone with it.
            if let Err(mpsc::error::TrySendError::Full(_)) = to.try_send(self.id) {
                metrics::counter!(crate::metrics::REFUSED, "limit" => "cancellations").increment(1);
            }
        }
    }
}

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
        cfg: &UpstreamConfig,
        list_changed: Arc<Notify>,
        ctx: RelayCtx,
    ) -> Result<(Self, mpsc::Receiver<u64>), SetupError> {
        let Transport::Http {
            url,
            headers,
            bearer_token_file,
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
        let conn = HttpConn {
            abandoned,
            param_headers: RwLock::new(Default::default()),
            listen_uris: std::sync::Mutex::new(Vec::new()),
            relisten: Notify::new(),
            client: https_client()?,
            url,
            shown_url,
            headers: map,
            session: RwLock::new(None),
            expired: false.into(),
            permits: Semaphore::new(cfg.max_in_flight),
            next_id: AtomicU64::new(1),
            max_bytes: cfg.max_result_bytes,
            list_changed,
            ctx,
            era: RwLock::new(UpstreamEra::Modern),
        };
        Ok((conn, abandoned_rx))
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
                    if v != crate::protocol::ProtocolVersion::V2025_03_26 {
                        h.insert("mcp-protocol-version", HeaderValue::from_static(v.as_str()));
                    }
                    if let Some(s) = self.session.read().expect("session lock").clone() {
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
    ) -> Result<Payload, SendError> {
        let _permit = self.permits.try_acquire().map_err(|_| SendError::Busy)?;
        *self.era.write().expect("era lock") = era;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = protocol::request(json!(id), method, params);
        let req = self.build(method, &msg, era, msg.get("params"))?;
        let had_session = self.session.read().expect("session lock").is_some();
        // Legacy servers do not take a closed stream as cancellation
        // (2025-11-25 transports.mdx §Sending Messages to the Server: "SHOULD
        // NOT be interpreted as the client cancelling"), so a call given up on
        // is cancelled explicitly (2025-11-25 utilities-cancellation.mdx;
        // never `initialize`). Modern ones treat the closed stream as the
        // cancellation (2026-07-28 patterns-cancellation.mdx §Transport-Specific).
        let mut abandon = Abandon {
            to: (matches!(era, UpstreamEra::Legacy(_)) && method != "initialize")
                .then_some(&self.abandoned),
            id,
        };
        let outcome =
            tokio::time::timeout(timeout, self.exchange(req, method, id, relay.as_ref())).await;
        if outcome.is_ok() {
            abandon.to = None; // answered (or failed): nothing left to cancel
        }
        match outcome {
            Err(_) => Err(SendError::Timeout),
            Ok(Err(SendError::Http { status: 404, .. }))
                if had_session && method != "initialize" =>
            {
                self.expired.store(true, Ordering::Release);
                Err(SendError::SessionExpired)
            }
            Ok(r) => r,
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
        self.post_expecting_no_answer(self.build(method, &msg, era, None)?)
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
        let params = super::era::initialize_params(v);
        self.send(
            "initialize",
            Some(params),
            era,
            crate::limits::CONNECT_TIMEOUT,
            None,
        )
        .await?;
        self.notify("notifications/initialized", None, era).await
    }

    /// Tells the upstream to stop working on call `id`: `notifications/cancelled`
    /// (2025-11-25 utilities-cancellation.mdx §Cancellation Flow) on the
    /// current legacy session.
    pub async fn cancel(&self, id: u64) -> Result<(), SendError> {
        let era = *self.era.read().expect("era lock");
        self.notify(
            "notifications/cancelled",
            Some(json!({"requestId": id, "reason": "the downstream caller gave up (timeout or disconnect)"})),
            era,
        )
        .await
    }

    /// POSTs `req` and reads its answer: the response to `id` in a JSON
    /// body or an SSE stream (relaying what comes before it).
    async fn exchange(
        &self,
        req: Request<Full<Bytes>>,
        method: &str,
        id: u64,
        relay: Option<&Relay>,
    ) -> Result<Payload, SendError> {
        let resp =
            self.client.request(req).await.map_err(|e| {
                SendError::Transport(format!("POST {}: {}", self.shown_url, chain(&e)))
            })?;
        let status = resp.status();
        refused(&resp)?;
        if method == "initialize" && status.is_success() {
            if let Some(s) = resp.headers().get("mcp-session-id") {
                *self.session.write().expect("session lock") = Some(s.clone());
                self.expired.store(false, Ordering::Release);
            }
        }
        let sse = is_sse(resp.headers());
        let body = resp.into_body();
        if sse && status.is_success() {
            self.read_sse_answer(body, id, relay).await
        } else {
            self.read_json_answer(body, status).await
        }
    }

    /// Reads an SSE answer until the response to `id` (messages before it
    /// go to [`HttpConn::on_message`]); the response ends the request
    /// (dropping the body closes the stream).
    async fn read_sse_answer(
        &self,
        mut body: Incoming,
        id: u64,
        relay: Option<&Relay>,
    ) -> Result<Payload, SendError> {
        let mut dec = sse::Decoder::new(self.max_bytes);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| SendError::Transport(format!("SSE body: {e}")))?;
            let Some(data) = frame.data_ref() else {
                continue;
            };
            let mut events = Vec::new();
            dec.push(data, &mut |e| events.push(e))
                .map_err(|_| SendError::TooLarge)?;
            for e in events {
                // Nothing after the response is awaited.
                if let Some(r) = self.on_message(e, id, relay).await {
                    return r.map_err(SendError::Rpc);
                }
            }
        }
        Err(SendError::Transport(
            "SSE stream ended without a response".into(),
        ))
    }

    /// Reads a JSON answer (at most `max_result_bytes`): the JSON-RPC
    /// response, or the error a non-2xx `status` (and its body) means.
    async fn read_json_answer(
        &self,
        body: Incoming,
        status: StatusCode,
    ) -> Result<Payload, SendError> {
        let bytes = read_body(body, self.max_bytes).await?;
        if status.is_success() {
            if let Some((_, range, top)) = protocol::split_response(&bytes) {
                return Ok(Payload::Raw(RawResult::scanned(bytes.slice(range), top)));
            }
        }
        let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
        if !status.is_success() {
            let rpc = parsed
                .as_ref()
                .and_then(|v| v.get("error"))
                .map(RpcError::from_json);
            return Err(SendError::Http {
                status: status.as_u16(),
                rpc,
            });
        }
        let v = parsed.ok_or_else(|| SendError::Transport("response body is not JSON".into()))?;
        match protocol::classify(v) {
            Ok(Message::Response { outcome: Ok(r), .. }) => Ok(Payload::Tree(r)),
            Ok(Message::Response {
                outcome: Err(e), ..
            }) => Err(SendError::Rpc(e)),
            _ => Err(SendError::Transport(
                "response is not a JSON-RPC response".into(),
            )),
        }
    }

    /// Handles one SSE message; returns the outcome if it is the response to
    /// `id`. Notifications go to the call's relay; server→client requests are
    /// relayed to a legacy caller or refused.
    async fn on_message(
        &self,
        data: String,
        id: u64,
        relay: Option<&Relay>,
    ) -> Option<Result<Payload, RpcError>> {
        if let Some((n, range, top)) = protocol::split_response(data.as_bytes()) {
            if n == id {
                let bytes = Bytes::from(data).slice(range);
                return Some(Ok(Payload::Raw(RawResult::scanned(bytes, top))));
            }
        }
        let v: Value = serde_json::from_str(&data).ok()?;
        match protocol::classify(v) {
            Ok(Message::Response { id: rid, outcome }) if rid.as_u64() == Some(id) => {
                Some(outcome.map(Payload::Tree))
            }
            Ok(Message::Notification { method, .. }) if method.ends_with("/list_changed") => {
                self.list_changed.notify_one();
                None
            }
            Ok(Message::Notification { method, params })
                if method == "notifications/resources/updated" =>
            {
                self.ctx.resource_updated(params.as_ref());
                None
            }
            Ok(Message::Notification { method, params }) => {
                if let Some(r) = relay {
                    r.forward(protocol::notification(&method, params));
                }
                None
            }
            Ok(Message::Request {
                id: rid,
                method,
                params,
            }) => {
                if relay_request(&self.ctx, relay.cloned(), &rid, &method, params).is_none() {
                    let reply = match method.as_str() {
                        "ping" => protocol::result_response(rid, json!({})),
                        _ => protocol::error_response(
                            rid,
                            &RpcError::new(
                                protocol::METHOD_NOT_FOUND,
                                format!("mcp-edge has no client to relay {method} to"),
                            ),
                        ),
                    };
                    let _ = self.respond(&reply).await;
                }
                None
            }
            Ok(Message::Response { .. }) => {
                // An answer to no call of this stream: counted, not logged.
                metrics::counter!(crate::metrics::REFUSED, "limit" => "unknown_id").increment(1);
                None
            }
            _ => None,
        }
    }

    /// POSTs a JSON-RPC response (to a request the upstream sent) in the session.
    pub async fn respond(&self, msg: &Value) -> Result<(), SendError> {
        let era = *self.era.read().expect("era lock");
        self.post_expecting_no_answer(self.build("", msg, era, None)?)
            .await
    }

    /// POSTs a notification or response: any 2xx (202 Accepted) is success.
    async fn post_expecting_no_answer(&self, req: Request<Full<Bytes>>) -> Result<(), SendError> {
        let resp =
            self.client.request(req).await.map_err(|e| {
                SendError::Transport(format!("POST {}: {}", self.shown_url, chain(&e)))
            })?;
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

    /// Ends the legacy session with DELETE (2025-11-25 transports.mdx §Session Management).
    pub async fn close(&self) {
        let Some(s) = self.session.write().expect("session lock").take() else {
            return;
        };
        let mut req = Request::builder()
            .method(Method::DELETE)
            .uri(self.url.clone())
            .header("mcp-session-id", s)
            .body(Full::new(Bytes::new()))
            .expect("static request");
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let _ = tokio::time::timeout(
            crate::limits::SESSION_DELETE_TIMEOUT,
            self.client.request(req),
        )
        .await;
    }
}
