//! Rules for modern (2026-07-28) requests on the downstream endpoint.
//!
//! - `MCP-Protocol-Version` header must equal `_meta["io.modelcontextprotocol/protocolVersion"]`
//!   (`../shared/spec/2026-07-28/transports-streamable-http.mdx` §Protocol Version Header);
//! - unsupported version → 400 + -32022 listing supported versions (`versioning.mdx`);
//! - `io.modelcontextprotocol/clientCapabilities` is required → else 400 + -32602 (`index.mdx` §_meta);
//! - `Mcp-Method` must equal `method`; `Mcp-Name` must equal `params.name`/`params.uri`
//!   for `tools/call`, `prompts/get`, `resources/read`, decoded from `=?base64?…?=`
//!   first → else 400 + -32020 (§Standard Request Headers, §Value Encoding, §Server Validation);
//! - every result carries `resultType`, and cacheable results `ttlMs`/`cacheScope`
//!   (`index.mdx` §ResultType; `server-utilities-caching.mdx` §Cacheable Results).

use crate::limits;
use crate::protocol::{self, Payload, ProtocolVersion, RawResult, ResultType, RpcError};
use http::HeaderMap;
use serde_json::{json, Value};
use std::borrow::Cow;

fn header<'a>(h: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, RpcError> {
    match h.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            RpcError::new(
                protocol::HEADER_MISMATCH,
                format!("Header mismatch: {name} has invalid characters"),
            )
        }),
    }
}

pub use crate::protocol::param_headers::decode_sentinel;

/// Validates a modern request's headers against its body. Errors carry the
/// JSON-RPC code; every one of them is answered with HTTP 400.
pub fn validate(h: &HeaderMap, method: &str, params: Option<&Value>) -> Result<(), RpcError> {
    let meta = protocol::params_meta(params);
    check_version(h, meta)?;
    if !meta.is_some_and(|m| {
        m.get(protocol::META_CLIENT_CAPABILITIES)
            .is_some_and(Value::is_object)
    }) {
        return Err(RpcError::new(
            protocol::INVALID_PARAMS,
            format!(
                "Invalid params: _meta[\"{}\"] is required",
                protocol::META_CLIENT_CAPABILITIES
            ),
        ));
    }
    check_method(h, method)?;
    check_name(h, method, params)
}

