//! The upstream's notification stream: how a streamable-HTTP server tells
//! mcp-edge things unrelated to any request it made, above all
//! `notifications/tools/list_changed` and its siblings. Without it, an HTTP
//! upstream whose lists change is only seen anew after a reconnect.
//!
//! - Legacy (2025-era): the session's GET stream
//!   (`../shared/spec/2025-11-25/transports.mdx` §Listening for Messages
//!   from the Server).
//! - Modern (2026-07-28): a `subscriptions/listen` request for the three
//!   list kinds (`../shared/spec/2026-07-28/patterns-subscriptions.mdx`);
//!   its acknowledgment is skipped, its closing response ends the stream.
//!
//! One stream per legacy session (mcp-edge's own and each lane,
//! [`super::lanes`]) and one listen stream for a modern server (a
//! dual-era one has both), read by the owner task's monitor
//! as one more `select!` arm (no task of its own): list_changed wakes the catalog
//! refresh, `ping` is answered, other server→client requests are refused
//! (there is no downstream caller to relay them to), other notifications are
//! dropped. A server that does not offer the stream (405, or not
//! `text/event-stream`) is not asked again on this connection; one that ends
//! it is asked again after `health_interval`. A modern server that refuses
//! the listen request (an error response, e.g. -32601) counts as not
//! offering one.

use super::lanes;
use super::wire::is_sse;
use super::HttpConn;
use crate::limits::LANE_STREAM_EVENT_BYTES;
use crate::protocol::{self, sse, Message};
use crate::relay::Lane;
use crate::upstream::era::{listen_params, UpstreamEra, LISTEN_ID};
use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::{header, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::json;
use std::time::Duration;

/// How one notification stream ended.
#[derive(Debug, PartialEq, Eq)]
pub enum NotificationsEnd {
    /// The server does not offer one (405, another content type, or a
    /// refused `subscriptions/listen`): do not ask again on this connection.
    NotOffered,
    /// It ended or failed (the reason): ask again later.
    Ended(String),
    /// Its filter changed ([`HttpConn::relisten`]): open it again now.
    Reopen,
}

/// One notification stream of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// A modern server's `subscriptions/listen` (list changes, and the
    /// resources clients subscribed to).
    Listen,
    /// A legacy session's GET stream: mcp-edge's own ([`Lane::MAIN`]) or
    /// a caller's lane.
    Get(Lane),
}

impl Feed {
    /// The session its messages belong to (a request on it is answered there).
    fn lane(self) -> Lane {
        match self {
            Feed::Listen => Lane::STATELESS,
            Feed::Get(lane) => lane,
        }
    }
}

impl HttpConn {
    /// Opens the notification stream (a legacy session's GET stream, or a
    /// modern `subscriptions/listen`) and reads it until it ends, handling
    /// each message as described in the module docs. An event over
    /// `max_result_bytes` ends the stream.
    async fn read_notifications(&self, feed: Feed) -> NotificationsEnd {
        let version = self.spoken_now().legacy;
        let era = match (feed, version) {
            (Feed::Listen, _) => UpstreamEra::Modern,
            (Feed::Get(_), Some(v)) => UpstreamEra::Legacy(v),
            (Feed::Get(_), None) => return NotificationsEnd::NotOffered,
        };
        // A refused lane has no session, so no stream.
        if matches!(feed, Feed::Get(lane) if lane != Lane::MAIN && self.lanes.refused(lane)) {
            return NotificationsEnd::NotOffered;
        }
        match self.open_notifications(era, feed.lane()).await {
            Ok(body) => self.read_stream(body, feed).await,
            Err(end) => end,
        }
    }

