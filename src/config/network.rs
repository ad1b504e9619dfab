//! The types of the keys that put mcp-edge on a network: TLS on the
//! downstream listener (`server.tls_*`), the `[[client]]` table (who may
//! call, with which credential, which names, how often) and `[audit]`.
//! Also [`Secret`], the masking newtype every secret value is kept in, and
//! [`token_sha256`], the one digest of a client token (loader and
//! `mcp-edge token new`).
//!
//! Validation of these keys is in `tls` (the PEM files), `clients` (one
//! `[[client]]`) and `net_validate` (the rules across them, `[audit]`); the
//! http layer and [`crate::gateway`] only read them.
//!
//! # TOML shape
//!
//! ```toml
//! [server]
//! listen = "0.0.0.0:8737"
//! tls_cert = "/etc/mcp-edge/tls/cert.pem"         # PEM chain, leaf first; with tls_key: HTTPS on listen
//! tls_key = "/etc/mcp-edge/tls/key.pem"           # PEM private key (PKCS#8, PKCS#1 or SEC1)
//! tls_client_ca = "/etc/mcp-edge/tls/clients.pem" # optional, needs tls_cert: mTLS, a client certificate is required
//! allow_unauthenticated = false                   # true: a non-loopback listen without any [[client]]
//! admin_listen = "127.0.0.1:9737"                 # must be a loopback address (the admin API has no authentication)
//! instance_id = "e1"                              # 1..=16 of [a-z0-9-]; default: machine id + listen port (config::fleet)
//! proxy_protocol = false                          # true: connections from trusted_proxies begin with a PROXY v1/v2 header
//! trusted_proxies = ["10.0.0.5/32"]               # balancers whose PROXY header / X-Forwarded-For names the client; <= 64
//! state_key_file = "/etc/mcp-edge/state.key"      # 32..=1024 bytes, the same file on every box: signs requestState
//! drain_grace = "5s"                              # 0s..=5m (default 5s): after SIGTERM, /readyz 503 while still serving
//!
//! [[client]]                                      # 0..=limits::MAX_CLIENTS of these
//! name = "build-agent"                            # required, 1..=32 of [A-Za-z0-9_-], unique
//! token_file = "$CREDENTIALS_DIRECTORY/build-agent"  # exactly one of token_file,
//! # token_sha256 = "<64 hex digits>"              #   token_sha256,
//! # cert_subject = "CN=build-agent, O=Site"       #   cert_subject (needs server.tls_client_ca)
//! allow = ["files__read_*", "edge__*"]            # globs over exposed tool and prompt names; absent: everything
//! deny = ["files__write_*"]                       # globs; a name matching allow and deny is denied
//! rate = "20/s"                                   # "N/s" | "N/m" | "N/h", N 1..=limits::MAX_CLIENT_RATE, burst N
//! share = 1                                       # weight in the fair share of every shared table, 1..=limits::MAX_CLIENT_SHARE
//!
//! [audit]                                         # whole section optional: absent = no audit log
//! path = "/var/lib/mcp-edge/audit.jsonl"          # required: an absolute path, or "journal"
//! max_bytes = 10485760                            # limits::MIN_AUDIT_MAX_BYTES..=MAX_AUDIT_MAX_BYTES (4 KiB..=1 GiB)
//! keep = 5                                        # rotated files kept, 1..=limits::MAX_AUDIT_KEEP
//! arguments = false                               # whether call arguments are written
//! ```
//!
//! Rules checked at load (and so at every reload, which keeps the running
//! config when they fail). Under systemd, files given by `LoadCredential=`
//! are copied when the service *starts*: a reload reads those copies
//! again, so a new token or key given that way needs a restart.
//!
//!
//! - `tls_cert` and `tls_key` come together; `tls_client_ca` needs them.
//!   The files are read and checked: at least one certificate, a private key
//!   that matches the leaf, CA certificates that parse. A leading
//!   `$CREDENTIALS_DIRECTORY/` is expanded in the three paths as in
//!   `token_file`.
//! - **The network rule**: when `server.listen` is not a loopback address
//!   (`0.0.0.0` and `::` are not), at least one `[[client]]` is required,
//!   unless `allow_unauthenticated = true`.
//! - `server.admin_listen` must be a loopback address.
//! - `token_file` (with a leading `$CREDENTIALS_DIRECTORY/` expanded from
//!   systemd's `LoadCredential=`) is read at load; its content, trimmed,
//!   must be at least [`crate::limits::MIN_CLIENT_TOKEN_LEN`] printable ASCII
//!   characters. Only its SHA-256 is kept. `mcp-edge token new NAME` prints a
//!   strong token and the `[[client]]` lines with its `token_sha256`.
//! - `cert_subject` is a list of `ATTR=value` pairs split on `,` (write `\,`
//!   for a comma and `\\` for a backslash inside a value); attribute names
//!   are upper-cased (`CN`, `O`, `OU`, `C`, `L`, `ST`, or a dotted OID),
//!   values are kept as written (trimmed). A client certificate matches
//!   when its subject has the same pairs, in any order.
//! - No two clients share a token digest or a `cert_subject`.
//! - Globs in `allow` / `deny`: `*` is any run of characters, `?` one
//!   character, anything else literal. `allow = []` allows nothing.
//! - Whether the audit file is writable is checked when the gateway starts.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::limits::MAX_UPSTREAM_NAME_LEN;

