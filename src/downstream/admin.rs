//! The admin routes, for operators and Prometheus, never for MCP clients:
//! served read-only (`GET`s) on the TCP admin listener
//! (`server.admin_listen`, loopback by default), and whole on the operator
//! socket (`server.admin_socket`, [`super::operator_socket`]) to a checked peer.
//! On TCP every action is 403 and `/status` has no stderr tails.
//!
//! - `GET /metrics`: Prometheus text format 0.0.4 (metrics-exporter-prometheus).
//! - `GET /healthz`: 200 while the process serves.
//! - `GET /readyz`: 200 once every enabled upstream has settled its first
//!   attempt (the `READY=1` condition), else 503; 503 again from SIGTERM
//!   on (`draining`, for `server.drain_grace`: a balancer takes the box out).
//! - `GET /status`: JSON `{version, ready, sessions: {active, capacity},
//!   heap: {live_bytes, peak_bytes, rss_bytes}, upstreams: [{name, transport,
//!   state, detail, retry_in_secs, attempts, probes_ok, probes_missed,
//!   in_flight, stderr_tail}], tls: {cert, not_after, client_ca} | null, …}` (`tls`: the
//!   certificate new connections get, paths only, never key material).
//! - `POST /upstreams/NAME/reconnect` (operator socket): an immediate
//!   attempt (resets backoff and parking); 404 for an unknown name.
//! - `GET /tools?upstream=NAME`: every tool the upstream lists now with
//!   its whole definition (withheld ones too, so an operator sees what an
//!   approval would serve), `now_sha256` (its digest) and `pinned_sha256`.
//! - `POST /tools/approve` (operator socket) with `{"upstream": NAME, "tool": TOOL, "expect":
//!   DIGEST}` (`tool` optional: every tool the upstream withholds;
//!   `expect` optional, needs `tool`: the digest, or a prefix of at least
//!   12 hex characters, the operator reviewed): pins the definitions
//!   listed now ([`crate::pins`]) and serves them. 200 with
//!   `{upstream, approved: [{tool, reason, pinned, now, now_sha256,
//!   detail}], withheld}`; 409 with `{error, now_sha256}` when the tool
//!   lists another definition than `expect` (nothing approved); 404 with
//!   `{error}` for an unknown upstream or a tool it does not withhold; 400
//!   for a body that is not that JSON; 413 past
//!   [`crate::limits::ADMIN_BODY_BYTES`]; 500 when approved but the pins
//!   file could not be written (`{error, approved}`). Refused before the
//!   body is read: a request with an `Origin` header (403: browsers send
//!   one, the CLI does not), a `Host` that is not loopback or the admin
//!   address (403: DNS rebinding), a `Content-Type` other than
//!   `application/json` (415: a cross-site form cannot send it without a
//!   preflight). Local processes are kept out by the operator socket's
//!   peer check (see "The operator socket" in `docs/architecture.md`).
//!
//! Every route, not only the approval, refuses a request with an `Origin`
//! header or a `Host` that is not loopback or the admin address (403): a
//! web page (cross-site, or by DNS rebinding) can neither read `/status`
//! nor force reconnects.
//!
//! `/status` shows per upstream its `trust`, how many definitions are
//! `pinned`, and the `withheld` tools with their reason (`new`, `changed`
//! with the pinned and the current hash prefix, or `unverified`).

use super::app::App;
pub use crate::audit::Operator;
use crate::router::Status;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

fn text(
    status: StatusCode,
    body: impl Into<Bytes>,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    r
}

/// The `/status` document, as the operator socket serves it (with each
/// stdio upstream's stderr tail).
pub fn status(app: &App) -> Value {
    status_for(app, true)
}

