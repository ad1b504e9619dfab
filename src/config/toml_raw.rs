//! The serde layer of the TOML format: every key optional, nothing
//! interpreted, unknown keys rejected. Enumerations and durations are kept as
//! strings so that the validators can report bad values with their key path.
//!
//! serde errors (unknown key, wrong type) carry a byte span; the span is
//! mapped back to a key path (`upstream[1].zzz`) by walking the spanned
//! document.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;
use toml::de::{DeTable, DeValue};

use super::ctx::{key_segment, Ctx};
use super::ConfigError;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub server: Option<RawServer>,
    pub watchdog: Option<RawWatchdog>,
    #[serde(default)]
    pub upstream: Vec<RawUpstream>,
    #[serde(default)]
    pub client: Vec<RawClient>,
    pub audit: Option<RawAudit>,
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub listen: Option<String>,
    pub allowed_origins: Option<Vec<String>>,
    pub allowed_hosts: Option<Vec<String>>,
    pub max_body_bytes: Option<RawInt>,
    pub session_capacity: Option<RawInt>,
    pub session_idle_timeout: Option<RawDuration>,
    pub session_min_idle_before_evict: Option<RawDuration>,
    pub keepalive: Option<RawDuration>,
    pub max_connections: Option<RawInt>,
    pub max_connections_per_peer: Option<RawInt>,
    pub sse_queue_depth: Option<RawInt>,
    pub max_pending_server_requests: Option<RawInt>,
    pub tool_name_separator: Option<String>,
    pub tool_names: Option<String>,
    pub admin_listen: Option<String>,
    /// Deprecated alias of `admin_listen`.
    pub metrics_listen: Option<String>,
    pub state_directory: Option<String>,
    pub admin_socket: Option<String>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub tls_client_ca: Option<String>,
    pub allow_unauthenticated: Option<bool>,
    pub instance_id: Option<String>,
    pub state_key_file: Option<String>,
    pub proxy_protocol: Option<bool>,
    pub trusted_proxies: Option<Vec<String>>,
    pub drain_grace: Option<RawDuration>,
}

/// One `[[client]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClient {
    pub name: Option<String>,
    pub token_file: Option<String>,
    pub token_sha256: Option<String>,
    pub cert_subject: Option<String>,
    pub allow: Option<Vec<String>>,
    pub deny: Option<Vec<String>>,
    pub rate: Option<String>,
    pub share: Option<RawInt>,
}

/// `[audit]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    pub path: Option<String>,
    pub max_bytes: Option<RawInt>,
    pub keep: Option<RawInt>,
    pub arguments: Option<bool>,
}

/// `[upstream.oauth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuth {
    pub grant: Option<String>,
    pub client_id: Option<String>,
    pub client_secret_file: Option<String>,
    pub private_key_file: Option<String>,
    pub client_metadata_url: Option<String>,
    pub scopes: Option<Vec<String>>,
    pub token_endpoint: Option<String>,
    pub resource: Option<String>,
}

/// `[watchdog]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWatchdog {
    pub required_grace: Option<RawDuration>,
}

/// One `[[upstream]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    pub name: Option<String>,
    pub transport: Option<String>,
    // stdio
    pub command: Option<String>,
    pub args: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub cwd: Option<String>,
    pub sandbox: Option<String>,
    pub paths_rw: Option<Vec<String>>,
    pub paths_ro: Option<Vec<String>>,
    pub network: Option<bool>,
    // http
    pub url: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    pub bearer_token_file: Option<String>,
    pub oauth: Option<RawOAuth>,
    // common
    pub enabled: Option<bool>,
    pub required: Option<bool>,
    pub era: Option<String>,
    pub trust: Option<String>,
    pub prefix: Option<String>,
    pub call_timeout: Option<RawDuration>,
    pub max_in_flight: Option<RawInt>,
    pub max_result_bytes: Option<RawInt>,
    pub max_catalog_entries: Option<RawInt>,
    pub max_catalog_bytes: Option<RawInt>,
    // supervisor
    pub health_interval: Option<RawDuration>,
    pub probe_timeout: Option<RawDuration>,
    pub probe_misses: Option<RawInt>,
    pub backoff_initial: Option<RawDuration>,
    pub backoff_factor: Option<RawFloat>,
    pub backoff_cap: Option<RawDuration>,
    pub stable_period: Option<RawDuration>,
    pub retry_after_cap: Option<RawDuration>,
    pub connect_on_demand: Option<bool>,
    pub startup_timeout: Option<RawDuration>,
}

