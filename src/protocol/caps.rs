//! The client capabilities that matter to a server→client request
//! (elicitation, sampling, roots), kept as a small fixed bitset
//! ([`ClientCaps`]): what a legacy session declared at `initialize`
//! (`../shared/spec/2025-11-25/schema.json` `ClientCapabilities`), and what
//! mcp-edge declares for it in a modern request's
//! `_meta["io.modelcontextprotocol/clientCapabilities"]`
//! (`../shared/spec/2026-07-28/schema.json` `ClientCapabilities`; both eras
//! give these three the same shape, except the legacy `roots.listChanged`,
//! which concerns a notification no modern request carries).
//!
//! A bare `elicitation: {}` (the only shape before modes existed) counts as
//! form mode only, as 2025-11-25 client/elicitation says.

use serde_json::{json, Map, Value};

/// Client capabilities relevant to input requests, one bit each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientCaps(u8);

const ELICIT_FORM: u8 = 1;
const ELICIT_URL: u8 = 2;
const SAMPLING: u8 = 4;
const SAMPLING_TOOLS: u8 = 8;
const SAMPLING_CONTEXT: u8 = 16;
const ROOTS: u8 = 32;

fn has_key(o: &Map<String, Value>, key: &str) -> bool {
    o.get(key).is_some_and(|v| !v.is_null())
}

impl ClientCaps {
    /// No capability declared.
    pub const NONE: ClientCaps = ClientCaps(0);

    /// What mcp-edge declares to a legacy upstream at `initialize`, and
    /// again when it re-initializes an expired session: elicitation (form
    /// and URL), sampling and roots, the requests it can pass on to a caller
    /// that declared them (`upstream::era::initialize_params`); a caller that declared
    /// another set gets a session of its own (`upstream::http::lanes`).
    pub const RELAYED: ClientCaps = ClientCaps(ELICIT_FORM | ELICIT_URL | SAMPLING | ROOTS);

    /// Reads a `ClientCapabilities` object (either era); anything else is
    /// [`ClientCaps::NONE`].
    pub fn parse(caps: Option<&Value>) -> ClientCaps {
        let Some(c) = caps.and_then(Value::as_object) else {
            return ClientCaps::NONE;
        };
        let mut bits = 0;
        if let Some(e) = c.get("elicitation").and_then(Value::as_object) {
            let (form, url) = (has_key(e, "form"), has_key(e, "url"));
            if form || !url {
                bits |= ELICIT_FORM;
            }
            if url {
                bits |= ELICIT_URL;
            }
        }
        if let Some(s) = c.get("sampling").and_then(Value::as_object) {
            bits |= SAMPLING;
            if has_key(s, "tools") {
                bits |= SAMPLING_TOOLS;
            }
            if has_key(s, "context") {
                bits |= SAMPLING_CONTEXT;
            }
        }
        if c.get("roots").is_some_and(Value::is_object) {
            bits |= ROOTS;
        }
        ClientCaps(bits)
    }

    fn has(self, bit: u8) -> bool {
        self.0 & bit == bit
    }

    /// The modern `ClientCapabilities` object declaring exactly these.
    pub fn to_json(self) -> Value {
        let mut o = Map::new();
        if self.has(ELICIT_FORM) || self.has(ELICIT_URL) {
            let mut e = Map::new();
            if self.has(ELICIT_FORM) {
                e.insert("form".into(), json!({}));
            }
            if self.has(ELICIT_URL) {
                e.insert("url".into(), json!({}));
            }
            o.insert("elicitation".into(), Value::Object(e));
        }
        if self.has(SAMPLING) {
            let mut s = Map::new();
            if self.has(SAMPLING_TOOLS) {
                s.insert("tools".into(), json!({}));
            }
            if self.has(SAMPLING_CONTEXT) {
                s.insert("context".into(), json!({}));
            }
            o.insert("sampling".into(), Value::Object(s));
        }
        if self.has(ROOTS) {
            o.insert("roots".into(), json!({}));
        }
        Value::Object(o)
    }

