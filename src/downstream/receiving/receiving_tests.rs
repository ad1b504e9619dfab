//! The connection layer and its table together: requests marking their
//! connections busy or idle, and who yields a place.

use super::*;
use crate::downstream::conns::*;
use crate::limits::CONNECTION_YIELD_GRACE as GRACE;
use std::net::IpAddr;

const NO_SHARES: Shares = Shares::none();
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

/// `t0 + ms`.
fn at(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

fn grace() -> u64 {
    GRACE.as_millis() as u64
}

#[test]
fn the_longest_idle_connection_yields_after_its_grace_and_busy_ones_never() {
    let t0 = Instant::now();
    let c = Conns::new(3, 3, t0);
    let a = c.insert(ip(1), (), at(t0, 0));
    let b = c.insert(ip(2), (), at(t0, 10));
    let d = c.insert(ip(3), (), at(t0, 20));
    let (ta, tb, td) = (Tracker::of(&a), Tracker::of(&b), Tracker::of(&d));
    let busy_a = ta.begin(false).expect("a is open");
    // b is the longest idle, but not yet for the grace period.
    let wait = c.close_oldest_idle(at(t0, 30), &NO_SHARES);
    assert_eq!(wait, Yield::After(GRACE - Duration::from_millis(20)));
    // b answers a request: idle again after the last look, so its grace
    // starts at the next look (stamped 40); d is now the longest idle.
    drop(tb.begin(false).expect("not closed before its grace"));
    assert_eq!(
        c.close_oldest_idle(at(t0, 40), &NO_SHARES),
        Yield::After(GRACE - Duration::from_millis(20))
    );
    assert_eq!(
        c.close_oldest_idle(at(t0, 20 + grace()), &NO_SHARES),
        Yield::Closed
    );
    assert!(
        td.begin(false).is_none(),
        "a closed connection takes no request"
    );
    drop(d);
    let wait = c.close_oldest_idle(at(t0, 20 + grace()), &NO_SHARES);
    assert_eq!(wait, Yield::After(Duration::from_millis(20)));
    assert_eq!(
        c.close_oldest_idle(at(t0, 40 + grace()), &NO_SHARES),
        Yield::Closed
    );
    assert!(tb.begin(false).is_none());
    drop(b);
    assert_eq!(
        c.close_oldest_idle(at(t0, 10_000), &NO_SHARES),
        Yield::AllBusy
    );
    drop(busy_a);
    // a went idle long after the last look: a full grace from the next.
    let wait = c.close_oldest_idle(at(t0, 60_000), &NO_SHARES);
    assert_eq!(
        wait,
        Yield::After(GRACE),
        "a stale time gives no head start"
    );
    assert_eq!(
        c.close_oldest_idle(at(t0, 60_000 + grace()), &NO_SHARES),
        Yield::Closed
    );
    assert_eq!(c.len(), 1);
    drop(a);
    assert!(c.is_empty());
}

#[test]
fn a_body_still_arriving_is_idle_and_a_received_one_busy() {
    let t0 = Instant::now();
    let c = Conns::new(2, 2, t0);
    let a = c.insert(ip(1), (), t0);
    let b = c.insert(ip(2), (), t0);
    let (ta, tb) = (Tracker::of(&a), Tracker::of(&b));
    let slow = ta.begin(true).unwrap();
    let quick = tb.begin(true).unwrap();
    quick.received();
    assert_eq!(
        c.close_oldest_idle(at(t0, 1), &NO_SHARES),
        Yield::After(GRACE)
    );
    assert_eq!(
        c.close_oldest_idle(at(t0, 1 + grace()), &NO_SHARES),
        Yield::Closed
    );
    assert!(ta.receiving(), "the closing connection was mid-body");
    slow.received();
    assert!(
        ta.receiving(),
        "a body ending after the close changes nothing"
    );
    assert!(!tb.receiving());
    assert_eq!(
        c.close_oldest_idle(at(t0, 100_000), &NO_SHARES),
        Yield::AllBusy
    );
    drop(quick);
    drop(slow);
}

#[test]
fn a_peer_over_its_share_yields_its_own_oldest_or_is_refused() {
    let t0 = Instant::now();
    let later = at(t0, grace());
    let c = Conns::new(8, 2, t0);
    let x1 = c.insert(ip(1), (), t0);
    let x2 = c.insert(ip(1), (), t0);
    let other = c.insert(ip(2), (), t0);
    assert_eq!(c.admit(ip(2), t0), Ok(Admission::Free));
    let early = c.admit(ip(1), t0);
    assert_eq!(early, Err(Refusal::PeerShare(2)), "none past its grace");
    assert_eq!(c.admit(ip(1), later), Ok(Admission::ClosedSamePeer));
    assert!(
        Tracker::of(&x1).begin(false).is_none(),
        "x1 was the peer's oldest"
    );
    let untouched = Tracker::of(&other).begin(false);
    assert!(
        untouched.is_some(),
        "another peer's connection is untouched"
    );
    drop(x1);
    let x3 = c.insert(ip(1), (), later);
    let _b2 = Tracker::of(&x2).begin(false).unwrap();
    let _b3 = Tracker::of(&x3).begin(false).unwrap();
    let busy = c.admit(ip(1), at(later, 10_000));
    assert_eq!(busy, Err(Refusal::PeerShare(2)));
}

#[test]
fn peers_are_ipv4_addresses_and_ipv6_slash_64s() {
    let a: Ipv6Addr = "2001:db8:1:2:aaaa::1".parse().unwrap();
    let b: Ipv6Addr = "2001:db8:1:2:bbbb::7".parse().unwrap();
    let other: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(peer_key(a.into()), peer_key(b.into()));
    assert_ne!(peer_key(a.into()), peer_key(other.into()));
    let mapped: Ipv6Addr = "::ffff:192.0.2.7".parse().unwrap();
    let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
    assert_eq!(peer_key(mapped.into()), v4);
    assert_eq!(peer_key(v4), v4);
}

#[test]
fn a_busy_connection_turning_idle_wakes_a_waiter() {
    let c = Conns::new(1, 1, Instant::now());
    let a = c.insert(ip(1), (), Instant::now());
    let busy = Tracker::of(&a).begin(false).unwrap();
    let mut waiter = Box::pin(c.idle_again());
    waiter.as_mut().enable();
    let waker = futures_util::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    use std::future::Future;
    assert!(waiter.as_mut().poll(&mut cx).is_pending());
    drop(busy);
    assert!(waiter.as_mut().poll(&mut cx).is_ready());
}

#[tokio::test]
async fn a_closed_connection_hears_it_even_if_told_before_it_listens() {
    let t0 = Instant::now();
    let c = Conns::new(1, 1, t0);
    let a = c.insert(ip(1), (), t0);
    assert_eq!(c.close_oldest_idle(t0 + GRACE, &NO_SHARES), Yield::Closed);
    tokio::time::timeout(Duration::from_secs(5), Tracker::of(&a).closed())
        .await
        .expect("the close is not lost");
}

/// Issue 24: with clients, one at or over its share cannot name the last
/// places (one kept per client under its share), and the connection closed
/// for a new one is the longest idle of the client furthest over its share.
#[test]
fn a_client_over_its_share_leaves_places_and_yields_its_idle_ones_first() {
    let t0 = Instant::now();
    let (a, b, c) = (11, 13, 15);
    let shares = Shares::new([(a, 1), (b, 1), (c, 1)]);
    let table = Conns::new(6, 6, t0);
    let places: Vec<_> = (0..6).map(|_| table.insert(ip(1), (), t0)).collect();
    let t: Vec<Tracker> = places.iter().map(Tracker::of).collect();
    for x in &t[..4] {
        x.claim(&shares, a).unwrap();
    }
    // Two places left (not named yet: anyone's), kept for b and c.
    let no = t[4].claim(&shares, a).unwrap_err();
    assert_eq!((no.held, no.share, no.capacity), (4, 2, 6));
    assert!(
        t[0].claim(&shares, a).is_ok(),
        "its own again: nothing to do"
    );
    t[4].claim(&shares, b).unwrap();
    t[5].claim(&shares, c).unwrap();
    // c's connection went idle first, a's just now: a's goes, being over
    // its share, and at once (no grace period for it).
    let _busy: Vec<Busy> = t[1..4].iter().map(|x| x.begin(false).unwrap()).collect();
    drop(t[0].begin(false).unwrap());
    assert_eq!(table.close_oldest_idle(at(t0, 10), &shares), Yield::Closed);
    assert!(
        t[0].begin(false).is_none(),
        "a's idle connection was closed"
    );
    assert!(t[5].begin(false).is_some(), "c's, idle longer, was not");
    // Others' idle connections wait for their grace period: b's goes then.
    let wait = table.close_oldest_idle(at(t0, 20), &shares);
    assert_eq!(wait, Yield::After(GRACE - Duration::from_millis(20)));
    assert_eq!(
        table.close_oldest_idle(at(t0, grace()), &shares),
        Yield::Closed
    );
    assert!(t[4].begin(false).is_none(), "b's, idle longest");
    drop(places);
}

/// A body that arrives as `rx` gives it, ending when `rx` closes.
fn streamed(
    rx: tokio::sync::mpsc::Receiver<&'static str>,
) -> http::Request<impl Body<Data = Bytes, Error = std::convert::Infallible> + Unpin> {
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok(Frame::data(Bytes::from_static(chunk.as_bytes()))), rx))
    });
    http::Request::new(http_body_util::StreamBody::new(Box::pin(frames)))
}

