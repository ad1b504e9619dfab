//! HTTP details shared by calls and the notification stream: the status
//! codes that refuse a request as a whole (401/403, 429/503 with
//! `Retry-After`), SSE detection, header value encoding.

use super::SendError;
use base64::Engine;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body as _, Incoming};

/// `Err` when the upstream refused the request as a whole: 401/403 (the
/// challenge, `WWW-Authenticate`, stays here: never passed downstream), or
/// 429/503 with a `Retry-After`.
pub(super) fn refused<B>(resp: &http::Response<B>) -> Result<(), SendError> {
    let status = resp.status();
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        return Err(SendError::Auth(status.as_u16()));
    }
    if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
        let after = resp
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| crate::protocol::parse_retry_after(v, std::time::SystemTime::now()));
        if let Some(after) = after {
            return Err(SendError::RetryAfter {
                status: status.as_u16(),
                after,
            });
        }
    }
    Ok(())
}

/// True when the body is an SSE stream (`Content-Type: text/event-stream`).
pub(super) fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Reads a whole body of at most `max` bytes as one buffer of its own
/// (not a slice of the connection's read buffer, which it would keep
/// alive). The frames are gathered into a buffer reserved once from
/// `Content-Length` (so a big result is held once, not as frames plus their
/// copy) or, without one, grown by quarters. A `Content-Length` over `max`
/// is refused before anything is read.
pub(super) async fn read_body(mut body: Incoming, max: usize) -> Result<Bytes, SendError> {
    let size = body.size_hint();
    if size.lower() > max as u64 {
        return Err(SendError::TooLarge);
    }
    let hint = size.exact().unwrap_or(0) as usize;
    let mut first: Option<Bytes> = None;
    let mut buf: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| SendError::Transport(format!("body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let held = first.as_ref().map_or(buf.len(), Bytes::len);
        if held + data.len() > max {
            return Err(SendError::TooLarge);
        }
        match first.take() {
            None if buf.is_empty() => first = Some(data),
            earlier => {
                if let Some(earlier) = earlier {
                    buf.reserve_exact(hint.max(earlier.len() + data.len()));
                    buf.extend_from_slice(&earlier);
                }
                if buf.capacity() - buf.len() < data.len() {
                    buf.reserve_exact(data.len().max(buf.len() / 4));
                }
                buf.extend_from_slice(&data);
            }
        }
    }
    Ok(match first {
        Some(only) => Bytes::copy_from_slice(&only),
        None => Bytes::from(buf),
    })
}

/// Encodes a value for `Mcp-Name` (§Value Encoding): plain when it is visible
/// ASCII without edge whitespace and not sentinel-shaped, else `=?base64?…?=`.
pub fn header_safe(v: &str) -> HeaderValue {
    let sentinel_shaped = v.starts_with("=?base64?") && v.ends_with("?=");
    let plain = !v.is_empty()
        && v.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !v.starts_with(' ')
        && !v.ends_with(' ')
        && !sentinel_shaped;
    let s = if plain {
        v.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(v)
        )
    };
    HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static(""))
}
