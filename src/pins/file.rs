//! The pins file, `<state_directory>/tool-pins.json`:
//! `{"version": 1, "upstreams": {"<upstream>": {"<tool>": "<sha256 hex>"}}}`.
//! Read once at start (at most [`limits::PINS_FILE_MAX_BYTES`]), written
//! whole and atomically (temporary file, fsync, rename, fsync of the
//! directory), as `supervisor::persist` writes the backoff state.

use super::digest::Digest;
use crate::limits;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// File name inside the state directory.
pub const FILE_NAME: &str = "tool-pins.json";

/// Pinned digests: upstream name → tool name → digest.
pub(super) type Table = BTreeMap<String, BTreeMap<String, Digest>>;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileV1 {
    version: u32,
    upstreams: BTreeMap<String, BTreeMap<String, String>>,
}

/// What reading the file found.
pub(super) enum Loaded {
    /// No file: nothing was pinned yet.
    Missing,
    /// The pins.
    Read(Table),
    /// A file that is there but cannot be read (permissions, I/O error, a
    /// directory in its place): why. Not to be replaced: its pins may be fine.
    Unreadable(String),
    /// A file read whole that cannot be trusted (corrupt, unknown version,
    /// too large): why.
    Damaged(String),
}

/// Reads the pins file at `path`.
pub(super) fn load(path: &Path) -> Loaded {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Missing,
        Err(e) => return Loaded::Unreadable(format!("cannot read it: {e}")),
    };
    let mut bytes = Vec::new();
    let cap = limits::PINS_FILE_MAX_BYTES as u64 + 1;
    if let Err(e) = file.take(cap).read_to_end(&mut bytes) {
        return Loaded::Unreadable(format!("cannot read it: {e}"));
    }
    if bytes.len() > limits::PINS_FILE_MAX_BYTES {
        return Loaded::Damaged(format!(
            "larger than {} bytes (limits::PINS_FILE_MAX_BYTES)",
            limits::PINS_FILE_MAX_BYTES
        ));
    }
    match decode(&bytes) {
        Ok(t) => Loaded::Read(t),
        Err(why) => Loaded::Damaged(why),
    }
}

fn decode(bytes: &[u8]) -> Result<Table, String> {
    let f: FileV1 = serde_json::from_slice(bytes).map_err(|e| format!("not a pins file: {e}"))?;
    if f.version != 1 {
        return Err(format!("unknown version {}", f.version));
    }
    let mut table = Table::new();
    for (upstream, tools) in f.upstreams {
        let mut pins = BTreeMap::new();
        for (tool, hex) in tools {
            let Some(d) = Digest::from_hex(&hex) else {
                return Err(format!(
                    "upstream {upstream:?}, tool {:?}: {hex:?} is not a SHA-256 hex digest",
                    crate::logline::printable(&tool)
                ));
            };
            pins.insert(tool, d);
        }
        table.insert(upstream, pins);
    }
    Ok(table)
}

/// The file's bytes for `table` (pretty JSON, sorted: diffable by hand).
pub(super) fn encode(table: &Table) -> Vec<u8> {
    let f = FileV1 {
        version: 1,
        upstreams: table
            .iter()
            .map(|(u, tools)| {
                let tools = tools.iter().map(|(t, d)| (t.clone(), d.hex())).collect();
                (u.clone(), tools)
            })
            .collect(),
    };
    let mut out = serde_json::to_vec_pretty(&f).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Writes `bytes` to `path` atomically: a reader (or a crash) sees the old
/// file or the new one, never a part.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    // The rename itself survives a power cut only once the directory is synced.
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_cannot_trust() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert!(matches!(load(&path), Loaded::Missing));
        let d = super::super::digest::of(&serde_json::json!({"name": "t"}));
        let mut t = Table::new();
        t.entry("up".into()).or_default().insert("t".into(), d);
        t.insert("empty".into(), BTreeMap::new());
        write_atomically(&path, &encode(&t)).unwrap();
        match load(&path) {
            Loaded::Read(back) => assert_eq!(back, t),
            _ => panic!("not read back"),
        }
        for bad in [
            &b"{not json"[..],
            br#"{"version": 2, "upstreams": {}}"#,
            br#"{"version": 1, "upstreams": {"up": {"t": "abc"}}}"#,
            br#"{"version": 1, "upstreams": {}, "extra": 1}"#,
        ] {
            std::fs::write(&path, bad).unwrap();
            assert!(matches!(load(&path), Loaded::Damaged(_)));
        }
    }
}
