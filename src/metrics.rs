//! Metric names (Prometheus conventions, `mcp_edge_` prefix, units in names)
//! and the recorder. Label sets are bounded: no session ids, no client-chosen
//! tool names.
//!
//! Counters and gauges live in metrics-exporter-prometheus' recorder. The
//! request-duration histogram is ours (`duration`: fixed atomic buckets,
//! appended to the exporter's text by [`render`]), and what a request
//! touches goes through handles resolved once (`handles`), so a metric
//! update on the request path allocates nothing and nothing needs an upkeep.
//! (Register no histogram with the exporter: it queues every sample until
//! an upkeep or a scrape folds it, and nothing runs an upkeep any more.)

mod duration;
mod handles;

pub use duration::DURATION_BUCKETS;
pub use handles::{count_request, LazyCounter};

/// Counter `{limit}`: work refused, cut short or dropped by a limit. Every
/// label used (`metrics::counter!(REFUSED, "limit" => ...)`):
/// - `body_bytes`: a request body over `server.max_body_bytes`;
///   `body_read_time`: one not read in time; `head_bytes`: a request head
///   over `limits::MAX_REQUEST_HEAD_BYTES`, answered 431 by hyper;
///   `admin_body`: an admin request body over `limits::ADMIN_BODY_BYTES`, 413.
/// - `auth`: a request without valid credentials; `rate`: a client over its
///   `rate`; `policy`: a call to a tool its client's policy does not allow;
///   `withheld`: a call to a tool withheld by its pin (`trust = "pin"`),
///   answered as an unknown tool; `name_length`: a `tools/call` or
///   `prompts/get` whose name is longer than any exposed name
///   (`router::names::LONGEST`), -32602 before any lookup.
/// - `duplicate_header`: a request with two `Authorization` or two `Host`
///   headers, 400; `authority`: an absolute-form target whose authority
///   fails the `Host` check or differs from `Host`, 400.
/// - `session_capacity`: a legacy session not made, the table full;
///   `in_flight`: a call over its upstream's in-flight bound; `idle_connections`: an
///   idle connection closed to free a place; `peer_connections`: one
///   closed or refused over its peer's share; `tls_handshake`: a downstream
///   connection whose TLS handshake failed or timed out.
/// - `result_bytes`: an upstream answer (or an event of an HTTP upstream's
///   main notification stream) over `max_result_bytes`; `lane_event_bytes`:
///   an event of a lane's GET stream over `limits::LANE_STREAM_EVENT_BYTES`;
///   `capability_sessions`: a caller's capability set given no session of
///   its own with a legacy HTTP upstream (the lanes full, or the server
///   refused one), its calls in mcp-edge's session; `capability_catalogs`:
///   a caller's capability set shown an upstream's broadest catalog, the
///   table of sets listed for its scoped catalog full (`upstream::scopes`);
///   `catalog_entries`, `catalog_bytes`: an upstream's catalog over its
///   bounds; `unknown_id`: an upstream's response to an id not in flight
///   (never sent, already answered, or given up), dropped; `sse_resumes`:
///   a call whose SSE answer from a legacy HTTP upstream was cut again
///   after `limits::SSE_RESUMES_PER_CALL` resumptions in a row without a
///   new event, failed.
/// - `sse_replay`: a legacy call stream resumed after an event already
///   dropped from its replay buffer (`limits::SSE_REPLAY_BYTES`): its call
///   answered with -32603 and cancelled; `sse_resume`: a `Last-Event-ID`
///   naming no stream of the session that waits (410); `sse_parked`: a
///   parked call stream given up to make room (`limits::SSE_PARKED_STREAMS`),
///   its call cancelled.
/// - The HTTP+SSE transport (`downstream::sse_transport`), each answered
///   `-31011` on the session's stream: `sse_session_calls`: a POSTed
///   request of a session with `limits::SSE_CALLS_PER_SESSION` in flight
///   (or, with HTTP 429, any message for a stream that is not read);
///   `sse_calls`: one over `server.max_connections` in flight on every such
///   session together; `sse_call_share`: one of a client at its share of
///   those, the rest kept for clients under theirs.
/// - `pending_server_requests`: a server→client request over the pending
///   bound; `relay_queue`: one not queued, the relay queue full;
///   `client_capability`: one a legacy session declared no capability for;
///   `cancellations`: a legacy HTTP call's `notifications/cancelled` not
///   sent because its queue was full.
/// - `streams_per_session`, `streams`: a GET or listen stream over its
///   bound; `resource_subscriptions`: a resource subscription over its bound.
/// - The fair shares of `[[client]]`s ([`crate::share`]): `session_share`,
///   `stream_share`, `upstream_share`, `connection_share`: a session,
///   stream, call or connection of a client at or over its share, refused
///   (503, or `-31002` for a call) because the places left are kept for
///   clients under theirs; `stream_evicted`: a stream ended so that a
///   client under its share takes its place (a session evicted so counts
///   in `mcp_edge_sessions_evicted_total{reason="share"}`).
/// - `parked_calls`: a modern caller's call to a legacy upstream not parked,
///   the table full; `mrtr_rounds`: a legacy caller's call a modern upstream
///   asked for input more than `limits::MRTR_MAX_ROUNDS` times; `mrtr_time`:
///   one whose input exchange outlasted `call_timeout`.
/// - `tasks`: an upstream task not handed on, the task table full or its id
///   bad; `tasks_per_listen`: a listen `taskIds` entry past
///   `limits::MAX_TASKS_PER_LISTEN`, not followed; `task_orphans`: an
///   abandoned followed task not noted for cancellation, the list full
///   (`limits::TASK_ORPHANS`); `task_call_time`: a listen stream's task poll
///   or the sweep's cancel of an abandoned task past `limits::TASK_CALL_MAX`.
/// - `pins_file_bytes`: tool pins not written because the file would pass
///   `limits::PINS_FILE_MAX_BYTES`; `tracked_children`: a stdio child not
///   started, `limits::MAX_TRACKED_CHILDREN` full; `descendants`: processes
///   a stop left out past `limits::MAX_DESCENDANTS`; `oauth_step_up`: a
///   403 `insufficient_scope` past `limits::OAUTH_STEP_UPS`; `oauth_scopes`:
///   a scope past `limits::OAUTH_MAX_SCOPES`; `oauth_body_bytes`: an
///   authorization server's answer over `limits::OAUTH_BODY_BYTES`.
pub const REFUSED: &str = "mcp_edge_refused_total";
/// Counter: token requests of an upstream's OAuth client, labels
/// `upstream` and `outcome` (`ok`, `invalid_client`, `invalid_grant`,
/// `unavailable`, `unreachable`, `discovery_failed`, `refused`).
pub const OAUTH_REQUESTS: &str = "mcp_edge_oauth_requests_total";
/// Counter `{kind}`: legacy SSE streams resumed with `Last-Event-ID`
/// (`call`, `get`; `downstream::resume`).
pub const SSE_RESUMED: &str = "mcp_edge_sse_resumed_total";
/// Counter `{reason}`: sessions removed (`idle`, `lru`, `share`,
/// `deleted`, `closed`: an HTTP+SSE session's stream closed, `revoked`,
/// `shutdown`).
pub const SESSIONS_EVICTED: &str = "mcp_edge_sessions_evicted_total";
/// Gauge `{transport}`: sessions in the table, by the transport that made
/// them (`http`: streamable HTTP's `initialize`; `sse`: the 2024-11-05
/// HTTP+SSE transport's `GET /sse`).
pub const SESSIONS_ACTIVE: &str = "mcp_edge_sessions_active";
/// Counter `{method, outcome}`: downstream JSON-RPC requests (`method` is one of the known MCP methods or `other`).
pub const REQUESTS: &str = "mcp_edge_requests_total";
/// Counter `{reason}`: upstream tools, prompts or resources left out of the merged catalog (`clash`, `invalid_name`, `catalog_full`).
pub const CATALOG_DROPPED: &str = "mcp_edge_catalog_dropped_total";
/// Counter `{upstream, outcome}`: upstream connect attempts.
pub const UPSTREAM_CONNECTS: &str = "mcp_edge_upstream_connects_total";
/// Gauge `{upstream}`: 1 when the upstream is ready.
pub const UPSTREAM_READY: &str = "mcp_edge_upstream_ready";
/// Histogram `{method}`: seconds from a downstream request's arrival to its
/// answer. Kept by `duration`, not by the exporter: fixed atomic buckets
/// ([`DURATION_BUCKETS`]) per method label, no samples queued.
pub const REQUEST_DURATION: &str = "mcp_edge_request_duration_seconds";
/// Gauge, always 1: this box's instance id (`server.instance_id`, or the
/// derived one) and version as labels (`instance`, `version`), so a
/// fleet's dashboards tell boxes apart.
pub const INSTANCE_INFO: &str = "mcp_edge_instance_info";
/// Gauge: capacity of the legacy session table.
pub const SESSIONS_CAPACITY: &str = "mcp_edge_sessions_capacity";
/// Gauge: live heap bytes (counting allocator).
pub const HEAP_LIVE: &str = "mcp_edge_heap_live_bytes";
/// Gauge: peak live heap bytes since start.
pub const HEAP_PEAK: &str = "mcp_edge_heap_peak_bytes";
/// Counter: heap allocations since start.
pub const HEAP_ALLOCATIONS: &str = "mcp_edge_heap_allocations_total";
/// Gauge: resident set size in bytes (`VmRSS`).
pub const RSS: &str = "mcp_edge_process_resident_memory_bytes";
/// Gauge `{upstream, state}`: 1 for the upstream's current state, 0 for the others.
pub const UPSTREAM_STATE: &str = "mcp_edge_upstream_state";
/// Gauge `{upstream}`: seconds until the next connect attempt (0 unless in Backoff).
pub const UPSTREAM_BACKOFF_SECONDS: &str = "mcp_edge_upstream_backoff_seconds";
/// Counter `{upstream, outcome}`: health probes (`ok`, `missed`).
pub const UPSTREAM_PROBES: &str = "mcp_edge_upstream_probes_total";
/// Gauge: upstream owner tasks alive.
pub const OWNER_TASKS: &str = "mcp_edge_upstream_owner_tasks";
/// Gauge: upstream health monitors alive (one per connected upstream).
pub const MONITORS: &str = "mcp_edge_upstream_monitors";
/// Counter `{upstream}`: stdout lines of a stdio upstream that were not JSON-RPC (skipped).
pub const STDOUT_NOISE: &str = "mcp_edge_upstream_stdout_noise_total";
/// Counter `{upstream, reason}`: stdio children started with a weaker sandbox
/// than configured (`landlock_unavailable`, `path_missing`).
pub const SANDBOX_DEGRADED: &str = "mcp_edge_sandbox_degraded_total";
/// Counter: downstream requests that waited for an upstream's first connect
/// attempt before being routed (right after a start or reload).
pub const REQUESTS_HELD: &str = "mcp_edge_requests_held_total";
/// Gauge: open long-lived streams (legacy GET and `subscriptions/listen`).
pub const STREAMS: &str = "mcp_edge_streams";
/// Gauge: places in the long-lived stream pool.
pub const STREAMS_CAPACITY: &str = "mcp_edge_streams_capacity";
/// Gauge: open downstream connections (places taken in `http::conns`, of
/// `server.max_connections`).
pub const CONNECTIONS: &str = "mcp_edge_connections";
/// Gauge: modern callers' calls parked while a legacy upstream waits for
/// their `inputResponses` (`http::parked`).
pub const PARKED_CALLS: &str = "mcp_edge_parked_calls";
/// Counter `{upstream}`: stderr lines of a stdio upstream not logged because
/// of the log rate limit (still kept in the stderr tail).
pub const STDERR_SKIPPED: &str = "mcp_edge_upstream_stderr_skipped_total";
/// Counter: HTTP requests refused by the Origin/Host check.
pub const FORBIDDEN: &str = "mcp_edge_http_forbidden_total";
/// Counter: audit records dropped because the audit queue was full
/// ([`crate::limits::AUDIT_QUEUE_DEPTH`], [`crate::limits::AUDIT_QUEUE_BYTES`])
/// or its writer had stopped.
pub const AUDIT_DROPPED: &str = "mcp_edge_audit_dropped_total";
/// Gauge `{upstream}`: tools the upstream lists that are withheld from lists
/// and calls under `trust = "pin"` (changed since pinned, new, or
/// unverifiable) until an operator approves them; why is in `/status`.
pub const TOOLS_WITHHELD: &str = "mcp_edge_tools_withheld";
/// Counter: writes of the tool-pins file put off because only
/// `trust = "auto"` re-pins changed within
/// [`crate::limits::PINS_WRITE_MIN_INTERVAL`] of the last write (a later
/// write carries them).
pub const PINS_WRITES_DEFERRED: &str = "mcp_edge_pins_writes_deferred_total";
/// Counter: audit records the writer could not write (disk full, EIO,
/// journal gone); the writer goes on with the next record.
pub const AUDIT_WRITE_ERRORS: &str = "mcp_edge_audit_write_errors_total";
/// Counter: zombies re-parented to mcp-edge (the child subreaper) and reaped
/// by it: descendants of stdio children whose parent had exited.
pub const ORPHANS_REAPED: &str = "mcp_edge_orphans_reaped_total";
/// Counter `{signal}` (`TERM`, `KILL`): descendants of a stopped stdio child
/// (or, at exit, of mcp-edge) signalled by pid; the process-group signals
/// that go with them are not counted.
pub const DESCENDANTS_SIGNALLED: &str = "mcp_edge_descendants_signalled_total";

