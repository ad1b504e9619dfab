//! The worst-case live heap a configuration allows: every capacity times
//! its measured per-entry cost, plus fixed costs. `mcp-edge check-config`
//! prints it and, with `--board NAME`, fails when it exceeds the profile's
//! `heap_budget_bytes`.
//!
//! The per-entry costs are measured with the counting allocator by
//! `tests/it/budget.rs`, which fails if any measurement exceeds its constant
//! here (so the constants are upper bounds on this build, with headroom);
//! the measured values are in `docs/benchmarks.md`. Byte-sized limits
//! (request bodies, results, catalogs) are multiplied by a factor: the peak
//! heap per byte while such a message is read, parsed and written on.
//!
//! What can be alive at once:
//! - every session slot (allocated at start), and long-lived streams (legacy
//!   GET streams, at most [`limits::MAX_STREAMS_PER_SESSION`] per session,
//!   modern listen streams, and the streams of the HTTP+SSE transport, one
//!   per such session, each measured at no more than a GET stream costs)
//!   from one pool of max(1, `max_connections` / 2) places, each counted
//!   with a full `sse_queue_depth` queue of relayed messages of typical size;
//! - the resource subscription table, allocated at start, with a URI of
//!   up to [`limits::MAX_SUBSCRIPTION_URI_BYTES`] per entry;
//! - `max_connections` connections, each holding a request head of up to
//!   [`limits::MAX_REQUEST_HEAD_BYTES`] (counted in [`CONNECTION_BYTES`])
//!   or a request body of up to `max_body_bytes`;
//! - requests of the HTTP+SSE transport in flight, answered on their
//!   session's stream after their POST's connection is free: at most
//!   `max_connections` together, each holding its message (a request body
//!   at most) and its request's headers;
//! - calls in flight: at most one per connection (HTTP/1.1 answers one request
//!   at a time), one per HTTP+SSE request in flight, plus the legacy call
//!   streams parked for resumption without one
//!   ([`limits::SSE_PARKED_STREAMS`]), and at most Σ `max_in_flight`;
//!   each with a result of up to the largest `max_result_bytes` and a full
//!   replay buffer ([`REPLAY_STREAM_BYTES`]); plus one message being read
//!   per upstream;
//! - with `[audit]`, the audit queue: at most
//!   [`limits::AUDIT_QUEUE_BYTES`] of records, plus one record alone (at
//!   most a request body);
//! - with `server.tls_cert`, each connection's rustls state and the rustls
//!   server session cache (256 stored sessions);
//! - per upstream: its tables (in-flight, relayed requests), stderr ring,
//!   a catalog of up to `max_catalog_bytes` (kept, and merged into the
//!   aggregated view), and up to `max_catalog_entries` tool pins, each
//!   possibly withheld ([`crate::pins`]).

use crate::config::{Config, Transport};
use crate::limits;

