//! The fixed-capacity table of requests in flight on one multiplexed upstream
//! connection (stdio, and a 2024-11-05 HTTP+SSE stream), and the JSON-RPC id
//! rewriting it implies.
//!
//! Every request sent upstream gets a fresh numeric id `generation << 16 | slot`,
//! so callers from different sessions, or the same id reused by two clients,
//! never collide; the caller keeps its own id and gets the answer through a
//! oneshot channel.
//!
//! A call whose caller gives up (timeout, client gone) is *abandoned*: the
//! upstream is told with `notifications/cancelled`
//! (`../shared/spec/2025-11-25/utilities-cancellation.mdx`) and the slot stays
//! taken until the upstream's late answer arrives, or `max_age` has passed,
//! so `max_in_flight` bounds the work really running upstream, not just the
//! callers still waiting.
//!
//! With `[[client]]`s, a slot keeps its call's client's place among the
//! upstream's `max_in_flight` ([`super::Callers`], taken by the handle
//! before the call comes here) until the slot is freed — an abandoned call
//! until the upstream answers or `max_age` passes — so abandoning calls
//! frees no room.

use super::Claim;
use crate::protocol::{Payload, RpcError};
use crate::relay::Relay;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// What the reader hands a waiting caller: `Ok(result)` or the peer's error.
pub type Reply = Result<Payload, RpcError>;

struct Slot {
    generation: u32,
    waiter: Option<oneshot::Sender<Reply>>,
    /// Where this call's relayed messages go, and the caller's own progress token.
    relay: Option<(Relay, Option<Value>)>,
    /// Given up by its caller at this time; still running upstream.
    abandoned: Option<Instant>,
    /// The caller's client's place ([`super::Callers`]), until the slot is freed.
    claim: Option<Claim>,
    /// The call may lead the upstream to ask a client things (not one of
    /// mcp-edge's listings or probes): see [`InFlight::sole_relay`].
    asks: bool,
}

struct Inner {
    slots: Box<[Slot]>,
    free: Vec<u16>,
    /// Ids of abandoned calls, for the owner task to send `notifications/cancelled`.
    cancel: mpsc::Sender<u64>,
    max_age: Duration,
}

impl Inner {
    /// Frees the slots abandoned longer than `max_age`; returns the
    /// claims they held, to be dropped by the caller once unlocked.
    fn reclaim_stale(&mut self) -> Vec<Option<Claim>> {
        let now = Instant::now();
        let max_age = self.max_age;
        let stale: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                self.slots[i]
                    .abandoned
                    .is_some_and(|t| now.saturating_duration_since(t) >= max_age)
            })
            .collect();
        (stale.into_iter())
            .map(|i| {
                let claim = self.slots[i].claim.take();
                self.release(i);
                claim
            })
            .collect()
    }

    fn release(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.waiter = None;
        s.relay = None;
        s.abandoned = None;
        s.claim = None;
        s.generation = s.generation.wrapping_add(1);
        self.free.push(slot as u16);
    }
}

/// Fixed-capacity in-flight table (capacity set at construction, ≤ 65,536).
#[derive(Clone)]
pub struct InFlight {
    inner: Arc<Mutex<Inner>>,
}

/// A reserved slot: its upstream id and the receiver of the reply. Dropping
/// the ticket frees the slot.
pub struct Ticket {
    table: InFlight,
    slot: u16,
    generation: u32,
    /// Receives the upstream's reply (or is closed when the connection dies).
    pub rx: oneshot::Receiver<Reply>,
}

impl Ticket {
    /// The id to put on the upstream request (a JSON number).
    pub fn upstream_id(&self) -> u64 {
        ((self.generation as u64) << 16) | self.slot as u64
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut g = self.table.inner.lock().expect("in-flight lock");
        let id = self.upstream_id();
        let s = &mut g.slots[self.slot as usize];
        if s.generation != self.generation {
            return;
        }
        if s.waiter.is_some() {
            // Unanswered: abandoned. The upstream is told; the slot waits for its answer.
            s.waiter = None;
            s.relay = None;
            s.abandoned = Some(Instant::now());
            // The queue holds as many ids as the table has slots, so it is
            // full only while the owner falls that far behind; counted.
            if let Err(mpsc::error::TrySendError::Full(_)) = g.cancel.try_send(id) {
                crate::metrics::refused("cancellations");
            }
        } else {
            g.release(self.slot as usize);
        }
    }
}

