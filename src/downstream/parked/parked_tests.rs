use super::*;
use crate::relay::Event;
use serde_json::json;
use tokio::sync::mpsc;

fn running() -> Running {
    running_since(Instant::now())
}

fn running_since(started: Instant) -> Running {
    let (_tx, rx) = mpsc::channel(1);
    Running {
        call: Box::pin(async { Ok(json!("done").into()) }),
        rx,
        done: None,
        key: Some("mrtr:1".into()),
        started,
        audit: None,
    }
}

/// A call parked again (a retry without the answers) keeps the expiry of
/// its first start: retrying cannot hold a place for ever.
#[test]
fn parking_again_never_extends_a_calls_life_past_its_start_plus_the_ttl() {
    let t0 = Instant::now();
    let table = ParkedCalls::new(1, TTL, t0);
    let id = [1; ID_LEN];
    let first = table
        .park(running_since(t0), asked(), 0, id, t0)
        .ok()
        .unwrap();
    let later = t0 + TTL - Duration::from_secs(1);
    let p = table.resume(&first, 0, id, later).ok().unwrap();
    let again = table.park(p.running, p.asked, 0, id, later).ok().unwrap();
    assert!(table.expire(t0 + TTL - Duration::from_millis(1)).is_empty());
    assert_eq!(table.expire(t0 + TTL).len(), 1, "gone at start + TTL");
    assert_eq!(
        table.resume(&again, 0, id, t0 + TTL).err(),
        Some(StateError::Expired(TTL)),
        "its state carries that expiry too"
    );
}

fn asked() -> Vec<Asked> {
    vec![Asked {
        key: "elicitation-0".into(),
        id: json!("mcp-edge:0:0:0"),
        request: json!({"method": "elicitation/create"}),
    }]
}

const TTL: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_state_resumes_its_call_once_for_its_owner_and_request() {
    let t0 = Instant::now();
    let table = ParkedCalls::new(2, TTL, t0);
    let id = [1; ID_LEN];
    let state = table.park(running(), asked(), 7, id, t0).ok().unwrap();
    assert!(state.starts_with(STATE_PREFIX));
    assert_eq!(table.len(), 1);
    let later = t0 + Duration::from_secs(1);
    assert_eq!(
        table.resume(&state, 8, id, later).err(),
        Some(StateError::OtherCaller)
    );
    let other = [2; ID_LEN];
    assert_eq!(
        table.resume(&state, 7, other, later).err(),
        Some(StateError::OtherRequest)
    );
    let mut p = table.resume(&state, 7, id, later).ok().unwrap();
    assert_eq!(p.asked[0].key, "elicitation-0");
    assert!(
        matches!(p.running.next().await, Event::Done(Ok(v)) if v.clone().into_value() == "done")
    );
    assert!(table.is_empty());
    assert_eq!(
        table.resume(&state, 7, id, later).err(),
        Some(StateError::Unknown),
        "taken once: a replay finds nothing"
    );
}

#[test]
fn altered_or_foreign_states_fail_verification() {
    let t0 = Instant::now();
    let table = ParkedCalls::new(1, TTL, t0);
    let id = [3; ID_LEN];
    let state = table.park(running(), asked(), 0, id, t0).ok().unwrap();
    let (instance, b64) = (state.strip_prefix(STATE_PREFIX))
        .and_then(|s| s.split_once('.'))
        .unwrap();
    assert_eq!(instance, "edge");
    let mut raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(b64)
        .unwrap();
    raw[8] ^= 1; // claim another owner
    let forged = format!(
        "{STATE_PREFIX}{instance}.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&raw)
    );
    assert_eq!(
        table.resume(&forged, 1, id, t0).err(),
        Some(StateError::Forged)
    );
    for junk in [
        "mcp-edge/1.",
        "mcp-edge/1.!!!",
        "mcp-edge/1.edge.!!!",
        "nonsense",
    ] {
        assert_eq!(
            table.resume(junk, 0, id, t0).err(),
            Some(StateError::Malformed)
        );
    }
    // Another process (another key) cannot make states for this one.
    let elsewhere = ParkedCalls::new(1, TTL, t0);
    let theirs = elsewhere.park(running(), asked(), 0, id, t0).ok().unwrap();
    assert_eq!(
        table.resume(&theirs, 0, id, t0).err(),
        Some(StateError::Forged)
    );
    assert_eq!(table.len(), 1, "nothing taken by the refused ones");
}

