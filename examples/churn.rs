//! Session churn benchmark: is live heap a function of concurrent work, never
//! of cumulative work?
//!
//! Reproduces the method of a public report on an MCP streamable-HTTP server
//! (live heap sampled every 500 `initialize` requests up to 20,000, with and
//! without DELETE, then again after the idle timeout) against mcp-edge, in
//! three modes:
//!
//! - (a) legacy `initialize`, never deleted (the table holds up to its
//!   capacity, then evicts the least recently used session);
//! - (b) legacy `initialize`, each followed by `DELETE`;
//! - (c) modern (2026-07-28) stateless `tools/call` of `edge__uptime`;
//!
//! then 100,000 sessions mixed with and without DELETE followed by one idle
//! timeout (acceptance bound: back within 64 KiB of the pre-churn baseline;
//! the process exits non-zero otherwise), and the same (a)/(b) figures for
//! rmcp's streamable-HTTP server with its default `LocalSessionManager`,
//! measured in the same process with the same allocator as the anchor.
//!
//! Both servers are driven in-process through their request handlers
//! (`mcp_edge::downstream::endpoint::handle`, rmcp's `StreamableHttpService::handle`)
//! with `http::Request<Full<Bytes>>`, on a current-thread tokio runtime whose
//! clock is paused, so idle timeouts pass in virtual time. Heap figures come
//! from the counting global allocator (`mcp_edge::alloc`): exact requested
//! bytes, not allocator pages; RSS is `VmRSS`.
//!
//! Run: `cargo run --release --example churn`
#![allow(clippy::disallowed_methods)] // a fake upstream that burns real time
#![allow(clippy::large_futures)] // one benchmark run per future, awaited once

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_edge::alloc::{live_bytes, peak_bytes, reset_peak, rss_bytes};
use mcp_edge::config::Config;
use mcp_edge::downstream::{endpoint, App};
use mcp_edge::gateway::Gateway;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant as WallClock};

#[global_allocator]
static A: mcp_edge::alloc::Counting = mcp_edge::alloc::Counting;

/// Requests per mode.
const N: usize = 20_000;
/// Sample every `STEP` requests.
const STEP: usize = 500;
/// Samples per mode (0, 500, … 20,000).
const POINTS: usize = N / STEP + 1;
/// Sessions in the mixed run.
const MIXED: usize = 100_000;
/// Sample the mixed run every `MIXED_STEP` sessions.
const MIXED_STEP: usize = 10_000;
/// mcp-edge `server.session_idle_timeout`.
const IDLE: Duration = Duration::from_secs(60);
/// Acceptance bound of the mixed run's residue.
const BOUND: i64 = 64 * 1024;
/// Acceptance bound per idle legacy session.
const PER_SESSION_BOUND: f64 = 2048.0;
/// Warm-up requests of each kind before any baseline.
const WARMUP: usize = 300;
/// Repeated baseline samples for the noise estimate.
const NOISE_SAMPLES: usize = 10;

const HOST: &str = "127.0.0.1";
const ACCEPT: &str = "application/json, text/event-stream";
const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";
const INIT_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"churn","version":"0.1.0"}}}"#;
const CALL_BODY: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"edge__uptime","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn live() -> i64 {
    live_bytes() as i64
}

fn peak() -> i64 {
    peak_bytes() as i64
}

fn rss() -> u64 {
    rss_bytes().unwrap_or(0)
}

/// Lets every ready task run (rmcp's session workers, tokio's blocking-pool
/// hand-offs) before a sample. Never sleeps, so the paused clock stays put.
async fn settle(yields: usize) {
    for _ in 0..yields {
        tokio::task::yield_now().await;
    }
}

/// [`settle`], then a short real-time pause so tokio's blocking-pool thread
/// (the built-in tools read `/proc` through `spawn_blocking`) has released
/// the task it just finished, then [`settle`] again: a sample taken now sees
/// no request in flight.
async fn quiesce(yields: usize) {
    settle(yields).await;
    std::thread::sleep(Duration::from_micros(200));
    settle(yields).await;
}

