//! Validate-and-fill of a whole TOML file: raw → typed [`Config`], section
//! by section (`[server]` in `server`, each `[[upstream]]` in `upstream`,
//! `[[client]]` and `[audit]` in `net_validate`, `[watchdog]` here), then the
//! cross-upstream checks, which the `mcpServers` loader shares.

use super::ctx::{Ctx, Result};
use super::net_validate::{audit, check_open_listen, clients};
use super::server::{notes, server};
use super::toml_raw::{RawConfig, RawWatchdog};
use super::upstream_section::upstream;
use super::values::duration;
use super::{Config, ServerConfig, Transport, UpstreamConfig, WatchdogConfig};
use crate::limits;

/// The TOML file: raw → typed.
pub(super) fn config(ctx: &Ctx, raw: RawConfig) -> Result<Config> {
    let raw_server = raw.server.unwrap_or_default();
    let mut notes = notes(&raw_server);
    let server = server(ctx, raw_server)?;
    let watchdog = watchdog(ctx, raw.watchdog.unwrap_or_default())?;
    check_count(ctx, "upstream", "[[upstream]] table", raw.upstream.len())?;
    let mut upstreams = Vec::with_capacity(raw.upstream.len());
    for (i, r) in raw.upstream.into_iter().enumerate() {
        let base = format!("upstream[{i}]");
        let up = upstream(ctx, &base, r)?;
        upstreams.push((base, up));
    }
    let clients = clients(ctx, &server, raw.client)?;
    let audit = audit(ctx, raw.audit)?;
    let mut cfg = finish(ctx, server, upstreams, audit)?;
    check_open_listen(ctx, &cfg.server, &clients)?;
    cfg.clients = clients;
    cfg.watchdog = watchdog;
    notes.extend(ctx.take_notes());
    notes.extend(network_notes(&cfg));
    for note in &notes {
        tracing::warn!(file = %ctx.path().display(), "{note}");
    }
    cfg.notes = notes;
    Ok(cfg)
}

