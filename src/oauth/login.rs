//! `mcp-edge login NAME`: the one-time operator login of an
//! `authorization_code` upstream (MCP authorization, 2025-11-25 and
//! 2026-07-28 `basic/authorization` §Authorization Code Grant; OAuth 2.1
//! with PKCE S256, RFC 7636; `resource`, RFC 8707; `iss`, RFC 9207).
//!
//! It discovers the authorization server (from the upstream's 401, else the
//! well-known locations), finds a client id (configured, a Client ID
//! Metadata Document URL where the server supports it, else dynamic
//! registration, RFC 7591, with `application_type`), prints the
//! authorization URL on a line of its own and waits for the browser's
//! redirect to `http://127.0.0.1:PORT/callback` (reached from the operator's
//! machine with `ssh -L PORT:127.0.0.1:PORT box`), or for the redirect URL
//! pasted on stdin. `state` and `iss` are checked, the code is exchanged,
//! and the tokens are written to the token file, where the running gateway
//! picks them up. No token is printed.

use super::discovery::{canonical_resource, discover, Metadata};
use super::fetch::{pct, pct_decode, Fetch};
use super::store::{self, Stored};
use super::token::{self, Credentials, Endpoint, GrantRequest};
use super::{Challenge, OAuthError};
use crate::config::{ClientAuth, OAuthConfig, Secret};
use base64::Engine;
use serde_json::{json, Value};
use std::path::Path;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// What a login needs: the upstream and where its tokens go.
pub struct Login<'a> {
    /// The upstream's name.
    pub name: &'a str,
    /// Its URL.
    pub url: &'a str,
    /// Its `[upstream.oauth]`.
    pub cfg: &'a OAuthConfig,
    /// The token file.
    pub store: &'a Path,
    /// The loopback port of the redirect URI.
    pub port: u16,
}

/// What the authorization request was, to check its answer against.
struct Pending {
    state: String,
    verifier: String,
    redirect_uri: String,
    meta: Metadata,
    client: Client,
    resource: Option<String>,
    scope: Option<Vec<String>>,
    /// The challenge's `resource_metadata`, kept for the gateway.
    resource_metadata: Option<String>,
}

/// The client this login is, at this authorization server.
#[derive(Clone)]
struct Client {
    id: String,
    credentials: Credentials,
    /// Given by dynamic registration (kept in the token file).
    registered: Option<(Option<String>, Option<String>)>,
}