/// Live heap of an idle gateway with one upstream and no session: runtime,
/// metrics recorder, router, session table header, listeners (bytes).
pub const FIXED_BYTES: usize = 512 * 1024;
/// One legacy session slot, allocated at start (bytes; `session::Table`).
pub const SESSION_SLOT_BYTES: usize = 48;
/// One open GET stream without queued messages (bytes).
pub const STREAM_BYTES: usize = 4 * 1024;
/// One slot of the resource subscription table ([`crate::subscriptions`]),
/// without its URI: 80 B (checked against `size_of` by a unit test; a
/// session id carries its box's instance id, `crate::instance`).
pub const SUBSCRIPTION_BYTES: usize = 80;
/// One parked call of a modern caller (`http::parked`: the boxed call
/// future with its relay queue and the requests asked), measured by
/// `tests/it/mrtr_heap.rs` at 71–74 kB per call for the whole test process
/// (gateway, scripted upstream and their connections; 70,990–72,510 B at
/// 2d98144, once 73,883 B, over the 72 KiB this was), which fails when a
/// parked call costs more than this.
pub const PARKED_CALL_BYTES: usize = 80 * 1024;
/// One slot of the task table ([`crate::tasks`]) with its free-list index,
/// without the upstream's task id: 112 B (checked against `size_of` by a
/// unit test there).
pub const TASK_SLOT_BYTES: usize = 112;
/// One queued relayed message (progress, log, list_changed) as it sits in a
/// stream's queue (bytes, typical).
pub const QUEUED_MESSAGE_BYTES: usize = 2 * 1024;
/// One downstream connection before its body (bytes): its worst case is a
/// request head just under [`limits::MAX_REQUEST_HEAD_BYTES`] held
/// unterminated, hyper's read buffer at its largest. Measured by
/// `tests/it/budget.rs` with 64 such connections: 71,056 B each (an idle
/// keep-alive connection: 31,072 B), with 32 KiB heads. That includes its
/// place in `http::conns` (a shared slot, ~100 B; the table's entries,
/// 32 B per place, are allocated at start and fit in the headroom).
pub const CONNECTION_BYTES: usize = 80 * 1024;
/// With `server.tls_cert`: what one downstream connection holds on top of
/// [`CONNECTION_BYTES`], its rustls state (record buffers, traffic keys,
/// the peer's certificate under mTLS) (bytes). Measured by `tests/it/budget.rs`
/// like the plain connections: 64 idle keep-alive connections over TLS 1.3
/// (rcgen ECDSA P-256 certificates), one request answered on each, the
/// client's rustls state dropped and only its sockets kept; live heap delta
/// / 64 was 41,896 B (mTLS, a client certificate verified: 42,608 B)
/// against 30,984 B plain, so ≈ 11 KiB more. A connection stalled in its
/// handshake holds less (13–15 KiB in all).
pub const TLS_CONNECTION_BYTES: usize = 16 * 1024;
/// With `server.tls_cert`: rustls' server session cache, shared by all
/// connections and kept after they close (bytes): 256 stored TLS 1.3
/// sessions (two tickets per full handshake), each with the client's
/// certificate chain under mTLS. Measured full (160 handshakes): 51,200 B,
/// with mTLS ≈ 236,000 B (one rcgen ECDSA P-256 client certificate; larger
/// client chains grow each entry by their DER size).
pub const TLS_SESSION_CACHE_BYTES: usize = 256 * 1024;
/// Peak heap per byte of request body while it is read and parsed.
/// Measured 2.2 for a modern `tools/call` (`tests/it/budget.rs`, issue 14:
/// its result no longer parsed and copied; 4.2 before).
pub const BODY_FACTOR: usize = 3;
/// One call in flight, without its result (bytes).
pub const CALL_BYTES: usize = 4 * 1024;
/// A legacy session's call stream kept for resumption: its replay buffer
/// full (`limits::SSE_REPLAY_BYTES` of events, each with its ID line and
/// place), its state and its place among the attached or parked streams,
/// without its response (counted with the call's result). Measured by
/// `tests/it/budget.rs` with the buffer full of progress notifications.
pub const REPLAY_STREAM_BYTES: usize = limits::SSE_REPLAY_BYTES + 8 * 1024;
/// Peak heap per byte of a stdio upstream's result while it is read and
/// written to the client: the bytes as received, in a buffer grown by
/// quarters (`protocol::raw`). Measured 1.4 for a 512 KiB result
/// (`tests/it/budget.rs`), 1.12 for 4 MiB (`tests/bench/run.sh`); 6 before
/// results passed through as bytes (issue 14). The same holds for an HTTP
/// upstream: its JSON body is gathered once into a buffer reserved from
/// `Content-Length`, its SSE event is the data line's own buffer, and its
/// connection reads through at most `limits::UPSTREAM_READ_BUFFER`
/// (measured 1.4 JSON, 1.5 SSE at 512 KiB; 2.6 and 2.4 with hyper's
/// default read buffer, 7 while HTTP results were parsed into a tree).
pub const RESULT_FACTOR: usize = 2;
/// Heap per byte of catalog JSON (kept per upstream, plus the merged view).
pub const CATALOG_FACTOR: usize = 8;
/// One tool pin with the tool withheld: its pin, its entry in the
/// catalog's withheld list and in the merged view's set of withheld names
/// (bytes, names of typical length; a name's bytes are also in the
/// catalog). Measured by `tests/it/budget.rs` (1,024 pins, every tool withheld).
pub const PIN_BYTES: usize = 512;
/// One upstream's own structures and tables, without its catalog (bytes).
pub const UPSTREAM_BYTES: usize = 96 * 1024;

/// One line of the estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// What it is, e.g. `connections (256 × (16 KiB + 1 MiB body × 4))`.
    pub what: String,
    /// Its worst-case live heap in bytes.
    pub bytes: usize,
}

/// The worst-case live heap of a config, item by item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    /// The items, largest cost first as computed (fixed costs first).
    pub items: Vec<Item>,
}

fn kib(b: usize) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1024 {
        format!("{} KiB", b / 1024)
    } else {
        format!("{b} B")
    }
}

/// `b` bytes in MiB with one decimal, for humans.
pub fn mib(b: usize) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

