//! Unit tests of the session table.
use super::*;

const V: ProtocolVersion = ProtocolVersion::V2025_11_25;

/// A session of `owner` without `[[client]]` shares.
fn ins(t: &mut Table, owner: u64, now: Instant) -> Result<SessionId, SessionError> {
    t.insert(V, owner, ClientCaps::NONE, &Shares::default(), now)
        .map(|i| i.id)
}

/// Issue 13 part 6: a request in flight keeps its session; the idle
/// clock starts when the last one ends.
#[test]
fn a_session_with_a_request_in_flight_is_not_idle() {
    let s = Duration::from_secs;
    let t0 = Instant::now();
    let mut t = Table::new(2, s(10), s(5));
    let a = ins(&mut t, 0, t0).unwrap();
    let b = ins(&mut t, 0, t0).unwrap();
    assert!(t.begin_request(&a));
    assert!(t.begin_request(&a), "two at once");
    // 15 s later: b expired, a did not.
    assert_eq!(t.expire(t0 + s(15)), 1);
    assert!(t.peek(&b, t0 + s(15)).is_none());
    assert!(t.touch(&a, t0 + s(15)).is_ok());
    // Full of busy sessions: refused, not evicted (and no panic).
    let c = ins(&mut t, 0, t0 + s(15)).unwrap();
    assert!(t.begin_request(&c));
    assert!(matches!(
        ins(&mut t, 0, t0 + s(30)),
        Err(SessionError::Full { .. })
    ));
    t.end_request(&a, t0 + s(20));
    assert_eq!(t.expire(t0 + s(29)), 0, "one request of a still runs");
    t.end_request(&a, t0 + s(30));
    assert_eq!(t.expire(t0 + s(39)), 0, "idle since 30 s only");
    assert_eq!(t.expire(t0 + s(40)), 1);
    assert!(t.peek(&a, t0 + s(40)).is_none());
    // A busy session is still deleted at once; its end is a no-op.
    assert!(t.remove(&c, Removal::Deleted));
    t.end_request(&c, t0 + s(41));
    assert!(t.is_empty());
    let d = ins(&mut t, 0, t0 + s(41)).unwrap();
    assert_eq!(t.expire(t0 + s(51)), 1, "{d:?} expires normally");
}

/// With no minimum idle (0 s) and every session busy, a new one is
/// refused, not a panic on an empty recency list.
#[test]
fn a_table_of_busy_sessions_refuses_even_without_a_minimum_idle() {
    let t0 = Instant::now();
    let mut t = Table::new(1, Duration::from_secs(10), Duration::ZERO);
    let a = ins(&mut t, 0, t0).unwrap();
    assert!(t.begin_request(&a));
    assert!(matches!(ins(&mut t, 0, t0), Err(SessionError::Full { .. })));
    t.end_request(&a, t0);
    assert!(ins(&mut t, 0, t0).is_ok(), "idle again: evicted");
}

#[test]
fn id_round_trips_and_rejects_garbage() {
    let mut t = Table::new(4, Duration::from_secs(60), Duration::from_secs(60));
    let id = ins(&mut t, 0, Instant::now()).unwrap();
    let h = id.to_header();
    assert_eq!(h.len(), "edge.".len() + 36);
    assert!(h.starts_with("edge."), "{h}");
    assert_eq!(SessionId::parse(&h), Some(id));
    assert_eq!(SessionId::parse("nope"), None);
    assert_eq!(SessionId::parse(&h["edge.".len()..]), None, "no box");
    let hex = &h["edge.".len()..];
    assert_eq!(
        SessionId::parse(&hex.replace(|c: char| c.is_ascii_digit(), "g")),
        None
    );
}

#[test]
fn ids_name_their_box_and_another_box_finds_none_of_them() {
    let t0 = Instant::now();
    let e1 = crate::instance::InstanceId::parse("e1").unwrap();
    let e2 = crate::instance::InstanceId::parse("e2").unwrap();
    let s = Duration::from_secs(60);
    let mut one = Table::new(2, s, s).with_instance(e1);
    let mut two = Table::new(2, s, s).with_instance(e2);
    let a = ins(&mut one, 0, t0).unwrap();
    let b = ins(&mut two, 0, t0).unwrap();
    assert!(a.to_header().starts_with("e1."), "{}", a.to_header());
    assert_eq!(SessionId::parse(&a.to_header()).unwrap().instance(), e1);
    // The same slot and secret under another box's name: not found.
    let moved = a.to_header().replacen("e1.", "e2.", 1);
    let moved = SessionId::parse(&moved).unwrap();
    assert!(one.owner(&moved).is_none());
    assert!(two.owner(&a).is_none());
    assert!(two.owner(&b).is_some());
}

