//! Results that pass through as the bytes their upstream sent.
//!
//! A proxied `tools/call`, `prompts/get` or `resources/read` result is read
//! only at its top level (`resultType`, `isError`, the cache hints)
//! and otherwise kept as the upstream's own JSON text ([`RawResult`]),
//! shared, never parsed into a [`Value`] tree and never copied: the
//! downstream answer is written as three pieces, `{"jsonrpc":"2.0","id":…,"result":`,
//! the upstream's bytes, and `}` ([`Outgoing::chunks`]). Fields the gateway
//! adds (2026-07-28 `resultType`, `ttlMs`, `cacheScope`:
//! `../shared/spec/2026-07-28/index.mdx` §Result types and
//! `server-caching.mdx`) are spliced in before the closing brace.
//!
//! Whatever has to change inside a result (catalog lists, era adaptation,
//! task ids) takes the tree ([`Payload::into_value`]).

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;

/// A result object kept as received: valid JSON text, the top-level facts
/// the gateway reads, and the fields it adds (spliced in on output).
#[derive(Clone, Debug)]
pub struct RawResult {
    bytes: Bytes,
    top: Top,
    /// Members to add, `"key":value` joined by commas (no leading comma).
    extra: Cow<'static, str>,
}

/// What the gateway reads at a result's top level (raw JSON text of each).
#[derive(Clone, Copy, Debug, Default)]
struct Top {
    result_type: Option<ResultType>,
    is_error: bool,
    has_ttl: bool,
    has_cache_scope: bool,
    /// `{}` (so an added member needs no comma).
    empty: bool,
    /// The text has a line break (pretty-printed): SSE needs it re-framed.
    multiline: bool,
}

/// A result's `resultType` (2026-07-28 index.mdx §Result types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultType {
    /// `"complete"`.
    Complete,
    /// `"input_required"` (an `InputRequiredResult`).
    InputRequired,
    /// `"task"` (a `CreateTaskResult` of the tasks extension).
    Task,
    /// Anything else.
    Other,
}

/// Proof that some text was read as a result ([`RawResult::scan`]).
#[derive(Clone, Copy, Debug)]
pub struct Scanned(Top);

impl Top {
    fn scan(text: &[u8]) -> Option<Top> {
        // (A derived struct would also take an array.)
        if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return None;
        }
        let scan: TopScan<'_> = serde_json::from_slice(text).ok()?;
        let open = text.iter().position(|&b| b == b'{').unwrap_or(0);
        let after_brace = text[open + 1..].iter().find(|b| !b.is_ascii_whitespace());
        Some(Top {
            result_type: (scan.result_type).map(|r| {
                ResultType::of(r.get().strip_prefix('"').and_then(|t| t.strip_suffix('"')))
            }),
            is_error: scan.is_error.is_some_and(|r| r.get() == "true"),
            has_ttl: scan.ttl.is_some(),
            has_cache_scope: scan.cache_scope.is_some(),
            empty: after_brace == Some(&b'}'),
            multiline: text.iter().any(|&b| b == b'\n' || b == b'\r'),
        })
    }
}

impl ResultType {
    /// The type a `resultType` string names (`None`: not a string).
    fn of(text: Option<&str>) -> ResultType {
        match text {
            Some("complete") => ResultType::Complete,
            Some("input_required") => ResultType::InputRequired,
            Some("task") => ResultType::Task,
            _ => ResultType::Other,
        }
    }
}

#[derive(Deserialize)]
struct TopScan<'a> {
    #[serde(rename = "resultType", borrow, default)]
    result_type: Option<&'a RawValue>,
    #[serde(rename = "isError", borrow, default)]
    is_error: Option<&'a RawValue>,
    #[serde(rename = "ttlMs", borrow, default)]
    ttl: Option<&'a RawValue>,
    #[serde(rename = "cacheScope", borrow, default)]
    cache_scope: Option<&'a RawValue>,
}

impl RawResult {
    /// `bytes` as a result if it is one JSON object (read at its top level
    /// only, nothing allocated); `None` otherwise (the caller parses it).
    pub fn new(bytes: Bytes) -> Option<Self> {
        let top = Top::scan(&bytes)?;
        Some(RawResult::scanned(bytes, Scanned(top)))
    }

    /// Reads `text` as [`RawResult::new`] would, without taking it yet:
    /// `Some` when that would succeed (then pass the same bytes to
    /// [`RawResult::scanned`]).
    pub fn scan(text: &[u8]) -> Option<Scanned> {
        Top::scan(text).map(Scanned)
    }

    /// The result of `bytes`, [`RawResult::scan`]ned before.
    pub fn scanned(bytes: Bytes, top: Scanned) -> Self {
        RawResult {
            bytes: trim(bytes),
            top: top.0,
            extra: Cow::Borrowed(""),
        }
    }

