//! Finding an upstream's authorization server (MCP authorization,
//! 2025-11-25 and 2026-07-28 `basic/authorization` §Authorization Server
//! Discovery):
//!
//! 1. protected-resource metadata (RFC 9728): the 401 challenge's
//!    `resource_metadata`, else `/.well-known/oauth-protected-resource`
//!    with the upstream's path inserted, then at the root; its `resource`
//!    must name the upstream (RFC 9728 §3.3);
//! 2. authorization-server metadata of its first `authorization_servers`
//!    entry: RFC 8414 and OpenID Connect Discovery, path-inserted forms
//!    first for an issuer with a path; its `issuer` must be the one asked
//!    for (RFC 8414 §3.3);
//! 3. without protected-resource metadata (2025-03-26 servers), the
//!    upstream's origin is the authorization server, and without its
//!    metadata the default endpoints `/authorize`, `/token`, `/register`.

use super::fetch::{secure, Fetch};
use super::OAuthError;
use serde_json::Value;

/// What discovery found: the endpoints and capabilities mcp-edge uses.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    /// The authorization server's issuer identifier (`None`: unknown, an
    /// explicit `token_endpoint` or the 2025-03-26 default endpoints).
    pub issuer: Option<String>,
    /// `authorization_endpoint`.
    pub authorization_endpoint: Option<String>,
    /// `token_endpoint`.
    pub token_endpoint: String,
    /// `registration_endpoint` (RFC 7591).
    pub registration_endpoint: Option<String>,
    /// `token_endpoint_auth_methods_supported` (absent: `client_secret_basic`).
    pub auth_methods: Option<Vec<String>>,
    /// `code_challenge_methods_supported`.
    pub code_challenge_methods: Option<Vec<String>>,
    /// `scopes_supported` of the protected resource.
    pub scopes_supported: Option<Vec<String>>,
    /// `client_id_metadata_document_supported`.
    pub cimd: bool,
    /// `authorization_response_iss_parameter_supported` (RFC 9207).
    pub iss_parameter: bool,
    /// The protected resource's `resource`, when it published one.
    pub resource: Option<String>,
    /// The authorization server lists `offline_access` among its scopes
    /// (asked for at login, for a refresh token; SEP-2207).
    pub offline_access: bool,
}

impl Metadata {
    /// Metadata of an explicitly configured token endpoint (no discovery).
    pub fn explicit(token_endpoint: &str) -> Metadata {
        Metadata {
            token_endpoint: token_endpoint.to_string(),
            ..Metadata::default()
        }
    }
}

/// Discovers the authorization server of the upstream at `url`, starting
/// from the challenge's `resource_metadata` if there was one.
pub async fn discover(
    fetch: &Fetch,
    url: &str,
    resource_metadata: Option<&str>,
) -> Result<Metadata, OAuthError> {
    let prm = protected_resource(fetch, url, resource_metadata).await?;
    let (issuer, prm_scopes, resource) = match &prm {
        Some(p) => {
            let resource = p
                .get("resource")
                .and_then(Value::as_str)
                .map(str::to_string);
            if let Some(r) = &resource {
                if !resource_matches(r, url) {
                    return Err(OAuthError::Discovery(format!(
                        "the protected-resource metadata names resource {r:?}, not this upstream ({url})"
                    )));
                }
            }
            let issuer = p
                .get("authorization_servers")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    OAuthError::Discovery(
                        "the protected-resource metadata lists no authorization_servers".into(),
                    )
                })?
                .to_string();
            (issuer, strings(p.get("scopes_supported")), resource)
        }
        None => (origin(url)?, None, None),
    };
    secure(&issuer)?;
    let mut meta = match authorization_server(fetch, &issuer).await? {
        Some(m) => m,
        None if prm.is_none() => fallback_endpoints(&issuer),
        None => {
            return Err(OAuthError::Discovery(format!(
                "no authorization server metadata for {issuer}"
            )))
        }
    };
    // The default scope comes from the resource alone (§Scope Selection
    // Strategy); the server's own list only says whether it offers
    // `offline_access`.
    meta.scopes_supported = prm_scopes;
    meta.resource = resource;
    Ok(meta)
}

/// The protected-resource metadata document, or `None` when the upstream
/// publishes none (every well-known location answered 4xx).
async fn protected_resource(
    fetch: &Fetch,
    url: &str,
    from_challenge: Option<&str>,
) -> Result<Option<Value>, OAuthError> {
    let candidates = match from_challenge {
        Some(u) => {
            // Where the resource says: on its own origin, or https elsewhere.
            if origin(u)? != origin(url)? {
                secure(u)?;
            }
            vec![u.to_string()]
        }
        None => well_known(url, "oauth-protected-resource")?,
    };
    for c in &candidates {
        let a = fetch.get_json(c).await?;
        if (200..300).contains(&a.status) && a.body.is_object() {
            return Ok(Some(a.body));
        }
    }
    Ok(None)
}

