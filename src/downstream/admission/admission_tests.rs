//! Tests of [`super`]: what `Accept` allows.

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
