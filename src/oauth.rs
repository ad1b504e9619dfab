//! The OAuth 2.1 client of an HTTP upstream (MCP authorization, 2025-11-25
//! and 2026-07-28 `basic/authorization`; the `oauth-client-credentials`
//! extension, SEP-1046, for machine-to-machine).
//!
//! One [`OAuth`] per upstream, kept across reconnects by the upstream. Its
//! token in hand is read without waiting ([`OAuth::authorization`]); every
//! token request runs under one async lock, so one request is in flight per
//! upstream and every concurrent caller that needs a new token waits for
//! that one (two refreshes racing with a rotating refresh token would
//! lose the grant). A rotated refresh token is written to the token file
//! before it is used again.
//!
//! Renewal is ahead of expiry (once [`limits::OAUTH_REFRESH_AT`] of the
//! lifetime has passed), and after a 401 once. A failed renewal keeps the
//! token in hand while it is valid and backs off (exponentially, with
//! jitter, `Retry-After` as a floor); `invalid_client` parks until the
//! secret or key file changes, `invalid_grant` (and an `authorization_code`
//! upstream without tokens) until `mcp-edge login` writes the token file.
//! While parked or backing off, a caller without a valid token fails at
//! once with the reason.

pub mod challenge;
mod oauth_error;
pub use oauth_error::OAuthError;
pub mod discovery;
pub mod fetch;
pub mod login;
mod renew;
pub mod store;
pub mod token;

pub use challenge::Challenge;
use renew::{Purpose, Renewal};

use crate::config::{Grant, OAuthConfig};
use crate::limits;
use http::HeaderValue;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

/// The token in hand.
#[derive(Clone)]
struct Token {
    /// `Bearer …`, marked sensitive.
    header: HeaderValue,
    /// When to renew ahead of expiry.
    refresh_at: Instant,
    /// When it expires.
    expires_at: Instant,
    /// The same as wall-clock time, for `/status`.
    expires_unix: u64,
}

/// What `/status` shows of the token state.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Shown {
    /// Nothing asked for yet.
    None,
    /// A token is in hand.
    Valid,
    /// A renewal is in flight.
    Refreshing,
    /// Renewals fail; backing off.
    BackingOff,
    /// Parked until credentials change or a login.
    Parked(String),
}

/// The part read by every call and by `/status` (short critical sections).
struct View {
    token: Option<Token>,
    shown: Shown,
    last_outcome: Option<(String, SystemTime)>,
    /// The last renewal failed (callers without a valid token fail at once).
    failing: bool,
    /// When a call next looks whether the token file changed.
    file_check_at: Instant,
    /// The token file's modification time as last seen by a call.
    file_mtime: Option<SystemTime>,
    /// The last failure and when the next token request may go, for the
    /// callers that fail at once meanwhile.
    last_error: Option<(String, Option<Instant>)>,
}

/// The OAuth client of one upstream.
pub struct OAuth {
    name: String,
    cfg: OAuthConfig,
    /// The upstream's URL.
    url: String,
    /// `<state_directory>/oauth/NAME.json`, when there is a state directory.
    store: Option<PathBuf>,
    /// The HTTP client (its set-up error, if it had one, fails every renewal).
    fetch: Result<fetch::Fetch, OAuthError>,
    view: Mutex<View>,
    /// Set by each new connection: the next renewal reads the discovered
    /// metadata again (cached between reconnects, never per call).
    stale_metadata: std::sync::atomic::AtomicBool,
    /// Rung when a token arrives after failures (the supervisor's wait for
    /// its next connect attempt ends).
    ready: tokio::sync::Notify,
    /// Held for the whole of each renewal: one token request in flight.
    renewal: Arc<tokio::sync::Mutex<Renewal>>,
}

