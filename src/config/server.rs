//! `[server]`: raw → typed, including the Origin / Host allow-list syntax
//! and the admin listener's deprecated alias `metrics_listen`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::ctx::{is_name_char, Ctx, Result};
use super::tls_files::{tls, RawTls};
use super::toml_raw::RawServer;
use super::values::{absolute_dir, duration, int, ints};
use super::{ServerConfig, ToolNameRule};
use crate::limits;

/// Environment variable that defaults `state_directory` (systemd's
/// `StateDirectory=` sets it; several directories are `:`-separated).
const STATE_DIRECTORY_VAR: &str = "STATE_DIRECTORY";

/// What `check-config` notes when the deprecated alias is used.
const METRICS_LISTEN_NOTE: &str =
    "server.metrics_listen is deprecated; rename it to server.admin_listen";

/// `[server]`: raw → typed; unset keys get the context's defaults (the
/// board profile's where it sets them).
pub(super) fn server(ctx: &Ctx, raw: RawServer) -> Result<ServerConfig> {
    let d = ctx.server_defaults();
    let (listen, admin_listen) = listeners(ctx, &raw, &d)?;
    let origins = raw.allowed_origins.as_deref();
    let allowed_origins = allow_list(ctx, "server.allowed_origins", origins, origin)?;
    let hosts = raw.allowed_hosts.as_deref();
    let allowed_hosts = allow_list(ctx, "server.allowed_hosts", hosts, host_name)?;
    let tool_name_separator = match raw.tool_name_separator.as_deref() {
        Some(s) => separator(ctx, s)?,
        None => d.tool_name_separator.clone(),
    };
    let tool_names = tool_names(ctx, raw.tool_names.as_deref(), d.tool_names)?;
    let (session_idle_timeout, session_min_idle_before_evict) = session_idle(ctx, &raw, &d)?;
    let state_directory = state_directory(ctx, raw.state_directory.as_deref())?;
    let admin_socket =
        super::socket::admin_socket(ctx, raw.admin_socket.as_deref(), state_directory.as_deref())?;
    let tls = tls(
        ctx,
        RawTls {
            cert: raw.tls_cert.as_deref(),
            key: raw.tls_key.as_deref(),
            client_ca: raw.tls_client_ca.as_deref(),
        },
    )?;
    let mut s = ServerConfig {
        listen,
        allowed_origins,
        allowed_hosts,
        session_idle_timeout,
        session_min_idle_before_evict,
        tool_name_separator,
        tool_names,
        admin_listen,
        state_directory,
        admin_socket,
        tls,
        allow_unauthenticated: raw.allow_unauthenticated.unwrap_or(d.allow_unauthenticated),
        fleet: super::fleet::fleet(ctx, &raw)?,
        ..d
    };
    sizes(ctx, &raw, &mut s)?;
    queues(ctx, &raw, &mut s)?;
    Ok(s)
}

/// `max_body_bytes`, `session_capacity`, `keepalive`.
fn sizes(ctx: &Ctx, raw: &RawServer, s: &mut ServerConfig) -> Result<()> {
    let body = (1, limits::MAX_BODY_BYTES_CEILING);
    let sessions = (1, limits::SESSION_CAPACITY_CEILING);
    ints(
        ctx,
        "server",
        [
            (
                "max_body_bytes",
                raw.max_body_bytes,
                body,
                &mut s.max_body_bytes,
            ),
            (
                "session_capacity",
                raw.session_capacity,
                sessions,
                &mut s.session_capacity,
            ),
        ],
    )?;
    s.keepalive = duration(
        ctx,
        "server.keepalive",
        raw.keepalive.as_ref(),
        (limits::MIN_KEEPALIVE, limits::MAX_KEEPALIVE),
        s.keepalive,
    )?;
    Ok(())
}