#[test]
fn the_owner_is_known_until_the_slot_is_freed_expired_or_not() {
    let t0 = Instant::now();
    let mut t = Table::new(2, Duration::from_secs(60), Duration::from_secs(60));
    let a = ins(&mut t, 7, t0).unwrap();
    assert_eq!(t.owner(&a), Some(7));
    assert!(
        t.peek(&a, t0 + Duration::from_secs(61)).is_none(),
        "expired"
    );
    assert_eq!(t.owner(&a), Some(7), "still its slot: calls may run");
    t.expire(t0 + Duration::from_secs(61));
    assert_eq!(t.owner(&a), None);
}

#[test]
fn revoking_an_owner_frees_its_sessions_only() {
    let t0 = Instant::now();
    let mut t = Table::new(4, Duration::from_secs(60), Duration::from_secs(60));
    let a = ins(&mut t, 1, t0).unwrap();
    let b = ins(&mut t, 2, t0).unwrap();
    let a2 = ins(&mut t, 1, t0).unwrap();
    assert_eq!(t.revoke(|o| o != 1, Removal::Revoked), 2);
    let gone: Vec<_> = t.take_ended().collect();
    assert_eq!(gone, [(a, Removal::Revoked), (a2, Removal::Revoked)]);
    assert_eq!((t.len(), t.owner(&a), t.owner(&b)), (1, None, Some(2)));
}

#[test]
fn full_table_refuses_then_reuses_expired_slot() {
    let t0 = Instant::now();
    let mut t = Table::new(2, Duration::from_secs(60), Duration::from_secs(60));
    let a = ins(&mut t, 0, t0).unwrap();
    let _b = ins(&mut t, 0, t0 + Duration::from_secs(1)).unwrap();
    assert_eq!(
        ins(&mut t, 0, t0 + Duration::from_secs(2)),
        Err(SessionError::Full {
            capacity: 2,
            retry_after: Duration::from_secs(58)
        })
    );
    // After a's idle timeout its slot is taken over; a is gone.
    let c = ins(&mut t, 0, t0 + Duration::from_secs(60)).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(
        t.touch(&a, t0 + Duration::from_secs(60)),
        Err(SessionError::NotFound)
    );
    assert!(t.touch(&c, t0 + Duration::from_secs(61)).is_ok());
}

#[test]
fn full_table_evicts_the_least_recently_used_idle_session() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let mut t = Table::new(3, s(3600), s(30));
    let a = ins(&mut t, 0, t0).unwrap();
    let b = ins(&mut t, 0, t0).unwrap();
    let c = ins(&mut t, 0, t0).unwrap();
    // a is used again later, so b is now the least recently used.
    t.touch(&a, t0 + s(20)).unwrap();
    // Nobody idle 30 s yet at t0+25: refused, retry when b qualifies.
    assert_eq!(
        ins(&mut t, 0, t0 + s(25)),
        Err(SessionError::Full {
            capacity: 3,
            retry_after: s(5)
        })
    );
    let d = ins(&mut t, 0, t0 + s(31)).unwrap();
    assert_eq!(
        t.touch(&b, t0 + s(31)),
        Err(SessionError::NotFound),
        "b (LRU) evicted"
    );
    for id in [a, c, d] {
        assert!(t.touch(&id, t0 + s(32)).is_ok());
    }
    assert_eq!(t.len(), 3);
}

#[test]
fn a_million_inserts_never_grow_the_table() {
    let mut t = Table::new(64, Duration::from_secs(60), Duration::from_secs(1));
    let bytes = t.footprint_bytes();
    let t0 = Instant::now();
    for n in 0..1_000_000u64 {
        let now = t0 + Duration::from_millis(n * 20);
        // 20 ms apart: the 64-slot table is always full of sessions < 1.3 s
        // idle, so about every other insert evicts the LRU one.
        let _ = ins(&mut t, 0, now);
        assert!(t.len() <= 64);
    }
    assert_eq!(t.footprint_bytes(), bytes);
    assert_eq!(t.len(), 64);
}

#[test]
fn delete_frees_at_once_and_id_is_dead() {
    let now = Instant::now();
    let mut t = Table::new(1, Duration::from_secs(60), Duration::from_secs(60));
    let a = ins(&mut t, 0, now).unwrap();
    assert!(t.remove(&a, Removal::Deleted));
    assert!(!t.remove(&a, Removal::Deleted));
    assert_eq!(t.touch(&a, now), Err(SessionError::NotFound));
    let b = ins(&mut t, 0, now).unwrap();
    assert_ne!(a, b, "a reused slot gets a fresh secret");
    assert_eq!(t.touch(&a, now), Err(SessionError::NotFound));
}