impl Estimate {
    /// The estimate for `cfg` (disabled upstreams cost nothing).
    pub fn of(cfg: &Config) -> Estimate {
        let s = &cfg.server;
        let ups: Vec<_> = cfg.upstreams.iter().filter(|u| u.enabled).collect();
        // GET and listen streams share one pool of max(1, max_connections / 2)
        // places; each open stream also holds a connection (counted there).
        let open_streams = (s.max_connections / 2).max(1);
        let mut items = vec![
            Item {
                what: "fixed (runtime, recorder, router, listeners)".into(),
                bytes: FIXED_BYTES,
            },
            Item {
                what: format!(
                    "session slots ({} × {})",
                    s.session_capacity,
                    kib(SESSION_SLOT_BYTES)
                ),
                bytes: s.session_capacity * SESSION_SLOT_BYTES,
            },
            Item {
                what: format!(
                    "GET and listen streams (max(1, {} / 2) × ({} + {} replay + {} queued × {}))",
                    s.max_connections,
                    kib(STREAM_BYTES),
                    kib(REPLAY_STREAM_BYTES),
                    s.sse_queue_depth,
                    kib(QUEUED_MESSAGE_BYTES)
                ),
                bytes: open_streams
                    * (STREAM_BYTES
                        + REPLAY_STREAM_BYTES
                        + s.sse_queue_depth * QUEUED_MESSAGE_BYTES),
            },
            Item {
                what: format!(
                    "resource subscriptions ({} × ({} B + up to {} URI))",
                    limits::MAX_RESOURCE_SUBSCRIPTIONS,
                    SUBSCRIPTION_BYTES,
                    kib(limits::MAX_SUBSCRIPTION_URI_BYTES)
                ),
                bytes: limits::MAX_RESOURCE_SUBSCRIPTIONS
                    * (SUBSCRIPTION_BYTES + limits::MAX_SUBSCRIPTION_URI_BYTES),
            },
            tasks_item(),
            parked_item(),
            Item {
                what: format!(
                    "connections ({} × ({} + {} body × {BODY_FACTOR}))",
                    s.max_connections,
                    kib(CONNECTION_BYTES),
                    kib(s.max_body_bytes)
                ),
                bytes: s.max_connections * (CONNECTION_BYTES + s.max_body_bytes * BODY_FACTOR),
            },
            Item {
                what: format!(
                    "HTTP+SSE requests in flight ({} × ({} head + {} body × {BODY_FACTOR}))",
                    s.max_connections,
                    kib(limits::MAX_REQUEST_HEAD_BYTES),
                    kib(s.max_body_bytes)
                ),
                bytes: s.max_connections
                    * (limits::MAX_REQUEST_HEAD_BYTES + s.max_body_bytes * BODY_FACTOR),
            },
            calls_item(s, &ups),
        ];
        items.extend(tls_item(s));
        if cfg.audit.is_some() {
            items.push(Item {
                what: format!(
                    "audit queue ({} + one {} body)",
                    kib(limits::AUDIT_QUEUE_BYTES),
                    kib(s.max_body_bytes)
                ),
                bytes: limits::AUDIT_QUEUE_BYTES + s.max_body_bytes,
            });
        }
        items.extend(ups.into_iter().map(upstream_item));
        Estimate { items }
    }

    /// The sum of all items, in bytes.
    pub fn total(&self) -> usize {
        self.items.iter().map(|i| i.bytes).sum()
    }

    /// A table: one line per item, then the total.
    pub fn render(&self) -> String {
        let mut o = String::from("# worst-case live heap of mcp-edge (src/budget.rs):\n");
        for i in &self.items {
            o.push_str(&format!("#   {:>10}  {}\n", mib(i.bytes), i.what));
        }
        o.push_str(&format!("#   {:>10}  total\n", mib(self.total())));
        o
    }
}

/// Calls in flight: one per connection and per HTTP+SSE request in
/// flight, and the call streams parked without one, at most Σ
/// `max_in_flight`; each with a full replay buffer and the largest result.
fn calls_item(s: &crate::config::ServerConfig, ups: &[&crate::config::UpstreamConfig]) -> Item {
    let in_flight: usize = ups.iter().map(|u| u.max_in_flight).sum();
    let calls = in_flight.min(2 * s.max_connections + limits::SSE_PARKED_STREAMS);
    let largest_result = ups.iter().map(|u| u.max_result_bytes).max().unwrap_or(0);
    Item {
        what: format!(
            "calls in flight (min({in_flight}, 2 × {} + {} parked) × ({} + {} replay + {} result × {RESULT_FACTOR}))",
            s.max_connections,
            limits::SSE_PARKED_STREAMS,
            kib(CALL_BYTES),
            kib(REPLAY_STREAM_BYTES),
            kib(largest_result)
        ),
        bytes: calls * (CALL_BYTES + REPLAY_STREAM_BYTES + largest_result * RESULT_FACTOR),
    }
}

