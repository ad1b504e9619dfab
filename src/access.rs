//! Who a downstream caller is, what it may see and call, and how often:
//! the `[[client]]` table of the running config, built once per config
//! (start and every reload) and swapped whole.
//!
//! - **Authentication.** With no `[[client]]` every caller is
//!   [`Principal::Anonymous`] (config loading allows that only on a loopback
//!   `listen` or with `server.allow_unauthenticated`). Otherwise a request
//!   names its client by a verified TLS client certificate whose subject is
//!   a client's `cert_subject`, or by `Authorization: Bearer <token>` whose
//!   SHA-256 is a client's digest. Digests are compared in constant time,
//!   against every client, with no early exit. The token itself is never
//!   kept, logged or forwarded (`../shared/spec/2025-11-25/basic/authorization.mdx`
//!   §Token Passthrough: the gateway's upstream requests carry only their
//!   own credentials).
//! - **Policy.** Each client's `allow`/`deny` globs, built here into the
//!   router's [`Policy`] (what a client sees and may call is the router
//!   view's business: [`crate::router::Policy`]).
//! - **Rate.** A token bucket per client (`rate = "20/s"`: 20 a second,
//!   burst 20), in a table fixed when the config is loaded.
//! - **Origin.** Where a request on the downstream face may come from
//!   ([`OriginPolicy`]): `Host`, target authority and `Origin`
//!   (DNS-rebinding protection,
//!   `../shared/spec/2026-07-28/transports-streamable-http.mdx` §Security &
//!   Endpoint; `../shared/spec/2025-11-25/transports.mdx` §Security
//!   Warning). Allowed: loopback hosts (`localhost`, `127.0.0.0/8`,
//!   `[::1]`) on any port, the listen address's own host, and
//!   `server.allowed_hosts` / `server.allowed_origins`. Strict heads: two
//!   `Authorization` or two `Host` headers are a 400 (RFC 9110 §5.3, RFC
//!   9112 §3.2); an absolute-form target's authority (RFC 9112 §3.2.2)
//!   passes the `Host` check too and must name the same authority as `Host`.
//! - **Share.** Each client's weight (`share = 1`) in the fair share of
//!   every table clients share ([`Access::shares`], [`crate::share`]).

use crate::config::{ClientConfig, Config, Credential};
use crate::limits::AUDIT_FIELD_BYTES;
use crate::logline::{capped, Bucket};
use crate::router::Policy;
use crate::share::Shares;
use http::HeaderMap;
use std::borrow::Cow;
use std::sync::Mutex;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::time::Instant;

/// The `[[client]]` table of one config generation.
pub struct Access {
    clients: Vec<Client>,
    /// Each client's weight in the shared tables, by owner mark.
    shares: Shares,
}

struct Client {
    name: String,
    /// [`Access::owner`] of this client, computed once.
    owner: u64,
    token: Option<[u8; 32]>,
    /// `cert_subject`, attribute names upper-cased, sorted.
    subject: Option<Vec<(String, String)>>,
    policy: Policy,
    bucket: Option<Mutex<Bucket>>,
    /// `share`: its weight in the shared tables.
    share: u32,
}

/// Who sent a request, within one [`Access`] generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    /// No `[[client]]` is configured: nobody is asked who they are.
    Anonymous,
    /// The `[[client]]` at this index of the table.
    Client(usize),
}

/// Why a request was not authenticated (the 401's reason; never echoes
/// what was presented).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` header and no matching client certificate.
    #[error("no credentials: send Authorization: Bearer <token> (or a client certificate)")]
    Missing,
    /// An `Authorization` header that is not `Bearer <token>`.
    #[error("Authorization header is not \"Bearer <token>\"")]
    Malformed,
    /// A bearer token no `[[client]]` has.
    #[error("unknown token")]
    Unknown,
    /// A verified client certificate whose subject is no client's
    /// `cert_subject`, and no bearer token.
    #[error("the client certificate's subject is no [[client]]'s cert_subject, and no bearer token was sent")]
    UnknownCertificate,
}

