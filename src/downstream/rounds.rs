//! A modern (2026-07-28) caller's call that its upstream may send messages
//! during: `tools/call`, `prompts/get`, `resources/read` (and
//! `completion/complete`, which can only be sent notifications).
//!
//! - **Server→client requests become rounds** (`../shared/spec/2026-07-28/
//!   patterns-mrtr.mdx`): a legacy upstream's `elicitation/create`,
//!   `sampling/createMessage` or `roots/list` during the call ends this
//!   request with an `InputRequiredResult` (`inputRequests`, and a
//!   `requestState` signed by [`super::parked`]); the upstream call stays
//!   parked, unpolled, in [`super::parked::ParkedCalls`]. The caller's retry
//!   (same method and name/uri, with `inputResponses` and that state) takes
//!   it back, answers the upstream's request(s) and goes on polling the same
//!   upstream call: its result, or the next round. Only for capabilities the
//!   caller declared in `_meta["io.modelcontextprotocol/clientCapabilities"]`
//!   (§Server Requirements, item 7); otherwise the upstream's request is
//!   refused and the caller gets -32021 with `data.requiredCapabilities`
//!   (`index.mdx` §_meta). A missing answer is asked again (§Error Handling).
//! - **The head waits for the outcome**: nothing is sent until the call
//!   relays its first notification (then an SSE stream opens, if the caller
//!   takes one) or ends; an error that has its own HTTP status in this era
//!   ([`super::modern::error_status`]: 400, 404) is answered as JSON with
//!   it, never inside a 200 stream (`transports-streamable-http.mdx`).
//! - A parked call that is not resumed within [`crate::limits::PARKED_CALL_TTL`]
//!   is dropped by [`expire`] (the sweep of the gateway root): its upstream's
//!   requests are answered with an error, and dropping the call cancels it
//!   upstream.

use super::admission::Call;
use super::app::{App, Who};
use super::call::{dispatch, finish_audited, observe, Pending};
use super::parked::{self, Asked, Identity, NotParked, StateError};
use super::reply::{Answer, Outcome};
use crate::limits;
use crate::protocol::{self, Payload, RpcError};
use crate::relay::{Event, Running};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::time::Instant;

