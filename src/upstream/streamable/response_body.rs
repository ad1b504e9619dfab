//! Reading an upstream's answer to one POST: a JSON body, or an SSE stream
//! whose messages before the response are handled on the way (notifications
//! forwarded or acted on, server→client requests relayed to the caller or
//! refused) — `../shared/spec/2026-07-28/transports-streamable-http.mdx`
//! §Sending Messages, §Receiving Messages.

use super::wire::{is_sse, read_body, refused};
use super::HttpConn;
use crate::limits;
use crate::protocol::{self, sse, Message, Payload, ProtocolVersion, RawResult, RpcError};
use crate::relay::{relay_request, Lane, Relay, Relayed};
use crate::upstream::{SendError, UpstreamEra};
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};

/// What one SSE body of a call gave.
enum Read {
    /// The response to the call.
    Answer(Payload),
    /// It ended first (the server closed it: polling, when it had an
    /// event ID), or broke: how.
    Cut { why: String, closed: bool },
}

impl HttpConn {
    /// Reads an SSE answer until the response to `id` (messages before it
    /// go to [`HttpConn::on_message`]); the response ends the request
    /// (dropping the body closes the stream). A legacy upstream may close
    /// the stream before the response (polling), or it may break: after
    /// an event with an ID it is resumed with `Last-Event-ID` once the
    /// stream's `retry` has passed, at most `limits::SSE_RESUMES_PER_CALL`
    /// times, within the call's timeout; the request is never sent again
    /// (2025-11-25 transports.mdx §Sending Messages item 6, §Resumability
    /// and Redelivery). A modern stream is not resumable (2026-07-28
    /// transports-streamable-http.mdx). `lane` and `era`: the session and
    /// era the call was sent in.
    pub(super) async fn read_sse_answer(
        &self,
        mut body: Incoming,
        id: u64,
        relay: Option<&Relay>,
        (lane, era): (Lane, UpstreamEra),
    ) -> Result<Payload, SendError> {
        let mut dec = sse::Decoder::new(self.max_bytes);
        let session = self.session_of(lane);
        // Resumptions since the stream last moved on (a new event ID).
        let (mut idle_resumes, mut seen) = (0, None::<String>);
        loop {
            let (why, closed) = match self
                .read_call_stream(&mut body, &mut dec, id, relay, lane)
                .await?
            {
                Read::Answer(p) => return Ok(p),
                Read::Cut { why, closed } => (why, closed),
            };
            let Some(last) = dec.last_event_id().map(str::to_owned) else {
                return Err(SendError::Transport(why));
            };
            if let Some(relay) = relay.filter(|_| closed) {
                relay.cue(Relayed::Polled);
            }
            if seen.as_deref() != Some(last.as_str()) {
                (idle_resumes, seen) = (0, Some(last.clone()));
            }
            if idle_resumes == limits::SSE_RESUMES_PER_CALL {
                crate::metrics::refused("sse_resumes");
                let n = limits::SSE_RESUMES_PER_CALL;
                return Err(SendError::StreamCut(format!(
                    "{why}; resumed {n} times without an event"
                )));
            }
            idle_resumes += 1;
            // The wait the server asked for (`retry`, no shorter than the
            // floor), inside the call's deadline: its timeout or its caller
            // going away cut it short.
            let wait = dec.retry().unwrap_or(limits::SSE_RETRY_DEFAULT);
            tokio::time::sleep(wait.max(limits::SSE_RETRY_MIN)).await;
            let version = self.may_resume((lane, era), session.as_ref(), &why)?;
            dec.stream_ended();
            body = self.resume_stream(&last, (lane, version), &why).await?;
        }
    }

    /// Whether a cut stream of a call sent in `era` in `lane` can be
    /// resumed: a legacy session's, still the `session` it began in (one
    /// re-initialized meanwhile has lost the call); its version if so.
    fn may_resume(
        &self,
        (lane, era): (Lane, UpstreamEra),
        session: Option<&HeaderValue>,
        why: &str,
    ) -> Result<ProtocolVersion, SendError> {
        let UpstreamEra::Legacy(version) = era else {
            return Err(SendError::StreamCut(format!(
                "{why} (a 2026-07-28 stream is not resumable)"
            )));
        };
        if self.session_of(lane).as_ref() != session {
            return Err(SendError::StreamCut(format!(
                "{why}; its session ended meanwhile"
            )));
        }
        Ok(version)
    }

    /// Reads one SSE body until the response to `id`, or until it ends or
    /// breaks first ([`Read::Cut`], saying how).
    async fn read_call_stream(
        &self,
        body: &mut Incoming,
        dec: &mut sse::Decoder,
        id: u64,
        relay: Option<&Relay>,
        lane: Lane,
    ) -> Result<Read, SendError> {
        while let Some(frame) = body.frame().await {
            let frame = match frame {
                Ok(frame) => frame,
                Err(e) => {
                    let why = format!("SSE body: {e}");
                    return Ok(Read::Cut { why, closed: false });
                }
            };
            let Some(data) = frame.data_ref() else {
                continue;
            };
            let mut events = Vec::new();
            let resumable = dec.last_event_id().is_some();
            dec.push(data, &mut |e| events.push(e))
                .map_err(|_| SendError::TooLarge)?;
            if let Some(relay) = relay.filter(|_| !resumable && dec.last_event_id().is_some()) {
                relay.cue(Relayed::Resumable);
            }
            for e in events {
                // Nothing after the response is awaited.
                if let Some(r) = self.on_message(e, id, relay, lane).await {
                    return r.map(Read::Answer).map_err(SendError::Rpc);
                }
            }
        }
        let why = "SSE stream ended without a response".into();
        Ok(Read::Cut { why, closed: true })
    }

