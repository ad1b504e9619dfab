//! Validate-and-fill: raw values → typed [`Config`], defaults from
//! [`crate::limits`]. Field checks are shared with the `mcpServers` loader.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::raw::{RawConfig, RawDuration, RawInt, RawServer, RawUpstream};
use super::{Config, ConfigError, Era, ServerConfig, ToolNameRule, Transport, UpstreamConfig};
use crate::limits;

// Ranges the brief fixes that have no constant in `limits` (yet).
const MIN_KEEPALIVE: Duration = Duration::from_secs(1);
const MAX_KEEPALIVE: Duration = Duration::from_secs(60);
const MAX_CONNECTIONS_CEILING: usize = 65_536;
const MIN_CALL_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(3600);
const MIN_RESULT_BYTES: usize = 1024;
const MAX_RESULT_BYTES_CEILING: usize = 256 * 1024 * 1024;
/// Longest upstream name / prefix.
const MAX_NAME_LEN: usize = 32;
/// Longest `tool_name_separator`.
const MAX_SEPARATOR_LEN: usize = 4;
/// Environment variable expanded in `bearer_token_file` (systemd credentials).
const CREDENTIALS_VAR: &str = "CREDENTIALS_DIRECTORY";
/// Headers the HTTP transport sets itself (lower case).
const TRANSPORT_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
];

/// Where errors point: the file, plus the environment used for expansion.
pub(super) struct Ctx<'a> {
    path: &'a Path,
    env: &'a dyn Fn(&str) -> Option<OsString>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(path: &'a Path, env: &'a dyn Fn(&str) -> Option<OsString>) -> Self {
        Ctx { path, env }
    }

    pub(super) fn path(&self) -> &Path {
        self.path
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

fn is_name_char(c: char) -> bool {
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
        keepalive: limits::DEFAULT_KEEPALIVE,
        max_connections: limits::DEFAULT_MAX_CONNECTIONS,
        tool_name_separator: "__".to_owned(),
        tool_names: ToolNameRule::Strict,
        metrics_listen: None,
    }
}

/// An enabled upstream with prefix = name and every other key at its default.
pub(super) fn upstream_with_defaults(name: String, transport: Transport) -> UpstreamConfig {
    UpstreamConfig {
        prefix: name.clone(),
        name,
        enabled: true,
        era: Era::Auto,
        call_timeout: limits::DEFAULT_CALL_TIMEOUT,
        max_in_flight: limits::DEFAULT_MAX_IN_FLIGHT,
        max_result_bytes: limits::DEFAULT_MAX_RESULT_BYTES,
        transport,
    }
}

/// The TOML file: raw → typed.
pub(super) fn config(ctx: &Ctx, raw: RawConfig) -> Result<Config> {
    let server = server(ctx, raw.server.unwrap_or_default())?;
    check_count(ctx, "upstream", "[[upstream]] table", raw.upstream.len())?;
    let mut upstreams = Vec::with_capacity(raw.upstream.len());
    for (i, r) in raw.upstream.into_iter().enumerate() {
        let base = format!("upstream[{i}]");
        let up = upstream(ctx, &base, r)?;
        upstreams.push((base, up));
    }
    finish(ctx, server, upstreams)
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
        source: Some(ctx.path().to_path_buf()),
    })
}