impl OAuth {
    /// The client of upstream `name` at `url`, with the token file under
    /// `state_directory` loaded if there is one (a file that cannot be read
    /// is logged and treated as none: the next token request replaces it).
    pub fn new(
        name: &str,
        url: &str,
        cfg: &OAuthConfig,
        state_directory: Option<&std::path::Path>,
        retry_after_cap: Duration,
    ) -> OAuth {
        let store = state_directory.map(|d| store::path(d, name));
        let stored = store.as_deref().and_then(|p| match store::load(p) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(upstream = %name, "{e}; starting without stored tokens");
                None
            }
        });
        let token = stored.as_ref().and_then(token_from_store);
        let file_mtime = store.as_deref().and_then(store::mtime);
        let renewal = Renewal::new(cfg, stored, store.as_deref(), retry_after_cap);
        let shown = if token.is_some() {
            Shown::Valid
        } else {
            Shown::None
        };
        OAuth {
            name: name.to_string(),
            cfg: cfg.clone(),
            url: url.to_string(),
            store,
            fetch: fetch::Fetch::new(),
            view: Mutex::new(View {
                token,
                shown,
                last_outcome: None,
                failing: false,
                file_check_at: Instant::now() + limits::OAUTH_FILE_CHECK_PERIOD,
                file_mtime,
                last_error: None,
            }),
            stale_metadata: false.into(),
            ready: tokio::sync::Notify::new(),
            renewal: Arc::new(tokio::sync::Mutex::new(renewal)),
        }
    }

    /// Ends when a token arrives after failed renewals.
    pub async fn token_ready(&self) {
        self.ready.notified().await
    }

    /// A new connection to the upstream: discovered metadata is read again
    /// at the next renewal.
    pub fn connection_opened(&self) {
        self.stale_metadata
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The token file's path, if tokens are kept.
    pub fn store_path(&self) -> Option<&std::path::Path> {
        self.store.as_deref()
    }

    /// `Authorization` for the next request: the token in hand while valid;
    /// once it is due, the first caller to find it so starts its renewal
    /// and every caller goes on with it meanwhile; `None` before the first
    /// challenge taught where tokens come from; an error when there is no
    /// valid token and none can be had now (at once after a failed renewal:
    /// the retry runs on its own, and the next caller finds its outcome).
    pub async fn authorization(self: &Arc<Self>) -> Result<Option<HeaderValue>, OAuthError> {
        let now = Instant::now();
        let (held, failing) = self.look(now);
        match &held {
            Some(t) if now < t.refresh_at => return Ok(Some(t.header.clone())),
            Some(t) if now < t.expires_at => {
                if let Ok(r) = self.renewal.clone().try_lock_owned() {
                    // Not awaited: it finishes on its own and the next
                    // caller finds the new token.
                    drop(self.renew(r, held.clone(), Purpose::Renew));
                }
                return Ok(Some(t.header.clone()));
            }
            _ => {}
        }
        if failing {
            // Never wait on a failing authorization server: parked or
            // backing off, its own error; else the retry runs on its own.
            let Ok(mut r) = self.renewal.clone().try_lock_owned() else {
                return Err(self.last_failure());
            };
            r.gate(now, self.store.as_deref())?;
            if !r.failing() {
                // New credentials or a login ended it: ask now.
                return self.renew(r, held, Purpose::Renew).await.map(Some);
            }
            drop(self.renew(r, held, Purpose::Renew));
            return Err(self.last_failure());
        }
        let r = self.wait_for_renewal().await?;
        if let Some(t) = self.held().filter(|t| Instant::now() < t.expires_at) {
            return Ok(Some(t.header)); // renewed while we waited
        }
        if !r.knows_where() && self.cfg.grant == Grant::ClientCredentials {
            return Ok(None); // first contact: the 401 says where
        }
        self.renew(r, held, Purpose::Renew).await.map(Some)
    }

    /// The token in hand (none once the token file changed: a login's
    /// tokens are read by the next renewal) and whether renewals fail.
    fn look(&self, now: Instant) -> (Option<Token>, bool) {
        let mut v = self.view();
        if now >= v.file_check_at {
            v.file_check_at = now + limits::OAUTH_FILE_CHECK_PERIOD;
            let changed = self.store.as_deref().is_some_and(|p| {
                store::mtime(p).is_some_and(|m| v.file_mtime.is_none_or(|seen| seen != m))
            });
            if changed {
                v.file_mtime = self.store.as_deref().and_then(store::mtime);
                v.token = None;
                v.failing = false;
            }
        }
        (v.token.clone(), v.failing)
    }

    /// What the last failed renewal said, for a caller that does not wait
    /// for the retry under way.
    fn last_failure(&self) -> OAuthError {
        let v = self.view();
        let (reason, next) = match (&v.shown, &v.last_error) {
            (Shown::Parked(why), _) => (why.clone(), None),
            (_, Some((e, next))) => (e.clone(), *next),
            _ => ("a token request is under way".into(), None),
        };
        OAuthError::BackingOff {
            reason,
            retry_in: next.map_or(Duration::ZERO, |n| {
                n.saturating_duration_since(Instant::now())
            }),
        }
    }

    /// After a 401 to a request sent with `sent`: a new token (unless a
    /// concurrent caller already got one), discovered anew from the
    /// challenge if it names metadata or nothing is known yet.
    pub async fn unauthorized(
        self: &Arc<Self>,
        sent: Option<&HeaderValue>,
        challenge: Option<Challenge>,
    ) -> Result<HeaderValue, OAuthError> {
        let mut r = self.wait_for_renewal().await?;
        if let Some(t) = self.renewed_since(sent) {
            return Ok(t);
        }
        // The token sent was refused: it is not in hand any more.
        self.view().token = None;
        r.learn(challenge, true);
        self.renew(r, None, Purpose::Renew).await
    }

    /// After a 403 with `insufficient_scope`: a token with the union of the
    /// scopes configured, granted and asked for, at most
    /// [`limits::OAUTH_STEP_UPS`] times between ordinary token requests.
    /// The token in hand stays in hand; a refused scope fails this call
    /// only. An `authorization_code` upstream needs a person for it (a
    /// refresh may not widen scope): [`OAuthError::MoreScope`].
    pub async fn insufficient_scope(
        self: &Arc<Self>,
        sent: Option<&HeaderValue>,
        challenge: Challenge,
    ) -> Result<HeaderValue, OAuthError> {
        let mut r = self.wait_for_renewal().await?;
        if let Some(t) = self.renewed_since(sent) {
            return Ok(t);
        }
        // A login since (with the scope, perhaps): its token first.
        let sent_token = self.held();
        if let Some(fresh) = r.reload(self.store.as_deref(), sent)? {
            return self.settle(&mut r, Ok(fresh), sent_token.as_ref(), Purpose::Renew);
        }
        let wanted = r.step_up(&self.cfg, challenge.scope.as_deref().unwrap_or_default())?;
        if self.cfg.grant == Grant::AuthorizationCode {
            return Err(r.want_login(wanted, self.store.as_deref()).await);
        }
        let held = self.held();
        self.renew(r, held, Purpose::StepUp).await
    }

    /// The token in hand if it is valid and not the one `sent`.
    fn renewed_since(&self, sent: Option<&HeaderValue>) -> Option<HeaderValue> {
        let t = self.held()?;
        (Some(&t.header) != sent && Instant::now() < t.expires_at).then_some(t.header)
    }

    /// What `/status` shows: grant, token state, valid until, last
    /// token-endpoint outcome. Never a token.
    pub fn status(&self) -> Value {
        let v = self.view();
        let expired = v
            .token
            .as_ref()
            .is_none_or(|t| Instant::now() >= t.expires_at);
        let state = match &v.shown {
            Shown::None => "none".to_string(),
            Shown::Valid if expired => "expired".to_string(),
            Shown::Valid => "valid".to_string(),
            Shown::Refreshing => "refreshing".to_string(),
            Shown::BackingOff => "backing_off".to_string(),
            Shown::Parked(why) => format!("parked: {why}"),
        };
        let mut s = json!({"grant": self.cfg.grant.as_str(), "token": state});
        if let Some(t) = &v.token {
            s["valid_until_unix"] = t.expires_unix.into();
        }
        if let Some((o, at)) = &v.last_outcome {
            s["last_token_request"] = json!({"outcome": o, "at_unix": unix(*at)});
        }
        s
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn held(&self) -> Option<Token> {
        self.view().token.clone()
    }

    /// The renewal lock, waited for at most [`limits::OAUTH_RENEWAL_TIMEOUT`].
    async fn wait_for_renewal(&self) -> Result<OwnedMutexGuard<Renewal>, OAuthError> {
        tokio::time::timeout(
            limits::OAUTH_RENEWAL_TIMEOUT,
            self.renewal.clone().lock_owned(),
        )
        .await
        .map_err(|_| OAuthError::Unreachable("a token request in flight did not finish".into()))
    }

    /// One renewal under the lock `r`, run as a task of its own that ends
    /// with it whether or not anyone still waits for it: a token request
    /// dropped half-way (every caller gone) could lose a rotated refresh
    /// token the server has already replaced. At most one per upstream (it
    /// holds the lock). Callers wait for it at most
    /// [`limits::OAUTH_RENEWAL_TIMEOUT`]; the task goes on without them.
    fn renew(
        self: &Arc<Self>,
        mut r: OwnedMutexGuard<Renewal>,
        held: Option<Token>,
        why: Purpose,
    ) -> impl std::future::Future<Output = Result<HeaderValue, OAuthError>> {
        let me = self.clone();
        // The sanctioned exception: short-lived, bounded, one per upstream.
        #[allow(clippy::disallowed_methods)]
        let task = tokio::spawn(async move { me.renew_locked(&mut r, held.as_ref(), why).await });
        async move {
            match tokio::time::timeout(limits::OAUTH_RENEWAL_TIMEOUT, task).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(e)) => Err(OAuthError::Setup(format!("token renewal: {e}"))),
                Err(_) => Err(OAuthError::Unreachable(format!(
                    "no token within {:?}; the request goes on",
                    limits::OAUTH_RENEWAL_TIMEOUT
                ))),
            }
        }
    }

    /// One renewal under the lock: refused at once while parked or backing
    /// off; otherwise discovery if needed, then the token request, the
    /// result stored, shown and counted.
    async fn renew_locked(
        &self,
        r: &mut Renewal,
        held: Option<&Token>,
        why: Purpose,
    ) -> Result<HeaderValue, OAuthError> {
        r.gate(Instant::now(), self.store.as_deref())?;
        let fetch = self.fetch.as_ref().map_err(Clone::clone)?;
        if self
            .stale_metadata
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            r.forget_discovered();
        }
        self.view().shown = Shown::Refreshing;
        let sent = held.map(|t| &t.header);
        let outcome = r
            .renew(
                fetch,
                (&self.url, &self.cfg),
                self.store.as_deref(),
                sent,
                why,
            )
            .await;
        self.settle(r, outcome, held, why)
    }

    /// Records a renewal's outcome: the new token in hand, or the failure
    /// (backoff or parking) with the old token kept while valid.
    fn settle(
        &self,
        r: &mut Renewal,
        outcome: Result<renew::Renewed, OAuthError>,
        held: Option<&Token>,
        why: Purpose,
    ) -> Result<HeaderValue, OAuthError> {
        let label = match &outcome {
            Ok(new) if new.from_file => "token_file",
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        if label != "token_file" {
            metrics::counter!(crate::metrics::OAUTH_REQUESTS, "upstream" => self.name.clone(), "outcome" => label)
                .increment(1);
        }
        let now = Instant::now();
        if let Err(e) = &outcome {
            r.failed(e, now, self.store.as_deref(), why);
        }
        let mut v = self.view();
        v.last_outcome = Some((label.to_string(), SystemTime::now()));
        v.failing = r.failing();
        v.file_mtime = r.stored_mtime(); // its own writes are no login
        match outcome {
            Ok(new) => {
                v.token = Some(token_now(&new.header, new.lifetime, new.expires_unix));
                v.shown = Shown::Valid;
                if v.last_error.take().is_some() {
                    self.ready.notify_waiters();
                }
                Ok(new.header)
            }
            Err(e) => {
                if v.failing {
                    v.last_error = Some((e.to_string(), r.next_try()));
                }
                v.shown = match r.parked_why() {
                    Some(why) => Shown::Parked(why),
                    None if v.failing => Shown::BackingOff,
                    None => Shown::Valid,
                };
                if let Some(t) = held.filter(|t| now < t.expires_at) {
                    tracing::warn!(upstream = %self.name, "token renewal failed, the token in hand is used while valid: {e}");
                    if v.token.is_none() {
                        v.token = Some(t.clone());
                    }
                }
                Err(e)
            }
        }
    }
}

