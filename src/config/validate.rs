//! Validate-and-fill: raw values → typed [`Config`], defaults from
//! [`crate::limits`]. Cross-upstream checks and the shared helpers live here;
//! `[server]` is in `server`, per-field upstream checks in `fields`.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use super::board::Board;
use super::fields::{
    bearer_token_file, check_args, check_command, check_cwd, check_env, check_headers, check_name,
    check_url,
};
use super::raw::{RawConfig, RawDuration, RawFloat, RawInt, RawUpstream, RawWatchdog};
use super::server;
use super::{
    Config, ConfigError, Era, ServerConfig, ToolNameRule, Transport, UpstreamConfig, WatchdogConfig,
};
use crate::limits;

// Documented ranges that have no constant in `limits` (yet).
const MIN_CALL_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(3600);
const MIN_RESULT_BYTES: usize = 1024;
const MAX_RESULT_BYTES_CEILING: usize = 256 * 1024 * 1024;
const MIN_HEALTH_INTERVAL: Duration = Duration::from_secs(1);
const MAX_HEALTH_INTERVAL: Duration = Duration::from_secs(3600);
const MIN_PROBE_TIMEOUT: Duration = Duration::from_millis(100);
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
const MAX_PROBE_MISSES: usize = 100;
const MIN_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
const MAX_BACKOFF_INITIAL: Duration = Duration::from_secs(3600);
const MIN_BACKOFF_FACTOR: f64 = 1.0;
const MAX_BACKOFF_FACTOR: f64 = 10.0;
const MIN_BACKOFF_CAP: Duration = Duration::from_secs(1);
const MAX_BACKOFF_CAP: Duration = Duration::from_secs(24 * 3600);
const MAX_STABLE_PERIOD: Duration = Duration::from_secs(24 * 3600);
const MIN_RETRY_AFTER_CAP: Duration = Duration::from_secs(1);
const MAX_RETRY_AFTER_CAP: Duration = Duration::from_secs(24 * 3600);
const MIN_STARTUP_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_STARTUP_TIMEOUT: Duration = Duration::from_secs(10 * 60);
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