impl Access {
    /// The table of `config`'s `[[client]]`s (empty: everyone anonymous);
    /// rate buckets start full at `now`.
    pub fn new(config: &Config, now: Instant) -> Access {
        let clients: Vec<Client> = config.clients.iter().map(|c| Client::new(c, now)).collect();
        let shares = Shares::new(clients.iter().map(|c| (c.owner, c.share)));
        Access { clients, shares }
    }

    /// No `[[client]]`: everyone anonymous.
    pub fn open() -> Access {
        Access {
            clients: Vec::new(),
            shares: Shares::default(),
        }
    }

    /// The clients' shares of every shared table ([`crate::share`]; none
    /// when nobody is asked who they are).
    pub fn shares(&self) -> &Shares {
        &self.shares
    }

    /// True when callers must say who they are.
    pub fn required(&self) -> bool {
        !self.clients.is_empty()
    }

    /// Names of the configured clients, in config order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.clients.iter().map(|c| c.name.as_str())
    }

    /// Who sent a request with `authorization` (the header's value, if
    /// any) over a connection whose verified client certificate has
    /// `cert_subject`. A certificate that matches a client wins over a
    /// token.
    ///
    /// # Errors
    /// [`AuthError`] when clients are configured and neither names one.
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        cert_subject: Option<&[(String, String)]>,
    ) -> Result<Principal, AuthError> {
        if self.clients.is_empty() {
            return Ok(Principal::Anonymous);
        }
        if let Some(subject) = cert_subject {
            let subject = normalized(subject.iter().cloned());
            if let Some(i) =
                (self.clients.iter()).position(|c| c.subject.as_ref() == Some(&subject))
            {
                return Ok(Principal::Client(i));
            }
        }
        let missing = match cert_subject {
            Some(_) => AuthError::UnknownCertificate,
            None => AuthError::Missing,
        };
        let token = bearer(authorization.ok_or(missing)?)?;
        let digest = sha256(token);
        // Every client is compared, whatever matched: the time taken says
        // nothing about which digest was close.
        let mut found = None;
        for (i, c) in self.clients.iter().enumerate() {
            let hit = c
                .token
                .map_or(subtle::Choice::from(0), |d| d.ct_eq(&digest));
            if bool::from(hit) {
                found = Some(i);
            }
        }
        found.map(Principal::Client).ok_or(AuthError::Unknown)
    }

    /// The name shown for `caller` (audit log, logs): the client's, or `-`.
    pub fn name(&self, caller: Principal) -> &str {
        match caller {
            Principal::Anonymous => "-",
            Principal::Client(i) => self.clients.get(i).map_or("-", |c| c.name.as_str()),
        }
    }

    /// What `caller` may see and call.
    pub fn policy(&self, caller: Principal) -> &Policy {
        match caller {
            Principal::Anonymous => Policy::open(),
            Principal::Client(i) => self.clients.get(i).map_or(Policy::open(), |c| &c.policy),
        }
    }

    /// The owner mark a legacy session created by `caller` carries
    /// ([`crate::session::Session::owner`]): 0 for anonymous, else a hash
    /// of the client's name and credential, so that a session stays its
    /// client's across a reload that reorders the table, and is revoked by
    /// one that changes the client's token or certificate subject.
    pub fn owner(&self, caller: Principal) -> u64 {
        match caller {
            Principal::Anonymous => 0,
            Principal::Client(i) => self.clients.get(i).map_or(0, |c| c.owner),
        }
    }

    /// Whether a session or stream with owner mark `owner` still has its
    /// client here (a reload may have removed it; anonymous ones only
    /// while nobody is asked who they are).
    pub fn knows(&self, owner: u64) -> bool {
        match owner {
            0 => !self.required(),
            o => self.clients.iter().any(|c| c.owner == o),
        }
    }

    /// Takes one request from `caller`'s rate at `now`.
    ///
    /// # Errors
    /// How long until the next request is allowed, when over the rate.
    pub fn admit(&self, caller: Principal, now: Instant) -> Result<(), Duration> {
        let Principal::Client(i) = caller else {
            return Ok(());
        };
        match self.clients.get(i).and_then(|c| c.bucket.as_ref()) {
            Some(b) => b.lock().expect("rate bucket").take(now),
            None => Ok(()),
        }
    }
}

