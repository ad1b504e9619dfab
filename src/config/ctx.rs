//! The validation context every check takes: the file errors point at, the
//! environment used for expansion, and the board profile whose defaults
//! apply. Also the key path spelling shared by the loaders.

use std::ffi::OsString;
use std::path::Path;

use super::defaults;
use super::{Board, ConfigError, ServerConfig, Transport, UpstreamConfig};

/// Every check in `config` fails with a [`ConfigError`].
pub(super) type Result<T> = std::result::Result<T, ConfigError>;

/// Where errors point: the file, plus the environment used for expansion.
pub(super) struct Ctx<'a> {
    path: &'a Path,
    env: &'a dyn Fn(&str) -> Option<OsString>,
    board: Option<&'a Board>,
    /// Notes made while checking keys ([`Ctx::note`]), for [`super::Config::notes`].
    notes: std::cell::RefCell<Vec<String>>,
    /// Every secret file named so far, with its key ([`Ctx::secret`]), for
    /// the sandbox's protected paths.
    secrets: std::cell::RefCell<Vec<(std::path::PathBuf, String)>>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(path: &'a Path, env: &'a dyn Fn(&str) -> Option<OsString>) -> Self {
        Ctx {
            path,
            env,
            board: None,
            notes: Default::default(),
            secrets: Default::default(),
        }
    }

    /// Keeps `note` for `check-config` (and the warning at start).
    pub(super) fn note(&self, note: String) {
        self.notes.borrow_mut().push(note);
    }

    /// Keeps the secret file `path` named at `key`: no sandboxed child may
    /// reach it (`config::sandbox`).
    pub(super) fn secret(&self, key: &str, path: &Path) {
        self.secrets
            .borrow_mut()
            .push((path.to_path_buf(), key.to_owned()));
    }

    /// The secret files named so far.
    pub(super) fn secrets(&self) -> Vec<(std::path::PathBuf, String)> {
        self.secrets.borrow().clone()
    }

    /// The notes made so far, taken.
    pub(super) fn take_notes(&self) -> Vec<String> {
        self.notes.take()
    }

    /// Defaults come from `board`'s profile where it sets them.
    pub(super) fn with_board(mut self, board: Option<&'a Board>) -> Self {
        self.board = board;
        self
    }

    /// The board profile in effect, if any.
    pub(super) fn board(&self) -> Option<&'a Board> {
        self.board
    }

    /// `[server]` defaults: the board profile's, else the built-in ones.
    pub(super) fn server_defaults(&self) -> ServerConfig {
        match self.board {
            Some(b) => b.server.clone(),
            None => defaults::server(),
        }
    }

    /// An enabled upstream named `name` with every other key at its default
    /// (the board profile's where it sets one).
    pub(super) fn upstream_defaults(&self, name: String, transport: Transport) -> UpstreamConfig {
        match self.board {
            Some(b) => UpstreamConfig {
                prefix: name.clone(),
                name,
                enabled: true,
                required: false,
                transport,
                ..b.upstream.clone()
            },
            None => defaults::upstream(name, transport),
        }
    }

    pub(super) fn path(&self) -> &Path {
        self.path
    }

    /// The environment variable `name`, from the injected lookup.
    pub(super) fn env_var(&self, name: &str) -> Option<OsString> {
        (self.env)(name)
    }

    pub(super) fn err(&self, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            key: key.into(),
            message: message.into(),
        }
    }

    pub(super) fn parse_err(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Parse {
            path: self.path.to_path_buf(),
            message: message.into(),
        }
    }
}

impl ConfigError {
    /// The error for a board name that is not shipped.
    pub fn unknown_board(name: &str) -> ConfigError {
        ConfigError::UnknownBoard {
            name: name.to_string(),
            known: Board::names().collect::<Vec<_>>().join(", "),
        }
    }

    /// Key path the error is about (`upstream[0].url`), if it is about a key.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// `s` as one key path segment: bare when it is `[A-Za-z0-9_-]+`, else quoted.
pub(super) fn key_segment(s: &str) -> String {
    if !s.is_empty() && s.chars().all(is_name_char) {
        s.to_owned()
    } else {
        let escaped = s.replace('\\', "\\\\").replace('"', "\\\"");
        format!("\"{escaped}\"")
    }
}

pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_segments_quote_when_needed() {
        assert_eq!(key_segment("fs-1_a"), "fs-1_a");
        assert_eq!(key_segment("my server"), "\"my server\"");
        assert_eq!(key_segment(""), "\"\"");
    }
}
