//! The audit log and the network face: clients, tokens, audit fields
//! (re-exported by [`crate::limits`]).

use std::time::Duration;

// ---- audit log ----

/// Records the audit queue holds (`[audit]`): [`crate::audit::Audit::record`]
/// never waits; a record that finds the queue full is dropped and counted
/// in `mcp_edge_audit_dropped_total`.
pub const AUDIT_QUEUE_DEPTH: usize = 1024;
/// Bytes of serialized records the audit queue holds (with `arguments =
/// true` a record can be as large as a request body). A record that would
/// take the queue past this is dropped and counted like a full queue; one
/// record alone is always admitted, so the worst case is this plus one
/// request body (`server.max_body_bytes`).
pub const AUDIT_QUEUE_BYTES: usize = 4 * 1024 * 1024;
/// How long shutdown waits for the audit writer to write what is queued.
pub const AUDIT_CLOSE_GRACE: Duration = Duration::from_secs(5);
/// Audit write errors (disk full, EIO) are logged at most once per this
/// period, with the number not logged; every one is counted in
/// `mcp_edge_audit_write_errors_total`.
pub const AUDIT_ERROR_LOG_PERIOD: Duration = Duration::from_secs(60);
/// Bytes kept of a client-supplied name or URI in an audit or log line (cut: `…[cut N bytes]`).
pub const AUDIT_FIELD_BYTES: usize = 256;
/// Bytes of a call's serialized `arguments` written to an audit line
/// (`[audit] arguments = true`); larger ones are replaced by
/// `"arguments_omitted":true,"arguments_bytes":N` and counted
/// (`mcp_edge_refused_total{limit="audit_arguments"}`): one call costs at
/// most this much of the log, not a request body.
pub const AUDIT_ARGUMENTS_BYTES: usize = 4096;

// ---- network: clients, tokens, audit log ----

/// Most `[[client]]` tables in a config: each is checked per request (a
/// linear scan of names and digests), so the list stays short.
pub const MAX_CLIENTS: usize = 64;
/// Fewest characters of a client token read from `client.token_file`
/// (trimmed): shorter ones are refused as guessable. `mcp-edge token new`
/// prints 48.
pub const MIN_CLIENT_TOKEN_LEN: usize = 16;
/// Fewest distinct characters in a `client.token_file` token (fewer: repeated or a tiny alphabet).
pub const MIN_TOKEN_SYMBOLS: usize = 8;
/// Fewest bits in a `client.token_file` token, estimated as length × log2(its character classes' size).
pub const MIN_TOKEN_BITS: u32 = 128;
/// Random bytes in a token made by `mcp-edge token new` (base64url, 43
/// characters after the `mcpe_` prefix).
pub const CLIENT_TOKEN_BYTES: usize = 32;
/// Largest `N` of `client.rate = "N/s"` (or `/m`, `/h`): requests per
/// period, and the burst.
pub const MAX_CLIENT_RATE: u32 = 1_000_000;
/// Default `client.share`: a client's weight in the fair share of every
/// shared table ([`crate::share`]): all clients equal.
pub const DEFAULT_CLIENT_SHARE: u32 = 1;
/// Largest `client.share`: 1,000 (a client 1,000 times another's weight).
pub const MAX_CLIENT_SHARE: u32 = 1_000;

/// Default `audit.max_bytes`: a file is rotated before it would grow past
/// 10 MiB.
pub const DEFAULT_AUDIT_MAX_BYTES: usize = 10 * 1024 * 1024;
/// Smallest accepted `audit.max_bytes`: 4 KiB.
pub const MIN_AUDIT_MAX_BYTES: usize = 4096;
/// Largest accepted `audit.max_bytes`: 1 GiB (fits a 32-bit `usize`).
pub const MAX_AUDIT_MAX_BYTES: usize = 1 << 30;
/// Default `audit.keep`: rotated files kept (`path.1` … `path.5`).
pub const DEFAULT_AUDIT_KEEP: usize = 5;
/// Largest accepted `audit.keep` (the smallest is 1).
pub const MAX_AUDIT_KEEP: usize = 100;

/// Default loopback port of `mcp-edge login`'s redirect URI
/// (`http://127.0.0.1:8739/callback`; `--port` sets another).
pub const DEFAULT_LOGIN_PORT: u16 = 8739;
/// One OAuth request (a metadata document, a token or registration request)
/// waits at most this long for its whole answer.
pub const OAUTH_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A whole token renewal (discovery included) takes at most this long;
/// every caller waiting for it waits at most this long too.
pub const OAUTH_RENEWAL_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest OAuth answer read (metadata, token, registration): 64 KiB.
pub const OAUTH_BODY_BYTES: usize = 64 * 1024;
/// An access token is renewed once this fraction of its lifetime has
/// passed (three quarters: a 10-second token at 7.5 s, an hour's at 45 min).
pub const OAUTH_REFRESH_AT: f64 = 0.75;
/// An access token is taken as expired this fraction of its lifetime
/// early (at most [`OAUTH_EXPIRY_MARGIN_MAX`]): `expires_in` counts from
/// when the server issued it, and its `exp` is in whole seconds.
pub const OAUTH_EXPIRY_MARGIN: f64 = 0.1;
/// The most an access token is taken as expired early: 30 s.
pub const OAUTH_EXPIRY_MARGIN_MAX: Duration = Duration::from_secs(30);
/// Lifetime assumed for an access token that comes without `expires_in`.
pub const OAUTH_DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);
/// Scope step-ups (403 `insufficient_scope`) asked for between two
/// ordinary token requests; past this the call fails (refusals counted as
/// `limit="oauth_step_up"`).
pub const OAUTH_STEP_UPS: u32 = 2;
/// Scopes kept per upstream (configured, challenged and stepped up, their
/// union): at most 64, each at most 256 bytes.
pub const OAUTH_MAX_SCOPES: usize = 64;
/// First delay after a failed token request; multiplied by
/// [`OAUTH_BACKOFF_FACTOR`] per failure, with jitter, up to
/// [`OAUTH_BACKOFF_CAP`]; a `Retry-After` is the floor (at most the
/// upstream's `retry_after_cap`).
pub const OAUTH_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// Growth of the token-request backoff per failure: 1 s, 1.5 s, 2.25 s, …
/// (after a 20 s outage the next try comes within about 8 s).
pub const OAUTH_BACKOFF_FACTOR: f64 = 1.5;
/// Shortest access-token lifetime believed (`expires_in: 0` or 1 would
/// otherwise mean a token request per call).
pub const OAUTH_MIN_LIFETIME: Duration = Duration::from_secs(2);
/// Longest access-token lifetime believed: a year.
pub const OAUTH_MAX_LIFETIME: Duration = Duration::from_secs(365 * 86_400);
/// Lifetime of a `private_key_jwt` client assertion (RFC 7523 §3 `exp`).
pub const OAUTH_ASSERTION_LIFETIME: Duration = Duration::from_secs(60);
/// How often a call looks whether the token file changed (a login by
/// `mcp-edge login` while the gateway runs): at most once a second.
pub const OAUTH_FILE_CHECK_PERIOD: Duration = Duration::from_secs(1);
/// Longest delay between token requests after failures.
pub const OAUTH_BACKOFF_CAP: Duration = Duration::from_secs(60);
