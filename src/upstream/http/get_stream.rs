//! The legacy session's GET stream: how a 2025-era streamable-HTTP server
//! tells mcp-edge things unrelated to any request it made
//! (`../shared/spec/2025-11-25/transports.mdx` §Listening for Messages from
//! the Server), above all `notifications/tools/list_changed` and its
//! siblings. Without it, a legacy HTTP upstream whose lists change is only
//! seen anew after a reconnect.
//!
//! One stream per connection, read by the owner task's monitor as one more
//! `select!` arm (no task of its own): list_changed wakes the catalog
//! refresh, `ping` is answered, other server→client requests are refused
//! (there is no downstream caller to relay them to), other notifications are
//! dropped. A server that does not offer the stream (405, or not
//! `text/event-stream`) is not asked again on this connection; one that ends
//! it is asked again after `health_interval`. The modern era (2026-07-28)
//! has no GET stream.

use super::{chain, HttpConn};
use crate::protocol::sse;
use crate::upstream::UpstreamEra;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};

/// How one GET stream ended.
#[derive(Debug, PartialEq, Eq)]
pub enum GetStreamEnd {
    /// The server does not offer one (405, another content type, or a
    /// modern-era connection): do not ask again on this connection.
    NotOffered,
    /// It ended or failed (the reason): ask again later.
    Ended(String),
}

impl HttpConn {
    /// Opens the GET stream of the current legacy session and reads it
    /// until it ends, handling each message as described in the module docs.
    /// An event over `max_result_bytes` ends the stream.
    pub async fn read_get_stream(&self) -> GetStreamEnd {
        let era = *self.era.read().expect("era lock");
        let UpstreamEra::Legacy(version) = era else {
            return GetStreamEnd::NotOffered;
        };
        let mut req = match Request::builder()
            .method(Method::GET)
            .uri(self.url.clone())
            .header(header::ACCEPT, "text/event-stream")
            .body(Full::new(Bytes::new()))
        {
            Ok(r) => r,
            Err(e) => return GetStreamEnd::Ended(e.to_string()),
        };
        let h = req.headers_mut();
        for (k, v) in &self.headers {
            h.insert(k.clone(), v.clone());
        }
        if version != crate::protocol::ProtocolVersion::V2025_03_26 {
            h.insert(
                "mcp-protocol-version",
                HeaderValue::from_static(version.as_str()),
            );
        }
        if let Some(s) = self.session.read().expect("session lock").clone() {
            h.insert("mcp-session-id", s);
        }
        let resp = match self.client.request(req).await {
            Ok(r) => r,
            Err(e) => return GetStreamEnd::Ended(format!("GET {}: {}", self.url, chain(&e))),
        };
        let status = resp.status();
        let is_sse = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if status == StatusCode::METHOD_NOT_ALLOWED || (status.is_success() && !is_sse) {
            return GetStreamEnd::NotOffered;
        }
        if !status.is_success() {
            return GetStreamEnd::Ended(format!("GET answered {status}"));
        }
        let mut body = resp.into_body();
        let mut dec = sse::Decoder::new(self.max_bytes);
        while let Some(frame) = body.frame().await {
            let frame = match frame {
                Ok(f) => f,
                Err(e) => return GetStreamEnd::Ended(format!("GET stream: {e}")),
            };
            let Some(data) = frame.data_ref() else {
                continue;
            };
            let mut events = Vec::new();
            if dec.push(data, &mut |e| events.push(e)).is_err() {
                return GetStreamEnd::Ended(format!(
                    "GET stream: an event over {} bytes (max_result_bytes)",
                    self.max_bytes
                ));
            }
            for e in events {
                // Id 0 is never used by a call (ids start at 1), and no relay:
                // responses are ignored, requests answered or refused here.
                let _ = self.on_message(&e, 0, None).await;
            }
        }
        GetStreamEnd::Ended("GET stream ended".into())
    }
}
