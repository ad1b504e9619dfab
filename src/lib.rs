//! # mcp-edge
//!
//! A bounded MCP gateway for ARM edge boxes. Several upstream MCP servers
//! (stdio child processes, remote streamable-HTTP servers, and the built-in
//! `edge` tools) are aggregated behind one downstream streamable-HTTP
//! endpoint that speaks both MCP eras (legacy 2025-03-26 … 2025-11-25 with
//! `initialize` and `Mcp-Session-Id`; modern 2026-07-28, stateless).
//!
//! ## Module map (lowest layer first; a module uses only modules above it)
//!
//! | module | owns |
//! |---|---|
//! | [`limits`] | every capacity, timeout, default and accepted range, in one place (per-entry byte costs are [`budget`]'s, wire codes [`protocol`]'s, metric names [`metrics`]') |
//! | [`instance`] | this box's name in a fleet (`[server] instance_id`): the prefix of its session ids, task ids and `requestState`, its default from the machine id and port |
//! | [`fault`] | test-only faults (`MCP_EDGE_TEST_FAULT`, cargo feature `test-faults`) that the watchdog must catch |
//! | [`backoff`] | exponential backoff with jitter that only lengthens: the one retry schedule (upstream reconnects, token requests) |
//! | [`jwt`] | signing keys for OAuth client assertions (`private_key_jwt`, RFC 7523): PEM keys, ES256/RS256, JWK thumbprints |
//! | [`alloc`] | the counting global allocator (live/peak heap) and RSS |
//! | [`metrics`] | metric names, the Prometheus recorder, heap gauges, the request-duration histogram (fixed atomic buckets) and metric handles resolved once |
//! | [`logline`] | log hygiene: upstream text made printable (control bytes escaped), errors with their sources, the token bucket behind client rates and log line budgets |
//! | [`notify`] | sd-notify (`READY=1`, `STATUS=`, `STOPPING=1`, `RELOADING=1`) and the watchdog pinger, reading a small health view |
//! | [`reaper`] | child processes: mcp-edge as child subreaper, the stdio children tokio waits for, orphans reaped by pid, a stopped child's escaped descendants found (`/proc`, an environment marker) and stopped |
//! | [`sandbox`] | the sandbox of stdio children: the default grant and the operator's paths, the explicit environment, the Landlock ruleset built before the spawn and entered between fork and exec (with `no_new_privs`, close-on-exec past stdio) |
//! | [`protocol`] | JSON-RPC envelope, error codes, era and version rules, SSE codec, `Retry-After` |
//! | [`config`] | TOML and `mcpServers` JSON → validated [`config::Config`]; board profiles |
//! | [`audit`] | the audit log: one JSON line per call, a bounded queue in front of one writer thread; rotated file or journal |
//! | [`budget`] | the worst-case live heap a config allows (capacity × measured cost) |
//! | [`drain`] | counting running calls/requests and waiting for them (shutdown, reload) |
//! | [`share`] | fair shares of the fixed tables among configured clients (`[[client]] share`): per-client counts and the one decision — take a free place, take an idle place of the client furthest over its share, or refuse |
//! | [`session`] | the fixed-capacity legacy session table (time passed in) |
//! | [`subscriptions`] | the fixed table of downstream resource subscriptions (who wants which URI from which upstream) |
//! | [`relay`] | what an upstream sends during a call, on its way to the caller: the bounded queue of a call's relayed messages, the table of server→client requests awaiting a client's answer, their ids, a modern caller's running call; below both faces |
//! | [`tasks`] | the tasks extension (`io.modelcontextprotocol/tasks`): the fixed table of tasks handed to callers under gateway task ids (upstream, its task id, owner, expiry) and the extension's wire rules |
//! | [`pins`] | tool pins: each upstream tool's definition hashed, compared with the hash pinned for it, withheld under `trust = "pin"` until approved; the pins file |
//! | [`oauth`] | the OAuth 2.1 client of HTTP upstreams: discovery (RFC 9728, RFC 8414), token requests (client credentials, refresh, authorization code with PKCE), the token file, one renewal in flight per upstream with backoff and parking |
//! | [`upstream`] | each upstream as a pair made together: the handle callers share (calls, status, catalog) and the owner's side ([`upstream::Steward`]: connection, status, catalog, progress) its owner task holds; the one connection interface over the transports (`stdio`, `streamable`, `builtin`); era probe, in-flight table, id remap |
//! | [`router`] | aggregated catalog, exposed-name mapping, list merge, call routing, what one client's `Policy` lets it see and call; the downstream face's only way to the upstreams |
//! | [`access`] | who a downstream caller is (`[[client]]`: bearer token or TLS client certificate), its rate, its weight in the shared tables, its `allow`/`deny` globs built into the router's `Policy`, where its requests may come from (`Host`/`Origin`) |
//! | [`supervisor`] | the owner task per upstream (connect, reconnect), holding its upstream's owner side; with [`gateway`], the only spawner of long-lived tasks |
//! | [`downstream`] | the downstream face, a pipeline: accept loop (with the TLS handshake) and the table of connection places, the `/mcp` endpoint, admission (head and request), the connection layer (a request received on its connection), sessions, serving a call, framing; admin routes |
//! | [`gateway`] | the composition root: builds everything from a `Config`; start, reload, shutdown, the systemd lifecycle |
//!
//! The binary (`src/main.rs`, its own modules in `src/cli/`) is CLI only: it
//! uses the library, never the reverse. Sibling submodules never form a
//! circle either. `tests/it/structure.rs` reads this table and checks these
//! rules (stage 0 of `tests/run_all.sh`, with fmt, clippy and cargo-deny).

// Functions that fit a screen (tests/it/structure.rs holds the hard line).
#![warn(clippy::too_many_lines)]

pub mod access;
pub mod alloc;
pub mod audit;
pub mod backoff;
pub mod budget;
pub mod config;
pub mod downstream;
pub mod drain;
pub mod fault;
pub mod gateway;
pub mod instance;
pub mod jwt;
pub mod limits;
pub mod logline;
pub mod metrics;
pub mod notify;
pub mod oauth;
pub mod pins;
pub mod protocol;
pub mod reaper;
pub mod relay;
pub mod router;
pub mod sandbox;
pub mod session;
pub mod share;
pub mod subscriptions;
pub mod supervisor;
pub mod tasks;
pub mod upstream;