#[tokio::test(start_paused = true)]
async fn receiving_a_request_leaves_it_idle_until_its_body_has_arrived() {
    let t0 = Instant::now();
    let c = Conns::new(1, 1, t0);
    let a = c.insert(ip(1), (), t0);
    let (ta, probe) = (Tracker::of(&a), Tracker::of(&a));
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let until = t0 + Duration::from_secs(10);
    let read = receive(Some(&ta), None, streamed(rx), (64, until));
    let feed = async move {
        tx.send("{\"a\":").await.unwrap();
        tokio::task::yield_now().await;
        assert!(probe.receiving(), "half a body: idle");
        tx.send("1}").await.unwrap();
        probe
    };
    let (got, probe) = tokio::join!(read, feed);
    let got = got.expect("received");
    assert_eq!(&got.body[..], b"{\"a\":1}");
    assert!(!probe.receiving());
    let later = at(t0, 1 + grace());
    assert_eq!(c.close_oldest_idle(later, &NO_SHARES), Yield::AllBusy);
    drop(got);
    assert_eq!(c.close_oldest_idle(later, &NO_SHARES), Yield::After(GRACE));
}

#[tokio::test(start_paused = true)]
async fn a_body_over_its_limit_or_late_is_refused_with_the_mark_kept() {
    let t0 = Instant::now();
    let c = Conns::new(1, 1, t0);
    let a = c.insert(ip(1), (), t0);
    let until = t0 + Duration::from_secs(10);
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tx.send("0123456789").await.unwrap();
    tx.send("0123456789").await.unwrap();
    drop(tx);
    match receive(Some(&Tracker::of(&a)), None, streamed(rx), (16, until)).await {
        Err((Some(_busy), NotReceived::TooLarge)) => {}
        other => panic!("{other:?}"),
    }
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    match receive(Some(&Tracker::of(&a)), None, streamed(rx), (16, until)).await {
        Err((Some(_busy), NotReceived::TimedOut)) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(Instant::now(), until, "refused at its deadline");
}
