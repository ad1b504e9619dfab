//! The de-facto `mcpServers` JSON of Claude Desktop, Cursor and VS Code:
//!
//! ```json
//! {"mcpServers": {
//!   "fs":     {"command": "npx", "args": ["-y", "x"], "env": {"K": "v"}, "cwd": "/srv"},
//!   "remote": {"type": "http", "url": "https://h/mcp", "headers": {"X-Api-Key": "..."}},
//!   "off":    {"command": "x", "disabled": true}
//! }}
//! ```
//!
//! Unlike the TOML format this one is lenient about extra keys, because users
//! point mcp-edge at the file their host already reads: host-specific keys
//! (`alwaysAllow`, `autoApprove`, `timeout`, ...) and other top-level keys are
//! ignored with a warning naming them. `null` counts as absent. Duplicate
//! object keys, wrong types and bad values are errors naming the key path
//! (`mcpServers.fs.args[1]`).

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::ctx::{key_segment, Ctx, Result};
use super::fields::{self, foreign_keys, Kind, STDIO_KEYS};
use super::net_validate::check_open_listen;
use super::server::server;
use super::toml_raw::RawServer;
use super::validate::{check_count, finish};
use super::{Config, ConfigError, Transport, UpstreamConfig};

/// A JSON object as its entries in file order, duplicates kept.
struct Pairs<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Pairs<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct PairsVisitor<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for PairsVisitor<V> {
            type Value = Pairs<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Pairs<V>, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, V>()? {
                    out.push((k, v));
                }
                Ok(Pairs(out))
            }
        }
        d.deserialize_map(PairsVisitor(PhantomData))
    }
}

impl<V> Pairs<V> {
    /// First key that occurs twice.
    fn duplicate(&self) -> Option<&str> {
        self.0.iter().enumerate().find_map(|(i, (k, _))| {
            self.0[..i]
                .iter()
                .any(|(p, _)| p == k)
                .then_some(k.as_str())
        })
    }
}

impl Pairs<Value> {
    /// The value of `key`; `null` counts as absent.
    fn get(&self, key: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|(k, v)| k == key && !v.is_null())
            .map(|(_, v)| v)
    }
}

/// Keys of one server entry that mcp-edge reads; everything else is ignored.
const KNOWN_KEYS: [&str; 8] = [
    "type", "command", "args", "env", "cwd", "url", "headers", "disabled",
];

pub(super) fn parse(text: &str, ctx: &Ctx) -> Result<Config> {
    let top: Pairs<Box<RawValue>> = serde_json::from_str(text).map_err(|e| json_syntax(ctx, &e))?;
    let (list_key, raw_list) = server_list(ctx, &top)?;
    let servers: Pairs<Box<RawValue>> = serde_json::from_str(raw_list.get())
        .map_err(|_| ctx.err(list_key, "must be an object of server name → server entry"))?;
    check_count(ctx, list_key, "server entry", servers.0.len())?;
    let mut upstreams = Vec::with_capacity(servers.0.len());
    for (i, (name, raw)) in servers.0.iter().enumerate() {
        let base = format!("{list_key}.{}", key_segment(name));
        fields::check_name(ctx, &base, name)?;
        if servers.0[..i].iter().any(|(n, _)| n == name) {
            return Err(ctx.err(base, "given twice"));
        }
        let entry: Pairs<Value> = serde_json::from_str(raw.get())
            .map_err(|_| ctx.err(&base, "must be an object (a server entry)"))?;
        let up = entry_upstream(ctx, &base, name, entry)?;
        upstreams.push((base, up));
    }
    // No [server] section: its defaults, `state_directory` from the environment.
    let server = server(ctx, RawServer::default())?;
    let cfg = finish(ctx, server, upstreams, None)?;
    check_open_listen(ctx, &cfg.server, &cfg.clients)?;
    Ok(cfg)
}

/// The top-level list of servers, `mcpServers` or else VS Code's `servers`,
/// with its key; other top-level keys are ignored with a warning.
fn server_list<'t>(
    ctx: &Ctx,
    top: &'t Pairs<Box<RawValue>>,
) -> Result<(&'static str, &'t RawValue)> {
    let found = ["mcpServers", "servers"]
        .into_iter()
        .find_map(|k| top.0.iter().find(|(t, _)| t == k).map(|(_, v)| (k, v)));
    let Some((list_key, raw_list)) = found else {
        return Err(ctx.err(
            "mcpServers",
            "missing; expected {\"mcpServers\": {\"<name>\": {...}}}",
        ));
    };
    if let Some(dup) = top.duplicate() {
        return Err(ctx.err(key_segment(dup), "given twice"));
    }
    let ignored: Vec<&str> = top
        .0
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| *k != list_key)
        .collect();
    if !ignored.is_empty() {
        tracing::warn!(file = %ctx.path().display(), keys = ?ignored, "ignoring top-level keys that mcp-edge does not use");
    }
    Ok((list_key, raw_list))
}

