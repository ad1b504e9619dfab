//! Validated configuration: TOML or `mcpServers` JSON → [`Config`].
//!
//! Loading is two-step. A strict serde layer (`raw`, every struct
//! `deny_unknown_fields`) accepts the text; then validate-and-fill
//! (`validate`, per section `server` and `upstream`) checks every value
//! against the ranges in [`crate::limits`] and fills in defaults. The result is a fully resolved [`Config`]: nothing
//! downstream has to look at an `Option` for a value that has a default.
//!
//! Every error is a [`ConfigError`] whose message names the file and the key
//! path, e.g. `config.toml: upstream[1].url: must be an http:// or https:// URL`.
//!
//! # TOML shape
//!
//! ```toml
//! [server]                                      # whole section optional
//! listen = "127.0.0.1:8737"                     # IP:port, default limits::DEFAULT_LISTEN
//! allowed_origins = ["https://app.example"]     # extra allowed Origin values, scheme://host[:port]
//! allowed_hosts = ["gateway.local"]             # extra allowed Host names (port ignored)
//! max_body_bytes = 1048576                      # 1..=limits::MAX_BODY_BYTES_CEILING
//! session_capacity = 256                        # 1..=limits::SESSION_CAPACITY_CEILING
//! session_idle_timeout = "30m"                  # humantime, MIN..=MAX_SESSION_IDLE_TIMEOUT
//! session_min_idle_before_evict = "1m"          # humantime, 0s..=24h and <= session_idle_timeout
//! keepalive = "15s"                             # humantime, 1s..=60s
//! max_connections = 256                         # 1..=65536
//! max_connections_per_peer = 128                # 1..=max_connections; default max_connections on a loopback listen, else max(1, max_connections / 2)
//! sse_queue_depth = 32                          # 1..=limits::RELAY_QUEUE_DEPTH_CEILING (1024)
//! max_pending_server_requests = 16              # 1..=limits::PENDING_SERVER_REQUESTS_CEILING (1024)
//! tool_name_separator = "__"                    # 1..=4 chars of [A-Za-z0-9_.-]
//! tool_names = "strict"                         # "strict" | "spec"
//! admin_listen = "127.0.0.1:9737"               # admin IP:port (default; port 0 when listen's is 0) or "off"
//! state_directory = "/var/lib/mcp-edge"         # optional absolute path, default $STATE_DIRECTORY
//! admin_socket = "/run/mcp-edge/admin.sock"     # operator socket (0600) or "off"; default $RUNTIME_DIRECTORY/admin.sock, else <state_directory>/admin.sock
//! # instance_id, proxy_protocol, trusted_proxies, state_key_file, drain_grace: several boxes (config::fleet, config::network)
//!
//! [watchdog]                                    # whole section optional
//! required_grace = "5m"                         # humantime, 1s..=24h: how long a required upstream may be down
//!
//! [[upstream]]                                  # 1..=limits::MAX_UPSTREAMS of these
//! name = "fs"                                   # required, 1..=32 of [A-Za-z0-9_-], unique
//! transport = "stdio"                           # "stdio" | "http" | "sse" | "builtin"
//! command = "npx"                               # stdio: required
//! args = ["-y", "x"]                            # stdio
//! env = { KEY = "v" }                           # stdio
//! cwd = "/srv"                                  # stdio (granted read-write under sandbox = "strict")
//! sandbox = "strict"                            # stdio: "strict" (Landlock, no_new_privs) | "off"; env explicit either way
//! paths_rw = ["/srv/data"]                      # stdio, strict: absolute; never overlapping config/state/credentials/audit, /run
//! paths_ro = ["/home/pi/venv"]                  # stdio, strict: read and execute beneath
//! network = true                                # stdio, strict: false closes TCP bind/connect (Landlock ABI 4)
//! url = "https://h/mcp"                         # http: required
//! headers = { "X-Api-Key" = "..." }             # http
//! bearer_token_file = "$CREDENTIALS_DIRECTORY/token"  # http
//! enabled = true
//! required = false                              # true: the systemd watchdog depends on it (see [watchdog])
//! era = "auto"                                  # "auto" | "legacy" | "modern"
//! prefix = "fs"                                 # default = name; "" allowed
//! trust = "auto"                                # "auto" | "pin" (pin needs server.state_directory)
//! call_timeout = "60s"                          # 1s..=1h
//! max_in_flight = 64                            # 1..=limits::MAX_IN_FLIGHT_CEILING
//! max_result_bytes = 8388608                    # 1024..=256 MiB
//! max_catalog_entries = 1024                    # 1..=limits::MAX_CATALOG_ENTRIES_CEILING (16384)
//! max_catalog_bytes = 1048576                   # 1024..=64 MiB
//! health_interval = "30s"                       # humantime, 1s..=1h
//! probe_timeout = "10s"                         # humantime, 100ms..=5m and <= health_interval
//! probe_misses = 3                              # 1..=100
//! backoff_initial = "1s"                        # humantime, 100ms..=1h
//! backoff_factor = 2.0                          # 1.0..=10.0 (an integer such as 2 is fine)
//! backoff_cap = "30m"                           # humantime, 1s..=24h and >= backoff_initial
//! stable_period = "60s"                         # humantime, 0s..=24h
//! retry_after_cap = "1h"                        # humantime, 1s..=24h
//! connect_on_demand = false
//! startup_timeout = "30s"                       # humantime, 1s..=10m
//! ```
//!
//! An http upstream may have an `[upstream.oauth]` table ([`OAuthConfig`]:
//! its keys, defaults and rules are in that type's module).
//!
//! `transport` may be omitted when exactly one of `command` / `url` is given
//! (it is then `stdio` / `http`). A key that does not belong to the upstream's
//! transport (e.g. `url` on a stdio upstream) is an error.
//!
//! Capacity keys, each bounded so memory stays fixed under load:
//!
//! - `server.session_min_idle_before_evict` (default
//!   [`crate::limits::DEFAULT_SESSION_MIN_IDLE_BEFORE_EVICT`], 60 s; when
//!   unset and `session_idle_timeout` is shorter, that timeout): when the
//!   legacy session table is full, a new `initialize` evicts the
//!   least-recently-used session that has been idle at least this long; if
//!   none has, the client gets 503 with `Retry-After`. `"0s"` lets any idle
//!   session be evicted. Longer than `session_idle_timeout` is an error (such
//!   a session would already have expired). With `[[client]]`s it guards a
//!   client's own sessions only: a client under its fair share evicts the
//!   least recently used session with no call in flight of the client
//!   furthest over its share, however recently used ([`crate::share`]).
//! - `server.sse_queue_depth` (default [`crate::limits::RELAY_QUEUE_DEPTH`]):
//!   messages queued for one downstream SSE response (upstream notifications,
//!   relayed requests during a call) before further ones are dropped and
//!   counted.
//! - `server.max_pending_server_requests` (default
//!   [`crate::limits::PENDING_SERVER_REQUESTS`]): per upstream, server→client
//!   requests (sampling, elicitation, roots) relayed to clients and awaiting
//!   their answer.
//! - `upstream.max_catalog_entries` (default
//!   [`crate::limits::MAX_CATALOG_ENTRIES`]): most tools (and separately
//!   prompts, resources, resource templates) kept from this upstream; extra
//!   ones are dropped with a log line and a metric.
//! - `upstream.max_catalog_bytes` (default
//!   [`crate::limits::DEFAULT_MAX_CATALOG_BYTES`], 1 MiB): serialized JSON
//!   bytes of everything kept in this upstream's catalog; entries past the
//!   budget are dropped with a log line and a metric.
//!
//! Supervisor keys (reconnect policy), per upstream:
//!
//! | key | default | range | meaning |
//! |-----|---------|-------|---------|
//! | `health_interval` | [`crate::limits::DEFAULT_HEALTH_INTERVAL`], 30 s | 1 s ..= 1 h | how often a Ready upstream is probed (`ping` / `server/discover`) |
//! | `probe_timeout` | [`crate::limits::DEFAULT_PROBE_TIMEOUT`], 10 s (when unset and `health_interval` is shorter, that interval) | 100 ms ..= 5 min, ≤ `health_interval` | how long one probe may take before it counts as missed |
//! | `probe_misses` | [`crate::limits::DEFAULT_PROBE_MISSES`], 3 | 1 ..= 100 | consecutive missed probes before the upstream is marked down |
//! | `backoff_initial` | [`crate::limits::DEFAULT_BACKOFF_INITIAL`], 1 s | 100 ms ..= 1 h | first reconnect delay |
//! | `backoff_factor` | [`crate::limits::DEFAULT_BACKOFF_FACTOR`], 2.0 | 1.0 ..= 10.0 | each failed attempt multiplies the delay by this (integers accepted) |
//! | `backoff_cap` | [`crate::limits::DEFAULT_BACKOFF_CAP`], 30 min (when unset and `backoff_initial` is longer, that delay) | 1 s ..= 24 h, ≥ `backoff_initial` | longest reconnect delay |
//! | `stable_period` | [`crate::limits::DEFAULT_STABLE_PERIOD`], 60 s | 0 s ..= 24 h | how long an upstream must stay Ready before its backoff resets |
//! | `retry_after_cap` | [`crate::limits::DEFAULT_RETRY_AFTER_CAP`], 1 h | 1 s ..= 24 h | longest `Retry-After` from the upstream that is honoured |
//! | `connect_on_demand` | `false` | — | a call may trigger one early attempt once the backoff window has elapsed |
//! | `startup_timeout` | [`crate::limits::DEFAULT_STARTUP_TIMEOUT`], 30 s | 1 s ..= 10 min | budget for spawn/dial plus the era handshake (separate from `call_timeout`) |
//!
//! `server.admin_listen` (default [`crate::limits::DEFAULT_ADMIN_LISTEN`])
//! is the admin API: `/metrics`, `/status`, `/healthz`, `/readyz`,
//! `POST /upstreams/<name>/reconnect`, `POST /tools/approve`. Its old name `metrics_listen` is still
//! accepted as a deprecated alias (`check-config` prints a note); giving both
//! is an error.
//!
//! TLS, `[[client]]` and `[audit]` (the network keys): see the `network` module.
//!
//! `server.state_directory` (default: the first path of the
//! `STATE_DIRECTORY` environment variable, which systemd's `StateDirectory=`
//! sets; unset = none) must be absolute. The supervisor persists
//! per-upstream backoff state in `<dir>/upstreams.json`, OAuth tokens in
//! `<dir>/oauth/NAME.json` ([`crate::oauth::store`]), and the tool pins
//! ([`crate::pins`]) are kept in `<dir>/tool-pins.json`; without a directory
//! both live in memory only, so `trust = "pin"` on any upstream then is an
//! error naming `upstream[N].trust` and `server.state_directory` (pins that
//! vanish at a restart would re-trust everything).
//!
//! `upstream.trust`: see [`Trust`].
//!
//! # `mcpServers` JSON
//!
//! The file Claude Desktop, Cursor and similar hosts already use:
//! `{"mcpServers": {"<name>": {"command", "args", "env", "cwd"} | {"url", "headers"}}}`
//! with optional `"type"` (`stdio`, `http`, `streamable-http`, `streamableHttp`,
//! or `sse`: the 2024-11-05 HTTP+SSE transport) and `"disabled": true`. VS Code's top-level `"servers"`
//! is accepted when `"mcpServers"` is absent. Host-specific keys are ignored
//! with a warning. The `[server]` section gets its defaults
//! (`state_directory` from `STATE_DIRECTORY`), and so do the upstream keys
//! JSON can't express (`call_timeout`, `max_in_flight`, `max_result_bytes`,
//! `max_catalog_entries`, `max_catalog_bytes`, the supervisor keys, ...).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

