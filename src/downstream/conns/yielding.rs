//! Who yields a place of the connection table when a new connection needs
//! one ([`super`]'s rules): a peer's own longest idle connection when it
//! holds its share ([`Conns::admit`]), else the longest idle of the client
//! furthest over its share, or of anyone ([`Conns::close_oldest_idle`]).
//! The accept loop's side of the table; every call takes `now`.

use super::{Conns, Entry, Slot, CLOSED, GRACE, UNNAMED, UNSTAMPED};
use crate::share::Shares;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// The key a peer's share is counted by: an IPv4 address (IPv4-mapped
/// IPv6 included), or an IPv6 address's /64 (one host usually holds a
/// whole /64).
pub fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & (u128::MAX << 64)).into()),
        },
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Its peer holds its whole share, none of them idle for a grace period.
    #[error("this address holds its share of connections ({0}), all in use")]
    PeerShare(usize),
}

/// What admitting a connection did to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Room without closing anything.
    Free,
    /// The peer's longest idle connection was told to close.
    ClosedSamePeer,
}

/// What [`Conns::close_oldest_idle`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Yield {
    /// A connection was told to close; its place frees once it has.
    Closed,
    /// The longest idle connection comes of age after this long.
    After(Duration),
    /// Every connection is busy.
    AllBusy,
}

impl Conns {
    /// Makes room for a new connection from `peer` (a [`peer_key`]) within
    /// its share: when the peer already holds `per_peer` places, its longest
    /// idle one is told to close; if it has none past the grace period, the
    /// new one is refused. A share of the whole table is no limit. (The
    /// place itself is taken by [`Conns::insert`].)
    pub fn admit(&self, peer: IpAddr, now: Instant) -> Result<Admission, Refusal> {
        let now = self.ms(now);
        let t = self.table.lock().expect("conns");
        // A share of every place is no share: the whole table's rule applies
        // (wait for a place rather than be refused).
        if self.per_peer >= t.entries.len() {
            return Ok(Admission::Free);
        }
        let held = t
            .entries
            .iter()
            .flatten()
            .filter(|(p, _)| *p == peer)
            .count();
        if held < self.per_peer {
            return Ok(Admission::Free);
        }
        let of_peer = t.entries.iter().flatten().filter(|(p, _)| *p == peer);
        match close_oldest(of_peer, now, |_| 0) {
            Yield::Closed => Ok(Admission::ClosedSamePeer),
            Yield::After(_) | Yield::AllBusy => Err(Refusal::PeerShare(self.per_peer)),
        }
    }

    /// Tells a connection idle for the grace period, of any peer, to close:
    /// of the client furthest over its share under `shares` (without
    /// shares: of anyone), the one idle longest.
    pub fn close_oldest_idle(&self, now: Instant, shares: &Shares) -> Yield {
        let now = self.ms(now);
        let t = self.table.lock().expect("conns");
        let capacity = t.entries.len();
        let excess = |s: &Slot| match s.owner.load(Ordering::Relaxed) {
            UNNAMED => 0,
            o => shares.excess(o, t.counts.get(o), capacity),
        };
        close_oldest(t.entries.iter().flatten(), now, excess)
    }
}

/// Of `entries`, tells one idle connection to close — the highest `rank`
/// (how far its client is over its share; positive: over, and then it
/// gets no grace period), then the one idle longest, of those idle for the
/// grace period — marking it, so a head or body end arriving now finds it
/// closed; or says when the one idle longest comes of age. Stamps
/// connections gone idle since the last look.
fn close_oldest<'a>(
    entries: impl Iterator<Item = &'a Entry>,
    now: u64,
    rank: impl Fn(&Slot) -> i64,
) -> Yield {
    let since = |s: &Slot| {
        let _ = (s.since).compare_exchange(UNSTAMPED, now, Ordering::Relaxed, Ordering::Relaxed);
        s.since.load(Ordering::Relaxed)
    };
    let grace = GRACE.as_millis() as u64;
    let (mut oldest, mut chosen) = (None::<u64>, None);
    let idle = entries
        .map(|(_, s)| (s, s.state.load(Ordering::Acquire)))
        .filter(|(_, v)| Slot::idle(*v));
    for (slot, seen) in idle {
        let at = since(slot);
        oldest = Some(oldest.map_or(at, |o| o.min(at)));
        let rank = rank(slot);
        if rank > 0 || now.saturating_sub(at) >= grace {
            let key = (rank, std::cmp::Reverse(at));
            if chosen.as_ref().is_none_or(|(k, _, _)| key > *k) {
                chosen = Some((key, slot, seen));
            }
        }
    }
    let Some((_, slot, seen)) = chosen else {
        return match oldest {
            None => Yield::AllBusy,
            Some(at) => Yield::After(GRACE - Duration::from_millis(now.saturating_sub(at))),
        };
    };
    if (slot.state)
        .compare_exchange(seen, seen | CLOSED, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // It changed between the load and now (a head, or a body's end).
        return Yield::After(Duration::ZERO);
    }
    slot.close.notify_one();
    Yield::Closed
}
