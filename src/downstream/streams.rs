//! The fixed pool of long-lived downstream streams (legacy GET streams and
//! modern `subscriptions/listen` streams), shared by [`super::reply`] and
//! [`super::listen`], and shared fairly among clients ([`crate::share`]).

use crate::protocol::{self, RpcError};
use crate::share::{self, Counts, Decision, Shares};
use http::StatusCode;
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// `_meta` key naming the subscription a frame belongs to (§Receiving Notifications).
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The fixed pool of long-lived streams: legacy GET streams and modern
/// listen streams together, max(1, `max_connections` / 2) places. Each such
/// stream holds its connection for as long as the client keeps it open, so
/// at least half the connections always stay free for requests.
///
/// With `[[client]]`s, a client at or over its share of the pool does not
/// take one of its last places while other clients are under theirs, and
/// a client under its share finding it full takes the place of the oldest
/// stream of the client furthest over its share, which ends cleanly
/// ([`StreamPlace::evicted`]).
pub struct StreamPool {
    inner: Arc<Inner>,
    capacity: usize,
}

struct Inner {
    places: Mutex<Places>,
    /// Woken whenever a stream gives its place back.
    closed: Notify,
}

struct Places {
    held: Box<[Option<Held>]>,
    counts: Counts,
    open: usize,
    /// The order streams were opened in (the oldest goes first).
    next: u64,
}

struct Held {
    owner: u64,
    seq: u64,
    end: Arc<Notify>,
}

impl StreamPool {
    /// A pool of `capacity` places.
    pub fn new(capacity: usize) -> Self {
        metrics::gauge!(crate::metrics::STREAMS_CAPACITY).set(capacity as f64);
        let places = Places {
            held: (0..capacity).map(|_| None).collect(),
            counts: Counts::new(),
            open: 0,
            next: 0,
        };
        StreamPool {
            inner: Arc::new(Inner {
                places: Mutex::new(places),
                closed: Notify::new(),
            }),
            capacity,
        }
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.inner.places.lock().expect("streams").open
    }

    /// The most streams open at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A place for one more stream of the client with owner mark `owner`
    /// under `shares` ([`share::decide`]; a stream of another client is
    /// told to end to make it), or the HTTP 503 and JSON-RPC error
    /// (-31005, `Retry-After`) to answer with, counted as
    /// `mcp_edge_refused_total{limit="streams"}` (every place taken, none
    /// of a client over its share) or `{limit="stream_share"}` (the client
    /// holds its share, the places left are kept for others).
    pub fn take(&self, shares: &Shares, owner: u64) -> Result<StreamPlace, (StatusCode, RpcError)> {
        let mut p = self.inner.places.lock().expect("streams");
        // Only another client's stream is ever ended for this one.
        let others = |c: u64| c != owner && p.counts.get(c) > 0;
        let decision = share::decide(shares, self.capacity, p.open, &p.counts, owner, others);
        let index = match decision {
            Decision::Take => {
                p.open += 1;
                metrics::gauge!(crate::metrics::STREAMS).increment(1.0);
                p.held
                    .iter()
                    .position(Option::is_none)
                    .expect("a free place")
            }
            Decision::TakeFrom(c) => {
                crate::metrics::refused("stream_evicted");
                let (index, old) = (p.held.iter().enumerate())
                    .filter_map(|(i, h)| h.as_ref().filter(|h| h.owner == c).map(|h| (i, h)))
                    .min_by_key(|(_, h)| h.seq)
                    .expect("a stream of the client taken from");
                old.end.notify_one();
                p.counts.remove(c);
                index
            }
            Decision::Refuse(why) => {
                let held = p.counts.get(owner) as usize;
                return Err(self.refusal(why, held, shares.share_of(owner, self.capacity)));
            }
        };
        p.counts.add(owner);
        let (seq, end) = (p.next, Arc::new(Notify::new()));
        p.next += 1;
        p.held[index] = Some(Held {
            owner,
            seq,
            end: end.clone(),
        });
        Ok(StreamPlace {
            inner: self.inner.clone(),
            index,
            seq,
            end,
        })
    }

