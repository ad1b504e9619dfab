//! The state of token renewal, owned by whoever holds [`super::OAuth`]'s
//! renewal lock: what discovery found, the refresh token, the scopes, the
//! client registered, and the failure schedule (backoff, parking).

mod pick;

use super::discovery::{discover, Metadata};
use super::fetch::Fetch;
use super::store::{self, Stored};
use super::token::{self, Endpoint, GrantRequest};
use super::{Challenge, OAuthError};
use crate::backoff::{jitter_unit, Backoff};
use crate::config::{ClientAuth, Grant, OAuthConfig};
use crate::limits;
use http::HeaderValue;
use std::path::Path;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// A new token: its header and lifetime.
pub(super) struct Renewed {
    pub header: HeaderValue,
    pub lifetime: Duration,
    /// When it expires (Unix seconds), as the token file says: what
    /// `/status` shows, the same before and after a restart.
    pub expires_unix: u64,
    /// Read from the token file (a login), not asked for.
    pub from_file: bool,
}

/// Parked: until the files it depends on change.
struct Park {
    /// The refusal that parked it, answered again while parked.
    error: OAuthError,
    files: Vec<std::path::PathBuf>,
    seen: Vec<Option<SystemTime>>,
}

/// What a renewal is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    /// A token to replace one expired, refused or due.
    Renew,
    /// A token with more scope (a 403 `insufficient_scope`); a refusal of
    /// the scope fails only the call that asked, with no backoff.
    StepUp,
}

/// Renewal state (see the module doc).
pub(super) struct Renewal {
    meta: Option<Metadata>,
    /// The challenge's `resource_metadata`, for the next discovery.
    resource_metadata: Option<String>,
    /// Scopes asked for by challenges (and granted step-ups), their union.
    asked: Vec<String>,
    /// Step-ups since the last ordinary token request.
    step_ups: u32,
    /// The scope a step-up in progress asks for.
    step: Option<String>,
    /// The stored tokens and client belong to another issuer than the one
    /// discovered now: none of them is sent there.
    foreign: bool,
    /// The token file as last read or written.
    stored: Stored,
    stored_mtime: Option<SystemTime>,
    backoff: Backoff,
    failures: u32,
    next_try: Option<(Instant, String)>,
    parked: Option<Park>,
    /// Files whose change ends `invalid_client` parking.
    client_files: Vec<std::path::PathBuf>,
    /// The upstream's `retry_after_cap`: the longest `Retry-After` honoured.
    retry_after_cap: Duration,
}