/// The methods that may end in an `InputRequiredResult`
/// (patterns-mrtr.mdx §Supported Requests).
pub fn asks_input(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

/// The server→client requests a round can carry, and the capability each
/// needs (2026-07-28 schema.json `InputRequest`, `ClientCapabilities`).
fn capability(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// One request (round) being served.
struct Round {
    app: Arc<App>,
    id: Value,
    method: String,
    who: Who,
    /// `_meta["io.modelcontextprotocol/clientCapabilities"]` of this request.
    caps: Value,
    identity: Identity,
    audit: Option<Box<Pending>>,
    t0: Instant,
    running: Option<Running>,
    /// The input requests of the round being gathered ([`Round::on_event`]).
    gathering: Option<Gathering>,
}

/// Input requests that arrived together, to be asked in one round.
struct Gathering {
    asked: Vec<Asked>,
    /// When the window closes.
    until: Instant,
}

/// What the call produced for the caller.
enum Step {
    /// A notification to relay.
    Note(Value),
    /// The round's answer (the call ended, or is parked).
    Final(Answer),
}

/// Serves a modern request: a new call, or the retry of a parked one.
pub(super) async fn serve(app: &Arc<App>, req: Call, stream_ok: bool) -> Outcome {
    let _busy = app.in_flight.enter();
    let params = req.params;
    let who = req.caller.who;
    let meta = protocol::params_meta(params.as_ref());
    let caps = meta
        .and_then(|m| m.get(protocol::META_CLIENT_CAPABILITIES))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut round = Round {
        app: app.clone(),
        identity: identity(
            &req.method,
            protocol::routed_name(&req.method, params.as_ref()),
        ),
        audit: Pending::start(
            app,
            &req.method,
            params.as_ref(),
            None,
            &who,
            req.request_bytes,
        ),
        id: req.id,
        method: req.method,
        who,
        caps,
        t0: Instant::now(),
        running: None,
        gathering: None,
    };
    let state = (params.as_ref())
        .and_then(|p| p.get("requestState"))
        .and_then(Value::as_str)
        .filter(|s| asks_input(&round.method) && s.starts_with(parked::STATE_PREFIX));
    let first = match state {
        Some(s) => {
            let s = s.to_string();
            round.resume(&s, params.as_ref()).await
        }
        None => {
            round.start(params);
            None
        }
    };
    if let Some(answer) = first {
        return Outcome::Answer(answer);
    }
    // The head waits for the first notification or the outcome (so an
    // error with a status of its own is sent with it), but at most one
    // keep-alive period: a long call then streams keep-alives, which
    // proxies with a read timeout need.
    let hold_until = Instant::now() + app.server.keepalive;
    loop {
        let event = if stream_ok {
            // `next_event` is cancel-safe: a timeout loses nothing.
            match tokio::time::timeout_at(hold_until, round.next_event()).await {
                Ok(e) => e,
                Err(_) => return Outcome::Stream(round.stream(None)),
            }
        } else {
            round.next_event().await
        };
        match round.on_event(event).await {
            Some(Step::Note(m)) if stream_ok => return Outcome::Stream(round.stream(Some(m))),
            Some(Step::Note(_)) | None => {} // a JSON answer carries no notifications
            Some(Step::Final(a)) => return Outcome::Answer(a),
        }
    }
}

/// The identity of a round of `method` on `name` (SHA-256, truncated),
/// what its parked state is bound to ([`parked::Identity`]).
fn identity(method: &str, name: Option<&str>) -> Identity {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(method.as_bytes());
    ctx.update(&[0]);
    ctx.update(name.unwrap_or("").as_bytes());
    let d = ctx.finish();
    let mut out = [0u8; parked::ID_LEN];
    out.copy_from_slice(&d.as_ref()[..parked::ID_LEN]);
    out
}

/// Distinguishes the keys parked calls' requests wait under.
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

impl Round {
    /// Starts the upstream call, relaying what its upstream sends during it.
    fn start(&mut self, params: Option<Value>) {
        let key = asks_input(&self.method)
            .then(|| format!("mrtr:{}", NEXT_KEY.fetch_add(1, Ordering::Relaxed)));
        let floor = protocol::params_meta(params.as_ref())
            .and_then(|m| m.get("io.modelcontextprotocol/logLevel"))
            .and_then(Value::as_str)
            .and_then(crate::relay::log_rank);
        let (relay, rx) = crate::relay::Relay::new(key.clone(), self.app.server.sse_queue_depth);
        let declared = protocol::ClientCaps::parse(Some(&self.caps));
        let relay = relay.with_log_floor(floor).with_declared(declared);
        let (app, who, method) = (self.app.clone(), self.who.clone(), self.method.clone());
        let call =
            Box::pin(async move { dispatch(&app, &method, params, true, Some(relay), &who).await });
        self.running = Some(Running {
            call,
            rx,
            done: None,
            key,
            started: Instant::now(),
            audit: None,
        });
    }

    /// The retry of a parked call: verifies its state, answers the parked
    /// requests with the caller's `inputResponses` and takes the call back;
    /// `Some` when this round is answered at once (a refused state, or
    /// answers still missing: asked again).
    async fn resume(&mut self, state: &str, params: Option<&Value>) -> Option<Answer> {
        let responses = match input_responses(params) {
            Ok(r) => r,
            Err(e) => return Some(self.end(Err(e))),
        };
        let owner = self.who.owner();
        let taken = (self.app.parked).resume(state, owner, self.identity, Instant::now());
        let mut parked = match taken {
            Ok(p) => p,
            Err(e) => {
                let code = match e {
                    StateError::NoKey => protocol::INTERNAL_ERROR,
                    _ => protocol::INVALID_PARAMS,
                };
                let mut error = RpcError::new(code, e.to_string());
                if let StateError::OtherBox { issued, here } = e {
                    error = error.with_data(crate::instance::elsewhere("", issued, here).1);
                }
                return Some(self.end(Err(error)));
            }
        };
        let key = parked.running.key.clone();
        let mut missing = Vec::new();
        for a in std::mem::take(&mut parked.asked) {
            match responses.get(&a.key) {
                Some(r) => answer_upstream(&self.app, &a.id, key.as_deref(), Ok(r.clone())).await,
                None => missing.push(a),
            }
        }
        if missing.is_empty() {
            self.running = Some(parked.running);
            return None;
        }
        Some(self.park(parked.running, missing).await)
    }

    /// Polls the call until it has something for the caller.
    async fn step(&mut self) -> Step {
        loop {
            let event = self.next_event().await;
            if let Some(step) = self.on_event(event).await {
                return step;
            }
        }
    }

    /// The call's next event; `None` when the round being gathered is
    /// complete (its window closed, or it is full). Cancel-safe.
    async fn next_event(&mut self) -> Option<Event> {
        let running = self.running.as_mut().expect("a running call");
        let Some(g) = &self.gathering else {
            return Some(running.next().await);
        };
        if g.asked.len() >= limits::MRTR_ROUND_REQUESTS {
            return None;
        }
        tokio::time::timeout_at(g.until, running.next()).await.ok()
    }

    /// What one event of the call (or the end of a gathered round, `None`)
    /// means for the caller; `None` when it was handled here (a request
    /// answered without asking the caller, or one joining the round).
    ///
    /// Server→client requests that arrive together are asked in one round:
    /// after the first, those arriving within [`limits::MRTR_GATHER_WINDOW`]
    /// (at most [`limits::MRTR_ROUND_REQUESTS`]) join its
    /// `InputRequiredResult`, as a modern server asks for several inputs at
    /// once (patterns-mrtr.mdx §InputRequiredResult: `inputRequests` is a
    /// map); notifications meanwhile are relayed as usual.
    async fn on_event(&mut self, event: Option<Event>) -> Option<Step> {
        let event = match event {
            Some(e) => e,
            None => {
                let asked = self.gathering.take().map(|g| g.asked).unwrap_or_default();
                let running = self.running.take().expect("a running call");
                return Some(Step::Final(self.park(running, asked).await));
            }
        };
        match event {
            Event::Note(m) => Some(Step::Note(m)),
            Event::Done(out) => Some(Step::Final(self.finish(out).await)),
            Event::Asks(m) => match self.asked(m).await {
                None => None,
                Some(Ok(a)) => {
                    let until = Instant::now() + limits::MRTR_GATHER_WINDOW;
                    let g = self.gathering.get_or_insert(Gathering {
                        asked: Vec::new(),
                        until,
                    });
                    g.asked.push(a);
                    None
                }
                Some(Err(e)) => Some(Step::Final(self.finish(Err(e)).await)),
            },
        }
    }

    /// Ends the call with `outcome` (it ended, or cannot go on): input
    /// requests gathered for the next round are refused upstream, and the
    /// call is dropped (which cancels it upstream if it still runs).
    async fn finish(&mut self, outcome: Result<Payload, RpcError>) -> Answer {
        let running = self.running.take();
        if let Some(g) = self.gathering.take() {
            let key = running.as_ref().and_then(|r| r.key.clone());
            let why = match &outcome {
                Ok(_) => "mcp-edge: the call ended before its caller was asked".to_string(),
                Err(e) => format!("mcp-edge: {}", e.message),
            };
            for a in &g.asked {
                let e = RpcError::new(protocol::INTERNAL_ERROR, why.clone());
                answer_upstream(&self.app, &a.id, key.as_deref(), Err(e)).await;
            }
        }
        drop(running);
        self.end(outcome)
    }

    /// A server→client request of the upstream: `Some(Ok)` to ask the
    /// caller; `Some(Err)` when the caller did not declare the capability it
    /// needs (the upstream is refused, the call ends); `None` when answered
    /// here (`ping`, or a request no modern caller can be asked).
    /// (Takes `&mut self`: a shared borrow would need `Round: Sync`, which
    /// its call is not.)
    async fn asked(&mut self, m: Value) -> Option<Result<Asked, RpcError>> {
        let id = m.get("id").cloned().unwrap_or(Value::Null);
        let method = m.get("method").and_then(Value::as_str).unwrap_or("");
        let params = m.get("params").cloned();
        let key = self.running.as_mut().and_then(|r| r.key.clone());
        let Some(cap) = capability(method) else {
            let reply = match method {
                "ping" => Ok(json!({})),
                _ => Err(RpcError::new(
                    protocol::METHOD_NOT_FOUND,
                    format!("mcp-edge cannot ask a modern (2026-07-28) caller {method}"),
                )),
            };
            answer_upstream(&self.app, &id, key.as_deref(), reply).await;
            return None;
        };
        if let Some(required) = missing_capability(&self.caps, cap, params.as_ref()) {
            let refusal = RpcError::new(
                protocol::METHOD_NOT_FOUND,
                format!("the downstream client did not declare the {cap} capability"),
            );
            answer_upstream(&self.app, &id, key.as_deref(), Err(refusal)).await;
            let e = RpcError::new(
                protocol::MISSING_CLIENT_CAPABILITY,
                format!("Missing required client capability: the upstream asked for {method}, which needs the {cap} capability in _meta[\"{}\"]", protocol::META_CLIENT_CAPABILITIES),
            )
            .with_data(json!({"requiredCapabilities": required}));
            return Some(Err(e));
        }
        let mut request = json!({"method": method});
        if let Some(p) = params {
            request["params"] = p;
        }
        Some(Ok(Asked {
            // Unique within the request: the relay's slot and generation.
            key: format!("{cap}-{}", id_suffix(&id)),
            id,
            request,
        }))
    }

    /// Parks `running` until the caller answers `asked`; the round's answer
    /// is the `InputRequiredResult`, or an error when the table is full.
    async fn park(&mut self, mut running: Running, asked: Vec<Asked>) -> Answer {
        running.audit = self.audit.as_ref().and_then(|a| a.parked());
        let requests: Map<String, Value> = (asked.iter())
            .map(|a| (a.key.clone(), a.request.clone()))
            .collect();
        let owner = self.who.owner();
        let table = &self.app.parked;
        let mut tried = table.park(running, asked, owner, self.identity, Instant::now());
        if let Err(NotParked { parked, full: true }) = tried {
            // Expired calls the sweep has not reached yet make room.
            expire(&self.app, Instant::now()).await;
            tried = table.park(
                parked.running,
                parked.asked,
                owner,
                self.identity,
                Instant::now(),
            );
        }
        match tried {
            Ok(state) => {
                metrics::gauge!(crate::metrics::PARKED_CALLS).set(table.len() as f64);
                self.end(Ok(json!({"resultType": "input_required",
                    "inputRequests": requests, "requestState": state})
                .into()))
            }
            Err(NotParked { parked, full }) => {
                let e = if full {
                    crate::metrics::refused("parked_calls");
                    RpcError::new(protocol::PARKED_CALLS_FULL, format!(
                        "mcp-edge cannot take this call's input: all {} places for calls waiting for a client's inputResponses are taken; retry later",
                        table.capacity()))
                    .with_data(json!({"limit": "parked_calls", "capacity": table.capacity()}))
                } else {
                    RpcError::new(protocol::INTERNAL_ERROR, StateError::NoKey.to_string())
                };
                refuse_parked(&self.app, parked, &e.message).await;
                self.end(Err(e))
            }
        }
    }

    /// The round's answer, framed for a modern caller and audited.
    fn end(&mut self, outcome: Result<Payload, RpcError>) -> Answer {
        observe(&self.method, self.t0);
        let id = std::mem::take(&mut self.id);
        finish_audited(
            self.audit.take(),
            id,
            &self.method,
            true,
            outcome,
            &self.who,
        )
    }

    /// The rest of the round as an SSE stream: `first` (if any), the
    /// call's further notifications, then its answer.
    fn stream(mut self, first: Option<Value>) -> http::Response<super::app::Body> {
        let keepalive = self.app.server.keepalive;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        if let Some(first) = first {
            let _ = tx.try_send(crate::relay::Relayed::Message(first));
        }
        let fut = Box::pin(async move {
            let app = self.app.clone();
            let _busy = app.in_flight.enter();
            loop {
                match self.step().await {
                    Step::Note(m) => {
                        let _ = tx.send(crate::relay::Relayed::Message(m)).await;
                    }
                    Step::Final(a) => return a.response,
                }
            }
        });
        super::reply::relay_stream(rx, fut, keepalive)
    }
}

/// The distinct part of a relayed request's id (`mcp-edge:<up>:<slot>:<gen>`).
fn id_suffix(id: &Value) -> String {
    match id.as_str() {
        Some(s) => s.trim_start_matches("mcp-edge:").replace(':', "."),
        None => id.to_string(),
    }
}

/// The retry's `inputResponses`: an object of objects (2026-07-28
/// schema.json `InputResponses`), or absent.
fn input_responses(params: Option<&Value>) -> Result<Map<String, Value>, RpcError> {
    let bad = |why: &str| RpcError::new(protocol::INVALID_PARAMS, format!("Invalid params: {why}"));
    match params.and_then(|p| p.get("inputResponses")) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(o)) => match o.iter().find(|(_, v)| !v.is_object()) {
            Some((k, _)) => Err(bad(&format!(
                "inputResponses[\"{k}\"] must be a result object"
            ))),
            None => Ok(o.clone()),
        },
        Some(_) => Err(bad("inputResponses must be an object")),
    }
}

