//! A default grant split around what the sandbox protects. Landlock only
//! grants, and a grant covers everything beneath its path, so a default
//! grant (`/opt`, `/usr`, `/etc/ssl`) that holds a protected path (a config
//! in `/opt/mcp-edge`, a key in `/etc/ssl/private`) is replaced by its
//! entries, the one on the way to the protected path split in turn, down
//! to the protected path's parent; the protected path and what is beneath
//! it are never granted. Runs in the parent before the fork (it lists
//! directories), at most [`limits::SANDBOX_SPLIT_ENTRIES`] entries per
//! grant: past that the grant is left out.

use std::path::{Path, PathBuf};

use super::overlaps;
use crate::limits;

/// What becomes of one default grant.
#[derive(Debug, PartialEq, Eq)]
pub enum Split {
    /// Nothing protected beneath it: granted as it is.
    Whole,
    /// Granted as these paths instead (none of them reaches a protected
    /// path); `around` are the protected paths left out.
    Parts {
        /// The paths granted in its place.
        parts: Vec<PathBuf>,
        /// The protected paths beneath it.
        around: Vec<PathBuf>,
    },
    /// Not granted at all, and why (it lies in a protected path, or the
    /// split would list too many entries or failed).
    Refused(String),
}

/// `path` as the kernel resolves it: symlinks and `..` resolved for the
/// longest part that exists, the rest appended (a relative path is taken
/// from the current directory).
pub fn canonical(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut rest = Vec::new();
    let mut cur = abs.as_path();
    loop {
        if let Ok(real) = std::fs::canonicalize(cur) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return abs,
        }
    }
}

/// `grant` (a default grant's path) with every path of `protected`
/// (canonical, [`canonical`]) left out.
pub fn split(grant: &Path, protected: &[PathBuf]) -> Split {
    split_with(grant, protected, limits::SANDBOX_SPLIT_ENTRIES)
}

/// [`split`] listing at most `budget` entries.
pub(super) fn split_with(grant: &Path, protected: &[PathBuf], budget: usize) -> Split {
    let real = canonical(grant);
    let mut around: Vec<PathBuf> = protected
        .iter()
        .filter(|p| overlaps(&real, p))
        .cloned()
        .collect();
    // Each once, and none beneath another (the state directory hides its
    // admin socket).
    around.sort();
    around.dedup();
    let all = around.clone();
    around.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    if around.is_empty() {
        return Split::Whole;
    }
    if let Some(p) = around.iter().find(|p| real.starts_with(p)) {
        return Split::Refused(format!(
            "{} lies in {}, which a child must not reach",
            grant.display(),
            p.display()
        ));
    }
    let mut walk = Walk {
        protected,
        around: &around,
        parts: Vec::new(),
        left: budget,
    };
    match walk.dir(&real) {
        Ok(()) => Split::Parts {
            parts: walk.parts,
            around,
        },
        Err(why) => Split::Refused(format!(
            "{} holds {}, and splitting it around them failed: {why}",
            grant.display(),
            shown(&around)
        )),
    }
}

/// The protected paths, comma-separated.
pub(super) fn shown(paths: &[PathBuf]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    v.join(", ")
}

struct Walk<'a> {
    protected: &'a [PathBuf],
    around: &'a [PathBuf],
    parts: Vec<PathBuf>,
    left: usize,
}

impl Walk<'_> {
    /// Grants every entry of `dir` but the protected ones, recursing into
    /// those that hold one.
    fn dir(&mut self, dir: &Path) -> Result<(), String> {
        let list = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut entries = Vec::new();
        for e in list {
            let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
            if self.left == 0 {
                return Err(format!(
                    "more than {} entries to list",
                    limits::SANDBOX_SPLIT_ENTRIES
                ));
            }
            self.left -= 1;
            entries.push(e);
        }
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            if self.around.contains(&path) {
                continue;
            }
            let kind = e
                .file_type()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if kind.is_symlink() {
                // Granting a symlink grants its target: none that reaches
                // a protected path (nor a dangling one).
                let target = std::fs::canonicalize(&path);
                if target.is_ok_and(|t| !self.protected.iter().any(|p| overlaps(&t, p))) {
                    self.parts.push(path);
                }
            } else if kind.is_dir() && self.around.iter().any(|p| p.starts_with(&path)) {
                self.dir(&path)?;
            } else {
                self.parts.push(path);
            }
        }
        Ok(())
    }
}