/// `line L, column C: <what>`, like TOML syntax errors.
fn json_syntax(ctx: &Ctx, e: &serde_json::Error) -> ConfigError {
    let text = e.to_string();
    if e.line() == 0 {
        return ctx.parse_err(text);
    }
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let what = text.strip_suffix(&suffix).unwrap_or(&text);
    ctx.parse_err(format!("line {}, column {}: {what}", e.line(), e.column()))
}

/// One entry, reading keys by hand so every error names its key path.
fn entry_upstream(
    ctx: &Ctx,
    base: &str,
    name: &str,
    entry: Pairs<Value>,
) -> Result<UpstreamConfig> {
    if let Some(dup) = entry.duplicate() {
        return Err(ctx.err(format!("{base}.{}", key_segment(dup)), "given twice"));
    }
    let k = |f: &str| format!("{base}.{f}");
    let ignored: Vec<&str> = entry
        .0
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !KNOWN_KEYS.contains(k))
        .collect();
    if !ignored.is_empty() {
        tracing::warn!(file = %ctx.path().display(), server = name, keys = ?ignored, "ignoring host-specific keys in mcpServers entry");
    }
    let command: Option<String> = typed(ctx, &k("command"), entry.get("command"), "a string")?;
    let url: Option<String> = typed(ctx, &k("url"), entry.get("url"), "a string")?;
    let kind = entry_kind(ctx, base, &entry, command.is_some(), url.is_some())?;
    entry_transport_keys(ctx, base, kind, &entry)?;
    let sse = matches!(entry.get("type"), Some(Value::String(t)) if t == "sse");
    let transport = match kind {
        Kind::Stdio => entry_stdio(ctx, base, &entry, command)?,
        Kind::Http => entry_http(ctx, base, &entry, url, sse)?,
        Kind::Builtin => unreachable!("JSON has no builtin servers"),
    };
    let mut up = ctx.upstream_defaults(name.to_owned(), transport);
    let disabled: Option<bool> =
        typed(ctx, &k("disabled"), entry.get("disabled"), "true or false")?;
    up.enabled = !disabled.unwrap_or(false);
    Ok(up)
}

/// `"type"`, or when absent the one implied by `command` / `url`.
fn entry_kind(
    ctx: &Ctx,
    base: &str,
    entry: &Pairs<Value>,
    command: bool,
    url: bool,
) -> Result<Kind> {
    let key = format!("{base}.type");
    match typed::<String>(ctx, &key, entry.get("type"), "a string")?.as_deref() {
        Some("stdio") => Ok(Kind::Stdio),
        Some("http" | "streamable-http" | "streamableHttp" | "sse") => Ok(Kind::Http),
        Some(_) => Err(ctx.err(
            key,
            "must be \"stdio\", \"http\", \"streamable-http\", \"streamableHttp\" or \"sse\"",
        )),
        None => match (command, url) {
            (true, false) => Ok(Kind::Stdio),
            (false, true) => Ok(Kind::Http),
            (true, true) => Err(ctx.err(base, "has both command and url; set \"type\"")),
            (false, false) => Err(ctx.err(
                base,
                "needs \"command\" (stdio server) or \"url\" (streamable-HTTP server)",
            )),
        },
    }
}

/// Rejects a key of another transport than `kind` (`url` on a stdio server).
fn entry_transport_keys(ctx: &Ctx, base: &str, kind: Kind, entry: &Pairs<Value>) -> Result<()> {
    let stdio_present = STDIO_KEYS.map(|key| entry.get(key).is_some());
    let http_keys = ["url", "headers"];
    let http_present = http_keys.map(|key| entry.get(key).is_some());
    let selector = "\"type\": ";
    let (stdio, http) = (Kind::Stdio, Kind::Http);
    foreign_keys(
        ctx,
        base,
        selector,
        kind,
        stdio,
        &STDIO_KEYS,
        &stdio_present,
    )?;
    foreign_keys(ctx, base, selector, kind, http, &http_keys, &http_present)
}