impl Login<'_> {
    /// Runs the login; `out` gets the authorization URL and progress lines.
    pub async fn run(&self, out: &mut (dyn std::io::Write + Send)) -> Result<(), OAuthError> {
        let fetch = Fetch::new()?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .map_err(|e| OAuthError::Setup(format!("listening on 127.0.0.1:{}: {e}", self.port)))?;
        let port = listener.local_addr().map_or(self.port, |a| a.port());
        let pending = self.prepare(&fetch, port).await?;
        let url = self.authorization_url(&pending)?;
        let say = |out: &mut (dyn std::io::Write + Send), s: &str| {
            let _ = writeln!(out, "{s}");
            let _ = out.flush();
        };
        say(out, &format!("Open this URL in a browser and log in (the redirect goes to {}; from another machine: ssh -L {port}:127.0.0.1:{port} this-box):", pending.redirect_uri));
        say(out, &url);
        say(
            out,
            "Waiting for the redirect (or paste the URL the browser was sent to, then Enter):",
        );
        let query = wait_for_redirect(&listener).await?;
        let code = check_redirect(&query, &pending)?;
        let issued = token::request(
            &fetch,
            &Endpoint {
                url: &pending.meta.token_endpoint,
                issuer: pending.meta.issuer.as_deref(),
                client_id: &pending.client.id,
                credentials: &pending.client.credentials,
                resource: pending.resource.as_deref(),
            },
            &GrantRequest::Code {
                code: &code,
                verifier: &pending.verifier,
                redirect_uri: &pending.redirect_uri,
            },
        )
        .await?;
        self.save(issued, &pending)?;
        say(
            out,
            &format!(
                "Logged in; tokens stored in {} (mode 0600).",
                self.store.display()
            ),
        );
        Ok(())
    }

    /// Discovery, the client, PKCE and `state`.
    async fn prepare(&self, fetch: &Fetch, port: u16) -> Result<Pending, OAuthError> {
        let challenge = probe(fetch, self.url).await;
        let meta = discover(
            fetch,
            self.url,
            challenge
                .as_ref()
                .and_then(|c| c.resource_metadata.as_deref()),
        )
        .await?;
        let s256 = meta
            .code_challenge_methods
            .as_ref()
            .is_some_and(|m| m.iter().any(|x| x == "S256"));
        if !s256 {
            return Err(OAuthError::Discovery(
                "the authorization server does not list PKCE S256 (code_challenge_methods_supported); refusing to log in".into(),
            ));
        }
        if meta.authorization_endpoint.is_none() {
            return Err(OAuthError::Discovery("no authorization_endpoint".into()));
        }
        let redirect_uri = format!("http://127.0.0.1:{port}/callback");
        let client = self.client(fetch, &meta, &redirect_uri).await?;
        let resource = match self.cfg.resource.as_deref() {
            Some("") => None,
            Some(r) => Some(r.to_string()),
            None => Some(
                meta.resource
                    .clone()
                    .unwrap_or_else(|| canonical_resource(self.url)),
            ),
        };
        let scope = self.scope(&meta, challenge.as_ref());
        let resource_metadata = challenge.and_then(|c| c.resource_metadata);
        Ok(Pending {
            state: random_text(24)?,
            verifier: random_text(48)?,
            redirect_uri,
            meta,
            client,
            resource,
            scope,
            resource_metadata,
        })
    }

    /// Configured id (with its secret or key), a CIMD URL, or a new
    /// registration (each login registers anew: the redirect port may differ).
    async fn client(
        &self,
        fetch: &Fetch,
        meta: &Metadata,
        redirect_uri: &str,
    ) -> Result<Client, OAuthError> {
        if let Some(id) = &self.cfg.client_id {
            let credentials = match &self.cfg.auth {
                ClientAuth::Secret(p) => {
                    let s =
                        Secret::new(crate::config::read_secret(p).map_err(OAuthError::ClientFile)?);
                    let m = meta.auth_methods.as_deref().unwrap_or(&[]);
                    let only_post = !m.iter().any(|x| x == "client_secret_basic")
                        && m.iter().any(|x| x == "client_secret_post");
                    if only_post {
                        Credentials::Post(s)
                    } else {
                        Credentials::Basic(s)
                    }
                }
                ClientAuth::PrivateKey(p) => Credentials::Jwt(p.clone()),
                ClientAuth::None => Credentials::Public,
            };
            return Ok(Client {
                id: id.clone(),
                credentials,
                registered: None,
            });
        }
        if let (true, Some(url)) = (meta.cimd, &self.cfg.client_metadata_url) {
            return Ok(Client {
                id: url.clone(),
                credentials: Credentials::Public,
                registered: None,
            });
        }
        let endpoint = meta.registration_endpoint.as_deref().ok_or_else(|| {
            OAuthError::Discovery(
                "the authorization server offers neither dynamic registration nor (with client_metadata_url) Client ID Metadata Documents; set client_id".into(),
            )
        })?;
        register(fetch, endpoint, redirect_uri).await
    }

    /// `scope`: configured, else the challenge's, else `scopes_supported`;
    /// the scopes a step-up asked for (kept in the token file) join them;
    /// `offline_access` when the server lists it (for a refresh token).
    fn scope(&self, meta: &Metadata, c: Option<&Challenge>) -> Option<Vec<String>> {
        let mut list: Vec<String> = match (&self.cfg.scopes, c.and_then(|c| c.scope.as_deref())) {
            (Some(s), _) => s.clone(),
            (None, Some(s)) => s
                .split(' ')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            (None, None) => meta.scopes_supported.clone().unwrap_or_default(),
        };
        let wanted = store::load(self.store)
            .ok()
            .flatten()
            .and_then(|s| s.wanted_scope);
        for w in wanted
            .iter()
            .flat_map(|w| w.split(' '))
            .filter(|w| !w.is_empty())
        {
            if !list.iter().any(|x| x == w) {
                list.push(w.to_string());
            }
        }
        let offers_offline = meta.offline_access;
        if offers_offline && !list.iter().any(|x| x == "offline_access") {
            list.push("offline_access".into());
        }
        (!list.is_empty()).then_some(list)
    }

    fn authorization_url(&self, p: &Pending) -> Result<String, OAuthError> {
        let endpoint = p.meta.authorization_endpoint.as_deref().unwrap_or_default();
        super::fetch::secure(endpoint)?;
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
            ring::digest::digest(&ring::digest::SHA256, p.verifier.as_bytes()),
        );
        let mut q: Vec<(&str, String)> = vec![
            ("response_type", "code".into()),
            ("client_id", p.client.id.clone()),
            ("redirect_uri", p.redirect_uri.clone()),
            ("code_challenge", challenge),
            ("code_challenge_method", "S256".into()),
            ("state", p.state.clone()),
        ];
        if let Some(s) = &p.scope {
            q.push(("scope", s.join(" ")));
        }
        if let Some(r) = &p.resource {
            q.push(("resource", r.clone()));
        }
        let query: Vec<String> = q
            .iter()
            .map(|(k, v)| format!("{k}={}", pct(v, false)))
            .collect();
        let sep = if endpoint.contains('?') { '&' } else { '?' };
        Ok(format!("{endpoint}{sep}{}", query.join("&")))
    }

    /// Writes the tokens, the authorization server and the client to the token file.
    fn save(&self, issued: token::Issued, p: &Pending) -> Result<(), OAuthError> {
        let now = super::unix(std::time::SystemTime::now());
        let lifetime = issued
            .expires_in
            .unwrap_or(crate::limits::OAUTH_DEFAULT_LIFETIME);
        let (client_secret, auth_method) = p.client.registered.clone().unwrap_or_default();
        let stored = Stored {
            access_token: Some(issued.access_token.expose().clone()),
            expires_at: Some(now + lifetime.as_secs()),
            issued_at: Some(now),
            refresh_token: issued.refresh_token.map(|r| r.expose().clone()),
            scope: issued.scope,
            issuer: p.meta.issuer.clone(),
            token_endpoint: Some(p.meta.token_endpoint.clone()),
            client_id: Some(p.client.id.clone()),
            client_secret,
            auth_method,
            wanted_scope: None,
            resource_metadata: p.resource_metadata.clone(),
        };
        store::save(self.store, &stored).map_err(|e| OAuthError::Store(e.to_string()))
    }
}

