//! `subscriptions/listen`: the modern era's notification stream
//! (`../shared/spec/2026-07-28/patterns-subscriptions.mdx`).
//!
//! A modern client POSTs `subscriptions/listen` with a `notifications`
//! filter; the answer is an SSE stream that starts with
//! `notifications/subscriptions/acknowledged` (§Acknowledgment) carrying the
//! honoured subset, then carries `notifications/{tools,prompts,resources}/list_changed`
//! for the kinds asked for whenever the merged catalog changes (every frame
//! has `_meta["io.modelcontextprotocol/subscriptionId"]` = the request's id,
//! §Receiving Notifications), keep-alive comments every `server.keepalive`,
//! and on shutdown the graceful closing response (§Graceful Closure). The
//! client ends it by closing the stream.
//!
//! `resourceSubscriptions`: each URI is honoured when it routes to an
//! upstream that can report updates (a legacy one declaring
//! `resources.subscribe`), the subscription table has room
//! ([`crate::subscriptions`]) and the upstream accepted; the acknowledgment
//! lists the honoured URIs (§Acknowledgment lets a server honour a subset),
//! and `notifications/resources/updated` for them follow on the stream. The
//! stream's subscriptions go when it ends.
//!
//! Bounded: listen streams share one fixed pool with legacy GET streams
//! ([`super::streams::StreamPool`], max(1, `server.max_connections` / 2) places; a stream
//! holds its connection for as long as the client listens, so half the
//! connections always stay free for requests); one more is refused with
//! HTTP 503, `-31005` and `Retry-After`, counted in
//! `mcp_edge_refused_total{limit="streams"}`; `mcp_edge_streams` is the
//! number open. A request for nothing mcp-edge honours gets the
//! acknowledgment and at once the closing response, keeping no place.
//! A stream holds no queue: what it sends is derived from the catalog
//! generation when it is polled, so a slow reader costs nothing but its
//! connection, and changes made while it is not read collapse into one.

use super::app::{App, Body};
use super::streams::{StreamPlace, META_SUBSCRIPTION_ID};
use crate::limits::AUDIT_FIELD_BYTES;
use crate::logline::capped;
use crate::protocol::{self, sse, RpcError};
use crate::subscriptions::{Subscriber, Subscriptions};
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Map, Value};
use std::convert::Infallible;
use std::sync::Arc;

/// The filter field of each list kind, in [`crate::router::ListGens`] order.
const FIELDS: [&str; 3] = [
    "toolsListChanged",
    "promptsListChanged",
    "resourcesListChanged",
];

/// A listen stream's place: its pool place, and its resource
/// subscriptions, forgotten with it (before the place is given back).
struct Place {
    who: Subscriber,
    subscriptions: Arc<Subscriptions>,
    stream: StreamPlace,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.subscriptions.remove_subscriber(self.who);
    }
}

/// The asked-for part of a `SubscriptionFilter` (2026-07-28 schema.json):
/// which list kinds to send, and which resource URIs to report. Errors:
/// -32602 when `notifications` is not an object, a `*ListChanged` field is
/// not a boolean, or `resourceSubscriptions` is not an array of strings.
fn asked(params: Option<&Value>) -> Result<([bool; 3], Vec<&str>), RpcError> {
    let bad = |m: String| RpcError::new(protocol::INVALID_PARAMS, m);
    let filter = match params.and_then(|p| p.get("notifications")) {
        None | Some(Value::Null) => return Ok(([false; 3], Vec::new())),
        Some(Value::Object(f)) => f,
        Some(_) => return Err(bad("params.notifications must be an object".into())),
    };
    let mut on = [false; 3];
    for (i, field) in FIELDS.iter().enumerate() {
        on[i] = match filter.get(*field) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(bad(format!(
                    "params.notifications.{field} must be a boolean"
                )))
            }
        };
    }
    let uris = match filter.get("resourceSubscriptions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
            a.iter().filter_map(Value::as_str).collect()
        }
        Some(_) => {
            return Err(bad(
                "params.notifications.resourceSubscriptions must be an array of URI strings".into(),
            ))
        }
    };
    Ok((on, uris))
}

/// The process-unique number of the next listen stream (its
/// [`Subscriber::Listen`] identity).
static NEXT_STREAM: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn frame(v: &Value) -> Result<Frame<Bytes>, Infallible> {
    Ok(Frame::data(sse::event(&v.to_string())))
}

fn stamped(method: &str, id: &Value, extra: Option<(&str, Value)>) -> Value {
    let mut params = Map::new();
    params.insert("_meta".into(), json!({ META_SUBSCRIPTION_ID: id }));
    if let Some((k, v)) = extra {
        params.insert(k.into(), v);
    }
    protocol::notification(method, Some(Value::Object(params)))
}

/// The graceful closing response (§Graceful Closure; 2026-07-28 schema.json
/// `SubscriptionsListenResult`).
fn closing(id: &Value) -> Value {
    protocol::result_response(
        id.clone(),
        json!({"resultType": "complete", "_meta": { META_SUBSCRIPTION_ID: id }}),
    )
}