/// `[watchdog]`: raw → typed.
fn watchdog(ctx: &Ctx, raw: RawWatchdog) -> Result<WatchdogConfig> {
    Ok(WatchdogConfig {
        required_grace: duration(
            ctx,
            "watchdog.required_grace",
            raw.required_grace.as_ref(),
            (limits::MIN_REQUIRED_GRACE, limits::MAX_REQUIRED_GRACE),
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

/// Cross-upstream checks, and each stdio child's home and grants
/// (`config::sandbox`); `upstreams` pairs each with its key path base
/// (`upstream[1]`, `mcpServers.fs`).
pub(super) fn finish(
    ctx: &Ctx,
    server: ServerConfig,
    upstreams: Vec<(String, UpstreamConfig)>,
    audit: Option<super::AuditConfig>,
) -> Result<Config> {
    for (i, (base, up)) in upstreams.iter().enumerate() {
        for (other_base, other) in &upstreams[..i] {
            check_pair(ctx, (base, up), (other_base, other))?;
        }
        check_trust(ctx, base, up, &server)?;
        check_login_store(ctx, base, up, &server)?;
        check_separator(ctx, base, up, &server)?;
    }
    if upstreams.iter().all(|(_, u)| !u.enabled) {
        tracing::warn!(file = %ctx.path().display(), "every upstream is disabled");
    }
    let (bases, mut ups): (Vec<String>, Vec<UpstreamConfig>) = upstreams.into_iter().unzip();
    super::sandbox_section::resolve(ctx, &bases, &server, audit.as_ref(), &mut ups)?;
    Ok(Config {
        server,
        upstreams: ups,
        watchdog: WatchdogConfig::default(),
        clients: Vec::new(),
        audit,
        board: ctx.board().cloned(),
        source: Some(ctx.path().to_path_buf()),
        notes: Vec::new(),
    })
}

/// An upstream name or prefix containing `server.tool_name_separator`
/// (`__`) would make its exposed names ambiguous (`files__*` in a client's
/// `allow` would also match the tools of an upstream named `files__admin`):
/// refused, naming the key. (`mcpServers` names: the key is the server's.)
fn check_separator(
    ctx: &Ctx,
    base: &str,
    up: &UpstreamConfig,
    server: &ServerConfig,
) -> Result<()> {
    let sep = server.tool_name_separator.as_str();
    let toml = base.starts_with("upstream[");
    for (field, value) in [("name", &up.name), ("prefix", &up.prefix)] {
        if !sep.is_empty() && value.contains(sep) {
            let key = if toml {
                format!("{base}.{field}")
            } else {
                base.to_owned()
            };
            return Err(ctx.err(
                key,
                format!(
                    "{value:?} contains the tool name separator {sep:?} \
                     (server.tool_name_separator): its exposed names would be ambiguous"
                ),
            ));
        }
    }
    Ok(())
}

/// `trust = "pin"` needs somewhere to keep the pins across restarts: pins
/// kept in memory only would vanish at a restart and every tool would be
/// trusted again on first use, so a pin without `server.state_directory`
/// is refused rather than silently weakened.
fn check_trust(ctx: &Ctx, base: &str, up: &UpstreamConfig, server: &ServerConfig) -> Result<()> {
    if up.trust == super::Trust::Pin && server.state_directory.is_none() {
        return Err(ctx.err(
            format!("{base}.trust"),
            format!(
                "\"pin\" on upstream {:?} needs server.state_directory (or $STATE_DIRECTORY, \
                 as systemd's StateDirectory= sets it): the pins must survive a restart; \
                 set one, or use trust = \"auto\"",
                up.name
            ),
        ));
    }
    Ok(())
}

/// `grant = "authorization_code"` keeps what a person's login gave
/// (`<state_directory>/oauth/NAME.json`): without a state directory the
/// login could not reach the running gateway nor survive a restart.
fn check_login_store(
    ctx: &Ctx,
    base: &str,
    up: &UpstreamConfig,
    server: &ServerConfig,
) -> Result<()> {
    let Transport::Http { oauth: Some(o), .. } = &up.transport else {
        return Ok(());
    };
    if o.grant == super::Grant::AuthorizationCode && server.state_directory.is_none() {
        return Err(ctx.err(
            format!("{base}.oauth.grant"),
            "\"authorization_code\" needs server.state_directory (or $STATE_DIRECTORY): \
             `mcp-edge login` stores the tokens there for the gateway to use",
        ));
    }
    Ok(())
}

/// `up` (at key path `base`) against an earlier upstream `other`: distinct
/// names, distinct prefixes when both are enabled, at most one builtin.
fn check_pair(
    ctx: &Ctx,
    (base, up): (&str, &UpstreamConfig),
    (other_base, other): (&str, &UpstreamConfig),
) -> Result<()> {
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
    if matches!(up.transport, Transport::Builtin) && matches!(other.transport, Transport::Builtin) {
        return Err(ctx.err(
            format!("{base}.transport"),
            format!("at most one builtin upstream is allowed; {other_base} is builtin too"),
        ));
    }
    Ok(())
}

/// Notes on the network keys: a certificate outside its validity, an audit
/// file whose directory is not there, and an `allow_unauthenticated` that
/// `[[client]]` entries make moot.
fn network_notes(cfg: &Config) -> Vec<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let mut notes: Vec<String> = (cfg.server.tls.as_ref())
        .and_then(|t| super::tls_files::validity_note(t, now))
        .into_iter()
        .collect();
    if let Some(crate::config::AuditConfig {
        sink: crate::config::AuditSink::File(path),
        ..
    }) = &cfg.audit
    {
        let dir = path.parent().unwrap_or(std::path::Path::new("/"));
        if !dir.is_dir() {
            notes.push(format!(
                "audit.path: the directory {} does not exist (yet); the gateway starts only \
                 once it does (systemd's StateDirectory= makes /var/lib/mcp-edge)",
                dir.display()
            ));
        }
    }
    if cfg.server.allow_unauthenticated && !cfg.clients.is_empty() {
        notes.push(
            "server.allow_unauthenticated has no effect: with [[client]] entries every \
             caller must authenticate"
                .to_owned(),
        );
    }
    notes
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::Path;

    use super::*;

    fn load(text: &str, creds: Option<&str>) -> Result<Config> {
        let env = move |k: &str| match k {
            "CREDENTIALS_DIRECTORY" => creds.map(OsString::from),
            // Read for defaults (state, operator socket, a child's home).
            "STATE_DIRECTORY" | "RUNTIME_DIRECTORY" | "TMPDIR" => None,
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
        // An empty environment: no $CREDENTIALS_DIRECTORY to expand.
        let env = |_: &str| -> Option<OsString> { None };
        Config::from_toml_str_with_env(&text, Path::new("t.toml"), &env).unwrap();
    }

    #[test]
    fn secret_files_writable_by_others_are_refused_readable_ones_noted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let tok = dir.path().join("tok");
        std::fs::write(&tok, "mcpe_0123456789abcdefghijk\n").unwrap();
        let text = format!("{HTTP}bearer_token_file = {tok:?}\n");
        let client = format!("[[client]]\nname = \"c\"\ntoken_file = {tok:?}\n{HTTP}");
        for (mode, said) in [
            (0o664, "group-writable (mode 0664)"),
            (0o602, "world-writable"),
        ] {
            std::fs::set_permissions(&tok, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = load(&text, None).unwrap_err();
            assert_eq!(e.key(), Some("upstream[0].bearer_token_file"), "{e}");
            assert!(
                e.to_string().contains(said) && e.to_string().contains("chmod 600"),
                "{e}"
            );
            let e = load(&client, None).unwrap_err();
            assert_eq!(e.key(), Some("client[0].token_file"), "{e}");
        }
        std::fs::set_permissions(&tok, std::fs::Permissions::from_mode(0o644)).unwrap();
        let notes = load(&client, None).unwrap().notes;
        assert!(
            notes.iter().any(|n| n.starts_with("client[0].token_file: ")
                && n.contains("readable by every user (mode 0644)")),
            "{notes:?}"
        );
        for mode in [0o600, 0o640, 0o400] {
            std::fs::set_permissions(&tok, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(load(&client, None).unwrap().notes.is_empty(), "{mode:o}");
        }
        // A FIFO in its place is refused, not read (the read would block).
        std::fs::remove_file(&tok).unwrap();
        let fifo = std::ffi::CString::new(tok.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = load(&client, None).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn a_name_or_prefix_holding_the_separator_is_refused_naming_the_key() {
        let up = "[[upstream]]\nname = \"e\"\ntransport = \"builtin\"\n";
        let bad = "[[upstream]]\nname = \"files__admin\"\nurl = \"https://h/mcp\"\n";
        let e = load(&format!("{up}{bad}"), None).unwrap_err();
        assert_eq!(e.key(), Some("upstream[1].name"), "{e}");
        assert!(e.to_string().contains("separator"), "{e}");
        let e = load(&format!("{up}prefix = \"a__b\"\n"), None).unwrap_err();
        assert_eq!(e.key(), Some("upstream[0].prefix"), "{e}");
        // Another separator makes the same name fine.
        let other = format!("[server]\ntool_name_separator = \".\"\n{bad}");
        assert!(load(&other, None).is_ok());
    }
}