/// A duration as written (`"30s"`), parsed by `values`.
#[derive(Debug)]
pub(super) struct RawDuration(pub String);

impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawDuration;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration string with a unit, such as \"30s\" or \"5m\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawDuration, E> {
                Ok(RawDuration(v.to_owned()))
            }
        }
        d.deserialize_str(V)
    }
}

/// An integer as written; range-checked by `values`.
#[derive(Debug, Clone, Copy)]
pub(super) struct RawInt(pub i64);

impl<'de> Deserialize<'de> for RawInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawInt;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawInt, E> {
                Ok(RawInt(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawInt, E> {
                Ok(RawInt(i64::try_from(v).unwrap_or(i64::MAX)))
            }
        }
        d.deserialize_i64(V)
    }
}

/// A number as written, integer or float (`2` or `2.5`); range-checked by
/// `values`.
#[derive(Debug, Clone, Copy)]
pub(super) struct RawFloat(pub f64);

impl<'de> Deserialize<'de> for RawFloat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawFloat;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<RawFloat, E> {
                Ok(RawFloat(v))
            }
            // TOML integers (`backoff_factor = 2`); huge ones fail the range check anyway.
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawFloat, E> {
                Ok(RawFloat(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawFloat, E> {
                Ok(RawFloat(v as f64))
            }
        }
        d.deserialize_f64(V)
    }
}

/// Deserializes `text`; serde errors become [`ConfigError::Invalid`] with the
/// key path when the span can be mapped to one, syntax errors become
/// [`ConfigError::Parse`] with line and column.
pub(super) fn parse(text: &str, ctx: &Ctx) -> Result<RawConfig, ConfigError> {
    toml::from_str::<RawConfig>(text).map_err(|e| convert_error(text, &e, ctx))
}

fn convert_error(text: &str, e: &toml::de::Error, ctx: &Ctx) -> ConfigError {
    let message = e.message().replace("unknown field", "unknown key");
    let Some(span) = e.span() else {
        return ctx.parse_err(message);
    };
    // A syntax error makes the spanned parse fail too: no key path then.
    if let Ok(doc) = DeTable::parse(text) {
        let mut best = None;
        let mut path = String::new();
        walk_table(doc.get_ref(), &span, &mut path, &mut best);
        if let Some((key, _)) = best {
            return ctx.err(key, message);
        }
    }
    let (line, column) = line_col(text, span.start);
    ctx.parse_err(format!("line {line}, column {column}: {message}"))
}

/// Best match so far: key path and the length of the span it matched by.
type Best = Option<(String, usize)>;

fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && outer.start < outer.end
}

fn consider(path: &str, span: &Range<usize>, target: &Range<usize>, best: &mut Best) {
    if path.is_empty() || !contains(span, target) {
        return;
    }
    let len = span.end - span.start;
    // Smallest enclosing span wins; on ties the deeper (longer) path.
    let better = match best {
        None => true,
        Some((p, l)) => len < *l || (len == *l && path.len() > p.len()),
    };
    if better {
        *best = Some((path.to_owned(), len));
    }
}

fn walk_table(table: &DeTable, target: &Range<usize>, path: &mut String, best: &mut Best) {
    for (key, value) in table {
        let mark = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(&key_segment(key.get_ref()));
        consider(path, &key.span(), target, best);
        consider(path, &value.span(), target, best);
        walk_value(value.get_ref(), target, path, best);
        path.truncate(mark);
    }
}

fn walk_value(value: &DeValue, target: &Range<usize>, path: &mut String, best: &mut Best) {
    match value {
        DeValue::Table(t) => walk_table(t, target, path, best),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let mark = path.len();
                path.push_str(&format!("[{i}]"));
                consider(path, &item.span(), target, best);
                walk_value(item.get_ref(), target, path, best);
                path.truncate(mark);
            }
        }
        _ => {}
    }
}

/// 1-based line and column (in characters) of byte offset `at`.
pub(super) fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}
