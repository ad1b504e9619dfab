//! The HTTP requests of the OAuth client: metadata documents (GET) and
//! token and registration requests (POST), each bounded in time
//! ([`limits::OAUTH_REQUEST_TIMEOUT`]) and size ([`limits::OAUTH_BODY_BYTES`]).
//! Authorization-server endpoints must be https, or http on a loopback
//! address (MCP authorization, "Communication Security").

use super::OAuthError;
use crate::limits;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// An answer: status, `Retry-After` (parsed), the body as JSON (`Null`
/// when it is not JSON). No `Debug`: a token answer's body holds tokens.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// `Retry-After` of a 429 or 503, if any.
    pub retry_after: Option<Duration>,
    /// The body, parsed; `Value::Null` if it was not JSON.
    pub body: Value,
}

/// The OAuth client's HTTP client (one per upstream, cheap to clone).
#[derive(Clone)]
pub struct Fetch {
    client: HttpsClient,
}

impl Fetch {
    /// A client with the system's TLS roots (rustls, ring provider).
    pub fn new() -> Result<Fetch, OAuthError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider)
            .map_err(|e| OAuthError::Setup(format!("TLS set-up: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .build(connector);
        Ok(Fetch { client })
    }

    /// GETs a JSON document.
    pub async fn get_json(&self, url: &str) -> Result<Answer, OAuthError> {
        let req = Request::builder()
            .method(Method::GET)
            .uri(url)
            .header(header::ACCEPT, "application/json")
            .body(Full::new(Bytes::new()))
            .map_err(|e| OAuthError::Discovery(format!("{url}: {e}")))?;
        self.send(req, url).await
    }

    /// POSTs a form (`application/x-www-form-urlencoded`) to an
    /// authorization-server endpoint, with `authorization` if given.
    pub async fn post_form(
        &self,
        url: &str,
        form: &[(&str, &str)],
        authorization: Option<HeaderValue>,
    ) -> Result<Answer, OAuthError> {
        secure(url)?;
        let body = form_encode(form);
        let mut b = Request::builder()
            .method(Method::POST)
            .uri(url)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json");
        if let Some(a) = authorization {
            b = b.header(header::AUTHORIZATION, a);
        }
        let req = b
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| OAuthError::Setup(format!("{url}: {e}")))?;
        self.send(req, url).await
    }

    /// POSTs an MCP request without credentials, for the upstream's
    /// challenge: its status and `WWW-Authenticate` values.
    pub async fn post_probe(
        &self,
        url: &str,
        doc: &Value,
    ) -> Result<(u16, Vec<String>), OAuthError> {
        let req = Request::builder()
            .method(Method::POST)
            .uri(url)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .body(Full::new(Bytes::from(doc.to_string())))
            .map_err(|e| OAuthError::Setup(format!("{url}: {e}")))?;
        let work = self.client.request(req);
        let resp = tokio::time::timeout(limits::OAUTH_REQUEST_TIMEOUT, work)
            .await
            .map_err(|_| OAuthError::Unreachable(format!("{url}: no answer")))?
            .map_err(|e| {
                OAuthError::Unreachable(format!("{url}: {}", crate::logline::error_chain(&e)))
            })?;
        let values = resp
            .headers()
            .get_all(header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect();
        Ok((resp.status().as_u16(), values))
    }

    /// POSTs a JSON document (dynamic client registration, RFC 7591 §3.1).
    pub async fn post_json(&self, url: &str, doc: &Value) -> Result<Answer, OAuthError> {
        secure(url)?;
        let req = Request::builder()
            .method(Method::POST)
            .uri(url)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(doc.to_string())))
            .map_err(|e| OAuthError::Setup(format!("{url}: {e}")))?;
        self.send(req, url).await
    }

    async fn send(&self, req: Request<Full<Bytes>>, url: &str) -> Result<Answer, OAuthError> {
        let work = async {
            let resp = self.client.request(req).await.map_err(|e| {
                OAuthError::Unreachable(format!("{url}: {}", crate::logline::error_chain(&e)))
            })?;
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| crate::protocol::parse_retry_after(v, std::time::SystemTime::now()));
            let body = Limited::new(resp.into_body(), limits::OAUTH_BODY_BYTES)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        crate::metrics::refused("oauth_body_bytes");
                        OAuthError::BadAnswer(format!(
                            "{url}: answer over {} bytes",
                            limits::OAUTH_BODY_BYTES
                        ))
                    } else {
                        OAuthError::Unreachable(format!("{url}: body: {e}"))
                    }
                })?
                .to_bytes();
            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
            Ok(Answer {
                status,
                retry_after,
                body,
            })
        };
        tokio::time::timeout(limits::OAUTH_REQUEST_TIMEOUT, work)
            .await
            .map_err(|_| {
                OAuthError::Unreachable(format!(
                    "{url}: no answer within {:?}",
                    limits::OAUTH_REQUEST_TIMEOUT
                ))
            })?
    }
}

/// Refuses an authorization-server URL that is neither https nor loopback.
pub fn secure(url: &str) -> Result<(), OAuthError> {
    if crate::config::is_secure_url(url) {
        Ok(())
    } else {
        Err(OAuthError::Discovery(format!(
            "{url}: authorization server endpoints must be https (http only on loopback)"
        )))
    }
}

/// `application/x-www-form-urlencoded` (WHATWG URL §5.2).
pub fn form_encode(form: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in form.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(&pct(k, true));
        out.push('=');
        out.push_str(&pct(v, true));
    }
    out
}

/// Percent-encodes all but unreserved characters (RFC 3986 §2.3); with
/// `plus`, a space becomes `+` (forms).
pub fn pct(s: &str, plus: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            b' ' if plus => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Decodes one `application/x-www-form-urlencoded` component.
pub fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::{form_encode, pct_decode};

    #[test]
    fn forms_round_trip() {
        let f = form_encode(&[("scope", "a b"), ("x", "ü&=+/")]);
        assert_eq!(f, "scope=a+b&x=%C3%BC%26%3D%2B%2F");
        assert_eq!(pct_decode("a+b%2Fc%zz%4"), "a b/c%zz%4");
        assert_eq!(pct_decode("%C3%BC"), "ü");
    }
}
