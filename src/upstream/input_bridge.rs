//! Legacy caller ↔ modern upstream: the MRTR bridge (issue 13, part 3).
//!
//! A modern upstream asks for client input by answering a supported
//! request with an `InputRequiredResult` (`../shared/spec/2026-07-28/patterns-mrtr.mdx`).
//! A legacy caller cannot retry with `inputResponses` itself, so for a
//! legacy session's call on an SSE response mcp-edge plays the MRTR client:
//!
//! 1. each entry of `inputRequests` (`elicitation/create`,
//!    `sampling/createMessage`, `roots/list`) becomes a JSON-RPC request on
//!    the caller's SSE stream (`../shared/spec/2025-11-25/transports.mdx`
//!    §Sending Messages to the Server, items 5–6), its id minted in the
//!    upstream's [`relay::Pending`] table as a [`relay::Target::Waiter`]
//!    (same session binding, expiry, capacity and refusal count as a legacy
//!    upstream's requests); the client POSTs its answers as usual;
//! 2. once every answer is in, the original request is sent again with
//!    `inputResponses` (key → the client's result) and the upstream's
//!    `requestState` echoed exactly, under a fresh upstream id
//!    (§Client Requirements, items 1–3) — round after round.
//!
//! Bounds: at most [`crate::limits::MRTR_MAX_ROUNDS`] `InputRequiredResult`s
//! per call (`refused{limit="mrtr_rounds"}`), and the whole exchange, first
//! request included, within the upstream's `call_timeout`
//! (`refused{limit="mrtr_time"}`), as a legacy upstream's call that asks the
//! client is bounded.
//!
//! Errors, each ending the call: an input request of a capability the
//! session did not declare at `initialize` → `-32021` with
//! `data.requiredCapabilities` (2026-07-28 index.mdx §_meta); a client's
//! JSON-RPC *error* answer → that error (an `InputResponse` can only be a
//! result, and leaving the key out would only make the server ask again,
//! §Error Handling; an elicitation declined or cancelled is a result and
//! passes); an answer that never comes because the session ended or the
//! entry was reclaimed → `-32603`.

use super::{CallError, Conn, SendError, Upstream, UpstreamEra};
use crate::protocol::{self, ClientCaps, Payload, RpcError};
use crate::relay::{self, Relay};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tokio::time::Instant;

/// One bridged call: what is sent again every round.
pub(super) struct Bridged<'a> {
    pub conn: Arc<Conn>,
    /// The connection's generation (for errors that count against it).
    pub generation: u64,
    pub method: &'a str,
    /// The params as first sent (already adapted to the modern era).
    pub params: Option<Value>,
    /// The legacy caller's SSE stream and session.
    pub relay: Relay,
    /// When the whole exchange must be over.
    pub deadline: Instant,
    /// The caller's client's in-flight place, held by every round.
    pub claim: Option<super::Claim>,
}

/// The input requests of one round awaiting the client: their slots are
/// freed when the round ends, answered or not (dropped with the call too).
struct Asked<'p> {
    pending: &'p relay::Pending,
    waits: Vec<(String, String, usize, u32, Option<relay::Answer>)>,
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        for (_, _, slot, generation, _) in &self.waits {
            self.pending.release(*slot, *generation);
        }
    }
}

impl Upstream {
    /// Answers `first`, and every later `InputRequiredResult`, by asking the
    /// caller ([module docs](self)); the first other result ends the call.
    pub(super) async fn bridge(
        &self,
        call: Bridged<'_>,
        first: Payload,
    ) -> Result<Payload, CallError> {
        let meta = protocol::params_meta(call.params.as_ref());
        let caps = ClientCaps::parse(meta.and_then(|m| m.get(protocol::META_CLIENT_CAPABILITIES)));
        let mut result = first;
        let mut rounds = 0;
        while result.is_input_required() {
            if rounds == crate::limits::MRTR_MAX_ROUNDS {
                crate::metrics::refused("mrtr_rounds");
                let msg = format!(
                    "upstream '{}' still asked for input after {rounds} rounds (mcp-edge's limit)",
                    self.name()
                );
                let data = json!({"upstream": self.name(), "maxRounds": rounds});
                return Err(CallError::Rpc(
                    RpcError::new(protocol::INTERNAL_ERROR, msg).with_data(data),
                ));
            }
            rounds += 1;
            let asked = result.into_value();
            let answers = self.ask(&call, caps, &asked).await?;
            let params = retry_params(call.params.clone(), answers, asked.get("requestState"));
            result = self.send_round(&call, params).await?;
        }
        Ok(result)
    }