/// An unauthenticated request to the upstream, for its challenge (`None`
/// when it answers anything but a 401/403 with a `Bearer` challenge).
async fn probe(fetch: &Fetch, url: &str) -> Option<Challenge> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let (status, values) = fetch.post_probe(url, &body).await.ok()?;
    if status != 401 && status != 403 {
        return None;
    }
    Challenge::parse(values.iter().map(String::as_str))
}

/// Dynamic client registration (RFC 7591 §3.1) of a native public client
/// with this redirect URI; the server's answer decides its authentication.
async fn register(fetch: &Fetch, endpoint: &str, redirect_uri: &str) -> Result<Client, OAuthError> {
    let doc = json!({
        "client_name": "mcp-edge",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "native",
    });
    let a = fetch.post_json(endpoint, &doc).await?;
    if !(200..300).contains(&a.status) {
        return Err(OAuthError::Refused(format!(
            "client registration answered HTTP {}",
            a.status
        )));
    }
    let s = |k: &str| a.body.get(k).and_then(Value::as_str).map(str::to_string);
    let id = s("client_id")
        .ok_or_else(|| OAuthError::BadAnswer("registration without client_id".into()))?;
    let secret = s("client_secret");
    let method = s("token_endpoint_auth_method");
    let credentials = match (&secret, method.as_deref()) {
        (Some(x), Some("client_secret_post")) => Credentials::Post(Secret::new(x.clone())),
        (Some(_), Some("none")) | (None, _) => Credentials::Public,
        (Some(x), _) => Credentials::Basic(Secret::new(x.clone())),
    };
    Ok(Client {
        id,
        credentials,
        registered: Some((secret, method)),
    })
}