    /// Reads the notification streams of this connection for as long as
    /// it lives: a modern server's listen stream, and the GET stream of
    /// every legacy session — mcp-edge's own and each caller's lane (a
    /// server sends what a session's calls caused, e.g.
    /// `tools/list_changed` after a tool grew the list, on that session's
    /// stream). A dual-era server has both: the listen stream for list
    /// changes and the modern subscriptions, the legacy session's for what
    /// happens there (its resource subscriptions). A stream that ended is
    /// asked again after `again_after`; one not offered is not asked again.
    /// At most `2 + limits::UPSTREAM_CAPABILITY_SESSIONS` streams, each
    /// lane's started when its session first opens.
    pub async fn read_all_notifications(&self, name: &str, again_after: Duration) {
        if self.sse.is_some() {
            // A 2024-11-05 upstream's one stream is read by its driver.
            return std::future::pending().await;
        }
        let spoken = self.spoken_now();
        let mut streams = FuturesUnordered::new();
        if spoken.own == UpstreamEra::Modern {
            streams.push(self.keep_reading(Feed::Listen, name, again_after));
        }
        if spoken.legacy.is_some() {
            streams.push(self.keep_reading(Feed::Get(Lane::MAIN), name, again_after));
        }
        let mut started = 0; // lanes with a stream
        loop {
            tokio::select! {
                Some(()) = streams.next(), if !streams.is_empty() => {}
                () = self.lanes.opened() => {
                    let open = self.lanes.len();
                    for i in started..open {
                        streams.push(self.keep_reading(Feed::Get(lanes::lane_of(i)), name, again_after));
                    }
                    started = open;
                }
            }
        }
    }