impl InFlight {
    /// A table with `capacity` slots (clamped to 1…65,536), allocated now,
    /// whose abandoned calls hold their slot at most `max_age`; and the
    /// receiver of the ids to send `notifications/cancelled` for.
    pub fn new(capacity: usize, max_age: Duration) -> (Self, mpsc::Receiver<u64>) {
        let capacity = capacity.clamp(1, 1 << 16);
        let slots = (0..capacity)
            .map(|_| Slot {
                generation: 0,
                waiter: None,
                relay: None,
                abandoned: None,
                claim: None,
                asks: false,
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        let free = (0..capacity as u32).rev().map(|i| i as u16).collect();
        let (cancel, rx) = mpsc::channel(capacity);
        let t = InFlight {
            inner: Arc::new(Mutex::new(Inner {
                slots,
                free,
                cancel,
                max_age,
            })),
        };
        (t, rx)
    }

    /// Reserves a slot; `None` when the table is full (the caller answers
    /// with [`crate::protocol::UPSTREAM_BUSY`] at once, nothing is queued).
    pub fn reserve(&self) -> Option<Ticket> {
        self.reserve_relayed(None, None, true)
    }

    /// Like [`InFlight::reserve`], remembering the call's relay and the
    /// caller's original `progressToken` (the upstream sees the ticket's id
    /// instead), and holding its client's `claim` until the slot is freed.
    pub fn reserve_relayed(
        &self,
        relay: Option<(Relay, Option<Value>)>,
        claim: Option<Claim>,
        asks: bool,
    ) -> Option<Ticket> {
        let mut g = self.inner.lock().expect("in-flight lock");
        if g.free.is_empty() {
            g.reclaim_stale();
        }
        let slot = g.free.pop()?;
        let (tx, rx) = oneshot::channel();
        let s = &mut g.slots[slot as usize];
        s.waiter = Some(tx);
        s.relay = relay;
        s.claim = claim;
        s.asks = asks;
        let generation = s.generation;
        drop(g);
        Some(Ticket {
            table: self.clone(),
            slot,
            generation,
            rx,
        })
    }

    /// Frees the slots of calls abandoned longer than `max_age` (the
    /// upstream never answered them), and with them their clients' places
    /// in [`Callers`]; returns how many.
    pub fn reclaim_stale(&self) -> usize {
        let freed = self.inner.lock().expect("in-flight lock").reclaim_stale();
        // The claims drop here, outside the table's lock.
        freed.len()
    }

    /// Delivers a reply for upstream id `id`; false if nobody waits for it
    /// (late answer after a timeout, or an id we never sent).
    pub fn complete(&self, id: &Value, reply: Reply) -> bool {
        id.as_u64().is_some_and(|n| self.complete_n(n, reply))
    }

    /// [`InFlight::complete`] for upstream id `n`.
    pub fn complete_n(&self, n: u64, reply: Reply) -> bool {
        let (slot, generation) = ((n & 0xffff) as usize, (n >> 16) as u32);
        let mut g = self.inner.lock().expect("in-flight lock");
        match g.slots.get_mut(slot) {
            Some(s) if s.generation == generation => match s.waiter.take() {
                Some(tx) => tx.send(reply).is_ok(),
                None => {
                    if s.abandoned.is_some() {
                        g.release(slot); // the late answer of an abandoned call
                    }
                    false
                }
            },
            _ => false,
        }
    }

    /// The relay and original progress token of the call whose upstream id is
    /// `token` (the rewritten `progressToken`).
    pub fn progress_target(&self, token: &Value) -> Option<(Relay, Value)> {
        let n = token.as_u64()?;
        let (slot, generation) = ((n & 0xffff) as usize, (n >> 16) as u32);
        let g = self.inner.lock().expect("in-flight lock");
        let s = g.slots.get(slot)?;
        if s.generation != generation || s.waiter.is_none() {
            return None;
        }
        let (relay, original) = s.relay.as_ref()?;
        Some((relay.clone(), original.clone()?))
    }

    /// The relay of the only call in flight that may ask a client things,
    /// if exactly one is and it has one (unattributable upstream messages
    /// go there, or nowhere). Every such call counts — one without a relay
    /// (a client that takes no stream), one given up on that the upstream
    /// still works on — so a request is never handed to another client
    /// than the one it may be for; mcp-edge's own listings and probes do
    /// not (nobody could be asked for them), so a list refresh does not
    /// stop a server's request from reaching the caller.
    pub fn sole_relay(&self) -> Option<Relay> {
        let g = self.inner.lock().expect("in-flight lock");
        let busy = |s: &&Slot| s.asks && (s.waiter.is_some() || s.abandoned.is_some());
        let mut asking = g.slots.iter().filter(busy);
        match (asking.next(), asking.next()) {
            (Some(s), None) if s.waiter.is_some() => s.relay.as_ref().map(|(r, _)| r.clone()),
            _ => None,
        }
    }

    /// Fails every waiter (connection lost): their receivers see a closed channel.
    pub fn fail_all(&self) {
        let mut g = self.inner.lock().expect("in-flight lock");
        for i in 0..g.slots.len() {
            if g.slots[i].abandoned.is_some() {
                g.release(i); // no answer will ever come on this connection
            } else {
                g.slots[i].waiter = None;
                g.slots[i].relay = None;
            }
        }
    }

    /// Requests currently waiting.
    pub fn len(&self) -> usize {
        let g = self.inner.lock().expect("in-flight lock");
        g.slots.len() - g.free.len()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::Claimant;
    use crate::upstream::{CallError, Callers};
    use serde_json::json;

    /// An unattributable request goes to the one call that may ask a
    /// client, never to another client's: mcp-edge's own calls do not
    /// count, a relay-less or abandoned client call does.
    #[test]
    fn the_sole_relay_is_the_only_call_that_may_ask() {
        let t = table(8);
        let relay = |s: &str| Some((crate::relay::Relay::new(Some(s.into()), 4).0, None));
        let a = t.reserve_relayed(relay("a"), None, true).unwrap();
        let listing = t.reserve_relayed(None, None, false).unwrap();
        let only = t.sole_relay().expect("the listing does not count");
        assert_eq!(only.session.as_deref(), Some("a"));
        let plain = t.reserve_relayed(None, None, true).unwrap();
        assert!(
            t.sole_relay().is_none(),
            "a client call without a stream counts"
        );
        drop(plain); // abandoned: the upstream still works on it
        assert!(t.sole_relay().is_none(), "an abandoned call still counts");
        drop((a, listing));
        let b = t.reserve_relayed(relay("b"), None, true).unwrap();
        assert!(
            t.sole_relay().is_none(),
            "the abandoned call is still there"
        );
        drop(b);
    }

    fn table(n: usize) -> InFlight {
        InFlight::new(n, Duration::from_secs(60)).0
    }

    #[tokio::test(start_paused = true)]
    async fn abandoned_calls_hold_their_slot_until_answered_or_stale() {
        let (t, mut cancel) = InFlight::new(1, Duration::from_secs(60));
        let a = t.reserve().unwrap();
        let id = a.upstream_id();
        drop(a); // the caller went away before the answer
        assert_eq!(
            cancel.recv().await,
            Some(id),
            "the upstream is told to cancel"
        );
        assert!(t.reserve().is_none(), "the upstream is still working on it");
        assert!(!t.complete(&json!(id), Ok(json!("late").into())));
        let b = t.reserve().expect("the late answer freed the slot");
        assert!(t.complete(&json!(b.upstream_id()), Ok(json!("answered").into())));
        drop(b);
        let c = t.reserve().unwrap();
        let cid = c.upstream_id();
        drop(c);
        assert_eq!(cancel.recv().await, Some(cid));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(
            t.reserve().is_some(),
            "a never-answered call is reclaimed after max_age"
        );
    }

    #[tokio::test]
    async fn full_table_refuses_and_drop_frees() {
        let t = table(2);
        let a = t.reserve().unwrap();
        let b = t.reserve().unwrap();
        assert!(t.reserve().is_none());
        assert_ne!(a.upstream_id(), b.upstream_id());
        assert!(t.complete(&json!(a.upstream_id()), Ok(json!(0).into())));
        drop(a);
        assert_eq!(t.len(), 1);
        let mut c = t.reserve().unwrap();
        assert!(t.complete(&json!(c.upstream_id()), Ok(json!({"x": 1}).into())));
        assert_eq!(
            (&mut c.rx).await.unwrap().unwrap().into_value(),
            json!({"x": 1})
        );
        drop(b);
    }

    #[tokio::test]
    async fn late_answer_for_reused_slot_is_ignored() {
        let t = table(1);
        let a = t.reserve().unwrap();
        let old = a.upstream_id();
        assert!(t.complete(&json!(old), Ok(json!(0).into())));
        drop(a);
        let mut b = t.reserve().unwrap();
        assert_ne!(old, b.upstream_id(), "generation changes on reuse");
        assert!(!t.complete(&json!(old), Ok(json!(1).into())));
        assert!(t.complete(&json!(b.upstream_id()), Ok(json!(2).into())));
        assert_eq!((&mut b.rx).await.unwrap().unwrap().into_value(), json!(2));
    }

    /// Issue 24: one client's calls leave a place for each other client
    /// under its share, and an abandoned call keeps its client's place
    /// until its slot is freed.
    #[tokio::test(start_paused = true)]
    async fn a_client_over_its_share_leaves_room_and_abandoning_frees_none() {
        let (a, b, c) = (11, 13, 15);
        let shares = crate::share::Shares::new([(a, 1), (b, 1), (c, 1)]);
        let who = |owner| Claimant {
            shares: &shares,
            owner,
        };
        let callers = Callers::new(4);
        let (t, _cancel) = InFlight::new(4, Duration::from_secs(60));
        let first = callers.claim(who(a), "up", || 0).unwrap();
        let ticket = t.reserve_relayed(None, first.clone(), true).unwrap();
        let id = ticket.upstream_id();
        drop(first); // the caller gave up: its slot still holds the place
        drop(ticket);
        let _second = callers.claim(who(a), "up", || 0).unwrap();
        match callers.claim(who(a), "up", || 0) {
            Err(CallError::Share {
                held: 2,
                share: 1,
                capacity: 4,
                ..
            }) => {}
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a took a place kept for b or c"),
        }
        let _b = callers.claim(who(b), "up", || 0).unwrap().expect("a place");
        let _c = callers.claim(who(c), "up", || 0).unwrap().expect("a place");
        assert!(matches!(
            callers.claim(who(b), "up", || 0),
            Err(CallError::Busy { .. })
        ));
        let nobody = callers.claim(Claimant::NOBODY, "up", || 0).unwrap();
        assert!(nobody.is_none(), "without clients no share applies");
        // The abandoned call's late answer frees its slot, and a's place.
        assert!(!t.complete(&serde_json::json!(id), Ok(serde_json::json!(0).into())));
        assert!(callers.claim(who(a), "up", || 0).unwrap().is_some());
    }

    /// A place held by a call abandoned past its timeout is reclaimed
    /// before a client is refused (the upstream may never answer it).
    #[tokio::test(start_paused = true)]
    async fn a_stale_abandoned_call_gives_its_place_back_before_a_refusal() {
        let (a, b) = (11, 13);
        let shares = crate::share::Shares::new([(a, 1), (b, 1)]);
        let who = |owner| Claimant {
            shares: &shares,
            owner,
        };
        let callers = Callers::new(2);
        let (t, _cancel) = InFlight::new(2, Duration::from_secs(60));
        let claim = callers.claim(who(a), "up", || 0).unwrap();
        drop(t.reserve_relayed(None, claim, true).unwrap()); // abandoned
        let _b = callers.claim(who(b), "up", || 0).unwrap().expect("a place");
        let reclaim = || t.reclaim_stale();
        assert!(
            matches!(
                callers.claim(who(a), "up", reclaim),
                Err(CallError::Busy { .. })
            ),
            "not stale yet: still held"
        );
        tokio::time::advance(Duration::from_secs(61)).await;
        let again = callers.claim(who(a), "up", || t.reclaim_stale());
        assert!(
            again.unwrap().is_some(),
            "the stale call's place was reclaimed"
        );
    }
}