/// The `requiredCapabilities` a request of capability `cap` with `params`
/// needs and `caps` lacks; `None` when declared. Elicitation: `{}` or
/// `form` allows form mode, `url` URL mode (2025-11-25 client/elicitation.mdx
/// §Capabilities); sampling with `tools` needs `sampling.tools`.
fn missing_capability(caps: &Value, cap: &str, params: Option<&Value>) -> Option<Value> {
    let declared = caps.get(cap).filter(|v| v.is_object());
    let sub = match cap {
        "elicitation" => {
            let mode = params.and_then(|p| p.get("mode")).and_then(Value::as_str);
            Some(if mode == Some("url") { "url" } else { "form" })
        }
        "sampling" if params.is_some_and(|p| p.get("tools").is_some()) => Some("tools"),
        _ => None,
    };
    let ok = match (declared, sub) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(d), Some("form")) => d
            .as_object()
            .is_some_and(|o| o.is_empty() || o.contains_key("form")),
        (Some(d), Some(s)) => d.get(s).is_some(),
    };
    if ok {
        return None;
    }
    // `{}` declares form elicitation: the least a caller must add.
    Some(match sub {
        Some(s) if s != "form" => json!({ cap: { s: {} } }),
        _ => json!({ cap: {} }),
    })
}

/// Answers the upstream's request `id` (minted by the relay) for the call
/// whose requests wait under `key`. Bounded in time: a stuck upstream does
/// not hold the round or the sweep.
async fn answer_upstream(
    app: &App,
    id: &Value,
    key: Option<&str>,
    outcome: Result<Value, RpcError>,
) {
    let (Some((up, slot, generation)), Some(key)) = (crate::relay::parse_downstream_id(id), key)
    else {
        return;
    };
    let Some(upstream) = app.router.by_id(up) else {
        return;
    };
    let answered = upstream.answer_relayed(slot, generation, key, outcome);
    match tokio::time::timeout(crate::limits::PARKED_ANSWER_TIMEOUT, answered).await {
        Ok(true) => {}
        _ => {
            // Debug: after the upstream's call_timeout its request is gone
            // on its side too, so every expiry would log one line per call.
            tracing::debug!(upstream = %upstream.name(), "an answer to a parked call's request did not reach its upstream")
        }
    }
}

