//! Token requests (RFC 6749 §4.1.3, §4.4.2, §6) and their answers
//! (§5.1, §5.2), with the client authentication the authorization server
//! allows: `client_secret_basic` (id and secret form-encoded, then base64,
//! §2.3.1), `client_secret_post`, `private_key_jwt` (RFC 7523 §2.2) or none.
//! `resource` (RFC 8707 §2) goes on every request, refreshes included,
//! unless configured off.

use super::fetch::{pct, Fetch};
use super::OAuthError;
use crate::config::Secret;
use base64::Engine;
use http::HeaderValue;
use serde_json::Value;
use std::time::Duration;

/// How this client authenticates at the token endpoint, resolved.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// A public client: `client_id` in the form only.
    Public,
    /// `client_secret_basic`.
    Basic(Secret<String>),
    /// `client_secret_post`.
    Post(Secret<String>),
    /// `private_key_jwt` with the key in this file (read at each use).
    Jwt(std::path::PathBuf),
}

/// The grant of one token request.
pub enum GrantRequest<'a> {
    /// `client_credentials` with the scopes asked for.
    ClientCredentials {
        /// Space-separated scopes, if any.
        scope: Option<&'a str>,
    },
    /// `refresh_token`.
    Refresh {
        /// The refresh token.
        token: &'a str,
        /// Space-separated scopes (a step-up), if any.
        scope: Option<&'a str>,
    },
    /// `authorization_code` with its PKCE verifier.
    Code {
        /// The code from the redirect.
        code: &'a str,
        /// The PKCE `code_verifier` (RFC 7636 §4.5).
        verifier: &'a str,
        /// The redirect URI the code was issued for.
        redirect_uri: &'a str,
    },
}

/// A successful token answer.
#[derive(Debug)]
pub struct Issued {
    /// `access_token`.
    pub access_token: Secret<String>,
    /// `expires_in`, if given.
    pub expires_in: Option<Duration>,
    /// `refresh_token`, if given (a rotation when it differs from the one used).
    pub refresh_token: Option<Secret<String>>,
    /// `scope`, if given.
    pub scope: Option<String>,
}

/// Where a token request goes and as whom.
pub struct Endpoint<'a> {
    /// `token_endpoint`.
    pub url: &'a str,
    /// The issuer (the assertion's audience; `url` when unknown).
    pub issuer: Option<&'a str>,
    /// `client_id`.
    pub client_id: &'a str,
    /// How the client authenticates.
    pub credentials: &'a Credentials,
    /// RFC 8707 `resource`, unless left out.
    pub resource: Option<&'a str>,
}

/// Sends one token request and reads its answer.
pub async fn request(
    fetch: &Fetch,
    ep: &Endpoint<'_>,
    grant: &GrantRequest<'_>,
) -> Result<Issued, OAuthError> {
    let mut form: Vec<(&str, String)> = Vec::with_capacity(8);
    match grant {
        GrantRequest::ClientCredentials { scope } => {
            form.push(("grant_type", "client_credentials".into()));
            if let Some(s) = scope {
                form.push(("scope", s.to_string()));
            }
        }
        GrantRequest::Refresh { token, scope } => {
            form.push(("grant_type", "refresh_token".into()));
            form.push(("refresh_token", token.to_string()));
            if let Some(s) = scope {
                form.push(("scope", s.to_string()));
            }
        }
        GrantRequest::Code {
            code,
            verifier,
            redirect_uri,
        } => {
            form.push(("grant_type", "authorization_code".into()));
            form.push(("code", code.to_string()));
            form.push(("code_verifier", verifier.to_string()));
            form.push(("redirect_uri", redirect_uri.to_string()));
        }
    }
    if let Some(r) = ep.resource {
        form.push(("resource", r.to_string()));
    }
    let authorization = client_auth(ep, &mut form)?;
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = fetch.post_form(ep.url, &pairs, authorization).await?;
    answer(a)
}

/// Adds the client's authentication to the form, or returns the
/// `Authorization` header that carries it.
fn client_auth(
    ep: &Endpoint<'_>,
    form: &mut Vec<(&str, String)>,
) -> Result<Option<HeaderValue>, OAuthError> {
    match ep.credentials {
        Credentials::Public => {
            form.push(("client_id", ep.client_id.to_string()));
            Ok(None)
        }
        Credentials::Post(secret) => {
            form.push(("client_id", ep.client_id.to_string()));
            form.push(("client_secret", secret.expose().clone()));
            Ok(None)
        }
        Credentials::Basic(secret) => Ok(Some(basic(ep.client_id, secret.expose()))),
        Credentials::Jwt(path) => {
            let key = crate::config::read_private_key(path).map_err(OAuthError::ClientFile)?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let aud = ep.issuer.unwrap_or(ep.url);
            let jwt = key
                .client_assertion(
                    ep.client_id,
                    aud,
                    now,
                    crate::limits::OAUTH_ASSERTION_LIFETIME.as_secs(),
                )
                .map_err(|e| OAuthError::ClientFile(e.to_string()))?;
            form.push(("client_id", ep.client_id.to_string()));
            form.push((
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".into(),
            ));
            form.push(("client_assertion", jwt));
            Ok(None)
        }
    }
}

