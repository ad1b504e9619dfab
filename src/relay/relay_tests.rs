//! Tests of [`super`].

use super::*;
use serde_json::json;

#[test]
fn ids_round_trip() {
    let id = downstream_id(3, 7, 9);
    assert_eq!(parse_downstream_id(&id), Some((3, 7, 9)));
    assert_eq!(parse_downstream_id(&json!("mcp-edge:1:2")), None);
    assert_eq!(parse_downstream_id(&json!(5)), None);
}

#[test]
fn answers_only_from_the_owning_session_and_only_once() {
    let p = Pending::new(1);
    let now = Instant::now();
    let (slot, g) = p
        .insert(
            json!(41),
            Lane(2),
            "s1".into(),
            now,
            Duration::from_secs(60),
        )
        .unwrap();
    assert!(
        p.insert(
            json!(42),
            Lane::MAIN,
            "s1".into(),
            now,
            Duration::from_secs(60)
        )
        .is_none(),
        "full"
    );
    assert!(p.take(slot, g, "s2").is_none());
    assert!(matches!(p.take(slot, g, "s1"), Some(Target::Upstream(v, Lane(2))) if v == json!(41)));
    assert!(p.take(slot, g, "s1").is_none());
}

fn refused(limit: &str) -> f64 {
    crate::metrics::prometheus();
    crate::metrics::read(crate::metrics::REFUSED, &format!("limit=\"{limit}\""))
}

#[tokio::test]
async fn a_full_sse_queue_drops_and_counts() {
    let before = refused("relay_queue");
    let (relay, mut rx) = Relay::new(None, 2);
    assert!(relay.forward(json!(1)));
    assert!(relay.forward(json!(2)));
    assert!(
        !relay.forward(json!(3)),
        "third message exceeds sse_queue_depth = 2"
    );
    assert!(refused("relay_queue") >= before + 1.0);
    assert!(matches!(rx.recv().await, Some(Relayed::Message(m)) if m == json!(1)));
    assert!(relay.forward(json!(4)), "room again once the stream reads");
}

#[tokio::test]
async fn a_full_pending_table_refuses_and_counts() {
    let before = refused("pending_server_requests");
    let ctx = RelayCtx {
        id: 0,
        pending: std::sync::Arc::new(Pending::new(1)),
        max_age: Duration::from_secs(60),
        subscriptions: std::sync::Arc::new(crate::subscriptions::Subscriptions::new(1)),
    };
    let (relay, mut rx) = Relay::new(Some("s".into()), 8);
    assert!(relay_request(
        &ctx,
        Some(relay.clone()),
        (&json!(1), Lane::MAIN),
        "sampling/createMessage",
        None
    )
    .is_some());
    assert!(relay_request(
        &ctx,
        Some(relay.clone()),
        (&json!(2), Lane::MAIN),
        "sampling/createMessage",
        None
    )
    .is_none());
    assert!(refused("pending_server_requests") >= before + 1.0);
    let Some(Relayed::Message(first)) = rx.recv().await else {
        panic!("a message")
    };
    assert_eq!(first["method"], "sampling/createMessage");
    // A modern caller (no session) gets no relayed requests at all.
    let (modern, _rx) = Relay::new(None, 8);
    assert!(relay_request(
        &ctx,
        Some(modern),
        (&json!(3), Lane::MAIN),
        "elicitation/create",
        None
    )
    .is_none());
}

#[test]
fn a_waiter_gets_its_sessions_answer_and_is_freed_otherwise() {
    let p = Pending::new(2);
    let (now, age) = (Instant::now(), Duration::from_secs(10));
    let (slot, g, mut rx) = p.insert_waiter("s".into(), now, age).unwrap();
    assert!(p.take(slot, g, "other").is_none());
    let Some(Target::Waiter(w)) = p.take(slot, g, "s") else {
        panic!("a waiter")
    };
    w.send(Ok(json!({"action": "decline"}))).unwrap();
    assert_eq!(rx.try_recv().unwrap(), Ok(json!({"action": "decline"})));
    // Released (its call ended): the slot is free, a late answer finds nothing.
    let (slot, g, mut released) = p.insert_waiter("s".into(), now, age).unwrap();
    p.release(slot, g);
    assert!(released.try_recv().is_err(), "closed");
    assert!(p.take(slot, g, "s").is_none());
    // Its session ended, or it expired: the waiting call sees the channel closed.
    let (_, _, mut gone) = p.insert_waiter("s".into(), now, age).unwrap();
    assert_eq!(p.forget_session("s"), 1);
    assert!(gone.try_recv().is_err());
    let (_, _, mut old) = p.insert_waiter("s".into(), now, age).unwrap();
    assert!(p.insert_waiter("s".into(), now + age, age).is_some());
    assert!(old.try_recv().is_err(), "reclaimed at expiry");
}

#[test]
fn stale_entries_are_reclaimed() {
    let p = Pending::new(1);
    let t0 = Instant::now();
    let (slot, g) = p
        .insert(
            json!(1),
            Lane::MAIN,
            "s".into(),
            t0,
            Duration::from_secs(10),
        )
        .unwrap();
    let again = p.insert(
        json!(2),
        Lane::MAIN,
        "s".into(),
        t0 + Duration::from_secs(10),
        Duration::from_secs(10),
    );
    assert!(again.is_some());
    assert!(p.take(slot, g, "s").is_none(), "the old generation is dead");
}
