//! Every capacity, timeout and default in one place.
//!
//! Each value here is the default of a config key (named in its docstring)
//! or a compiled-in ceiling that no config can exceed. Tables are sized from
//! these at start-up and never grow.

use std::time::Duration;

mod net;
mod ranges;
pub use net::*;
pub use ranges::*;

/// Default downstream listen address (`server.listen`). Port 8737 is the
/// documented mcp-edge port; loopback only by default (streamable HTTP
/// §Security: bind to localhost when running locally).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8737";

/// Default admin listener (`server.admin_listen`): `/metrics`, `/healthz`,
/// `/readyz`, `/status`, `/upstreams/<name>/reconnect` on loopback, its own
/// port. When `server.listen` has port 0 (tests, ephemeral setups) the
/// default admin port is 0 as well.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9737";

/// Default `watchdog.required_grace`: how long an upstream marked
/// `required = true` may be away from Ready before the systemd watchdog ping
/// is withheld (5 min).
pub const DEFAULT_REQUIRED_GRACE: Duration = Duration::from_secs(5 * 60);

/// Default request body limit in bytes (`server.max_body_bytes`): 1 MiB.
/// Larger bodies get 413 with a JSON-RPC error.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Time a client has to send a request body once its headers arrived: 30 s.
/// A client dripping its body byte by byte would otherwise hold one of
/// `server.max_connections` for ever (HTTP 408 after this).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// A body refused with 413 is still read and discarded (not kept) up to
/// max(this, 2 × `server.max_body_bytes`) bytes before the connection closes,
/// so clients that send their whole body before reading (Node `fetch`,
/// Python `http.client`) can read the refusal instead of meeting a reset
/// (nginx's lingering close): 4 MiB. A body declared longer is refused at
/// once, as is one sent with `Expect: 100-continue`.
pub const REFUSED_BODY_DRAIN_BYTES: usize = 4 * 1024 * 1024;
/// Time the discarding of a refused body may take, from the refusal: 5 s.
pub const REFUSED_BODY_DRAIN_TIME: Duration = Duration::from_secs(5);
/// Ceiling for `server.max_body_bytes`: 64 MiB.
pub const MAX_BODY_BYTES_CEILING: usize = 64 * 1024 * 1024;

/// Default capacity of the legacy session table (`server.session_capacity`).
pub const DEFAULT_SESSION_CAPACITY: usize = 256;
/// Compiled-in ceiling of the session table capacity.
pub const SESSION_CAPACITY_CEILING: usize = 16_384;

/// Default idle timeout of a legacy session (`server.session_idle_timeout`): 30 min.
pub const DEFAULT_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Smallest accepted `server.session_idle_timeout`: 10 s (0/"off" is a config error).
pub const MIN_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest accepted `server.session_idle_timeout`: 24 h.
pub const MAX_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Default SSE keep-alive comment period (`server.keepalive`): 15 s.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(15);

/// Maximum concurrent downstream connections (`server.max_connections`).
/// A permit is taken before `accept`, so excess clients wait in the kernel backlog.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// The listen backlog of `server.listen` (and the admin listener): 4,096
/// connections the kernel completes and queues for `accept` (capped by
/// `net.core.somaxconn`, 4,096 by default since Linux 5.4). With the
/// standard library's 128, a thousand silent sockets re-opened as they are
/// closed overflow the queue, and the kernel drops every SYN past it: a
/// good client's connect then waits for its SYN's retransmission, 1 s,
/// then 3 s, then 7 s (issue 24: a first exchange took 5.2 s). Queued
/// connections cost kernel memory only, and the accept loop takes them in
/// order (making room as `http::conns` says).
pub const LISTEN_BACKLOG: u32 = 4096;

/// Default per-call timeout towards an upstream (`upstream.call_timeout`): 60 s.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Timeout of the connect handshake (`initialize` or `server/discover`) with an upstream.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a stdio `server/discover` era probe waits before deciding "legacy".
pub const ERA_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Capacity of each upstream's in-flight request table (`upstream.max_in_flight`).
/// Overflow is an immediate JSON-RPC error naming the upstream.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
/// Ceiling for `upstream.max_in_flight`.
pub const MAX_IN_FLIGHT_CEILING: usize = 4096;

