//! Fair shares of the fixed tables among the configured clients (issue 24).
//!
//! With `[[client]]`s configured, every table the clients share — legacy
//! session slots, stream places, each upstream's in-flight slots, and
//! connections once a request head names their client — keeps room for
//! the clients under their share. A client's *share* of a table is its
//! capacity × the client's weight (`[[client]] share`, default 1) / the
//! total weight. The rule, in [`decide`]:
//!
//! - A client **under** its share takes a free place; when there is none,
//!   it takes an *idle* place of the client furthest over its share (what
//!   "idle" means is the table's: a session with no call in flight, a
//!   stream, a connection between requests; an in-flight call never is).
//! - A client **at or over** its share takes a free place only while more
//!   are free than there are other clients under their share: one place is
//!   kept for each of them. Otherwise it may only give up an idle place of
//!   its own for the new one.
//! - Otherwise the table refuses ([`Refusal`]): the caller answers 503 with
//!   `Retry-After` naming the limit.
//!
//! Without clients (everyone anonymous) no share applies: a table takes a
//! free place, else gives up one of its own idle places as it always did,
//! else refuses.
//!
//! Clients are known by their owner mark ([`crate::access::Access::owner`]),
//! which outlives a reload that reorders the `[[client]]` table; a mark no
//! client of the current generation has (removed by a reload, its places
//! not yet gone) has no share, so every place it holds is over. This module
//! is arithmetic only: each table keeps its own [`Counts`] under its own
//! lock and passes the [`Shares`] of the request's generation.

/// The configured clients of one generation and their weights, by owner
/// mark. Empty: no `[[client]]`, no shares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shares {
    clients: Vec<(u64, u32)>,
    total: u64,
}

impl Shares {
    /// The shares of `clients` (owner mark, weight ≥ 1), in config order.
    pub fn new(clients: impl IntoIterator<Item = (u64, u32)>) -> Shares {
        let clients: Vec<(u64, u32)> = clients.into_iter().collect();
        let total = clients.iter().map(|(_, w)| u64::from(*w)).sum();
        Shares { clients, total }
    }

    /// No shares (no `[[client]]`).
    pub const fn none() -> Shares {
        Shares {
            clients: Vec::new(),
            total: 0,
        }
    }

    /// Whether shares apply (some `[[client]]` is configured).
    pub fn applies(&self) -> bool {
        !self.clients.is_empty()
    }

    /// The weight of the client with owner mark `mark` (0: not a
    /// configured client).
    pub fn weight(&self, mark: u64) -> u32 {
        (self.clients.iter())
            .find(|(m, _)| *m == mark)
            .map_or(0, |(_, w)| *w)
    }

    /// `mark`'s share of a table of `capacity` places, in whole places
    /// (rounded down; for messages).
    pub fn share_of(&self, mark: u64, capacity: usize) -> usize {
        match self.total {
            0 => capacity,
            t => (capacity as u64 * u64::from(self.weight(mark)) / t) as usize,
        }
    }

    /// How far `held` places of a table of `capacity` put `mark` past its
    /// share, in 1/total-weight places: negative under its share, 0 at it,
    /// positive over it.
    pub fn excess(&self, mark: u64, held: u32, capacity: usize) -> i64 {
        let (total, weight) = (self.total as i64, i64::from(self.weight(mark)));
        i64::from(held) * total - capacity as i64 * weight
    }
}

/// A client asking for a place: its owner mark, and the shares of the
/// config generation it was admitted under.
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    /// The clients' shares.
    pub shares: &'a Shares,
    /// Its owner mark.
    pub owner: u64,
}

/// [`Claimant::NOBODY`]'s shares.
const NO_SHARES: Shares = Shares::none();

impl Claimant<'static> {
    /// Nobody in particular (the gateway's own requests): no share applies.
    pub const NOBODY: Claimant<'static> = Claimant {
        shares: &NO_SHARES,
        owner: 0,
    };
}

