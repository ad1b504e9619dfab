//! The in-process upstream named `edge`: read-only MCP tools about the box
//! (Linux only).
//!
//! Tools (every name matches `[A-Za-z0-9_-]{1,64}`):
//!
//! | tool | source | structuredContent |
//! |---|---|---|
//! | `uptime` | `/proc/uptime` | `seconds`, `human` |
//! | `load_average` | `/proc/loadavg`, [`std::thread::available_parallelism`] | `load_1m`, `load_5m`, `load_15m`, `cpus` |
//! | `memory` | `/proc/meminfo` | `total_bytes`, `available_bytes`, `free_bytes`, `swap_total_bytes`, `swap_free_bytes` |
//! | `disk_usage` | `statvfs(3)` on argument `path` (default `/`) | `path`, `total_bytes`, `free_bytes`, `available_bytes`, `used_bytes` |
//! | `thermal` | `/sys/class/thermal/thermal_zone*/{type,temp}` | `zones` [{`zone`, `type`, `celsius`}], `note` |
//!
//! Results follow `CallToolResult` and the list follows `ListToolsResult` /
//! `Tool` in `../shared/spec/2025-11-25/schema.json`. A successful call has
//! one short human-readable text block plus `structuredContent` matching the
//! tool's `outputSchema`. A failure of the tool itself (unreadable or
//! unparsable file, missing path, hung mount) is a result with
//! `isError: true` and one text block saying what went wrong, without
//! `structuredContent` (so clients do not validate it against the
//! `outputSchema`). Only an unknown tool name or malformed arguments are
//! protocol errors ([`BuiltinError`], JSON-RPC -32602 at the caller).
//!
//! All file paths are resolved under a root directory (`/` in production) so
//! tests can feed fixture `/proc` and `/sys` trees.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Map, Value};

mod tools;

/// Server name reported for the `edge` upstream (`serverInfo.name`).
pub const SERVER_NAME: &str = "mcp-edge-builtin";
/// Server version reported for the `edge` upstream (`serverInfo.version`):
/// the crate version.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Server name and version to report for the `edge` upstream:
/// `("mcp-edge-builtin", env!("CARGO_PKG_VERSION"))`.
pub fn server_info() -> (&'static str, &'static str) {
    (SERVER_NAME, SERVER_VERSION)
}

/// A `tools/call` that cannot be run at all. The caller maps both variants
/// to JSON-RPC error -32602 (Invalid params). Failures while running a tool
/// are not errors here: they are `CallToolResult`s with `isError: true`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuiltinError {
    /// No built-in tool has this name (the name is carried verbatim).
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    /// `arguments` is not an object, has an unknown property, or a property
    /// of the wrong type (the message says which).
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
}

use crate::limits::{MAX_STATVFS_IN_FLIGHT, MAX_THERMAL_ZONES, STATVFS_TIMEOUT};

/// Number of `statvfs` calls currently running on the blocking pool.
static STATVFS_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// The `tools/list` result, `ListToolsResult` in
/// `../shared/spec/2025-11-25/schema.json`: `{"tools": [Tool, ...]}`, no
/// `nextCursor` (one page), rendered from the table in [`tools`].
///
/// Each `Tool` has `name`, `title`, `description`, `inputSchema` (an object
/// schema; `disk_usage` takes an optional string `path`, the others take no
/// arguments), `outputSchema` (the shape of `structuredContent`) and
/// `annotations` `{readOnlyHint: true, openWorldHint: false}`. Units are in
/// the field names: `*_bytes` are bytes, `seconds` are seconds, `celsius`
/// are degrees Celsius.
pub fn list_tools() -> Value {
    tools::render()
}

/// Runs built-in tool `name` and returns its `tools/call` result,
/// `CallToolResult` in `../shared/spec/2025-11-25/schema.json`:
///
/// - success: `{"content": [{"type": "text", "text": <one line>}],
///   "structuredContent": {...}, "isError": false}`, with `structuredContent`
///   as in the tool's `outputSchema` from [`list_tools`];
/// - tool failure (unreadable or unparsable `/proc`/`/sys` file, missing or
///   inaccessible `disk_usage` path, `statvfs` not returning within 10 s):
///   `{"content": [{"type": "text", "text": <what failed>}], "isError": true}`.
///
/// `arguments` may be absent, `null` or an object. Errors:
/// [`BuiltinError::UnknownTool`] for a name not in [`list_tools`];
/// [`BuiltinError::InvalidArguments`] for non-object arguments, a property
/// the tool does not take, or a `disk_usage` `path` that is not a non-empty
/// absolute path string without NUL bytes.
pub async fn call_tool(name: &str, arguments: Option<&Value>) -> Result<Value, BuiltinError> {
    call_tool_at(Path::new("/"), name, arguments).await
}

