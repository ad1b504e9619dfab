//! Board profiles (`board/<name>/profile.toml`, embedded in the binary):
//! capacity defaults sized for one board, and the heap budget that
//! `mcp-edge check-config --board NAME` holds the worst case to.
//!
//! A profile only changes *defaults*: a key written in the config file
//! always wins. Profile shape (every key but `heap_budget_bytes` optional):
//!
//! ```toml
//! description = "Raspberry Pi Zero 2 W (512 MiB)"
//! heap_budget_bytes = 33554432        # mcp-edge's own worst-case live heap, bytes
//! [server]                            # session_capacity, session_idle_timeout,
//! session_capacity = 64               # session_min_idle_before_evict, keepalive,
//!                                     # max_connections, max_body_bytes,
//!                                     # sse_queue_depth, max_pending_server_requests
//! [upstream_defaults]                 # call_timeout, max_in_flight, max_result_bytes,
//! max_in_flight = 8                   # max_catalog_entries, max_catalog_bytes
//! ```
//!
//! Values are validated exactly like the same keys in a config file.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ctx::{Ctx, Result};
use super::server::server;
use super::toml_raw::{RawDuration, RawInt, RawServer, RawUpstream};
use super::upstream_section::upstream;
use super::values::int;
use super::{Board, ConfigError};
use crate::limits;

/// The profiles shipped in `board/`, by name.
const PROFILES: [(&str, &str); 4] = [
    (
        "rpi-zero-2w",
        include_str!("../../board/rpi-zero-2w/profile.toml"),
    ),
    (
        "rpi4-2gb",
        include_str!("../../board/rpi4-2gb/profile.toml"),
    ),
    (
        "rpi5-8gb",
        include_str!("../../board/rpi5-8gb/profile.toml"),
    ),
    (
        "generic-arm64",
        include_str!("../../board/generic-arm64/profile.toml"),
    ),
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBoard {
    description: Option<String>,
    heap_budget_bytes: Option<RawInt>,
    server: Option<RawBoardServer>,
    upstream_defaults: Option<RawBoardUpstream>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBoardServer {
    session_capacity: Option<RawInt>,
    session_idle_timeout: Option<RawDuration>,
    session_min_idle_before_evict: Option<RawDuration>,
    keepalive: Option<RawDuration>,
    max_connections: Option<RawInt>,
    max_body_bytes: Option<RawInt>,
    sse_queue_depth: Option<RawInt>,
    max_pending_server_requests: Option<RawInt>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBoardUpstream {
    call_timeout: Option<RawDuration>,
    max_in_flight: Option<RawInt>,
    max_result_bytes: Option<RawInt>,
    max_catalog_entries: Option<RawInt>,
    max_catalog_bytes: Option<RawInt>,
}

impl Board {
    /// Names of the shipped profiles.
    pub fn names() -> impl Iterator<Item = &'static str> {
        PROFILES.iter().map(|(n, _)| *n)
    }

    /// The shipped profile `name`.
    ///
    /// # Errors
    /// [`ConfigError::UnknownBoard`] for an unknown name (the message lists
    /// the known ones); a profile that fails validation names
    /// its file and key (a build defect: tests load every profile).
    pub fn named(name: &str) -> std::result::Result<Board, ConfigError> {
        let Some((_, text)) = PROFILES.iter().find(|(n, _)| *n == name) else {
            return Err(ConfigError::unknown_board(name));
        };
        let path = PathBuf::from(format!("board/{name}/profile.toml"));
        Board::parse(name, text, &path)
    }

    fn parse(name: &str, text: &str, path: &Path) -> Result<Board> {
        let no_env = |_: &str| -> Option<OsString> { None };
        let ctx = Ctx::new(path, &no_env);
        let raw: RawBoard = toml::from_str(text).map_err(|e| ctx.parse_err(e.to_string()))?;
        let heap_budget_bytes = int(
            &ctx,
            "heap_budget_bytes",
            raw.heap_budget_bytes,
            (limits::MIN_HEAP_BUDGET_BYTES, limits::MAX_HEAP_BUDGET_BYTES),
            0,
        )?;
        if heap_budget_bytes == 0 {
            return Err(ctx.err("heap_budget_bytes", "missing; every profile needs a budget"));
        }
        let s = raw.server.unwrap_or_default();
        let u = raw.upstream_defaults.unwrap_or_default();
        Ok(Board {
            name: name.to_owned(),
            description: raw.description.unwrap_or_else(|| name.to_owned()),
            heap_budget_bytes,
            server: server(&ctx, s.into())?,
            upstream: upstream(&ctx, "upstream_defaults", u.into())?,
        })
    }
}

impl From<RawBoardServer> for RawServer {
    /// The profile's `[server]` keys as a config file's; the rest unset.
    fn from(s: RawBoardServer) -> RawServer {
        RawServer {
            session_capacity: s.session_capacity,
            session_idle_timeout: s.session_idle_timeout,
            session_min_idle_before_evict: s.session_min_idle_before_evict,
            keepalive: s.keepalive,
            max_connections: s.max_connections,
            max_body_bytes: s.max_body_bytes,
            sse_queue_depth: s.sse_queue_depth,
            max_pending_server_requests: s.max_pending_server_requests,
            ..RawServer::default()
        }
    }
}

impl From<RawBoardUpstream> for RawUpstream {
    /// The profile's `[upstream_defaults]` as a builtin upstream named
    /// `defaults`; the rest unset.
    fn from(u: RawBoardUpstream) -> RawUpstream {
        RawUpstream {
            name: Some("defaults".into()),
            transport: Some("builtin".into()),
            call_timeout: u.call_timeout,
            max_in_flight: u.max_in_flight,
            max_result_bytes: u.max_result_bytes,
            max_catalog_entries: u.max_catalog_entries,
            max_catalog_bytes: u.max_catalog_bytes,
            ..RawUpstream::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_profile_is_valid() {
        for name in Board::names() {
            let b = Board::named(name).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                b.heap_budget_bytes >= limits::MIN_HEAP_BUDGET_BYTES,
                "{name}"
            );
        }
    }

    #[test]
    fn unknown_board_lists_the_known_ones() {
        let e = Board::named("pi-zero").unwrap_err().to_string();
        assert!(e.contains("unknown board \"pi-zero\""), "{e}");
        assert!(e.contains("rpi-zero-2w") && e.contains("rpi5-8gb"), "{e}");
    }

    #[test]
    fn a_bad_profile_names_its_key() {
        let e = Board::parse(
            "x",
            "heap_budget_bytes = 33554432\n[server]\nsession_capacity = 0\n",
            Path::new("board/x/profile.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("board/x/profile.toml: server.session_capacity"),
            "{e}"
        );
        let e = Board::parse(
            "x",
            "heap_budget_bytes = 1\n",
            Path::new("board/x/profile.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("heap_budget_bytes"), "{e}");
    }
}