impl Client {
    fn new(c: &ClientConfig, now: Instant) -> Client {
        let (token, subject) = match &c.credential {
            Credential::Token { sha256, .. } => (Some(*sha256.expose()), None),
            Credential::CertSubject(pairs) => (None, Some(normalized(pairs.iter().cloned()))),
        };
        // Name and credential: a client whose token or certificate subject
        // changes at a reload loses what the old credential opened.
        let mut mark = c.name.as_bytes().to_vec();
        mark.push(0);
        match &c.credential {
            Credential::Token { sha256, .. } => mark.extend_from_slice(sha256.expose()),
            Credential::CertSubject(pairs) => {
                for (k, v) in normalized(pairs.iter().cloned()) {
                    mark.extend_from_slice(format!("{k}={v}\0").as_bytes());
                }
            }
        }
        let d = sha256(&mark);
        Client {
            owner: u64::from_le_bytes(d[..8].try_into().expect("8 bytes")) | 1,
            name: c.name.clone(),
            token,
            subject,
            policy: Policy::new(c.allow.as_deref(), &c.deny),
            bucket: c.rate.map(|r| Mutex::new(Bucket::new(r.count, r.per, now))),
            share: c.share,
        }
    }
}

/// A distinguished name as a set: attribute names upper-cased, sorted.
fn normalized(pairs: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .map(|(k, v)| (k.trim().to_ascii_uppercase(), v.trim().to_owned()))
        .collect();
    v.sort();
    v
}

/// The token of `Bearer <token>` (scheme case-insensitive, RFC 9110 §11.1).
fn bearer(value: &[u8]) -> Result<&[u8], AuthError> {
    let (scheme, rest) = match value.iter().position(|b| *b == b' ') {
        Some(i) => value.split_at(i),
        None => return Err(AuthError::Malformed),
    };
    let token = rest.trim_ascii();
    if !scheme.eq_ignore_ascii_case(b"bearer") || token.is_empty() {
        return Err(AuthError::Malformed);
    }
    Ok(token)
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    d.as_ref().try_into().expect("SHA-256 is 32 bytes")
}

/// A log line budget (a [`crate::logline::Throttle`] of
/// [`crate::limits::REFUSAL_LOG_BURST`] lines refilled at
/// [`crate::limits::REFUSAL_LOG_PER_SECOND`]): refused requests from a
/// scanner cannot flood the journal.
pub struct Throttle(crate::logline::Throttle);

impl Throttle {
    /// A full budget at `now`.
    pub fn new(now: Instant) -> Throttle {
        Throttle(crate::logline::Throttle::new(
            crate::limits::REFUSAL_LOG_BURST,
            crate::limits::REFUSAL_LOG_PER_SECOND,
            now,
        ))
    }

    /// `Some(n)` when a line may be logged at `now` (`n` lines were skipped
    /// since the last one); `None` when this one is skipped.
    pub fn allow(&self, now: Instant) -> Option<u64> {
        self.0.allow(now)
    }
}

/// Why a request's head is refused before any handler runs.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    /// Two of a header that comes once, or an absolute-form target whose
    /// authority is not `Host`'s: 400, counted under `limit`.
    #[error("{why}")]
    Malformed {
        /// The `mcp_edge_refused_total` label.
        limit: &'static str,
        /// The reason.
        why: String,
    },
    /// A `Host`, target authority or `Origin` not allowed: 403.
    #[error("{0}")]
    Forbidden(String),
}

/// `Err` naming the header when `headers` has two `Authorization` or two
/// `Host` headers (the admin listener's guard uses it too).
pub fn one_each(headers: &HeaderMap) -> Result<(), String> {
    for name in [http::header::AUTHORIZATION, http::header::HOST] {
        if headers.get_all(&name).iter().nth(1).is_some() {
            return Err(format!("more than one {name} header"));
        }
    }
    Ok(())
}