/// Opens a listen stream for request `id`: the SSE response, or the status
/// and JSON-RPC error to answer instead (-32602 bad filter, 406 + -32600
/// when the client does not accept `text/event-stream`, 503 + -31005 when
/// every listen stream is taken). Each asked-for resource URI is honoured
/// when it routes to an upstream that can report it, the subscription table
/// has room, and the upstream accepted (`resources/subscribe`, once per URI
/// and connection); the acknowledgment lists the honoured ones.
pub async fn open(
    app: &Arc<App>,
    id: Value,
    params: Option<&Value>,
    sse_ok: bool,
    caller: &super::app::Who,
) -> Result<Response<Body>, (StatusCode, RpcError)> {
    let policy = caller.policy();
    if !sse_ok {
        return Err((
            StatusCode::NOT_ACCEPTABLE,
            RpcError::new(
                protocol::INVALID_REQUEST,
                "subscriptions/listen answers with an SSE stream: send Accept: text/event-stream",
            ),
        ));
    }
    let (on, uris) = asked(params).map_err(|e| (StatusCode::OK, e))?;
    let task_ids =
        super::task_callers::asked(params).map_err(|e| (super::modern::error_status(&e), e))?;
    if !on.contains(&true) && uris.is_empty() && task_ids.is_empty() {
        // Nothing asked: acknowledged and closed without taking a stream
        // place (which could end another client's stream for nothing).
        return Ok(empty_listen(&id, on));
    }
    let stream_place = app.streams.take(caller.access.shares(), caller.owner())?;
    let who = Subscriber::Listen(NEXT_STREAM.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    // From here on, dropping the place forgets this stream's subscriptions.
    let place = Place {
        who,
        subscriptions: app.subscriptions.clone(),
        stream: stream_place,
    };
    let honoured_uris = subscribe_all(app, who, uris, policy).await;
    let followed = super::task_callers::Followed::new(app, task_ids, caller.owner());
    let watching = !honoured_uris.is_empty() || !followed.is_empty();
    let mut ack = acknowledged(on, honoured_uris);
    if !followed.is_empty() {
        ack["taskIds"] = Value::Array(followed.ids());
    }
    let first = stamped(
        "notifications/subscriptions/acknowledged",
        &id,
        Some(("notifications", ack)),
    );
    if !on.contains(&true) && !watching {
        // Nothing to listen for here: acknowledge the empty subset and end
        // gracefully at once rather than hold a place for keep-alives.
        drop(place);
        return Ok(acknowledged_and_closed(&id, &first));
    }
    let mut state = State::new(app, id, on, first, place, caller.owner());
    state.tasks = followed;
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        let item = s.next_frame().await?;
        Some((item, s))
    });
    let mut r = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
    super::reply::sse_headers(&mut r);
    Ok(r)
}

/// The acknowledgment of a listen with nothing to listen for, then its
/// closing answer, as one finished SSE body.
fn acknowledged_and_closed(id: &Value, first: &Value) -> Response<Body> {
    let mut body = sse::event(&first.to_string()).to_vec();
    body.extend_from_slice(&sse::event(&closing(id).to_string()));
    let mut r = Response::new(super::reply::full(body));
    super::reply::sse_headers(&mut r);
    r
}

/// [`acknowledged_and_closed`] of a listen that asked for nothing.
fn empty_listen(id: &Value, on: [bool; 3]) -> Response<Body> {
    let ack = acknowledged(on, Vec::new());
    let first = stamped(
        "notifications/subscriptions/acknowledged",
        id,
        Some(("notifications", ack)),
    );
    acknowledged_and_closed(id, &first)
}

/// Subscribes `who` to each distinct URI (no more than one client's
/// share); returns the honoured ones.
async fn subscribe_all(
    app: &App,
    who: Subscriber,
    uris: Vec<&str>,
    policy: &crate::router::Policy,
) -> Vec<Value> {
    let mut distinct: Vec<&str> = Vec::new();
    for uri in uris {
        if !distinct.contains(&uri) && distinct.len() < crate::limits::MAX_SUBSCRIPTIONS_PER_CLIENT
        {
            distinct.push(uri);
        }
    }
    let mut honoured = Vec::new();
    for uri in distinct {
        match subscribe(app, who, uri, policy).await {
            Ok(()) => honoured.push(Value::String(uri.into())),
            Err(e) => {
                // Client-supplied: cut and escaped (logline::capped).
                let (uri, why) = (capped(uri, AUDIT_FIELD_BYTES), capped(&e.message, 512));
                tracing::debug!(%uri, "listen: resource subscription not honoured: {why}")
            }
        }
    }
    honoured
}

/// The acknowledgment's `notifications`: the honoured subset of the filter.
fn acknowledged(on: [bool; 3], honoured_uris: Vec<Value>) -> Value {
    let mut ack = Map::new();
    for (i, field) in FIELDS.iter().enumerate() {
        if on[i] {
            ack.insert((*field).into(), Value::Bool(true));
        }
    }
    if !honoured_uris.is_empty() {
        ack.insert("resourceSubscriptions".into(), Value::Array(honoured_uris));
    }
    Value::Object(ack)
}

