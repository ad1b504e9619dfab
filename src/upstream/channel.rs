//! Messages read from a transport that is one channel both ways — a
//! child's stdout (`super::stdio`), the stream of a 2024-11-05 HTTP+SSE
//! server (`super::streamable::sse_wire`): a call's answer goes to its slot
//! in the [`InFlight`] table as the message's own bytes, progress and other
//! notifications to the calls they concern, the upstream's requests to the
//! caller that can answer them (`../shared/spec/2025-11-25/transports.mdx`;
//! the 2024-11-05 revision's HTTP with SSE).

use super::era::LISTEN_ID;
use super::inflight::InFlight;
use crate::protocol::{self, Message, Payload, RawResult, RpcError};
use crate::relay::{relay_request, Lane, RelayCtx};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::Notify;

/// Whether a call of `method` may lead the upstream to ask a client things
/// (what a caller sends; not one of mcp-edge's listings or probes).
pub(crate) fn asks(method: &str) -> bool {
    matches!(
        method,
        "tools/call" | "prompts/get" | "resources/read" | "completion/complete"
    )
}

/// What [`answer`] did with a line.
pub(super) enum Answered {
    /// Not a response with an object result: the line is untouched.
    No,
    /// Handed to its call; the line's buffer went with it.
    Yes,
    /// A response for no call in flight (dropped; the buffer went too).
    UnknownId(u64),
}

/// A response to a call in flight whose result is a JSON object: its
/// result goes to the waiting call as the line's own bytes
/// ([`crate::protocol::RawResult`], no tree, no copy), and `line` is left
/// empty for the next. Anything else is left to the general reader.
pub(super) fn answer(line: &mut Vec<u8>, inflight: &InFlight) -> Answered {
    let Some((n, range, top)) = protocol::split_response(line) else {
        return Answered::No;
    };
    let bytes = Bytes::from(std::mem::take(line)).slice(range);
    match inflight.complete_n(n, Ok(Payload::Raw(RawResult::scanned(bytes, top)))) {
        true => Answered::Yes,
        false => Answered::UnknownId(n),
    }
}

/// What one message was.
pub(super) enum Line {
    Handled,
    /// Not JSON-RPC.
    Noise,
    /// An answer for no call in flight.
    UnknownId(Value),
    /// A request of the upstream's answered here: the reply to send it.
    Reply(Value),
}

/// Handles one message that [`answer`] left (a notification, a request,
/// a response that is not a call's object result).
pub(super) fn on_line(
    line: &[u8],
    inflight: &InFlight,
    list_changed: &Notify,
    ctx: &RelayCtx,
) -> Line {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Line::Handled;
    }
    let Ok(v) = serde_json::from_slice::<Value>(line) else {
        return Line::Noise; // a banner or log line: counted as noise by the caller
    };
    match protocol::classify(v) {
        Ok(Message::Response { id, outcome }) => {
            // mcp-edge's own listens end with a response nobody waits for
            // (one per filter change: `StdioConn::listen`).
            let own_listen = id.as_str().is_some_and(|s| s.starts_with(LISTEN_ID));
            if !own_listen && !inflight.complete(&id, outcome.map(Payload::from)) {
                return Line::UnknownId(id);
            }
        }
        Ok(Message::Notification { method, params }) => {
            on_notification(method, params, inflight, list_changed, ctx)
        }
        Ok(Message::Request { id, method, params }) => {
            if let Some(reply) = on_request(id, method, params, inflight, ctx) {
                return Line::Reply(reply);
            }
        }
        Err(_) => return Line::Noise, // JSON, but not JSON-RPC: noise too
    }
    Line::Handled
}

/// A notification from the upstream: list changes wake the catalog refresh,
/// resource updates mark the subscription table, progress goes to the call
/// whose (rewritten) token it names, anything else to the sole relayed call.
fn on_notification(
    method: String,
    params: Option<Value>,
    inflight: &InFlight,
    list_changed: &Notify,
    ctx: &RelayCtx,
) {
    match method.as_str() {
        m if m.ends_with("/list_changed") => list_changed.notify_one(),
        "notifications/resources/updated" => ctx.resource_updated(params.as_ref()),
        // mcp-edge's own listen stream (StdioConn::listen): nobody to tell.
        "notifications/subscriptions/acknowledged" => {}
        "notifications/progress" => {
            let token = params.as_ref().and_then(|p| p.get("progressToken"));
            if let Some((relay, original)) = token.and_then(|t| inflight.progress_target(t)) {
                let mut params = params.unwrap_or_default();
                params["progressToken"] = original;
                relay.forward(protocol::notification(&method, Some(params)));
            }
        }
        _ => {
            if let Some(relay) = inflight.sole_relay() {
                relay.forward(protocol::notification(&method, params));
            }
        }
    }
}

/// A request from the upstream: relayed to the sole relayed call's client
/// (`None`), or answered here (`ping`, an empty `roots/list`) or refused:
/// the reply.
fn on_request(
    id: Value,
    method: String,
    params: Option<Value>,
    inflight: &InFlight,
    ctx: &RelayCtx,
) -> Option<Value> {
    if method != "ping"
        && relay_request(
            ctx,
            inflight.sole_relay(),
            (&id, Lane::MAIN),
            &method,
            params.clone(),
        )
        .is_some()
    {
        return None;
    }
    // Nobody to ask: answer the harmless ones, refuse the rest.
    let reply = match method.as_str() {
        "ping" => protocol::result_response(id, json!({})),
        "roots/list" => protocol::result_response(id, json!({"roots": []})),
        _ => protocol::error_response(
            id,
            &RpcError::new(
                protocol::METHOD_NOT_FOUND,
                format!("mcp-edge has no client to relay {method} to"),
            ),
        ),
    };
    Some(reply)
}
