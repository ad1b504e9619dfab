//! `[upstream.oauth]`: how mcp-edge gets access tokens for an HTTP upstream
//! that needs a login (MCP authorization, 2025-11-25 and 2026-07-28
//! `basic/authorization`; machine-to-machine per the
//! `oauth-client-credentials` extension, SEP-1046).
//!
//! ```toml
//! [upstream.oauth]
//! grant = "client_credentials"          # or "authorization_code" (`mcp-edge login NAME`)
//! client_id = "edge-box-17"             # absent: client_metadata_url (CIMD) or dynamic registration
//! client_secret_file = "$CREDENTIALS_DIRECTORY/crm-secret"
//! # private_key_file = "/etc/mcp-edge/crm-key.pem"   # private_key_jwt (RFC 7523), ES256 or RS256
//! # client_metadata_url = "https://site.lan/mcp-edge.json"
//! scopes = ["mcp:tools"]                # absent: WWW-Authenticate's scope, else scopes_supported
//! # token_endpoint = "https://sso.site.lan/token"    # only when the server publishes no metadata
//! # resource = ""                       # RFC 8707; default the upstream's URL; "" leaves it out
//! ```
//!
//! The files are read when the config is loaded (a secret file that cannot
//! be read, a key that cannot be parsed: a config error naming the key) and
//! again at every token request, so a reload after fixing one takes effect.

use std::path::PathBuf;

use super::ctx::{Ctx, Result};
use super::fields::{check_url, secret_file};
use super::toml_raw::RawOAuth;

/// How tokens are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// `client_credentials` (RFC 6749 §4.4): the box is the client, no person.
    ClientCredentials,
    /// `authorization_code` with PKCE (RFC 7636, S256): a person logs in
    /// once with `mcp-edge login NAME`; refresh tokens keep it going.
    AuthorizationCode,
}

impl Grant {
    /// The `grant` value (also what `/status` shows).
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::ClientCredentials => "client_credentials",
            Grant::AuthorizationCode => "authorization_code",
        }
    }
}

/// How the client proves who it is at the token endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAuth {
    /// A public client (`token_endpoint_auth_method = "none"`).
    None,
    /// `client_secret_basic` or `client_secret_post`, whichever the
    /// authorization server's metadata allows; the file is read at each use.
    Secret(PathBuf),
    /// `private_key_jwt` (RFC 7523 §2.2), the PEM key read at each use.
    PrivateKey(PathBuf),
}

/// `[upstream.oauth]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthConfig {
    /// `grant`.
    pub grant: Grant,
    /// `client_id`; `None`: a Client ID Metadata Document or dynamic
    /// registration (authorization_code only).
    pub client_id: Option<String>,
    /// `client_secret_file` or `private_key_file`, or neither.
    pub auth: ClientAuth,
    /// `client_metadata_url`: an https URL with a path, used as the client id
    /// where the authorization server supports CIMD.
    pub client_metadata_url: Option<String>,
    /// `scopes`; `None`: from the challenge, else `scopes_supported`, else none.
    pub scopes: Option<Vec<String>>,
    /// `token_endpoint`, for servers that publish no metadata.
    pub token_endpoint: Option<String>,
    /// `resource` (RFC 8707): `None` = the upstream's canonical URL,
    /// `Some("")` = leave it out (authorization servers that reject it).
    pub resource: Option<String>,
}

/// `[upstream.oauth]` of the upstream at `base`.
pub(super) fn oauth(ctx: &Ctx, base: &str, raw: RawOAuth) -> Result<OAuthConfig> {
    let k = |f: &str| format!("{base}.oauth.{f}");
    let grant = match raw.grant.as_deref() {
        Some("client_credentials") => Grant::ClientCredentials,
        Some("authorization_code") => Grant::AuthorizationCode,
        Some(_) => {
            return Err(ctx.err(
                k("grant"),
                "must be \"client_credentials\" or \"authorization_code\"",
            ))
        }
        None => {
            return Err(ctx.err(
                k("grant"),
                "missing; set grant = \"client_credentials\" or \"authorization_code\"",
            ))
        }
    };
    if let Some(id) = &raw.client_id {
        if id.is_empty() || id.chars().any(char::is_control) {
            return Err(ctx.err(
                k("client_id"),
                "must be a non-empty string without control characters",
            ));
        }
    }
    if grant == Grant::ClientCredentials && raw.client_id.is_none() {
        return Err(ctx.err(
            k("client_id"),
            "missing; client_credentials needs the client id registered for this box at the \
             authorization server",
        ));
    }
    let auth = client_auth(ctx, base, &raw)?;
    if grant == Grant::ClientCredentials && auth == ClientAuth::None {
        return Err(ctx.err(
            k("client_secret_file"),
            "missing; client_credentials needs client_secret_file or private_key_file",
        ));
    }
    Ok(OAuthConfig {
        grant,
        client_id: raw.client_id,
        auth,
        client_metadata_url: raw
            .client_metadata_url
            .map(|u| metadata_url(ctx, &k("client_metadata_url"), u))
            .transpose()?,
        scopes: raw
            .scopes
            .map(|s| scopes(ctx, &k("scopes"), s))
            .transpose()?,
        token_endpoint: raw
            .token_endpoint
            .map(|u| secure_url(ctx, &k("token_endpoint"), u))
            .transpose()?,
        resource: raw
            .resource
            .map(|r| resource(ctx, &k("resource"), r))
            .transpose()?,
    })
}

