//! Downstream resource subscriptions: which client asked to hear about which
//! resource URI, served by which upstream
//! (`../shared/spec/2025-11-25/server/resources.mdx` §Subscriptions;
//! `../shared/spec/2026-07-28/patterns-subscriptions.mdx`
//! `resourceSubscriptions`).
//!
//! A fixed table of [`crate::limits::MAX_RESOURCE_SUBSCRIPTIONS`] entries,
//! allocated once; a client (a legacy session, or one modern listen stream)
//! holds at most [`crate::limits::MAX_SUBSCRIPTIONS_PER_CLIENT`] of them, and
//! a URI longer than [`crate::limits::MAX_SUBSCRIPTION_URI_BYTES`] is refused.
//! An upstream's `notifications/resources/updated` marks the matching
//! entries *updated* (a flag, not a queue: several updates before the client
//! reads collapse into one, as the spec's level-triggered "it changed, read
//! it again" allows) and wakes every stream ([`Subscriptions::changed`]);
//! each stream takes the updates of its own client. The table never asks
//! the clock: nothing here expires by time, entries go when their client
//! unsubscribes or goes away (a deleted or evicted session, a closed stream).
//!
//! Which URIs each upstream should be subscribed to is derived from the
//! table ([`Subscriptions::uris_of`]); the upstream's owner task reconciles
//! that with what it asked the upstream for (`supervisor::owner`).

use crate::limits;
use crate::session::SessionId;
use std::sync::Mutex;
use tokio::sync::Notify;

/// Who subscribed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subscriber {
    /// A legacy session (updates go to its GET stream).
    Session(SessionId),
    /// A modern `subscriptions/listen` stream, by its process-unique number.
    Listen(u64),
}

#[derive(Debug)]
struct Entry {
    who: Subscriber,
    /// [`crate::upstream::Upstream::id`] of the upstream serving the URI.
    upstream: usize,
    uri: Box<str>,
    updated: bool,
}

/// Why a subscription was refused (JSON-RPC -32602 for the URI, -31006
/// for the table; counted in `mcp_edge_refused_total{limit="resource_subscriptions"}`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubscribeError {
    /// Every entry of the table is taken.
    #[error("all {capacity} resource subscriptions are taken")]
    Full {
        /// The table's capacity.
        capacity: usize,
    },
    /// This client already holds its share.
    #[error("this client already holds {max} resource subscriptions")]
    TooMany {
        /// [`limits::MAX_SUBSCRIPTIONS_PER_CLIENT`].
        max: usize,
    },
    /// The URI is longer than [`limits::MAX_SUBSCRIPTION_URI_BYTES`].
    #[error("resource URI longer than {max} bytes")]
    UriTooLong {
        /// The limit in bytes.
        max: usize,
    },
}

/// The table, its lock, and the wake-ups of streams and owners.
pub struct Subscriptions {
    entries: Mutex<Vec<Option<Entry>>>,
    /// Woken (all waiters) when an update was marked; streams then take
    /// their updates (each registers before it looks, so none is missed).
    pub changed: Notify,
    /// Moved on whenever the set of wanted (upstream, URI) pairs may have
    /// changed; owner tasks reconcile on it (a `watch`, so a change made
    /// while an owner was busy is seen when it next looks).
    pub wanted: tokio::sync::watch::Sender<u64>,
}

impl Subscriptions {
    /// A table of `capacity` entries (all allocated now).
    pub fn new(capacity: usize) -> Self {
        let mut v = Vec::with_capacity(capacity);
        v.resize_with(capacity, || None);
        Subscriptions {
            entries: Mutex::new(v),
            changed: Notify::new(),
            wanted: tokio::sync::watch::Sender::new(0),
        }
    }