/// `Authorization: Basic` of RFC 6749 §2.3.1: id and secret each
/// form-encoded, then joined by `:` and base64-encoded.
pub fn basic(id: &str, secret: &str) -> HeaderValue {
    let raw = format!("{}:{}", pct(id, true), pct(secret, true));
    let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
    let mut v = HeaderValue::from_str(&format!("Basic {b64}"))
        .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
    v.set_sensitive(true);
    v
}

/// Reads a token endpoint's answer: the token (§5.1), or the error (§5.2)
/// sorted into what it means for the upstream.
fn answer(a: super::fetch::Answer) -> Result<Issued, OAuthError> {
    let s = |k: &str| a.body.get(k).and_then(Value::as_str).map(str::to_string);
    if (200..300).contains(&a.status) {
        // RFC 6749 §5.1: a token of another type (DPoP, …) is not sent as Bearer.
        if let Some(t) = s("token_type").filter(|t| !t.eq_ignore_ascii_case("bearer")) {
            return Err(OAuthError::BadAnswer(format!(
                "token_type {:?}: only Bearer tokens are used",
                crate::logline::printable(&t)
            )));
        }
        let token = s("access_token")
            .filter(|t| !t.is_empty() && HeaderValue::from_str(&format!("Bearer {t}")).is_ok())
            .ok_or_else(|| {
                OAuthError::BadAnswer("a token answer without a usable access_token".into())
            })?;
        let expires_in = a
            .body
            .get("expires_in")
            .and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
            .map(Duration::from_secs);
        return Ok(Issued {
            access_token: Secret::new(token),
            expires_in,
            refresh_token: s("refresh_token")
                .filter(|t| !t.is_empty())
                .map(Secret::new),
            scope: s("scope"),
        });
    }
    let error = s("error").unwrap_or_default();
    let described = match s("error_description") {
        Some(d) => format!("{error}: {}", crate::logline::printable(&d)),
        None if error.is_empty() => format!("HTTP {}", a.status),
        None => error.clone(),
    };
    Err(match error.as_str() {
        "invalid_client" | "unauthorized_client" => OAuthError::InvalidClient(described),
        "invalid_grant" => OAuthError::InvalidGrant(described),
        _ if a.status == 429 || a.status >= 500 => OAuthError::Unavailable {
            reason: format!("token endpoint answered HTTP {}", a.status),
            retry_after: a.retry_after,
        },
        _ if a.status == 401 => OAuthError::InvalidClient(described),
        _ => OAuthError::Refused(described),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::fetch::Answer;
    use serde_json::json;

    #[test]
    fn basic_encodes_id_and_secret_before_base64() {
        let v = basic("a b:c", "s%t");
        let b64 = v.to_str().unwrap().strip_prefix("Basic ").unwrap();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(String::from_utf8(raw).unwrap(), "a+b%3Ac:s%25t");
        assert!(v.is_sensitive());
    }

    #[test]
    fn errors_are_sorted_by_what_they_mean() {
        let a = |status, body| Answer {
            status,
            retry_after: None,
            body,
        };
        assert!(matches!(
            answer(a(400, json!({"error": "invalid_client"}))),
            Err(OAuthError::InvalidClient(_))
        ));
        assert!(matches!(
            answer(a(400, json!({"error": "invalid_grant"}))),
            Err(OAuthError::InvalidGrant(_))
        ));
        assert!(matches!(
            answer(a(503, Value::Null)),
            Err(OAuthError::Unavailable { .. })
        ));
        assert!(matches!(
            answer(a(400, json!({"error": "invalid_scope"}))),
            Err(OAuthError::Refused(_))
        ));
        let ok = answer(a(
            200,
            json!({"access_token": "t", "expires_in": "10", "refresh_token": "r"}),
        ))
        .unwrap();
        assert_eq!(ok.expires_in, Some(Duration::from_secs(10)));
        assert_eq!(ok.refresh_token.unwrap().expose(), "r");
        assert!(answer(a(200, json!({"access_token": "bad\ntoken"}))).is_err());
    }
}
