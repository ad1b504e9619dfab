//! `[server]`: raw → typed, including the Origin / Host allow-list syntax.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::raw::RawServer;
use super::validate::{duration, int, is_name_char, Ctx};
use super::{ConfigError, ServerConfig, ToolNameRule};
use crate::limits;

type Result<T> = std::result::Result<T, ConfigError>;

// Documented ranges that have no constant in `limits` (yet).
const MIN_KEEPALIVE: Duration = Duration::from_secs(1);
const MAX_KEEPALIVE: Duration = Duration::from_secs(60);
const MAX_CONNECTIONS_CEILING: usize = 65_536;
/// Longest `session_min_idle_before_evict`: 24 h.
const MAX_MIN_IDLE_BEFORE_EVICT: Duration = Duration::from_secs(24 * 3600);
/// Longest `tool_name_separator`.
const MAX_SEPARATOR_LEN: usize = 4;
/// Environment variable that defaults `state_directory` (systemd's
/// `StateDirectory=` sets it; several directories are `:`-separated).
const STATE_DIRECTORY_VAR: &str = "STATE_DIRECTORY";

pub(super) fn server(ctx: &Ctx, raw: RawServer) -> Result<ServerConfig> {
    let d = ctx.server_defaults();
    let k = |f: &str| format!("server.{f}");
    let listen = match raw.listen {
        Some(s) => socket_addr(ctx, &k("listen"), &s)?,
        None => d.listen,
    };
    let metrics_listen = match raw.metrics_listen {
        Some(s) if s.trim().eq_ignore_ascii_case("off") => None,
        Some(s) => {
            let addr = socket_addr(ctx, &k("metrics_listen"), &s)?;
            if addr == listen && addr.port() != 0 {
                return Err(ctx.err(k("metrics_listen"), "must differ from server.listen"));
            }
            Some(addr)
        }
        // The default: its own port, or port 0 beside an ephemeral listen port.
        None => d.metrics_listen.map(|mut a| {
            if listen.port() == 0 {
                a.set_port(0);
            }
            a
        }),
    };
    if metrics_listen.is_some_and(|m| m == listen && m.port() != 0) {
        return Err(ctx.err(
            k("listen"),
            format!(
                "is the default admin address {}; set server.metrics_listen to another address or \"off\"",
                limits::DEFAULT_METRICS_LISTEN
            ),
        ));
    }
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
    let session_idle_timeout = duration(
        ctx,
        &k("session_idle_timeout"),
        raw.session_idle_timeout.as_ref(),
        (
            limits::MIN_SESSION_IDLE_TIMEOUT,
            limits::MAX_SESSION_IDLE_TIMEOUT,
        ),
        d.session_idle_timeout,
    )?;
    let session_min_idle_before_evict = duration(
        ctx,
        &k("session_min_idle_before_evict"),
        raw.session_min_idle_before_evict.as_ref(),
        (Duration::ZERO, MAX_MIN_IDLE_BEFORE_EVICT),
        // Unset: the default, but never past a shorter idle timeout.
        d.session_min_idle_before_evict.min(session_idle_timeout),
    )?;
    if session_min_idle_before_evict > session_idle_timeout {
        return Err(ctx.err(
            k("session_min_idle_before_evict"),
            format!(
                "must not be longer than server.session_idle_timeout ({}): a session idle \
                 that long has already expired, so nothing could ever be evicted",
                humantime::format_duration(session_idle_timeout)
            ),
        ));
    }
    let state_directory = match raw.state_directory {
        Some(s) => Some(
            absolute_dir(&s).map_err(|m| ctx.err(k("state_directory"), format!("{s:?} {m}")))?,
        ),
        None => state_directory_from_env(&|name| ctx.env_var(name))
            .map_err(|m| ctx.err(k("state_directory"), m))?,
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
        session_idle_timeout,
        session_min_idle_before_evict,
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
        sse_queue_depth: int(
            ctx,
            &k("sse_queue_depth"),
            raw.sse_queue_depth,
            (1, limits::RELAY_QUEUE_DEPTH_CEILING),
            d.sse_queue_depth,
        )?,
        max_pending_server_requests: int(
            ctx,
            &k("max_pending_server_requests"),
            raw.max_pending_server_requests,
            (1, limits::PENDING_SERVER_REQUESTS_CEILING),
            d.max_pending_server_requests,
        )?,
        tool_name_separator,
        tool_names,
        metrics_listen,
        state_directory,
    })
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

/// A non-empty absolute path without NUL; the error completes "`<value>` …".
fn absolute_dir(s: &str) -> std::result::Result<PathBuf, String> {
    if s.is_empty() {
        return Err("must not be empty (omit it for no state directory)".to_owned());
    }
    if s.contains('\0') {
        return Err("must not contain a NUL character".to_owned());
    }
    let p = PathBuf::from(s);
    if !p.is_absolute() {
        return Err("must be an absolute path".to_owned());
    }
    Ok(p)
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