/// One upstream's entry of `/status`.
fn upstream_status(u: &crate::router::Upstream, now: Instant, tails: bool) -> Value {
    let s = u.status();
    let (ok, missed) = u.probes();
    let transport = u.config.transport.name();
    json!({
        "name": u.name(),
        "transport": transport,
        "required": u.config.required,
        "state": s.name(),
        // The protocol versions spoken with it while connected: a
        // dual-era upstream's two, its own era's first.
        "eras": u.negotiated().map(|n| n.versions()),
        "detail": s.describe(now),
        "retry_in_secs": s.retry_in(now).map(|d| d.as_secs_f64().ceil() as u64),
        "attempts": u.attempts(),
        "probes_ok": ok,
        "probes_missed": missed,
        "in_flight": u.active_calls(),
        "tools": u.catalog().served_tools(),
        "trust": u.config.trust.as_str(),
        "pinned": u.pinned(),
        "withheld": u.withheld().iter().map(|w| w.to_json()).collect::<Vec<_>>(),
        "stderr_tail": if tails { json!(u.stderr_tail()) } else { Value::Null },
        "oauth": u.oauth_status(),
        "sandbox": match &u.config.transport {
            crate::config::Transport::Stdio { sandbox, cwd, .. } => {
                crate::sandbox::describe(sandbox, cwd.as_deref())
            }
            _ => Value::Null,
        },
    })
}

/// The `/status` document; `tails`: with stderr tails (the operator socket
/// only: a child's stderr may carry what it should not tell every local
/// process).
pub fn status_for(app: &App, tails: bool) -> Value {
    let now = Instant::now();
    let upstreams: Vec<Value> = app
        .router
        .upstreams()
        .iter()
        .map(|u| upstream_status(u, now, tails))
        .collect();
    let access = app.access();
    let (active, capacity) = app.sessions.count();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "instance": app.instance.as_str(),
        // As `/readyz` says: not while draining.
        "ready": app.ready.load(Ordering::Relaxed) && !app.is_draining(),
        "draining": app.is_draining(),
        "sessions": {"active": active, "capacity": capacity},
        "heap": {
            "live_bytes": crate::alloc::live_bytes(),
            "peak_bytes": crate::alloc::peak_bytes(),
            "rss_bytes": crate::alloc::rss_bytes(),
        },
        "upstreams": upstreams,
        "pins": {
            "file": app.server.state_directory.as_ref()
                .map(|d| d.join(crate::pins::FILE_NAME).display().to_string()),
        },
        "pid": std::process::id(),
        "admin_socket": app.server.admin_socket.as_ref().map(|p| p.display().to_string()),
        "listen": app.listen_addr.to_string(),
        // Names only: no credential, digest or subject is shown.
        "access": {
            "authentication": if access.required() { "required" } else { "none" },
            "allow_unauthenticated": app.server.allow_unauthenticated,
            "clients": access.names().collect::<Vec<_>>(),
        },
        "tls": app.tls().map(|t| json!({
            "cert": t.cert.display().to_string(),
            "not_after": t.not_after,
            "client_ca": t.client_ca.as_ref().map(|p| p.display().to_string()),
        })),
        "board": app.board,
        "last_reload": app.last_reload.lock().expect("last_reload lock").as_ref().map(|r| json!({
            "rejected": r.rejected,
            "server_pending": r.server_pending,
            "message": r.message,
            "at_unix": r.at_unix,
        })),
    })
}

/// A JSON answer.
fn json_answer(status: StatusCode, v: Value) -> Response<Full<Bytes>> {
    text(status, v.to_string(), "application/json")
}

/// `POST /tools/approve`'s body.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Approve {
    upstream: String,
    tool: Option<String>,
    expect: Option<String>,
}

/// Refuses what a browser or a rebound DNS name could send to any admin
/// route (see the module docs): the reason, for a 403.
fn browser_guard(
    headers: &http::HeaderMap,
    local: std::net::SocketAddr,
) -> Result<(), (StatusCode, String)> {
    crate::access::one_each(headers).map_err(|why| (StatusCode::BAD_REQUEST, why))?;
    if headers.contains_key(http::header::ORIGIN) {
        let m = "a request with an Origin header (a browser's) is not served here; use the mcp-edge command";
        return Err((StatusCode::FORBIDDEN, m.to_owned()));
    }
    crate::access::OriginPolicy::new(local, &[], &[])
        .check(headers)
        .map_err(|why| (StatusCode::FORBIDDEN, why))
}

