//! Checks made before any handler runs: `Origin` and `Host` (DNS-rebinding
//! protection, `../shared/spec/2026-07-28/transports-streamable-http.mdx`
//! §Security & Endpoint; `../shared/spec/2025-11-25/transports.mdx` §Security Warning).
//!
//! Allowed: loopback hosts (`localhost`, `127.0.0.0/8`, `[::1]`) on any port,
//! the listen address's own host, and the config allow-lists
//! (`server.allowed_hosts` for `Host`, `server.allowed_origins` for `Origin`).
//!
//! Strict heads ([`OriginPolicy::check_head`]): two `Authorization` or two
//! `Host` headers are a 400, not "the first wins" (RFC 9110 §5.3: neither
//! is a list; RFC 9112 §3.2: exactly one `Host`); an absolute-form target's
//! authority (`POST http://host/mcp`, RFC 9112 §3.2.2) passes the `Host`
//! check too and must name the same authority as `Host`.

use crate::limits::AUDIT_FIELD_BYTES;
use crate::logline::capped;
use http::HeaderMap;
use std::borrow::Cow;

/// Why a request's head is refused before any handler runs.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    /// Two of a header that comes once, or an absolute-form target whose
    /// authority is not `Host`'s: 400, counted under `limit`.
    #[error("{why}")]
    Malformed {
        /// The `mcp_edge_refused_total` label.
        limit: &'static str,
        /// The reason.
        why: String,
    },
    /// A `Host`, target authority or `Origin` not allowed: 403.
    #[error("{0}")]
    Forbidden(String),
}

/// `Err` naming the header when `headers` has two `Authorization` or two
/// `Host` headers (the admin listener's guard uses it too).
pub fn one_each(headers: &HeaderMap) -> Result<(), String> {
    for name in [http::header::AUTHORIZATION, http::header::HOST] {
        if headers.get_all(&name).iter().nth(1).is_some() {
            return Err(format!("more than one {name} header"));
        }
    }
    Ok(())
}

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

    /// [`OriginPolicy::check`] after the strict-head rules (module docs)
    /// on a request's `headers` and target `uri`.
    pub fn check_head(&self, headers: &HeaderMap, uri: &http::Uri) -> Result<(), HeadError> {
        one_each(headers).map_err(|why| HeadError::Malformed {
            limit: "duplicate_header",
            why,
        })?;
        if let Some(target) = uri.authority().map(|a| a.as_str()) {
            self.allow_host("target authority", target)
                .map_err(HeadError::Forbidden)?;
            let host = headers.get(http::header::HOST).map(|v| v.as_bytes());
            if host.is_some_and(|h| !h.eq_ignore_ascii_case(target.as_bytes())) {
                let why = format!(
                    "the request target's authority {:?} is not the Host header's",
                    capped(target, AUDIT_FIELD_BYTES)
                );
                let limit = "authority";
                return Err(HeadError::Malformed { limit, why });
            }
            if host.is_none() {
                return self.origin(headers).map_err(HeadError::Forbidden);
            }
        }
        self.check(headers).map_err(HeadError::Forbidden)
    }

    /// `Ok(())` when `host` (a `Host` value or a target's authority) is one
    /// this listener answers to; the reason for a 403 otherwise.
    fn allow_host(&self, what: &str, host: &str) -> Result<(), String> {
        let h = host_of(host);
        if !is_loopback(&h) && !self.allowed_hosts.iter().any(|a| *a == h) {
            return Err(format!(
                "{what} {:?} is not allowed (add its name to server.allowed_hosts)",
                capped(host, AUDIT_FIELD_BYTES)
            ));
        }
        Ok(())
    }

    /// `Ok(())` or the reason for a 403.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), String> {
        let host = headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .ok_or("missing or invalid Host header")?;
        self.allow_host("Host", host)?;
        self.origin(headers)
    }

    /// The `Origin` rule alone.
    fn origin(&self, headers: &HeaderMap) -> Result<(), String> {
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let o = origin.to_str().map_err(|_| "invalid Origin header")?;
            let o = &*capped(o, AUDIT_FIELD_BYTES);
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
    fn two_hosts_or_authorizations_are_malformed() {
        let p = OriginPolicy::new("127.0.0.1:8737".parse().unwrap(), &[], &[]);
        let uri: http::Uri = "/mcp".parse().unwrap();
        for name in ["host", "authorization"] {
            let mut m = h(&[("host", "localhost")]);
            m.append(name, "localhost".parse().unwrap());
            m.append(name, "evil.example".parse().unwrap());
            let e = p.check_head(&m, &uri).unwrap_err();
            assert!(
                matches!(
                    e,
                    HeadError::Malformed {
                        limit: "duplicate_header",
                        ..
                    }
                ),
                "{e}"
            );
            assert!(e.to_string().contains(name), "{e}");
        }
        assert!(p.check_head(&h(&[("host", "localhost")]), &uri).is_ok());
    }

    #[test]
    fn an_absolute_target_is_checked_as_host() {
        let p = OriginPolicy::new("127.0.0.1:8737".parse().unwrap(), &[], &[]);
        let evil: http::Uri = "http://evil.example:80/mcp".parse().unwrap();
        let e = p
            .check_head(&h(&[("host", "localhost")]), &evil)
            .unwrap_err();
        assert!(matches!(e, HeadError::Forbidden(_)), "{e}");
        let e = p.check_head(&h(&[]), &evil).unwrap_err();
        assert!(matches!(e, HeadError::Forbidden(_)), "{e}");
        let local: http::Uri = "http://127.0.0.1:8737/mcp".parse().unwrap();
        let e = p
            .check_head(&h(&[("host", "localhost:8737")]), &local)
            .unwrap_err();
        assert!(
            matches!(
                e,
                HeadError::Malformed {
                    limit: "authority",
                    ..
                }
            ),
            "{e}"
        );
        assert!(p
            .check_head(&h(&[("host", "127.0.0.1:8737")]), &local)
            .is_ok());
        assert!(p.check_head(&h(&[]), &local).is_ok());
    }

    #[test]
    fn a_long_host_is_cut_in_the_reason() {
        let p = OriginPolicy::new("127.0.0.1:8737".parse().unwrap(), &[], &[]);
        let long = "e".repeat(8000);
        let why = p.check(&h(&[("host", &long)])).unwrap_err();
        assert!(why.len() < 400 && why.contains("[cut "), "{why}");
    }

    #[test]
    fn allowed_hosts_extend_the_list() {
        let p = OriginPolicy::new("0.0.0.0:8737".parse().unwrap(), &["gw.local".into()], &[]);
        assert!(p.check(&h(&[("host", "GW.local:8737")])).is_ok());
        assert!(p.check(&h(&[("host", "other.local")])).is_err());
    }
}
