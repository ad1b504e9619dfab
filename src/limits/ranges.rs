//! Ranges of config keys checked in `config/*` and the board profile
//! bounds (re-exported by [`crate::limits`]).

use std::time::Duration;

// ---- config defaults (config/*) ----
// Ranges of config keys checked in `config/*` (defaults are above), and the
// board profile bounds.

/// Default `server.tool_name_separator`: between upstream prefix and tool name.
pub const DEFAULT_TOOL_NAME_SEPARATOR: &str = "__";
/// Longest `server.tool_name_separator`, in characters: 4.
pub const MAX_TOOL_NAME_SEPARATOR_LEN: usize = 4;
/// Smallest accepted `server.keepalive`: 1 s.
pub const MIN_KEEPALIVE: Duration = Duration::from_secs(1);
/// Largest accepted `server.keepalive`: 60 s.
pub const MAX_KEEPALIVE: Duration = Duration::from_secs(60);
/// Ceiling for `server.max_connections` (default [`DEFAULT_MAX_CONNECTIONS`]).
pub const MAX_CONNECTIONS_CEILING: usize = 65_536;
/// Longest `server.session_min_idle_before_evict`: 24 h.
pub const MAX_SESSION_MIN_IDLE_BEFORE_EVICT: Duration = Duration::from_secs(24 * 3600);

/// Smallest accepted `watchdog.required_grace`: 1 s.
pub const MIN_REQUIRED_GRACE: Duration = Duration::from_secs(1);
/// Largest accepted `watchdog.required_grace`: 24 h.
pub const MAX_REQUIRED_GRACE: Duration = Duration::from_secs(24 * 3600);

/// Longest upstream `name` / `prefix` (and `mcpServers` server name), in
/// characters: 32.
pub const MAX_UPSTREAM_NAME_LEN: usize = 32;
/// Smallest accepted `upstream.call_timeout`: 1 s.
pub const MIN_CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest accepted `upstream.call_timeout`: 1 h.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(3600);
/// Smallest accepted `upstream.max_result_bytes`: 1 KiB.
pub const MIN_RESULT_BYTES: usize = 1024;
/// Ceiling for `upstream.max_result_bytes`: 256 MiB.
pub const MAX_RESULT_BYTES_CEILING: usize = 256 * 1024 * 1024;
/// Smallest accepted `upstream.health_interval`: 1 s.
pub const MIN_HEALTH_INTERVAL: Duration = Duration::from_secs(1);
/// Largest accepted `upstream.health_interval`: 1 h.
pub const MAX_HEALTH_INTERVAL: Duration = Duration::from_secs(3600);
/// Smallest accepted `upstream.probe_timeout`: 100 ms.
pub const MIN_PROBE_TIMEOUT: Duration = Duration::from_millis(100);
/// Largest accepted `upstream.probe_timeout`: 5 min.
pub const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Largest accepted `upstream.probe_misses`: 100.
pub const MAX_PROBE_MISSES: u32 = 100;
/// Smallest accepted `upstream.backoff_initial`: 100 ms.
pub const MIN_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Largest accepted `upstream.backoff_initial`: 1 h.
pub const MAX_BACKOFF_INITIAL: Duration = Duration::from_secs(3600);
/// Smallest accepted `upstream.backoff_factor`: 1.0 (no growth).
pub const MIN_BACKOFF_FACTOR: f64 = 1.0;
/// Largest accepted `upstream.backoff_factor`: 10.0.
pub const MAX_BACKOFF_FACTOR: f64 = 10.0;
/// Smallest accepted `upstream.backoff_cap`: 1 s.
pub const MIN_BACKOFF_CAP: Duration = Duration::from_secs(1);
/// Largest accepted `upstream.backoff_cap`: 24 h.
pub const MAX_BACKOFF_CAP: Duration = Duration::from_secs(24 * 3600);
/// Largest accepted `upstream.stable_period`: 24 h (zero is allowed).
pub const MAX_STABLE_PERIOD: Duration = Duration::from_secs(24 * 3600);
/// Smallest accepted `upstream.retry_after_cap`: 1 s.
pub const MIN_RETRY_AFTER_CAP: Duration = Duration::from_secs(1);
/// Largest accepted `upstream.retry_after_cap`: 24 h.
pub const MAX_RETRY_AFTER_CAP: Duration = Duration::from_secs(24 * 3600);
/// Smallest accepted `upstream.startup_timeout`: 1 s.
pub const MIN_STARTUP_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest accepted `upstream.startup_timeout`: 10 min.
pub const MAX_STARTUP_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Smallest accepted board profile `heap_budget_bytes`: 4 MiB.
pub const MIN_HEAP_BUDGET_BYTES: usize = 4 << 20;
/// Largest accepted board profile `heap_budget_bytes`: 64 GiB, or all a
/// 32-bit address space can name (`64 << 30` would be 0 on armv7).
pub const MAX_HEAP_BUDGET_BYTES: usize = if usize::BITS > 32 {
    (64u64 << 30) as usize
} else {
    usize::MAX
};