    fn wanted_changed(&self) {
        self.wanted.send_modify(|g| *g = g.wrapping_add(1));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Entry>>> {
        self.entries.lock().expect("subscriptions lock")
    }

    /// Records that `who` wants updates of `uri` from upstream `upstream`;
    /// true if this added an entry (false: `who` already had it).
    /// Wakes the owners when the upstream's wanted set grew.
    pub fn subscribe(
        &self,
        who: Subscriber,
        upstream: usize,
        uri: &str,
    ) -> Result<bool, SubscribeError> {
        if uri.len() > limits::MAX_SUBSCRIPTION_URI_BYTES {
            return Err(SubscribeError::UriTooLong {
                max: limits::MAX_SUBSCRIPTION_URI_BYTES,
            });
        }
        let mut t = self.lock();
        let mine = t.iter().flatten().filter(|e| e.who == who);
        let mut held = 0;
        for e in mine {
            if &*e.uri == uri {
                return Ok(false);
            }
            held += 1;
        }
        if held >= limits::MAX_SUBSCRIPTIONS_PER_CLIENT {
            return Err(SubscribeError::TooMany {
                max: limits::MAX_SUBSCRIPTIONS_PER_CLIENT,
            });
        }
        let capacity = t.len();
        let wanted_before = t
            .iter()
            .flatten()
            .any(|e| e.upstream == upstream && &*e.uri == uri);
        let free = t
            .iter_mut()
            .find(|e| e.is_none())
            .ok_or(SubscribeError::Full { capacity })?;
        *free = Some(Entry {
            who,
            upstream,
            uri: uri.into(),
            updated: false,
        });
        drop(t);
        if !wanted_before {
            self.wanted_changed();
        }
        Ok(true)
    }

    /// Forgets `who`'s subscription to `uri`; true if there was one.
    pub fn unsubscribe(&self, who: Subscriber, uri: &str) -> bool {
        let mut t = self.lock();
        let Some(slot) = t
            .iter_mut()
            .find(|e| e.as_ref().is_some_and(|e| e.who == who && &*e.uri == uri))
        else {
            return false;
        };
        *slot = None;
        drop(t);
        self.wanted_changed();
        true
    }

    /// Forgets every subscription of `who` (its session or stream is gone);
    /// returns how many there were.
    pub fn remove_subscriber(&self, who: Subscriber) -> usize {
        let mut t = self.lock();
        let mut n = 0;
        for slot in t.iter_mut() {
            if slot.as_ref().is_some_and(|e| e.who == who) {
                *slot = None;
                n += 1;
            }
        }
        drop(t);
        if n > 0 {
            self.wanted_changed();
        }
        n
    }

    /// A reload replaced upstream `old` by `new` (same name, new id): its
    /// subscriptions move over (`new` then asks its upstream for them); with
    /// `new` = `None` (removed) they are forgotten.
    pub fn rekey(&self, old: usize, new: Option<usize>) {
        let mut t = self.lock();
        for slot in t.iter_mut() {
            if slot.as_ref().is_some_and(|e| e.upstream == old) {
                match new {
                    Some(n) => {
                        if let Some(e) = slot.as_mut() {
                            e.upstream = n;
                        }
                    }
                    None => *slot = None,
                }
            }
        }
        drop(t);
        self.wanted_changed();
    }

    /// Upstream `upstream` said `uri` changed: marks every subscription to
    /// it and wakes the streams. Returns how many clients will be told.
    pub fn updated(&self, upstream: usize, uri: &str) -> usize {
        let mut t = self.lock();
        let mut n = 0;
        for e in t.iter_mut().flatten() {
            if e.upstream == upstream && &*e.uri == uri {
                e.updated = true;
                n += 1;
            }
        }
        drop(t);
        if n > 0 {
            self.changed.notify_waiters();
        }
        n
    }

    /// The URIs `who` should be told were updated (clearing the marks).
    pub fn take_updates(&self, who: Subscriber) -> Vec<Box<str>> {
        let mut t = self.lock();
        let mut out = Vec::new();
        for e in t.iter_mut().flatten() {
            if e.who == who && e.updated {
                e.updated = false;
                out.push(e.uri.clone());
            }
        }
        out
    }

    /// The distinct URIs some client wants from upstream `upstream`, sorted.
    pub fn uris_of(&self, upstream: usize) -> Vec<Box<str>> {
        let t = self.lock();
        let mut v: Vec<Box<str>> = t
            .iter()
            .flatten()
            .filter(|e| e.upstream == upstream)
            .map(|e| e.uri.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Subscriptions held now.
    pub fn len(&self) -> usize {
        self.lock().iter().flatten().count()
    }

    /// True when nobody subscribed to anything.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The table's capacity.
    pub fn capacity(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Subscriber = Subscriber::Listen(1);
    const B: Subscriber = Subscriber::Listen(2);

    #[test]
    fn subscribe_mark_take_and_forget() {
        let s = Subscriptions::new(4);
        assert!(s.subscribe(A, 7, "file:///a").unwrap());
        assert!(!s.subscribe(A, 7, "file:///a").unwrap(), "twice is once");
        s.subscribe(B, 7, "file:///a").unwrap();
        s.subscribe(B, 8, "file:///b").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.uris_of(7), vec!["file:///a".into()]);
        // Two updates before anyone reads collapse into one.
        assert_eq!(s.updated(7, "file:///a"), 2);
        assert_eq!(s.updated(7, "file:///a"), 2);
        assert_eq!(s.updated(7, "file:///b"), 0, "b is upstream 8's");
        assert_eq!(s.take_updates(A), vec!["file:///a".into()]);
        assert!(s.take_updates(A).is_empty());
        assert!(s.unsubscribe(A, "file:///a"));
        assert!(!s.unsubscribe(A, "file:///a"));
        assert_eq!(s.uris_of(7), vec!["file:///a".into()], "B still wants it");
        assert_eq!(s.remove_subscriber(B), 2);
        assert!(s.is_empty() && s.uris_of(7).is_empty());
        // A reload moves an upstream's subscriptions to its successor.
        s.subscribe(A, 7, "file:///a").unwrap();
        s.rekey(7, Some(9));
        assert_eq!(s.uris_of(9), vec!["file:///a".into()]);
        s.rekey(9, None);
        assert!(s.is_empty());
    }

    #[test]
    fn a_slot_costs_what_the_budget_says() {
        let slot = std::mem::size_of::<Option<Entry>>();
        assert!(slot <= crate::budget::SUBSCRIPTION_BYTES, "{slot} B");
    }

    #[test]
    fn limits_refuse_and_lose_nothing() {
        let s = Subscriptions::new(2);
        s.subscribe(A, 1, "x://1").unwrap();
        s.subscribe(B, 1, "x://2").unwrap();
        assert_eq!(
            s.subscribe(B, 1, "x://3"),
            Err(SubscribeError::Full { capacity: 2 })
        );
        let long = "x://".to_string() + &"a".repeat(limits::MAX_SUBSCRIPTION_URI_BYTES);
        assert!(matches!(
            s.subscribe(A, 1, &long),
            Err(SubscribeError::UriTooLong { .. })
        ));
        let many = Subscriptions::new(limits::MAX_SUBSCRIPTIONS_PER_CLIENT + 1);
        for i in 0..limits::MAX_SUBSCRIPTIONS_PER_CLIENT {
            many.subscribe(A, 1, &format!("x://{i}")).unwrap();
        }
        assert!(matches!(
            many.subscribe(A, 1, "x://more"),
            Err(SubscribeError::TooMany { .. })
        ));
        many.subscribe(B, 1, "x://more").unwrap();
        assert_eq!(s.len(), 2, "refusals changed nothing");
    }
}