#[test]
fn touch_keeps_alive_and_expire_sweeps() {
    let t0 = Instant::now();
    let mut t = Table::new(8, Duration::from_secs(10), Duration::from_secs(10));
    let a = ins(&mut t, 0, t0).unwrap();
    let b = ins(&mut t, 0, t0).unwrap();
    assert!(t.touch(&a, t0 + Duration::from_secs(9)).is_ok());
    assert_eq!(t.expire(t0 + Duration::from_secs(12)), 1);
    assert_eq!(t.len(), 1);
    assert_eq!(
        t.touch(&b, t0 + Duration::from_secs(12)),
        Err(SessionError::NotFound)
    );
    assert_eq!(
        t.touch(&a, t0 + Duration::from_secs(19)),
        Err(SessionError::NotFound)
    );
    assert!(t.is_empty());
}

/// Issue 24 part 3: every way a session leaves the table is recorded for
/// its owner to finish, with its reason, and taken once.
#[test]
fn every_ending_is_recorded_once_with_its_reason() {
    let s = Duration::from_secs;
    let t0 = Instant::now();
    let mut t = Table::new(2, s(10), s(5));
    let ended = |t: &mut Table| t.take_ended().collect::<Vec<_>>();
    let a = ins(&mut t, 1, t0).unwrap();
    let b = ins(&mut t, 1, t0).unwrap();
    // DELETE.
    assert!(t.remove(&a, Removal::Deleted));
    assert_eq!(ended(&mut t), [(a, Removal::Deleted)]);
    // An expired session found by a request.
    let c = ins(&mut t, 1, t0).unwrap();
    assert_eq!(t.touch(&b, t0 + s(11)), Err(SessionError::NotFound));
    assert_eq!(ended(&mut t), [(b, Removal::Idle)]);
    // LRU eviction by a new session (c idle 8 s: past the 5 s minimum, not expired).
    let d = ins(&mut t, 2, t0 + s(6)).unwrap();
    let e = ins(&mut t, 1, t0 + s(8)).unwrap();
    assert_eq!(ended(&mut t), [(c, Removal::Lru)]);
    // The sweep, then revocation.
    assert_eq!(t.expire(t0 + s(17)), 1);
    assert_eq!(ended(&mut t), [(d, Removal::Idle)]);
    assert_eq!(t.revoke(|o| o != 1, Removal::Revoked), 1);
    assert_eq!(ended(&mut t), [(e, Removal::Revoked)]);
    assert!(ended(&mut t).is_empty(), "taken once");
    assert!(t.is_empty());
    // Endings never taken: the oldest go, the buffer never grows.
    let cap = t.footprint_bytes();
    for _ in 0..5 {
        let x = ins(&mut t, 1, t0).unwrap();
        t.remove(&x, Removal::Deleted);
    }
    assert_eq!((ended(&mut t).len(), t.footprint_bytes()), (2, cap));
}

/// `enter` is the one lookup of a request: another owner's session is
/// unknown to it, and the session it enters is busy until `end_request`.
#[test]
fn enter_checks_the_owner_and_holds_the_session() {
    let s = Duration::from_secs;
    let t0 = Instant::now();
    let mut t = Table::new(1, s(10), s(0));
    let a = ins(&mut t, 1, t0).unwrap();
    assert_eq!(t.enter(&a, 2, t0), Err(SessionError::NotFound));
    assert_eq!(t.enter(&a, 1, t0).map(|x| x.owner), Ok(1));
    assert!(matches!(
        ins(&mut t, 1, t0 + s(60)),
        Err(SessionError::Full { .. })
    ));
    t.end_request(&a, t0 + s(60));
    assert!(ins(&mut t, 1, t0 + s(61)).is_ok());
}