/// Largest accepted single message from an upstream, in bytes (stdio line or
/// HTTP body / SSE event): 8 MiB (`upstream.max_result_bytes`).
pub const DEFAULT_MAX_RESULT_BYTES: usize = 8 * 1024 * 1024;

/// Most tools (and, separately, prompts and resources) kept per upstream catalog.
pub const MAX_CATALOG_ENTRIES: usize = 1024;
/// Most pages followed when listing an upstream; a longer chain is cut with a log line.
pub const MAX_LIST_PAGES: usize = 64;

/// Number of upstreams a config may declare.
pub const MAX_UPSTREAMS: usize = 64;

/// Bytes of a stdio upstream's stderr kept per line in the log (longer lines are cut).
pub const STDERR_LINE_BYTES: usize = 4096;

/// Default `ttlMs` on cacheable modern results (server-utilities-caching.mdx §Cacheable Results).
pub const DEFAULT_LIST_TTL_MS: u64 = 60_000;

/// Messages (request-scoped notifications, relayed server requests) queued for
/// one downstream SSE response before further ones are dropped (and counted).
pub const RELAY_QUEUE_DEPTH: usize = 32;
/// Requests in flight at once on one HTTP+SSE session (the 2024-11-05
/// transport answers on its stream, so a POST does not hold its
/// connection while answered): more are refused with 429
/// (`sse_session_calls`). All such sessions together have at most
/// `server.max_connections` (`sse_calls`).
pub const SSE_CALLS_PER_SESSION: usize = 16;
/// Server→client requests (sampling, elicitation, roots) awaiting a downstream
/// client's answer, per upstream. Entries older than the call timeout are reclaimed.
pub const PENDING_SERVER_REQUESTS: usize = 16;
/// `InputRequiredResult`s of a modern upstream mcp-edge answers for one
/// legacy caller's call (2026-07-28 patterns-mrtr.mdx; `upstream::mrtr`):
/// one more ends the call with an error, counted as `mrtr_rounds`. The
/// whole exchange is also bounded by the upstream's `call_timeout`
/// (`mrtr_time`), as a legacy upstream's call that asks the client is.
pub const MRTR_MAX_ROUNDS: usize = 8;

/// A legacy upstream's server→client requests that arrive together during
/// a modern caller's call are asked in one `InputRequiredResult`
/// (`http::mrtr`): after the first, others arriving within this window join
/// its round. A server that asks several things concurrently sends them
/// back to back, well within it even on a Pi Zero; a round with one
/// request is answered this much later (a round trip to a person or a
/// model is seconds).
pub const MRTR_GATHER_WINDOW: Duration = Duration::from_millis(50);
/// At most this many input requests in one such round; more go to the next
/// round. Bounds a parked call's requests (each up to
/// `max_result_bytes`), within `PENDING_SERVER_REQUESTS` of its upstream.
pub const MRTR_ROUND_REQUESTS: usize = 8;

/// Legacy sessions a legacy HTTP upstream gets besides mcp-edge's own: one
/// per other set of client capabilities its callers declared
/// (`upstream::http::lanes`), so a server that checks them sees the
/// caller's. 64 sets are possible; callers mostly declare one of a few
/// (none, all, elicitation only). Also the capability sets listed for one
/// upstream's scoped catalog (`upstream::scopes`; beyond them: the
/// broadest catalog, `limit="capability_catalogs"`). Beyond this, or for a set whose session
/// the server refused to open (a server with one session only), calls use
/// the main session (counted: `limit="capability_sessions"`). Kept while
/// the connection lives.
pub const UPSTREAM_CAPABILITY_SESSIONS: usize = 6;
/// The largest event read from a lane's GET stream: it carries what is
/// unrelated to a call (`*/list_changed`, `resources/updated`, `ping`), so
/// far less than a result. A bigger one ends the stream (asked again after
/// `health_interval`), counted as `limit="lane_event_bytes"`.
pub const LANE_STREAM_EVENT_BYTES: usize = 64 * 1024;