// The submodules form layers; each uses only this module's items and
// submodules of lower layers (no import cycles):
//   1. network, defaults, render, trust
//   2. ctx
//   3. raw
//   4. values, fields, tls
//   5. server, upstream, clients
//   6. board, net_validate
//   7. validate
//   8. mcp_servers
mod board;
mod clients;
mod ctx;
mod defaults;
mod fields;
pub mod fleet;
mod mcp_servers;
mod net_validate;
mod network;
mod oauth_section;
pub use network::{check_client_name, token_sha256};
pub use network::{AuditConfig, AuditSink, ClientConfig, Credential, Rate, Secret, TlsConfig};
pub use oauth_section::{
    is_secure_url, read_private_key, read_secret, ClientAuth, Grant, OAuthConfig,
};
mod render;
mod sandbox_section;
mod toml_raw;
pub use render::mask_url;
mod server;
mod socket;
mod tls_files;
mod transport;
pub use transport::{Transport, Wire};
mod trust;
pub use trust::Trust;
mod upstream_section;
mod validate;
mod values;

/// Whole validated config.
#[derive(Debug, Clone)]
pub struct Config {
    /// Downstream face settings (`[server]`).
    pub server: ServerConfig,
    /// Upstreams in file order (`[[upstream]]` / `mcpServers` entries),
    /// including disabled ones.
    pub upstreams: Vec<UpstreamConfig>,
    /// The systemd watchdog's health rules (`[watchdog]`).
    pub watchdog: WatchdogConfig,
    /// Downstream callers known by name (`[[client]]`); empty = no
    /// authentication (allowed on a loopback `listen`, or with
    /// `server.allow_unauthenticated`).
    pub clients: Vec<ClientConfig>,
    /// The audit log (`[audit]`); `None` = none.
    pub audit: Option<AuditConfig>,
    /// The board profile whose defaults were applied (`--board`), if any.
    pub board: Option<Board>,
    /// File the config came from; `None` for [`Config::embedded_default`].
    pub source: Option<PathBuf>,
    /// Notes about how the file is written, one line each without a
    /// leading `#` (deprecated keys: `server.metrics_listen is deprecated;
    /// rename it to server.admin_listen`); rendered as `# note: …` lines.
    pub notes: Vec<String>,
}

