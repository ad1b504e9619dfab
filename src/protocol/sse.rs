//! Server-Sent Events codec (WHATWG HTML §9.2 "Server-sent events"), used by
//! the downstream endpoint to frame responses and by the upstream HTTP client
//! to read them. `data:` lines are collected; the last `id:` and `retry:`
//! are kept (what resuming a stream needs: `Last-Event-ID` and the wait);
//! `event:` is tolerated and ignored; comment lines (`:`) are keep-alives.

use bytes::Bytes;

/// What starts an SSE event carrying a JSON-RPC message.
pub const EVENT_HEAD: &str = "event: message\ndata: ";

/// One SSE event carrying a JSON-RPC message: `event: message`, one `data:` line.
pub fn event(json: &str) -> Bytes {
    framed("", json)
}

/// [`event`] after its `id:` line (`line`, newline included), in one buffer.
pub fn event_after(line: &str, json: &str) -> Bytes {
    framed(line, json)
}

fn framed(line: &str, json: &str) -> Bytes {
    let mut s = String::with_capacity(line.len() + json.len() + 24);
    s.push_str(line);
    s.push_str(EVENT_HEAD);
    // JSON never contains raw newlines inside strings, but pretty-printed
    // JSON might; split defensively so each line is its own data field.
    for (i, line) in json.split('\n').enumerate() {
        if i > 0 {
            s.push_str("\ndata: ");
        }
        s.push_str(line.trim_end_matches('\r'));
    }
    s.push_str("\n\n");
    Bytes::from(s)
}

/// A keep-alive comment line (`: keep-alive`), ignored by every SSE parser.
pub fn keepalive() -> Bytes {
    Bytes::from_static(b": keep-alive\n\n")
}

/// Error of [`Decoder::push`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    /// One event grew past the decoder's limit (bytes).
    #[error("SSE event larger than {0} bytes")]
    TooLarge(usize),
}

/// Incremental SSE decoder with a bound on the bytes buffered for one event.
#[derive(Debug)]
pub struct Decoder {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    max: usize,
    /// The last event ID of the stream: the ID buffer as the last event
    /// dispatched (a blank line) left it.
    last_id: Option<String>,
    /// An `id:` field of the event being read (the SSE standard's last
    /// event ID buffer, set when it differs from `last_id`).
    id_buffer: Option<String>,
    /// The last `retry:` seen, in milliseconds.
    retry_ms: Option<u64>,
}