fn server(ctx: &Ctx, raw: RawServer) -> Result<ServerConfig> {
    let d = default_server();
    let k = |f: &str| format!("server.{f}");
    let listen = match raw.listen {
        Some(s) => socket_addr(ctx, &k("listen"), &s)?,
        None => d.listen,
    };
    let metrics_listen = match raw.metrics_listen {
        Some(s) => {
            let addr = socket_addr(ctx, &k("metrics_listen"), &s)?;
            if addr == listen && addr.port() != 0 {
                return Err(ctx.err(k("metrics_listen"), "must differ from server.listen"));
            }
            Some(addr)
        }
        None => None,
    };
    let mut allowed_origins = Vec::new();
    for (i, o) in raw.allowed_origins.unwrap_or_default().iter().enumerate() {
        let o = origin(o).map_err(|m| ctx.err(format!("server.allowed_origins[{i}]"), m))?;
        allowed_origins.push(o);
    }
    let mut allowed_hosts = Vec::new();
    for (i, h) in raw.allowed_hosts.unwrap_or_default().iter().enumerate() {
        let h = host_name(h).map_err(|m| ctx.err(format!("server.allowed_hosts[{i}]"), m))?;
        allowed_hosts.push(h);
    }
    let tool_name_separator = match raw.tool_name_separator {
        Some(s) => {
            let n = s.chars().count();
            let ok = (1..=MAX_SEPARATOR_LEN).contains(&n)
                && s.chars().all(|c| is_name_char(c) || c == '.');
            if !ok {
                return Err(ctx.err(
                    k("tool_name_separator"),
                    format!("must be 1 to {MAX_SEPARATOR_LEN} characters of [A-Za-z0-9_.-]"),
                ));
            }
            s
        }
        None => d.tool_name_separator,
    };
    let tool_names = match raw.tool_names.as_deref() {
        None => d.tool_names,
        Some("strict") => ToolNameRule::Strict,
        Some("spec") => ToolNameRule::Spec,
        Some(_) => {
            return Err(ctx.err(k("tool_names"), "must be \"strict\" or \"spec\""));
        }
    };
    Ok(ServerConfig {
        listen,
        allowed_origins,
        allowed_hosts,
        max_body_bytes: int(
            ctx,
            &k("max_body_bytes"),
            raw.max_body_bytes,
            (1, limits::MAX_BODY_BYTES_CEILING),
            d.max_body_bytes,
        )?,
        session_capacity: int(
            ctx,
            &k("session_capacity"),
            raw.session_capacity,
            (1, limits::SESSION_CAPACITY_CEILING),
            d.session_capacity,
        )?,
        session_idle_timeout: duration(
            ctx,
            &k("session_idle_timeout"),
            raw.session_idle_timeout.as_ref(),
            (
                limits::MIN_SESSION_IDLE_TIMEOUT,
                limits::MAX_SESSION_IDLE_TIMEOUT,
            ),
            d.session_idle_timeout,
        )?,
        keepalive: duration(
            ctx,
            &k("keepalive"),
            raw.keepalive.as_ref(),
            (MIN_KEEPALIVE, MAX_KEEPALIVE),
            d.keepalive,
        )?,
        max_connections: int(
            ctx,
            &k("max_connections"),
            raw.max_connections,
            (1, MAX_CONNECTIONS_CEILING),
            d.max_connections,
        )?,
        tool_name_separator,
        tool_names,
        metrics_listen,
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

fn upstream(ctx: &Ctx, base: &str, raw: RawUpstream) -> Result<UpstreamConfig> {
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
    let mut up = upstream_with_defaults(name, transport);
    if let Some(prefix) = raw.prefix {
        if !prefix.is_empty() {
            check_name(ctx, &k("prefix"), &prefix)?;
        }
        up.prefix = prefix;
    }
    up.enabled = raw.enabled.unwrap_or(true);
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
        limits::DEFAULT_CALL_TIMEOUT,
    )?;
    up.max_in_flight = int(
        ctx,
        &k("max_in_flight"),
        raw.max_in_flight,
        (1, limits::MAX_IN_FLIGHT_CEILING),
        limits::DEFAULT_MAX_IN_FLIGHT,
    )?;
    up.max_result_bytes = int(
        ctx,
        &k("max_result_bytes"),
        raw.max_result_bytes,
        (MIN_RESULT_BYTES, MAX_RESULT_BYTES_CEILING),
        limits::DEFAULT_MAX_RESULT_BYTES,
    )?;
    Ok(up)
}

/// Upstream name (or non-empty prefix): 1..=32 of `[A-Za-z0-9_-]`.
pub(super) fn check_name(ctx: &Ctx, key: &str, s: &str) -> Result<()> {
    if s.is_empty() || s.chars().count() > MAX_NAME_LEN || !s.chars().all(is_name_char) {
        return Err(ctx.err(
            key,
            format!("{s:?} must be 1 to {MAX_NAME_LEN} characters of [A-Za-z0-9_-]"),
        ));
    }
    Ok(())
}

pub(super) fn check_command(ctx: &Ctx, key: &str, s: String) -> Result<String> {
    if s.trim().is_empty() {
        return Err(ctx.err(key, "must not be empty"));
    }
    no_nul(ctx, key, &s)?;
    Ok(s)
}

pub(super) fn check_args(ctx: &Ctx, key: &str, args: Vec<String>) -> Result<Vec<String>> {
    for (i, a) in args.iter().enumerate() {
        no_nul(ctx, &format!("{key}[{i}]"), a)?;
    }
    Ok(args)
}

pub(super) fn check_env(
    ctx: &Ctx,
    key: &str,
    env: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>> {
    for (name, value) in &env {
        let k = format!("{key}.{}", key_segment(name));
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(ctx.err(
                k,
                "environment variable names must be non-empty without '='",
            ));
        }
        no_nul(ctx, &k, value)?;
    }
    Ok(env)
}

pub(super) fn check_cwd(ctx: &Ctx, key: &str, s: String) -> Result<PathBuf> {
    if s.is_empty() {
        return Err(ctx.err(
            key,
            "must not be empty (omit it to inherit the working directory)",
        ));
    }
    no_nul(ctx, key, &s)?;
    Ok(PathBuf::from(s))
}

fn no_nul(ctx: &Ctx, key: &str, s: &str) -> Result<()> {
    if s.contains('\0') {
        return Err(ctx.err(key, "must not contain a NUL character"));
    }
    Ok(())
}

/// An `http://` / `https://` URL with a host and no fragment. The URL is
/// never echoed in the error: it may carry credentials.
pub(super) fn check_url(ctx: &Ctx, key: &str, s: String) -> Result<String> {
    const BAD: &str = "must be an http:// or https:// URL";
    let lower = s.get(..8).unwrap_or(&s).to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(ctx.err(key, BAD));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ctx.err(key, format!("{BAD} without spaces or control characters")));
    }
    if s.contains('#') {
        return Err(ctx.err(key, format!("{BAD} without a #fragment")));
    }
    let uri: http::Uri = s
        .parse()
        .map_err(|e| ctx.err(key, format!("{BAD} ({e})")))?;
    if uri.authority().is_none_or(|a| a.host().is_empty()) {
        return Err(ctx.err(key, format!("{BAD} with a host")));
    }
    Ok(s)
}