/// Moves the paused clock forward one second at a time, letting timers
/// (the session sweep, rmcp's keep-alive) fire at each step.
async fn pass(d: Duration) {
    for _ in 0..d.as_secs() {
        tokio::time::advance(Duration::from_secs(1)).await;
        settle(64).await;
    }
    quiesce(1024).await;
}

fn post() -> http::request::Builder {
    Request::builder()
        .method(Method::POST)
        .uri("/mcp")
        .header(header::HOST, HOST)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, ACCEPT)
}

fn session_of<B>(r: &http::Response<B>) -> String {
    r.headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("initialize answered without Mcp-Session-Id")
        .to_owned()
}

/// One sample of a run: live heap relative to the run's baseline, sessions held.
#[derive(Debug, Clone, Copy, Default)]
struct Point {
    delta: i64,
    len: usize,
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
struct Run {
    points: [Point; POINTS],
    /// Live heap at the start of the run (absolute).
    base: i64,
    /// Peak live heap during the run, relative to `base`.
    peak: i64,
    /// Live heap after the idle timeout, relative to `base`.
    residue: i64,
    /// Sessions held after the idle timeout.
    len_after: usize,
    /// Wall-clock duration of the requests (not the idle pass).
    wall: Duration,
    /// Virtual (paused-clock) time the requests took: 0 unless the runtime
    /// auto-advanced the clock, which would let sessions idle mid-run.
    virtual_requests: Duration,
    /// Virtual time the whole run took, idle pass included.
    virtual_total: Duration,
    /// RSS after the last request, before the idle pass.
    rss_loaded: u64,
    /// RSS after the idle pass.
    rss_after: u64,
}

impl Run {
    fn new() -> Self {
        Run {
            points: [Point::default(); POINTS],
            base: 0,
            peak: 0,
            residue: 0,
            len_after: 0,
            wall: Duration::ZERO,
            virtual_requests: Duration::ZERO,
            virtual_total: Duration::ZERO,
            rss_loaded: 0,
            rss_after: 0,
        }
    }

    /// Least-squares slope (bytes per request) over samples `from..=to`.
    fn slope(&self, from: usize, to: usize) -> f64 {
        let pts = &self.points[from..=to];
        let n = pts.len() as f64;
        let xs = (from..=to).map(|i| (i * STEP) as f64);
        let mx = xs.clone().sum::<f64>() / n;
        let my = pts.iter().map(|p| p.delta as f64).sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for (x, p) in xs.zip(pts) {
            sxy += (x - mx) * (p.delta as f64 - my);
            sxx += (x - mx) * (x - mx);
        }
        sxy / sxx
    }

    fn last(&self) -> Point {
        self.points[POINTS - 1]
    }

    /// Highest sample index whose session count is below `capacity`
    /// (the range over which the table was still growing).
    fn growing_until(&self, capacity: usize) -> usize {
        (0..POINTS)
            .rev()
            .find(|&i| self.points[i].len == i * STEP && i * STEP <= capacity)
            .unwrap_or(POINTS - 1)
    }
}

// ---------------------------------------------------------------------------
// mcp-edge

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// (a) initialize, never deleted.
    Keep,
    /// (b) initialize, then DELETE.
    Delete,
    /// (c) modern stateless tools/call.
    Modern,
}

struct Edge {
    app: Arc<App>,
}