    /// What a server→client request of `method` with `params` needs
    /// (`None`: not one of the three input request kinds,
    /// 2026-07-28 patterns-mrtr.mdx §Server Requirements, item 2).
    /// Elicitation by mode (`form` when absent); sampling with `tools` or
    /// `toolChoice` needs `sampling.tools` (2025-11-25 schema
    /// `ClientCapabilities.sampling.tools`).
    pub fn needed(method: &str, params: Option<&Value>) -> Option<ClientCaps> {
        let field = |k: &str| params.and_then(|p| p.get(k)).filter(|v| !v.is_null());
        let bits = match method {
            "elicitation/create" => match field("mode").and_then(Value::as_str) {
                Some("url") => ELICIT_URL,
                _ => ELICIT_FORM,
            },
            "sampling/createMessage" if field("tools").or(field("toolChoice")).is_some() => {
                SAMPLING | SAMPLING_TOOLS
            }
            "sampling/createMessage" => SAMPLING,
            "roots/list" => ROOTS,
            _ => return None,
        };
        Some(ClientCaps(bits))
    }

    /// What of `needed` is not in `self` ([`ClientCaps::NONE`] when nothing).
    pub fn lacking(self, needed: ClientCaps) -> ClientCaps {
        // Sampling with tools needs the sampling bit too: report both.
        let missing = needed.0 & !self.0;
        if missing & SAMPLING_TOOLS != 0 {
            return ClientCaps(missing | SAMPLING);
        }
        ClientCaps(missing)
    }

    /// Both sets together.
    pub fn union(self, other: ClientCaps) -> ClientCaps {
        ClientCaps(self.0 | other.0)
    }

    /// True when nothing is declared.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_capabilities_round_trip_in_the_modern_shape() {
        let legacy =
            json!({"elicitation": {}, "sampling": {"tools": {}}, "roots": {"listChanged": true}});
        let c = ClientCaps::parse(Some(&legacy));
        assert_eq!(
            c.to_json(),
            json!({"elicitation": {"form": {}}, "sampling": {"tools": {}}, "roots": {}})
        );
        assert_eq!(ClientCaps::parse(Some(&c.to_json())), c);
        let url_only = ClientCaps::parse(Some(&json!({"elicitation": {"url": {}}})));
        assert_eq!(url_only.to_json(), json!({"elicitation": {"url": {}}}));
        assert!(ClientCaps::parse(Some(&json!({}))).is_empty());
        assert_eq!(
            ClientCaps::RELAYED.to_json(),
            json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}})
        );
        assert!(ClientCaps::parse(Some(&json!("x"))).is_empty());
        assert_eq!(ClientCaps::parse(None).to_json(), json!({}));
    }

    #[test]
    fn each_input_request_needs_its_capability() {
        let need = |m: &str, p: Value| ClientCaps::needed(m, Some(&p)).unwrap();
        let form = need("elicitation/create", json!({"message": "?"}));
        let url = need(
            "elicitation/create",
            json!({"mode": "url", "url": "https://x"}),
        );
        let tools = need("sampling/createMessage", json!({"tools": []}));
        let roots = need("roots/list", json!({}));
        assert!(ClientCaps::needed("tools/call", None).is_none());
        let declared = ClientCaps::parse(Some(&json!({"elicitation": {}, "sampling": {}})));
        assert!(declared.lacking(form).is_empty());
        assert_eq!(
            declared.lacking(url).to_json(),
            json!({"elicitation": {"url": {}}})
        );
        assert_eq!(
            declared.lacking(tools).to_json(),
            json!({"sampling": {"tools": {}}})
        );
        assert_eq!(
            declared
                .lacking(roots)
                .union(declared.lacking(url))
                .to_json(),
            json!({"elicitation": {"url": {}}, "roots": {}})
        );
    }
}