/// The AS metadata of `issuer` from the first location that has it.
async fn authorization_server(fetch: &Fetch, issuer: &str) -> Result<Option<Metadata>, OAuthError> {
    for c in as_metadata_urls(issuer)? {
        let a = fetch.get_json(&c).await?;
        if !(200..300).contains(&a.status) || !a.body.is_object() {
            continue;
        }
        return parse_as(&a.body, issuer).map(Some);
    }
    Ok(None)
}

/// Reads AS metadata, checking its `issuer` (RFC 8414 §3.3) and that its
/// endpoints are https (or loopback).
fn parse_as(doc: &Value, issuer: &str) -> Result<Metadata, OAuthError> {
    let s = |k: &str| doc.get(k).and_then(Value::as_str).map(str::to_string);
    let got = s("issuer").unwrap_or_default();
    if !same_issuer(&got, issuer) {
        return Err(OAuthError::Discovery(format!(
            "authorization server metadata names issuer {got:?}, not {issuer:?}"
        )));
    }
    let token_endpoint = s("token_endpoint").ok_or_else(|| {
        OAuthError::Discovery(format!("{issuer}: metadata without token_endpoint"))
    })?;
    for e in [Some(&token_endpoint), s("authorization_endpoint").as_ref()]
        .into_iter()
        .flatten()
    {
        secure(e)?;
    }
    Ok(Metadata {
        issuer: Some(got),
        authorization_endpoint: s("authorization_endpoint"),
        token_endpoint,
        registration_endpoint: s("registration_endpoint"),
        auth_methods: strings(doc.get("token_endpoint_auth_methods_supported")),
        code_challenge_methods: strings(doc.get("code_challenge_methods_supported")),
        scopes_supported: strings(doc.get("scopes_supported")),
        cimd: doc
            .get("client_id_metadata_document_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        iss_parameter: doc
            .get("authorization_response_iss_parameter_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        resource: None,
        offline_access: strings(doc.get("scopes_supported"))
            .is_some_and(|s| s.iter().any(|x| x == "offline_access")),
    })
}

/// The 2025-03-26 default endpoints at the server's origin
/// (2025-03-26 authorization §2.3.3 Fallbacks for Servers without Metadata Discovery).
fn fallback_endpoints(origin: &str) -> Metadata {
    Metadata {
        issuer: None,
        authorization_endpoint: Some(format!("{origin}/authorize")),
        token_endpoint: format!("{origin}/token"),
        registration_endpoint: Some(format!("{origin}/register")),
        code_challenge_methods: Some(vec!["S256".into()]),
        ..Metadata::default()
    }
}

/// The metadata's `issuer` against the one it was fetched for: identical
/// (RFC 8414 §3.3), except that an issuer without a path and the same with
/// `/` are one URI (RFC 3986 §6.2.3; the official SDKs compare so, and the
/// Python SDK's own server publishes `https://h/` for `https://h`). Any
/// other difference, a trailing `/` after a path included, is another
/// issuer. (The redirect's `iss`, RFC 9207 §2.4, is compared exactly with
/// the issuer the metadata names: see `login`.)
pub fn same_issuer(a: &str, b: &str) -> bool {
    a == b
        || (a.trim_end_matches('/') == b.trim_end_matches('/')
            && path_of(a).is_empty()
            && path_of(b).is_empty())
}

/// `scheme://authority` of `url`.
pub fn origin(url: &str) -> Result<String, OAuthError> {
    let u: http::Uri = url
        .parse()
        .map_err(|e| OAuthError::Discovery(format!("{url}: {e}")))?;
    match (u.scheme_str(), u.authority()) {
        (Some(s), Some(a)) => Ok(format!("{s}://{a}")),
        _ => Err(OAuthError::Discovery(format!("{url}: not an absolute URL"))),
    }
}

/// `/.well-known/NAME` with the path of `url` inserted (when it has one),
/// then at the root (RFC 9728 §3.1, RFC 8414 §3.1).
fn well_known(url: &str, name: &str) -> Result<Vec<String>, OAuthError> {
    let o = origin(url)?;
    let path = path_of(url);
    let mut v = Vec::with_capacity(2);
    if !path.is_empty() {
        v.push(format!("{o}/.well-known/{name}{path}"));
    }
    v.push(format!("{o}/.well-known/{name}"));
    Ok(v)
}

/// Where AS metadata may be for `issuer` (MCP authorization §Authorization
/// Server Metadata Discovery): with a path, RFC 8414 path-inserted, OIDC
/// path-inserted, OIDC path-appended; without, the two root documents.
fn as_metadata_urls(issuer: &str) -> Result<Vec<String>, OAuthError> {
    let o = origin(issuer)?;
    let path = path_of(issuer);
    Ok(if path.is_empty() {
        vec![
            format!("{o}/.well-known/oauth-authorization-server"),
            format!("{o}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{o}/.well-known/oauth-authorization-server{path}"),
            format!("{o}/.well-known/openid-configuration{path}"),
            format!("{o}{path}/.well-known/openid-configuration"),
        ]
    })
}

/// The path of `url` without a trailing `/` (`""` for the root).
fn path_of(url: &str) -> String {
    url.parse::<http::Uri>()
        .map(|u| u.path().trim_end_matches('/').to_string())
        .unwrap_or_default()
}

/// True when the metadata's `resource` names the upstream at `url`: same
/// origin, and the upstream's path is the resource's path or below it.
pub fn resource_matches(resource: &str, url: &str) -> bool {
    let (Ok(r), Ok(u)) = (origin(resource), origin(url)) else {
        return false;
    };
    if !r.eq_ignore_ascii_case(&u) {
        return false;
    }
    let (rp, up) = (path_of(resource), path_of(url));
    up == rp || rp.is_empty() || up.starts_with(&format!("{rp}/"))
}

/// The canonical URI of the upstream for RFC 8707 `resource`: its URL
/// with a lower-case scheme and host, without a fragment.
pub fn canonical_resource(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(u) => {
            let scheme = u.scheme_str().unwrap_or("https").to_ascii_lowercase();
            let auth = u
                .authority()
                .map(|a| a.as_str().to_ascii_lowercase())
                .unwrap_or_default();
            let pq = u.path_and_query().map(|p| p.as_str()).unwrap_or("");
            let pq = if pq == "/" { "" } else { pq };
            format!("{scheme}://{auth}{pq}")
        }
        Err(_) => url.to_string(),
    }
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    let a = v?.as_array()?;
    Some(
        a.iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_locations_in_the_specs_order() {
        assert_eq!(
            well_known("https://h.example/public/mcp", "oauth-protected-resource").unwrap(),
            [
                "https://h.example/.well-known/oauth-protected-resource/public/mcp",
                "https://h.example/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(
            as_metadata_urls("https://a.example/tenant1").unwrap(),
            [
                "https://a.example/.well-known/oauth-authorization-server/tenant1",
                "https://a.example/.well-known/openid-configuration/tenant1",
                "https://a.example/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(as_metadata_urls("https://a.example/").unwrap().len(), 2);
    }

    #[test]
    fn resource_must_name_the_upstream() {
        assert!(resource_matches(
            "https://h.example/mcp",
            "https://h.example/mcp"
        ));
        assert!(resource_matches(
            "https://H.example",
            "https://h.example/mcp"
        ));
        assert!(resource_matches(
            "https://h.example/mcp/",
            "https://h.example/mcp"
        ));
        assert!(!resource_matches(
            "https://h.example/mcpx",
            "https://h.example/mcp"
        ));
        assert!(!resource_matches(
            "https://other.example/mcp",
            "https://h.example/mcp"
        ));
        assert!(!resource_matches(
            "http://h.example/mcp",
            "https://h.example/mcp"
        ));
    }

    #[test]
    fn canonical_resource_lowercases_scheme_and_host() {
        assert_eq!(
            canonical_resource("HTTPS://Crm.Site.lan/mcp"),
            "https://crm.site.lan/mcp"
        );
        assert_eq!(
            canonical_resource("https://h.example/"),
            "https://h.example"
        );
    }

    #[test]
    fn as_metadata_issuer_must_match() {
        let doc = serde_json::json!({"issuer": "https://evil.example", "token_endpoint": "https://evil.example/token"});
        assert!(parse_as(&doc, "https://a.example").is_err());
        let doc = serde_json::json!({"issuer": "https://a.example/t/", "token_endpoint": "https://a.example/token"});
        assert!(
            parse_as(&doc, "https://a.example/t").is_err(),
            "a trailing / after a path is another issuer"
        );
        let doc = serde_json::json!({"issuer": "https://a.example/", "token_endpoint": "https://a.example/token"});
        assert!(
            parse_as(&doc, "https://a.example").is_ok(),
            "without a path, / and nothing are one URI"
        );
        let doc = serde_json::json!({"issuer": "https://a.example", "token_endpoint": "http://a.example/token"});
        assert!(
            parse_as(&doc, "https://a.example").is_err(),
            "http token endpoint off loopback"
        );
        let doc = serde_json::json!({"issuer": "https://a.example", "token_endpoint": "https://a.example/token"});
        assert_eq!(
            parse_as(&doc, "https://a.example").unwrap().token_endpoint,
            "https://a.example/token"
        );
    }
}