impl Edge {
    async fn send(&self, req: Request<Full<Bytes>>) -> (StatusCode, Option<String>, Bytes) {
        let resp = endpoint::handle(self.app.clone(), req).await;
        let status = resp.status();
        let sid = resp
            .headers()
            .contains_key("mcp-session-id")
            .then(|| session_of(&resp));
        let body = match resp.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => match e {},
        };
        (status, sid, body)
    }

    async fn initialize(&self) -> String {
        let req = post()
            .body(Full::new(Bytes::from_static(INIT_BODY.as_bytes())))
            .expect("request");
        let (status, sid, body) = self.send(req).await;
        assert_eq!(status, StatusCode::OK, "initialize: {body:?}");
        sid.expect("initialize answered without Mcp-Session-Id")
    }

    async fn delete(&self, sid: &str) {
        let req = Request::builder()
            .method(Method::DELETE)
            .uri("/mcp")
            .header(header::HOST, HOST)
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", LEGACY)
            .body(Full::new(Bytes::new()))
            .expect("request");
        let (status, _, body) = self.send(req).await;
        assert_eq!(status, StatusCode::OK, "DELETE: {body:?}");
    }

    async fn modern_call(&self) -> Bytes {
        let req = post()
            .header("mcp-protocol-version", MODERN)
            .header("mcp-method", "tools/call")
            .header("mcp-name", "edge__uptime")
            .body(Full::new(Bytes::from_static(CALL_BODY.as_bytes())))
            .expect("request");
        let (status, _, body) = self.send(req).await;
        assert_eq!(status, StatusCode::OK, "tools/call: {body:?}");
        body
    }

    async fn one(&self, mode: Mode) {
        match mode {
            Mode::Keep => {
                self.initialize().await;
            }
            Mode::Delete => {
                let sid = self.initialize().await;
                self.delete(&sid).await;
            }
            Mode::Modern => {
                self.modern_call().await;
            }
        }
    }

    fn len(&self) -> usize {
        self.app.sessions().count().0
    }

    /// The time after which every idle session is gone: the idle timeout
    /// plus one sweep period (`min(idle / 4, 60 s)`) plus a second.
    fn reap_after(&self) -> Duration {
        let idle = self.app.server().session_idle_timeout;
        idle + (idle / 4).min(Duration::from_secs(60)) + Duration::from_secs(1)
    }

    async fn run(&self, mode: Mode) -> Run {
        let mut r = Run::new();
        quiesce(256).await;
        r.base = live();
        reset_peak();
        r.points[0] = Point {
            delta: 0,
            len: self.len(),
        };
        let t = WallClock::now();
        let v = tokio::time::Instant::now();
        for i in 1..=N {
            self.one(mode).await;
            if i % STEP == 0 {
                quiesce(64).await;
                r.points[i / STEP] = Point {
                    delta: live() - r.base,
                    len: self.len(),
                };
            }
        }
        r.wall = t.elapsed();
        r.virtual_requests = v.elapsed();
        r.peak = peak() - r.base;
        r.rss_loaded = rss();
        pass(self.reap_after()).await;
        r.residue = live() - r.base;
        r.len_after = self.len();
        r.rss_after = rss();
        r.virtual_total = v.elapsed();
        r
    }
}

// ---------------------------------------------------------------------------
// rmcp anchor

/// A trivial rmcp server: one tool, `uptime`.
#[derive(Debug, Clone, Copy)]
struct Anchor;

impl ServerHandler for Anchor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListToolsResult, ErrorData>> + Send + '_ {
        let schema = serde_json::Map::from_iter([("type".to_owned(), "object".into())]);
        std::future::ready(Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "uptime",
            "Seconds since this process started.",
            schema,
        )])))
    }

    fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + Send + '_ {
        std::future::ready(if request.name == "uptime" {
            Ok(CallToolResult::success(vec![ContentBlock::text("42")]).into())
        } else {
            Err(ErrorData::invalid_params("no such tool", None))
        })
    }
}

struct Rmcp {
    svc: StreamableHttpService<Anchor, LocalSessionManager>,
    manager: Arc<LocalSessionManager>,
}

impl Rmcp {
    /// rmcp's defaults: `StreamableHttpServerConfig::default()` (stateful
    /// legacy sessions, SSE responses) and `LocalSessionManager::default()`.
    fn new() -> Self {
        let manager = Arc::new(LocalSessionManager::default());
        let svc = StreamableHttpService::new(
            || Ok(Anchor),
            manager.clone(),
            StreamableHttpServerConfig::default(),
        );
        Rmcp { svc, manager }
    }