/// The `method` label values: MCP's own method names, then `other` (last)
/// for anything else. Fixed, so per-method metric state is a fixed table.
pub const METHODS: [&str; 16] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "other",
];

/// Counts one refusal by limit `limit` in `mcp_edge_refused_total`: one
/// copy of the registration code for every limit's refusal sites (the
/// macro at each of ~50 sites cost the aarch64 binary kilobytes).
#[inline(never)]
pub fn refused(limit: &'static str) {
    metrics::counter!(REFUSED, "limit" => limit).increment(1);
}

/// The index in [`METHODS`] of `method`'s label (`other` when unknown).
pub fn method_index(method: &str) -> usize {
    let known = &METHODS[..METHODS.len() - 1];
    known
        .iter()
        .position(|m| *m == method)
        .unwrap_or(known.len())
}

/// Bounds the `method` label to MCP's own method names.
pub fn method_label(method: &str) -> &'static str {
    METHODS[method_index(method)]
}

/// Records a downstream request's duration (arrival to answer) in
/// `mcp_edge_request_duration_seconds{method}`; allocates nothing.
pub fn observe_duration(method: &str, elapsed: std::time::Duration) {
    duration::observe(method_index(method), elapsed);
}

use std::sync::OnceLock;

static PROMETHEUS: OnceLock<Option<metrics_exporter_prometheus::PrometheusHandle>> =
    OnceLock::new();