/// A validated board profile (`board/<name>/profile.toml`, see the `board`
/// module): capacity defaults sized for one board and its heap budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Board {
    /// Its name (`rpi4-2gb`).
    pub name: String,
    /// One line for humans.
    pub description: String,
    /// Largest worst-case live heap of mcp-edge itself, in bytes, that
    /// `check-config` accepts (see [`crate::budget`]).
    pub heap_budget_bytes: usize,
    /// `[server]` defaults under this profile.
    server: ServerConfig,
    /// Per-upstream defaults under this profile (name and transport are placeholders).
    upstream: UpstreamConfig,
}

/// The `[watchdog]` section: when the systemd watchdog ping is withheld
/// beyond the built-in rules (runtime heartbeat, owner-task progress).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchdogConfig {
    /// How long an upstream marked `required = true` may be away from Ready
    /// (since start, or since it was last Ready) before the ping is withheld
    /// (`required_grace`, default [`crate::limits::DEFAULT_REQUIRED_GRACE`],
    /// 1 s ..= 24 h).
    pub required_grace: Duration,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig {
            required_grace: crate::limits::DEFAULT_REQUIRED_GRACE,
        }
    }
}

/// The `[server]` section, every value resolved (defaults filled in).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Downstream listen address (`listen`).
    pub listen: std::net::SocketAddr,
    /// Extra allowed `Origin` values, exact match, lower-cased
    /// `scheme://host[:port]` (`allowed_origins`).
    pub allowed_origins: Vec<String>,
    /// Extra allowed `Host` header host names, lower-cased, no port
    /// (`allowed_hosts`); IPv6 literals keep their brackets.
    pub allowed_hosts: Vec<String>,
    /// Request body limit in bytes (`max_body_bytes`).
    pub max_body_bytes: usize,
    /// Capacity of the legacy session table (`session_capacity`); also caps
    /// the `subscriptions/listen` pool (with `max_connections` / 2).
    pub session_capacity: usize,
    /// Idle timeout of a legacy session (`session_idle_timeout`); never zero.
    pub session_idle_timeout: Duration,
    /// Least idle time of a legacy session before a new `initialize` may
    /// evict it when the table is full (`session_min_idle_before_evict`);
    /// may be zero, never longer than `session_idle_timeout`.
    pub session_min_idle_before_evict: Duration,
    /// SSE keep-alive comment period (`keepalive`).
    pub keepalive: Duration,
    /// Maximum concurrent downstream connections (`max_connections`).
    pub max_connections: usize,
    /// Of those, at most this many from one IP address (`http::conns`;
    /// `max_connections_per_peer`, default all on loopback, else half).
    pub max_connections_per_peer: usize,
    /// Messages queued for one downstream SSE response before further ones
    /// are dropped and counted (`sse_queue_depth`).
    pub sse_queue_depth: usize,
    /// Per upstream, server→client requests relayed to clients and awaiting
    /// their answer (`max_pending_server_requests`).
    pub max_pending_server_requests: usize,
    /// Separator between upstream prefix and tool name (`tool_name_separator`).
    pub tool_name_separator: String,
    /// Exposed tool name rule (`tool_names`).
    pub tool_names: ToolNameRule,
    /// Admin listener address: `/metrics`, `/healthz`, `/readyz`, `/status`,
    /// `/upstreams/<name>/reconnect`, `/tools/approve` (`admin_listen`, deprecated alias
    /// `metrics_listen`; default [`crate::limits::DEFAULT_ADMIN_LISTEN`],
    /// with port 0 when `listen` has port 0); `None` = turned off with `"off"`.
    pub admin_listen: Option<std::net::SocketAddr>,
    /// Absolute directory where the supervisor persists per-upstream backoff
    /// state (`<dir>/upstreams.json`) (`state_directory`; when unset, the
    /// first path of `$STATE_DIRECTORY`). `None` = state kept in memory only.
    /// [`ServerConfig::default`] does not read the environment: `None`.
    pub state_directory: Option<PathBuf>,
    /// The operator's Unix socket (`admin_socket`): every admin action that
    /// changes state is served only there, to root or the gateway's own
    /// user and never to a descendant of the gateway (`http::operator`).
    /// Default `$RUNTIME_DIRECTORY/admin.sock` (systemd's
    /// `RuntimeDirectory=`), else `<state_directory>/admin.sock`; `None` =
    /// `"off"`, or neither directory is known.
    pub admin_socket: Option<PathBuf>,
    /// HTTPS on `listen` (`tls_cert`, `tls_key`, `tls_client_ca`); `None` =
    /// plain HTTP.
    pub tls: Option<TlsConfig>,
    /// `allow_unauthenticated`: serve a non-loopback `listen` without any
    /// `[[client]]` (logged as a warning at every start, shown in `/status`).
    pub allow_unauthenticated: bool,
    /// The keys for several boxes behind one balancer ([`fleet::Fleet`]).
    pub fleet: fleet::Fleet,
}