/// [`call_tool`] with `/proc` and `/sys` read under `root`.
async fn call_tool_at(
    root: &Path,
    name: &str,
    arguments: Option<&Value>,
) -> Result<Value, BuiltinError> {
    let cpus = || std::thread::available_parallelism().map_or(1, |n| n.get());
    match name {
        "uptime" => {
            no_arguments(name, arguments)?;
            Ok(uptime_at(root).await)
        }
        "load_average" => {
            no_arguments(name, arguments)?;
            Ok(load_average_at(root, cpus()).await)
        }
        "memory" => {
            no_arguments(name, arguments)?;
            Ok(memory_at(root).await)
        }
        "disk_usage" => {
            let path = disk_usage_path(arguments)?;
            Ok(disk_usage(path).await)
        }
        "thermal" => {
            no_arguments(name, arguments)?;
            Ok(thermal_at(root).await)
        }
        other => Err(BuiltinError::UnknownTool(other.to_owned())),
    }
}

// ---------------------------------------------------------------------------
// Arguments

/// The argument object, treating absent and `null` as empty.
fn argument_object(arguments: Option<&Value>) -> Result<Option<&Map<String, Value>>, BuiltinError> {
    match arguments {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(BuiltinError::InvalidArguments(
            "arguments must be an object".to_owned(),
        )),
    }
}

/// Rejects any argument for a tool that takes none.
fn no_arguments(tool: &str, arguments: Option<&Value>) -> Result<(), BuiltinError> {
    match argument_object(arguments)?.and_then(|m| m.keys().next()) {
        None => Ok(()),
        Some(key) => Err(BuiltinError::InvalidArguments(format!(
            "tool `{tool}` takes no arguments, got `{key}`"
        ))),
    }
}

/// The validated `path` argument of `disk_usage` (default `/`).
fn disk_usage_path(arguments: Option<&Value>) -> Result<PathBuf, BuiltinError> {
    let invalid = |m: &str| Err(BuiltinError::InvalidArguments(m.to_owned()));
    let Some(map) = argument_object(arguments)? else {
        return Ok(PathBuf::from("/"));
    };
    if let Some(key) = map.keys().find(|k| *k != "path") {
        return Err(BuiltinError::InvalidArguments(format!(
            "tool `disk_usage` takes only `path`, got `{key}`"
        )));
    }
    match map.get("path") {
        None | Some(Value::Null) => Ok(PathBuf::from("/")),
        Some(Value::String(s)) if s.is_empty() => invalid("`path` must not be empty"),
        Some(Value::String(s)) if s.contains('\0') => invalid("`path` must not contain NUL"),
        Some(Value::String(s)) if !s.starts_with('/') => invalid("`path` must be absolute"),
        Some(Value::String(s)) => Ok(PathBuf::from(s)),
        Some(_) => invalid("`path` must be a string"),
    }
}

// ---------------------------------------------------------------------------
// Results

/// A successful `CallToolResult`.
fn success(text: String, structured: Value) -> Value {
    json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": structured,
        "isError": false
    })
}

/// A `CallToolResult` reporting a tool failure.
fn failure(text: String) -> Value {
    json!({
        "content": [{ "type": "text", "text": text }],
        "isError": true
    })
}