/// SHA-256 of a client token as the client sends it (`Authorization:
/// Bearer <token>`): what `token_sha256` holds and `token_file` is reduced
/// to.
pub fn token_sha256(token: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Whether `name` is a valid `[[client]]` name: 1..=32 of
/// `[A-Za-z0-9_-]` (as an upstream name). The error completes "`name` …".
///
/// # Errors
/// A message saying what a name must be.
pub fn check_client_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_UPSTREAM_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be 1 to {MAX_UPSTREAM_NAME_LEN} characters of [A-Za-z0-9_-]"
        ))
    }
}

/// A secret value (token digest, header value, key material): `Debug`
/// prints `***`, there is no `Display`, and the value is reached only
/// through [`Secret::expose`], so no log line, `check-config` or `/status`
/// output can show it by accident.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        Secret(value)
    }

    /// The value itself: for the one place that must use it.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl<T> From<T> for Secret<T> {
    fn from(value: T) -> Self {
        Secret(value)
    }
}

/// TLS on `server.listen`: `tls_cert` + `tls_key`, and with `tls_client_ca`
/// a client certificate is required (mTLS). The files are read and checked
/// when the config is loaded (a bad PEM is a config error naming the key),
/// so a reload with bad files is rejected and the running listener keeps
/// its certificate.
#[derive(Clone)]
pub struct TlsConfig {
    /// `server.tls_cert`: PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// `server.tls_key`: PEM private key.
    pub key: PathBuf,
    /// `server.tls_client_ca`: PEM CA certificates that sign client
    /// certificates; `None` = no client certificate asked for.
    pub client_ca: Option<PathBuf>,
    /// The rustls server configuration built from the files (ring
    /// provider, ALPN `http/1.1`); the key material lives only in here.
    pub rustls: Arc<rustls::ServerConfig>,
    /// SHA-256 over the three files' contents: two configs are equal when
    /// the paths and the bytes are.
    pub digest: [u8; 32],
    /// The leaf certificate's `notAfter`, RFC 3339 (`/status`).
    pub not_after: String,
    /// The leaf's validity, `notBefore` and `notAfter` as Unix seconds
    /// (a certificate outside it is a `check-config` note and a warning).
    pub validity: (i64, i64),
}

impl PartialEq for TlsConfig {
    fn eq(&self, other: &Self) -> bool {
        self.cert == other.cert
            && self.key == other.key
            && self.client_ca == other.client_ca
            && self.digest == other.digest
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("client_ca", &self.client_ca)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// One `[[client]]`: a downstream caller known by name.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// `name`: 1..=32 of `[A-Za-z0-9_-]`, unique; shown in the audit log.
    pub name: String,
    /// How it proves who it is.
    pub credential: Credential,
    /// `allow`: globs (`*`, `?`) over exposed tool and prompt names;
    /// `None` (key absent) = everything.
    pub allow: Option<Vec<String>>,
    /// `deny`: globs as `allow`; a name matching both is denied.
    pub deny: Vec<String>,
    /// `rate`: a token bucket (`"20/s"`: 20 requests a second, burst 20);
    /// `None` = unlimited.
    pub rate: Option<Rate>,
    /// `share`: the client's weight in the fair share of every shared
    /// table (1..=[`crate::limits::MAX_CLIENT_SHARE`], default 1): its
    /// share of a table is capacity × share / the total of every client's
    /// ([`crate::share`]).
    pub share: u32,
}

/// A `[[client]]`'s credential: exactly one of `token_file`,
/// `token_sha256`, `cert_subject`.
#[derive(Debug, Clone, PartialEq)]
pub enum Credential {
    /// `Authorization: Bearer <token>` whose SHA-256 is this digest
    /// (`token_sha256`, or the digest of `token_file`'s content, trimmed,
    /// read at load and so again at every reload).
    Token {
        /// SHA-256 of the token.
        sha256: Secret<[u8; 32]>,
        /// `token_file`, `$CREDENTIALS_DIRECTORY/` expanded, when the
        /// digest came from a file.
        file: Option<PathBuf>,
    },
    /// A TLS client certificate (needs `server.tls_client_ca`) whose
    /// subject is this distinguished name (`cert_subject = "CN=x, O=y"`):
    /// the same attributes with the same values, in any order.
    CertSubject(Vec<(String, String)>),
}

/// `rate = "N/s"` (or `/m`, `/h`): `count` requests per `per`, burst `count`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Requests per period, and the burst.
    pub count: u32,
    /// The period.
    pub per: Duration,
}

/// `[audit]`: one JSON line per `tools/call`, `prompts/get` and
/// `resources/read`.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditConfig {
    /// `path`: a file, or `"journal"`.
    pub sink: AuditSink,
    /// `max_bytes`: a file is rotated before it would grow past this.
    pub max_bytes: u64,
    /// `keep`: rotated files kept (`path.1` … `path.keep`).
    pub keep: u32,
    /// `arguments`: whether call arguments are written (default `false`).
    pub arguments: bool,
}

/// Where audit lines go.
#[derive(Debug, Clone, PartialEq)]
pub enum AuditSink {
    /// An absolute file path, rotated by size.
    File(PathBuf),
    /// The systemd journal (native protocol).
    Journal,
}