/// One asked-for URI of a listen stream: routed, entered in the table, and
/// asked of its upstream; the entry is taken back if the upstream refuses.
async fn subscribe(
    app: &App,
    who: Subscriber,
    uri: &str,
    policy: &crate::router::Policy,
) -> Result<(), RpcError> {
    let up = app.subscribable(uri, policy).await?;
    let added = app.subscribe_in_table(who, up.id, uri)?;
    if let Err(e) = up.ensure_subscribed(uri).await {
        if added {
            app.subscriptions.unsubscribe(who, uri);
        }
        return Err(e.to_rpc());
    }
    Ok(())
}

struct State {
    id: Value,
    on: [bool; 3],
    app: Arc<App>,
    lists: tokio::sync::watch::Receiver<crate::router::ListGens>,
    /// The generations last announced.
    seen: crate::router::ListGens,
    stopping: tokio::sync::watch::Receiver<bool>,
    keepalive: tokio::time::Interval,
    /// A message to send before anything else (the acknowledgment).
    next: Option<Value>,
    /// The closing response was sent: end.
    closed: bool,
    place: Place,
    /// The caller's owner mark, and the reloads of the client table: the
    /// stream ends when its client is no longer configured.
    owner: u64,
    access: tokio::sync::watch::Receiver<u64>,
    /// The tasks it follows (`taskIds`, [`super::task_callers`]).
    tasks: super::task_callers::Followed,
}

impl State {
    /// A stream that sends `first` (the acknowledgment), then list changes
    /// for the kinds in `on`, resource updates and keep-alives.
    fn new(
        app: &Arc<App>,
        id: Value,
        on: [bool; 3],
        first: Value,
        place: Place,
        owner: u64,
    ) -> State {
        let mut lists = app.catalog_gen.subscribe();
        // Seen as changed, so the first wait checks the client is still
        // configured: a reload may have come after the gate let it in.
        let mut access = app.access_gen.subscribe();
        access.mark_changed();
        let seen = *lists.borrow_and_update();
        let period = app.server.keepalive;
        let mut keepalive = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        State {
            id,
            on,
            app: app.clone(),
            lists,
            seen,
            stopping: app.stopping.subscribe(),
            keepalive,
            next: Some(first),
            closed: false,
            place,
            tasks: super::task_callers::Followed::new(app, Vec::new(), owner),
            owner,
            access,
        }
    }

    async fn next_frame(&mut self) -> Option<Result<Frame<Bytes>, Infallible>> {
        if let Some(v) = self.next.take() {
            return Some(frame(&v));
        }
        if self.closed {
            return None;
        }
        let subscriptions = self.app.subscriptions.clone();
        loop {
            // Registered before the check, so no update is missed between.
            let updated = subscriptions.changed.notified();
            if let Some(events) =
                super::reply::resource_updates(&self.app, self.place.who, Some(&self.id))
            {
                return Some(Ok(Frame::data(events)));
            }
            // True when a followed task is due (polled after the select:
            // a branch may not await while another's guard is alive).
            let tasks_due = tokio::select! {
                biased;
                _ = self.stopping.wait_for(|s| *s) => {
                    self.closed = true;
                    return Some(frame(&closing(&self.id)));
                }
                // Its place went to a client under its share: a graceful end.
                _ = self.place.stream.evicted() => {
                    self.closed = true;
                    return Some(frame(&closing(&self.id)));
                }
                Ok(()) = self.access.changed() => {
                    if !self.app.access().knows(self.owner) {
                        self.closed = true;
                        return Some(frame(&closing(&self.id)));
                    }
                    false
                }
                Ok(()) = self.lists.changed() => {
                    let now = *self.lists.borrow_and_update();
                    let changed = now.changed_since(&self.seen);
                    self.seen = now;
                    if let Some(events) = super::reply::list_changed(changed, self.on, Some(&self.id)) {
                        return Some(Ok(Frame::data(events)));
                    }
                    false
                }
                _ = updated => false,
                _ = self.tasks.due() => true,
                _ = self.keepalive.tick() => return Some(Ok(Frame::data(sse::keepalive()))),
            };
            if tasks_due {
                // Bounded (`limits::TASK_CALL_MAX`), and given up for
                // shutdown or the client's removal.
                let app = self.app.clone();
                let poll = self.tasks.poll(&app, &self.id);
                tokio::pin!(poll);
                loop {
                    tokio::select! {
                        biased;
                        _ = self.stopping.wait_for(|s| *s) => {
                            self.closed = true;
                            return Some(frame(&closing(&self.id)));
                        }
                        Ok(()) = self.access.changed() => {
                            if !app.access().knows(self.owner) {
                                self.closed = true;
                                return Some(frame(&closing(&self.id)));
                            }
                        }
                        events = &mut poll => {
                            if let Some(events) = events {
                                return Some(Ok(Frame::data(events)));
                            }
                            break;
                        }
                    }
                }
            }
        }
    }
}