/// The value of counter or gauge `name` with label set `labels` (e.g.
/// `limit="in_flight"`) in the rendered Prometheus text; 0 when absent.
/// For tests and the status page.
pub fn read(name: &str, labels: &str) -> f64 {
    let Some(h) = prometheus() else { return 0.0 };
    let key = if labels.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{labels}}}")
    };
    text(h)
        .lines()
        .find_map(|l| l.strip_prefix(&key).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Installs the Prometheus recorder once per process; `None` if another
/// recorder was installed first.
pub fn prometheus() -> Option<&'static metrics_exporter_prometheus::PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .ok()
        })
        .as_ref()
}

/// Whether [`prometheus`] installed its recorder (handles may be kept).
fn installed() -> bool {
    matches!(PROMETHEUS.get(), Some(Some(_)))
}

/// The exporter's text with the request-duration histogram appended (where
/// the exporter put histograms: after its counters and gauges).
fn text(h: &metrics_exporter_prometheus::PrometheusHandle) -> String {
    let mut out = h.render();
    duration::render(&mut out);
    out
}

/// The Prometheus text (format 0.0.4) of every metric, heap gauges refreshed
/// first; `None` without a recorder.
pub fn render() -> Option<String> {
    let h = prometheus()?;
    publish_heap();
    Some(text(h))
}

/// Sets the heap and RSS gauges (called before each metrics render).
fn publish_heap() {
    metrics::gauge!(HEAP_LIVE).set(crate::alloc::live_bytes() as f64);
    metrics::gauge!(HEAP_PEAK).set(crate::alloc::peak_bytes() as f64);
    metrics::counter!(HEAP_ALLOCATIONS).absolute(crate::alloc::allocations());
    if let Some(rss) = crate::alloc::rss_bytes() {
        metrics::gauge!(RSS).set(rss as f64);
    }
}