/// Refuses an approval that is not JSON (a cross-site form's): for a 415.
fn approve_guard(headers: &http::HeaderMap) -> Result<(), (StatusCode, String)> {
    let json = (headers.get(http::header::CONTENT_TYPE))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        let m = "Content-Type must be application/json";
        return Err((StatusCode::UNSUPPORTED_MEDIA_TYPE, m.to_owned()));
    }
    Ok(())
}

/// `expect` as given: 12 to 64 hex characters, lower-cased.
fn expected(e: &str) -> Option<String> {
    let ok = (12..=64).contains(&e.len()) && e.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| e.to_ascii_lowercase())
}

/// `GET /tools?upstream=NAME` (see the module docs).
fn tools(app: &App, query: Option<&str>) -> Response<Full<Bytes>> {
    let error = |status, message: String| json_answer(status, json!({"error": message}));
    let name = (query.unwrap_or("").split('&')).find_map(|kv| kv.strip_prefix("upstream="));
    let Some(name) = name else {
        return error(
            StatusCode::BAD_REQUEST,
            "expected ?upstream=NAME".to_owned(),
        );
    };
    let ups = app.router.upstreams();
    let Some(up) = ups.iter().find(|u| u.name() == name) else {
        return error(StatusCode::NOT_FOUND, format!("no upstream named {name:?}"));
    };
    let catalog = up.catalog();
    let tools: Vec<Value> = (catalog.tools.iter())
        .filter_map(|t| {
            let tool = t.get("name")?.as_str()?;
            let w = catalog.withheld.iter().find(|w| w.tool == tool);
            let pinned = up.pin_of(tool);
            Some(json!({
                "tool": tool,
                "state": if w.is_some() { "withheld" } else { "served" },
                "detail": w.map(|w| w.detail()),
                "now_sha256": crate::pins::digest::of(t).hex(),
                "pinned_sha256": pinned.map(|d| d.hex()),
                "definition": t,
            }))
        })
        .collect();
    let body = json!({"upstream": up.name(), "trust": up.config.trust.as_str(), "tools": tools});
    json_answer(StatusCode::OK, body)
}

/// `POST /tools/approve`'s body read and checked: the ask and its
/// `expect`, or the error answer.
async fn approval(
    body: hyper::body::Incoming,
) -> Result<(Approve, Option<String>), Response<Full<Bytes>>> {
    use http_body_util::BodyExt;
    let error = |status, message: String| json_answer(status, json!({"error": message}));
    let limit = crate::limits::ADMIN_BODY_BYTES;
    let bytes = match http_body_util::Limited::new(body, limit).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            crate::metrics::refused("admin_body");
            let m = format!("body over {limit} bytes (limits::ADMIN_BODY_BYTES)");
            return Err(error(StatusCode::PAYLOAD_TOO_LARGE, m));
        }
        Err(e) => {
            let m = format!("cannot read the body: {e}");
            return Err(error(StatusCode::BAD_REQUEST, m));
        }
    };
    let ask: Approve = serde_json::from_slice(&bytes).map_err(|e| {
        let m = format!("expected {{\"upstream\": NAME, \"tool\": TOOL, \"expect\": DIGEST}} (tool and expect optional): {e}");
        error(StatusCode::BAD_REQUEST, m)
    })?;
    let expect = match (&ask.expect, &ask.tool) {
        (None, _) => None,
        (Some(_), None) => {
            let m = "\"expect\" needs \"tool\": one digest is for one tool".to_owned();
            return Err(error(StatusCode::BAD_REQUEST, m));
        }
        (Some(e), Some(_)) => Some(expected(e).ok_or_else(|| {
            let m = format!("\"expect\" {e:?} is not 12 to 64 hex characters of a SHA-256 digest");
            error(StatusCode::BAD_REQUEST, m)
        })?),
    };
    Ok((ask, expect))
}

