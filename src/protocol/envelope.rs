//! Reading a request body: one JSON-RPC message, or a batch
//! (2025-03-26 only), without building a map for the message's own top
//! level (JSON-RPC 2.0 §4–§6; `../shared/spec/2026-07-28/basic.mdx`
//! §Messages). The members are read straight into their places (`id`,
//! `method`, `params`, `result`, `error`), so a request costs no map, no
//! key strings and no hashing at its top level; what they hold is read as
//! before. The rules are [`super::classify`]'s own ([`super::Fields`]).

use super::{classify, Fields, Message, RpcError};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// A request body.
pub enum Body {
    /// One message, or why it is not a valid one (with the id when known).
    One(Result<Message, (Value, RpcError)>),
    /// A JSON array (a batch; its elements are classified one by one).
    Batch(Vec<Value>),
}

/// Reads `bytes` as a request body. `Err` only when it is not JSON at all
/// (a parse error, -32700).
pub fn parse(bytes: &[u8]) -> Result<Body, serde_json::Error> {
    let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if object {
        // Anything the envelope cannot take (duplicate members, say) is
        // read as a tree below, as every other body is.
        if let Ok(e) = serde_json::from_slice::<Envelope<'_>>(bytes) {
            return Ok(Body::One(e.fields().classify()));
        }
    }
    Ok(match serde_json::from_slice::<Value>(bytes)? {
        Value::Array(items) => Body::Batch(items),
        v => Body::One(classify(v)),
    })
}

/// A message object's members, each `None` when absent (a `null` member is
/// `Some(Value::Null)`: see [`present`]).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    method: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

impl Envelope<'_> {
    fn fields(self) -> Fields {
        let version_ok = self.jsonrpc.is_some_and(|v| {
            v.get() == "\"2.0\""
                || serde_json::from_str::<Value>(v.get()).is_ok_and(|v| v.as_str() == Some("2.0"))
        });
        Fields {
            version_ok,
            id: self.id,
            method: self.method,
            params: self.params,
            result: self.result,
            error: self.error,
        }
    }
}

/// A member that is there, `null` included (serde's `Option` would read
/// `null` as absent: an `"id": null` is not a notification).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every body reads as the tree-based [`classify`] reads it.
    #[test]
    fn the_envelope_reads_as_the_tree_does() {
        let bodies = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":[1,2]}}}"#,
            r#"{"jsonrpc":"2.0","id":"s","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"\u0032.0","id":1,"method":"ping"}"#,
            r#"{"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":null}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"ok":true}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","id":3}"#,
            r#"{"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":12345678901234567890123,"method":"ping","extra":{}}"#,
            r#"  {"jsonrpc":"2.0","id":1.50,"method":"ping"}"#,
        ];
        for b in bodies {
            let Ok(Body::One(got)) = parse(b.as_bytes()) else {
                panic!("{b}: not one message");
            };
            let want = classify(serde_json::from_str(b).unwrap());
            assert_eq!(got, want, "{b}");
        }
    }

    #[test]
    fn arrays_are_batches_and_the_rest_is_classified_or_refused() {
        assert!(
            matches!(parse(b"[{\"jsonrpc\":\"2.0\",\"method\":\"x\"}]"), Ok(Body::Batch(v)) if v.len() == 1)
        );
        assert!(matches!(parse(b"\"text\""), Ok(Body::One(Err(_)))));
        assert!(parse(b"{\"jsonrpc\":").is_err());
        assert!(parse(b"{} x").is_err());
    }
}