#[test]
fn a_full_table_gives_the_call_back_and_expiry_frees_it() {
    let t0 = Instant::now();
    let table = ParkedCalls::new(1, TTL, t0);
    let id = [4; ID_LEN];
    let state = table.park(running(), asked(), 0, id, t0).ok().unwrap();
    let refused = table.park(running(), asked(), 0, id, t0).err().unwrap();
    assert!(refused.full);
    assert_eq!(refused.parked.asked.len(), 1, "the call comes back whole");
    assert!(table.expire(t0 + TTL - Duration::from_millis(1)).is_empty());
    let late = t0 + TTL;
    assert_eq!(
        table.resume(&state, 0, id, late).err(),
        Some(StateError::Expired(TTL))
    );
    assert_eq!(table.expire(late).len(), 1);
    assert!(table.is_empty());
    assert!(table.park(running(), asked(), 0, id, late).is_ok());
}

#[test]
fn a_state_names_its_box_and_a_shared_key_verifies_across_boxes() {
    use crate::instance::InstanceId;
    let t0 = Instant::now();
    let id = [5; ID_LEN];
    let key = crate::config::Secret::new(vec![7u8; 32]);
    let e1 = InstanceId::parse("e1").unwrap();
    let e2 = InstanceId::parse("e2").unwrap();
    let one = ParkedCalls::new(1, TTL, t0).of_fleet(e1, Some(&key));
    let state = one.park(running(), asked(), 0, id, t0).ok().unwrap();
    assert!(state.starts_with("mcp-edge/1.e1."), "{state}");
    // Another box, with or without the fleet's key: named, not "forged".
    for key in [Some(&key), None] {
        let two = ParkedCalls::new(1, TTL, t0).of_fleet(e2, key);
        let e = two.resume(&state, 0, id, t0).err().unwrap();
        assert_eq!(
            e,
            StateError::OtherBox {
                issued: e1,
                here: e2
            }
        );
        assert!(
            e.to_string().contains("\"e1\"") && e.to_string().contains("\"e2\""),
            "{e}"
        );
    }
    // The same box restarted with the fleet's key: the state verifies, and
    // what is missing is said (its call died with the old process).
    let again = ParkedCalls::new(1, TTL, t0).of_fleet(e1, Some(&key));
    assert_eq!(
        again.resume(&state, 0, id, t0).err(),
        Some(StateError::Unknown)
    );
    // Without the fleet's key it could not tell.
    let alone = ParkedCalls::new(1, TTL, t0).of_fleet(e1, None);
    assert_eq!(
        alone.resume(&state, 0, id, t0).err(),
        Some(StateError::Forged)
    );
    // The instance id is signed: renaming the box breaks the tag.
    let renamed = state.replacen("mcp-edge/1.e1.", "mcp-edge/1.e2.", 1);
    let two = ParkedCalls::new(1, TTL, t0).of_fleet(e2, Some(&key));
    assert_eq!(
        two.resume(&renamed, 0, id, t0).err(),
        Some(StateError::Forged)
    );
    // Another box's name on it: a box with the fleet's key sees the tag
    // break; one without can only name the box the state claims.
    let claimed = state.replacen("mcp-edge/1.e1.", "mcp-edge/1.e3.", 1);
    assert_eq!(
        two.resume(&claimed, 0, id, t0).err(),
        Some(StateError::Forged)
    );
    let keyless = ParkedCalls::new(1, TTL, t0).of_fleet(e2, None);
    let e = keyless.resume(&claimed, 0, id, t0).err();
    assert!(matches!(e, Some(StateError::OtherBox { .. })), "{e:?}");
    assert_eq!(one.resume(&state, 0, id, t0).ok().map(|_| ()), Some(()));
}
