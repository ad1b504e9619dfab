//! One audit record and its JSON line (the format is in the parent's docs).

use crate::limits::AUDIT_FIELD_BYTES;
use crate::logline::{capped, is_format};
use serde::Serialize;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::SystemTime;

/// Characters of a legacy session id written to the log after its box's
/// instance id and `.`: enough to tell the sessions in one log apart, too
/// few to take one over (the id is a bearer secret of 32 random hex digits
/// plus 4 slot digits).
pub const SESSION_ID_CHARS: usize = 8;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A result (`"ok"`).
    Ok,
    /// A tool result with `isError: true` (`"tool_error"`).
    ToolError,
    /// A JSON-RPC error response with this code (`"error"`, and `"code"`).
    Error(i64),
    /// The upstream did not answer within its `call_timeout` (`"timeout"`).
    Timeout,
    /// Refused by the client's `allow`/`deny`, or a tool withheld by its
    /// pin (`"refused"`; a request over
    /// its `rate` is refused at the door with 429 and is not audited).
    Refused,
    /// The caller went away (closed its connection or stream) before the
    /// answer: the call may have run upstream (`"disconnected"`).
    Disconnected,
    /// A modern call parked for its caller's `inputResponses` (an MRTR
    /// round) that no retry took back before it expired: cancelled
    /// upstream (`"input_expired"`).
    InputExpired,
}

impl Outcome {
    /// The `"outcome"` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::Error(_) => "error",
            Outcome::Timeout => "timeout",
            Outcome::Refused => "refused",
            Outcome::Disconnected => "disconnected",
            Outcome::InputExpired => "input_expired",
        }
    }

    fn code(self) -> Option<i64> {
        match self {
            Outcome::Error(c) => Some(c),
            _ => None,
        }
    }
}

/// One audited call (`tools/call`, `prompts/get`, `resources/read`).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// When the request arrived (`"time"`, RFC 3339 UTC with milliseconds).
    pub time: SystemTime,
    /// The `[[client]]` name; `None` = unauthenticated (`"client":"-"`).
    pub client: Option<String>,
    /// The client's address (`"peer"`): the connection's, or the one a
    /// trusted proxy gave (`server.trusted_proxies`); `None` = not known.
    pub peer: Option<std::net::IpAddr>,
    /// The legacy `Mcp-Session-Id`; `None` = a modern (stateless) request.
    /// Written as `"legacy:"`, its instance id and `.`, and the first
    /// [`SESSION_ID_CHARS`] characters after them, or `"modern"`.
    pub session: Option<String>,
    /// `tools/call`, `prompts/get` or `resources/read` (`"method"`).
    pub method: &'static str,
    /// The upstream the call went to; `None` when it was not routed
    /// (unknown name, refused) (`"upstream"`, `null`).
    pub upstream: Option<String>,
    /// The exposed tool or prompt name, or the resource URI (`"name"`).
    pub exposed: String,
    /// The name at the upstream, when it differs or is known (`"original"`,
    /// `null` when not routed).
    pub original: Option<String>,
    /// How it ended (`"outcome"`, and `"code"` for JSON-RPC errors).
    pub outcome: Outcome,
    /// From the request's arrival to its answer (`"duration_ms"`).
    pub duration_ms: u64,
    /// Bytes of the downstream request body (`"request_bytes"`).
    pub request_bytes: u64,
    /// Bytes of the answer sent downstream (`"response_bytes"`).
    pub response_bytes: u64,
    /// The call's `arguments`; written (last, `"arguments"`) only when
    /// `[audit] arguments = true`, dropped otherwise; over
    /// [`crate::limits::AUDIT_ARGUMENTS_BYTES`] serialized, only their size
    /// is written (`"arguments_omitted":true,"arguments_bytes":N`).
    pub arguments: Option<serde_json::Value>,
}

/// The fixed keys, in file order.
#[derive(Serialize)]
struct Head<'a> {
    time: String,
    client: &'a str,
    peer: Option<std::net::IpAddr>,
    session: String,
    method: &'a str,
    upstream: Option<&'a str>,
    name: &'a str,
    original: Option<&'a str>,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<i64>,
    duration_ms: u64,
    request_bytes: u64,
    response_bytes: u64,
}