    /// The stream of a legacy call resumed after event `last`: a GET with
    /// `Last-Event-ID` in the call's session. A refusal of it fails this
    /// call only ([`SendError::StreamCut`], naming why the stream was cut);
    /// 401/403 and 429/503 with `Retry-After` are answered as for any
    /// request.
    async fn resume_stream(
        &self,
        last: &str,
        (lane, version): (Lane, ProtocolVersion),
        why: &str,
    ) -> Result<Incoming, SendError> {
        let shown = crate::logline::capped(last, 64);
        let cannot =
            |e: String| SendError::StreamCut(format!("{why}; resuming after event {shown:?}: {e}"));
        let mut req = self.get_request(version, lane).map_err(cannot)?;
        let id = HeaderValue::from_str(last).map_err(|e| cannot(e.to_string()))?;
        req.headers_mut().insert("last-event-id", id);
        let resp = self.authorized(req).await?;
        refused(&resp)?;
        if !resp.status().is_success() {
            return Err(cannot(format!("HTTP {}", resp.status().as_u16())));
        }
        if !is_sse(resp.headers()) {
            return Err(cannot("the answer is not an SSE stream".into()));
        }
        Ok(resp.into_body())
    }

    /// Reads a JSON answer (at most `max_result_bytes`): the JSON-RPC
    /// response, or the error a non-2xx `status` (and its body) means. A
    /// successful answer that is not one JSON-RPC response (another
    /// `content_type`, several JSON texts, no response) fails this request
    /// only ([`SendError::Malformed`]; transports-streamable-http.mdx
    /// §Sending Messages: `application/json` or `text/event-stream`).
    pub(super) async fn read_json_answer(
        &self,
        body: Incoming,
        status: StatusCode,
        content_type: Option<&HeaderValue>,
    ) -> Result<Payload, SendError> {
        let bytes = read_body(body, self.max_bytes).await?;
        if status.is_success() {
            if let Some((_, range, top)) = protocol::split_response(&bytes) {
                return Ok(Payload::Raw(RawResult::scanned(bytes.slice(range), top)));
            }
        }
        let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
        if !status.is_success() {
            let rpc = parsed
                .as_ref()
                .and_then(|v| v.get("error"))
                .map(RpcError::from_json);
            return Err(SendError::Http {
                status: status.as_u16(),
                rpc,
            });
        }
        // Named only in the error: upstream text, capped.
        let kind = content_type.map_or("no Content-Type".into(), |v| {
            crate::logline::capped(&String::from_utf8_lossy(v.as_bytes()), 64).into_owned()
        });
        let Some(v) = parsed else {
            let why = match serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
                Err(e) if e.is_syntax() && e.to_string().contains("trailing characters") => {
                    "several JSON texts"
                }
                _ => "not JSON",
            };
            return Err(SendError::Malformed(format!(
                "{why} ({kind}, {} bytes)",
                bytes.len()
            )));
        };
        match protocol::classify(v) {
            Ok(Message::Response { outcome: Ok(r), .. }) => Ok(Payload::Tree(r)),
            Ok(Message::Response {
                outcome: Err(e), ..
            }) => Err(SendError::Rpc(e)),
            _ => Err(SendError::Malformed(format!(
                "JSON but no JSON-RPC response ({kind})"
            ))),
        }
    }

    /// Handles one SSE message; returns the outcome if it is the response to
    /// `id`. Notifications go to the call's relay; server→client requests are
    /// relayed to a legacy caller or refused.
    pub(super) async fn on_message(
        &self,
        data: String,
        id: u64,
        relay: Option<&Relay>,
        lane: Lane,
    ) -> Option<Result<Payload, RpcError>> {
        if let Some((n, range, top)) = protocol::split_response(data.as_bytes()) {
            if n == id {
                let bytes = Bytes::from(data).slice(range);
                return Some(Ok(Payload::Raw(RawResult::scanned(bytes, top))));
            }
        }
        let v: Value = serde_json::from_str(&data).ok()?;
        match protocol::classify(v) {
            Ok(Message::Response { id: rid, outcome }) if rid.as_u64() == Some(id) => {
                Some(outcome.map(Payload::Tree))
            }
            Ok(Message::Notification { method, .. }) if method.ends_with("/list_changed") => {
                self.list_changed.notify_one();
                None
            }
            Ok(Message::Notification { method, params })
                if method == "notifications/resources/updated" =>
            {
                self.ctx.resource_updated(params.as_ref());
                None
            }
            Ok(Message::Notification { method, params }) => {
                if let Some(r) = relay {
                    r.forward(protocol::notification(&method, params));
                }
                None
            }
            Ok(Message::Request {
                id: rid,
                method,
                params,
            }) => {
                let to = relay.cloned();
                if relay_request(&self.ctx, to, (&rid, lane), &method, params).is_none() {
                    let reply = match method.as_str() {
                        "ping" => protocol::result_response(rid, json!({})),
                        _ => protocol::error_response(
                            rid,
                            &RpcError::new(
                                protocol::METHOD_NOT_FOUND,
                                format!("mcp-edge has no client to relay {method} to"),
                            ),
                        ),
                    };
                    let _ = self.respond(&reply, lane).await;
                }
                None
            }
            Ok(Message::Response { .. }) => {
                // An answer to no call of this stream: counted, not logged.
                crate::metrics::refused("unknown_id");
                None
            }
            _ => None,
        }
    }
}