/// `POST /tools/approve` from `op` (see the module docs): each tool
/// approved is logged and audited with the operator's uid and pid.
async fn approve(app: &App, op: Operator, body: hyper::body::Incoming) -> Response<Full<Bytes>> {
    let (ask, expect) = match approval(body).await {
        Ok(a) => a,
        Err(answer) => return answer,
    };
    let audit = |tool: Option<&str>, outcome| {
        if let Some(a) = &app.audit {
            a.operator(op.audited("tools/approve", Some(&ask.upstream), tool, outcome));
        }
    };
    let ups = app.router.upstreams();
    let Some(up) = ups.iter().find(|u| u.name() == ask.upstream) else {
        audit(ask.tool.as_deref(), "not_found");
        let m = format!("no upstream named {:?}", ask.upstream);
        return json_answer(StatusCode::NOT_FOUND, json!({"error": m}));
    };
    let listed = |ws: &[crate::pins::Withheld]| ws.iter().map(|w| w.to_json()).collect::<Vec<_>>();
    let result = up.approve(ask.tool.as_deref(), expect.as_deref()).await;
    let done = match &result {
        Ok(approved) => approved.as_slice(),
        Err(crate::router::ApproveError::NotSaved { approved, .. }) => approved.as_slice(),
        Err(_) => &[],
    };
    for w in done {
        let tool = crate::logline::printable(&w.tool);
        tracing::info!(upstream = %up.name(), %tool, uid = op.uid, pid = op.pid, "tool approved on the operator socket by uid {} (pid {})", op.uid, op.pid);
        audit(Some(&w.tool), "ok");
    }
    match result {
        Ok(approved) => json_answer(
            StatusCode::OK,
            json!({"upstream": up.name(), "approved": listed(&approved), "withheld": listed(&up.withheld())}),
        ),
        Err(e) => {
            use crate::router::ApproveError::{NotSaved, NotWithheld, Stale};
            let (status, approved, now, outcome) = match &e {
                NotWithheld { .. } => (StatusCode::NOT_FOUND, None, None, "not_found"),
                Stale { now, .. } => (StatusCode::CONFLICT, None, Some(now.hex()), "conflict"),
                NotSaved { approved, .. } => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Some(listed(approved)),
                    None,
                    "not_saved",
                ),
            };
            audit(ask.tool.as_deref(), outcome);
            json_answer(
                status,
                json!({"error": e.to_string(), "approved": approved, "now_sha256": now}),
            )
        }
    }
}

/// Who asks, by where the request came in.
#[derive(Debug, Clone)]
pub enum Asker {
    /// The TCP admin listener: read-only routes only.
    Listener(std::net::SocketAddr),
    /// The operator socket, a peer that passed its check (the socket's
    /// module, `operator`).
    Operator(Operator),
}

/// The routes that change state: served on the operator socket only.
fn changes_state(method: &Method) -> bool {
    method != Method::GET && method != Method::HEAD
}

/// Refuses what this asker may not do: the status and reason.
fn guard(asker: &Asker, req: &Request<hyper::body::Incoming>) -> Result<(), (StatusCode, String)> {
    let approving = req.method() == Method::POST && req.uri().path() == "/tools/approve";
    match asker {
        Asker::Listener(local) => {
            browser_guard(req.headers(), *local)?;
            if changes_state(req.method()) {
                let m = "the TCP admin listener is read-only: actions that change state are served on the operator socket (server.admin_socket), as the mcp-edge command uses it";
                return Err((StatusCode::FORBIDDEN, m.to_owned()));
            }
            Ok(())
        }
        Asker::Operator(_) if approving => approve_guard(req.headers()),
        Asker::Operator(_) => Ok(()),
    }
}

