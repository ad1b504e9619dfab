//! The body of one HTTP+SSE stream (the 2024-11-05 transport,
//! [`super::sse_transport`]), which drives its session: the `endpoint`
//! event first, then, as they come, the events answering each request its
//! `POST /messages` handed over ([`super::sse_links`]: relayed messages,
//! then the response), and the session's own notifications and keep-alive
//! comments ([`GetStream::plain`]). Everything runs as hyper polls this
//! body: no task per request, and a client that stops reading stops its
//! calls with it.
//!
//! The stream ends when its session does (deleted, revoked, evicted: it is
//! never idle while its stream lives, [`super::sessions::Sessions::open_sse`]),
//! when its place in the stream pool goes to a client under its share, or
//! at shutdown; it first writes what its requests in flight still answer
//! (with keep-alives), taking no new one while its client may still answer
//! and cancel. When its client goes, the session ends with it
//! (`mcp_edge_sessions_evicted_total{reason="closed"}`) and its requests in
//! flight are dropped, which cancels them upstream.

use super::app::{App, Body};
use super::get_stream::GetStream;
use super::sse_links::Answering;
use crate::protocol::sse;
use crate::session::{Removal, SessionId};
use bytes::Bytes;
use futures_util::stream::{SelectAll, StreamExt};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval};

/// The state of one stream's body (see the module docs).
pub(super) struct Driver {
    app: Arc<App>,
    id: SessionId,
    /// The session's notifications and keep-alives; `None` once it ended
    /// (the stream then finishes what it answers).
    notes: Option<GetStream>,
    /// What the session's POSTs hand over (closed once `notes` ended).
    posted: mpsc::Receiver<Answering>,
    /// The requests being answered, polled together.
    answering: SelectAll<Answering>,
    /// The pieces of the event being written (first: the `endpoint` event).
    pending: VecDeque<Bytes>,
    /// Keep-alives while it finishes (`notes` sent them before).
    keepalive: Option<Interval>,
}

impl Driver {
    /// The stream of session `id`: `first` (its `endpoint` event), then
    /// what `posted` hands over and what `notes` sends.
    pub(super) fn new(
        app: Arc<App>,
        id: SessionId,
        notes: GetStream,
        posted: mpsc::Receiver<Answering>,
        first: Bytes,
    ) -> Driver {
        Driver {
            app,
            id,
            notes: Some(notes),
            posted,
            answering: SelectAll::new(),
            pending: VecDeque::from([first]),
            keepalive: None,
        }
    }

    /// The response body that drives it.
    pub(super) fn into_body(self) -> Body {
        let frames = futures_util::stream::unfold(self, |mut d| async move {
            let b = d.next().await?;
            Some((Ok::<_, Infallible>(Frame::data(b)), d))
        });
        BodyExt::boxed_unsync(StreamBody::new(frames))
    }

    /// The next piece to write; `None` when the stream ends. An event's
    /// pieces go out one after another, never mixed with another's.
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            let Some(notes) = self.notes.as_mut() else {
                return self.finishing().await;
            };
            // Unbiased: a call relaying faster than its client reads must
            // not keep the session's end or the POSTs waiting.
            tokio::select! {
                Some(event) = self.answering.next(), if !self.answering.is_empty() => {
                    self.pending.extend(event);
                }
                Some(a) = self.posted.recv() => self.answering.push(a),
                b = notes.next() => match b {
                    Some(b) => return Some(b),
                    None => self.finish(),
                },
            }
        }
    }

    /// Its session or its place ended, or the gateway stops: no new
    /// request (one handed meanwhile is still answered), keep-alives of
    /// its own, and its place given back.
    fn finish(&mut self) {
        self.app.sse_links.draining(&self.id);
        self.posted.close();
        while let Ok(a) = self.posted.try_recv() {
            self.answering.push(a);
        }
        self.notes = None;
        let period = self.app.server.keepalive;
        let mut keepalive = tokio::time::interval_at(Instant::now() + period, period);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.keepalive = Some(keepalive);
    }

    /// While it finishes: the next piece of what it still answers, a
    /// keep-alive, or `None` once nothing is left.
    async fn finishing(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            if self.answering.is_empty() {
                return None;
            }
            let keepalive = self.keepalive.as_mut()?;
            tokio::select! {
                event = self.answering.next() => self.pending.extend(event?),
                _ = keepalive.tick() => return Some(sse::keepalive()),
            }
        }
    }
}

impl Drop for Driver {
    /// The stream went: its session ends with it, and its entry goes.
    fn drop(&mut self) {
        self.app.sse_links.remove(&self.id);
        self.app.sessions.end(&self.id, Removal::Closed);
    }
}
