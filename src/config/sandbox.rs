//! The sandbox keys of a stdio upstream (`sandbox`, `paths_rw`,
//! `paths_ro`, `network`; TOML only: `mcpServers` entries get the
//! default) and, once the whole file is read, each child's home and the
//! check that no granted path reaches what the sandbox protects
//! ([`crate::sandbox`]): the config directory, the state directory beyond
//! the child's home, `$CREDENTIALS_DIRECTORY`, the TLS files, the audit
//! log, `/run` and `/etc/mcp-edge`.

use std::path::{Component, Path, PathBuf};

use super::ctx::{Ctx, Result};
use super::raw::RawUpstream;
use super::{AuditConfig, AuditSink, ServerConfig, Transport, UpstreamConfig};
use crate::sandbox::{overlaps, Mode, Spec, NEVER};

/// `sandbox`, `paths_rw`, `paths_ro`, `network`, taken out of `raw`; the
/// home is filled in by [`resolve`].
pub(super) fn keys(ctx: &Ctx, base: &str, raw: &mut RawUpstream) -> Result<Spec> {
    let k = |f: &str| format!("{base}.{f}");
    let mode = match raw.sandbox.take().as_deref() {
        None | Some("strict") => Mode::Strict,
        Some("off") => Mode::Off,
        Some(other) => {
            return Err(ctx.err(
                k("sandbox"),
                format!("must be \"strict\" or \"off\" (got {other:?})"),
            ))
        }
    };
    let paths_rw = paths(ctx, &k("paths_rw"), raw.paths_rw.take())?;
    let paths_ro = paths(ctx, &k("paths_ro"), raw.paths_ro.take())?;
    let network = raw.network.take().unwrap_or(true);
    if mode == Mode::Off && (!paths_rw.is_empty() || !paths_ro.is_empty() || !network) {
        return Err(ctx.err(
            k("sandbox"),
            "\"off\" grants everything: paths_rw, paths_ro and network = false need \"strict\"",
        ));
    }
    Ok(Spec {
        mode,
        paths_rw,
        paths_ro,
        network,
        home: PathBuf::new(),
    })
}

/// Absolute paths without `..` (a grant names what it reaches).
fn paths(ctx: &Ctx, key: &str, raw: Option<Vec<String>>) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (i, p) in raw.unwrap_or_default().into_iter().enumerate() {
        let path = PathBuf::from(&p);
        if !path.is_absolute()
            || p.contains('\0')
            || path.components().any(|c| c == Component::ParentDir)
        {
            return Err(ctx.err(
                format!("{key}[{i}]"),
                format!("{p:?} must be an absolute path without \"..\""),
            ));
        }
        out.push(path);
    }
    Ok(out)
}