/// Places held per client in one table (owner mark → count): an entry per
/// client holding at least one place, so at most one per configured client
/// (and the anonymous mark 0, and marks a reload removed).
#[derive(Debug, Default)]
pub struct Counts {
    held: Vec<(u64, u32)>,
}

impl Counts {
    /// No place held.
    pub fn new() -> Counts {
        Counts::default()
    }

    /// Places `mark` holds.
    pub fn get(&self, mark: u64) -> u32 {
        (self.held.iter())
            .find(|(m, _)| *m == mark)
            .map_or(0, |(_, n)| *n)
    }

    /// `mark` took a place.
    pub fn add(&mut self, mark: u64) {
        match self.held.iter_mut().find(|(m, _)| *m == mark) {
            Some((_, n)) => *n += 1,
            None => self.held.push((mark, 1)),
        }
    }

    /// `mark` gave a place back (no-op if it held none).
    pub fn remove(&mut self, mark: u64) {
        if let Some(i) = self.held.iter().position(|(m, _)| *m == mark) {
            self.held[i].1 -= 1;
            if self.held[i].1 == 0 {
                self.held.swap_remove(i);
            }
        }
    }

    /// Every client holding a place, with how many.
    pub fn holders(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.held.iter().copied()
    }

    /// Places held by anyone.
    pub fn total(&self) -> usize {
        self.held.iter().map(|(_, n)| *n as usize).sum()
    }
}

/// What a table does for a client asking for one more place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Take a free place.
    Take,
    /// Take an idle place of this client (owner mark) — the client furthest
    /// over its share, or the asking client's own: the table ends what
    /// held it (cleanly) and gives its place to the asking client.
    TakeFrom(u64),
    /// No place.
    Refuse(Refusal),
}

/// Why [`decide`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The client is at or over its share, and the places left are kept for
    /// other clients under theirs (the `*_share` limits).
    Share,
    /// The table is full, and no place it could take is idle (the table's
    /// own limit: `session_capacity`, `streams`, `in_flight`, …).
    Full,
}