/// `MCP-Protocol-Version` present, equal to `_meta`'s, and 2026-07-28.
fn check_version(
    h: &HeaderMap,
    meta: Option<&serde_json::Map<String, Value>>,
) -> Result<(), RpcError> {
    let body_version = meta
        .and_then(|m| m.get(protocol::META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let version = match (header(h, "mcp-protocol-version")?, body_version) {
        (None, _) => {
            return Err(RpcError::new(
                protocol::HEADER_MISMATCH,
                "Header mismatch: required header MCP-Protocol-Version is missing",
            ))
        }
        (Some(hv), None) => {
            if ProtocolVersion::parse(hv) != Some(ProtocolVersion::MODERN) {
                return Err(RpcError::unsupported_version(hv));
            }
            return Err(RpcError::new(
                protocol::INVALID_PARAMS,
                format!("Invalid params: _meta[\"{}\"] is required", protocol::META_PROTOCOL_VERSION),
            ));
        }
        (Some(hv), Some(bv)) if hv != bv => {
            return Err(RpcError::new(
                protocol::HEADER_MISMATCH,
                format!("Header mismatch: MCP-Protocol-Version header value '{hv}' does not match body value '{bv}'"),
            ))
        }
        (Some(hv), Some(_)) => hv,
    };
    if ProtocolVersion::parse(version) != Some(ProtocolVersion::MODERN) {
        return Err(RpcError::unsupported_version(version));
    }
    Ok(())
}

/// `Mcp-Method` present and equal to the body's method.
fn check_method(h: &HeaderMap, method: &str) -> Result<(), RpcError> {
    match header(h, "mcp-method")? {
        None => Err(RpcError::new(
            protocol::HEADER_MISMATCH,
            "Header mismatch: required header Mcp-Method is missing",
        )),
        Some(m) if m != method => Err(RpcError::new(
            protocol::HEADER_MISMATCH,
            format!("Header mismatch: Mcp-Method header value '{m}' does not match body value '{method}'"),
        )),
        Some(_) => Ok(()),
    }
}

/// For a routed method, `Mcp-Name` present and (decoded) equal to the body's name.
fn check_name(h: &HeaderMap, method: &str, params: Option<&Value>) -> Result<(), RpcError> {
    if let Some(body_name) = protocol::routed_name(method, params) {
        let raw = header(h, "mcp-name")?.ok_or_else(|| {
            RpcError::new(
                protocol::HEADER_MISMATCH,
                "Header mismatch: required header Mcp-Name is missing",
            )
        })?;
        let decoded = decode_sentinel(raw).ok_or_else(|| {
            RpcError::new(
                protocol::HEADER_MISMATCH,
                "Header mismatch: Mcp-Name has an invalid Base64 value",
            )
        })?;
        if decoded != body_name {
            return Err(RpcError::new(
                protocol::HEADER_MISMATCH,
                format!("Header mismatch: Mcp-Name header value '{decoded}' does not match body value '{body_name}'"),
            ));
        }
    }
    Ok(())
}

/// True for the methods whose results are cacheable (`server-utilities-caching.mdx`).
pub fn is_cacheable(method: &str) -> bool {
    matches!(
        method,
        "server/discover"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    )
}

/// Adds `resultType: "complete"` when absent and, on cacheable complete
/// results, `ttlMs` and `cacheScope` when absent (an upstream's own values
/// win): `public` for lists and discovery, `private` for `resources/read`,
/// and for everything when `per_caller` (clients are configured, so a list
/// shows what that client's policy allows).
pub fn decorate(method: &str, result: Payload, per_caller: bool) -> Payload {
    match result {
        Payload::Tree(v) => Payload::Tree(decorate_tree(method, v, per_caller)),
        Payload::Raw(r) => Payload::Raw(decorate_raw(method, r, per_caller)),
    }
}

/// [`decorate`] of a result passed through as received: the missing
/// members spliced in ([`RawResult::add_members`]), nothing parsed.
fn decorate_raw(method: &str, mut r: RawResult, per_caller: bool) -> RawResult {
    let complete = match r.result_type() {
        None => {
            r.add_members(Cow::Borrowed("\"resultType\":\"complete\""));
            true
        }
        Some(t) => t == ResultType::Complete,
    };
    if complete && is_cacheable(method) {
        let (ttl, scope) = r.has_cache_hints();
        let mut add = Vec::new();
        if !ttl {
            add.push(format!("\"ttlMs\":{}", limits::DEFAULT_LIST_TTL_MS));
        }
        if !scope {
            let s = if per_caller || method == "resources/read" {
                "private"
            } else {
                "public"
            };
            add.push(format!("\"cacheScope\":\"{s}\""));
        }
        r.add_members(Cow::Owned(add.join(",")));
    }
    r
}

fn decorate_tree(method: &str, mut result: Value, per_caller: bool) -> Value {
    if let Some(o) = result.as_object_mut() {
        let rt = o.entry("resultType").or_insert_with(|| json!("complete"));
        let complete = rt.as_str() == Some("complete");
        if complete && is_cacheable(method) {
            o.entry("ttlMs")
                .or_insert_with(|| json!(limits::DEFAULT_LIST_TTL_MS));
            // Lists are the gateway's own merge, the same for every caller
            // unless client policies filter them; a read may be per-user
            // data the gateway cannot judge.
            let scope = if per_caller || method == "resources/read" {
                "private"
            } else {
                "public"
            };
            o.entry("cacheScope").or_insert_with(|| json!(scope));
        }
    }
    result
}

/// A modern `tools/call`'s `Mcp-Param-*` headers against its arguments,
/// for a tool whose `inputSchema` annotates parameters with `x-mcp-header`
/// (2026-07-28 transports-streamable-http.mdx §Server Validation). Errors:
/// `-32020` naming the header. A tool outside the caller's `policy` has no
/// annotations to check ([`crate::router::Router::param_headers`]): the
/// router answers it as an unknown tool.
pub(super) fn check_param_headers(
    app: &super::app::App,
    h: &HeaderMap,
    method: &str,
    params: Option<&Value>,
    policy: &crate::router::Policy,
) -> Result<(), RpcError> {
    if method != "tools/call" {
        return Ok(());
    }
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Ok(());
    };
    let annotated = app.router.param_headers(name, policy);
    if annotated.is_empty() {
        return Ok(());
    }
    let args = params.and_then(|p| p.get("arguments"));
    crate::protocol::param_headers::check(&annotated, args, |n| {
        h.get(format!("mcp-param-{n}").as_str())
            .and_then(|v| v.to_str().ok())
    })
    .map_err(|m| RpcError::new(protocol::HEADER_MISMATCH, m))
}

/// Requests 2026-07-28 removed (`../shared/spec/2026-07-28/changelog.mdx`
/// §Major changes 2, 4, 5: the handshake, `ping`, `logging/setLevel`,
/// `resources/subscribe`/`unsubscribe`; and the tasks extension's dropped
/// `tasks/result`/`tasks/list`, item 6). A modern request for one is
/// answered 404 with -32601 (`transports-streamable-http.mdx` §Protocol
/// Version Header: a method the server does not implement), never served
/// as if the era were legacy.
const REMOVED: [&str; 7] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "tasks/result",
    "tasks/list",
];

/// -32601 for a request 2026-07-28 removed ([`REMOVED`]); its HTTP status
/// is 404 ([`error_status`]).
pub fn removed(method: &str) -> Result<(), RpcError> {
    if REMOVED.contains(&method) {
        return Err(RpcError::new(
            protocol::METHOD_NOT_FOUND,
            format!("Method not found: {method} does not exist in protocol version 2026-07-28 (removed; see server/discover)"),
        ));
    }
    Ok(())
}

