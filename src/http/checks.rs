//! Checks made before any handler runs: `Origin` and `Host` (DNS-rebinding
//! protection, `../shared/spec/2026-07-28/transports-streamable-http.mdx`
//! §Security & Endpoint; `../shared/spec/2025-11-25/transports.mdx` §Security Warning).
//!
//! Allowed: loopback hosts (`localhost`, `127.0.0.0/8`, `[::1]`) on any port,
//! the listen address's own host, and the config allow-lists
//! (`server.allowed_hosts` for `Host`, `server.allowed_origins` for `Origin`).

use http::HeaderMap;
use std::borrow::Cow;

/// The host part of `host[:port]` / `[v6]:port`, lowercased (copied only
/// when it has capitals).
fn host_of(authority: &str) -> Cow<'_, str> {
    let a = authority.trim();
    let host = match a.strip_prefix('[').and_then(|r| r.find(']')) {
        Some(i) => &a[..i + 2],
        None if a.starts_with('[') => a,
        None => match a.rsplit_once(':') {
            Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
            _ => a,
        },
    };
    match host.bytes().any(|b| b.is_ascii_uppercase()) {
        true => Cow::Owned(host.to_ascii_lowercase()),
        false => Cow::Borrowed(host),
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host == "[::1]"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The Origin/Host policy of one listener.
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
}

impl OriginPolicy {
    /// A policy allowing loopback plus `listen`'s host and the allow-lists.
    pub fn new(
        listen: std::net::SocketAddr,
        allowed_hosts: &[String],
        allowed_origins: &[String],
    ) -> Self {
        let mut hosts: Vec<String> = allowed_hosts
            .iter()
            .map(|h| host_of(h).into_owned())
            .collect();
        if !listen.ip().is_unspecified() {
            hosts.push(host_of(&listen.to_string()).into_owned());
        }
        OriginPolicy {
            allowed_hosts: hosts,
            allowed_origins: allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    /// `Ok(())` or the reason for a 403.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), String> {
        let host = headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .ok_or("missing or invalid Host header")?;
        let h = host_of(host);
        if !is_loopback(&h) && !self.allowed_hosts.iter().any(|a| *a == h) {
            return Err(format!(
                "Host {host:?} is not allowed (add its name to server.allowed_hosts)"
            ));
        }
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let o = origin.to_str().map_err(|_| "invalid Origin header")?;
            let lower = o.trim_end_matches('/').to_ascii_lowercase();
            if self.allowed_origins.contains(&lower) {
                return Ok(());
            }
            let authority = lower
                .strip_prefix("http://")
                .or_else(|| lower.strip_prefix("https://"))
                .ok_or_else(|| format!("Origin {o:?} is not allowed (server.allowed_origins)"))?;
            if !is_loopback(&host_of(authority)) {
                return Err(format!(
                    "Origin {o:?} is not allowed (server.allowed_origins)"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    #[test]
    fn loopback_passes_foreign_fails() {
        let p = OriginPolicy::new(
            "127.0.0.1:8737".parse().unwrap(),
            &[],
            &["https://app.example".into()],
        );
        assert!(p.check(&h(&[("host", "127.0.0.1:8737")])).is_ok());
        assert!(p
            .check(&h(&[
                ("host", "localhost:1"),
                ("origin", "http://localhost:3000")
            ]))
            .is_ok());
        assert!(p.check(&h(&[("host", "[::1]:8737")])).is_ok());
        assert!(p.check(&h(&[("host", "evil.example")])).is_err());
        assert!(p
            .check(&h(&[
                ("host", "localhost"),
                ("origin", "http://evil.example")
            ]))
            .is_err());
        assert!(p
            .check(&h(&[
                ("host", "localhost"),
                ("origin", "https://app.example")
            ]))
            .is_ok());
        assert!(p
            .check(&h(&[("host", "localhost"), ("origin", "null")]))
            .is_err());
        assert!(p.check(&h(&[])).is_err());
    }

    #[test]
    fn allowed_hosts_extend_the_list() {
        let p = OriginPolicy::new("0.0.0.0:8737".parse().unwrap(), &["gw.local".into()], &[]);
        assert!(p.check(&h(&[("host", "GW.local:8737")])).is_ok());
        assert!(p.check(&h(&[("host", "other.local")])).is_err());
    }
}