/// The one rule (the module's documentation): client `who` asks for a place
/// in a table of `capacity` places of which `used` are taken (`counts` of
/// them by clients; places nobody holds count in `used` only), under
/// `shares`. `idle(c)` tells whether client `c` holds a place the table
/// may give up now (for `c == who`: one it may give up to its own client).
pub fn decide(
    shares: &Shares,
    capacity: usize,
    used: usize,
    counts: &Counts,
    who: u64,
    idle: impl Fn(u64) -> bool,
) -> Decision {
    let free = capacity.saturating_sub(used);
    let own = || match idle(who) {
        true => Decision::TakeFrom(who),
        false => Decision::Refuse(Refusal::Full),
    };
    if !shares.applies() {
        return if free > 0 { Decision::Take } else { own() };
    }
    let excess = |c: u64| shares.excess(c, counts.get(c), capacity);
    if excess(who) < 0 {
        if free > 0 {
            return Decision::Take;
        }
        // The furthest over with something idle (ties: the lower mark, so
        // the choice does not depend on the table's order).
        let victim = (counts.holders())
            .filter(|&(c, _)| c != who && excess(c) > 0 && idle(c))
            .max_by_key(|&(c, _)| (excess(c), std::cmp::Reverse(c)));
        return match victim {
            Some((c, _)) => Decision::TakeFrom(c),
            None => own(),
        };
    }
    // One place kept for each other client under its share.
    let kept = (shares.clients.iter())
        .filter(|&&(c, _)| c != who && excess(c) < 0)
        .count();
    if free > kept {
        return Decision::Take;
    }
    match own() {
        Decision::Refuse(_) if kept > 0 => Decision::Refuse(Refusal::Share),
        d => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(held: &[(u64, u32)]) -> Counts {
        let mut c = Counts::new();
        for &(m, n) in held {
            for _ in 0..n {
                c.add(m);
            }
        }
        c
    }

    const A: u64 = 11;
    const B: u64 = 13;
    const C: u64 = 15;

    fn three() -> Shares {
        Shares::new([(A, 1), (B, 1), (C, 1)])
    }

    #[test]
    fn counts_keep_an_entry_per_holder() {
        let mut c = counts(&[(A, 2), (B, 1)]);
        assert_eq!((c.get(A), c.get(B), c.get(C), c.total()), (2, 1, 0, 3));
        c.remove(B);
        c.remove(B);
        c.remove(C);
        assert_eq!((c.get(B), c.total(), c.holders().count()), (0, 2, 1));
    }

    #[test]
    fn shares_are_capacity_times_weight_over_total() {
        let s = Shares::new([(A, 1), (B, 3)]);
        assert_eq!(
            (s.share_of(A, 8), s.share_of(B, 8), s.share_of(C, 8)),
            (2, 6, 0)
        );
        assert!(s.excess(A, 1, 8) < 0 && s.excess(A, 2, 8) == 0 && s.excess(A, 3, 8) > 0);
        assert!(s.excess(C, 1, 8) > 0, "a removed client's place is over");
        assert!(!Shares::default().applies());
    }

    #[test]
    fn without_clients_a_full_table_gives_up_only_its_own_idle_place() {
        let none = Shares::default();
        let c = counts(&[(0, 4)]);
        assert_eq!(decide(&none, 5, 4, &c, 0, |_| true), Decision::Take);
        assert_eq!(decide(&none, 4, 4, &c, 0, |_| true), Decision::TakeFrom(0));
        let full = decide(&none, 4, 4, &c, 0, |_| false);
        assert_eq!(full, Decision::Refuse(Refusal::Full));
    }

    #[test]
    fn a_client_over_its_share_leaves_one_place_per_client_under_theirs() {
        let s = three();
        // 9 places, A holds 6: B and C (none) each keep one.
        let c = counts(&[(A, 6)]);
        assert_eq!(decide(&s, 9, 6, &c, A, |_| false), Decision::Take);
        let c = counts(&[(A, 7)]);
        let no = decide(&s, 9, 7, &c, A, |_| false);
        assert_eq!(no, Decision::Refuse(Refusal::Share));
        assert_eq!(decide(&s, 9, 7, &c, A, |m| m == A), Decision::TakeFrom(A));
        // B takes one of the kept places, C the other.
        assert_eq!(decide(&s, 9, 7, &c, B, |_| true), Decision::Take);
        let c = counts(&[(A, 7), (B, 1)]);
        assert_eq!(decide(&s, 9, 8, &c, C, |_| true), Decision::Take);
        // Once B is at its share, only C's place is kept.
        let c = counts(&[(A, 5), (B, 3)]);
        assert_eq!(
            decide(&s, 9, 8, &c, A, |_| false),
            Decision::Refuse(Refusal::Share)
        );
        let c = counts(&[(A, 4), (B, 3)]);
        assert_eq!(decide(&s, 9, 7, &c, A, |_| false), Decision::Take);
    }

    #[test]
    fn a_client_under_its_share_takes_from_the_furthest_over_with_an_idle_place() {
        let s = Shares::new([(A, 1), (B, 1), (C, 2)]);
        // 8 places: shares 2, 2, 4. A holds 5 (3 over), C 3 (under), B none.
        let c = counts(&[(A, 5), (C, 3)]);
        assert_eq!(decide(&s, 8, 8, &c, B, |_| true), Decision::TakeFrom(A));
        // A's places all busy: nobody else is over; B has nothing of its own.
        let busy = decide(&s, 8, 8, &c, B, |m| m == C);
        assert_eq!(busy, Decision::Refuse(Refusal::Full));
        // Places nobody holds (used > counted) are never taken from anyone.
        let c = counts(&[(C, 3)]);
        let unheld = decide(&s, 8, 8, &c, B, |m| m == C);
        assert_eq!(unheld, Decision::Refuse(Refusal::Full));
        // A mark no client has any more is over by all it holds.
        let c = counts(&[(A, 2), (99, 3), (C, 3)]);
        assert_eq!(decide(&s, 8, 8, &c, B, |_| true), Decision::TakeFrom(99));
    }
}
