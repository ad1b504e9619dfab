//! The built-in default of every `[server]` and `[[upstream]]` key, all from
//! [`crate::limits`] (a board profile's defaults are applied by `ctx`).

use super::{EraPreference, ServerConfig, ToolNameRule, Transport, Trust, UpstreamConfig};
use crate::limits;

/// `[server]` with every key at its default.
pub(super) fn server() -> ServerConfig {
    ServerConfig {
        listen: limits::DEFAULT_LISTEN
            .parse()
            .expect("limits::DEFAULT_LISTEN is a socket address"),
        allowed_origins: Vec::new(),
        allowed_hosts: Vec::new(),
        max_body_bytes: limits::DEFAULT_MAX_BODY_BYTES,
        session_capacity: limits::DEFAULT_SESSION_CAPACITY,
        session_idle_timeout: limits::DEFAULT_SESSION_IDLE_TIMEOUT,
        session_min_idle_before_evict: limits::DEFAULT_SESSION_MIN_IDLE_BEFORE_EVICT,
        keepalive: limits::DEFAULT_KEEPALIVE,
        max_connections: limits::DEFAULT_MAX_CONNECTIONS,
        // All of them: the default listen is loopback (`max_connections_per_peer` in `server.rs`).
        max_connections_per_peer: limits::DEFAULT_MAX_CONNECTIONS,
        sse_queue_depth: limits::RELAY_QUEUE_DEPTH,
        max_pending_server_requests: limits::PENDING_SERVER_REQUESTS,
        tool_name_separator: limits::DEFAULT_TOOL_NAME_SEPARATOR.to_owned(),
        tool_names: ToolNameRule::Strict,
        admin_listen: Some(
            limits::DEFAULT_ADMIN_LISTEN
                .parse()
                .expect("limits::DEFAULT_ADMIN_LISTEN is a socket address"),
        ),
        state_directory: None,
        admin_socket: None,
        tls: None,
        allow_unauthenticated: false,
        fleet: Default::default(),
    }
}

impl Default for ServerConfig {
    /// Every `[server]` key at its default from [`crate::limits`].
    fn default() -> Self {
        server()
    }
}

/// An enabled upstream with prefix = name and every other key at its default.
pub(super) fn upstream(name: String, transport: Transport) -> UpstreamConfig {
    UpstreamConfig {
        prefix: name.clone(),
        name,
        enabled: true,
        required: false,
        era: EraPreference::Auto,
        trust: Trust::Auto,
        call_timeout: limits::DEFAULT_CALL_TIMEOUT,
        max_in_flight: limits::DEFAULT_MAX_IN_FLIGHT,
        max_result_bytes: limits::DEFAULT_MAX_RESULT_BYTES,
        max_catalog_entries: limits::MAX_CATALOG_ENTRIES,
        max_catalog_bytes: limits::DEFAULT_MAX_CATALOG_BYTES,
        health_interval: limits::DEFAULT_HEALTH_INTERVAL,
        probe_timeout: limits::DEFAULT_PROBE_TIMEOUT,
        probe_misses: limits::DEFAULT_PROBE_MISSES,
        backoff_initial: limits::DEFAULT_BACKOFF_INITIAL,
        backoff_factor: limits::DEFAULT_BACKOFF_FACTOR,
        backoff_cap: limits::DEFAULT_BACKOFF_CAP,
        stable_period: limits::DEFAULT_STABLE_PERIOD,
        retry_after_cap: limits::DEFAULT_RETRY_AFTER_CAP,
        connect_on_demand: false,
        startup_timeout: limits::DEFAULT_STARTUP_TIMEOUT,
        transport,
    }
}
