//! The types of the keys that put mcp-edge on a network: TLS on the
//! downstream listener (`server.tls_*`), the `[[client]]` table (who may
//! call, with which credential, which names, how often) and `[audit]`.
//! Also [`Secret`], the masking newtype every secret value is kept in.
//!
//! Validation of these keys is in `net_validate`; the http layer and
//! [`crate::gateway`] only read them.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