/// Idle keep-alive connections kept per HTTP upstream after a burst of
/// concurrent calls (more are closed as they go idle).
pub const UPSTREAM_IDLE_CONNECTIONS: usize = 4;
/// Calls of modern callers parked while a legacy upstream waits for their
/// answer to its server→client request (`http::parked`; 2026-07-28
/// patterns-mrtr.mdx): the whole gateway's table, allocated at start. A
/// full table refuses the call that needs a place
/// (`mcp_edge_refused_total{limit="parked_calls"}`).
/// 32: each costs up to `budget::PARKED_CALL_BYTES` (80 KiB), and the
/// table must fit the smallest board's heap budget (rpi-zero-2w, 32 MiB).
pub const PARKED_CALLS: usize = 32;
/// How long a parked call waits for its caller's retry before the upstream's
/// request is answered with an error and the call is dropped (cancelled
/// upstream). The upstream's `call_timeout` keeps running while parked.
pub const PARKED_CALL_TTL: Duration = Duration::from_secs(120);
/// The sweep of expired parked calls runs at least this often (with the
/// session sweep).
pub const PARKED_SWEEP_PERIOD: Duration = Duration::from_secs(10);
/// How long answering an upstream's server→client request on behalf of a
/// parked call (the caller's answer, or a refusal at expiry) may take.
pub const PARKED_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Default `server.session_min_idle_before_evict`: 60 s. When the legacy
/// session table is full, a new `initialize` evicts the least-recently-used
/// session idle at least this long; if none is, the client gets 503.
pub const DEFAULT_SESSION_MIN_IDLE_BEFORE_EVICT: Duration = Duration::from_secs(60);
/// Ceiling for `server.sse_queue_depth` (default [`RELAY_QUEUE_DEPTH`]).
pub const RELAY_QUEUE_DEPTH_CEILING: usize = 1024;
/// Ceiling for `server.max_pending_server_requests` (default [`PENDING_SERVER_REQUESTS`]).
pub const PENDING_SERVER_REQUESTS_CEILING: usize = 1024;
/// Ceiling for `upstream.max_catalog_entries` (default [`MAX_CATALOG_ENTRIES`]).
pub const MAX_CATALOG_ENTRIES_CEILING: usize = 16_384;
/// Default `upstream.max_catalog_bytes`: 1 MiB of serialized JSON kept per
/// upstream catalog; entries past the budget are dropped (and counted).
pub const DEFAULT_MAX_CATALOG_BYTES: usize = 1024 * 1024;
/// Smallest accepted `upstream.max_catalog_bytes`: 1 KiB.
pub const MIN_CATALOG_BYTES: usize = 1024;
/// Ceiling for `upstream.max_catalog_bytes`: 64 MiB.
pub const MAX_CATALOG_BYTES_CEILING: usize = 64 * 1024 * 1024;
/// Largest tool-pins file (`<state_directory>/tool-pins.json`, see
/// `crate::pins`) read or written: 16 MiB. Each upstream keeps at most
/// `max_catalog_entries` pins of about 70 bytes plus the tool's name, so the
/// defaults (64 upstreams × 1,024 tools) stay near 7 MiB with 32-byte
/// names. A larger file is treated as unreadable (under `trust = "pin"`:
/// nothing of those upstreams is served until approved); a larger state is
/// not written (`mcp_edge_refused_total{limit="pins_file_bytes"}`).
pub const PINS_FILE_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Least time between two writes of the pins file caused only by
/// `trust = "auto"` re-pins: 10 s. An upstream flipping a tool between two
/// definitions would otherwise cost a write, an fsync and a rename per
/// refresh (wear on an SD card); a later write carries everything, and
/// approvals, first listings, reloads and shutdown write at once.
pub const PINS_WRITE_MIN_INTERVAL: Duration = Duration::from_secs(10);
/// Log lines about changed, new or withheld tools, per upstream: this many
/// at once, then refilled over [`PINS_LOG_PER`]; the lines skipped are
/// counted and named by the next one logged.
pub const PINS_LOG_BURST: u32 = 10;
/// See [`PINS_LOG_BURST`]: one minute.
pub const PINS_LOG_PER: Duration = Duration::from_secs(60);

