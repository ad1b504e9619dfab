//! Per-key checks of an upstream, shared by the TOML and `mcpServers`
//! loaders, and which keys belong to which transport. Values that may be
//! secrets (URLs, header values) are never echoed in an error.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::ctx::{is_name_char, key_segment, Ctx, Result};
use super::Secret;
use crate::limits::MAX_UPSTREAM_NAME_LEN;

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

/// An upstream's transport, as the loaders tell them apart.
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
/// The sandbox keys of a stdio upstream (TOML only).
pub(super) const SANDBOX_KEYS: [&str; 4] = ["sandbox", "paths_rw", "paths_ro", "network"];
pub(super) const HTTP_KEYS: [&str; 4] = ["url", "headers", "bearer_token_file", "oauth"];

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

/// Upstream name (or non-empty prefix): 1..=32 of `[A-Za-z0-9_-]`.
pub(super) fn check_name(ctx: &Ctx, key: &str, s: &str) -> Result<()> {
    if s.is_empty() || s.chars().count() > MAX_UPSTREAM_NAME_LEN || !s.chars().all(is_name_char) {
        return Err(ctx.err(
            key,
            format!("{s:?} must be 1 to {MAX_UPSTREAM_NAME_LEN} characters of [A-Za-z0-9_-]"),
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
        if crate::sandbox::forbidden_env(name) {
            return Err(ctx.err(
                k,
                "is mcp-edge's own (systemd credentials, notify socket, watchdog, \
                 socket activation, or the reaper's marker) and never given to a child",
            ));
        }
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
/// The values are kept as [`Secret`]s.
pub(super) fn check_headers(
    ctx: &Ctx,
    key: &str,
    headers: BTreeMap<String, String>,
    has_bearer_file: bool,
) -> Result<BTreeMap<String, Secret<String>>> {
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
            return Err(ctx.err(&k, "conflicts with bearer_token_file or [upstream.oauth], which set Authorization; use one or the other"));
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
    Ok(headers
        .into_iter()
        .map(|(k, v)| (k, Secret::new(v)))
        .collect())
}

/// A secret file's path (`token_file`, `bearer_token_file`,
/// `client_secret_file`, `private_key_file`, `tls_key`), expanded as
/// [`bearer_token_file`], and its mode: group- or world-writable is refused
/// (whoever can write it chooses the credential, or swaps the key);
/// world-readable is a note (and so a warning at start). Mode bits, not
/// `access()`: the gateway may run as root. A file not there yet is left
/// to the reader that names it.
pub(super) fn secret_file(ctx: &Ctx, key: &str, s: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = bearer_token_file(ctx, key, s)?;
    ctx.secret(key, &path);
    let Ok(meta) = std::fs::metadata(&path) else {
        return Ok(path);
    };
    let mode = meta.permissions().mode() & 0o7777;
    let shown = path.display();
    if !meta.is_file() {
        // A FIFO would block every read (a reload, check-config) forever.
        let m = format!("{shown} is not a regular file (a FIFO, device or directory)");
        return Err(ctx.err(key, m));
    }
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 { "world" } else { "group" };
        return Err(ctx.err(
            key,
            format!("{shown} is {who}-writable (mode {mode:04o}); chmod 600 it"),
        ));
    }
    if mode & 0o004 != 0 {
        ctx.note(format!(
            "{key}: {shown} is readable by every user (mode {mode:04o}); chmod 600 it \
             (or 640 with the gateway's group), or hand it over with LoadCredential="
        ));
    }
    Ok(path)
}

/// Path, with a leading `$CREDENTIALS_DIRECTORY/` expanded.
pub(super) fn bearer_token_file(ctx: &Ctx, key: &str, s: &str) -> Result<PathBuf> {
    if s.is_empty() {
        return Err(ctx.err(key, "must not be empty"));
    }
    no_nul(ctx, key, s)?;
    for lead in ["$CREDENTIALS_DIRECTORY/", "${CREDENTIALS_DIRECTORY}/"] {
        if let Some(rest) = s.strip_prefix(lead) {
            if rest.is_empty() {
                return Err(ctx.err(key, format!("name a file inside {lead}")));
            }
            let dir = ctx
                .env_var(CREDENTIALS_VAR)
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
