//! The http side of the MRTR bridge for legacy callers (issue 13, part 3;
//! the bridge itself is `upstream::mrtr`).
//!
//! A legacy session's call that a modern upstream may answer with an
//! `InputRequiredResult` (`tools/call`, `prompts/get`, `resources/read`:
//! `../shared/spec/2026-07-28/patterns-mrtr.mdx` §Supported Requests)
//! carries the capabilities the session declared at `initialize` as the
//! modern per-request `_meta["io.modelcontextprotocol/clientCapabilities"]`
//! (2026-07-28 index.mdx §_meta), so the upstream asks only for what the
//! caller can give; `upstream::era::adapt_params` keeps it for a modern
//! upstream and removes it for a legacy one. A legacy caller that takes no
//! SSE stream cannot be asked anything: an `InputRequiredResult` for it
//! becomes a clear error ([`no_stream`]).

use crate::protocol::{self, Payload, RpcError};
use serde_json::{json, Value};

/// `params` of a legacy session's call, with the session's declared
/// capabilities in `_meta` (any value the client put there replaced).
pub(super) fn declare_caps(
    caps: protocol::ClientCaps,
    method: &str,
    mut params: Option<Value>,
) -> Option<Value> {
    if !matches!(method, "tools/call" | "prompts/get" | "resources/read") {
        return params;
    }
    if let Some(Value::Object(p)) = params.as_mut() {
        let meta = p.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(m) = meta {
            m.insert(protocol::META_CLIENT_CAPABILITIES.into(), caps.to_json());
        }
    }
    params
}

/// A legacy caller without an SSE stream: an `InputRequiredResult` becomes
/// an Invalid Request error naming what the upstream asked for and what the
/// client must do (accept `text/event-stream`, 2025-11-25 transports.mdx
/// §Sending Messages to the Server, item 2).
pub(super) fn no_stream(outcome: Result<Payload, RpcError>) -> Result<Payload, RpcError> {
    let result = outcome?;
    if !crate::router::input_required(&result) {
        return Ok(result);
    }
    let result = result.into_value();
    let asked: Vec<&str> = (result.get("inputRequests").and_then(Value::as_object))
        .map(|o| {
            o.values()
                .filter_map(|r| r.get("method").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let msg = format!(
        "the upstream needs input from the client ({}); mcp-edge can ask a legacy client only on an SSE response: send Accept: application/json, text/event-stream",
        if asked.is_empty() { "a retry".to_string() } else { asked.join(", ") }
    );
    Err(RpcError::new(protocol::INVALID_REQUEST, msg).with_data(json!({"inputRequests": asked})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_required_result_without_a_stream_is_a_clear_error() {
        let ir = json!({"resultType": "input_required", "inputRequests": {
            "a": {"method": "elicitation/create", "params": {}},
            "b": {"method": "roots/list"}}, "requestState": "s"});
        let e = no_stream(Ok(ir.into())).unwrap_err();
        assert_eq!(e.code, protocol::INVALID_REQUEST);
        assert!(
            e.message.contains("(elicitation/create, roots/list)"),
            "{}",
            e.message
        );
        assert!(e.message.contains("text/event-stream"), "{}", e.message);
        let done = json!({"resultType": "complete", "content": []});
        assert_eq!(
            no_stream(Ok(done.clone().into())).map(Payload::into_value),
            Ok(done)
        );
    }
}