/// Header names and values; never echoes a value (it may be a secret).
pub(super) fn check_headers(
    ctx: &Ctx,
    key: &str,
    headers: BTreeMap<String, String>,
    has_bearer_file: bool,
) -> Result<BTreeMap<String, String>> {
    let mut seen = Vec::with_capacity(headers.len());
    for (name, value) in &headers {
        let k = format!("{key}.{}", key_segment(name));
        let parsed = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ctx.err(&k, format!("{name:?} is not a valid HTTP header name")))?;
        let lower = parsed.as_str();
        if TRANSPORT_HEADERS.contains(&lower) {
            return Err(ctx.err(&k, "is set by the HTTP transport and can't be configured"));
        }
        if lower == "authorization" && has_bearer_file {
            return Err(ctx.err(&k, "conflicts with bearer_token_file; use one or the other"));
        }
        if seen.contains(&parsed) {
            return Err(ctx.err(&k, "duplicate header (names are case-insensitive)"));
        }
        seen.push(parsed);
        if http::HeaderValue::from_str(value).is_err() {
            return Err(ctx.err(
                &k,
                "value is not a valid HTTP header value (printable ASCII, no line breaks)",
            ));
        }
    }
    Ok(headers)
}

/// Path, with a leading `$CREDENTIALS_DIRECTORY/` expanded.
fn bearer_token_file(ctx: &Ctx, key: &str, s: &str) -> Result<PathBuf> {
    if s.is_empty() {
        return Err(ctx.err(key, "must not be empty"));
    }
    no_nul(ctx, key, s)?;
    for lead in ["$CREDENTIALS_DIRECTORY/", "${CREDENTIALS_DIRECTORY}/"] {
        if let Some(rest) = s.strip_prefix(lead) {
            if rest.is_empty() {
                return Err(ctx.err(key, format!("name a file inside {lead}")));
            }
            let dir = (ctx.env)(CREDENTIALS_VAR)
                .filter(|d| !d.is_empty())
                .ok_or_else(|| {
                    ctx.err(
                        key,
                        "starts with $CREDENTIALS_DIRECTORY/ but the CREDENTIALS_DIRECTORY \
                         environment variable is not set (systemd sets it with LoadCredential=)",
                    )
                })?;
            return Ok(PathBuf::from(dir).join(rest));
        }
    }
    if s.starts_with('$') {
        return Err(ctx.err(key, "only a leading $CREDENTIALS_DIRECTORY/ is expanded"));
    }
    Ok(PathBuf::from(s))
}