/// Default `upstream.health_interval`: 30 s between liveness probes
/// (`ping` / `server/discover`) of a Ready upstream.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(30);
/// Default `upstream.probe_timeout`: 10 s for one liveness probe to answer
/// (never longer than `health_interval`).
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `upstream.probe_misses`: consecutive missed probes before the
/// upstream is marked down.
pub const DEFAULT_PROBE_MISSES: u32 = 3;
/// Default `upstream.backoff_initial`: first reconnect delay, 1 s.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// Default `upstream.backoff_factor`: each failed attempt multiplies the delay by this.
pub const DEFAULT_BACKOFF_FACTOR: f64 = 2.0;
/// Default `upstream.backoff_cap`: longest reconnect delay, 30 min.
pub const DEFAULT_BACKOFF_CAP: Duration = Duration::from_secs(30 * 60);
/// Default `upstream.stable_period`: 60 s Ready before the backoff resets.
pub const DEFAULT_STABLE_PERIOD: Duration = Duration::from_secs(60);
/// Default `upstream.retry_after_cap`: longest upstream `Retry-After` honoured, 1 h.
pub const DEFAULT_RETRY_AFTER_CAP: Duration = Duration::from_secs(3600);
/// Default `upstream.startup_timeout`: 30 s budget for spawn/dial plus the
/// era handshake (separate from `call_timeout`).
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack past an upstream's `startup_timeout` that a downstream request
/// needing the merged catalog waits for that upstream's first attempt
/// ([`crate::upstream::Upstream::first_attempt`]): 1 s.
pub const FIRST_ATTEMPT_MARGIN: Duration = Duration::from_secs(1);

/// Entries of the resource subscription table ([`crate::subscriptions`]),
/// allocated at start: 1,024.
pub const MAX_RESOURCE_SUBSCRIPTIONS: usize = 1024;
/// Resource subscriptions one client (legacy session or listen stream) may hold: 32.
pub const MAX_SUBSCRIPTIONS_PER_CLIENT: usize = 32;
/// Longest resource URI a client may subscribe to, in bytes: 2,048.
pub const MAX_SUBSCRIPTION_URI_BYTES: usize = 2048;