/// `max_connections`, `sse_queue_depth`, `max_pending_server_requests`,
/// then `max_connections_per_peer` (its range and default follow
/// `max_connections`: all of them on a loopback `listen`, else half).
fn queues(ctx: &Ctx, raw: &RawServer, s: &mut ServerConfig) -> Result<()> {
    let connections = (1, limits::MAX_CONNECTIONS_CEILING);
    let sse = (1, limits::RELAY_QUEUE_DEPTH_CEILING);
    let pending = (1, limits::PENDING_SERVER_REQUESTS_CEILING);
    ints(
        ctx,
        "server",
        [
            (
                "max_connections",
                raw.max_connections,
                connections,
                &mut s.max_connections,
            ),
            (
                "sse_queue_depth",
                raw.sse_queue_depth,
                sse,
                &mut s.sse_queue_depth,
            ),
            (
                "max_pending_server_requests",
                raw.max_pending_server_requests,
                pending,
                &mut s.max_pending_server_requests,
            ),
        ],
    )?;
    let per_peer = (1, s.max_connections);
    // On loopback every client has the same address: no share by default.
    let default = match s.listen.ip().is_loopback() {
        true => s.max_connections,
        false => (s.max_connections / 2).max(1),
    };
    s.max_connections_per_peer = int(
        ctx,
        "server.max_connections_per_peer",
        raw.max_connections_per_peer,
        per_peer,
        default,
    )?;
    Ok(())
}

/// The `# note:` lines `[server]` as written calls for: the deprecated
/// `metrics_listen` alias.
pub(super) fn notes(raw: &RawServer) -> Vec<String> {
    match raw.metrics_listen {
        Some(_) => vec![METRICS_LISTEN_NOTE.to_owned()],
        None => Vec::new(),
    }
}

/// `listen`, and the admin listener (`admin_listen`, or its deprecated alias
/// `metrics_listen`), which must not take `listen`'s address.
fn listeners(
    ctx: &Ctx,
    raw: &RawServer,
    d: &ServerConfig,
) -> Result<(SocketAddr, Option<SocketAddr>)> {
    let listen = match &raw.listen {
        Some(s) => socket_addr(ctx, "server.listen", s)?,
        None => d.listen,
    };
    let admin = match admin_key(ctx, raw)? {
        Some((key, s)) => admin_addr(ctx, key, s, listen)?,
        // The default: its own port, or port 0 beside an ephemeral listen port.
        None => d.admin_listen.map(|mut a| {
            if listen.port() == 0 {
                a.set_port(0);
            }
            a
        }),
    };
    if admin.is_some_and(|m| m == listen && m.port() != 0) {
        return Err(ctx.err(
            "server.listen",
            format!(
                "is the default admin address {}; set server.admin_listen to another address or \"off\"",
                limits::DEFAULT_ADMIN_LISTEN
            ),
        ));
    }
    Ok((listen, admin))
}

/// The admin listener as written and the key it is written under:
/// `admin_listen`, or its deprecated alias `metrics_listen`, not both.
fn admin_key<'r>(ctx: &Ctx, raw: &'r RawServer) -> Result<Option<(&'static str, &'r str)>> {
    match (&raw.admin_listen, &raw.metrics_listen) {
        (Some(_), Some(_)) => Err(ctx.err(
            "server.metrics_listen",
            "is the deprecated name of server.admin_listen, which is set too; \
             keep only server.admin_listen",
        )),
        (Some(s), None) => Ok(Some(("server.admin_listen", s))),
        (None, Some(s)) => Ok(Some(("server.metrics_listen", s))),
        (None, None) => Ok(None),
    }
}

/// `"off"` (`None`), or a loopback address (the admin API has no
/// authentication) other than `listen`'s (unless both are ephemeral, port 0).
fn admin_addr(ctx: &Ctx, key: &str, s: &str, listen: SocketAddr) -> Result<Option<SocketAddr>> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let addr = socket_addr(ctx, key, s)?;
    if !addr.ip().is_loopback() {
        return Err(ctx.err(
            key,
            format!(
                "{addr} is not a loopback address; the admin API has no authentication, \
                 so it listens on loopback only (such as 127.0.0.1:9737 or [::1]:9737)"
            ),
        ));
    }
    if addr == listen && addr.port() != 0 {
        return Err(ctx.err(key, "must differ from server.listen"));
    }
    Ok(Some(addr))
}