/// A record as queued for the writer: its line, and the few fields the
/// journal also gets as its own fields.
#[derive(Debug)]
pub struct Entry {
    /// The JSON object, without the newline.
    pub line: String,
    /// Where `,"arguments":` starts in `line`, if it has them (they are
    /// last, so cutting there and closing the brace leaves valid JSON).
    pub arguments_at: Option<usize>,
    /// `client`, `-` when unauthenticated.
    pub client: String,
    /// The exposed name or URI.
    pub name: String,
    /// The upstream, `-` when not routed.
    pub upstream: String,
    /// The method.
    pub method: &'static str,
    /// The outcome's name.
    pub outcome: &'static str,
}

impl Entry {
    /// Serializes `r` (arguments only if `r.arguments` is `Some`). `None`
    /// if serde_json fails (it cannot for these types; counted as a write
    /// error by the caller rather than unwrapped).
    pub fn new(mut r: Record) -> Option<Entry> {
        // Client-supplied: capped and made printable, in the line and in
        // the journal's fields alike.
        r.exposed = capped(&r.exposed, AUDIT_FIELD_BYTES).into_owned();
        r.original = r
            .original
            .map(|o| capped(&o, AUDIT_FIELD_BYTES).into_owned());
        let session = match &r.session {
            None => "modern".to_string(),
            Some(id) => match id.split_once('.') {
                Some((instance, rest)) => {
                    format!("legacy:{instance}.{}", prefix(rest, SESSION_ID_CHARS))
                }
                None => format!("legacy:{}", prefix(id, SESSION_ID_CHARS)),
            },
        };
        let head = Head {
            time: humantime::format_rfc3339_millis(r.time).to_string(),
            client: r.client.as_deref().unwrap_or("-"),
            peer: r.peer,
            session,
            method: r.method,
            upstream: r.upstream.as_deref(),
            name: &r.exposed,
            original: r.original.as_deref(),
            outcome: r.outcome.as_str(),
            code: r.outcome.code(),
            duration_ms: r.duration_ms,
            request_bytes: r.request_bytes,
            response_bytes: r.response_bytes,
        };
        let mut line = serde_json::to_string(&head).ok()?;
        let mut arguments_at = None;
        if let Some(args) = &r.arguments {
            let raw = serde_json::to_string(args).ok()?;
            // Escaping only lengthens: arguments already past the cap are
            // not escaped just to be left out.
            let args = match raw.len() > crate::limits::AUDIT_ARGUMENTS_BYTES {
                true => raw,
                false => escape_format(&raw).into_owned(),
            };
            line.pop(); // the closing brace
            if args.len() > crate::limits::AUDIT_ARGUMENTS_BYTES {
                let limit = "audit_arguments";
                crate::metrics::refused(limit);
                let n = args.len();
                line.push_str(&format!(
                    ",\"arguments_omitted\":true,\"arguments_bytes\":{n}"
                ));
            } else {
                arguments_at = Some(line.len());
                line.push_str(",\"arguments\":");
                line.push_str(&args);
            }
            line.push('}');
        }
        // Growing by doubling may have left up to half of it unused; the
        // queue's byte bound counts capacity.
        line.shrink_to_fit();
        Some(Entry {
            line,
            arguments_at,
            client: r.client.unwrap_or_else(|| "-".into()),
            upstream: r.upstream.unwrap_or_else(|| "-".into()),
            name: r.exposed,
            method: r.method,
            outcome: r.outcome.as_str(),
        })
    }

    /// What the entry costs in the queue's byte budget: its heap, by
    /// capacity.
    pub fn cost(&self) -> usize {
        std::mem::size_of::<Entry>()
            + self.line.capacity()
            + self.client.capacity()
            + self.name.capacity()
            + self.upstream.capacity()
    }

    /// The line with `"arguments"` replaced by `"arguments_omitted":true`
    /// (for a sink that cannot take the whole line); `None` without them.
    pub fn without_arguments(&self) -> Option<String> {
        let at = self.arguments_at?;
        Some(format!("{},\"arguments_omitted\":true}}", &self.line[..at]))
    }
}

/// The first `n` characters of `s`.
fn prefix(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `json` with every C1 control and Unicode format character (which
/// serde_json writes raw) as a JSON `\uXXXX` escape: the same value, and
/// no raw one in the file. They can only occur inside strings.
fn escape_format(json: &str) -> Cow<'_, str> {
    let odd = |c: char| is_format(c) || ('\u{80}'..='\u{9F}').contains(&c);
    if !json.chars().any(odd) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if !odd(c) {
            out.push(c);
            continue;
        }
        let mut units = [0u16; 2];
        for u in c.encode_utf16(&mut units) {
            let _ = write!(out, "\\u{:04x}", u);
        }
    }
    Cow::Owned(out)
}