/// The host part of `host[:port]` / `[v6]:port`, lowercased (copied only
/// when it has capitals).
fn host_of(authority: &str) -> Cow<'_, str> {
    let a = authority.trim();
    let host = match a.strip_prefix('[').and_then(|r| r.find(']')) {
        Some(i) => &a[..i + 2],
        None if a.starts_with('[') => a,
        None => match a.rsplit_once(':') {
            Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
            _ => a,
        },
    };
    match host.bytes().any(|b| b.is_ascii_uppercase()) {
        true => Cow::Owned(host.to_ascii_lowercase()),
        false => Cow::Borrowed(host),
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host == "[::1]"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The Origin/Host policy of one listener.
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
}

impl OriginPolicy {
    /// A policy allowing loopback plus `listen`'s host and the allow-lists.
    pub fn new(
        listen: std::net::SocketAddr,
        allowed_hosts: &[String],
        allowed_origins: &[String],
    ) -> Self {
        let mut hosts: Vec<String> = allowed_hosts
            .iter()
            .map(|h| host_of(h).into_owned())
            .collect();
        if !listen.ip().is_unspecified() {
            hosts.push(host_of(&listen.to_string()).into_owned());
        }
        OriginPolicy {
            allowed_hosts: hosts,
            allowed_origins: allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    /// [`OriginPolicy::check`] after the strict-head rules (module docs)
    /// on a request's `headers` and target `uri`.
    pub fn check_head(&self, headers: &HeaderMap, uri: &http::Uri) -> Result<(), HeadError> {
        one_each(headers).map_err(|why| HeadError::Malformed {
            limit: "duplicate_header",
            why,
        })?;
        if let Some(target) = uri.authority().map(|a| a.as_str()) {
            self.allow_host("target authority", target)
                .map_err(HeadError::Forbidden)?;
            let host = headers.get(http::header::HOST).map(|v| v.as_bytes());
            if host.is_some_and(|h| !h.eq_ignore_ascii_case(target.as_bytes())) {
                let why = format!(
                    "the request target's authority {:?} is not the Host header's",
                    capped(target, AUDIT_FIELD_BYTES)
                );
                let limit = "authority";
                return Err(HeadError::Malformed { limit, why });
            }
            if host.is_none() {
                return self.origin(headers).map_err(HeadError::Forbidden);
            }
        }
        self.check(headers).map_err(HeadError::Forbidden)
    }

    /// `Ok(())` when `host` (a `Host` value or a target's authority) is one
    /// this listener answers to; the reason for a 403 otherwise.
    fn allow_host(&self, what: &str, host: &str) -> Result<(), String> {
        let h = host_of(host);
        if !is_loopback(&h) && !self.allowed_hosts.iter().any(|a| *a == h) {
            return Err(format!(
                "{what} {:?} is not allowed (add its name to server.allowed_hosts)",
                capped(host, AUDIT_FIELD_BYTES)
            ));
        }
        Ok(())
    }

    /// `Ok(())` or the reason for a 403.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), String> {
        let host = headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .ok_or("missing or invalid Host header")?;
        self.allow_host("Host", host)?;
        self.origin(headers)
    }

    /// The `Origin` rule alone.
    fn origin(&self, headers: &HeaderMap) -> Result<(), String> {
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let o = origin.to_str().map_err(|_| "invalid Origin header")?;
            let o = &*capped(o, AUDIT_FIELD_BYTES);
            let lower = o.trim_end_matches('/').to_ascii_lowercase();
            if self.allowed_origins.contains(&lower) {
                return Ok(());
            }
            let authority = lower
                .strip_prefix("http://")
                .or_else(|| lower.strip_prefix("https://"))
                .ok_or_else(|| format!("Origin {o:?} is not allowed (server.allowed_origins)"))?;
            if !is_loopback(&host_of(authority)) {
                return Err(format!(
                    "Origin {o:?} is not allowed (server.allowed_origins)"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod access_tests;