/// `Retry-After` of a `subscriptions/listen` refused because every stream
/// is taken (`-31005`, HTTP 503): 5 s.
pub const LISTEN_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Entries of the task table ([`crate::tasks`]: one per upstream task handed
/// to a caller under a gateway task id), allocated at start: 256. A task
/// created upstream while it is full is cancelled there and the call refused
/// (`refused{limit="tasks"}`).
pub const TASKS_CAPACITY: usize = 256;
/// How long the gateway keeps a task whose upstream gave no `ttlMs`
/// (`null`, unlimited): 1 h.
pub const TASK_TTL_DEFAULT: Duration = Duration::from_secs(3600);
/// The longest the gateway keeps a task, whatever its upstream's `ttlMs`: 6 h.
pub const TASK_TTL_MAX: Duration = Duration::from_secs(6 * 3600);
/// Longest upstream task id the gateway keeps, in bytes: 256 (longer:
/// refused as the table refuses, `refused{limit="tasks"}`).
pub const MAX_TASK_ID_BYTES: usize = 256;
/// Bounds of the interval at which the gateway polls an upstream's
/// `tasks/get` (its `pollIntervalMs`, clamped): 50 ms … 5 s; 500 ms when
/// it suggests none.
pub const TASK_POLL_MIN: Duration = Duration::from_millis(50);
/// See [`TASK_POLL_MIN`].
pub const TASK_POLL_MAX: Duration = Duration::from_secs(5);
/// See [`TASK_POLL_MIN`].
pub const TASK_POLL_DEFAULT: Duration = Duration::from_millis(500);
/// Task ids one `subscriptions/listen` stream follows (`taskIds`; the rest
/// are left out of its acknowledgment, `refused{limit="tasks_per_listen"}`): 16.
pub const MAX_TASKS_PER_LISTEN: usize = 16;
/// Upstream tasks abandoned by their callers while the gateway followed
/// them, waiting for the session sweep to cancel them upstream: 32 (one
/// more runs on upstream to its end, `refused{limit="task_orphans"}`).
pub const TASK_ORPHANS: usize = 32;
/// The longest a listen stream's `tasks/get` of a followed task, or the
/// sweep's `tasks/cancel` of an abandoned one, waits for its upstream: 5 s
/// (past it the poll is retried later, the cancel dropped;
/// `refused{limit="task_call_time"}`).
pub const TASK_CALL_MAX: Duration = Duration::from_secs(5);

/// stderr lines of one stdio child logged in a burst before the rate
/// limit applies: 20.
pub const STDERR_LOG_BURST: u32 = 20;
/// stderr lines of one stdio child logged per second once the burst is
/// spent: 5 (the rest are counted, kept in the tail, and not logged).
pub const STDERR_LOG_PER_SECOND: u32 = 5;
/// Per-message warnings about one stdio upstream's output (an over-long
/// line dropped, a stdout line that is not JSON-RPC, an answer to an id
/// not in flight) logged in a burst before the rate limit applies: 10.
/// Each is counted in its metric whatever is logged.
pub const UPSTREAM_WARN_LOG_BURST: u32 = 10;
/// Such warnings logged per second once the burst is spent: 1.
pub const UPSTREAM_WARN_LOG_PER_SECOND: u32 = 1;

/// Bytes of a stdio child's stderr kept for status output (a ring).
pub const STDERR_TAIL_BYTES: usize = 16 * 1024;
/// How often a parked upstream's credential file is checked for a change (mtime).
pub const CREDENTIAL_CHECK_PERIOD: Duration = Duration::from_secs(5);
/// Grace after closing a stdio child's stdin before SIGTERM, and after SIGTERM before SIGKILL.
pub const CHILD_STOP_GRACE: Duration = Duration::from_secs(2);

/// Time a client has to send a complete request head (and, between requests
/// on a kept-alive connection, the next one) before its connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest read buffer of a connection to an HTTP upstream (hyper's
/// `http1_max_buf_size`): 64 KiB. It also bounds an upstream's response
/// head. A big answer is read through it in pieces and gathered once
/// (`budget::RESULT_FACTOR`) instead of hyper's default ≈ 408 KiB
/// buffer per connection coming on top.
pub const UPSTREAM_READ_BUFFER: usize = 64 * 1024;
/// Largest request head (request line and headers) a client may send: 32 KiB.
/// Both hyper's head limit (`http1::Builder::max_header_size`) and its
/// per-connection read buffer limit (`max_buf_size`, default ≈ 408 KiB), so
/// it also bounds what a half-sent head holds on the heap
/// (`budget::CONNECTION_BYTES` is measured with one just under it). A
/// longer head gets 431 from hyper and its connection is closed
/// (`refused{limit="head_bytes"}`). Bearer tokens and MCP headers fit easily;
/// Node's own default is 16 KiB.
pub const MAX_REQUEST_HEAD_BYTES: usize = 32 * 1024;
/// Time a client has to complete the TLS handshake on a `server.listen`
/// with TLS: 10 s. The handshake runs in the connection's own task, so a
/// slow one never stalls `accept`; past this it is closed (and counted as
/// `refused{limit="tls_handshake"}`), freeing its `max_connections` permit.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// GET streams one legacy session may hold open at once; more get 429.
pub const MAX_STREAMS_PER_SESSION: u8 = 2;

// ---- the composition root (gateway/*) ----

/// Runtime worker threads; 0: one thread, tokio's `current_thread`
/// runtime. Chosen by measurement (docs/benchmarks.md, "Hot path"): with
/// one thread a proxied call costs about a fifth less CPU than with two
/// workers (no wake-ups from one worker to another), at the same
/// throughput on this 2-core machine; one core of a Pi Zero 2 W still
/// serves thousands of calls a second. `MCP_EDGE_WORKERS` overrides it.
pub const RUNTIME_WORKERS: usize = 0;
/// How long start-up and a reload wait for upstreams' first attempts before
/// `READY=1` (and `/readyz`).
pub const START_BUDGET: Duration = Duration::from_secs(30);
/// How long stopping waits for the watchdog pinger thread: 1 s (it sleeps
/// half a watchdog period at a time and wakes at once when told; only a
/// send blocked on a notify socket nobody reads takes longer).
pub const WATCHDOG_STOP_GRACE: Duration = Duration::from_secs(1);
/// How long calls in flight and listen streams' closing responses may take
/// at shutdown before the upstreams are stopped anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long one stopping owner task gets (stdio EOF then TERM/KILL, HTTP
/// DELETE) before it is aborted.
pub const OWNER_STOP_GRACE: Duration = Duration::from_secs(5);
/// How long calls already running on a replaced or removed upstream may
/// take to finish before a reload stops it (as shutdown's grace).
pub const RELOAD_DRAIN_GRACE: Duration = Duration::from_secs(10);
/// How long a one-shot admin command (`status`, `upstream reconnect`) waits
/// for the running gateway's answer.
pub const ADMIN_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the admin listener gives one connection.
pub const ADMIN_CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Under connection pressure, how long a connection may sit without a
/// request before it can be closed to admit a new one (`http::conns`):
/// time for a client to be read, or to finish a TLS handshake over a slow
/// link, even while the table churns. It also bounds the churn: at most
/// `max_connections` closings per grace period.
pub const CONNECTION_YIELD_GRACE: Duration = Duration::from_millis(250);
/// Largest request body the admin listener reads (`POST /tools/approve`):
/// 64 KiB; larger ones get 413 (`mcp_edge_refused_total{limit="admin_body"}`).
pub const ADMIN_BODY_BYTES: usize = 64 * 1024;
/// File name of the operator socket (`server.admin_socket`'s default).
pub const ADMIN_SOCKET_NAME: &str = "admin.sock";
/// `sun_path` of `sockaddr_un` (unix(7)): a socket path and its NUL.
pub const UNIX_SOCKET_PATH_MAX: usize = 108;
/// Parents the operator socket follows from a peer toward pid 1 (a longer
/// chain is refused: `mcp_edge_refused_total{limit="admin_peer"}`).
pub const ADMIN_PEER_ANCESTRY: usize = 1024;
/// Refused operator-socket peers logged and audited per minute (all counted).
pub const ADMIN_REFUSALS_LOGGED: u32 = 10;
/// How long a refused peer's 403 may take to be written.
pub const ADMIN_REFUSED_WRITE: Duration = Duration::from_secs(1);
/// How long a connection closed to admit a new one may take to send what
/// hyper still holds of its last response before it is dropped.
pub const CONNECTION_CLOSE_FLUSH: Duration = Duration::from_secs(5);
/// How long the accept loop pauses after a failed `accept` (e.g. EMFILE).
pub const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// The session sweep runs every `min(session_idle_timeout / 4, this)`.
pub const SESSION_SWEEP_MAX_PERIOD: Duration = Duration::from_secs(60);

// ---- upstream and supervisor internals ----

/// Most `statvfs` calls of the built-in `disk_usage` running at once. A call
/// on a hung network mount never returns and pins a blocking thread; this
/// bounds how many can pile up.
pub const MAX_STATVFS_IN_FLIGHT: usize = 4;
/// How long `disk_usage` waits for `statvfs` before reporting a hung mount.
pub const STATVFS_TIMEOUT: Duration = Duration::from_secs(10);
/// Most thermal zones the built-in tools report (sorted by zone number; the
/// rest are dropped).
pub const MAX_THERMAL_ZONES: usize = 128;
/// Bytes of an over-long stdio line kept to find its JSON-RPC id.
pub const OVERLONG_LINE_HEAD_BYTES: usize = 256;
/// Capacity a stdio upstream's stdin buffers keep between bursts (a
/// larger batch's buffer is freed once written).
pub const STDIN_BUFFER_KEEP: usize = 16 * 1024;
/// Capacity a stdio upstream's stdout and stderr line buffers keep between
/// lines (a larger one is freed once its line is handled; an answer takes
/// its buffer along anyway).
pub const LINE_BUFFER_KEEP: usize = 16 * 1024;
/// Bytes of a failure reason kept in the persisted backoff state.
pub const PERSISTED_REASON_BYTES: usize = 256;
/// How long an exited child's last stderr lines (and, after its stdout
/// closed, its exit status) are waited for, to say why it ended.
pub const CHILD_EXIT_DRAIN: Duration = Duration::from_millis(200);
/// How long a handshake that failed on a broken pipe waits for the child's
/// exit status and last stderr line (they say more than "broken pipe").
pub const HANDSHAKE_EXIT_WAIT: Duration = Duration::from_millis(500);
/// How long closing a legacy HTTP upstream waits for its session `DELETE`.
pub const SESSION_DELETE_TIMEOUT: Duration = Duration::from_secs(2);
/// How many times in a row, without a new event ID, one call's SSE answer
/// from a legacy HTTP upstream is resumed with `Last-Event-ID` after the
/// server closed it (or it broke) before its response (2025-11-25
/// transports.mdx §Resumability and Redelivery); all within the call's
/// `call_timeout`.
pub const SSE_RESUMES_PER_CALL: u32 = 8;
/// How long before resuming such a stream when the server sent no `retry`.
pub const SSE_RETRY_DEFAULT: Duration = Duration::from_secs(1);
/// The least wait before resuming such a stream: a shorter `retry` is
/// lengthened to it, so a server sending `retry: 0` and a new event each
/// time cannot drive a tight loop of requests.
pub const SSE_RETRY_MIN: Duration = Duration::from_millis(100);
/// The longest SSE event ID kept for resuming a stream; a longer one makes
/// the stream not resumable (it would be sent back as `Last-Event-ID`).
pub const SSE_EVENT_ID_BYTES: usize = 256;

// ---- resumable downstream SSE streams ([`crate::downstream`]'s `resume`) ----

/// The bytes of events one legacy session's call stream keeps for replay
/// after `Last-Event-ID` (2025-11-25 transports.mdx §Resumability and
/// Redelivery): the oldest are dropped past it, the newest one (the
/// call's response, whatever its size) always kept. A resumption from an
/// event older than what is kept is refused (`sse_replay`).
pub const SSE_REPLAY_BYTES: usize = 16 * 1024;
/// Call streams whose client went away before the response, kept (not
/// polled, their call held in flight) for a resumption: the one expiring
/// soonest makes room (its call cancelled, counted as `sse_parked`).
pub const SSE_PARKED_STREAMS: usize = 32;
/// Parked streams (call and GET streams) of one session at most: its own
/// soonest-expiring makes room for another (one client's disconnections
/// cannot end others' calls).
pub const SSE_PARKED_PER_SESSION: usize = 4;
/// How long such a stream waits for its client to resume it with
/// `Last-Event-ID` before its call is cancelled (`sse_parked` not counted:
/// the client did not come back).
pub const SSE_RESUME_WINDOW: Duration = Duration::from_secs(60);
/// How long a resumption waits for the stream it names, still being
/// written on a connection that died without a word, to let go of it.
pub const SSE_TAKEOVER_WAIT: Duration = Duration::from_secs(2);
/// The `retry` (ms) of the priming event mcp-edge sends on a call stream
/// of a 2025-11-25 session: how long its client waits before resuming.
pub const SSE_RETRY_ADVERTISED_MS: u64 = 1000;

// ---- child processes ([`crate::reaper`]) ----

/// Stdio children whose exit status belongs to tokio, tracked at once
/// (`reaper::spawn`): 4 × [`MAX_UPSTREAMS`]. A config has at most one live
/// child per upstream; a reload may stop and start one each at the same
/// time, and a child dropped unreaped keeps its entry until tokio reaps it.
/// A spawn that finds the table full (after dropping the entries of
/// processes gone) is refused, as a full table refuses.
pub const MAX_TRACKED_CHILDREN: usize = 4 * MAX_UPSTREAMS;
/// Most processes one stop collects (one stdio child's marked tree, or
/// every descendant at exit): 1,024. Only the processes being stopped
/// count, not other upstreams' descendants. A larger tree is stopped in
/// part (`refused{limit="descendants"}` counts the processes left out, with
/// a throttled warning); what is left stays mcp-edge's descendant and is
/// stopped at exit.
pub const MAX_DESCENDANTS: usize = 1024;
/// Most parent links (`pid`, `ppid`: 8 bytes each) one walk of the process
/// tree reads from `/proc`: 65,536 (512 KiB), above the 32,768 pids of a
/// default 32-bit `pid_max`. Past it the walk sees part of the tree (counted
/// like [`MAX_DESCENDANTS`]).
pub const MAX_PROCESSES_LISTED: usize = 65_536;
/// How often a stop looks whether the descendants it sent SIGTERM are gone.
pub const DESCENDANT_POLL: Duration = Duration::from_millis(20);

// --- Downstream access ([`crate::access`]) ---

/// Log lines about refused requests (401, 429) at once before the rate
/// limit ([`crate::access::Throttle`]); the refusals are all counted in
/// `mcp_edge_refused_total` whatever is logged.
pub const REFUSAL_LOG_BURST: u32 = 10;
/// Log lines about refused requests per second once the burst is spent.
pub const REFUSAL_LOG_PER_SECOND: u32 = 1;

// ---- child processes: the sandbox ----

/// At most one warning per this period that a stdio child's sandbox is degraded.
pub const SANDBOX_WARN_PERIOD: Duration = Duration::from_secs(60);
/// At most this many directory entries are listed to split one default
/// grant of a stdio child's sandbox around the paths it must not reach
/// (`sandbox::split`); past it that default grant is left out (degraded).
pub const SANDBOX_SPLIT_ENTRIES: usize = 1024;

// ---- several boxes (`[server]` fleet keys, `config::fleet`) ----

/// Default `server.drain_grace`: after SIGTERM, how long `/readyz` answers
/// 503 while new connections are still served, so a balancer's health
/// check takes the box out before it stops listening: 5 s.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(5);
/// Accepted `server.drain_grace`: 0 (stop listening at once) to 5 min.
pub const MAX_DRAIN_GRACE: Duration = Duration::from_secs(300);
/// Least length of the `server.state_key_file` key: 32 bytes.
pub const MIN_STATE_KEY_BYTES: usize = 32;
/// Most bytes read of `server.state_key_file`.
pub const MAX_STATE_KEY_BYTES: usize = 1024;
/// Most `server.trusted_proxies` entries.
pub const MAX_TRUSTED_PROXIES: usize = 64;
/// Time a trusted proxy has to send its PROXY protocol header after
/// connecting (the request head's own timeout follows): 10 s.
pub const PROXY_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// With `proxy_protocol`, a connection from anyone else whose first bytes
/// are only the start of a PROXY signature is looked at again after this
/// pause, doubling up to [`PROXY_PEEK_PAUSE_MAX`] (within
/// [`PROXY_HEADER_TIMEOUT`]): 5 ms.
pub const PROXY_PEEK_PAUSE: Duration = Duration::from_millis(5);
/// The longest pause between those looks: 500 ms.
pub const PROXY_PEEK_PAUSE_MAX: Duration = Duration::from_millis(500);