/// Refuses every request `parked` waits on (`why`) and drops the call,
/// which cancels it upstream.
async fn refuse_parked(app: &App, parked: parked::Parked, why: &str) {
    let key = parked.running.key.clone();
    for a in &parked.asked {
        let e = RpcError::new(protocol::INTERNAL_ERROR, format!("mcp-edge: {why}"));
        answer_upstream(app, &a.id, key.as_deref(), Err(e)).await;
    }
    drop(parked);
}

/// Drops the parked calls whose time is up at `now`: their upstreams'
/// requests are answered with an error, the calls cancelled upstream, their
/// places freed. Run by the gateway root's sweep; returns how many.
pub async fn expire(app: &App, now: Instant) -> usize {
    let gone = app.parked.expire(now);
    let n = gone.len();
    let why = format!(
        "the modern caller did not retry within {:?}; the call is cancelled",
        app.parked.ttl()
    );
    // Answered together, not one after another: a stuck upstream costs
    // one PARKED_ANSWER_TIMEOUT per sweep, not one per call.
    let refusals = gone.into_iter().map(|mut p| {
        // Audited as such: the round before it ended in input_required.
        if let Some(expiry) = p.running.audit.take() {
            expiry.expired();
        }
        refuse_parked(app, p, &why)
    });
    futures_util::future::join_all(refusals).await;
    if n > 0 {
        metrics::gauge!(crate::metrics::PARKED_CALLS).set(app.parked.len() as f64);
    }
    n
}
