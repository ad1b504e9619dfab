//! The state of token renewal, owned by whoever holds [`super::OAuth`]'s
//! renewal lock: what discovery found, the refresh token, the scopes, the
//! client registered, and the failure schedule (backoff, parking).

use super::discovery::{canonical_resource, discover, Metadata};
use super::fetch::Fetch;
use super::store::{self, Stored};
use super::token::{self, Credentials, Endpoint, GrantRequest};
use super::{Challenge, OAuthError};
use crate::backoff::{jitter_unit, Backoff};
use crate::config::{ClientAuth, Grant, OAuthConfig, Secret};
use crate::limits;
use http::HeaderValue;
use std::path::Path;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// A new token: its header and lifetime.
pub(super) struct Renewed {
    pub header: HeaderValue,
    pub lifetime: Duration,
}

/// Parked: until the files it depends on change.
struct Park {
    /// The refusal that parked it, answered again while parked.
    error: OAuthError,
    files: Vec<std::path::PathBuf>,
    seen: Vec<Option<SystemTime>>,
}

/// Renewal state (see the module doc).
pub(super) struct Renewal {
    meta: Option<Metadata>,
    /// The challenge's `resource_metadata`, for the next discovery.
    resource_metadata: Option<String>,
    /// Scopes asked for by challenges (and step-ups), their union.
    asked: Vec<String>,
    step_ups: u32,
    /// The token file as last read or written.
    stored: Stored,
    stored_mtime: Option<SystemTime>,
    backoff: Backoff,
    failures: u32,
    next_try: Option<(Instant, String)>,
    parked: Option<Park>,
    /// Files whose change ends `invalid_client` parking.
    client_files: Vec<std::path::PathBuf>,
}

impl Renewal {
    pub(super) fn new(cfg: &OAuthConfig, stored: Option<Stored>, store: Option<&Path>) -> Renewal {
        let client_files = match &cfg.auth {
            ClientAuth::Secret(p) | ClientAuth::PrivateKey(p) => vec![p.clone()],
            ClientAuth::None => Vec::new(),
        };
        let backoff = Backoff::new(
            limits::OAUTH_BACKOFF_INITIAL,
            1.5,
            limits::OAUTH_BACKOFF_CAP,
        )
        .expect("constant backoff policy is valid");
        let meta = cfg.token_endpoint.as_deref().map(Metadata::explicit);
        Renewal {
            meta,
            resource_metadata: None,
            asked: Vec::new(),
            step_ups: 0,
            stored: stored.unwrap_or_default(),
            stored_mtime: store.and_then(store::mtime),
            backoff,
            failures: 0,
            next_try: None,
            parked: None,
            client_files,
        }
    }

    /// True when a token can be asked for without a challenge first
    /// (metadata known or stored, a refresh token in hand).
    pub(super) fn knows_where(&self) -> bool {
        self.meta.is_some() || self.stored.token_endpoint.is_some()
    }

    /// Takes in a challenge: its metadata location (discovery runs again
    /// when `rediscover` or it names one) and its scopes.
    pub(super) fn learn(&mut self, c: Option<Challenge>, rediscover: bool) {
        let Some(c) = c else {
            return;
        };
        if let Some(scope) = &c.scope {
            self.add_scopes(scope);
        }
        if c.resource_metadata.is_some() || rediscover {
            if c.resource_metadata.is_some() {
                self.resource_metadata = c.resource_metadata;
            }
            self.forget_discovered();
        }
    }

    /// Drops discovered metadata (not an explicit `token_endpoint`): read
    /// again at the next renewal.
    pub(super) fn forget_discovered(&mut self) {
        if self.meta.as_ref().is_some_and(|m| m.issuer.is_some()) {
            self.meta = None;
        }
    }

    /// Counts a step-up to `scope`; false past [`limits::OAUTH_STEP_UPS`].
    pub(super) fn step_up(&mut self, scope: &str) -> bool {
        if self.step_ups >= limits::OAUTH_STEP_UPS {
            return false;
        }
        self.step_ups += 1;
        self.add_scopes(scope);
        true
    }

    fn add_scopes(&mut self, scope: &str) {
        for s in scope.split(' ').filter(|s| !s.is_empty()) {
            if self.asked.iter().any(|a| a == s) {
                continue;
            }
            if s.len() > 256 || self.asked.len() >= limits::OAUTH_MAX_SCOPES {
                metrics::counter!(crate::metrics::REFUSED, "limit" => "oauth_scopes").increment(1);
                continue;
            }
            self.asked.push(s.to_string());
        }
    }

    /// Refuses at once while parked (unless its files changed) or backing off.
    pub(super) fn gate(&mut self, now: Instant) -> Result<(), OAuthError> {
        if let Some(p) = &self.parked {
            let seen: Vec<_> = p.files.iter().map(|f| store::mtime(f)).collect();
            if seen == p.seen {
                return Err(p.error.clone());
            }
            self.parked = None;
            self.failures = 0;
            self.next_try = None;
        }
        if let Some((at, why)) = &self.next_try {
            if now < *at {
                return Err(OAuthError::BackingOff {
                    reason: why.clone(),
                    retry_in: *at - now,
                });
            }
        }
        Ok(())
    }