/// The query of the redirect: from the listener (the browser, or the
/// operator's tunnel) or a URL pasted on stdin, whichever comes first.
async fn wait_for_redirect(listener: &tokio::net::TcpListener) -> Result<String, OAuthError> {
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut stdin_open = true;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((mut sock, _)) = accepted else { continue };
                if let Some(q) = read_callback(&mut sock).await {
                    return Ok(q);
                }
            }
            line = stdin.next_line(), if stdin_open => match line {
                Ok(Some(l)) => {
                    if let Some((_, q)) = l.trim().split_once('?') {
                        return Ok(q.to_string());
                    }
                }
                _ => stdin_open = false,
            },
        }
    }
}

/// Reads one request head (at most 8 KiB); answers it; the query of a
/// `GET /callback?…`.
async fn read_callback(sock: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = vec![0u8; 8192];
    let mut n = 0;
    while n < buf.len() && !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
        let r = tokio::time::timeout(std::time::Duration::from_secs(10), sock.read(&mut buf[n..]))
            .await
            .ok()?
            .ok()?;
        if r == 0 {
            break;
        }
        n += r;
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let target = head
        .lines()
        .next()?
        .strip_prefix("GET ")?
        .split(' ')
        .next()?
        .to_string();
    let query = target.strip_prefix("/callback?").map(str::to_string);
    let (status, text) = match &query {
        Some(_) => (
            "200 OK",
            "mcp-edge: login received; you can close this window.",
        ),
        None => ("404 Not Found", "mcp-edge: not the login callback."),
    };
    let resp = format!("HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}", text.len());
    let _ = sock.write_all(resp.as_bytes()).await;
    query
}

/// The code of a redirect, after checking `state` and `iss` (RFC 9207
/// §2.4: compared exactly; required when the server advertises it).
fn check_redirect(query: &str, p: &Pending) -> Result<String, OAuthError> {
    let get = |k: &str| {
        query.split('&').find_map(|kv| {
            let (a, b) = kv.split_once('=').unwrap_or((kv, ""));
            (pct_decode(a) == k).then(|| pct_decode(b))
        })
    };
    if let Some(e) = get("error") {
        let d = get("error_description").unwrap_or_default();
        return Err(OAuthError::Login(
            crate::logline::printable(&format!("authorization denied: {e} {d}")).into_owned(),
        ));
    }
    if get("state").as_deref() != Some(p.state.as_str()) {
        return Err(OAuthError::Login(
            "the redirect's state does not match this login".into(),
        ));
    }
    match (get("iss"), &p.meta.issuer) {
        (Some(iss), Some(want)) if &iss != want => {
            return Err(OAuthError::Login(format!(
                "the redirect's iss {iss:?} is not the authorization server {want:?}"
            )))
        }
        (Some(iss), None) => {
            return Err(OAuthError::Login(format!(
                "the redirect carries iss {iss:?} but the issuer is unknown"
            )))
        }
        (None, _) if p.meta.iss_parameter => {
            return Err(OAuthError::Login(
                "the redirect lacks iss, which the authorization server advertises".into(),
            ))
        }
        _ => {}
    }
    get("code")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| OAuthError::Login("the redirect carries no code".into()))
}

/// `n` random bytes as base64url (PKCE verifier, `state`).
fn random_text(n: usize) -> Result<String, OAuthError> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| OAuthError::Setup(format!("no random numbers: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}
