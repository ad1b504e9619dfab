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
//! - **Policy.** `allow`/`deny` globs over exposed tool and prompt names
//!   ([`Policy::allows`]; deny wins). A resource belongs to the upstream
//!   that listed it, and a client sees an upstream's resources when its
//!   policy admits the upstream's namespace (`<prefix><separator>` against
//!   the globs, so `files__*` admits it) or any of the upstream's tools or
//!   prompts ([`crate::router`] applies it).
//! - **Rate.** A token bucket per client (`rate = "20/s"`: 20 a second,
//!   burst 20), in a table fixed when the config is loaded.
//! - **Share.** Each client's weight (`share = 1`) in the fair share of
//!   every table clients share ([`Access::shares`], [`crate::share`]).

use crate::config::{ClientConfig, Config, Credential};
use crate::logline::Bucket;
use crate::share::Shares;
use std::sync::Mutex;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::time::Instant;
use wildmatch::WildMatch;

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
            Principal::Anonymous => &OPEN,
            Principal::Client(i) => self.clients.get(i).map_or(&OPEN, |c| &c.policy),
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

static OPEN: Policy = Policy {
    allow: None,
    deny: Vec::new(),
};

/// A client's `allow`/`deny` globs over exposed names.
pub struct Policy {
    /// `None`: everything.
    allow: Option<Vec<WildMatch>>,
    deny: Vec<WildMatch>,
}

impl Policy {
    /// The policy of `allow` (absent = everything) and `deny`.
    pub fn new(allow: Option<&[String]>, deny: &[String]) -> Policy {
        let globs = |v: &[String]| v.iter().map(|g| WildMatch::new(g)).collect::<Vec<_>>();
        Policy {
            allow: allow.map(globs),
            deny: globs(deny),
        }
    }

    /// True when nothing is withheld (no `allow`, no `deny`): lists pass
    /// unfiltered.
    pub fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }

    /// Whether an exposed tool or prompt name (or an upstream namespace
    /// `<prefix><separator>`) may be used: matched by `allow` (or no
    /// `allow`), and by no `deny`.
    pub fn allows(&self, name: &str) -> bool {
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|a| a.iter().any(|g| g.matches(name)));
        allowed && !self.deny.iter().any(|g| g.matches(name))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Rate, Secret};

    fn client(name: &str, credential: Credential) -> ClientConfig {
        ClientConfig {
            name: name.into(),
            credential,
            allow: None,
            deny: Vec::new(),
            rate: None,
            share: 1,
        }
    }

    fn token(name: &str, t: &str) -> ClientConfig {
        client(
            name,
            Credential::Token {
                sha256: Secret::new(sha256(t.as_bytes())),
                file: None,
            },
        )
    }

    fn access(clients: Vec<ClientConfig>) -> Access {
        let mut c = Config::embedded_default();
        c.clients = clients;
        Access::new(&c, Instant::now())
    }

    #[test]
    fn without_clients_everyone_is_anonymous() {
        let a = access(vec![]);
        assert!(!a.required());
        assert_eq!(a.authenticate(None, None), Ok(Principal::Anonymous));
        assert_eq!(a.name(Principal::Anonymous), "-");
        assert_eq!(a.owner(Principal::Anonymous), 0);
    }

    #[test]
    fn a_token_names_its_client_and_nothing_else_does() {
        let a = access(vec![
            token("a", "tok-a-0123456789"),
            token("b", "tok-b-0123456789"),
        ]);
        let auth = |h: &str| a.authenticate(Some(h.as_bytes()), None);
        assert_eq!(auth("Bearer tok-b-0123456789"), Ok(Principal::Client(1)));
        assert_eq!(auth("bearer  tok-a-0123456789 "), Ok(Principal::Client(0)));
        assert_eq!(auth("Bearer tok-c-0123456789"), Err(AuthError::Unknown));
        assert_eq!(auth("Basic dG9rLWE="), Err(AuthError::Malformed));
        assert_eq!(auth("Bearer"), Err(AuthError::Malformed));
        assert_eq!(a.authenticate(None, None), Err(AuthError::Missing));
        assert_ne!(a.owner(Principal::Client(0)), a.owner(Principal::Client(1)));
        assert_ne!(a.owner(Principal::Client(0)), 0);
    }

    #[test]
    fn a_certificate_subject_matches_as_a_set() {
        let subject = |s: &[(&str, &str)]| {
            s.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        let a = access(vec![
            token("t", "tok-t-0123456789"),
            client(
                "c",
                Credential::CertSubject(subject(&[("CN", "agent"), ("O", "Site")])),
            ),
        ]);
        let presented = subject(&[("O", "Site"), ("cn", "agent")]);
        assert_eq!(
            a.authenticate(None, Some(&presented)),
            Ok(Principal::Client(1))
        );
        let other = subject(&[("CN", "agent")]);
        assert_eq!(
            a.authenticate(None, Some(&other)),
            Err(AuthError::UnknownCertificate),
            "a subset is not the subject"
        );
        // An unmatched certificate still lets a token speak.
        let t = a.authenticate(Some(b"Bearer tok-t-0123456789"), Some(&other));
        assert_eq!(t, Ok(Principal::Client(0)));
    }

    #[test]
    fn deny_wins_and_absent_allow_means_everything() {
        let p = Policy::new(
            Some(&["files__read_*".into(), "edge__*".into()]),
            &["edge__shell".into()],
        );
        assert!(p.allows("files__read_file"));
        assert!(p.allows("edge__status"));
        assert!(!p.allows("edge__shell"));
        assert!(!p.allows("files__write_file"));
        assert!(!p.is_open());
        let everything = Policy::new(None, &[]);
        assert!(everything.is_open() && everything.allows("anything"));
        let nothing = Policy::new(Some(&[]), &[]);
        assert!(!nothing.allows("edge__status"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_is_a_bucket_with_a_burst_of_its_size() {
        let mut c = token("r", "tok-r-0123456789");
        c.rate = Some(Rate {
            count: 2,
            per: Duration::from_secs(1),
        });
        let a = access(vec![c, token("free", "tok-f-0123456789")]);
        let now = Instant::now();
        assert!(a.admit(Principal::Client(0), now).is_ok());
        assert!(a.admit(Principal::Client(0), now).is_ok());
        let wait = a.admit(Principal::Client(0), now).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert!(a.admit(Principal::Client(0), now + wait).is_ok());
        for _ in 0..100 {
            assert!(
                a.admit(Principal::Client(1), now).is_ok(),
                "no rate: no limit"
            );
        }
    }
}
