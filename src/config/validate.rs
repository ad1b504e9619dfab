//! Validate-and-fill: raw values → typed [`Config`], defaults from
//! [`crate::limits`]. Cross-upstream checks and the shared helpers live here;
//! `[server]` is in `server`, per-field upstream checks in `fields`.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use super::board::Board;
use super::raw::{RawConfig, RawDuration, RawFloat, RawInt, RawWatchdog};
use super::server;
pub(super) use super::upstream::upstream;
use super::{
    Config, ConfigError, Era, ServerConfig, ToolNameRule, Transport, UpstreamConfig, WatchdogConfig,
};
use crate::limits;

const MIN_REQUIRED_GRACE: Duration = Duration::from_secs(1);
const MAX_REQUIRED_GRACE: Duration = Duration::from_secs(24 * 3600);

/// Where errors point: the file, plus the environment used for expansion.
pub(super) struct Ctx<'a> {
    path: &'a Path,
    env: &'a dyn Fn(&str) -> Option<OsString>,
    board: Option<&'a Board>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(path: &'a Path, env: &'a dyn Fn(&str) -> Option<OsString>) -> Self {
        Ctx {
            path,
            env,
            board: None,
        }
    }

    /// Defaults come from `board`'s profile where it sets them.
    pub(super) fn with_board(mut self, board: Option<&'a Board>) -> Self {
        self.board = board;
        self
    }

    /// The board profile in effect, if any.
    pub(super) fn board(&self) -> Option<&'a Board> {
        self.board
    }

    /// `[server]` defaults: the board profile's, else [`default_server`].
    pub(super) fn server_defaults(&self) -> ServerConfig {
        match self.board {
            Some(b) => b.server.clone(),
            None => default_server(),
        }
    }

    /// An enabled upstream named `name` with every other key at its default
    /// (the board profile's where it sets one).
    pub(super) fn upstream_defaults(&self, name: String, transport: Transport) -> UpstreamConfig {
        match self.board {
            Some(b) => UpstreamConfig {
                prefix: name.clone(),
                name,
                enabled: true,
                required: false,
                transport,
                ..b.upstream.clone()
            },
            None => upstream_with_defaults(name, transport),
        }
    }

    pub(super) fn path(&self) -> &Path {
        self.path
    }

    /// The environment variable `name`, from the injected lookup.
    pub(super) fn env_var(&self, name: &str) -> Option<OsString> {
        (self.env)(name)
    }

    pub(super) fn err(&self, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            key: key.into(),
            message: message.into(),
        }
    }

    pub(super) fn parse_err(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Parse {
            path: self.path.to_path_buf(),
            message: message.into(),
        }
    }
}

type Result<T> = std::result::Result<T, ConfigError>;

/// `s` as one key path segment: bare when it is `[A-Za-z0-9_-]+`, else quoted.
pub(super) fn key_segment(s: &str) -> String {
    if !s.is_empty() && s.chars().all(is_name_char) {
        s.to_owned()
    } else {
        let escaped = s.replace('\\', "\\\\").replace('"', "\\\"");
        format!("\"{escaped}\"")
    }
}

pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// `[server]` with every key at its default.
pub(super) fn default_server() -> ServerConfig {
    ServerConfig {
        listen: limits::DEFAULT_LISTEN
            .parse()
            .expect("limits::DEFAULT_LISTEN is a socket address"),
        allowed_origins: Vec::new(),
        allowed_hosts: Vec::new(),
        max_body_bytes: limits::DEFAULT_MAX_BODY_BYTES,
        session_capacity: limits::DEFAULT_SESSION_CAPACITY,
        session_idle_timeout: limits::DEFAULT_SESSION_IDLE_TIMEOUT,
        session_min_idle_before_evict: limits::DEFAULT_SESSION_MIN_IDLE_BEFORE_EVICT,
        keepalive: limits::DEFAULT_KEEPALIVE,
        max_connections: limits::DEFAULT_MAX_CONNECTIONS,
        sse_queue_depth: limits::RELAY_QUEUE_DEPTH,
        max_pending_server_requests: limits::PENDING_SERVER_REQUESTS,
        tool_name_separator: "__".to_owned(),
        tool_names: ToolNameRule::Strict,
        metrics_listen: Some(
            limits::DEFAULT_METRICS_LISTEN
                .parse()
                .expect("limits::DEFAULT_METRICS_LISTEN is a socket address"),
        ),
        state_directory: None,
    }
}