fn socket_addr(ctx: &Ctx, key: &str, s: &str) -> Result<SocketAddr> {
    s.parse().map_err(|_| {
        ctx.err(
            key,
            format!(
                "{s:?} must be an IP:port address such as \"127.0.0.1:8737\" or \"[::1]:8737\""
            ),
        )
    })
}

/// `scheme://host[:port]`, lower-cased.
fn origin(s: &str) -> std::result::Result<String, String> {
    let shape = format!("{s:?} must be an origin: scheme://host[:port], no path");
    if s == "*" {
        return Err("wildcards are not supported; list each origin".to_owned());
    }
    if s == "null" {
        return Err("the opaque origin \"null\" can't be allowed".to_owned());
    }
    let (scheme, authority) = s.split_once("://").ok_or_else(|| shape.clone())?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Err(shape);
    }
    if authority.ends_with('/') {
        return Err(format!("{shape} (drop the trailing \"/\")"));
    }
    let (host, port) = split_port(authority);
    if let Some(p) = port {
        if p.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(shape);
        }
    }
    if !host_ok(host) {
        return Err(shape);
    }
    Ok(s.to_ascii_lowercase())
}

/// A `Host` header host name without port, lower-cased.
fn host_name(s: &str) -> std::result::Result<String, String> {
    if s == "*" {
        return Err("wildcards are not supported; list each host name".to_owned());
    }
    if split_port(s).1.is_some() {
        return Err(format!("{s:?}: give the host name without a port"));
    }
    if !host_ok(s) {
        return Err(format!(
            "{s:?} must be a host name, IPv4 address or [IPv6] address"
        ));
    }
    Ok(s.to_ascii_lowercase())
}

/// `host[:port]` → (host, port); IPv6 literals keep their brackets.
fn split_port(s: &str) -> (&str, Option<&str>) {
    let bracket_end = if s.starts_with('[') {
        s.find(']')
    } else {
        None
    };
    let search_from = bracket_end.unwrap_or(0);
    match s[search_from..].rfind(':') {
        Some(i) => (&s[..search_from + i], Some(&s[search_from + i + 1..])),
        None => (s, None),
    }
}

fn host_ok(h: &str) -> bool {
    if let Some(inner) = h.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !h.is_empty()
        && h.len() <= 253
        && h.split('.')
            .all(|label| !label.is_empty() && label.chars().all(is_name_char))
}

fn int(
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

fn duration(
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
    if d.is_zero() {
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
        let env = move |k: &str| {
            assert_eq!(k, CREDENTIALS_VAR);
            creds.map(OsString::from)
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
        let env = |_: &str| -> Option<OsString> { panic!("env read") };
        Config::from_toml_str_with_env(&text, Path::new("t.toml"), &env).unwrap();
    }

    #[test]
    fn origins_and_hosts() {
        assert_eq!(
            origin("HTTPS://App.Example:8443").unwrap(),
            "https://app.example:8443"
        );
        assert!(origin("https://app.example/").is_err());
        assert!(origin("https://u@app.example").is_err());
        assert!(origin("https://[::1]:3000").is_ok());
        assert!(origin("https://h:0").is_err());
        assert!(origin("*").is_err());
        assert_eq!(host_name("Gateway.Local").unwrap(), "gateway.local");
        assert!(host_name("gateway.local:8737").is_err());
        assert!(host_name("[::1]").is_ok());
        assert!(host_name("a..b").is_err());
    }

    #[test]
    fn key_segments_quote_when_needed() {
        assert_eq!(key_segment("fs-1_a"), "fs-1_a");
        assert_eq!(key_segment("my server"), "\"my server\"");
        assert_eq!(key_segment(""), "\"\"");
    }
}
