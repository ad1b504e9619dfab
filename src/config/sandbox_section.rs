//! The sandbox keys of a stdio upstream (`sandbox`, `paths_rw`,
//! `paths_ro`, `network`; TOML only: `mcpServers` entries get the
//! default) and, once the whole file is read, each child's home and the
//! check that no granted path reaches what the sandbox protects
//! ([`crate::sandbox`]): the config directory, the state directory beyond
//! the child's home, `$CREDENTIALS_DIRECTORY`, the TLS certificate and
//! every secret file (`tls_key`, `token_file`, `bearer_token_file`,
//! `client_secret_file`, `private_key_file`), the audit log, the admin
//! socket, `/run` and `/etc/mcp-edge`, all compared canonical. The same
//! list goes into each child's [`Spec::protected`], around which the
//! default grants are split.

use std::path::{Component, Path, PathBuf};

use super::ctx::{Ctx, Result};
use super::toml_raw::RawUpstream;
use super::{AuditConfig, AuditSink, ServerConfig, Transport, UpstreamConfig};
use crate::sandbox::{canonical, overlaps, Mode, Spec, NEVER};

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
        protected: Vec::new(),
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

/// What no grant may reach, with what it is (for the error), canonical
/// ([`canonical`]: a relative config path taken from the current
/// directory, symlinks and `..` resolved, so neither dodges the check).
/// The state directory is not in it: the child's home lies there.
fn protected(
    ctx: &Ctx,
    server: &ServerConfig,
    audit: Option<&AuditConfig>,
) -> Vec<(PathBuf, String)> {
    let mut out: Vec<(PathBuf, String)> = NEVER
        .iter()
        .map(|p| (PathBuf::from(p), "never granted".to_owned()))
        .collect();
    let config = canonical(ctx.path());
    let named = config.parent().map(Path::to_path_buf);
    // The directory the config is named in, and the one it lies in when
    // the name is a symlink.
    let given = canonical(ctx.path().parent().unwrap_or(Path::new(".")));
    for dir in [Some(given), named].into_iter().flatten() {
        out.push((dir, "the config directory".to_owned()));
    }
    if let Some(creds) = ctx
        .env_var("CREDENTIALS_DIRECTORY")
        .filter(|c| !c.is_empty())
    {
        out.push((
            canonical(Path::new(&creds)),
            "$CREDENTIALS_DIRECTORY".to_owned(),
        ));
    }
    if let Some(tls) = &server.tls {
        out.push((canonical(&tls.cert), "server.tls_cert".to_owned()));
    }
    for (path, key) in ctx.secrets() {
        out.push((canonical(&path), key));
    }
    if let Some(AuditSink::File(path)) = audit.map(|a| &a.sink) {
        out.push((canonical(path), "the audit log".to_owned()));
    }
    if let Some(socket) = &server.admin_socket {
        out.push((canonical(socket), "server.admin_socket".to_owned()));
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

/// Fills in each stdio child's home and protected paths, and refuses a
/// grant (`cwd`, `paths_rw`, `paths_ro` of a strict upstream) that
/// reaches a protected path; `bases[i]` is the key path of `upstreams[i]`.
pub(super) fn resolve(
    ctx: &Ctx,
    bases: &[String],
    server: &ServerConfig,
    audit: Option<&AuditConfig>,
    upstreams: &mut [UpstreamConfig],
) -> Result<()> {
    let stdio = |u: &UpstreamConfig| matches!(u.transport, Transport::Stdio { .. });
    if !upstreams.iter().any(stdio) {
        return Ok(());
    }
    let guarded = protected(ctx, server, audit);
    let state = server.state_directory.as_ref().map(|s| {
        (
            canonical(s),
            "the state directory (only the child's home in it is granted)".to_owned(),
        )
    });
    let all: Vec<(PathBuf, String)> = state.into_iter().chain(guarded).collect();
    for (base, up) in bases.iter().zip(upstreams) {
        let Transport::Stdio { sandbox, cwd, .. } = &mut up.transport else {
            continue;
        };
        sandbox.home = home(ctx, server, &up.name);
        sandbox.protected = all.iter().map(|(p, _)| p.clone()).collect();
        if sandbox.mode == Mode::Off {
            continue;
        }
        let keyed = cwd
            .iter()
            .map(|c| (format!("{base}.cwd"), c))
            .chain(indexed(base, "paths_rw", &sandbox.paths_rw))
            .chain(indexed(base, "paths_ro", &sandbox.paths_ro));
        for (key, path) in keyed {
            check_grant(ctx, &key, path, &sandbox.home, &all)?;
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
/// otherwise it must not overlap a guarded path (the state directory
/// among them); both compared canonical.
fn check_grant(
    ctx: &Ctx,
    key: &str,
    path: &Path,
    home: &Path,
    guarded: &[(PathBuf, String)],
) -> Result<()> {
    let real = canonical(path);
    if real.starts_with(canonical(home)) {
        return Ok(());
    }
    match guarded.iter().find(|(p, _)| overlaps(&real, p)) {
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
    fn a_relative_config_path_still_protects_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let real = crate::sandbox::canonical(dir.path());
        let link = tempfile::tempdir().unwrap();
        let via = link.path().join("via");
        std::os::unix::fs::symlink(&real, &via).unwrap();
        let text = format!(
            "[[upstream]]\nname = \"fs\"\ncommand = \"npx\"\npaths_ro = [{:?}]\n",
            via.join("sub")
        );
        // A config named relative to the current directory, which lies in
        // the granted one through a symlink.
        let here = std::env::current_dir().unwrap();
        let config = pathdiff(&real.join("config.toml"), &here);
        let e = Config::from_toml_str(&text, &config)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the config directory"), "{e}");
        let s = Config::from_toml_str("[[upstream]]\nname = \"fs\"\ncommand = \"npx\"\n", &config)
            .unwrap();
        assert!(
            spec(&s).protected.contains(&real),
            "{:?}",
            spec(&s).protected
        );
    }

    /// `to` relative to `from` (`../../tmp/x`).
    fn pathdiff(to: &Path, from: &Path) -> std::path::PathBuf {
        let up = from.components().count() - 1;
        let mut out: std::path::PathBuf = (0..up).map(|_| "..").collect();
        out.push(to.strip_prefix("/").unwrap());
        out
    }

    #[test]
    fn secret_files_are_protected() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("client.token");
        std::fs::write(&token, "tok-0123456789abcdefghijklmnopqrstuv").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let text = format!(
            "[[upstream]]\nname = \"fs\"\ncommand = \"npx\"\npaths_ro = [{:?}]\n\
             [[client]]\nname = \"a\"\ntoken_file = {token:?}\n",
            dir.path()
        );
        let e = Config::from_toml_str(&text, Path::new("/etc/mcp-edge/config.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("client[0].token_file") && e.contains("would reach"),
            "{e}"
        );
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