/// With `server.tls`: each connection's rustls state on top of its plain
/// cost, plus the server's session cache (filled by past handshakes, kept).
fn tls_item(s: &crate::config::ServerConfig) -> Option<Item> {
    s.tls.as_ref()?;
    Some(Item {
        what: format!(
            "TLS state ({} × {} + {} session cache)",
            s.max_connections,
            kib(TLS_CONNECTION_BYTES),
            kib(TLS_SESSION_CACHE_BYTES)
        ),
        bytes: s.max_connections * TLS_CONNECTION_BYTES + TLS_SESSION_CACHE_BYTES,
    })
}

/// One upstream's share: its fixed cost, its catalog, one read buffer (a
/// transport reads one upstream message at a time) and, for stdio, the
/// stderr ring.
/// The task table ([`crate::tasks`]): its slots and the longest upstream ids.
fn tasks_item() -> Item {
    Item {
        what: format!(
            "tasks ({} × ({} B + up to {} B upstream task id), {} orphans to cancel alike)",
            limits::TASKS_CAPACITY,
            TASK_SLOT_BYTES,
            limits::MAX_TASK_ID_BYTES,
            limits::TASK_ORPHANS
        ),
        bytes: (limits::TASKS_CAPACITY + limits::TASK_ORPHANS)
            * (TASK_SLOT_BYTES + limits::MAX_TASK_ID_BYTES),
    }
}

/// The parked calls of modern callers (`http::parked`).
fn parked_item() -> Item {
    Item {
        what: format!(
            "parked calls ({} × {})",
            limits::PARKED_CALLS,
            kib(PARKED_CALL_BYTES)
        ),
        bytes: limits::PARKED_CALLS * PARKED_CALL_BYTES,
    }
}

fn upstream_item(u: &crate::config::UpstreamConfig) -> Item {
    let (read, stderr) = match u.transport {
        Transport::Stdio { .. } => (u.max_result_bytes, limits::STDERR_TAIL_BYTES),
        // Its answers' reader, and each lane's GET stream (`upstream::http::lanes`).
        Transport::Http { .. } => (
            u.max_result_bytes
                + limits::UPSTREAM_CAPABILITY_SESSIONS
                    * u.max_result_bytes.min(limits::LANE_STREAM_EVENT_BYTES),
            0,
        ),
        Transport::Builtin => (0, 0),
    };
    // The capability sets its scoped catalog was listed for: a bit per
    // tool each (`upstream::scopes`),
    // and one set's listing in flight (one at a time per upstream).
    let scopes = match u.transport {
        Transport::Builtin => 0, // its tools are the same for every caller
        _ => {
            limits::UPSTREAM_CAPABILITY_SESSIONS * (u.max_catalog_entries.div_ceil(8) + 64)
                + u.max_catalog_bytes * (CATALOG_FACTOR / 2)
        }
    };
    Item {
        what: format!(
            "upstream {} ({} + {} catalog × {CATALOG_FACTOR} + {} pins × {} + {} read buffers + {} stderr + {} capability sets)",
            u.name,
            kib(UPSTREAM_BYTES),
            kib(u.max_catalog_bytes),
            u.max_catalog_entries,
            kib(PIN_BYTES),
            kib(read),
            kib(stderr),
            kib(scopes)
        ),
        bytes: UPSTREAM_BYTES
            + u.max_catalog_bytes * CATALOG_FACTOR
            + u.max_catalog_entries * PIN_BYTES
            + read
            + stderr
            + scopes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capacity_counts() {
        let base = Config::embedded_default();
        let t0 = Estimate::of(&base).total();
        let mut more = base.clone();
        more.server.session_capacity *= 2;
        assert!(Estimate::of(&more).total() > t0);
        let mut more = base.clone();
        more.server.max_body_bytes *= 2;
        assert!(Estimate::of(&more).total() > t0);
        let mut more = base.clone();
        more.upstreams[0].max_result_bytes *= 2;
        assert!(Estimate::of(&more).total() > t0);
        let mut more = base.clone();
        more.upstreams[0].max_catalog_bytes *= 2;
        assert!(Estimate::of(&more).total() > t0);
        let mut more = base.clone();
        more.upstreams[0].max_catalog_entries *= 2;
        assert!(Estimate::of(&more).total() > t0);
        let mut off = base.clone();
        off.upstreams[0].enabled = false;
        assert!(Estimate::of(&off).total() < t0);
    }
}