    /// Sends the request again with this round's inputs.
    async fn send_round(
        &self,
        call: &Bridged<'_>,
        params: Option<Value>,
    ) -> Result<Payload, CallError> {
        let left = call.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.out_of_time());
        }
        let relay = Some(call.relay.clone());
        match call
            .conn
            .send(
                call.method,
                params,
                UpstreamEra::Modern,
                left,
                relay,
                call.claim.clone(),
            )
            .await
        {
            Err(SendError::Timeout) => Err(self.out_of_time()),
            other => other.map_err(|e| self.name_send_error(e, call.generation)),
        }
    }

    /// The whole exchange outlasted `call_timeout` (counted `mrtr_time`).
    fn out_of_time(&self) -> CallError {
        crate::metrics::refused("mrtr_time");
        let after = self.config.call_timeout;
        let msg = format!(
            "upstream '{}' and the client's answers to its input requests took longer than its call_timeout ({after:?})",
            self.name()
        );
        let data = json!({"upstream": self.name(), "callTimeoutSeconds": after.as_secs_f64()});
        CallError::Rpc(RpcError::new(protocol::UPSTREAM_TIMEOUT, msg).with_data(data))
    }

    /// Asks the caller every input request of `result`; their answers, keyed
    /// as asked (empty when there are none: the retry then carries only
    /// `requestState`, §Client Requirements, item 1).
    async fn ask(
        &self,
        call: &Bridged<'_>,
        caps: ClientCaps,
        result: &Value,
    ) -> Result<Map<String, Value>, CallError> {
        let requests = match result.get("inputRequests") {
            None | Some(Value::Null) => return Ok(Map::new()),
            Some(Value::Object(o)) => o,
            Some(_) => return Err(self.malformed("inputRequests is not an object")),
        };
        self.check_caps(requests, caps)?;
        let session = call.relay.session.clone().unwrap_or_default();
        let mut asked = Asked {
            pending: &self.pending,
            waits: Vec::with_capacity(requests.len()),
        };
        for (key, request) in requests {
            let method = request["method"].as_str().unwrap_or_default();
            let now = Instant::now();
            let max_age = self.config.call_timeout;
            let Some((slot, generation, answer)) =
                self.pending.insert_waiter(session.clone(), now, max_age)
            else {
                crate::metrics::refused("pending_server_requests");
                return Err(self.no_room());
            };
            asked
                .waits
                .push((key.clone(), method.into(), slot, generation, Some(answer)));
            let id = relay::downstream_id(self.id, slot, generation);
            let msg = protocol::request(id, method, request.get("params").cloned());
            if !call.relay.forward(msg) {
                return Err(self.no_room());
            }
        }
        self.collect(&mut asked, call.deadline).await
    }

    /// Waits for every answer of the round (until `deadline`), taking them
    /// as they come: the first error answer ends the round at once.
    async fn collect(
        &self,
        asked: &mut Asked<'_>,
        deadline: Instant,
    ) -> Result<Map<String, Value>, CallError> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let mut waiting: FuturesUnordered<_> = (asked.waits.iter_mut())
            .filter_map(|(key, method, _, _, answer)| {
                let answer = answer.take()?;
                Some(async move { (&*key, &*method, answer.await) })
            })
            .collect();
        let mut answers = Map::new();
        loop {
            let (key, method, outcome) =
                match tokio::time::timeout_at(deadline, waiting.next()).await {
                    Err(_) => return Err(self.out_of_time()),
                    Ok(None) => return Ok(answers),
                    Ok(Some(next)) => next,
                };
            match outcome {
                Ok(Ok(result)) => answers.insert(key.to_owned(), result),
                Ok(Err(e)) => return Err(CallError::Rpc(client_error(key, method, e))),
                Err(_) => {
                    let msg = format!(
                        "the client's session ended before it answered {method} of upstream '{}'",
                        self.name()
                    );
                    return Err(CallError::Rpc(RpcError::new(protocol::INTERNAL_ERROR, msg)));
                }
            };
        }
    }

    /// -32021 when an input request needs a capability the caller did not
    /// declare (all of them checked before anything is asked); -32603 for
    /// an entry that is not one of the three requests.
    fn check_caps(&self, requests: &Map<String, Value>, caps: ClientCaps) -> Result<(), CallError> {
        let mut lacking = ClientCaps::NONE;
        for request in requests.values() {
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let Some(needed) = ClientCaps::needed(method, request.get("params")) else {
                return Err(self.malformed(&format!("input request method {method:?}")));
            };
            lacking = lacking.union(caps.lacking(needed));
        }
        if lacking.is_empty() {
            return Ok(());
        }
        let msg = format!(
            "upstream '{}' needs client capabilities this session did not declare at initialize",
            self.name()
        );
        let data = json!({"requiredCapabilities": lacking.to_json()});
        Err(CallError::Rpc(
            RpcError::new(protocol::MISSING_CLIENT_CAPABILITY, msg).with_data(data),
        ))
    }

    fn malformed(&self, what: &str) -> CallError {
        let msg = format!(
            "upstream '{}' sent an InputRequiredResult mcp-edge cannot use: {what}",
            self.name()
        );
        CallError::Rpc(
            RpcError::new(protocol::INTERNAL_ERROR, msg)
                .with_data(json!({"upstream": self.name()})),
        )
    }

    /// The pending table or the caller's stream queue is full.
    fn no_room(&self) -> CallError {
        let msg = format!(
            "upstream '{}' asked for more input than mcp-edge can relay at once (pending table or stream queue full)",
            self.name()
        );
        let data = json!({"upstream": self.name()});
        CallError::Rpc(RpcError::new(protocol::UPSTREAM_BUSY, msg).with_data(data))
    }
}

/// A client's error answer to one input request, as the call's error: its
/// code and data kept, the message saying which request it answered.
fn client_error(key: &str, method: &str, e: RpcError) -> RpcError {
    let msg = format!(
        "the client answered {method} (input request {key:?}) with an error: {}",
        e.message
    );
    RpcError { message: msg, ..e }
}

/// The retry's params: the first request's, with `inputResponses` and the
/// upstream's `requestState` exactly as given (none when it gave none).
fn retry_params(
    params: Option<Value>,
    answers: Map<String, Value>,
    state: Option<&Value>,
) -> Option<Value> {
    let mut p = match params {
        Some(Value::Object(o)) => o,
        _ => Map::new(),
    };
    p.remove("inputResponses");
    p.remove("requestState");
    if !answers.is_empty() {
        p.insert("inputResponses".into(), Value::Object(answers));
    }
    if let Some(s) = state.filter(|s| !s.is_null()) {
        p.insert("requestState".into(), s.clone());
    }
    Some(Value::Object(p))
}