impl Renewal {
    pub(super) fn new(
        cfg: &OAuthConfig,
        stored: Option<Stored>,
        store: Option<&Path>,
        retry_after_cap: Duration,
    ) -> Renewal {
        // A registered client's credentials live in the token file, which
        // `mcp-edge login` rewrites.
        let client_files = match &cfg.auth {
            ClientAuth::Secret(p) | ClientAuth::PrivateKey(p) => vec![p.clone()],
            ClientAuth::None => store.map(Path::to_path_buf).into_iter().collect(),
        };
        let backoff = Backoff::new(
            limits::OAUTH_BACKOFF_INITIAL,
            limits::OAUTH_BACKOFF_FACTOR,
            limits::OAUTH_BACKOFF_CAP,
        )
        .expect("constant backoff policy is valid");
        let meta = cfg.token_endpoint.as_deref().map(Metadata::explicit);
        Renewal {
            meta,
            resource_metadata: None,
            asked: Vec::new(),
            step_ups: 0,
            step: None,
            foreign: false,
            stored: stored.unwrap_or_default(),
            stored_mtime: store.and_then(store::mtime),
            backoff,
            failures: 0,
            next_try: None,
            parked: None,
            client_files,
            retry_after_cap,
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

    /// Starts a step-up to `scope`: the union of the scopes configured,
    /// granted, asked before and asked now, at most
    /// [`limits::OAUTH_STEP_UPS`] times between ordinary token requests.
    pub(super) fn step_up(&mut self, cfg: &OAuthConfig, scope: &str) -> Result<String, OAuthError> {
        if self.step_ups >= limits::OAUTH_STEP_UPS {
            crate::metrics::refused("oauth_step_up");
            return Err(OAuthError::StepUpLimit(scope.to_string()));
        }
        self.step_ups += 1;
        let granted = self.stored.scope.clone().unwrap_or_default();
        let mut union: Vec<String> = cfg.scopes.clone().unwrap_or_default();
        let more = [granted.as_str(), &self.asked.join(" "), scope].join(" ");
        for s in more.split(' ').filter(|s| !s.is_empty()) {
            if !union.iter().any(|u| u == s) && union.len() < limits::OAUTH_MAX_SCOPES {
                union.push(s.to_string());
            }
        }
        let union = union.join(" ");
        self.step = Some(union.clone());
        Ok(union)
    }

    /// A person must grant `wanted` (an `authorization_code` upstream: a
    /// refresh may not widen scope, RFC 6749 §6): written to the token file
    /// for the next `mcp-edge login`.
    pub(super) async fn want_login(&mut self, wanted: String, store: Option<&Path>) -> OAuthError {
        self.step = None;
        if let Some(p) = store {
            if self.stored.wanted_scope.as_deref() != Some(&wanted) {
                self.stored.wanted_scope = Some(wanted.clone());
                let _ = self.save(p).await;
            }
        }
        OAuthError::MoreScope(wanted)
    }

    fn add_scopes(&mut self, scope: &str) {
        for s in scope.split(' ').filter(|s| !s.is_empty()) {
            if self.asked.iter().any(|a| a == s) {
                continue;
            }
            if s.len() > 256 || self.asked.len() >= limits::OAUTH_MAX_SCOPES {
                crate::metrics::refused("oauth_scopes");
                continue;
            }
            self.asked.push(s.to_string());
        }
    }

    /// True after a failed renewal until one succeeds (callers without a
    /// valid token then fail at once rather than wait for a retry).
    pub(super) fn failing(&self) -> bool {
        self.failures > 0 || self.parked.is_some()
    }

    /// Refuses at once while parked (unless its files changed) or backing
    /// off; a token file written meanwhile (a login) ends either.
    pub(super) fn gate(&mut self, now: Instant, store: Option<&Path>) -> Result<(), OAuthError> {
        if store.is_some_and(|p| store::mtime(p) != self.stored_mtime) {
            self.parked = None;
            self.failures = 0;
            self.next_try = None;
        }
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

    /// The token file's modification time after this renewal's last read
    /// or write (a call that sees another one knows of a login).
    pub(super) fn stored_mtime(&self) -> Option<SystemTime> {
        self.stored_mtime
    }

    /// When the next token request may go, while backing off.
    pub(super) fn next_try(&self) -> Option<Instant> {
        self.next_try.as_ref().map(|(at, _)| *at)
    }

    /// Why it is parked, if it is.
    pub(super) fn parked_why(&self) -> Option<String> {
        self.parked.as_ref().map(|p| p.error.to_string())
    }

    /// Schedules after a failed renewal: parked, or the next try after the
    /// backoff delay (at least the server's `Retry-After`).
    pub(super) fn failed(
        &mut self,
        e: &OAuthError,
        now: Instant,
        store: Option<&Path>,
        why: Purpose,
    ) {
        self.step = None;
        if why == Purpose::StepUp && matches!(e, OAuthError::Refused(_) | OAuthError::BadAnswer(_))
        {
            return; // the scope was refused: that call fails, nothing else
        }
        if e.parks() {
            let files = match e {
                OAuthError::InvalidClient(_) | OAuthError::ClientFile(_) => {
                    self.client_files.clone()
                }
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
            delay = delay.max(ra.min(self.retry_after_cap));
        }
        self.next_try = Some((now + delay, e.to_string()));
    }

    /// One renewal: a newer token file first (a login, another process),
    /// then discovery if needed (bounded by [`limits::OAUTH_RENEWAL_TIMEOUT`]),
    /// then the token request, which once sent is never cut short (its
    /// answer may carry a rotated refresh token); the answer stored before
    /// it is used.
    pub(super) async fn renew(
        &mut self,
        fetch: &Fetch,
        up: (&str, &OAuthConfig),
        store: Option<&Path>,
        held: Option<&HeaderValue>,
        why: Purpose,
    ) -> Result<Renewed, OAuthError> {
        let (url, cfg) = up;
        if why == Purpose::Renew {
            if let Some(fresh) = self.reload(store, held)? {
                return Ok(fresh);
            }
        }
        let meta = tokio::time::timeout(limits::OAUTH_RENEWAL_TIMEOUT, self.metadata(fetch, url))
            .await
            .map_err(|_| {
                OAuthError::Unreachable(format!(
                    "discovery took over {:?}",
                    limits::OAUTH_RENEWAL_TIMEOUT
                ))
            })??;
        if self.foreign && cfg.auth != ClientAuth::None {
            return Err(OAuthError::Discovery(format!(
                "the upstream now names another authorization server ({}, tokens were from {}); \
                 the configured credentials are not sent there: check the config, then remove the token file",
                meta.issuer.as_deref().unwrap_or("?"),
                self.stored.issuer.as_deref().unwrap_or("?")
            )));
        }
        let scope = match why {
            Purpose::StepUp => self.step.clone(),
            Purpose::Renew => self.scope(cfg, &meta),
        };
        let credentials = self.credentials(cfg, &meta)?;
        let client_id = self.client_id(cfg)?;
        let resource = self.resource(cfg, &meta, url);
        let refresh = (!self.foreign && why == Purpose::Renew)
            .then(|| self.stored.refresh_token.clone())
            .flatten();
        let ep = Endpoint {
            url: &meta.token_endpoint,
            issuer: meta.issuer.as_deref(),
            client_id: &client_id,
            credentials: &credentials,
            resource: resource.as_deref(),
        };
        let issued = self
            .ask(
                fetch,
                &ep,
                cfg.grant,
                refresh.as_deref(),
                scope.as_deref(),
                store,
            )
            .await?;
        let renewed = self.keep(issued, &meta, store).await?;
        match self.step.take() {
            Some(granted) => self.add_scopes(&granted),
            None => self.step_ups = 0,
        }
        Ok(renewed)
    }

    /// The token request: with the refresh token if there is one (a
    /// `client_credentials` client whose refresh token is refused mints
    /// anew), else `client_credentials`, else only a login helps.
    async fn ask(
        &mut self,
        fetch: &Fetch,
        ep: &Endpoint<'_>,
        grant: Grant,
        refresh: Option<&str>,
        scope: Option<&str>,
        store: Option<&Path>,
    ) -> Result<token::Issued, OAuthError> {
        let request = match (refresh, grant) {
            (Some(t), _) => GrantRequest::Refresh { token: t, scope },
            (None, Grant::ClientCredentials) => GrantRequest::ClientCredentials { scope },
            (None, Grant::AuthorizationCode) => return Err(self.needs_login(store).await),
        };
        match token::request(fetch, ep, &request).await {
            Err(OAuthError::InvalidGrant(_))
                if refresh.is_some() && grant == Grant::ClientCredentials =>
            {
                self.stored.refresh_token = None;
                token::request(fetch, ep, &GrantRequest::ClientCredentials { scope }).await
            }
            other => other,
        }
    }

    /// No refresh token: only a person's login helps. Scopes the upstream
    /// asked for are written to the token file for `mcp-edge login` to ask for.
    async fn needs_login(&mut self, store: Option<&Path>) -> OAuthError {
        let wanted = (!self.asked.is_empty()).then(|| self.asked.join(" "));
        if let (Some(p), Some(w)) = (store, &wanted) {
            if self.stored.wanted_scope.as_ref() != Some(w) {
                self.stored.wanted_scope = wanted.clone();
                let _ = self.save(p).await;
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
    pub(super) fn reload(
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
        self.foreign = false;
        self.forget_discovered();
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
            expires_unix: t.expires_unix,
            from_file: true,
        }))
    }

    /// The metadata: cached, else discovered (from the last challenge's
    /// `resource_metadata`, else the token file's, else the well-known
    /// locations), else the token file's `token_endpoint` when discovery
    /// fails. Tokens of another issuer than the one found are not sent.
    async fn metadata(&mut self, fetch: &Fetch, url: &str) -> Result<Metadata, OAuthError> {
        if let Some(m) = &self.meta {
            return Ok(m.clone());
        }
        let rm = (self.resource_metadata.clone()).or_else(|| self.stored.resource_metadata.clone());
        let m = match (
            discover(fetch, url, rm.as_deref()).await,
            &self.stored.token_endpoint,
        ) {
            (Ok(m), _) => m,
            (Err(e), Some(te)) => {
                tracing::warn!(
                    "discovery failed ({e}); using the token endpoint of the token file"
                );
                Metadata {
                    issuer: self.stored.issuer.clone(),
                    ..Metadata::explicit(te)
                }
            }
            (Err(e), None) => return Err(e),
        };
        self.foreign = match (&self.stored.issuer, &m.issuer) {
            (Some(old), Some(new)) => !super::discovery::same_issuer(old, new),
            _ => false,
        };
        self.stored.resource_metadata = rm;
        self.meta = Some(m.clone());
        Ok(m)
    }

    /// Stores a token answer (a rotated refresh token before anything uses
    /// it) and resets the failure schedule. The lifetime is bounded
    /// ([`limits::OAUTH_MIN_LIFETIME`] ..= [`limits::OAUTH_MAX_LIFETIME`]):
    /// `expires_in: 0` must not mean a request per call, nor a huge one an
    /// overflow.
    async fn keep(
        &mut self,
        issued: token::Issued,
        meta: &Metadata,
        store: Option<&Path>,
    ) -> Result<Renewed, OAuthError> {
        let lifetime = issued
            .expires_in
            .unwrap_or(limits::OAUTH_DEFAULT_LIFETIME)
            .clamp(limits::OAUTH_MIN_LIFETIME, limits::OAUTH_MAX_LIFETIME);
        let now = super::unix(SystemTime::now());
        let token = issued.access_token.expose().clone();
        let mut header = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| OAuthError::BadAnswer("access_token is not a header value".into()))?;
        header.set_sensitive(true);
        self.stored.access_token = Some(token);
        self.stored.wanted_scope = None;
        self.stored.issued_at = Some(now);
        self.stored.expires_at = Some(now.saturating_add(lifetime.as_secs()));
        if let Some(r) = issued.refresh_token {
            self.stored.refresh_token = Some(r.expose().clone());
        }
        if issued.scope.is_some() {
            self.stored.scope = issued.scope;
        }
        if self.foreign {
            // Tokens of the new server replace the old server's client too.
            (
                self.stored.client_id,
                self.stored.client_secret,
                self.stored.auth_method,
            ) = (None, None, None);
            self.foreign = false;
        }
        self.stored.issuer = meta.issuer.clone();
        self.stored.token_endpoint = Some(meta.token_endpoint.clone());
        if let Some(p) = store {
            self.save(p).await?;
        }
        self.failures = 0;
        self.next_try = None;
        self.parked = None;
        Ok(Renewed {
            header,
            lifetime,
            expires_unix: now.saturating_add(lifetime.as_secs()),
            from_file: false,
        })
    }

    /// Writes the token file on the blocking pool (its fsyncs must not
    /// stall the runtime; the renewal lock keeps writes in order).
    async fn save(&mut self, p: &Path) -> Result<(), OAuthError> {
        let (path, stored) = (p.to_path_buf(), self.stored.clone());
        let written = tokio::task::spawn_blocking(move || {
            store::save(&path, &stored).map(|()| store::mtime(&path))
        })
        .await
        .map_err(|e| OAuthError::Store(format!("writing the token file: {e}")))?
        .map_err(|e| OAuthError::Store(e.to_string()))?;
        self.stored_mtime = written;
        Ok(())
    }
}
