//! What a request's `Accept` header allows (RFC 9110 §12.5.1), as the
//! streamable HTTP transport uses it: a client that accepts
//! `text/event-stream` may get relayed messages on an SSE stream; one that
//! accepts only SSE gets every answer as SSE
//! (`../shared/spec/2026-07-28/transports-streamable-http.mdx` §Sending Messages).

use http::{header, HeaderMap};

/// What the `Accept` header's media ranges allow, read in one pass (RFC 9110
/// §12.5.1): each comma-separated range compared whole, ASCII case ignored,
/// parameters after `;` skipped except `q=0` ("not acceptable"). The most
/// specific range that names a type decides: `text/event-stream` over
/// `text/*` over `*/*`. Nothing is allocated; this runs on every POST.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct Accept {
    /// `text/event-stream`: relayed messages can be streamed.
    pub sse: bool,
    /// `application/json`
    pub json: bool,
}

/// What the ranges said of one type, at each specificity (`None`: not named).
#[derive(Default)]
struct Said {
    exact: Option<bool>,
    subtype_any: Option<bool>,
}

impl Said {
    fn verdict(&self, any: Option<bool>) -> bool {
        self.exact.or(self.subtype_any).or(any).unwrap_or(false)
    }
}

/// Records `ok` for one level: acceptable once any range accepts it.
fn say(level: &mut Option<bool>, ok: bool) {
    *level = Some(level.unwrap_or(false) || ok);
}

impl Accept {
    /// Reads the request's `Accept` headers.
    pub fn of(h: &HeaderMap) -> Accept {
        let (mut sse, mut json, mut any) = (Said::default(), Said::default(), None);
        let ranges =
            (h.get_all(header::ACCEPT).iter()).flat_map(|v| v.as_bytes().split(|&b| b == b','));
        for range in ranges {
            let mut parts = range.split(|&b| b == b';');
            let media = parts.next().unwrap_or_default().trim_ascii();
            let ok = !parts.any(|p| is_q_zero(p.trim_ascii()));
            match media {
                b"*/*" => say(&mut any, ok),
                m if m.eq_ignore_ascii_case(b"text/event-stream") => say(&mut sse.exact, ok),
                m if m.eq_ignore_ascii_case(b"application/json") => say(&mut json.exact, ok),
                m if m.eq_ignore_ascii_case(b"text/*") => say(&mut sse.subtype_any, ok),
                m if m.eq_ignore_ascii_case(b"application/*") => say(&mut json.subtype_any, ok),
                _ => {}
            }
        }
        Accept {
            sse: sse.verdict(any),
            json: json.verdict(any),
        }
    }

    /// SSE but not JSON: every answer goes as an SSE stream.
    pub fn sse_only(self) -> bool {
        self.sse && !self.json
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

    fn json_only() -> Accept {
        Accept {
            sse: false,
            json: true,
        }
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
        assert_eq!(accept("*/*, text/event-stream;q=0"), json_only());
        assert_eq!(accept("text/*, application/*;q=0, */*"), sse);
        assert_eq!(accept("text/event-stream, text/*;q=0"), sse);
        assert_eq!(accept("*/*;q=0"), Accept::default());
        assert_eq!(accept(""), Accept::default());
        assert_eq!(Accept::of(&HeaderMap::new()), Accept::default());
        assert!(sse.sse_only() && !both.sse_only());
    }
}