/// Issue 24: with `[[client]]`s, a client kept warm cannot take the last
/// slots, and a client under its share evicts the least recently used idle
/// session of the client furthest over, however recently used; never one
/// with a request in flight.
#[test]
fn shares_keep_room_and_evict_the_furthest_over_client() {
    let s = Duration::from_secs;
    let t0 = Instant::now();
    let (a, b, c) = (11u64, 13u64, 15u64);
    let shares = Shares::new([(a, 1), (b, 1), (c, 1)]);
    let mut t = Table::new(6, s(600), s(60));
    let put = |t: &mut Table, owner, at| t.insert(V, owner, ClientCaps::NONE, &shares, at);
    let mine: Vec<SessionId> = (0..4).map(|_| put(&mut t, a, t0).unwrap().id).collect();
    // Two slots left, one kept for b and one for c: a is refused.
    match put(&mut t, a, t0 + s(1)) {
        Err(SessionError::Share {
            held: 4,
            share: 2,
            capacity: 6,
            retry_after,
        }) => assert_eq!(retry_after, s(59)),
        other => panic!("{other:?}"),
    }
    let b1 = put(&mut t, b, t0 + s(2)).unwrap();
    assert_eq!((b1.expired, b1.evicted), (None, None));
    let b2 = put(&mut t, b, t0 + s(2)).unwrap().id;
    // Full: b (2 of 2) is at its share; c takes a's least recently used
    // session with no request in flight, used a second ago.
    assert!(t.begin_request(&mine[0]));
    let c1 = put(&mut t, c, t0 + s(3)).unwrap();
    assert_eq!(c1.evicted, Some(mine[1]), "mine[0] is busy, mine[1] next");
    assert!(t.peek(&mine[1], t0 + s(3)).is_none());
    assert!(t.peek(&mine[0], t0 + s(3)).is_some(), "busy: never evicted");
    // a (3, over) cannot replace its own until one has been idle 60 s.
    assert!(matches!(
        put(&mut t, a, t0 + s(4)),
        Err(SessionError::Share { .. })
    ));
    let own = put(&mut t, a, t0 + s(61)).unwrap();
    assert_eq!(own.evicted, Some(mine[2]), "its own least recently used");
    // c (1, under) again: a is the furthest over (3 of 2); with all of a's
    // sessions busy, nothing can go.
    for id in [&mine[3], &own.id] {
        assert!(t.begin_request(id));
    }
    assert!(matches!(
        put(&mut t, c, t0 + s(62)),
        Err(SessionError::Full { .. })
    ));
    t.end_request(&own.id, t0 + s(63));
    let c2 = put(&mut t, c, t0 + s(63)).unwrap();
    assert_eq!(c2.evicted, Some(own.id));
    assert!(t.peek(&b2, t0 + s(63)).is_some(), "b is at its share: kept");
    assert_eq!(t.len(), 6);
}

/// A full table whose oldest session has expired reports it as ended.
#[test]
fn an_expired_session_made_room_is_reported() {
    let t0 = Instant::now();
    let mut t = Table::new(1, Duration::from_secs(10), Duration::from_secs(5));
    let a = ins(&mut t, 0, t0).unwrap();
    let b = t
        .insert(
            V,
            0,
            ClientCaps::NONE,
            &Shares::default(),
            t0 + Duration::from_secs(11),
        )
        .unwrap();
    assert_eq!((b.expired, b.evicted), (Some(a), None));
}

/// A client at its share while free slots are kept for the others
/// replaces its own least recently used idle session (it is not refused
/// until the sweep expires one).
#[test]
fn a_client_at_its_share_replaces_its_own_idle_session_beside_kept_slots() {
    let s = Duration::from_secs;
    let t0 = Instant::now();
    let (a, b, c) = (11u64, 13u64, 15u64);
    let shares = Shares::new([(a, 1), (b, 1), (c, 1)]);
    let mut t = Table::new(6, s(600), s(60));
    let put = |t: &mut Table, at| t.insert(V, a, ClientCaps::NONE, &shares, at);
    let mine: Vec<SessionId> = (0..4).map(|_| put(&mut t, t0).unwrap().id).collect();
    assert!(matches!(
        put(&mut t, t0 + s(1)),
        Err(SessionError::Share { .. })
    ));
    let next = put(&mut t, t0 + s(60)).unwrap();
    assert_eq!(next.evicted, Some(mine[0]), "its own, idle 60 s");
    assert_eq!(t.len(), 4, "the two kept slots stay free");
}

#[test]
fn a_drain_ends_busy_sessions_after_their_last_request_and_keeps_the_lists_whole() {
    let t0 = Instant::now();
    let s = Duration::from_secs(60);
    let mut t = Table::new(4, s, s);
    let idle = ins(&mut t, 0, t0).unwrap();
    let busy = ins(&mut t, 0, t0).unwrap();
    assert!(t.begin_request(&busy) && t.begin_request(&busy));
    assert_eq!(t.drain(), 1, "the idle one at once");
    assert!(t.owner(&idle).is_none());
    t.end_request(&busy, t0);
    assert!(t.owner(&busy).is_some(), "one request still runs");
    t.end_request(&busy, t0);
    assert!(t.owner(&busy).is_none(), "ended with its last request");
    let ended: Vec<_> = t.take_ended().collect();
    assert!(
        ended.iter().all(|(_, why)| *why == Removal::Drained),
        "{ended:?}"
    );
    // Sessions opened after the drain are not touched, and the table still
    // fills to its capacity and evicts in order (lists intact).
    let fresh: Vec<_> = (0..4).map(|_| ins(&mut t, 0, t0).unwrap()).collect();
    assert_eq!(t.len(), 4);
    assert!(fresh.iter().all(|id| t.owner(id).is_some()));
    let later = t0 + s * 2;
    assert!(
        ins(&mut t, 0, later).is_ok(),
        "the oldest expired one makes room"
    );
    assert_eq!(t.len(), 4);
}