/// Each entry of an allow-list through `check`; errors name `key[i]`.
fn allow_list(
    ctx: &Ctx,
    key: &str,
    raw: Option<&[String]>,
    check: fn(&str) -> std::result::Result<String, String>,
) -> Result<Vec<String>> {
    let entries = raw.unwrap_or_default().iter().enumerate();
    entries
        .map(|(i, v)| check(v).map_err(|m| ctx.err(format!("{key}[{i}]"), m)))
        .collect()
}

/// `tool_name_separator`: 1..=4 characters of `[A-Za-z0-9_.-]`.
fn separator(ctx: &Ctx, s: &str) -> Result<String> {
    let max = limits::MAX_TOOL_NAME_SEPARATOR_LEN;
    let n = s.chars().count();
    let ok = (1..=max).contains(&n) && s.chars().all(|c| is_name_char(c) || c == '.');
    if !ok {
        return Err(ctx.err(
            "server.tool_name_separator",
            format!("must be 1 to {max} characters of [A-Za-z0-9_.-]"),
        ));
    }
    Ok(s.to_owned())
}

fn tool_names(ctx: &Ctx, raw: Option<&str>, default: ToolNameRule) -> Result<ToolNameRule> {
    match raw {
        None => Ok(default),
        Some("strict") => Ok(ToolNameRule::Strict),
        Some("spec") => Ok(ToolNameRule::Spec),
        Some(_) => Err(ctx.err("server.tool_names", "must be \"strict\" or \"spec\"")),
    }
}

/// `session_idle_timeout` and `session_min_idle_before_evict`, the latter
/// never longer than the former.
fn session_idle(ctx: &Ctx, raw: &RawServer, d: &ServerConfig) -> Result<(Duration, Duration)> {
    let idle = duration(
        ctx,
        "server.session_idle_timeout",
        raw.session_idle_timeout.as_ref(),
        (
            limits::MIN_SESSION_IDLE_TIMEOUT,
            limits::MAX_SESSION_IDLE_TIMEOUT,
        ),
        d.session_idle_timeout,
    )?;
    let min_idle = duration(
        ctx,
        "server.session_min_idle_before_evict",
        raw.session_min_idle_before_evict.as_ref(),
        (Duration::ZERO, limits::MAX_SESSION_MIN_IDLE_BEFORE_EVICT),
        // Unset: the default, but never past a shorter idle timeout.
        d.session_min_idle_before_evict.min(idle),
    )?;
    if min_idle > idle {
        return Err(ctx.err(
            "server.session_min_idle_before_evict",
            format!(
                "must not be longer than server.session_idle_timeout ({}): a session idle \
                 that long has already expired, so nothing could ever be evicted",
                humantime::format_duration(idle)
            ),
        ));
    }
    Ok((idle, min_idle))
}

/// `state_directory`, else the first path of `$STATE_DIRECTORY`.
fn state_directory(ctx: &Ctx, raw: Option<&str>) -> Result<Option<PathBuf>> {
    let key = "server.state_directory";
    match raw {
        Some(s) => absolute_dir(s)
            .map(Some)
            .map_err(|m| ctx.err(key, format!("{s:?} {m}"))),
        None => state_directory_from_env(&|name| ctx.env_var(name)).map_err(|m| ctx.err(key, m)),
    }
}