    /// The JSON text's length in bytes (as written, added members included).
    pub fn len(&self) -> usize {
        match self.extra.len() {
            0 => self.bytes.len(),
            n => self.bytes.len() + n + usize::from(!self.top.empty),
        }
    }

    /// Never true: a result is at least `{}`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Adds member text `"key":value` (several joined by commas) to the
    /// object; read by [`RawResult::chunks`] and [`RawResult::into_value`].
    pub fn add_members(&mut self, members: Cow<'static, str>) {
        if members.is_empty() {
            return;
        }
        self.extra = match std::mem::take(&mut self.extra) {
            Cow::Borrowed("") => members,
            old => Cow::Owned(format!("{old},{members}")),
        };
    }

    /// The object's text in order: its bytes (up to the closing brace when
    /// members are added), then the separator and the added members, which
    /// the caller follows with the brace (none added: `("", "")`).
    fn pieces(&self) -> (Bytes, &'static str, &str) {
        if self.extra.is_empty() {
            return (self.bytes.clone(), "", "");
        }
        let open = self.bytes.slice(..self.bytes.len() - 1);
        let sep = if self.top.empty { "" } else { "," };
        (open, sep, &self.extra)
    }

    /// Turns the text's line breaks into spaces, for an SSE `data:` line,
    /// which cannot hold them. Outside strings they are whitespace, and JSON
    /// strings cannot hold raw ones, so the JSON stays the same. In place
    /// when the bytes are this result's alone (a pretty-printed answer is
    /// not held twice), else in a copy.
    fn flatten(&mut self) {
        let bytes = std::mem::take(&mut self.bytes);
        let mut text = bytes
            .try_into_mut()
            .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
        for b in text.iter_mut().filter(|b| **b == b'\n' || **b == b'\r') {
            *b = b' ';
        }
        self.bytes = text.freeze();
        self.top.multiline = false;
    }

    /// The tree (parsed now; added members included).
    pub fn into_value(self) -> Value {
        let mut v: Value = serde_json::from_slice(&self.bytes).unwrap_or(Value::Null);
        if !self.extra.is_empty() {
            let added: Value =
                serde_json::from_str(&format!("{{{}}}", self.extra)).unwrap_or_default();
            if let (Some(o), Value::Object(a)) = (v.as_object_mut(), added) {
                o.extend(a);
            }
        }
        v
    }

    /// Its `resultType`, if it has one.
    pub fn result_type(&self) -> Option<ResultType> {
        self.top.result_type
    }

    /// `isError: true` (a tool's own error, 2025-11-25 schema.json `CallToolResult`).
    pub fn is_tool_error(&self) -> bool {
        self.top.is_error
    }

    /// It has `ttlMs` / `cacheScope` members.
    pub fn has_cache_hints(&self) -> (bool, bool) {
        (self.top.has_ttl, self.top.has_cache_scope)
    }
}

/// `bytes` without leading or trailing whitespace (a line's `\r`, say).
fn trim(bytes: Bytes) -> Bytes {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(0);
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(bytes.len(), |i| i + 1);
    bytes.slice(start..end)
}

/// A JSON-RPC success response to one of mcp-edge's own requests (numeric
/// id) whose `result` is a JSON object, read without building a tree
/// (JSON-RPC 2.0 §5): its id, where the result lies in `text`, and the
/// result's top level. `None` for anything else (errors, requests,
/// notifications, string ids, a `result` that is not an object): the
/// caller reads those as a tree.
pub fn split_response(text: &[u8]) -> Option<(u64, std::ops::Range<usize>, Scanned)> {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow, default)]
        jsonrpc: Option<&'a RawValue>,
        #[serde(borrow, default)]
        id: Option<&'a RawValue>,
        #[serde(borrow, default)]
        method: Option<&'a RawValue>,
        #[serde(borrow, default)]
        result: Option<&'a RawValue>,
        #[serde(borrow, default)]
        error: Option<&'a RawValue>,
    }
    let e = serde_json::from_slice::<Envelope<'_>>(text).ok()?;
    let (Some(v), Some(id), None, Some(result), None) =
        (e.jsonrpc, e.id, e.method, e.result, e.error)
    else {
        return None;
    };
    let (Ok(n), "\"2.0\"") = (id.get().parse::<u64>(), v.get()) else {
        return None;
    };
    let top = RawResult::scan(result.get().as_bytes())?;
    let start = result.get().as_ptr() as usize - text.as_ptr() as usize;
    Some((n, start..start + result.get().len(), top))
}