impl Decoder {
    /// A decoder that refuses events (and lines) longer than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        Decoder {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            max: max_event_bytes,
            last_id: None,
            id_buffer: None,
            retry_ms: None,
        }
    }

    /// The last event ID of the stream, as of its last whole event (the
    /// SSE standard's last event ID string): what a client resumes from
    /// with `Last-Event-ID`. `None` when none was set, or an empty one
    /// (the server made the stream not resumable: no header is sent).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref().filter(|id| !id.is_empty())
    }

    /// The reconnection time the stream set with `retry:`.
    pub fn retry(&self) -> Option<std::time::Duration> {
        self.retry_ms.map(std::time::Duration::from_millis)
    }

    /// Drops an event cut off by the end of its stream (the SSE standard
    /// discards it), keeping the last event ID and retry for the next
    /// stream.
    pub fn stream_ended(&mut self) {
        self.line.clear();
        self.data.clear();
        self.has_data = false;
        self.id_buffer = None;
    }

    /// Feeds bytes; each complete event's data is passed to `out`.
    ///
    /// Lines are gathered a run of bytes at a time, in a buffer grown by
    /// quarters; an event's first `data:` line becomes its data without a
    /// copy, so a big message is held about once (1.25 bytes per byte at
    /// most), not as a line plus its copy.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut impl FnMut(String)) -> Result<(), SseError> {
        while !chunk.is_empty() {
            let (part, rest, ends) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..i], &chunk[i + 1..], true),
                None => (chunk, &chunk[chunk.len()..], false),
            };
            chunk = rest;
            if self.line.len() + self.data.len() + part.len() > self.max {
                self.line.clear();
                self.data.clear();
                self.has_data = false;
                return Err(SseError::TooLarge(self.max));
            }
            if self.line.capacity() - self.line.len() < part.len() {
                self.line.reserve_exact(part.len().max(self.line.len() / 4));
            }
            self.line.extend_from_slice(part);
            if !ends {
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line = self.line_done(line, out);
            self.line.clear();
            // Invalid UTF-8 grows up to 3x in `from_utf8_lossy`: the
            // line fitted, the decoded data may not.
            if self.data.len() >= self.max {
                self.data.clear();
                self.has_data = false;
                return Err(SseError::TooLarge(self.max));
            }
        }
        Ok(())
    }

    /// Handles one whole line; gives back its buffer for the next one
    /// (empty when the line became the event's data).
    fn line_done(&mut self, mut line: Vec<u8>, out: &mut impl FnMut(String)) -> Vec<u8> {
        if line.is_empty() {
            // The event is whole: its ID (if it set one) becomes the
            // stream's, with or without data.
            if let Some(id) = self.id_buffer.take() {
                self.last_id = Some(id);
            }
            if self.has_data {
                out(std::mem::take(&mut self.data));
                self.has_data = false;
            }
            return line;
        }
        if line[0] == b':' {
            return line;
        }
        let (field, at) = match line.iter().position(|&c| c == b':') {
            Some(i) => (i, i + 1 + usize::from(line.get(i + 1) == Some(&b' '))),
            None => (line.len(), line.len()),
        };
        match &line[..field] {
            b"data" => {}
            b"id" => {
                let v = &line[at..];
                if v.len() > crate::limits::SSE_EVENT_ID_BYTES {
                    // Too long to send back: the stream is not resumable.
                    self.id_buffer = Some(String::new());
                } else if !v.contains(&0) {
                    self.id_buffer = Some(String::from_utf8_lossy(v).into_owned());
                }
                return line;
            }
            b"retry" => {
                let v = &line[at..];
                if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
                    let ms = std::str::from_utf8(v).ok().and_then(|t| t.parse().ok());
                    self.retry_ms = ms.or(self.retry_ms);
                }
                return line;
            }
            _ => return line,
        }
        if !self.has_data && self.data.is_empty() {
            line.drain(..at);
            self.has_data = true;
            match String::from_utf8(line) {
                Ok(data) => {
                    self.data = data;
                    return Vec::new();
                }
                Err(e) => line = e.into_bytes(),
            }
            self.data.push_str(&String::from_utf8_lossy(&line));
            return line;
        }
        if self.has_data {
            self.data.push('\n');
        }
        self.data.push_str(&String::from_utf8_lossy(&line[at..]));
        self.has_data = true;
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_split_events_and_ignores_comments() {
        let mut d = Decoder::new(1024);
        let mut got = Vec::new();
        let input =
            b": keep-alive\n\nevent: message\r\ndata: {\"a\":\ndata: 1}\r\n\r\nid: 7\ndata: x\n\n";
        for chunk in input.chunks(3) {
            d.push(chunk, &mut |e| got.push(e)).unwrap();
        }
        assert_eq!(got, vec!["{\"a\":\n1}".to_string(), "x".to_string()]);
    }

    /// A priming event (an id, empty data, a retry) then a cut-off event:
    /// the id and retry are kept, the cut event is dropped (SSE standard,
    /// event stream interpretation), and a NUL in an id leaves it unset.
    #[test]
    fn keeps_the_last_event_id_and_retry_across_a_cut() {
        let mut d = Decoder::new(1024);
        let mut got = Vec::new();
        d.push(
            b"id: p1
retry: 250
data:

data: {\"cut",
            &mut |e| got.push(e),
        )
        .unwrap();
        assert_eq!(got, vec![String::new()]);
        assert_eq!(d.last_event_id(), Some("p1"));
        assert_eq!(d.retry(), Some(std::time::Duration::from_millis(250)));
        d.stream_ended();
        d.push(
            b"id: a\0b
retry: x
data: 1

",
            &mut |e| got.push(e),
        )
        .unwrap();
        assert_eq!(got, vec![String::new(), "1".to_string()]);
        assert_eq!(d.last_event_id(), Some("p1"));
        assert_eq!(d.retry(), Some(std::time::Duration::from_millis(250)));
        // An ID counts once its event is whole: a cut event's does not.
        d.push(b"id: p9\ndata: {\"cut", &mut |e| got.push(e))
            .unwrap();
        assert_eq!(d.last_event_id(), Some("p1"));
        d.stream_ended();
        d.push(b"id: p2\ndata: 2\n\n", &mut |e| got.push(e))
            .unwrap();
        assert_eq!(d.last_event_id(), Some("p2"));
        // An empty ID makes the stream not resumable, and so does one too
        // long to send back.
        d.push(b"id:\n\n", &mut |e| got.push(e)).unwrap();
        assert_eq!(d.last_event_id(), None);
        d.push(b"id: p3\n\n", &mut |e| got.push(e)).unwrap();
        assert_eq!(d.last_event_id(), Some("p3"));
        let long = format!(
            "id: {}\n\n",
            "x".repeat(crate::limits::SSE_EVENT_ID_BYTES + 1)
        );
        d.push(long.as_bytes(), &mut |e| got.push(e)).unwrap();
        assert_eq!(d.last_event_id(), None);
    }

    #[test]
    fn round_trips_event() {
        let mut d = Decoder::new(1024);
        let mut got = Vec::new();
        d.push(&event("{\"id\":1}"), &mut |e| got.push(e)).unwrap();
        d.push(&keepalive(), &mut |e| got.push(e)).unwrap();
        assert_eq!(got, vec!["{\"id\":1}".to_string()]);
    }

    #[test]
    fn refuses_event_that_grows_past_the_limit_when_decoded() {
        // Found by tests/it/properties.rs: 8 invalid bytes fit in the line but
        // become 24 bytes of U+FFFD.
        let mut d = Decoder::new(16);
        let mut got = Vec::new();
        let r = d.push(b"data:\xff\xff\xff\xff\xff\xff\xff\xff\n\n", &mut |e| {
            got.push(e)
        });
        assert_eq!(r, Err(SseError::TooLarge(16)));
        assert!(got.is_empty());
        d.push(b"data: ok\n\n", &mut |e| got.push(e)).unwrap();
        assert_eq!(got, vec!["ok".to_string()]);
    }

    #[test]
    fn refuses_oversized_event() {
        let mut d = Decoder::new(16);
        let r = d.push(b"data: 0123456789abcdefghij\n\n", &mut |_| {});
        assert_eq!(r, Err(SseError::TooLarge(16)));
    }

    /// A big event's data is its line's buffer (no copy), grown by
    /// quarters: at most 1.25 bytes held per byte, whatever the chunking.
    #[test]
    fn a_big_event_is_held_about_once() {
        let json = format!("{{\"text\":\"{}\"}}", "a".repeat(1 << 20));
        let mut d = Decoder::new(4 << 20);
        let mut got = Vec::new();
        for chunk in event(&json).chunks(16 * 1024) {
            d.push(chunk, &mut |e| got.push(e)).unwrap();
        }
        assert_eq!(got.len(), 1);
        assert_eq!(got[0], json);
        let held = got[0].capacity() as f64 / json.len() as f64;
        assert!(held <= 1.25, "{held} bytes held per byte");
    }
}
