//! Unit tests of the handle and its owner's side: connection identity.

use super::*;
use serde_json::json;
use std::time::Duration;

fn builtin_upstream() -> (Arc<Upstream>, Steward) {
    let config = crate::config::Config::embedded_default()
        .upstreams
        .into_iter()
        .next()
        .expect("the embedded default has the builtin upstream");
    Upstream::new(
        0,
        config,
        1,
        Arc::new(watch::channel(ListGens::default()).0),
        Arc::new(crate::subscriptions::Subscriptions::new(1)),
        Arc::new(crate::pins::Pins::in_memory()),
        None,
    )
}

fn negotiated() -> Negotiated {
    Negotiated {
        era: UpstreamEra::Modern,
        capabilities: json!({"tools": {}}),
        server_info: None,
        instructions: None,
        legacy: None,
    }
}

/// A call's loss report about connection N that reaches the owner only
/// after N was replaced by N+1 must not tear N+1 down — even when N+1 was
/// allocated at N's freed address (which an address-based identity, the
/// former `Arc::as_ptr`, could not tell apart).
#[tokio::test(start_paused = true)]
async fn a_late_loss_report_leaves_the_successor_alone() {
    let (up, owner) = builtin_upstream();
    let n = owner.install(Arc::new(Conn::Builtin), negotiated());
    // A call took connection N and saw it fail: it reports the loss.
    let (conn, _, used) = up.owned.current().expect("connected");
    assert_eq!(used, n);
    let old_addr = Arc::as_ptr(&conn) as usize;
    let _ = up.name_send_error(SendError::Transport("broken pipe".into()), used);
    // Meanwhile the owner left N for another reason and replaced it; the
    // old connection is freed once the call lets go of it, and the next
    // allocation of the same size takes its slot.
    owner.uninstall();
    drop(conn);
    // The successor is allocated at the freed address (the old identity
    // sees one connection). glibc hands it back at once; other allocators
    // (musl's) may need a few more allocations of the size first.
    let mut spares = Vec::new();
    let successor = loop {
        let c = Arc::new(Conn::Builtin);
        if Arc::as_ptr(&c) as usize == old_addr {
            break c;
        }
        assert!(spares.len() < 100_000, "the freed address was never reused");
        spares.push(c);
    };
    drop(spares);
    let next = owner.install(successor, negotiated());
    // The owner now watches N+1: the stale report about N is discarded.
    let watched = tokio::time::timeout(Duration::from_secs(3600), owner.loss_of(next)).await;
    assert!(
        watched.is_err(),
        "a report about connection {n} tore down connection {next}: {:?}",
        watched.map(|l| l.reason)
    );
    assert_eq!(next, n + 1, "generations count installed connections");
    // A report about N+1 itself still reaches the owner.
    let _ = up.name_send_error(SendError::Transport("reset".into()), next);
    let loss = tokio::time::timeout(Duration::from_secs(1), owner.loss_of(next))
        .await
        .expect("a report about the live connection is seen");
    assert_eq!((loss.conn, loss.reason.as_str()), (next, "reset"));
}
