//! The body of one HTTP+SSE stream (the 2024-11-05 transport,
//! [`super::sse_transport`]), which drives its session: the `endpoint`
//! event first, then, as they come, the events answering each request its
//! `POST /messages` handed over ([`super::sse_links`]: relayed messages,
//! then the response), and the session's own notifications and keep-alive
//! comments ([`GetStream::plain`]). Everything runs as hyper polls this
//! body: no task per request, and a client that stops reading stops its
//! calls with it.
//!
//! The stream ends when its session does (deleted, evicted, expired), when
//! its place in the stream pool goes to a client under its share, or at
//! shutdown; it first writes what its requests in flight still answer, and
//! takes no new one. When its client goes, the session ends with it
//! (`mcp_edge_sessions_evicted_total{reason="closed"}`) and its requests in
//! flight are dropped, which cancels them upstream.

use super::app::{App, Body};
use super::get_stream::GetStream;
use super::sse_links::Answering;
use crate::session::{Removal, SessionId};
use bytes::Bytes;
use futures_util::stream::{SelectAll, StreamExt};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The state of one stream's body (see the module docs).
pub(super) struct Driver {
    app: Arc<App>,
    id: SessionId,
    /// The session's notifications and keep-alives; `None` once it ended.
    notes: Option<GetStream>,
    /// What the session's POSTs hand over (closed once `notes` ended).
    posted: mpsc::Receiver<Answering>,
    /// The requests being answered, polled together.
    answering: SelectAll<Answering>,
    /// The `endpoint` event, until written.
    first: Option<Bytes>,
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
            first: Some(first),
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

    /// The next piece to write; `None` when the stream ends.
    async fn next(&mut self) -> Option<Bytes> {
        if let Some(b) = self.first.take() {
            return Some(b);
        }
        loop {
            let Some(notes) = self.notes.as_mut() else {
                // Ended: what is still being answered goes out first.
                return self.answering.next().await;
            };
            tokio::select! {
                biased;
                Some(b) = self.answering.next(), if !self.answering.is_empty() => return Some(b),
                Some(a) = self.posted.recv() => self.answering.push(a),
                b = notes.next() => match b {
                    Some(b) => return Some(b),
                    None => {
                        self.notes = None;
                        self.posted.close();
                        self.app.sse_links.remove(&self.id);
                    }
                },
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