/// Reads a small text file under `root`; the error names the absolute path.
async fn read_under(root: &Path, rel: &str) -> Result<String, String> {
    let path = root.join(rel);
    tokio::fs::read_to_string(&path)
        .await
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Reads `rel` under `root` and parses it, turning any failure into an
/// `isError` result.
async fn read_parsed<T>(
    root: &Path,
    rel: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, Value> {
    let text = read_under(root, rel).await.map_err(failure)?;
    parse(&text).map_err(|e| failure(format!("cannot parse /{rel}: {e}")))
}

// ---------------------------------------------------------------------------
// uptime

async fn uptime_at(root: &Path) -> Value {
    match read_parsed(root, "proc/uptime", parse_uptime).await {
        Ok(seconds) => {
            let human = human_duration(seconds);
            success(
                format!("up {human} ({} s since boot)", seconds as u64),
                json!({ "seconds": seconds, "human": human }),
            )
        }
        Err(result) => result,
    }
}

/// First field of `/proc/uptime`: seconds since boot.
fn parse_uptime(text: &str) -> Result<f64, String> {
    let field = text.split_whitespace().next().ok_or("file is empty")?;
    parse_non_negative(field)
}

/// A finite, non-negative decimal number.
fn parse_non_negative(field: &str) -> Result<f64, String> {
    match field.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{field}` is not a non-negative number")),
    }
}

/// Whole seconds as `"3d 4h 5m 6s"`, starting at the largest non-zero unit.
fn human_duration(seconds: f64) -> String {
    let total = seconds as u64; // saturating, fraction dropped
    let parts = [
        (total / 86_400, "d"),
        (total % 86_400 / 3_600, "h"),
        (total % 3_600 / 60, "m"),
        (total % 60, "s"),
    ];
    let first = parts.iter().position(|(n, _)| *n > 0).unwrap_or(3);
    parts[first..]
        .iter()
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------
// load_average

async fn load_average_at(root: &Path, cpus: usize) -> Value {
    match read_parsed(root, "proc/loadavg", parse_loadavg).await {
        Ok([l1, l5, l15]) => success(
            format!("load average {l1:.2} {l5:.2} {l15:.2} (1/5/15 min) on {cpus} CPUs"),
            json!({ "load_1m": l1, "load_5m": l5, "load_15m": l15, "cpus": cpus }),
        ),
        Err(result) => result,
    }
}

/// The first three fields of `/proc/loadavg`.
fn parse_loadavg(text: &str) -> Result<[f64; 3], String> {
    let mut fields = text.split_whitespace();
    let mut out = [0.0; 3];
    for slot in &mut out {
        let field = fields.next().ok_or("fewer than three fields")?;
        *slot = parse_non_negative(field)?;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// memory

/// Values from `/proc/meminfo`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MemInfo {
    total: u64,
    available: u64,
    free: u64,
    swap_total: u64,
    swap_free: u64,
}

async fn memory_at(root: &Path) -> Value {
    match read_parsed(root, "proc/meminfo", parse_meminfo).await {
        Ok(m) => success(
            format!(
                "memory: {} available of {} ({} free); swap: {} free of {}",
                human_bytes(m.available),
                human_bytes(m.total),
                human_bytes(m.free),
                human_bytes(m.swap_free),
                human_bytes(m.swap_total)
            ),
            json!({
                "total_bytes": m.total,
                "available_bytes": m.available,
                "free_bytes": m.free,
                "swap_total_bytes": m.swap_total,
                "swap_free_bytes": m.swap_free
            }),
        ),
        Err(result) => result,
    }
}

/// `/proc/meminfo` lines look like `MemTotal:       24684092 kB`; the kernel's
/// "kB" is KiB. All five keys are required.
fn parse_meminfo(text: &str) -> Result<MemInfo, String> {
    const KEYS: [&str; 5] = [
        "MemTotal",
        "MemAvailable",
        "MemFree",
        "SwapTotal",
        "SwapFree",
    ];
    let mut values: [Option<u64>; 5] = [None; 5];
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(i) = KEYS.iter().position(|k| *k == key.trim()) else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let number = words.next().unwrap_or("");
        let value: u64 = number
            .parse()
            .map_err(|_| format!("{key}: `{number}` is not a whole number"))?;
        let bytes = match words.next() {
            Some("kB") => value
                .checked_mul(1024)
                .ok_or_else(|| format!("{key}: {value} kB overflows"))?,
            None => value,
            Some(unit) => return Err(format!("{key}: unknown unit `{unit}`")),
        };
        values[i] = Some(bytes);
    }
    let get = |i: usize| values[i].ok_or_else(|| format!("{} is missing", KEYS[i]));
    Ok(MemInfo {
        total: get(0)?,
        available: get(1)?,
        free: get(2)?,
        swap_total: get(3)?,
        swap_free: get(4)?,
    })
}

/// Bytes with a binary unit and one decimal, e.g. `1.5 GiB`, `512 B`.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

// ---------------------------------------------------------------------------
// disk_usage

/// Filesystem sizes from `statvfs`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DiskUsage {
    total: u64,
    free: u64,
    available: u64,
}

/// Decrements [`STATVFS_IN_FLIGHT`] when the blocking call ends (even if it
/// ends after the caller gave up waiting).
struct InFlightGuard;

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        STATVFS_IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn disk_usage(path: PathBuf) -> Value {
    let shown = path.display().to_string();
    let reserved = STATVFS_IN_FLIGHT.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
        (n < MAX_STATVFS_IN_FLIGHT).then_some(n + 1)
    });
    if reserved.is_err() {
        return failure(format!(
            "disk_usage: {MAX_STATVFS_IN_FLIGHT} earlier calls are still waiting on their filesystems (hung network mount?); try again later"
        ));
    }
    let guard = InFlightGuard;
    let task = tokio::task::spawn_blocking(move || {
        let _guard = guard;
        statvfs(&path)
    });
    match tokio::time::timeout(STATVFS_TIMEOUT, task).await {
        Ok(Ok(Ok(d))) => {
            let used = d.total.saturating_sub(d.free);
            // Like df: share of the space a user could have that is used.
            let usable = used.saturating_add(d.available);
            let percent = if usable == 0 {
                0.0
            } else {
                used as f64 * 100.0 / usable as f64
            };
            success(
                format!(
                    "{shown}: {} available of {} ({percent:.0}% used)",
                    human_bytes(d.available),
                    human_bytes(d.total)
                ),
                json!({
                    "path": shown,
                    "total_bytes": d.total,
                    "free_bytes": d.free,
                    "available_bytes": d.available,
                    "used_bytes": used
                }),
            )
        }
        Ok(Ok(Err(e))) => failure(format!("cannot stat filesystem of {shown}: {e}")),
        Ok(Err(e)) => failure(format!("statvfs of {shown} failed: {e}")),
        Err(_) => failure(format!(
            "statvfs of {shown} did not return within {} s (hung network mount?)",
            STATVFS_TIMEOUT.as_secs()
        )),
    }
}

/// `statvfs(3)`; blocking, may hang on a network filesystem.
#[allow(clippy::unnecessary_cast)] // field widths differ between targets
fn statvfs(path: &Path) -> std::io::Result<DiskUsage> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: all-zero is a valid `statvfs` (plain integers).
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and outlives the call; `st` is a
    // valid, writable `statvfs`.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frsize = if st.f_frsize != 0 {
        st.f_frsize as u64
    } else {
        st.f_bsize as u64
    };
    Ok(DiskUsage {
        total: (st.f_blocks as u64).saturating_mul(frsize),
        free: (st.f_bfree as u64).saturating_mul(frsize),
        available: (st.f_bavail as u64).saturating_mul(frsize),
    })
}

// ---------------------------------------------------------------------------
// thermal

/// The `thermal_zone<N>` directories under `sys/class/thermal` of `root`,
/// sorted by N, at most [`MAX_THERMAL_ZONES`] (none when the directory does
/// not exist); an `isError` result when it cannot be listed.
async fn thermal_zones(root: &Path) -> Result<Vec<String>, Value> {
    let dir = root.join("sys/class/thermal");
    let mut zones: Vec<(u64, String)> = Vec::new();
    match tokio::fs::read_dir(&dir).await {
        Ok(mut entries) => loop {
            match entries.next_entry().await {
                Ok(Some(entry)) => {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let index = name
                        .strip_prefix("thermal_zone")
                        .and_then(|n| n.parse::<u64>().ok());
                    if let Some(index) = index {
                        zones.push((index, name));
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(failure(format!("cannot list {}: {e}", dir.display()))),
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failure(format!("cannot list {}: {e}", dir.display()))),
    }
    zones.sort_unstable();
    zones.truncate(MAX_THERMAL_ZONES);
    Ok(zones.into_iter().map(|(_, name)| name).collect())
}

async fn thermal_at(root: &Path) -> Value {
    let zones = match thermal_zones(root).await {
        Ok(z) => z,
        Err(result) => return result,
    };
    if zones.is_empty() {
        let note = "no thermal zones under /sys/class/thermal (usual in containers and VMs)";
        return success(note.to_owned(), json!({ "zones": [], "note": note }));
    }

    let mut items = Vec::with_capacity(zones.len());
    let mut texts = Vec::with_capacity(zones.len());
    for zone in zones {
        let base = format!("sys/class/thermal/{zone}");
        let kind = read_under(root, &format!("{base}/type"))
            .await
            .map(|t| t.trim().to_owned());
        let celsius = read_parsed(root, &format!("{base}/temp"), parse_millicelsius).await;
        let label = kind.as_deref().unwrap_or("?");
        let mut item = json!({
            "zone": zone,
            "type": kind.as_ref().ok(),
            "celsius": celsius.as_ref().ok(),
        });
        let mut errors = Vec::new();
        if let Err(e) = &kind {
            errors.push(e.clone());
        }
        match &celsius {
            Ok(c) => texts.push(format!("{zone} ({label}) {c:.1} °C")),
            Err(result) => {
                errors.push(result_text(result));
                texts.push(format!("{zone} ({label}) unreadable"));
            }
        }
        if !errors.is_empty() {
            item["error"] = Value::String(errors.join("; "));
        }
        items.push(item);
    }
    success(texts.join("; "), json!({ "zones": items }))
}

/// A `temp` file: integer millidegrees Celsius (may be negative) → °C.
fn parse_millicelsius(text: &str) -> Result<f64, String> {
    let field = text.trim();
    field
        .parse::<i64>()
        .map(|m| m as f64 / 1000.0)
        .map_err(|_| format!("`{field}` is not an integer (millidegrees Celsius)"))
}

/// The text of a result built by [`failure`].
fn result_text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod builtin_tests;
