//! A legacy client's `notifications/cancelled` (2025-11-25
//! basic/utilities/cancellation.mdx): the request it names, if still being
//! answered for that session, is dropped — which tells the upstream in turn
//! (stdio: `notifications/cancelled` with the upstream's own id; legacy
//! HTTP: the same through the owner task; modern: the stream closes) — and
//! answered with `-32800` so the HTTP exchange ends. A modern client cancels
//! by closing its response stream (2026-07-28 patterns-cancellation.mdx),
//! which drops the call the same way.
//!
//! The registry holds one entry per request being answered (removed when it
//! ends), so its size is bounded by the requests in flight, itself bounded
//! by `server.max_connections`.

use crate::protocol::{Payload, RpcError};
use crate::session::SessionId;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

pub use crate::protocol::REQUEST_CANCELLED;

type Key = (SessionId, String);

/// Requests of legacy sessions being answered, by (session, request id).
#[derive(Default)]
pub struct Cancels {
    running: Mutex<HashMap<Key, (u64, oneshot::Sender<()>)>>,
    next: std::sync::atomic::AtomicU64,
}

/// Keeps a request cancellable while it lives.
pub struct Registration {
    cancels: Arc<Cancels>,
    /// The key and this registration's token: only its own entry is removed
    /// (a later request may reuse the id once this one was cancelled).
    key: Option<(Key, u64)>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some((k, token)) = self.key.take() {
            let mut running = self.cancels.running.lock().expect("cancels lock");
            if running.get(&k).is_some_and(|(t, _)| *t == token) {
                running.remove(&k);
            }
        }
    }
}

impl Cancels {
    /// Registers request `id` of session `sid`; the receiver fires if the
    /// client cancels it. A second request reusing an id still in flight is
    /// not cancellable (the first keeps the entry).
    pub fn register(
        self: &Arc<Self>,
        sid: SessionId,
        id: &Value,
    ) -> (Registration, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let key = (sid, id.to_string());
        let token = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut running = self.running.lock().expect("cancels lock");
        let key = if running.contains_key(&key) {
            None
        } else {
            running.insert(key.clone(), (token, tx));
            Some((key, token))
        };
        (
            Registration {
                cancels: self.clone(),
                key,
            },
            rx,
        )
    }

    /// The client of `sid` cancelled `request_id`: true if it was running.
    pub fn cancel(&self, sid: SessionId, request_id: &Value) -> bool {
        let tx = self
            .running
            .lock()
            .expect("cancels lock")
            .remove(&(sid, request_id.to_string()));
        tx.is_some_and(|(_, tx)| tx.send(()).is_ok())
    }

    /// Requests registered now.
    pub fn len(&self) -> usize {
        self.running.lock().expect("cancels lock").len()
    }

    /// True when none is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Runs `call` unless `cancelled` fires first; then the call is dropped and
/// the answer is `-32800`.
pub async fn cancellable<F>(call: F, cancelled: oneshot::Receiver<()>) -> Result<Payload, RpcError>
where
    F: Future<Output = Result<Payload, RpcError>>,
{
    tokio::select! {
        outcome = call => outcome,
        Ok(()) = cancelled => Err(RpcError::new(REQUEST_CANCELLED, "Request cancelled by the client")),
    }
}