    /// Why it is parked, if it is.
    pub(super) fn parked_why(&self) -> Option<String> {
        self.parked.as_ref().map(|p| p.error.to_string())
    }

    /// Schedules after a failed renewal: parked, or the next try after the
    /// backoff delay (at least the server's `Retry-After`).
    pub(super) fn failed(&mut self, e: &OAuthError, now: Instant, store: Option<&Path>) {
        if e.parks() {
            let files = match e {
                OAuthError::InvalidClient(_) => self.client_files.clone(),
                _ => store.map(Path::to_path_buf).into_iter().collect(),
            };
            let seen = files.iter().map(|f| store::mtime(f)).collect();
            self.parked = Some(Park {
                error: e.clone(),
                files,
                seen,
            });
            return;
        }
        self.failures = self.failures.saturating_add(1);
        let mut delay = self.backoff.delay(self.failures, jitter_unit());
        if let Some(ra) = e.retry_after() {
            delay = delay.max(ra.min(limits::OAUTH_RETRY_AFTER_CAP));
        }
        self.next_try = Some((now + delay, e.to_string()));
    }

    /// One renewal: a newer token file first (a login, another process),
    /// then discovery if needed, then the token request; the answer stored
    /// before it is used.
    pub(super) async fn renew(
        &mut self,
        fetch: &Fetch,
        url: &str,
        cfg: &OAuthConfig,
        store: Option<&Path>,
        held: Option<&HeaderValue>,
    ) -> Result<Renewed, OAuthError> {
        if let Some(fresh) = self.reload(store, held)? {
            return Ok(fresh);
        }
        let meta = self.metadata(fetch, url).await?;
        let grant = self.grant(cfg);
        let scope = self.scope(cfg, &meta, &grant);
        let credentials = self.credentials(cfg, &meta)?;
        let client_id = cfg
            .client_id
            .clone()
            .or_else(|| self.stored.client_id.clone())
            .ok_or_else(|| OAuthError::NeedsLogin("no client id: not logged in yet".into()))?;
        let resource = self.resource(cfg, &meta, url);
        let refresh = self.stored.refresh_token.clone();
        let ep = Endpoint {
            url: &meta.token_endpoint,
            issuer: meta.issuer.as_deref(),
            client_id: &client_id,
            credentials: &credentials,
            resource: resource.as_deref(),
        };
        let request = match (&refresh, grant) {
            (Some(t), _) => GrantRequest::Refresh {
                token: t,
                scope: scope.as_deref(),
            },
            (None, Grant::ClientCredentials) => GrantRequest::ClientCredentials {
                scope: scope.as_deref(),
            },
            (None, Grant::AuthorizationCode) => return Err(self.needs_login(store)),
        };
        let issued = match token::request(fetch, &ep, &request).await {
            // A refresh token refused: a client_credentials client mints anew.
            Err(OAuthError::InvalidGrant(_))
                if refresh.is_some() && grant == Grant::ClientCredentials =>
            {
                self.stored.refresh_token = None;
                let again = GrantRequest::ClientCredentials {
                    scope: scope.as_deref(),
                };
                token::request(fetch, &ep, &again).await?
            }
            other => other?,
        };
        self.keep(issued, &meta, store)
    }

    /// No refresh token: only a person's login helps. Scopes the upstream
    /// asked for are written to the token file for `mcp-edge login` to ask for.
    fn needs_login(&mut self, store: Option<&Path>) -> OAuthError {
        let wanted = (!self.asked.is_empty()).then(|| self.asked.join(" "));
        if let (Some(p), Some(w)) = (store, &wanted) {
            if self.stored.wanted_scope.as_ref() != Some(w) {
                self.stored.wanted_scope = wanted.clone();
                if store::save(p, &self.stored).is_ok() {
                    self.stored_mtime = store::mtime(p);
                }
            }
        }
        OAuthError::NeedsLogin(match wanted {
            Some(w) => format!("the upstream asks for scope {w:?}"),
            None if self.stored.access_token.is_some() => "no refresh token".into(),
            None => "not logged in yet".into(),
        })
    }

    /// The token file, read again when it changed since last read: its
    /// access token is used as it is while valid and not the one refused.
    fn reload(
        &mut self,
        store: Option<&Path>,
        held: Option<&HeaderValue>,
    ) -> Result<Option<Renewed>, OAuthError> {
        let Some(p) = store else {
            return Ok(None);
        };
        let mtime = store::mtime(p);
        if mtime == self.stored_mtime {
            return Ok(None);
        }
        self.stored_mtime = mtime;
        let Some(s) = store::load(p).map_err(|e| OAuthError::Store(e.to_string()))? else {
            return Ok(None);
        };
        self.stored = s;
        self.meta = None;
        let Some(t) = super::token_from_store(&self.stored) else {
            return Ok(None);
        };
        if Some(&t.header) == held {
            return Ok(None);
        }
        let lifetime = t.expires_at.saturating_duration_since(Instant::now());
        Ok(Some(Renewed {
            header: t.header,
            lifetime,
        }))
    }