/// `client_secret_file` or `private_key_file` (not both), each read now.
fn client_auth(ctx: &Ctx, base: &str, raw: &RawOAuth) -> Result<ClientAuth> {
    let k = |f: &str| format!("{base}.oauth.{f}");
    match (&raw.client_secret_file, &raw.private_key_file) {
        (Some(_), Some(_)) => Err(ctx.err(
            k("private_key_file"),
            "conflicts with client_secret_file; use one or the other",
        )),
        (Some(s), None) => {
            let key = k("client_secret_file");
            let path = secret_file(ctx, &key, s)?;
            read_secret(&path).map_err(|m| ctx.err(&key, m))?;
            Ok(ClientAuth::Secret(path))
        }
        (None, Some(s)) => {
            let key = k("private_key_file");
            let path = secret_file(ctx, &key, s)?;
            read_private_key(&path).map_err(|m| ctx.err(&key, m))?;
            Ok(ClientAuth::PrivateKey(path))
        }
        (None, None) => Ok(ClientAuth::None),
    }
}

/// The client secret in `path`, trimmed; the error never shows it.
pub fn read_secret(path: &std::path::Path) -> std::result::Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let secret = text.trim();
    if secret.is_empty() || secret.chars().any(char::is_control) {
        return Err(format!(
            "{} holds no secret (empty, or control characters inside)",
            path.display()
        ));
    }
    Ok(secret.to_string())
}

/// The PEM signing key in `path`.
pub fn read_private_key(
    path: &std::path::Path,
) -> std::result::Result<crate::jwt::SigningKey, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    crate::jwt::SigningKey::from_pem(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// An https URL, or http on a loopback address (the authorization spec's
/// "authorization server endpoints MUST be served over HTTPS").
fn secure_url(ctx: &Ctx, key: &str, s: String) -> Result<String> {
    let s = check_url(ctx, key, s)?;
    if !is_secure_url(&s) {
        return Err(ctx.err(key, "must be https:// (http:// only on a loopback address)"));
    }
    Ok(s)
}

/// True for https URLs and for http URLs whose host is a loopback address
/// or `localhost`.
pub fn is_secure_url(s: &str) -> bool {
    let Ok(uri) = s.parse::<http::Uri>() else {
        return false;
    };
    match uri.scheme_str() {
        Some("https") => true,
        Some("http") => uri.host().is_some_and(|h| {
            let h = h.trim_start_matches('[').trim_end_matches(']');
            h.eq_ignore_ascii_case("localhost")
                || h.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }),
        _ => false,
    }
}

/// A Client ID Metadata Document URL: https with a path.
fn metadata_url(ctx: &Ctx, key: &str, s: String) -> Result<String> {
    let s = secure_url(ctx, key, s)?;
    let has_path = s.parse::<http::Uri>().is_ok_and(|u| u.path().len() > 1);
    if !has_path {
        return Err(ctx.err(key, "must have a path (a Client ID Metadata Document URL)"));
    }
    Ok(s)
}

fn scopes(ctx: &Ctx, key: &str, list: Vec<String>) -> Result<Vec<String>> {
    for s in &list {
        // RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
        let ok = !s.is_empty()
            && s.bytes()
                .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b));
        if !ok {
            return Err(ctx.err(
                key,
                format!("{s:?} is not a scope (printable ASCII, no spaces, quotes or backslashes)"),
            ));
        }
    }
    Ok(list)
}

fn resource(ctx: &Ctx, key: &str, s: String) -> Result<String> {
    if s.is_empty() {
        return Ok(s);
    }
    let s = check_url(ctx, key, s)?;
    Ok(s)
}
