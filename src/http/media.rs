//! What a request's `Accept` header allows (RFC 9110 §12.5.1), as the
//! streamable HTTP transport uses it: a client that accepts
//! `text/event-stream` may get relayed messages on an SSE stream; one that
//! accepts only SSE gets every answer as SSE
//! (`../shared/spec/2026-07-28/transports-streamable-http.mdx` §Sending Messages).

use http::{header, HeaderMap};

/// True when the client accepts SSE at all (then relayed messages can be streamed).
pub fn accepts_sse(h: &HeaderMap) -> bool {
    Accept::of(h).sse
}

/// True when the client accepts SSE but not JSON (then it gets an SSE stream).
pub fn wants_sse(h: &HeaderMap) -> bool {
    let a = Accept::of(h);
    a.sse && !a.json
}

/// What the `Accept` header's media ranges allow, read in one pass (RFC 9110
/// §12.5.1): each comma-separated range compared whole, ASCII case ignored,
/// parameters after `;` skipped except `q=0`, which excludes the range.
/// Nothing is allocated; this runs on every POST.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct Accept {
    /// `text/event-stream` (or `*/*`)
    sse: bool,
    /// `application/json` (or `*/*`)
    json: bool,
}

impl Accept {
    fn of(h: &HeaderMap) -> Accept {
        let mut a = Accept::default();
        for value in h.get_all(header::ACCEPT) {
            for range in value.as_bytes().split(|&b| b == b',') {
                a.add(range);
            }
        }
        a
    }

    fn add(&mut self, range: &[u8]) {
        let mut parts = range.split(|&b| b == b';');
        let media = parts.next().unwrap_or_default().trim_ascii();
        if parts.any(|p| is_q_zero(p.trim_ascii())) {
            return;
        }
        let any = media == b"*/*";
        self.sse |= any || media.eq_ignore_ascii_case(b"text/event-stream");
        self.json |= any || media.eq_ignore_ascii_case(b"application/json");
    }
}

/// `q=0`, `q=0.`, `q=0.000` (RFC 9110 §12.4.2): "not acceptable".
fn is_q_zero(param: &[u8]) -> bool {
    match param.split_first() {
        Some((q, rest)) if q.eq_ignore_ascii_case(&b'q') => match rest.trim_ascii_start() {
            [b'=', v @ ..] => {
                let v = v.trim_ascii();
                v.first() == Some(&b'0') && v[1..].iter().all(|&b| b == b'.' || b == b'0')
            }
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn accept(v: &str) -> Accept {
        let mut h = HeaderMap::new();
        for part in v.split('|') {
            h.append(header::ACCEPT, HeaderValue::from_str(part).unwrap());
        }
        Accept::of(&h)
    }

    #[test]
    fn accept_reads_whole_media_ranges() {
        let both = Accept {
            sse: true,
            json: true,
        };
        let sse = Accept {
            sse: true,
            json: false,
        };
        assert_eq!(accept("application/json, text/event-stream"), both);
        assert_eq!(accept("TEXT/Event-Stream;charset=utf-8"), sse);
        assert_eq!(accept("text/event-stream|application/json"), both);
        assert_eq!(accept("*/*"), both);
        assert_eq!(
            accept("text/event-streams, application/jsonl"),
            Accept::default()
        );
        assert_eq!(accept("application/json;q=0, text/event-stream"), sse);
        assert_eq!(
            accept("application/json; Q = 0.000, text/event-stream"),
            sse
        );
        assert_eq!(
            accept("application/json;q=0.5, text/event-stream;q=1"),
            both
        );
        assert_eq!(accept(""), Accept::default());
        assert_eq!(HeaderMap::new().get(header::ACCEPT), None);
        assert!(!accepts_sse(&HeaderMap::new()));
    }
}