/// A call's result on its way to the caller: as received, or a tree the
/// gateway built or changed.
#[derive(Clone, Debug)]
pub enum Payload {
    /// The upstream's bytes ([`RawResult`]).
    Raw(RawResult),
    /// A tree.
    Tree(Value),
}

impl From<Value> for Payload {
    fn from(v: Value) -> Self {
        Payload::Tree(v)
    }
}

impl Payload {
    /// The tree (a raw result parsed now).
    pub fn into_value(self) -> Value {
        match self {
            Payload::Raw(r) => r.into_value(),
            Payload::Tree(v) => v,
        }
    }

    /// Its `resultType`, if it has one.
    pub fn result_type(&self) -> Option<ResultType> {
        match self {
            Payload::Raw(r) => r.result_type(),
            Payload::Tree(v) => v.get("resultType").map(|t| ResultType::of(t.as_str())),
        }
    }

    /// An `InputRequiredResult` (2026-07-28 schema.json `resultType`,
    /// `../shared/spec/2026-07-28/patterns-mrtr.mdx`).
    pub fn is_input_required(&self) -> bool {
        self.result_type() == Some(ResultType::InputRequired)
    }

    /// `isError: true`.
    pub fn is_tool_error(&self) -> bool {
        match self {
            Payload::Raw(r) => r.is_tool_error(),
            Payload::Tree(v) => v.get("isError").and_then(Value::as_bool) == Some(true),
        }
    }
}

/// A JSON-RPC response ready to be written: a tree, or a result response
/// whose result is a [`RawResult`] (written around it, never copied).
#[derive(Clone, Debug)]
pub enum Outgoing {
    /// The whole message as a tree.
    Tree(Value),
    /// `{"jsonrpc":"2.0","id":id,"result":result}`.
    Result {
        /// The caller's id.
        id: Value,
        /// The result as received.
        result: RawResult,
    },
}

impl From<Value> for Outgoing {
    fn from(v: Value) -> Self {
        Outgoing::Tree(v)
    }
}

/// A message's text as at most three pieces, written in order.
pub type Chunks = [Bytes; 3];

impl Outgoing {
    /// A result response for `id`.
    pub fn result(id: Value, result: Payload) -> Self {
        match result {
            Payload::Raw(result) => Outgoing::Result { id, result },
            Payload::Tree(r) => Outgoing::Tree(super::result_response(id, r)),
        }
    }

    /// The message as a tree (a raw result parsed now).
    pub fn into_value(self) -> Value {
        match self {
            Outgoing::Tree(v) => v,
            Outgoing::Result { id, result } => super::result_response(id, result.into_value()),
        }
    }

    /// Its text length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Outgoing::Tree(v) => json_len(v),
            Outgoing::Result { id, result } => {
                HEAD.len() + json_len(id) + MID.len() + result.len() + 1
            }
        }
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Its JSON text, framed as one SSE event (`event: message`) when `sse`.
    pub fn chunks(self, sse: bool) -> Chunks {
        let (pre, post) = if sse {
            (super::sse::EVENT_HEAD, "\n\n")
        } else {
            ("", "")
        };
        let (id, result) = match self {
            Outgoing::Result { mut result, id } => {
                if sse && result.top.multiline {
                    result.flatten();
                }
                (id, result)
            }
            other => {
                let text = serde_json::to_string(&other.into_value()).unwrap_or_default();
                let body = match sse {
                    true => super::sse::event(&text),
                    false => Bytes::from(text),
                };
                return [body, Bytes::new(), Bytes::new()];
            }
        };
        // Exact capacities: a full `Vec` becomes `Bytes` without another
        // allocation.
        let mut head = Vec::with_capacity(pre.len() + HEAD.len() + json_len(&id) + MID.len());
        head.extend_from_slice(pre.as_bytes());
        head.extend_from_slice(HEAD.as_bytes());
        let _ = serde_json::to_writer(&mut head, &id);
        head.extend_from_slice(MID.as_bytes());
        let (body, sep, added) = result.pieces();
        let tail = match (added.is_empty(), sse) {
            (true, false) => Bytes::from_static(b"}"),
            (true, true) => Bytes::from_static(b"}\n\n"),
            _ => {
                let mut t = Vec::with_capacity(sep.len() + added.len() + 2 + post.len());
                for piece in [sep, added, "}}", post] {
                    t.extend_from_slice(piece.as_bytes());
                }
                Bytes::from(t)
            }
        };
        [Bytes::from(head), body, tail]
    }
}

const HEAD: &str = "{\"jsonrpc\":\"2.0\",\"id\":";
const MID: &str = ",\"result\":";

/// Bytes of `v`'s compact JSON text, counted without building it.
pub fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

#[cfg(test)]
mod raw_tests;