/// A legacy upstream's error in the form a modern caller expects: the
/// 2025-era "resource not found" `-32002` is `-32602` in 2026-07-28
/// (changelog.mdx §Minor changes 6), message and data kept.
pub fn modernize_error(mut e: RpcError) -> RpcError {
    const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;
    if e.code == LEGACY_RESOURCE_NOT_FOUND {
        e.code = protocol::INVALID_PARAMS;
    }
    e
}

/// The HTTP status of a modern caller's JSON-RPC error, whoever raised it,
/// mcp-edge or an upstream: 404 for -32601, 400 for -32020/-32021/-32022,
/// else 200 (`../shared/spec/2026-07-28/transports-streamable-http.mdx`
/// §Protocol Version Header, §Server Validation; `index.mdx`: -32021 on
/// HTTP is 400).
pub fn error_status(e: &crate::protocol::RpcError) -> http::StatusCode {
    use crate::protocol as p;
    match e.code {
        p::METHOD_NOT_FOUND => http::StatusCode::NOT_FOUND,
        p::HEADER_MISMATCH | p::MISSING_CLIENT_CAPABILITY | p::UNSUPPORTED_PROTOCOL_VERSION => {
            http::StatusCode::BAD_REQUEST
        }
        _ => http::StatusCode::OK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_legacy_resource_not_found_is_invalid_params_for_a_modern_caller() {
        let e = RpcError::new(-32002, "Resource not found").with_data(json!({"uri": "x://y"}));
        let m = modernize_error(e);
        assert_eq!((m.code, m.message.as_str()), (-32602, "Resource not found"));
        assert_eq!(m.data, Some(json!({"uri": "x://y"})));
        assert_eq!(modernize_error(RpcError::new(-32021, "m")).code, -32021);
    }

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    fn params(name: &str) -> Value {
        json!({"name": name, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}})
    }

    #[test]
    fn accepts_matching_headers_including_base64() {
        let h = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?bcOpdMOpbw==?="),
        ]);
        assert_eq!(validate(&h, "tools/call", Some(&params("météo"))), Ok(()));
    }

    #[test]
    fn mismatches_are_32020_and_versions_32022() {
        let good = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "a"),
        ];
        assert_eq!(
            validate(&hm(&good), "tools/call", Some(&params("b")))
                .unwrap_err()
                .code,
            protocol::HEADER_MISMATCH
        );
        assert_eq!(
            validate(&hm(&good[..2]), "tools/call", Some(&params("a")))
                .unwrap_err()
                .code,
            protocol::HEADER_MISMATCH
        );
        assert_eq!(
            validate(&hm(&good), "tools/list", Some(&params("a")))
                .unwrap_err()
                .code,
            protocol::HEADER_MISMATCH
        );
        let mut p = params("a");
        p["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
        let h = hm(&[
            ("mcp-protocol-version", "1900-01-01"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "a"),
        ]);
        let e = validate(&h, "tools/call", Some(&p)).unwrap_err();
        assert_eq!(e.code, protocol::UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(e.data.unwrap()["supported"][0], "2026-07-28");
    }

    #[test]
    fn missing_capabilities_is_invalid_params() {
        let h = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ]);
        let p = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}});
        assert_eq!(
            validate(&h, "tools/list", Some(&p)).unwrap_err().code,
            protocol::INVALID_PARAMS
        );
    }

    #[test]
    fn decorate_adds_only_missing_fields() {
        let decorate = |m: &str, v: Value, p: bool| decorate(m, v.into(), p).into_value();
        let r = decorate("tools/list", json!({"tools": [], "ttlMs": 5}), false);
        assert_eq!(
            r,
            json!({"tools": [], "ttlMs": 5, "resultType": "complete", "cacheScope": "public"})
        );
        let r = decorate("tools/call", json!({"content": []}), false);
        assert_eq!(r, json!({"content": [], "resultType": "complete"}));
        let r = decorate("tools/list", json!({"resultType": "input_required"}), false);
        assert_eq!(r, json!({"resultType": "input_required"}));
        // Client policies filter lists: no shared cache may keep one.
        let r = decorate("tools/list", json!({"tools": []}), true);
        assert_eq!(r["cacheScope"], "private");
    }

    #[test]
    fn a_raw_result_is_decorated_as_its_tree_would_be() {
        let cases = [
            ("tools/call", json!({"content": []})),
            ("tools/call", json!({})),
            (
                "tools/call",
                json!({"resultType": "input_required", "inputRequests": {}}),
            ),
            ("resources/read", json!({"contents": []})),
            ("resources/read", json!({"contents": [], "ttlMs": 9})),
            (
                "resources/read",
                json!({"contents": [], "cacheScope": "public"}),
            ),
            (
                "resources/read",
                json!({"resultType": "complete", "contents": []}),
            ),
        ];
        for (method, v) in cases {
            for per_caller in [false, true] {
                let text = bytes::Bytes::from(serde_json::to_vec(&v).unwrap());
                let raw = Payload::Raw(RawResult::new(text).unwrap());
                let want = decorate(method, v.clone().into(), per_caller).into_value();
                let got = decorate(method, raw, per_caller);
                assert!(matches!(got, Payload::Raw(_)), "not parsed");
                assert_eq!(got.into_value(), want, "{method} {v}");
            }
        }
    }
}