    async fn initialize(&self) -> String {
        let req = post()
            .body(Full::new(Bytes::from_static(INIT_BODY.as_bytes())))
            .expect("request");
        let resp = self.svc.handle(req).await;
        assert_eq!(resp.status(), StatusCode::OK, "rmcp initialize");
        let sid = session_of(&resp);
        let body = match resp.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => match e {},
        };
        assert!(
            contains(&body, b"protocolVersion"),
            "rmcp initialize: {body:?}"
        );
        sid
    }

    async fn delete(&self, sid: &str) {
        let req = Request::builder()
            .method(Method::DELETE)
            .uri("/mcp")
            .header(header::HOST, HOST)
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", LEGACY)
            .body(Full::new(Bytes::new()))
            .expect("request");
        let resp = self.svc.handle(req).await;
        assert!(resp.status().is_success(), "rmcp DELETE: {}", resp.status());
        let _ = resp.into_body().collect().await;
    }

    async fn one(&self, mode: Mode) {
        let sid = self.initialize().await;
        if mode == Mode::Delete {
            self.delete(&sid).await;
        }
        // A real server runs the session's tasks between requests.
        settle(8).await;
    }

    async fn len(&self) -> usize {
        self.manager.sessions.read().await.len()
    }

    /// rmcp's own idle reaping: a session worker quits after
    /// `SessionConfig::keep_alive` (default 5 min) without events.
    fn reap_after() -> Duration {
        SessionConfig::DEFAULT_KEEP_ALIVE + Duration::from_secs(10)
    }

    async fn run(&self, mode: Mode) -> Run {
        let mut r = Run::new();
        quiesce(1024).await;
        r.base = live();
        reset_peak();
        r.points[0] = Point {
            delta: 0,
            len: self.len().await,
        };
        let t = WallClock::now();
        let v = tokio::time::Instant::now();
        for i in 1..=N {
            self.one(mode).await;
            if i % STEP == 0 {
                quiesce(256).await;
                r.points[i / STEP] = Point {
                    delta: live() - r.base,
                    len: self.len().await,
                };
            }
        }
        r.wall = t.elapsed();
        r.virtual_requests = v.elapsed();
        r.peak = peak() - r.base;
        r.rss_loaded = rss();
        pass(Self::reap_after()).await;
        r.residue = live() - r.base;
        r.len_after = self.len().await;
        r.rss_after = rss();
        r.virtual_total = v.elapsed();
        r
    }
}

// ---------------------------------------------------------------------------

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn main() -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        // One blocking-pool thread that never idles out: otherwise tokio
        // spawns and retires extra threads at its own pace, and each one
        // holds ~150 B of heap while it lives — noise, not mcp-edge.
        .max_blocking_threads(1)
        .thread_keep_alive(Duration::from_secs(3600))
        .build()
        .expect("tokio runtime");
    rt.block_on(bench())
}