/// An enabled upstream with prefix = name and every other key at its default.
pub(super) fn upstream_with_defaults(name: String, transport: Transport) -> UpstreamConfig {
    UpstreamConfig {
        prefix: name.clone(),
        name,
        enabled: true,
        required: false,
        era: Era::Auto,
        call_timeout: limits::DEFAULT_CALL_TIMEOUT,
        max_in_flight: limits::DEFAULT_MAX_IN_FLIGHT,
        max_result_bytes: limits::DEFAULT_MAX_RESULT_BYTES,
        max_catalog_entries: limits::MAX_CATALOG_ENTRIES,
        max_catalog_bytes: limits::DEFAULT_MAX_CATALOG_BYTES,
        health_interval: limits::DEFAULT_HEALTH_INTERVAL,
        probe_timeout: limits::DEFAULT_PROBE_TIMEOUT,
        probe_misses: limits::DEFAULT_PROBE_MISSES,
        backoff_initial: limits::DEFAULT_BACKOFF_INITIAL,
        backoff_factor: limits::DEFAULT_BACKOFF_FACTOR,
        backoff_cap: limits::DEFAULT_BACKOFF_CAP,
        stable_period: limits::DEFAULT_STABLE_PERIOD,
        retry_after_cap: limits::DEFAULT_RETRY_AFTER_CAP,
        connect_on_demand: false,
        startup_timeout: limits::DEFAULT_STARTUP_TIMEOUT,
        transport,
    }
}

/// The TOML file: raw → typed.
pub(super) fn config(ctx: &Ctx, raw: RawConfig) -> Result<Config> {
    let server = server::server(ctx, raw.server.unwrap_or_default())?;
    let watchdog = watchdog(ctx, raw.watchdog.unwrap_or_default())?;
    check_count(ctx, "upstream", "[[upstream]] table", raw.upstream.len())?;
    let mut upstreams = Vec::with_capacity(raw.upstream.len());
    for (i, r) in raw.upstream.into_iter().enumerate() {
        let base = format!("upstream[{i}]");
        let up = upstream(ctx, &base, r)?;
        upstreams.push((base, up));
    }
    let mut cfg = finish(ctx, server, upstreams)?;
    cfg.watchdog = watchdog;
    Ok(cfg)
}

/// `[watchdog]`: raw → typed.
fn watchdog(ctx: &Ctx, raw: RawWatchdog) -> Result<WatchdogConfig> {
    Ok(WatchdogConfig {
        required_grace: duration(
            ctx,
            "watchdog.required_grace",
            raw.required_grace.as_ref(),
            (MIN_REQUIRED_GRACE, MAX_REQUIRED_GRACE),
            limits::DEFAULT_REQUIRED_GRACE,
        )?,
    })
}

/// At least one, at most [`limits::MAX_UPSTREAMS`] upstreams under `key`.
pub(super) fn check_count(ctx: &Ctx, key: &str, what: &str, n: usize) -> Result<()> {
    if n == 0 {
        return Err(ctx.err(key, format!("no upstreams: add at least one {what}")));
    }
    if n > limits::MAX_UPSTREAMS {
        return Err(ctx.err(
            key,
            format!(
                "at most {} upstreams are allowed (got {n})",
                limits::MAX_UPSTREAMS
            ),
        ));
    }
    Ok(())
}

/// Cross-upstream checks; `upstreams` pairs each with its key path base
/// (`upstream[1]`, `mcpServers.fs`).
pub(super) fn finish(
    ctx: &Ctx,
    server: ServerConfig,
    upstreams: Vec<(String, UpstreamConfig)>,
) -> Result<Config> {
    for (i, (base, up)) in upstreams.iter().enumerate() {
        for (other_base, other) in &upstreams[..i] {
            if other.name == up.name {
                return Err(ctx.err(
                    format!("{base}.name"),
                    format!("duplicate name {:?}: {other_base} has it too", up.name),
                ));
            }
            if up.enabled && other.enabled && other.prefix == up.prefix {
                let shown = if up.prefix.is_empty() {
                    "\"\" (empty)".to_owned()
                } else {
                    format!("{:?}", up.prefix)
                };
                return Err(ctx.err(
                    format!("{base}.prefix"),
                    format!(
                        "effective prefix {shown} of upstream {:?} is also the prefix of \
                         upstream {:?} ({other_base}); enabled upstreams need distinct prefixes \
                         (prefix defaults to the name)",
                        up.name, other.name
                    ),
                ));
            }
            if matches!(up.transport, Transport::Builtin)
                && matches!(other.transport, Transport::Builtin)
            {
                return Err(ctx.err(
                    format!("{base}.transport"),
                    format!("at most one builtin upstream is allowed; {other_base} is builtin too"),
                ));
            }
        }
    }
    if upstreams.iter().all(|(_, u)| !u.enabled) {
        tracing::warn!(file = %ctx.path().display(), "every upstream is disabled");
    }
    Ok(Config {
        server,
        upstreams: upstreams.into_iter().map(|(_, u)| u).collect(),
        watchdog: WatchdogConfig::default(),
        board: ctx.board().cloned(),
        source: Some(ctx.path().to_path_buf()),
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Stdio,
    Http,
    Builtin,
}

impl Kind {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Kind::Stdio => "stdio",
            Kind::Http => "http",
            Kind::Builtin => "builtin",
        }
    }
}

/// Keys only valid with one transport.
pub(super) const STDIO_KEYS: [&str; 4] = ["command", "args", "env", "cwd"];
pub(super) const HTTP_KEYS: [&str; 3] = ["url", "headers", "bearer_token_file"];