/// Serves one admin request from `asker` (the TCP listener or the
/// operator socket).
pub(super) async fn route(
    app: Arc<App>,
    asker: Asker,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    if let Err((status, why)) = guard(&asker, &req) {
        metrics::counter!(crate::metrics::FORBIDDEN).increment(1);
        tracing::debug!("admin: {} {path} refused ({status}): {why}", req.method());
        return json_answer(status, json!({"error": why}));
    }
    let operator = match &asker {
        Asker::Operator(op) => Some(*op),
        _ => None,
    };
    match (req.method(), operator) {
        (&Method::POST, Some(op)) if path == "/tools/approve" => {
            return approve(&app, op, req.into_body()).await
        }
        (&Method::POST, Some(op))
            if path.starts_with("/upstreams/") && path.ends_with("/reconnect") =>
        {
            return reconnect(
                &app,
                op,
                &path["/upstreams/".len()..path.len() - "/reconnect".len()],
            );
        }
        _ => {}
    }
    if req.method() == Method::GET && path == "/tools" {
        return tools(&app, req.uri().query());
    }
    match (req.method(), path.as_str()) {
        (&Method::GET, "/metrics") => match crate::metrics::render() {
            Some(t) => text(StatusCode::OK, t, "text/plain; version=0.0.4"),
            None => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "metrics recorder not installed\n",
                "text/plain",
            ),
        },
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n", "text/plain"),
        (&Method::GET, "/readyz") => {
            let (status, why) = app.readiness();
            text(status, why, "text/plain")
        }
        (&Method::GET, "/status") => text(
            StatusCode::OK,
            status_for(&app, operator.is_some()).to_string(),
            "application/json",
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: /metrics /healthz /readyz /status /tools?upstream=NAME; on the operator socket also POST /upstreams/NAME/reconnect, POST /tools/approve\n",
            "text/plain",
        ),
    }
}

/// `POST /upstreams/NAME/reconnect` from `op` (operator socket only).
fn reconnect(app: &App, op: Operator, name: &str) -> Response<Full<Bytes>> {
    let ups = app.router.upstreams();
    let found = ups.iter().find(|u| u.name() == name && u.config.enabled);
    let outcome = if found.is_some() { "ok" } else { "not_found" };
    if let Some(audit) = &app.audit {
        audit.operator(op.audited("upstreams/reconnect", Some(name), None, outcome));
    }
    match found {
        Some(u) => {
            u.force_reconnect();
            tracing::info!(upstream = %name, uid = op.uid, pid = op.pid, "operator asked for an immediate attempt");
            text(
                StatusCode::ACCEPTED,
                format!("reconnecting {name}\n"),
                "text/plain",
            )
        }
        None => text(
            StatusCode::NOT_FOUND,
            format!("no enabled upstream named {name:?}\n"),
            "text/plain",
        ),
    }
}

/// Serves the admin routes on `listener` until shutdown. Requests are short
/// and served one at a time inline (no task per request), each within
/// [`crate::limits::ADMIN_CONNECTION_TIMEOUT`].
pub async fn serve(listener: TcpListener, app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let Ok(local) = listener.local_addr() else {
        return tracing::error!("admin listener: no local address; not serving");
    };
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r { Ok((s, _)) => s, Err(_) => continue },
            _ = shutdown.changed() => return,
        };
        let a = app.clone();
        let svc = hyper::service::service_fn(move |req| {
            let a = a.clone();
            async move { Ok::<_, std::convert::Infallible>(route(a, Asker::Listener(local), req).await) }
        });
        let _ = tokio::time::timeout(
            crate::limits::ADMIN_CONNECTION_TIMEOUT,
            hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc),
        )
        .await;
    }
}

/// True when `s` counts as settled for readiness.
pub fn settled(s: &Status) -> bool {
    !matches!(s, Status::Connecting { .. })
}