/// The default of `state_directory`: the first path in `$STATE_DIRECTORY`,
/// `None` when the variable is unset or empty. Errors (a relative or
/// non-UTF-8 value) are messages without a key.
pub(super) fn state_directory_from_env(
    env: &dyn Fn(&str) -> Option<OsString>,
) -> std::result::Result<Option<PathBuf>, String> {
    let Some(value) = env(STATE_DIRECTORY_VAR) else {
        return Ok(None);
    };
    let value = value.into_string().map_err(|_| {
        "unset, and the STATE_DIRECTORY environment variable is not valid UTF-8".to_owned()
    })?;
    let first = value.split(':').next().unwrap_or_default();
    if first.is_empty() {
        return Ok(None);
    }
    absolute_dir(first).map(Some).map_err(|m| {
        format!(
            "unset, and the first path of the STATE_DIRECTORY environment variable, {first:?}, {m}"
        )
    })
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::Config;
    use super::*;

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

    const UP: &str = "[[upstream]]\nname = \"a\"\ncommand = \"a\"\n";

    fn env_with(state: Option<&'static str>) -> impl Fn(&str) -> Option<OsString> {
        move |k: &str| match k {
            "STATE_DIRECTORY" => state.map(OsString::from),
            _ => None,
        }
    }

    fn toml(text: &str, state: Option<&'static str>) -> Result<Config> {
        Config::from_toml_str_with_env(text, Path::new("c.toml"), &env_with(state))
    }

    #[test]
    fn state_directory_defaults_to_first_env_path() {
        let cfg = toml(UP, Some("/var/lib/mcp-edge:/var/lib/other")).unwrap();
        assert_eq!(
            cfg.server.state_directory.as_deref(),
            Some(Path::new("/var/lib/mcp-edge"))
        );
        // The rendering names it explicitly and reads back the same without the env.
        let out = cfg.render_masked();
        assert!(
            out.contains("state_directory = \"/var/lib/mcp-edge\""),
            "{out}"
        );
        let again = toml(&out, None).unwrap();
        assert_eq!(again.render_masked(), out);

        let json = r#"{"mcpServers": {"a": {"command": "a"}}}"#;
        let cfg = Config::from_mcp_servers_json_with_env(
            json,
            Path::new("c.json"),
            &env_with(Some("/state")),
        )
        .unwrap();
        assert_eq!(
            cfg.server.state_directory.as_deref(),
            Some(Path::new("/state"))
        );

        let cfg = Config::embedded_default_with_env(&env_with(Some("/state:/x")), None);
        assert_eq!(
            cfg.server.state_directory.as_deref(),
            Some(Path::new("/state"))
        );
    }

    #[test]
    fn state_directory_unset_or_empty_env_is_none() {
        assert_eq!(toml(UP, None).unwrap().server.state_directory, None);
        assert_eq!(toml(UP, Some("")).unwrap().server.state_directory, None);
        let out = toml(UP, None).unwrap().render_masked();
        assert!(out.contains("# state_directory: not set"), "{out}");
        assert_eq!(
            Config::embedded_default_with_env(&env_with(None), None)
                .server
                .state_directory,
            None
        );
    }

    #[test]
    fn state_directory_key_wins_over_env() {
        let text = format!("[server]\nstate_directory = \"/srv/state\"\n{UP}");
        let env = |k: &str| -> Option<OsString> {
            assert_ne!(k, "STATE_DIRECTORY", "env read although the key is set");
            None
        };
        let cfg = Config::from_toml_str_with_env(&text, Path::new("c.toml"), &env).unwrap();
        assert_eq!(
            cfg.server.state_directory.as_deref(),
            Some(Path::new("/srv/state"))
        );
    }

    #[test]
    fn relative_state_directory_from_env_names_key_and_variable() {
        let e = toml(UP, Some("state:/abs")).unwrap_err();
        assert_eq!(e.key(), Some("server.state_directory"), "{e}");
        let msg = e.to_string();
        assert!(msg.starts_with("c.toml: server.state_directory: "), "{msg}");
        assert!(msg.contains("STATE_DIRECTORY"), "{msg}");
        assert!(msg.contains("must be an absolute path"), "{msg}");
        // No file to blame: the embedded default ignores it.
        let cfg = Config::embedded_default_with_env(&env_with(Some("state")), None);
        assert_eq!(cfg.server.state_directory, None);
    }
}
