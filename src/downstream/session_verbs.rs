//! GET and DELETE on `/mcp` for a legacy session: its GET stream
//! (`../shared/spec/2025-11-25/transports.mdx` §Listening for Messages from
//! the Server), the resumption of one of its streams with `Last-Event-ID`
//! (§Resumability and Redelivery), its end (§Session Management). Without
//! a session both are 405 (2026-07-28 has neither).

use super::admission::Head;
use super::app::{App, Body, Who};
use super::call_stream::{self, Resumed};
use super::get_stream::{self, Start};
use super::reply::{self, refuse, Refusal};
use super::resume::EventId;
use crate::protocol::{self, ProtocolVersion};
use crate::session::{SessionError, SessionId};
use http::{HeaderMap, Response, StatusCode};
use serde_json::Value;
use std::sync::Arc;

/// A legacy session's GET stream: charged to the client's rate when it
/// opens (429), then a place in the stream pool under the client's share
/// (503), then the session's own bound (429). With a `Last-Event-ID` of
/// one of the session's streams, that stream goes on ([`resume`]): a call
/// stream on this response, a GET stream as this one.
pub(super) async fn get(app: Arc<App>, head: &Head, h: &HeaderMap) -> Response<Body> {
    let id = match head.session() {
        Err(r) => return r.into_response(Value::Null),
        Ok(None) => return reply::method_not_allowed(),
        Ok(Some(id)) => id,
    };
    let who = &head.who;
    if let Err(e) = super::admission::charge(&app, who) {
        return Refusal(StatusCode::TOO_MANY_REQUESTS, e).into_response(Value::Null);
    }
    let last = h.get("last-event-id").and_then(|v| v.to_str().ok());
    let start = match last.and_then(EventId::parse) {
        None => Start::Fresh,
        Some(last) => match resume(&app, id, who, last).await {
            Ok(start) => start,
            Err(answer) => return answer,
        },
    };
    // The session's own stream first (the owner checked, at most `max`, in
    // one lookup): only a live session of this client's may cost another
    // client a stream place; a refused place gives the session's back.
    let max = crate::limits::MAX_STREAMS_PER_SESSION;
    let refused = match (app.sessions).open_stream(id, who.owner(), max) {
        Err(e @ SessionError::TooManyStreams { .. }) => refuse(
            StatusCode::TOO_MANY_REQUESTS,
            protocol::INVALID_REQUEST,
            e.to_string(),
        ),
        Err(_) => reply::not_found(),
        Ok(held) => match app.streams.take(who.access.shares(), who.owner()) {
            Ok(place) => {
                let priming = app.sessions.version(&id) >= Some(ProtocolVersion::V2025_11_25);
                return get_stream::session_stream(app.clone(), held, place, start, priming);
            }
            Err((status, e)) => Refusal(status, e),
        },
    };
    // A resumed stream refused a place waits on, as it was.
    if let Start::Resumed(state, _) = start {
        get_stream::park_again(&app.resumes, id, state);
    }
    refused.into_response(Value::Null)
}

/// A stream of session `id` resumed after event `last`
/// (`../shared/spec/2025-11-25/transports.mdx` §Resumability and
/// Redelivery): a call stream answers here (the events after it, then the
/// rest of the call); a GET stream goes on as the GET being answered. A
/// call stream whose events after `last` were dropped answers its call
/// with an error event (`sse_replay`); one not waiting (it ended, or its
/// client did not come back within `limits::SSE_RESUME_WINDOW`) is 410
/// Gone: not 404, which would tell the client its session ended.
async fn resume(
    app: &App,
    id: SessionId,
    who: &Who,
    last: EventId,
) -> Result<Start, Response<Body>> {
    if app.sessions.owner(&id) != Some(who.owner()) || !app.sessions.is_live(&id) {
        return Err(reply::not_found().into_response(Value::Null));
    }
    let gone = |status, why: String| {
        crate::metrics::refused("sse_resume");
        Err(refuse(status, protocol::INVALID_REQUEST, why).into_response(Value::Null))
    };
    match call_stream::resumed(&app.resumes, &id, last).await {
        Resumed::Get(state, queued) => Ok(Start::Resumed(state, queued)),
        Resumed::Stream(body) => Err(reply::call_stream(body)),
        Resumed::Lost(event) => Err(reply::events(event)),
        Resumed::NoSuchEvent => gone(
            StatusCode::BAD_REQUEST,
            format!("stream {} has no event {}", last.stream, last.n),
        ),
        Resumed::Unknown => {
            let secs = crate::limits::SSE_RESUME_WINDOW.as_secs();
            let why = format!(
                "stream {} cannot be resumed: it ended, or was not resumed within {secs} s",
                last.stream
            );
            gone(StatusCode::GONE, why)
        }
    }
}

pub(super) fn delete(app: Arc<App>, head: &Head) -> Response<Body> {
    match head.session() {
        Err(r) => r.into_response(Value::Null),
        Ok(None) => reply::method_not_allowed(),
        Ok(Some(id)) => {
            // Everything the session owned goes now: its GET streams end,
            // its relayed requests and subscriptions are forgotten.
            if app.sessions.owner(&id) == Some(head.who.owner())
                && app.sessions.end(&id, crate::session::Removal::Deleted)
            {
                // Its parked call streams too (their calls cancelled).
                drop(app.resumes.of_session(&id));
                reply::empty(StatusCode::OK)
            } else {
                refuse(
                    StatusCode::NOT_FOUND,
                    protocol::INVALID_REQUEST,
                    "Session not found",
                )
                .into_response(Value::Null)
            }
        }
    }
}