/// A stdio entry: `command`, `args`, `env`, `cwd`.
fn entry_stdio(
    ctx: &Ctx,
    base: &str,
    entry: &Pairs<Value>,
    command: Option<String>,
) -> Result<Transport> {
    let k = |f: &str| format!("{base}.{f}");
    let command = command.ok_or_else(|| {
        ctx.err(
            k("command"),
            "missing; a stdio server needs the command to run",
        )
    })?;
    let args = string_list(ctx, &k("args"), entry.get("args"))?;
    let env = string_map(ctx, &k("env"), entry.get("env"))?;
    let cwd: Option<String> = typed(ctx, &k("cwd"), entry.get("cwd"), "a string")?;
    warn_placeholders(ctx, &k("command"), [&command]);
    warn_placeholders(ctx, &k("args"), &args);
    warn_placeholders(ctx, &k("env"), env.values());
    Ok(Transport::Stdio {
        command: fields::check_command(ctx, &k("command"), command)?,
        args: fields::check_args(ctx, &k("args"), args)?,
        env: fields::check_env(ctx, &k("env"), env)?,
        cwd: cwd
            .map(|c| fields::check_cwd(ctx, &k("cwd"), c))
            .transpose()?,
        // The default sandbox; its home is filled in by `finish`.
        sandbox: crate::sandbox::Spec::strict(std::path::PathBuf::new()),
    })
}

/// An HTTP entry (streamable, or `"type": "sse"`): `url`, `headers` (no
/// bearer token file in JSON).
fn entry_http(
    ctx: &Ctx,
    base: &str,
    entry: &Pairs<Value>,
    url: Option<String>,
    sse: bool,
) -> Result<Transport> {
    let k = |f: &str| format!("{base}.{f}");
    let url = url.ok_or_else(|| ctx.err(k("url"), "missing; an http server needs a url"))?;
    let headers = string_map(ctx, &k("headers"), entry.get("headers"))?;
    warn_placeholders(ctx, &k("url"), [&url]);
    warn_placeholders(ctx, &k("headers"), headers.values());
    Ok(Transport::Http {
        url: fields::check_url(ctx, &k("url"), url)?,
        wire: match sse {
            true => super::transport::Wire::Sse,
            false => super::transport::Wire::Streamable,
        },
        headers: fields::check_headers(ctx, &k("headers"), headers, false)?,
        bearer_token_file: None,
        oauth: None,
    })
}

/// `value` as `T`, or an error naming `key` and what was expected.
fn typed<T: DeserializeOwned>(
    ctx: &Ctx,
    key: &str,
    value: Option<&Value>,
    expected: &str,
) -> Result<Option<T>> {
    let Some(v) = value else { return Ok(None) };
    T::deserialize(v)
        .map(Some)
        .map_err(|_| ctx.err(key, format!("must be {expected}")))
}

/// An array of strings (`args`); errors point at the offending element.
fn string_list(ctx: &Ctx, key: &str, value: Option<&Value>) -> Result<Vec<String>> {
    let Some(v) = value else {
        return Ok(Vec::new());
    };
    let Value::Array(items) = v else {
        return Err(ctx.err(key, "must be an array of strings"));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::String(s) = item else {
            return Err(ctx.err(format!("{key}[{i}]"), "must be a string"));
        };
        out.push(s.clone());
    }
    Ok(out)
}

/// An object of string values (`env`, `headers`).
fn string_map(ctx: &Ctx, key: &str, value: Option<&Value>) -> Result<BTreeMap<String, String>> {
    let Some(v) = value else {
        return Ok(BTreeMap::new());
    };
    let Value::Object(obj) = v else {
        return Err(ctx.err(key, "must be an object of string values"));
    };
    let mut out = BTreeMap::new();
    for (name, v) in obj {
        let Value::String(s) = v else {
            return Err(ctx.err(format!("{key}.{}", key_segment(name)), "must be a string"));
        };
        out.insert(name.clone(), s.clone());
    }
    Ok(out)
}

/// Hosts expand `${input:x}` / `${env:X}`; mcp-edge passes text through as is.
fn warn_placeholders<'a>(ctx: &Ctx, key: &str, values: impl IntoIterator<Item = &'a String>) {
    if values.into_iter().any(|v| v.contains("${")) {
        tracing::warn!(file = %ctx.path().display(), key, "value contains a ${{...}} placeholder; mcp-edge does not expand host variables");
    }
}