/// What no grant may reach, with what it is (for the error).
fn protected(
    ctx: &Ctx,
    server: &ServerConfig,
    audit: Option<&AuditConfig>,
) -> Vec<(PathBuf, &'static str)> {
    let mut out: Vec<(PathBuf, &'static str)> = NEVER
        .iter()
        .map(|p| (PathBuf::from(p), "never granted"))
        .collect();
    if let Some(dir) = ctx.path().parent().filter(|d| d.is_absolute()) {
        out.push((dir.to_path_buf(), "the config directory"));
    }
    if let Some(creds) = ctx
        .env_var("CREDENTIALS_DIRECTORY")
        .filter(|c| !c.is_empty())
    {
        out.push((creds.into(), "$CREDENTIALS_DIRECTORY"));
    }
    if let Some(tls) = &server.tls {
        out.push((tls.key.clone(), "server.tls_key"));
        out.push((tls.cert.clone(), "server.tls_cert"));
    }
    if let Some(AuditSink::File(path)) = audit.map(|a| &a.sink) {
        out.push((path.clone(), "the audit log"));
    }
    out
}

/// The home of the child of upstream `name`: `<state_directory>/children/NAME`,
/// else `<TMPDIR or /tmp>/mcp-edge-<uid>/children/NAME`.
pub(super) fn home(ctx: &Ctx, server: &ServerConfig, name: &str) -> PathBuf {
    match &server.state_directory {
        Some(state) => state.join("children").join(name),
        None => {
            let tmp = ctx
                .env_var("TMPDIR")
                .map(PathBuf::from)
                .filter(|t| t.is_absolute())
                .unwrap_or_else(|| PathBuf::from("/tmp"));
            // SAFETY: geteuid has no preconditions.
            let uid = unsafe { libc::geteuid() };
            tmp.join(format!("mcp-edge-{uid}"))
                .join("children")
                .join(name)
        }
    }
}

/// Fills in each stdio child's home and refuses a grant (`cwd`,
/// `paths_rw`, `paths_ro` of a strict upstream) that reaches a protected
/// path; `bases[i]` is the key path of `upstreams[i]`.
pub(super) fn resolve(
    ctx: &Ctx,
    bases: &[String],
    server: &ServerConfig,
    audit: Option<&AuditConfig>,
    upstreams: &mut [UpstreamConfig],
) -> Result<()> {
    let guarded = protected(ctx, server, audit);
    for (base, up) in bases.iter().zip(upstreams) {
        let home = home(ctx, server, &up.name);
        let Transport::Stdio { sandbox, cwd, .. } = &mut up.transport else {
            continue;
        };
        sandbox.home = home;
        if sandbox.mode == Mode::Off {
            continue;
        }
        let keyed = cwd
            .iter()
            .map(|c| (format!("{base}.cwd"), c))
            .chain(indexed(base, "paths_rw", &sandbox.paths_rw))
            .chain(indexed(base, "paths_ro", &sandbox.paths_ro));
        for (key, path) in keyed {
            check_grant(ctx, &key, path, &sandbox.home, server, &guarded)?;
        }
    }
    Ok(())
}

fn indexed<'a>(
    base: &'a str,
    field: &'a str,
    paths: &'a [PathBuf],
) -> impl Iterator<Item = (String, &'a PathBuf)> + 'a {
    paths
        .iter()
        .enumerate()
        .map(move |(i, p)| (format!("{base}.{field}[{i}]"), p))
}

/// One granted `path` (at `key`): inside the child's `home` is fine;
/// otherwise it must not overlap the state directory nor a guarded path.
fn check_grant(
    ctx: &Ctx,
    key: &str,
    path: &Path,
    home: &Path,
    server: &ServerConfig,
    guarded: &[(PathBuf, &'static str)],
) -> Result<()> {
    if path.starts_with(home) {
        return Ok(());
    }
    let state = server.state_directory.as_ref().map(|s| {
        (
            s.clone(),
            "the state directory (only the child's home in it is granted)",
        )
    });
    let hit = guarded
        .iter()
        .cloned()
        .chain(state)
        .find(|(p, _)| overlaps(path, p));
    match hit {
        None => Ok(()),
        Some((p, what)) => Err(ctx.err(
            key,
            format!(
                "{} would reach {} ({}), which a sandboxed child must not; \
                 grant a narrower path",
                path.display(),
                p.display(),
                what
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Transport};
    use crate::sandbox::Mode;
    use std::ffi::OsString;
    use std::path::Path;

    fn load(upstream: &str) -> Result<Config, String> {
        let env = |n: &str| match n {
            "CREDENTIALS_DIRECTORY" => Some(OsString::from("/srv/creds")),
            _ => None,
        };
        let text = format!(
            "[server]\nstate_directory = \"/var/lib/mcp-edge\"\n\
             [audit]\npath = \"/var/log/mcp-edge/audit.log\"\n\
             [[upstream]]\nname = \"fs\"\ncommand = \"npx\"\n{upstream}"
        );
        Config::from_toml_str_with_env(&text, Path::new("/etc/mcp-edge/config.toml"), &env)
            .map_err(|e| e.to_string())
    }

    fn spec(cfg: &Config) -> &crate::sandbox::Spec {
        match &cfg.upstreams[0].transport {
            Transport::Stdio { sandbox, .. } => sandbox,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_default_is_strict_with_a_home_in_the_state_directory() {
        let cfg = load("").unwrap();
        let s = spec(&cfg);
        assert_eq!(s.mode, Mode::Strict);
        assert!(s.network && s.paths_rw.is_empty() && s.paths_ro.is_empty());
        assert_eq!(s.home, Path::new("/var/lib/mcp-edge/children/fs"));
        let shown = cfg.render_masked();
        assert!(shown.contains("sandbox = \"strict\""), "{shown}");
        assert!(
            shown.contains("# child home: /var/lib/mcp-edge/children/fs"),
            "{shown}"
        );
    }

    #[test]
    fn keys_are_read() {
        let cfg = load(
            "sandbox = \"strict\"\npaths_rw = [\"/srv/data\"]\npaths_ro = [\"/home/pi/venv\"]\n\
             network = false\ncwd = \"/srv/data\"\n",
        )
        .unwrap();
        let s = spec(&cfg);
        assert_eq!(s.paths_rw, [Path::new("/srv/data")]);
        assert_eq!(s.paths_ro, [Path::new("/home/pi/venv")]);
        assert!(!s.network);
        assert_eq!(spec(&load("sandbox = \"off\"\n").unwrap()).mode, Mode::Off);
    }

    #[test]
    fn grants_reaching_protected_paths_are_refused_naming_the_key() {
        for (line, key, what) in [
            (
                "paths_ro = [\"/etc/mcp-edge\"]",
                "upstream[0].paths_ro[0]",
                "/etc/mcp-edge",
            ),
            (
                "paths_ro = [\"/\"]",
                "upstream[0].paths_ro[0]",
                "would reach",
            ),
            (
                "paths_rw = [\"/var/lib/mcp-edge\"]",
                "upstream[0].paths_rw[0]",
                "state directory",
            ),
            (
                "paths_rw = [\"/var/lib/mcp-edge/children/other\"]",
                "upstream[0].paths_rw[0]",
                "state directory",
            ),
            (
                "paths_ro = [\"/srv\"]",
                "upstream[0].paths_ro[0]",
                "CREDENTIALS_DIRECTORY",
            ),
            (
                "paths_ro = [\"/var/log/mcp-edge\"]",
                "upstream[0].paths_ro[0]",
                "audit log",
            ),
            (
                "paths_ro = [\"/run/user/0\"]",
                "upstream[0].paths_ro[0]",
                "/run",
            ),
            ("cwd = \"/var/lib\"", "upstream[0].cwd", "would reach"),
            (
                "paths_ro = [\"relative\"]",
                "upstream[0].paths_ro[0]",
                "absolute",
            ),
            (
                "paths_ro = [\"/srv/../etc\"]",
                "upstream[0].paths_ro[0]",
                "absolute",
            ),
            (
                "sandbox = \"loose\"",
                "upstream[0].sandbox",
                "\"strict\" or \"off\"",
            ),
            (
                "sandbox = \"off\"\npaths_ro = [\"/srv\"]",
                "upstream[0].sandbox",
                "need \"strict\"",
            ),
        ] {
            let e = load(&format!("{line}\n")).unwrap_err();
            assert!(e.contains(key) && e.contains(what), "{line}: {e}");
        }
        // Inside the child's own home is fine; so is "off" with a protected cwd.
        load("paths_rw = [\"/var/lib/mcp-edge/children/fs/cache\"]\n").unwrap();
        load("sandbox = \"off\"\ncwd = \"/var/lib/mcp-edge\"\n").unwrap();
    }

    #[test]
    fn env_keys_of_mcp_edge_are_refused() {
        for name in [
            "CREDENTIALS_DIRECTORY",
            "NOTIFY_SOCKET",
            "WATCHDOG_USEC",
            "LISTEN_FDS",
            "MCP_EDGE_CHILD",
        ] {
            let e = load(&format!("env = {{ {name} = \"x\" }}\n")).unwrap_err();
            assert!(e.contains(&format!("upstream[0].env.{name}")), "{e}");
        }
    }

    #[test]
    fn sandbox_keys_belong_to_stdio() {
        let text =
            "[[upstream]]\nname = \"h\"\nurl = \"http://127.0.0.1:1/mcp\"\nnetwork = false\n";
        let e = Config::from_toml_str(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("upstream[0].network") && e.contains("stdio"),
            "{e}"
        );
    }
}