pub(super) fn upstream(ctx: &Ctx, base: &str, raw: RawUpstream) -> Result<UpstreamConfig> {
    let k = |f: &str| format!("{base}.{f}");
    let name = raw
        .name
        .ok_or_else(|| ctx.err(k("name"), "missing; every upstream needs a name"))?;
    check_name(ctx, &k("name"), &name)?;
    let kind = match raw.transport.as_deref() {
        Some("stdio") => Kind::Stdio,
        Some("http") => Kind::Http,
        Some("builtin") => Kind::Builtin,
        Some(_) => {
            return Err(ctx.err(k("transport"), "must be \"stdio\", \"http\" or \"builtin\""))
        }
        None => match (raw.command.is_some(), raw.url.is_some()) {
            (true, false) => Kind::Stdio,
            (false, true) => Kind::Http,
            (true, true) => {
                return Err(ctx.err(
                    k("transport"),
                    "missing, and both command and url are given; set transport",
                ))
            }
            (false, false) => {
                return Err(ctx.err(
                    k("transport"),
                    "missing; set transport = \"stdio\", \"http\" or \"builtin\"",
                ))
            }
        },
    };
    let stdio_present = [
        raw.command.is_some(),
        raw.args.is_some(),
        raw.env.is_some(),
        raw.cwd.is_some(),
    ];
    let http_present = [
        raw.url.is_some(),
        raw.headers.is_some(),
        raw.bearer_token_file.is_some(),
    ];
    foreign_keys(
        ctx,
        base,
        "transport = ",
        kind,
        Kind::Stdio,
        &STDIO_KEYS,
        &stdio_present,
    )?;
    foreign_keys(
        ctx,
        base,
        "transport = ",
        kind,
        Kind::Http,
        &HTTP_KEYS,
        &http_present,
    )?;
    let transport = match kind {
        Kind::Stdio => {
            let command = raw.command.ok_or_else(|| {
                ctx.err(
                    k("command"),
                    "missing; a stdio upstream needs the command to run",
                )
            })?;
            Transport::Stdio {
                command: check_command(ctx, &k("command"), command)?,
                args: check_args(ctx, &k("args"), raw.args.unwrap_or_default())?,
                env: check_env(ctx, &k("env"), raw.env.unwrap_or_default())?,
                cwd: raw.cwd.map(|c| check_cwd(ctx, &k("cwd"), c)).transpose()?,
            }
        }
        Kind::Http => {
            let url = raw
                .url
                .ok_or_else(|| ctx.err(k("url"), "missing; an http upstream needs a url"))?;
            let bearer = raw
                .bearer_token_file
                .map(|b| bearer_token_file(ctx, &k("bearer_token_file"), &b))
                .transpose()?;
            Transport::Http {
                url: check_url(ctx, &k("url"), url)?,
                headers: check_headers(
                    ctx,
                    &k("headers"),
                    raw.headers.unwrap_or_default(),
                    bearer.is_some(),
                )?,
                bearer_token_file: bearer,
            }
        }
        Kind::Builtin => Transport::Builtin,
    };
    let mut up = ctx.upstream_defaults(name, transport);
    if let Some(prefix) = raw.prefix {
        if !prefix.is_empty() {
            check_name(ctx, &k("prefix"), &prefix)?;
        }
        up.prefix = prefix;
    }
    up.enabled = raw.enabled.unwrap_or(true);
    up.required = raw.required.unwrap_or(false);
    if up.required && !up.enabled {
        return Err(ctx.err(
            k("required"),
            "a disabled upstream can't be required; enable it or drop required",
        ));
    }
    up.era = match raw.era.as_deref() {
        None | Some("auto") => Era::Auto,
        Some("legacy") => Era::Legacy,
        Some("modern") => Era::Modern,
        Some(_) => {
            return Err(ctx.err(k("era"), "must be \"auto\", \"legacy\" or \"modern\""));
        }
    };
    up.call_timeout = duration(
        ctx,
        &k("call_timeout"),
        raw.call_timeout.as_ref(),
        (MIN_CALL_TIMEOUT, MAX_CALL_TIMEOUT),
        up.call_timeout,
    )?;
    up.max_in_flight = int(
        ctx,
        &k("max_in_flight"),
        raw.max_in_flight,
        (1, limits::MAX_IN_FLIGHT_CEILING),
        up.max_in_flight,
    )?;
    up.max_result_bytes = int(
        ctx,
        &k("max_result_bytes"),
        raw.max_result_bytes,
        (MIN_RESULT_BYTES, MAX_RESULT_BYTES_CEILING),
        up.max_result_bytes,
    )?;
    up.max_catalog_entries = int(
        ctx,
        &k("max_catalog_entries"),
        raw.max_catalog_entries,
        (1, limits::MAX_CATALOG_ENTRIES_CEILING),
        up.max_catalog_entries,
    )?;
    up.max_catalog_bytes = int(
        ctx,
        &k("max_catalog_bytes"),
        raw.max_catalog_bytes,
        (limits::MIN_CATALOG_BYTES, limits::MAX_CATALOG_BYTES_CEILING),
        up.max_catalog_bytes,
    )?;
    // Supervisor (reconnect policy).
    up.health_interval = duration(
        ctx,
        &k("health_interval"),
        raw.health_interval.as_ref(),
        (MIN_HEALTH_INTERVAL, MAX_HEALTH_INTERVAL),
        limits::DEFAULT_HEALTH_INTERVAL,
    )?;
    up.probe_timeout = duration(
        ctx,
        &k("probe_timeout"),
        raw.probe_timeout.as_ref(),
        (MIN_PROBE_TIMEOUT, MAX_PROBE_TIMEOUT),
        // Unset: the default, but never past a shorter health interval.
        limits::DEFAULT_PROBE_TIMEOUT.min(up.health_interval),
    )?;
    if up.probe_timeout > up.health_interval {
        return Err(ctx.err(
            k("probe_timeout"),
            format!(
                "must not be longer than {} ({}): a probe must finish before the next one is due",
                k("health_interval"),
                humantime::format_duration(up.health_interval)
            ),
        ));
    }
    let misses = int(
        ctx,
        &k("probe_misses"),
        raw.probe_misses,
        (1, MAX_PROBE_MISSES),
        limits::DEFAULT_PROBE_MISSES as usize,
    )?;
    up.probe_misses = u32::try_from(misses).expect("probe_misses is at most MAX_PROBE_MISSES");
    up.backoff_initial = duration(
        ctx,
        &k("backoff_initial"),
        raw.backoff_initial.as_ref(),
        (MIN_BACKOFF_INITIAL, MAX_BACKOFF_INITIAL),
        limits::DEFAULT_BACKOFF_INITIAL,
    )?;
    up.backoff_factor = float(
        ctx,
        &k("backoff_factor"),
        raw.backoff_factor,
        (MIN_BACKOFF_FACTOR, MAX_BACKOFF_FACTOR),
        limits::DEFAULT_BACKOFF_FACTOR,
    )?;
    up.backoff_cap = duration(
        ctx,
        &k("backoff_cap"),
        raw.backoff_cap.as_ref(),
        (MIN_BACKOFF_CAP, MAX_BACKOFF_CAP),
        // Unset: the default, but never below a longer initial delay.
        limits::DEFAULT_BACKOFF_CAP.max(up.backoff_initial),
    )?;
    if up.backoff_cap < up.backoff_initial {
        return Err(ctx.err(
            k("backoff_cap"),
            format!(
                "must not be shorter than {} ({})",
                k("backoff_initial"),
                humantime::format_duration(up.backoff_initial)
            ),
        ));
    }
    up.stable_period = duration(
        ctx,
        &k("stable_period"),
        raw.stable_period.as_ref(),
        (Duration::ZERO, MAX_STABLE_PERIOD),
        limits::DEFAULT_STABLE_PERIOD,
    )?;
    up.retry_after_cap = duration(
        ctx,
        &k("retry_after_cap"),
        raw.retry_after_cap.as_ref(),
        (MIN_RETRY_AFTER_CAP, MAX_RETRY_AFTER_CAP),
        limits::DEFAULT_RETRY_AFTER_CAP,
    )?;
    up.connect_on_demand = raw.connect_on_demand.unwrap_or(false);
    up.startup_timeout = duration(
        ctx,
        &k("startup_timeout"),
        raw.startup_timeout.as_ref(),
        (MIN_STARTUP_TIMEOUT, MAX_STARTUP_TIMEOUT),
        limits::DEFAULT_STARTUP_TIMEOUT,
    )?;
    Ok(up)
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
