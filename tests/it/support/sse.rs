//! The tests' one reader of Server-Sent Events (WHATWG HTML §9.2), written
//! apart from the product's own decoder (src/protocol/sse.rs) so the tests
//! do not check the gateway's framing with the gateway's code.
//!
//! * [`events`]: every event of a whole body (used by [`super::request`]);
//! * [`open`]: an answer read as it arrives, then [`Stream::next_event`]
//!   (with a timeout), [`Stream::recv`], [`Stream::next`] (10 s, panics),
//!   [`Stream::rest`] (every message until the end). Dropping the
//!   [`Stream`] closes the connection, as a client closing its stream.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::error::Elapsed;

/// One event: its `event:` name and `id:` when it had them, and its data
/// (the `data:` lines joined by `\n`) parsed as JSON.
#[derive(Debug, Clone)]
pub struct Event {
    pub event: Option<String>,
    pub id: Option<String>,
    pub data: Value,
}

/// Incremental parser: lines end in LF or CRLF, `:` lines are comments,
/// a blank line ends an event, which is dispatched only if it had data.
#[derive(Default)]
struct Parser {
    line: Vec<u8>,
    event: Option<String>,
    id: Option<String>,
    data: Option<String>,
    /// The stream's last event ID and `retry`, kept across events (a
    /// priming event sets them, and is not dispatched).
    seen: Arc<Mutex<Seen>>,
}

/// What a stream said of resuming it.
#[derive(Default, Debug, Clone)]
pub struct Seen {
    pub last_event_id: Option<String>,
    pub retry_ms: Option<u64>,
}

impl Parser {
    fn push(&mut self, chunk: &[u8], out: &mut Vec<Event>) {
        for &b in chunk {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line_done(&String::from_utf8_lossy(&line), out);
        }
    }

    fn line_done(&mut self, line: &str, out: &mut Vec<Event>) {
        if line.is_empty() {
            let (event, id) = (self.event.take(), self.id.take());
            if let Some(id) = &id {
                self.seen.lock().unwrap().last_event_id = Some(id.clone());
            }
            // An event with empty data (a priming event: an id and
            // `retry` only) carries no message: skipped, as the SDK
            // clients do (WHATWG dispatches it, with data "").
            if let Some(data) = self.data.take().filter(|d| !d.is_empty()) {
                // The HTTP+SSE transport's `endpoint` event carries a URL.
                let data = match event.as_deref() {
                    Some("endpoint") => Value::String(data),
                    _ => serde_json::from_str(&data)
                        .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {data}")),
                };
                out.push(Event { event, id, data });
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "event" => self.event = Some(value.to_string()),
            "id" => self.id = Some(value.to_string()),
            "retry" => self.seen.lock().unwrap().retry_ms = value.parse().ok(),
            _ => {}
        }
    }
}

/// Every complete event of an SSE body.
pub fn events(body: &str) -> Vec<Event> {
    let mut out = Vec::new();
    Parser::default().push(body.as_bytes(), &mut out);
    out
}

/// An answer being read: its status and headers, and its events as they
/// arrive. A JSON (non-SSE) answer comes as one event without name or id;
/// an empty one as none.
pub struct Stream {
    pub status: u16,
    pub headers: http::HeaderMap,
    rx: mpsc::Receiver<Event>,
    seen: Arc<Mutex<Seen>>,
}

impl Stream {
    /// The last event ID and `retry` read so far.
    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The next event within `wait`: `Err` when none came in time,
    /// `Ok(None)` once the stream has ended.
    pub async fn next_event(&mut self, wait: Duration) -> Result<Option<Event>, Elapsed> {
        tokio::time::timeout(wait, self.rx.recv()).await
    }

    /// The next event, however long it takes; `None` once the stream has ended.
    pub async fn recv(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// The next message (an event's data) within 10 s; panics otherwise.
    pub async fn next(&mut self) -> Value {
        self.next_event(Duration::from_secs(10))
            .await
            .expect("a message within 10 s")
            .expect("the stream is still open")
            .data
    }

    /// Every event until the stream ends.
    pub async fn rest_events(mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(e) = self.rx.recv().await {
            out.push(e);
        }
        out
    }

    /// Every event until the stream ends, and what it said of resuming it.
    pub async fn rest_seen(self) -> (Vec<Event>, Seen) {
        let seen = self.seen.clone();
        let events = self.rest_events().await;
        let seen = seen.lock().unwrap().clone();
        (events, seen)
    }

    /// Every message (event data) until the stream ends.
    pub async fn rest(mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(e) = self.rx.recv().await {
            out.push(e.data);
        }
        out
    }
}

/// Sends `method` to `http://{addr}/mcp` with `headers` (plus
/// `content-type: application/json` on a POST, and an `accept` of both
/// JSON and SSE unless given) and reads the answer as it arrives.
pub async fn open(method: &str, addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> Stream {
    open_at(method, &format!("http://{addr}/mcp"), headers, body).await
}

/// [`open`] to any `uri` (the HTTP+SSE transport's `http://…/sse`).
pub async fn open_at(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Stream {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let resp = client
        .request(super::request_to(method, uri, headers, body, false))
        .await
        .expect("HTTP request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let is_sse = headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let (tx, rx) = mpsc::channel(64);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut parser = Parser {
        seen: seen.clone(),
        ..Parser::default()
    };
    tokio::spawn(async move {
        let mut body = resp.into_body();
        if !is_sse {
            let bytes = body.collect().await.unwrap().to_bytes();
            if !bytes.is_empty() {
                let data = serde_json::from_slice(&bytes).unwrap();
                let _ = tx
                    .send(Event {
                        event: None,
                        id: None,
                        data,
                    })
                    .await;
            }
            return;
        }
        // Reads until the stream ends, or drops it (closing the connection)
        // once the receiver is gone: a client closing its stream.
        while let Some(Ok(frame)) = tokio::select! {
            f = body.frame() => f,
            _ = tx.closed() => None,
        } {
            if let Some(d) = frame.data_ref() {
                let mut evs = Vec::new();
                parser.push(d, &mut evs);
                for e in evs {
                    let _ = tx.send(e).await;
                }
            }
        }
    });
    Stream {
        status,
        headers,
        rx,
        seen,
    }
}

/// Opens a modern `subscriptions/listen` stream with `body` (a whole
/// JSON-RPC request); its messages are read as they arrive.
pub async fn listen(addr: SocketAddr, body: &Value) -> Stream {
    open(
        "POST",
        addr,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "subscriptions/listen"),
        ],
        &body.to_string(),
    )
    .await
}