/// Rule for exposed tool names (`server.tool_names`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolNameRule {
    /// `"strict"`: the conservative character set most hosts accept.
    Strict,
    /// `"spec"`: whatever the MCP specification allows.
    Spec,
}

/// Which protocol era to speak to an upstream (`upstream.era`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EraPreference {
    /// `"auto"`: probe the upstream; an HTTP one that speaks both eras is
    /// spoken to in each caller's ([`crate::upstream::handshake`]).
    Auto,
    /// `"legacy"`: `initialize` + sessions (2025-03-26 … 2025-11-25).
    Legacy,
    /// `"modern"`: stateless (2026-07-28).
    Modern,
}

/// One upstream, every value resolved (defaults filled in). Equality is what
/// a reload compares: an upstream whose config is unchanged keeps running.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// Unique name, 1..=32 of `[A-Za-z0-9_-]`.
    pub name: String,
    /// Effective prefix of exposed names: `prefix` or, when absent, `name`.
    /// May be empty. Unique among enabled upstreams.
    pub prefix: String,
    /// `enabled` (JSON: `!disabled`), default `true`.
    pub enabled: bool,
    /// `required`, default `false`: the systemd watchdog ping is withheld
    /// while this upstream has been away from Ready longer than
    /// `watchdog.required_grace`. Optional upstreams never withhold it.
    pub required: bool,
    /// `era`, default [`EraPreference::Auto`].
    pub era: EraPreference,
    /// `trust`, default [`Trust::Auto`]: what a changed or new tool
    /// definition gets ([`crate::pins`]).
    pub trust: Trust,
    /// Per-call timeout (`call_timeout`), default [`crate::limits::DEFAULT_CALL_TIMEOUT`].
    pub call_timeout: Duration,
    /// In-flight table capacity (`max_in_flight`).
    pub max_in_flight: usize,
    /// Largest accepted single upstream message in bytes (`max_result_bytes`).
    pub max_result_bytes: usize,
    /// Most entries kept per catalog kind (tools, prompts, resources,
    /// resource templates) from this upstream (`max_catalog_entries`).
    pub max_catalog_entries: usize,
    /// Serialized JSON bytes of everything kept in this upstream's catalog
    /// (`max_catalog_bytes`).
    pub max_catalog_bytes: usize,
    /// How often a Ready upstream is probed with `ping` / `server/discover`
    /// (`health_interval`); never zero.
    pub health_interval: Duration,
    /// How long one probe may take before it counts as missed
    /// (`probe_timeout`); never zero, never longer than `health_interval`.
    pub probe_timeout: Duration,
    /// Consecutive missed probes before the upstream is marked down
    /// (`probe_misses`), 1..=100.
    pub probe_misses: u32,
    /// First reconnect delay (`backoff_initial`); never zero.
    pub backoff_initial: Duration,
    /// Multiplier of the reconnect delay per failed attempt
    /// (`backoff_factor`), 1.0..=10.0.
    pub backoff_factor: f64,
    /// Longest reconnect delay (`backoff_cap`); never shorter than
    /// `backoff_initial`.
    pub backoff_cap: Duration,
    /// How long the upstream must stay Ready before its backoff resets
    /// (`stable_period`); may be zero.
    pub stable_period: Duration,
    /// Longest upstream `Retry-After` honoured (`retry_after_cap`).
    pub retry_after_cap: Duration,
    /// Whether a call may trigger one early connect attempt once the backoff
    /// window has elapsed (`connect_on_demand`), default `false`.
    pub connect_on_demand: bool,
    /// Budget for spawn/dial plus the era handshake (`startup_timeout`),
    /// separate from `call_timeout`.
    pub startup_timeout: Duration,
    /// How to reach it.
    pub transport: Transport,
}

