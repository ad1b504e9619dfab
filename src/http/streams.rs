//! The fixed pool of long-lived downstream streams (legacy GET streams and
//! modern `subscriptions/listen` streams), shared by [`super::reply`] and
//! [`super::listen`].

use crate::protocol::{self, RpcError};
use http::StatusCode;
use serde_json::json;
use std::sync::Arc;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// `_meta` key naming the subscription a frame belongs to (§Receiving Notifications).
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The fixed pool of long-lived streams: legacy GET streams and modern
/// listen streams together, max(1, `max_connections` / 2) places. Each such
/// stream holds its connection for as long as the client keeps it open, so
/// at least half the connections always stay free for requests.
pub struct StreamPool {
    places: Arc<Semaphore>,
    capacity: usize,
    /// Woken whenever a stream gives its place back.
    closed: Arc<Notify>,
}

impl StreamPool {
    /// A pool of `capacity` places.
    pub fn new(capacity: usize) -> Self {
        metrics::gauge!(crate::metrics::STREAMS_CAPACITY).set(capacity as f64);
        StreamPool {
            places: Arc::new(Semaphore::new(capacity)),
            capacity,
            closed: Arc::new(Notify::new()),
        }
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.capacity - self.places.available_permits()
    }

    /// The most streams open at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A place for one more stream, or the HTTP 503 and JSON-RPC error
    /// (-31005, `Retry-After`) to answer with, counted as
    /// `mcp_edge_refused_total{limit="streams"}`.
    pub fn take(&self) -> Result<StreamPlace, (StatusCode, RpcError)> {
        let Ok(permit) = self.places.clone().try_acquire_owned() else {
            metrics::counter!(crate::metrics::REFUSED, "limit" => "streams").increment(1);
            let secs = crate::limits::LISTEN_RETRY_AFTER.as_secs();
            return Err((
                StatusCode::SERVICE_UNAVAILABLE,
                RpcError::new(
                    protocol::STREAMS_FULL,
                    format!(
                        "all {} long-lived streams (GET and subscriptions/listen) are open; retry later",
                        self.capacity
                    ),
                )
                .with_data(json!({"retryAfterSeconds": secs})),
            ));
        };
        metrics::gauge!(crate::metrics::STREAMS).increment(1.0);
        Ok(StreamPlace {
            permit: Some(permit),
            closed: self.closed.clone(),
        })
    }

    /// Resolves once no stream is open (shutdown: once every closing
    /// response was handed to its connection).
    pub async fn all_closed(&self) {
        loop {
            let closed = self.closed.notified();
            if self.open() == 0 {
                return;
            }
            closed.await;
        }
    }
}

/// One stream's place in the pool, given back on drop.
pub struct StreamPlace {
    permit: Option<OwnedSemaphorePermit>,
    closed: Arc<Notify>,
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        drop(self.permit.take()); // given back first, so a woken waiter sees it
        metrics::gauge!(crate::metrics::STREAMS).decrement(1.0);
        self.closed.notify_waiters();
    }
}