    /// One session's stream, opened again after it ends; returns when the
    /// server does not offer one.
    /// A lane's stream is asked again at once when its session is opened
    /// anew (the server ended the old one).
    async fn keep_reading(&self, feed: Feed, name: &str, again_after: Duration) {
        let lane = feed.lane();
        loop {
            // Registered before the stream opens: a new session while this
            // one is read (or failing) is not missed.
            let reopened = self.lanes.reopened(lane);
            tokio::pin!(reopened);
            if let Some(n) = reopened.as_mut().as_pin_mut() {
                n.enable();
            }
            match self.read_notifications(feed).await {
                NotificationsEnd::NotOffered => {
                    tracing::debug!(upstream = %name, ?feed, "no notification stream offered");
                    return;
                }
                NotificationsEnd::Reopen => {}
                NotificationsEnd::Ended(why) => {
                    tracing::debug!(upstream = %name, ?feed, "notification stream: {}; again in {again_after:?}", crate::logline::printable(&why));
                    let reopened = async {
                        match reopened.as_mut().as_pin_mut() {
                            Some(n) => n.await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        () = tokio::time::sleep(again_after) => {}
                        () = reopened => {}
                    }
                }
            }
        }
    }

    /// Sends the stream's request and checks its answer: the SSE body, or
    /// how the stream ended before it began.
    async fn open_notifications(
        &self,
        era: UpstreamEra,
        lane: Lane,
    ) -> Result<Incoming, NotificationsEnd> {
        let req = match era {
            UpstreamEra::Legacy(version) => self.get_request(version, lane),
            UpstreamEra::Modern => self.listen_request(),
        };
        let req = req.map_err(NotificationsEnd::Ended)?;
        let resp = self
            .authorized(req)
            .await
            .map_err(|e| NotificationsEnd::Ended(format!("{}: {e}", self.shown_url)))?;
        let status = resp.status();
        let refused = match era {
            UpstreamEra::Legacy(_) => status == StatusCode::METHOD_NOT_ALLOWED,
            // A JSON-RPC error (-32601 is HTTP 404 in this era) or a 400.
            UpstreamEra::Modern => matches!(status.as_u16(), 400 | 404 | 405),
        };
        if refused || (status.is_success() && !is_sse(resp.headers())) {
            return Err(NotificationsEnd::NotOffered);
        }
        if !status.is_success() {
            return Err(NotificationsEnd::Ended(format!(
                "the notification stream was answered {status}"
            )));
        }
        Ok(resp.into_body())
    }

    /// A modern server's listen stream is to ask for updates of
    /// `resources` from now on: the open stream (if any) ends and is opened
    /// again with the new filter (a stream's filter is fixed when it opens,
    /// 2026-07-28 patterns-subscriptions.mdx §Opening a Stream).
    pub fn relisten(&self, resources: Vec<Box<str>>) {
        *self.listen_uris.lock().expect("listen uris") = resources;
        self.relisten.notify_one();
    }

    /// Reads the stream's events until it ends (each handled by
    /// [`HttpConn::on_stream_event`]) or its filter changes.
    async fn read_stream(&self, mut body: Incoming, feed: Feed) -> NotificationsEnd {
        let lane = feed.lane();
        // A lane's stream carries only what is unrelated to a call
        // (list_changed and the like), so its events are held to less.
        let (max, limit) = match feed {
            Feed::Listen | Feed::Get(Lane::MAIN) => (self.max_bytes, "result_bytes"),
            Feed::Get(_) => (
                self.max_bytes.min(LANE_STREAM_EVENT_BYTES),
                "lane_event_bytes",
            ),
        };
        let mut dec = sse::Decoder::new(max);
        loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                // Only the listen stream has a filter.
                _ = self.relisten.notified(), if feed == Feed::Listen => {
                    return NotificationsEnd::Reopen
                }
            };
            let Some(frame) = frame else { break };
            let frame = match frame {
                Ok(f) => f,
                Err(e) => return NotificationsEnd::Ended(format!("GET stream: {e}")),
            };
            let Some(data) = frame.data_ref() else {
                continue;
            };
            let mut events = Vec::new();
            if dec.push(data, &mut |e| events.push(e)).is_err() {
                crate::metrics::refused(limit);
                return NotificationsEnd::Ended(format!(
                    "GET stream: an event over {max} bytes ({limit})"
                ));
            }
            for e in events {
                if let Some(end) = self.on_stream_event(e, lane).await {
                    return end;
                }
            }
        }
        NotificationsEnd::Ended("the notification stream ended".into())
    }

    /// Handles one event of the stream; `Some` when it ends the stream.
    async fn on_stream_event(&self, event: String, lane: Lane) -> Option<NotificationsEnd> {
        // The listen request's own answer: its closing response ends the
        // stream; an error means the server does not offer one.
        if let Ok(Message::Response { id, outcome }) = serde_json::from_str(&event)
            .map_err(|_| ())
            .and_then(|v| protocol::classify(v).map_err(|_| ()))
        {
            if id == json!(LISTEN_ID) {
                return Some(match outcome {
                    Ok(_) => NotificationsEnd::Ended("the listen stream was closed".into()),
                    Err(e) => {
                        tracing::debug!(
                            "subscriptions/listen refused: {}",
                            crate::logline::printable(&e.message)
                        );
                        NotificationsEnd::NotOffered
                    }
                });
            }
        }
        // Id 0 is never used by a call (ids start at 1), and no relay:
        // other responses are ignored, requests answered or refused here.
        let _ = self.on_message(event, 0, None, lane).await;
        None
    }

    /// The `subscriptions/listen` request of a modern server's stream.
    fn listen_request(&self) -> Result<Request<Full<Bytes>>, String> {
        let resources = self.listen_uris.lock().expect("listen uris").clone();
        let params = listen_params(&resources);
        let msg = protocol::request(json!(LISTEN_ID), "subscriptions/listen", params);
        self.build(
            "subscriptions/listen",
            &msg,
            UpstreamEra::Modern,
            msg.get("params"),
            Lane::MAIN,
        )
        .map_err(|e| e.to_string())
    }

    /// The GET request of a legacy session's stream (`lane`'s).
    pub(super) fn get_request(
        &self,
        version: crate::protocol::ProtocolVersion,
        lane: Lane,
    ) -> Result<Request<Full<Bytes>>, String> {
        let session = self.session_of(lane);
        if session.is_none() && lane != Lane::MAIN {
            // Not open yet, or ended (404) and not opened again yet.
            return Err("its session is not open".into());
        }
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(self.url.clone())
            .header(header::ACCEPT, "text/event-stream")
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let h = req.headers_mut();
        for (k, v) in &self.headers {
            h.insert(k.clone(), v.clone());
        }
        if version.has_version_header() {
            h.insert(
                "mcp-protocol-version",
                HeaderValue::from_static(version.as_str()),
            );
        }
        if let Some(s) = session {
            h.insert("mcp-session-id", s);
        }
        Ok(req)
    }
}
