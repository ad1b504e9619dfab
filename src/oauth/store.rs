//! The token file of one upstream, `<state_directory>/oauth/NAME.json`:
//! what a login or a token request gave (access and refresh token, expiry,
//! the authorization server and the client registered there), so that a
//! restart needs no token request and `mcp-edge login` reaches the running
//! gateway. Mode 0600 in a 0700 directory, written atomically (a temporary
//! file, fsync, rename, fsync of the directory), never logged.

use crate::config::Secret;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What the file holds. Unknown fields are ignored (a file written by a
/// newer mcp-edge still gives its tokens to an older one).
#[derive(Serialize, Deserialize, Default, Clone)]
pub struct Stored {
    /// The access token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    /// When it expires, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// When it was issued, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<u64>,
    /// The refresh token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// The scopes granted (space-separated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The issuer the tokens (and the registered client) belong to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Its token endpoint (used after a restart when discovery fails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    /// Where the protected-resource metadata was (a challenge's
    /// `resource_metadata`), for discovery after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_metadata: Option<String>,
    /// A client registered dynamically or by metadata document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Its secret, if registration gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Its `token_endpoint_auth_method`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_method: Option<String>,
    /// Scopes the upstream asked for (403 `insufficient_scope`) that only a
    /// new login can grant: the next `mcp-edge login` asks for them too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wanted_scope: Option<String>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masked = |o: &Option<String>| o.as_ref().map(|_| Secret::new(()));
        f.debug_struct("Stored")
            .field("access_token", &masked(&self.access_token))
            .field("expires_at", &self.expires_at)
            .field("refresh_token", &masked(&self.refresh_token))
            .field("scope", &self.scope)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &masked(&self.client_secret))
            .finish_non_exhaustive()
    }
}

/// Why the file could not be read or written (the path named, never what it holds).
#[derive(Debug, thiserror::Error)]
#[error("token file {path}: {reason}")]
pub struct StoreError {
    path: String,
    reason: String,
}

/// The token file of upstream `name` under `state_directory`.
pub fn path(state_directory: &Path, name: &str) -> PathBuf {
    state_directory.join("oauth").join(format!("{name}.json"))
}

/// Reads the file; `Ok(None)` when there is none.
pub fn load(path: &Path) -> Result<Option<Stored>, StoreError> {
    let err = |reason: String| StoreError {
        path: path.display().to_string(),
        reason,
    };
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| err(format!("not a token file ({})", e.classify_name()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(e.to_string())),
    }
}

/// Writes `stored` atomically with mode 0600 (the directory 0700).
pub fn save(path: &Path, stored: &Stored) -> Result<(), StoreError> {
    let err = |reason: String| StoreError {
        path: path.display().to_string(),
        reason,
    };
    let dir = path
        .parent()
        .ok_or_else(|| err("no parent directory".into()))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| err(format!("creating {}: {e}", dir.display())))?;
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(stored).map_err(|e| err(e.to_string()))?;
    // A leftover of an interrupted write (perhaps another user's) goes first.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| err(format!("creating {}: {e}", tmp.display())))?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| err(format!("writing {}: {e}", tmp.display())))?;
    drop(f);
    hand_over(dir, &tmp)
        .map_err(|e| err(format!("changing the owner of {}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(|e| err(format!("renaming into place: {e}")))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Run as root (`sudo mcp-edge login`), the `oauth` directory and the file
/// are given to the owner of the state directory above them: the service's
/// user (systemd's `DynamicUser=` owns its `StateDirectory=`), which must
/// read them. Otherwise nothing changes.
fn hand_over(dir: &Path, file: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let Some(state) = dir.parent() else {
        return Ok(());
    };
    let owner = std::fs::metadata(state)?;
    if owner.uid() == 0 {
        return Ok(());
    }
    std::os::unix::fs::chown(dir, Some(owner.uid()), Some(owner.gid()))?;
    std::os::unix::fs::chown(file, Some(owner.uid()), Some(owner.gid()))
}

/// The file's modification time (`None` without a file): a login by
/// `mcp-edge login` shows as a change.
pub fn mtime(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

trait Classify {
    fn classify_name(&self) -> &'static str;
}

impl Classify for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O error",
            serde_json::error::Category::Syntax => "bad JSON",
            serde_json::error::Category::Data => "unexpected fields",
            serde_json::error::Category::Eof => "truncated",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn saved_atomically_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "crm");
        assert!(load(&p).unwrap().is_none());
        let s = Stored {
            access_token: Some("at-secret".into()),
            refresh_token: Some("rt-secret".into()),
            expires_at: Some(100),
            ..Stored::default()
        };
        save(&p, &s).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(p.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dmode, 0o700);
        let back = load(&p).unwrap().unwrap();
        assert_eq!(back.refresh_token.as_deref(), Some("rt-secret"));
        assert!(!p.with_extension("json.tmp").exists());
        let shown = format!("{back:?}");
        assert!(
            !shown.contains("at-secret") && !shown.contains("rt-secret"),
            "{shown}"
        );
        std::fs::write(&p, "{").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("truncated") || e.contains("bad JSON"), "{e}");
    }
}
