//! `[server]`: raw → typed, including the Origin / Host allow-list syntax.

use std::net::SocketAddr;
use std::time::Duration;

use super::raw::RawServer;
use super::validate::{default_server, duration, int, is_name_char, Ctx};
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

pub(super) fn server(ctx: &Ctx, raw: RawServer) -> Result<ServerConfig> {
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
}