    async fn metadata(&mut self, fetch: &Fetch, url: &str) -> Result<Metadata, OAuthError> {
        if let Some(m) = &self.meta {
            return Ok(m.clone());
        }
        let m = match (&self.resource_metadata, &self.stored.token_endpoint) {
            (None, Some(te)) => Metadata {
                issuer: self.stored.issuer.clone(),
                ..Metadata::explicit(te)
            },
            _ => discover(fetch, url, self.resource_metadata.as_deref()).await?,
        };
        if self.stored.issuer.is_some() && m.issuer.is_some() && self.stored.issuer != m.issuer {
            // Another authorization server: nothing issued by the old one is sent there.
            self.stored = Stored::default();
        }
        self.meta = Some(m.clone());
        Ok(m)
    }

    fn grant(&self, cfg: &OAuthConfig) -> Grant {
        cfg.grant
    }

    /// `scope`: configured, else what challenges asked (their union), else
    /// the resource's `scopes_supported`, else none. A refresh asks for
    /// scopes only to step up.
    fn scope(&self, cfg: &OAuthConfig, meta: &Metadata, _grant: &Grant) -> Option<String> {
        let mut list: Vec<String> = match (&cfg.scopes, self.asked.is_empty()) {
            (Some(s), _) => s.clone(),
            (None, false) => Vec::new(),
            (None, true) if self.stored.refresh_token.is_some() => return None,
            (None, true) => meta.scopes_supported.clone().unwrap_or_default(),
        };
        for a in &self.asked {
            if !list.contains(a) {
                list.push(a.clone());
            }
        }
        (!list.is_empty()).then(|| list.join(" "))
    }

    /// How the client authenticates: the configured secret (Basic unless
    /// the server allows only `client_secret_post`) or key, else what a
    /// registration gave.
    fn credentials(&self, cfg: &OAuthConfig, meta: &Metadata) -> Result<Credentials, OAuthError> {
        let methods = meta.auth_methods.as_deref().unwrap_or(&[]);
        let allows = |m: &str| methods.iter().any(|x| x == m);
        match &cfg.auth {
            ClientAuth::Secret(p) => {
                let s =
                    Secret::new(crate::config::read_secret(p).map_err(OAuthError::InvalidClient)?);
                Ok(
                    if !allows("client_secret_basic") && allows("client_secret_post") {
                        Credentials::Post(s)
                    } else {
                        Credentials::Basic(s)
                    },
                )
            }
            ClientAuth::PrivateKey(p) => Ok(Credentials::Jwt(p.clone())),
            ClientAuth::None => Ok(
                match (
                    &self.stored.client_secret,
                    self.stored.auth_method.as_deref(),
                ) {
                    (Some(s), Some("client_secret_post")) => {
                        Credentials::Post(Secret::new(s.clone()))
                    }
                    (Some(s), _) => Credentials::Basic(Secret::new(s.clone())),
                    (None, _) => Credentials::Public,
                },
            ),
        }
    }

    /// RFC 8707 `resource`: configured (`""` leaves it out), else the
    /// protected resource's own `resource`, else the upstream's URL.
    fn resource(&self, cfg: &OAuthConfig, meta: &Metadata, url: &str) -> Option<String> {
        match cfg.resource.as_deref() {
            Some("") => None,
            Some(r) => Some(r.to_string()),
            None => Some(
                meta.resource
                    .clone()
                    .unwrap_or_else(|| canonical_resource(url)),
            ),
        }
    }

    /// Stores a token answer (a rotated refresh token before anything uses
    /// it) and resets the failure schedule.
    fn keep(
        &mut self,
        issued: token::Issued,
        meta: &Metadata,
        store: Option<&Path>,
    ) -> Result<Renewed, OAuthError> {
        let lifetime = issued.expires_in.unwrap_or(limits::OAUTH_DEFAULT_LIFETIME);
        let now = super::unix(SystemTime::now());
        let token = issued.access_token.expose().clone();
        self.stored.access_token = Some(token.clone());
        self.stored.wanted_scope = None;
        self.stored.issued_at = Some(now);
        self.stored.expires_at = Some(now + lifetime.as_secs());
        if let Some(r) = issued.refresh_token {
            self.stored.refresh_token = Some(r.expose().clone());
        }
        if issued.scope.is_some() {
            self.stored.scope = issued.scope;
        }
        self.stored.issuer = meta.issuer.clone();
        self.stored.token_endpoint = Some(meta.token_endpoint.clone());
        if let Some(p) = store {
            store::save(p, &self.stored).map_err(|e| OAuthError::Store(e.to_string()))?;
            self.stored_mtime = store::mtime(p);
        }
        self.failures = 0;
        self.next_try = None;
        self.parked = None;
        let mut header = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| OAuthError::BadAnswer("access_token is not a header value".into()))?;
        header.set_sensitive(true);
        Ok(Renewed { header, lifetime })
    }
}