async fn bench() -> ExitCode {
    let wall = WallClock::now();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("# mcp-edge session churn benchmark (examples/churn.rs)");
    println!(
        "# {cpus} CPUs; current-thread tokio runtime with a paused clock; counting global allocator"
    );
    let rss_start = rss();
    let heap_before_start = live();

    // The binary installs the Prometheus recorder; so does the benchmark, so
    // metric label sets are part of what is measured.
    mcp_edge::metrics::prometheus();
    let mut config = Config::embedded_default();
    config.server.listen = "127.0.0.1:0".parse().expect("address");
    config.server.admin_listen = None;
    config.server.session_capacity = mcp_edge::limits::SESSION_CAPACITY_CEILING;
    config.server.session_min_idle_before_evict = Duration::ZERO;
    config.server.session_idle_timeout = IDLE;
    let capacity = config.server.session_capacity;
    let gw = Gateway::start(config).await.expect("gateway");
    let ready = gw.wait_upstreams(Duration::from_secs(30)).await;
    assert_eq!(ready, 1, "the built-in edge upstream did not become ready");
    let heap_after_start = live();
    let edge = Edge {
        app: gw.app().clone(),
    };
    let (footprint, table_capacity) = {
        let s = &edge.app.sessions();
        (s.footprint_bytes(), s.count().1)
    };
    let per_slot = footprint as f64 / table_capacity as f64;
    println!(
        "# mcp-edge: embedded default config (built-in `edge` upstream), session_capacity {capacity} \
         (compiled ceiling), session_idle_timeout {}s, sweep every {}s, session_min_idle_before_evict 0s",
        IDLE.as_secs(),
        (IDLE / 4).min(Duration::from_secs(60)).as_secs()
    );
    println!(
        "# session table: {footprint} B for {table_capacity} slots = {per_slot:.1} B/slot, allocated once \
         in Gateway::start (live heap {heap_before_start} B before start, {heap_after_start} B after)"
    );

    // Warm-up: lazy statics, metric label sets, first-use buffers, the
    // tokio blocking pool; then one idle timeout so no warm-up session stays.
    let first = edge.modern_call().await;
    assert!(
        contains(&first, b"\"isError\":false"),
        "edge__uptime failed: {}",
        String::from_utf8_lossy(&first)
    );
    for _ in 0..WARMUP {
        edge.one(Mode::Keep).await;
        edge.one(Mode::Delete).await;
        edge.one(Mode::Modern).await;
    }
    pass(edge.reap_after()).await;
    assert_eq!(edge.len(), 0);

    // Allocator noise: the same quiet state sampled repeatedly, with a burst
    // of each kind of request between samples.
    let mut noise = [0i64; NOISE_SAMPLES];
    for n in noise.iter_mut() {
        for _ in 0..100 {
            edge.one(Mode::Delete).await;
            edge.one(Mode::Modern).await;
        }
        quiesce(256).await;
        *n = live();
    }
    let noise_lo = *noise.iter().min().expect("samples");
    let noise_hi = *noise.iter().max().expect("samples");
    let noise_spread = noise_hi - noise_lo;

    quiesce(256).await;
    let baseline = live();
    let rss_baseline = rss();
    println!("# pre-churn baseline (after {WARMUP} warm-up requests of each kind and one idle timeout): {baseline} B live heap");
    println!(
        "# allocator noise: {NOISE_SAMPLES} samples of the quiet state, 200 requests apart: spread {noise_spread} B ({noise_lo} .. {noise_hi})"
    );

    eprintln!("running mcp-edge (a) ...");
    let a = edge.run(Mode::Keep).await;
    eprintln!("running mcp-edge (b) ...");
    let b = edge.run(Mode::Delete).await;
    eprintln!("running mcp-edge (c) ...");
    let c = edge.run(Mode::Modern).await;

    eprintln!("running mcp-edge mixed {MIXED} ...");
    quiesce(256).await;
    let mixed_base = live();
    reset_peak();
    let mut mixed = [Point::default(); MIXED / MIXED_STEP + 1];
    mixed[0].len = edge.len();
    let t = WallClock::now();
    for i in 1..=MIXED {
        edge.one(if i % 2 == 0 { Mode::Delete } else { Mode::Keep })
            .await;
        if i % MIXED_STEP == 0 {
            quiesce(64).await;
            mixed[i / MIXED_STEP] = Point {
                delta: live() - baseline,
                len: edge.len(),
            };
        }
    }
    let mixed_wall = t.elapsed();
    let mixed_peak = peak() - baseline;
    let mixed_len_before = edge.len();
    pass(edge.reap_after()).await;
    let mixed_residue = live() - baseline;
    let mixed_residue_local = live() - mixed_base;
    let mixed_len_after = edge.len();
    let rss_after_edge = rss();
    let pass_bound = mixed_residue.abs() <= BOUND;

    eprintln!("running rmcp anchor (a) ...");
    let anchor = Rmcp::new();
    for _ in 0..WARMUP {
        anchor.one(Mode::Keep).await;
        anchor.one(Mode::Delete).await;
    }
    pass(Rmcp::reap_after()).await;
    // One session on its own: how much and in how many allocations.
    quiesce(1024).await;
    let (one_live, one_allocs) = (live(), mcp_edge::alloc::allocations());
    let sid = anchor.initialize().await;
    quiesce(1024).await;
    // Not counting the id string this driver keeps.
    let one_live = live() - one_live - sid.capacity() as i64;
    let one_allocs = mcp_edge::alloc::allocations() - one_allocs;
    anchor.delete(&sid).await;
    let ra = anchor.run(Mode::Keep).await;
    eprintln!("running rmcp anchor (b) ...");
    let rb = anchor.run(Mode::Delete).await;
    // How much of rmcp's post-timeout residue is its session map's capacity,
    // grown to hold the sessions of (a) and kept after they were removed?
    let map_capacity = anchor.manager.sessions.read().await.capacity();
    let before_shrink = live();
    anchor.manager.sessions.write().await.shrink_to_fit();
    let map_retained = before_shrink - live();
    // And how much more goes with the service itself (beyond what a fresh,
    // unused service occupies)?
    let before_drop = live();
    drop(anchor);
    quiesce(1024).await;
    let service_freed = before_drop - live();
    let before_fresh = live();
    let fresh = Rmcp::new();
    let fresh_size = live() - before_fresh;
    drop(fresh);
    let service_retained = service_freed - fresh_size;
    let runtime_retained = ra.residue + rb.residue - map_retained - service_retained;

    // ---- report ----
    println!();
    println!(
        "## Live heap vs requests (delta from each run's own baseline, bytes; len = sessions held)"
    );
    println!();
    println!(
        "| requests | edge (a) Δ | (a) len | edge (b) Δ | (b) len | edge (c) Δ | rmcp (a) Δ | rmcp (a) len | rmcp (b) Δ | rmcp (b) len |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for i in 0..POINTS {
        let (pa, pb, pc, qa, qb) = (
            a.points[i],
            b.points[i],
            c.points[i],
            ra.points[i],
            rb.points[i],
        );
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            i * STEP,
            pa.delta,
            pa.len,
            pb.delta,
            pb.len,
            pc.delta,
            qa.delta,
            qa.len,
            qb.delta,
            qb.len
        );
    }
    let row = |name: &str, r: &Run| {
        println!(
            "| {name} | {} | {} | {} | {:.3} | {:.3} | {:.1} |",
            r.peak,
            r.residue,
            r.len_after,
            r.virtual_requests.as_secs_f64(),
            r.virtual_total.as_secs_f64(),
            r.wall.as_secs_f64()
        );
    };
    println!();
    println!(
        "## Peak during each run and residue after the idle timeout (bytes vs the run's baseline)"
    );
    println!();
    println!("| run | peak Δ | residue after timeout | sessions after | virtual s during requests | virtual s in all | wall s |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    row("edge (a) initialize, never deleted", &a);
    row("edge (b) initialize + DELETE", &b);
    row("edge (c) modern tools/call", &c);
    row("rmcp (a) initialize, never deleted", &ra);
    row("rmcp (b) initialize + DELETE", &rb);

    println!();
    println!("## mcp-edge mixed run: {MIXED} sessions, odd ones never deleted, even ones DELETEd");
    println!();
    println!("| sessions | live Δ vs pre-churn baseline | len |");
    println!("|---:|---:|---:|");
    for (i, p) in mixed.iter().enumerate() {
        println!("| {} | {} | {} |", i * MIXED_STEP, p.delta, p.len);
    }
    println!();
    println!(
        "mixed: {:.1} s wall; peak Δ {mixed_peak} B; {mixed_len_before} sessions held before, {mixed_len_after} after one idle timeout (+{} s virtual)",
        mixed_wall.as_secs_f64(),
        edge.reap_after().as_secs()
    );
    println!(
        "mixed: residue after the idle timeout: {mixed_residue} B vs the pre-churn baseline ({mixed_residue_local} B vs the run's own start) \
         — bound ±{BOUND} B: {}",
        if pass_bound { "PASS" } else { "FAIL" }
    );

    // Per-session figures.
    let grow_a = a.growing_until(capacity);
    let edge_a = a.slope(0, grow_a);
    let edge_b = b.slope(0, POINTS - 1);
    let edge_c = c.slope(0, POINTS - 1);
    let rmcp_a = ra.slope(0, POINTS - 1);
    let rmcp_b = rb.slope(0, POINTS - 1);
    let per_idle = edge_a.max(0.0) + per_slot;
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!();
    println!("## Summary");
    println!();
    println!(
        "- per idle legacy session (a): mcp-edge {edge_a:.2} B/session allocated (least-squares slope over 0..{} sessions) \
         + {per_slot:.1} B/slot reserved once at start-up = {per_idle:.1} B; rmcp {rmcp_a:.0} B/session (slope over 0..{N}; \
         one session alone: {one_live} B live after {one_allocs} allocations, request and response included)",
        grow_a * STEP,
    );
    println!(
        "  bound ≤ 2 KiB per idle legacy session: mcp-edge {} ; rmcp {}",
        verdict(per_idle <= PER_SESSION_BOUND),
        verdict(rmcp_a <= PER_SESSION_BOUND),
    );
    println!(
        "- (a) at {N} requests: mcp-edge holds {} sessions (capacity {capacity}; beyond it each initialize evicts the LRU one), \
         Δ {} B; rmcp holds {} sessions, Δ {} B ({:.1} MiB)",
        a.last().len,
        a.last().delta,
        ra.last().len,
        ra.last().delta,
        mib(ra.last().delta.max(0) as u64)
    );
    println!(
        "- (b) with DELETE: mcp-edge {edge_b:.3} B/session, {} B retained after {N} (peak Δ {} B); \
         rmcp {rmcp_b:.3} B/session, {} B retained after {N} (peak Δ {} B)",
        b.last().delta,
        b.peak,
        rb.last().delta,
        rb.peak
    );
    println!(
        "- (c) modern stateless tools/call: mcp-edge {edge_c:.3} B/request, {} B retained after {N} requests (peak Δ {} B), \
         ± {noise_spread} B allocator noise",
        c.last().delta,
        c.peak
    );
    println!(
        "- residue after the idle timeout (vs each run's baseline): mcp-edge (a) {} B, (b) {} B, (c) {} B; \
         rmcp (a) {} B after its {} s keep-alive, (b) {} B; of rmcp's residue, {map_retained} B is the session map's table \
         kept at its grown size (room for ~{map_capacity} entries; freed by shrink_to_fit), {service_retained} B more \
         is freed only by dropping the service, {runtime_retained} B remains even after the service is dropped (runtime side)",
        a.residue,
        b.residue,
        c.residue,
        ra.residue,
        SessionConfig::DEFAULT_KEEP_ALIVE.as_secs(),
        rb.residue,
    );
    println!(
        "- mixed {MIXED} sessions + one idle timeout: {mixed_residue} B vs the pre-churn baseline (bound ±64 KiB): {}",
        verdict(pass_bound)
    );
    println!(
        "- RSS: {:.1} MiB at start, {:.1} MiB at the pre-churn baseline, {:.1} MiB after all mcp-edge runs; \
         rmcp: {:.1} MiB holding {N} sessions, {:.1} MiB after its keep-alive reaped them, {:.1} MiB after (b)",
        mib(rss_start),
        mib(rss_baseline),
        mib(rss_after_edge),
        mib(ra.rss_loaded),
        mib(ra.rss_after),
        mib(rb.rss_after),
    );
    println!(
        "- allocator noise: the quiet state sampled {NOISE_SAMPLES} times varied by {noise_spread} B; \
         the counting allocator reports exact requested bytes, so no rounding noise"
    );
    println!("- total wall time {:.1} s", wall.elapsed().as_secs_f64());

    gw.shutdown().await;
    if pass_bound {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