    /// The refusal of [`StreamPool::take`], counted.
    fn refusal(&self, why: share::Refusal, held: usize, share: usize) -> (StatusCode, RpcError) {
        let capacity = self.capacity;
        let (limit, message) = match why {
            share::Refusal::Full => ("streams", format!(
                "all {capacity} long-lived streams (GET and subscriptions/listen) are open; retry later"
            )),
            share::Refusal::Share => ("stream_share", format!(
                "this client holds {held} of the {capacity} long-lived streams (GET and \
                 subscriptions/listen), its share is {share}, and the places left are kept \
                 for other clients (stream_share); retry later"
            )),
        };
        crate::metrics::refused(limit);
        let secs = crate::limits::LISTEN_RETRY_AFTER.as_secs();
        let e = RpcError::new(protocol::STREAMS_FULL, message)
            .with_data(json!({"retryAfterSeconds": secs, "limit": limit}));
        (StatusCode::SERVICE_UNAVAILABLE, e)
    }

    /// Resolves once no stream is open (shutdown: once every closing
    /// response was handed to its connection).
    pub async fn all_closed(&self) {
        loop {
            let closed = self.inner.closed.notified();
            if self.open() == 0 {
                return;
            }
            closed.await;
        }
    }
}

/// One stream's place in the pool, given back on drop.
pub struct StreamPlace {
    inner: Arc<Inner>,
    index: usize,
    seq: u64,
    end: Arc<Notify>,
}

impl StreamPlace {
    /// Its index among the pool's places (< the pool's capacity). A place
    /// evicted for a client under its share keeps its index until dropped,
    /// while the new stream holds it too.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Resolves once the pool gave this place to a client under its share:
    /// the stream ends now, cleanly (a GET stream's body ends, a listen
    /// stream sends its closing response).
    pub async fn evicted(&self) {
        self.end.notified().await
    }
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        let mut p = self.inner.places.lock().expect("streams");
        // An evicted stream's place is already another's.
        if p.held[self.index]
            .as_ref()
            .is_some_and(|h| h.seq == self.seq)
        {
            let owner = p.held[self.index].take().expect("held").owner;
            p.counts.remove(owner);
            p.open -= 1;
            metrics::gauge!(crate::metrics::STREAMS).decrement(1.0);
        }
        drop(p); // given back first, so a woken waiter sees it
        self.inner.closed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_under_its_share_ends_the_oldest_stream_of_the_furthest_over() {
        let (a, b, c) = (11, 13, 15);
        let shares = Shares::new([(a, 1), (b, 1), (c, 1)]);
        let pool = StreamPool::new(4);
        let mine: Vec<StreamPlace> = (0..2).map(|_| pool.take(&shares, a).unwrap()).collect();
        // Two left, kept for b and c.
        let (status, e) = pool.take(&shares, a).err().unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.message.contains("stream_share"), "{}", e.message);
        let _b = pool.take(&shares, b).unwrap();
        let _b2 = pool.take(&shares, b).unwrap();
        assert_eq!(pool.open(), 4);
        // Full: c (none) takes the oldest stream of a or b, both as far
        // over their 1.33 (ties: the lower mark, a).
        let _c = pool.take(&shares, c).unwrap();
        assert_eq!(pool.open(), 4);
        let ended = futures_util::FutureExt::now_or_never(mine[0].evicted());
        assert!(ended.is_some(), "a's oldest stream was told to end");
        assert!(futures_util::FutureExt::now_or_never(mine[1].evicted()).is_none());
        drop(mine);
        assert_eq!(pool.open(), 3, "the evicted place stayed c's");
        // Without clients: a full pool refuses, ending nothing.
        let anonymous = StreamPool::new(1);
        let only = anonymous.take(&Shares::default(), 0).unwrap();
        let (_, e) = anonymous.take(&Shares::default(), 0).err().unwrap();
        assert!(e.message.starts_with("all 1 long-lived"), "{}", e.message);
        assert!(futures_util::FutureExt::now_or_never(only.evicted()).is_none());
    }
}
