//! Metric updates on the request path allocate nothing (issue 14 part 4):
//! measured with the test binary's counting allocator, and checked on real
//! proxied calls with a thread-local recorder that sees every registration a
//! call makes. Each test counts alone in its process (`support::heap`).

use crate::support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcp_edge::alloc::allocations;
use mcp_edge::gateway::Gateway;
use mcp_edge::metrics::{self as m, LazyCounter};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use serde_json::{json, Value};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// Allocations per call of `f`: the fewest counted over three runs of `n`
/// calls, after two warm-up calls. The allocator's counter is the
/// process's, so an allocation of the test harness's own thread can fall in
/// one run; one that `f` makes falls in every run.
fn allocations_per_call(n: u64, mut f: impl FnMut()) -> f64 {
    f();
    f();
    let runs = (0..3).map(|_| {
        let before = allocations();
        for _ in 0..n {
            f();
        }
        allocations() - before
    });
    runs.min().unwrap() as f64 / n as f64
}

/// Every metric update a proxied request makes — its count in
/// `mcp_edge_requests_total{method, outcome}` (either outcome, a known
/// method or `other`), its duration in `mcp_edge_request_duration_seconds`,
/// and a per-upstream counter held as a [`LazyCounter`] — allocates
/// nothing once its handle is resolved. The same updates through
/// `metrics::counter!`/`histogram!` (as the request path made them before)
/// are measured alongside for the record.
#[test]
fn hot_path_metric_updates_allocate_nothing() {
    if !crate::alone!(hot_path_metric_updates_allocate_nothing) {
        return;
    }
    m::prometheus().expect("the Prometheus recorder");
    let method = black_box(String::from("tools/call"));
    // A method no other test here observes, so its count is this test's.
    let observed = black_box(String::from("completion/complete"));
    let upstream = black_box(String::from("some-upstream"));
    let held = LazyCounter::new();
    let n = 10_000;
    let ours = [
        (
            "count_request(tools/call, ok)",
            allocations_per_call(n, || m::count_request(&method, true)),
        ),
        (
            "count_request(tools/call, error)",
            allocations_per_call(n, || m::count_request(&method, false)),
        ),
        (
            "count_request(unknown method → other)",
            allocations_per_call(n, || m::count_request("x/y", true)),
        ),
        (
            "observe_duration(completion/complete)",
            allocations_per_call(n, || {
                m::observe_duration(&observed, Duration::from_micros(700))
            }),
        ),
        (
            "LazyCounter{upstream}.increment",
            allocations_per_call(n, || {
                held.increment(
                    1,
                    || metrics::counter!(m::STDOUT_NOISE, "upstream" => upstream.clone()),
                )
            }),
        ),
    ];
    let label = m::method_label(&method);
    let macros = [
        (
            "counter!(REQUESTS, method => label, outcome => ..)",
            allocations_per_call(n, || {
                metrics::counter!(m::REQUESTS, "method" => label, "outcome" => "ok").increment(1)
            }),
        ),
        (
            "counter!(REFUSED, limit => \"literal\")",
            allocations_per_call(n, || {
                metrics::counter!(m::REFUSED, "limit" => "in_flight").increment(1)
            }),
        ),
        (
            "counter!(STDOUT_NOISE, upstream => name.clone())",
            allocations_per_call(n, || {
                metrics::counter!(m::STDOUT_NOISE, "upstream" => upstream.clone()).increment(1)
            }),
        ),
    ];
    for (what, a) in ours.iter().chain(&macros) {
        println!("{what}: {a:.2} allocations per update");
    }
    for (what, a) in ours {
        assert_eq!(a, 0.0, "{what} allocates");
    }
    let text = m::render().unwrap();
    let count = format!(
        "mcp_edge_request_duration_seconds_count{{method=\"completion/complete\"}} {}",
        3 * n + 2
    );
    assert!(text.contains(&count), "observations counted: {text}");
    assert_eq!(
        m::read(m::STDOUT_NOISE, "upstream=\"some-upstream\""),
        (2 * (3 * n + 2)) as f64
    );
}

/// A recorder that counts the metrics registered through it (each
/// `metrics::counter!`/`gauge!`/`histogram!` call is one) and records
/// nothing.
#[derive(Default)]
struct Registrations(AtomicUsize, Mutex<Vec<String>>);

impl Registrations {
    fn seen(&self, kind: &str, key: &Key) {
        self.0.fetch_add(1, Relaxed);
        self.1
            .lock()
            .unwrap()
            .push(format!("{kind} {}", key.name()));
    }
}

impl Recorder for Registrations {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.seen("counter", key);
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.seen("gauge", key);
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.seen("histogram", key);
        Histogram::noop()
    }
}

/// One POST through the endpoint (no socket); the answer must be a result.
async fn call(gw: &Gateway, headers: &[(&str, &str)], body: Value) -> Option<String> {
    let mut b = http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let resp = mcp_edge::downstream::endpoint::handle(gw.app().clone(), req).await;
    let (status, sid) = (resp.status(), resp.headers().get("mcp-session-id").cloned());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        status.is_success() && !text.contains("\"error\""),
        "{status} {text}"
    );
    sid.map(|s| s.to_str().unwrap().to_string())
}

/// Legacy (session) and modern (2026-07-28) `tools/call`s to the built-in
/// `edge` upstream and to a stdio upstream, once warmed up, update their
/// metrics only through held handles: none registers a metric (each
/// registration is a registry lookup and at least one allocation). Before,
/// each call registered two (`requests_total`, the histogram).
#[test]
fn proxied_calls_register_no_metric() {
    if !crate::alone!(proxied_calls_register_no_metric) {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        m::prometheus().expect("the Prometheus recorder");
        let fake = support::fake_block("fake", "legacy", "");
        let gw = support::start("admin_listen = \"off\"", &format!("{fake}\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n")).await;
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let sid = call(&gw, &[], init).await.expect("a session");
        let legacy = [("mcp-session-id", sid.as_str()), ("mcp-protocol-version", "2025-11-25")];
        call(&gw, &legacy, json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        let tools = [("edge__load_average", json!({})), ("fake__echo", json!({"text": "hi"}))];
        let modern_meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}});
        let round = |id: u64| {
            let (gw, legacy, tools, meta) = (&gw, &legacy, &tools, &modern_meta);
            async move {
                for (name, args) in tools {
                    let params = json!({"name": name, "arguments": args});
                    call(gw, legacy, json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})).await;
                    let h = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", *name)];
                    let params = json!({"name": name, "arguments": args, "_meta": meta});
                    call(gw, &h, json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})).await;
                }
            }
        };
        round(1).await; // warm-up: handles resolved under the Prometheus recorder
        let seen = std::sync::Arc::new(Registrations::default());
        let local = metrics::set_default_local_recorder(&*seen);
        for id in 2..52 {
            round(id).await;
        }
        drop(local);
        let registered = seen.0.load(Relaxed);
        let mut names = seen.1.lock().unwrap().clone();
        names.sort();
        names.dedup();
        println!("200 proxied calls registered {registered} metrics, of {names:?}");
        assert_eq!(registered, 0, "metrics registered on the request path, of {names:?}");
        gw.shutdown().await;
    });
}