/// A token in hand from an answer's lifetime, starting now: renewed at
/// three quarters of it, taken as expired a little early (a tenth, at
/// most [`limits::OAUTH_EXPIRY_MARGIN_MAX`]); `expires_unix` is the expiry
/// the token file keeps (computed once, when the answer came).
fn token_now(header: &HeaderValue, lifetime: Duration, expires_unix: u64) -> Token {
    let now = Instant::now();
    let margin = lifetime
        .mul_f64(limits::OAUTH_EXPIRY_MARGIN)
        .min(limits::OAUTH_EXPIRY_MARGIN_MAX);
    Token {
        header: header.clone(),
        refresh_at: now + lifetime.mul_f64(limits::OAUTH_REFRESH_AT),
        expires_at: now + lifetime - margin,
        expires_unix,
    }
}

/// The stored access token as a token in hand, if it is still valid.
fn token_from_store(s: &store::Stored) -> Option<Token> {
    let at = s.access_token.as_deref()?;
    let mut header = HeaderValue::from_str(&format!("Bearer {at}")).ok()?;
    header.set_sensitive(true);
    let now = unix(SystemTime::now());
    let expires = s
        .expires_at
        .unwrap_or(now + limits::OAUTH_DEFAULT_LIFETIME.as_secs());
    let left = expires.checked_sub(now).filter(|l| *l > 0)?;
    let issued = s.issued_at.unwrap_or(now).min(now);
    let lifetime = expires.saturating_sub(issued).max(left);
    let refresh_in = (lifetime as f64 * limits::OAUTH_REFRESH_AT) as u64;
    let margin = Duration::from_secs(lifetime)
        .mul_f64(limits::OAUTH_EXPIRY_MARGIN)
        .min(limits::OAUTH_EXPIRY_MARGIN_MAX);
    let left = Duration::from_secs(left)
        .checked_sub(margin)
        .filter(|l| !l.is_zero())?;
    let since = now - issued;
    let inst = Instant::now();
    Some(Token {
        header,
        refresh_at: inst + Duration::from_secs(refresh_in.saturating_sub(since)),
        expires_at: inst + left,
        expires_unix: expires,
    })
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod oauth_tests;