/// Why a config could not be loaded. `Display` always starts with the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read: `"<path>: <io error>"` (the OS error is
    /// in the message, not a `source`, so a chain prints it once).
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        error: std::io::Error,
    },
    /// The text is not well-formed TOML / JSON: `"<path>: line L, column C: <what>"`.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Position and problem.
        message: String,
    },
    /// `--board` / `MCP_EDGE_BOARD` names no shipped profile:
    /// `unknown board "x" (from --board or MCP_EDGE_BOARD); known boards: …`.
    #[error("unknown board {name:?} (from --board or MCP_EDGE_BOARD); known boards: {known}")]
    UnknownBoard {
        /// The name given.
        name: String,
        /// The shipped profiles, comma-separated.
        known: String,
    },
    /// A key is unknown, has the wrong type, or its value is out of range:
    /// `"<path>: <key path>: <what>"`, e.g. `upstream[1].url` or `mcpServers.fs.url`.
    #[error("{}: {key}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key path, e.g. `upstream[1].url`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

impl Config {
    /// Reads and validates the config file at `path`.
    ///
    /// Format: `.json` → `mcpServers` JSON, `.toml` → TOML, anything else is
    /// sniffed (first non-space character `{` → JSON, else TOML).
    /// `$CREDENTIALS_DIRECTORY/` in `bearer_token_file` is expanded from the
    /// process environment, and an unset `server.state_directory` is taken
    /// from `$STATE_DIRECTORY` there.
    ///
    /// # Errors
    /// [`ConfigError::Io`] if the file can't be read (or isn't UTF-8),
    /// [`ConfigError::Parse`] for malformed text, [`ConfigError::Invalid`]
    /// for anything else.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_for(path, None)
    }

    /// [`Config::load`] with `board`'s profile supplying the defaults of the
    /// keys it sets (keys written in the file still win).
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn load_for(path: &Path, board: Option<&Board>) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        let ext = path.extension().and_then(|e| e.to_str());
        let json = match ext.map(str::to_ascii_lowercase).as_deref() {
            Some("json") => true,
            Some("toml") => false,
            _ => strip_bom(&text).trim_start().starts_with('{'),
        };
        let ctx = ctx::Ctx::new(path, &process_env).with_board(board);
        if json {
            mcp_servers::parse(strip_bom(&text), &ctx)
        } else {
            validate::config(&ctx, toml_raw::parse(strip_bom(&text), &ctx)?)
        }
    }

    /// Parses and validates TOML `text`; `origin` is the file name used in
    /// error messages and stored as [`Config::source`].
    ///
    /// # Errors
    /// [`ConfigError::Parse`] or [`ConfigError::Invalid`], see [`Config::load`].
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        Self::from_toml_str_with_env(text, origin, &process_env)
    }

    /// Parses and validates `mcpServers` JSON `text`; `origin` as in
    /// [`Config::from_toml_str`]. Every upstream gets the defaults of the
    /// TOML keys JSON can't express, the server section gets its defaults.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] for malformed JSON, [`ConfigError::Invalid`]
    /// (key paths like `mcpServers.fs.url`) for anything else.
    pub fn from_mcp_servers_json(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        Self::from_mcp_servers_json_with_env(text, origin, &process_env)
    }

    /// The config used when no file is given: `[server]` defaults (listen
    /// [`crate::limits::DEFAULT_LISTEN`], `state_directory` from
    /// `$STATE_DIRECTORY` when that holds an absolute path) and one enabled
    /// `builtin` upstream named and prefixed `edge`.
    pub fn embedded_default() -> Config {
        Self::embedded_default_with_env(&process_env, None)
    }

    /// [`Config::embedded_default`] with `board`'s profile defaults.
    pub fn embedded_default_for(board: Option<&Board>) -> Config {
        Self::embedded_default_with_env(&process_env, board)
    }

    /// [`Config::embedded_default`] with an injectable environment lookup.
    /// A `$STATE_DIRECTORY` that isn't an absolute path is ignored with a
    /// warning (there is no file to report an error against).
    pub(crate) fn embedded_default_with_env(
        env: &dyn Fn(&str) -> Option<OsString>,
        board: Option<&Board>,
    ) -> Config {
        let ctx = ctx::Ctx::new(Path::new("(embedded default)"), env).with_board(board);
        let mut server = ctx.server_defaults();
        server.state_directory = server::state_directory_from_env(env).unwrap_or_else(|e| {
            tracing::warn!("ignoring the STATE_DIRECTORY environment variable: {e}");
            None
        });
        server.admin_socket = socket::admin_socket_default(env, server.state_directory.as_deref())
            .ok()
            .flatten();
        Config {
            server,
            upstreams: vec![ctx.upstream_defaults("edge".to_owned(), Transport::Builtin)],
            watchdog: WatchdogConfig::default(),
            clients: Vec::new(),
            audit: None,
            board: board.cloned(),
            source: None,
            notes: Vec::new(),
        }
    }

    /// The resolved config as TOML that [`Config::from_toml_str`] accepts
    /// again: every key with its resolved value, durations as humantime
    /// strings, unset optional keys as comments. Secrets are masked: header
    /// values and secret-looking env values (names containing TOKEN, SECRET,
    /// KEY, PASS, AUTH, CREDENTIAL) become `"***"`, URL userinfo and query
    /// become `***` (also in `args`), as do args after or inside secret-looking
    /// flags (`--api-key X`, `--token=X`). `bearer_token_file`, `token_file`
    /// and the TLS paths are printed; a client token only as its digest.
    /// Each of [`Config::notes`] becomes a `# note: …` line of the header.
    pub fn render_masked(&self) -> String {
        render::render(self)
    }

    /// [`Config::from_toml_str`] with an injectable environment lookup.
    pub(crate) fn from_toml_str_with_env(
        text: &str,
        origin: &Path,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Config, ConfigError> {
        let ctx = ctx::Ctx::new(origin, env);
        let raw = toml_raw::parse(strip_bom(text), &ctx)?;
        validate::config(&ctx, raw)
    }

    /// [`Config::from_mcp_servers_json`] with an injectable environment lookup.
    pub(crate) fn from_mcp_servers_json_with_env(
        text: &str,
        origin: &Path,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Config, ConfigError> {
        let ctx = ctx::Ctx::new(origin, env);
        mcp_servers::parse(strip_bom(text), &ctx)
    }
}

fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}
