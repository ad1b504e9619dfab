//! The fixed-capacity table of requests in flight on one multiplexed upstream
//! connection (stdio), and the JSON-RPC id rewriting it implies.
//!
//! Every request sent upstream gets a fresh numeric id `generation << 16 | slot`,
//! so callers from different sessions, or the same id reused by two clients,
//! never collide; the caller keeps its own id and gets the answer through a
//! oneshot channel. A slot is freed when its [`Ticket`] is dropped (answer,
//! timeout or caller gone), so an abandoned call cannot leak a slot.

use super::relay::Relay;
use crate::protocol::RpcError;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// What the reader hands a waiting caller: `Ok(result)` or the peer's error.
pub type Reply = Result<Value, RpcError>;

struct Slot {
    generation: u32,
    waiter: Option<oneshot::Sender<Reply>>,
    /// Where this call's relayed messages go, and the caller's own progress token.
    relay: Option<(Relay, Option<Value>)>,
}

struct Inner {
    slots: Box<[Slot]>,
    free: Vec<u16>,
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
        let s = &mut g.slots[self.slot as usize];
        if s.generation == self.generation {
            s.waiter = None;
            s.relay = None;
            s.generation = s.generation.wrapping_add(1);
            g.free.push(self.slot);
        }
    }
}

impl InFlight {
    /// A table with `capacity` slots (clamped to 1…65,536), allocated now.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, 1 << 16);
        let slots = (0..capacity)
            .map(|_| Slot {
                generation: 0,
                waiter: None,
                relay: None,
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        let free = (0..capacity as u32).rev().map(|i| i as u16).collect();
        InFlight {
            inner: Arc::new(Mutex::new(Inner { slots, free })),
        }
    }

    /// Reserves a slot; `None` when the table is full (the caller answers
    /// with [`crate::protocol::UPSTREAM_BUSY`] at once, nothing is queued).
    pub fn reserve(&self) -> Option<Ticket> {
        self.reserve_relayed(None)
    }

    /// Like [`InFlight::reserve`], remembering the call's relay and the
    /// caller's original `progressToken` (the upstream sees the ticket's id instead).
    pub fn reserve_relayed(&self, relay: Option<(Relay, Option<Value>)>) -> Option<Ticket> {
        let mut g = self.inner.lock().expect("in-flight lock");
        let slot = g.free.pop()?;
        let (tx, rx) = oneshot::channel();
        let s = &mut g.slots[slot as usize];
        s.waiter = Some(tx);
        s.relay = relay;
        let generation = s.generation;
        drop(g);
        Some(Ticket {
            table: self.clone(),
            slot,
            generation,
            rx,
        })
    }

    /// Delivers a reply for upstream id `id`; false if nobody waits for it
    /// (late answer after a timeout, or an id we never sent).
    pub fn complete(&self, id: &Value, reply: Reply) -> bool {
        let Some(n) = id.as_u64() else { return false };
        let (slot, generation) = ((n & 0xffff) as usize, (n >> 16) as u32);
        let mut g = self.inner.lock().expect("in-flight lock");
        match g.slots.get_mut(slot) {
            Some(s) if s.generation == generation => match s.waiter.take() {
                Some(tx) => tx.send(reply).is_ok(),
                None => false,
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

    /// The relay of the only call in flight, if exactly one is and it has one
    /// (unattributable upstream messages go there, or nowhere).
    pub fn sole_relay(&self) -> Option<Relay> {
        let g = self.inner.lock().expect("in-flight lock");
        if g.slots.len() - g.free.len() != 1 {
            return None;
        }
        g.slots
            .iter()
            .find(|s| s.waiter.is_some())
            .and_then(|s| s.relay.as_ref().map(|(r, _)| r.clone()))
    }

    /// Fails every waiter (connection lost): their receivers see a closed channel.
    pub fn fail_all(&self) {
        let mut g = self.inner.lock().expect("in-flight lock");
        for s in g.slots.iter_mut() {
            s.waiter = None;
            s.relay = None;
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
    use serde_json::json;

    #[tokio::test]
    async fn full_table_refuses_and_drop_frees() {
        let t = InFlight::new(2);
        let a = t.reserve().unwrap();
        let b = t.reserve().unwrap();
        assert!(t.reserve().is_none());
        assert_ne!(a.upstream_id(), b.upstream_id());
        drop(a);
        assert_eq!(t.len(), 1);
        let mut c = t.reserve().unwrap();
        assert!(t.complete(&json!(c.upstream_id()), Ok(json!({"x": 1}))));
        assert_eq!((&mut c.rx).await.unwrap().unwrap(), json!({"x": 1}));
        drop(b);
    }

    #[tokio::test]
    async fn late_answer_for_reused_slot_is_ignored() {
        let t = InFlight::new(1);
        let a = t.reserve().unwrap();
        let old = a.upstream_id();
        drop(a);
        let mut b = t.reserve().unwrap();
        assert_ne!(old, b.upstream_id(), "generation changes on reuse");
        assert!(!t.complete(&json!(old), Ok(json!(1))));
        assert!(t.complete(&json!(b.upstream_id()), Ok(json!(2))));
        assert_eq!((&mut b.rx).await.unwrap().unwrap(), json!(2));
    }
}
