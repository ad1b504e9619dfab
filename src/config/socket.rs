//! `server.admin_socket`: the operator socket's path (`http::operator`),
//! its default from systemd's `RuntimeDirectory=` or the state directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::ctx::{Ctx, Result};
use super::values::absolute_dir;
use crate::limits;

/// Environment variable that defaults `admin_socket`'s directory
/// (systemd's `RuntimeDirectory=` sets it).
const RUNTIME_DIRECTORY_VAR: &str = "RUNTIME_DIRECTORY";

/// `admin_socket`: an absolute path, `"off"`, or unset: the default of
/// [`admin_socket_default`].
pub(super) fn admin_socket(
    ctx: &Ctx,
    raw: Option<&str>,
    state: Option<&Path>,
) -> Result<Option<PathBuf>> {
    let key = "server.admin_socket";
    let path = match raw {
        Some("off") => return Ok(None),
        Some("") => return Err(ctx.err(key, "must not be empty (\"off\": no operator socket)")),
        Some(s) => absolute_dir(s).map_err(|m| ctx.err(key, format!("{s:?} {m}")))?,
        None => match admin_socket_default(&|n| ctx.env_var(n), state) {
            Ok(p) => return Ok(p),
            Err(m) => return Err(ctx.err(key, m)),
        },
    };
    socket_path(&path).map_err(|m| ctx.err(key, m))?;
    Ok(Some(path))
}

/// The default operator socket: `admin.sock` in the first path of
/// `$RUNTIME_DIRECTORY` (systemd's `RuntimeDirectory=`), else in
/// `state`; `None` when neither is known. An error (a relative runtime
/// directory, a path too long for a socket) completes "unset, and …".
pub(super) fn admin_socket_default(
    env: &dyn Fn(&str) -> Option<OsString>,
    state: Option<&Path>,
) -> std::result::Result<Option<PathBuf>, String> {
    let runtime = env(RUNTIME_DIRECTORY_VAR).and_then(|v| {
        let v = v.into_string().ok()?;
        let first = v.split(':').next().unwrap_or_default().to_owned();
        (!first.is_empty()).then_some(first)
    });
    let dir = match runtime {
        Some(r) => absolute_dir(&r)
            .map_err(|m| format!("unset, and the first path of RUNTIME_DIRECTORY, {r:?}, {m}"))?,
        None => match state {
            Some(s) => s.to_path_buf(),
            None => return Ok(None),
        },
    };
    let path = dir.join(limits::ADMIN_SOCKET_NAME);
    socket_path(&path).map_err(|m| format!("unset, and the default {m}; set it"))?;
    Ok(Some(path))
}

/// A Unix socket path fits `sun_path` (unix(7): 108 bytes with its NUL).
fn socket_path(p: &Path) -> std::result::Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let n = p.as_os_str().as_bytes().len();
    if n >= limits::UNIX_SOCKET_PATH_MAX {
        return Err(format!(
            "{} is {n} bytes, too long for a Unix socket (at most {})",
            p.display(),
            limits::UNIX_SOCKET_PATH_MAX - 1
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use std::ffi::OsString;
    use std::path::Path;

    const UP: &str = "[[upstream]]\nname = \"a\"\ncommand = \"a\"\n";

    fn load(server: &str, runtime: Option<&'static str>) -> super::Result<Config> {
        let env = move |k: &str| match k {
            "RUNTIME_DIRECTORY" => runtime.map(OsString::from),
            _ => None,
        };
        let text = format!("[server]\n{server}\n{UP}");
        Config::from_toml_str_with_env(&text, Path::new("c.toml"), &env)
    }

    fn socket(server: &str, runtime: Option<&'static str>) -> Option<std::path::PathBuf> {
        load(server, runtime).unwrap().server.admin_socket
    }

    #[test]
    fn the_default_is_the_runtime_directory_then_the_state_directory() {
        let state = "state_directory = \"/var/lib/e\"";
        let run = Some("/run/mcp-edge:/run/x");
        assert_eq!(
            socket(state, run).unwrap(),
            Path::new("/run/mcp-edge/admin.sock")
        );
        assert_eq!(
            socket(state, None).unwrap(),
            Path::new("/var/lib/e/admin.sock")
        );
        assert_eq!(socket("", None), None, "no directory known: no socket");
        let set = "admin_socket = \"/srv/op.sock\"";
        assert_eq!(socket(set, run).unwrap(), Path::new("/srv/op.sock"));
        assert_eq!(socket("admin_socket = \"off\"", run), None);
        let out = load(state, None).unwrap().render_masked();
        assert!(
            out.contains("admin_socket = \"/var/lib/e/admin.sock\""),
            "{out}"
        );
        let off = load("admin_socket = \"off\"", None)
            .unwrap()
            .render_masked();
        assert!(off.contains("admin_socket = \"off\""), "{off}");
    }

    #[test]
    fn bad_paths_name_the_key() {
        let long = format!("admin_socket = \"/{}\"", "s".repeat(120));
        for bad in [
            "admin_socket = \"rel.sock\"",
            "admin_socket = \"\"",
            long.as_str(),
        ] {
            let e = load(bad, None).unwrap_err();
            assert_eq!(e.key(), Some("server.admin_socket"), "{bad}: {e}");
        }
        let e = load("", Some("relative")).unwrap_err();
        assert!(e.to_string().contains("RUNTIME_DIRECTORY"), "{e}");
    }
}