/// Rejects the first present key (`present[i]` ↔ `keys[i]`) of a transport
/// other than `kind`; `selector` is how the format spells the transport key
/// (`transport = ` in TOML, `"type": ` in JSON).
pub(super) fn foreign_keys(
    ctx: &Ctx,
    base: &str,
    selector: &str,
    kind: Kind,
    owner: Kind,
    keys: &[&str],
    present: &[bool],
) -> Result<()> {
    if kind == owner {
        return Ok(());
    }
    match keys.iter().zip(present).find(|(_, p)| **p) {
        Some((key, _)) => Err(ctx.err(
            format!("{base}.{key}"),
            format!(
                "only valid with {selector}{:?} (this upstream is {:?})",
                owner.as_str(),
                kind.as_str()
            ),
        )),
        None => Ok(()),
    }
}

pub(super) fn int(
    ctx: &Ctx,
    key: &str,
    raw: Option<RawInt>,
    (min, max): (usize, usize),
    default: usize,
) -> Result<usize> {
    let Some(RawInt(v)) = raw else {
        return Ok(default);
    };
    match usize::try_from(v) {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ctx.err(key, format!("must be between {min} and {max} (got {v})"))),
    }
}

/// A finite number in `min..=max`.
pub(super) fn float(
    ctx: &Ctx,
    key: &str,
    raw: Option<RawFloat>,
    (min, max): (f64, f64),
    default: f64,
) -> Result<f64> {
    let Some(RawFloat(v)) = raw else {
        return Ok(default);
    };
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(ctx.err(
            key,
            format!("must be between {min:?} and {max:?} (got {v:?})"),
        ))
    }
}

/// A humantime duration in `min..=max`; zero is accepted only when `min` is
/// zero, and "off"-like words never are.
pub(super) fn duration(
    ctx: &Ctx,
    key: &str,
    raw: Option<&RawDuration>,
    (min, max): (Duration, Duration),
    default: Duration,
) -> Result<Duration> {
    let Some(RawDuration(s)) = raw else {
        return Ok(default);
    };
    let range = format!(
        "between {} and {}",
        humantime::format_duration(min),
        humantime::format_duration(max)
    );
    let t = s.trim();
    if ["off", "none", "never", "disabled", "infinite"]
        .iter()
        .any(|w| t.eq_ignore_ascii_case(w))
    {
        return Err(ctx.err(key, format!("can't be turned off; use a duration {range}")));
    }
    let d = humantime::parse_duration(t).map_err(|e| {
        ctx.err(
            key,
            format!("{s:?} is not a duration such as \"30s\" or \"5m\" ({e}); use {range}"),
        )
    })?;
    if d.is_zero() && !min.is_zero() {
        return Err(ctx.err(key, format!("must not be zero; use a duration {range}")));
    }
    if d < min || d > max {
        return Err(ctx.err(key, format!("must be {range} (got {s:?})")));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str, creds: Option<&str>) -> Result<Config> {
        let env = move |k: &str| match k {
            "CREDENTIALS_DIRECTORY" => creds.map(OsString::from),
            "STATE_DIRECTORY" => None,
            other => panic!("unexpected env lookup {other}"),
        };
        Config::from_toml_str_with_env(text, Path::new("t.toml"), &env)
    }

    const HTTP: &str = "[[upstream]]\nname = \"r\"\nurl = \"https://h/mcp\"\n";

    #[test]
    fn credentials_directory_is_expanded() {
        let text = format!("{HTTP}bearer_token_file = \"$CREDENTIALS_DIRECTORY/tok\"\n");
        let cfg = load(&text, Some("/run/credentials/x")).unwrap();
        match &cfg.upstreams[0].transport {
            Transport::Http {
                bearer_token_file, ..
            } => assert_eq!(
                bearer_token_file.as_deref(),
                Some(Path::new("/run/credentials/x/tok"))
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unset_credentials_directory_names_the_key() {
        let text = format!("{HTTP}bearer_token_file = \"$CREDENTIALS_DIRECTORY/tok\"\n");
        let e = load(&text, None).unwrap_err().to_string();
        assert!(
            e.starts_with("t.toml: upstream[0].bearer_token_file: "),
            "{e}"
        );
        assert!(e.contains("CREDENTIALS_DIRECTORY"), "{e}");
    }

    #[test]
    fn plain_bearer_path_needs_no_env() {
        let text = format!("{HTTP}bearer_token_file = \"/etc/tok\"\n");
        let env = |k: &str| -> Option<OsString> {
            assert_ne!(k, "CREDENTIALS_DIRECTORY", "env read");
            None
        };
        Config::from_toml_str_with_env(&text, Path::new("t.toml"), &env).unwrap();
    }

    #[test]
    fn key_segments_quote_when_needed() {
        assert_eq!(key_segment("fs-1_a"), "fs-1_a");
        assert_eq!(key_segment("my server"), "\"my server\"");
        assert_eq!(key_segment(""), "\"\"");
    }
}
