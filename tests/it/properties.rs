//! Issue 12 part 7: property tests of the parsers that read what clients,
//! upstreams and operators send: the JSON-RPC envelope classifier, the SSE
//! decoder, `Retry-After`, `Mcp-Param-*` headers, the config loaders (TOML
//! and `mcpServers` JSON) and the `Authorization` header. Each property runs
//! a fixed number of cases (in its test's name, and printed: tests/run_all.sh
//! runs this file with `--nocapture`), writes no regression files, and checks
//! that nothing panics and every rejection is the typed error.

use crate::support::proptest_check::check;
use mcp_edge::access::{Access, AuthError, Principal};
use mcp_edge::config::{Config, ConfigError};
use mcp_edge::protocol::proxy_header::{self, ProxyHeaderError, Source, MAX_HEADER_BYTES};
use mcp_edge::protocol::sse::{Decoder, SseError};
use mcp_edge::protocol::{classify, param_headers, Message, INVALID_REQUEST};
use mcp_edge::upstream::streamable::{header_safe, parse_retry_after};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

// ---- generators ----

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-z_-]{0,8}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Sometimes absent, sometimes one of `choices`, sometimes anything.
fn field(choices: Vec<Value>) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        prop::sample::select(choices).prop_map(Some),
        any_json().prop_map(Some),
    ]
}

fn envelope() -> impl Strategy<Value = Value> {
    let rpc = field(vec![json!("2.0"), json!("1.0"), json!(2.0)]);
    let id = field(vec![json!(1), json!("a"), json!(null), json!(1.5)]);
    let method = field(vec![json!("tools/list"), json!("")]);
    let params = field(vec![json!({}), json!([]), json!({"a": 1})]);
    let result = field(vec![json!({}), json!(null)]);
    let error = field(vec![json!({"code": -1, "message": "m"}), json!("e")]);
    (rpc, id, method, params, result, error).prop_map(|(r, i, m, p, res, e)| {
        let mut o = Map::new();
        let keys = ["jsonrpc", "id", "method", "params", "result", "error"];
        for (k, v) in keys.into_iter().zip([r, i, m, p, res, e]) {
            if let Some(v) = v {
                o.insert(k.into(), v);
            }
        }
        Value::Object(o)
    })
}

/// An SSE stream: field lines with mixed line ends, blank lines between events.
fn sse_stream() -> impl Strategy<Value = Vec<u8>> {
    let name = prop::sample::select(vec!["data", "event", "id", "retry", "", "data "]);
    let sep = prop::sample::select(vec![":", ": ", "", ":  "]);
    let end = prop::sample::select(vec!["\n", "\r\n", "\r", "\n\n", "\r\n\r\n"]);
    let line = (name, sep, "[^\r\n]{0,10}", end)
        .prop_map(|(n, s, v, e)| format!("{n}{s}{v}{e}").into_bytes());
    let raw = prop::collection::vec(any::<u8>(), 0..24);
    let data = raw
        .clone()
        .prop_map(|v| [&b"data:"[..], &v, b"\n"].concat());
    let piece = prop_oneof![4 => line, 1 => raw, 1 => data];
    prop::collection::vec(piece, 0..16).prop_map(|v| v.concat())
}

/// Decodes `input` fed in pieces cut at `cuts`, up to the first error.
fn decode(max: usize, input: &[u8], cuts: &[usize]) -> (Vec<String>, Option<SseError>) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(input.len());
    let (mut d, mut got, mut from) = (Decoder::new(max), Vec::new(), 0);
    for to in cuts {
        if let Err(e) = d.push(&input[from..to], &mut |e| got.push(e)) {
            return (got, Some(e));
        }
        from = to;
    }
    (got, None)
}

fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        (0u32..100_000).prop_map(|i| i.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        prop::sample::select(vec![
            "\"30s\"", "\"0s\"", "\"2m\"", "\"1h\"", "\"x\"", "1.5"
        ])
        .prop_map(str::to_owned),
        prop::sample::select(vec!["\"127.0.0.1:0\"", "\"[::1]:8\"", "\"0.0.0.0:1\""])
            .prop_map(str::to_owned),
        prop::sample::select(vec![
            "\"https://h/mcp\"",
            "\"http://u:p@h/?k=v\"",
            "\"ftp://h\""
        ])
        .prop_map(str::to_owned),
        prop::sample::select(vec!["\"stdio\"", "\"http\"", "\"builtin\"", "\"legacy\""])
            .prop_map(str::to_owned),
        "[ -~&&[^\"\\\\]]{0,10}".prop_map(|s| format!("\"{s}\"")),
        Just("[\"a\", \"--token=x\"]".to_owned()),
        Just("{ X_TOKEN = \"s\", A = \"b\" }".to_owned()),
    ]
}

type Keys = &'static [(&'static str, &'static [&'static str])];

/// Keys of `[server]` with values that are usually accepted.
const SERVER_KEYS: Keys = &[
    ("listen", &["\"127.0.0.1:0\"", "\"[::1]:8737\""]),
    ("admin_listen", &["\"127.0.0.1:9\"", "\"0.0.0.0:9\""]),
    ("max_body_bytes", &["65536", "1048576"]),
    ("session_capacity", &["1", "512"]),
    ("session_idle_timeout", &["\"30s\"", "\"1h\""]),
    ("session_min_idle_before_evict", &["\"0s\"", "\"20s\""]),
    ("keepalive", &["\"15s\""]),
    ("max_connections", &["16", "1024"]),
    ("tool_name_separator", &["\"__\"", "\".\""]),
    ("tool_names", &["\"strict\"", "\"spec\""]),
    ("allowed_origins", &["[\"https://a.example\"]", "[]"]),
    (
        "state_directory",
        &["\"/var/lib/mcp-edge\"", "\"relative\""],
    ),
];
/// Keys of a stdio `[[upstream]]` (plus some of other transports).
const UPSTREAM_KEYS: Keys = &[
    (
        "args",
        &[
            "[\"-y\", \"--api-key\", \"k\"]",
            "[\"--token=x\", \"https://u:p@h/?q\"]",
        ],
    ),
    ("env", &["{ GITHUB_TOKEN = \"s\", PATH = \"/bin\" }", "{}"]),
    ("enabled", &["true", "false"]),
    ("era", &["\"auto\"", "\"legacy\"", "\"modern\""]),
    ("trust", &["\"auto\"", "\"pin\"", "\"yes\""]),
    ("prefix", &["\"p\"", "\"\""]),
    ("call_timeout", &["\"30s\"", "\"2m\""]),
    ("max_in_flight", &["1", "64"]),
    ("backoff_initial", &["\"1s\"", "\"500ms\""]),
    ("backoff_factor", &["1.5", "2", "3.0"]),
    ("backoff_cap", &["\"10m\""]),
    ("stable_period", &["\"0s\"", "\"2m\""]),
    ("connect_on_demand", &["true"]),
    ("cwd", &["\"/srv\""]),
    ("url", &["\"https://h/mcp\""]),
    ("transport", &["\"stdio\"", "\"http\""]),
    ("unknown", &["1"]),
];

/// A table's lines: each key once, mostly with a plausible value.
fn toml_keys(keys: Keys) -> impl Strategy<Value = String> {
    let one = (
        0..keys.len(),
        any::<prop::sample::Index>(),
        prop::bool::weighted(0.85),
    );
    prop::collection::vec((one, toml_value()), 0..6).prop_map(move |kv| {
        let mut lines = std::collections::BTreeMap::new();
        for ((k, good, plausible), random) in kv {
            let (key, values) = keys[k];
            let v = if plausible {
                good.get(values).to_string()
            } else {
                random
            };
            lines.insert(key, v);
        }
        lines
            .iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect::<String>()
    })
}

/// TOML documents assembled from known keys with random values: a
/// `[server]` table and up to three distinct stdio upstreams.
fn toml_doc() -> impl Strategy<Value = String> {
    let ups = prop::collection::vec(toml_keys(UPSTREAM_KEYS), 0..3);
    (toml_keys(SERVER_KEYS), ups).prop_map(|(server, ups)| {
        let ups = ups
            .iter()
            .enumerate()
            .map(|(i, body)| format!("[[upstream]]\nname = \"u{i}\"\ncommand = \"c\"\n{body}"));
        format!("[server]\n{server}\n{}", ups.collect::<Vec<_>>().join("\n"))
    })
}

fn mcp_servers_doc() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec!["args", "env", "cwd", "disabled", "timeout", "type"]);
    let value = prop_oneof![
        3 => prop::sample::select(vec![
            json!("stdio"), json!(["-y", "--api-key", "k"]), json!({"API_KEY": "v"}), json!(true),
            json!("/srv"),
        ]),
        1 => any_json(),
    ];
    let entry = (
        prop::sample::select(vec!["command", "url"]),
        "[a-z]{1,4}",
        key,
        value,
    )
        .prop_map(|(kind, v, key, value)| {
            let v = if kind == "url" {
                format!("https://{v}/mcp")
            } else {
                v
            };
            json!({ kind: v, key: value })
        });
    let entry = prop_oneof![4 => entry, 1 => any_json()];
    let name = prop_oneof![4 => "[a-z]{1,4}", 1 => ".{0,6}"];
    prop::collection::vec((name, entry), 0..4).prop_map(|servers| {
        let m: Map<String, Value> = servers.into_iter().collect();
        json!({ "mcpServers": m }).to_string()
    })
}

// ---- checks shared by the config properties ----

/// A rejection is a parse or key error with a message (and a key).
fn typed_rejection(e: &ConfigError) -> Result<(), TestCaseError> {
    match e {
        ConfigError::Parse { message, .. } => prop_assert!(!message.is_empty()),
        ConfigError::Invalid { key, message, .. } => {
            prop_assert!(!key.is_empty(), "no key: {e}");
            prop_assert!(!message.is_empty(), "no message: {e}");
        }
        other => prop_assert!(false, "unexpected error kind: {other:?}"),
    }
    prop_assert!(e.to_string().starts_with("c.toml") || e.to_string().starts_with("c.json"));
    Ok(())
}

/// An accepted config renders to TOML that loads again and renders the same.
fn round_trips(loaded: Result<Config, ConfigError>, origin: &str) -> Result<(), TestCaseError> {
    let cfg = match loaded {
        Ok(cfg) => cfg,
        Err(e) => return typed_rejection(&e),
    };
    let first = cfg.render_masked();
    let again = Config::from_toml_str(&first, Path::new(origin))
        .map_err(|e| TestCaseError::fail(format!("re-parsing the rendering: {e}\n{first}")))?;
    prop_assert_eq!(first, again.render_masked());
    Ok(())
}

// ---- the properties ----

#[test]
fn envelope_classifier_2048_cases() {
    let input = prop_oneof![any_json(), envelope()];
    check("envelope_classifier", 2048, input, |v| {
        let rpc_ok = v.get("jsonrpc") == Some(&json!("2.0"));
        match classify(v) {
            Ok(Message::Request { id, .. } | Message::Response { id, .. }) => {
                prop_assert!(rpc_ok);
                prop_assert!(id.is_string() || id.is_number());
            }
            Ok(Message::Notification { params, .. }) => {
                prop_assert!(rpc_ok && params.is_none_or(|p| p.is_object()));
            }
            Err((id, e)) => {
                prop_assert_eq!(e.code, INVALID_REQUEST);
                prop_assert!(e.message.starts_with("Invalid Request: "));
                prop_assert!(id.is_null() || id.is_string() || id.is_number());
            }
        }
        Ok(())
    });
}

#[test]
fn sse_decoder_same_events_however_split_1024_cases() {
    let cuts = prop::collection::vec(any::<usize>(), 0..8);
    let input = (
        prop_oneof![sse_stream(), prop::collection::vec(any::<u8>(), 0..64)],
        cuts,
    );
    check(
        "sse_decoder_split",
        1024,
        (input, 1usize..80),
        |((bytes, cuts), max)| {
            let whole = decode(max, &bytes, &[]);
            prop_assert_eq!(&decode(max, &bytes, &cuts), &whole);
            if let Some(e) = &whole.1 {
                prop_assert_eq!(e, &SseError::TooLarge(max));
            }
            prop_assert!(whole.0.iter().all(|e| e.len() < max));
            Ok(())
        },
    );
}

#[test]
fn sse_event_bounded_1024_cases() {
    let value = prop::collection::vec(any::<u8>(), 0..64);
    check(
        "sse_event_bounded",
        1024,
        (value, 1usize..64),
        |(v, max)| {
            let input = [&b"data:"[..], &v, b"\n\n"].concat();
            let (got, err) = decode(max, &input, &[]);
            prop_assert!(got.iter().all(|e| e.len() < max), "{:?} over {}", got, max);
            prop_assert!(err.is_none_or(|e| e == SseError::TooLarge(max)));
            Ok(())
        },
    );
}

#[test]
fn sse_event_round_trips_512_cases() {
    let text = "[^\r\n]{0,40}";
    check("sse_event_round_trip", 512, text, |s| {
        let framed = mcp_edge::protocol::sse::event(&s);
        let (got, err) = decode(1 << 16, &framed, &[]);
        prop_assert_eq!(err, None);
        prop_assert_eq!(got, vec![s]);
        Ok(())
    });
}

#[test]
fn retry_after_1024_cases() {
    let text = prop_oneof![".{0,40}", "[0-9 ]{0,24}", "[A-Za-z0-9 ,:]{0,32}"];
    check("retry_after_text", 1024, text, |s| {
        if let Ok(secs) = s.trim().parse::<u64>() {
            prop_assert_eq!(
                parse_retry_after(&s, SystemTime::now()),
                Some(Duration::from_secs(secs))
            );
        } else {
            let _ = parse_retry_after(&s, SystemTime::now());
        }
        Ok(())
    });
    let dates = (0u64..253_402_300_799, 0u64..1_000_000);
    check("retry_after_dates", 512, dates, |(at, ahead)| {
        let now = UNIX_EPOCH + Duration::from_secs(at.saturating_sub(ahead));
        let when = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(at));
        let want = Duration::from_secs(at.min(ahead));
        prop_assert_eq!(parse_retry_after(&when, now), Some(want));
        Ok(())
    });
}

/// An input schema with annotated parameters of random names and types.
fn annotated_schema() -> impl Strategy<Value = Value> {
    let ty = prop::sample::select(vec!["string", "integer", "boolean", "number", "object"]);
    let prop = ("[A-Za-z0-9!#_.-]{0,6}", ty, any::<bool>()).prop_map(|(name, ty, nested)| {
        let p = json!({"type": ty, "x-mcp-header": name});
        if nested {
            json!({"type": "object", "properties": {"inner": p}})
        } else {
            p
        }
    });
    prop::collection::vec(("[a-c]{1,2}", prop), 0..4).prop_map(|ps| {
        let m: Map<String, Value> = ps.into_iter().collect();
        json!({"type": "object", "properties": m})
    })
}

#[test]
fn mcp_param_headers_1024_cases() {
    let args = prop::collection::vec(("[a-c]{1,2}", any_json()), 0..4)
        .prop_map(|kv| Value::Object(kv.into_iter().collect()));
    let sent = prop::collection::vec(".{0,12}", 0..4);
    let input = (prop_oneof![annotated_schema(), any_json()], args, sent);
    check("mcp_param_headers", 1024, input, |(schema, args, sent)| {
        let Ok(params) = param_headers::annotations(&schema) else {
            return Ok(());
        };
        // Whatever the client sends: a match or a -32020 message.
        let junk = |n: &str| sent.get(n.len() % sent.len().max(1)).map(String::as_str);
        if let Err(m) = param_headers::check(&params, Some(&args), junk) {
            prop_assert!(m.starts_with("Header mismatch: Mcp-Param-"), "{}", m);
        }
        // What mcp-edge itself sends upstream passes the check.
        let headers: Vec<(String, String)> = param_headers::to_send(&params, Some(&args))
            .into_iter()
            .map(|(n, v)| (n, header_safe(&v).to_str().unwrap().to_owned()))
            .collect();
        let lookup = |n: &str| {
            let want = format!("mcp-param-{}", n.to_ascii_lowercase());
            headers
                .iter()
                .find(|(h, _)| *h == want)
                .map(|(_, v)| v.as_str())
        };
        prop_assert_eq!(param_headers::check(&params, Some(&args), lookup), Ok(()));
        Ok(())
    });
}

#[test]
fn config_toml_1024_cases() {
    let text = prop_oneof![1 => ".{0,64}", 4 => toml_doc()];
    check("config_toml", 1024, text, |t| {
        round_trips(Config::from_toml_str(&t, Path::new("c.toml")), "c.toml")
    });
}

#[test]
fn config_mcp_servers_json_1024_cases() {
    let text = prop_oneof![1 => ".{0,64}", 4 => mcp_servers_doc()];
    check("config_mcp_servers_json", 1024, text, |t| {
        round_trips(
            Config::from_mcp_servers_json(&t, Path::new("c.json")),
            "c.json",
        )
    });
}

const TOKENS: [&str; 2] = [
    "mcpe_first-token-0123456789",
    "mcpe_second-token-abcdefghij",
];

fn access() -> Access {
    let digest = |t: &str| {
        let d = mcp_edge::config::token_sha256(t);
        d.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let toml = format!(
        "[[client]]\nname = \"one\"\ntoken_sha256 = \"{}\"\n\n[[client]]\nname = \"two\"\ntoken_sha256 = \"{}\"\n\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n",
        digest(TOKENS[0]),
        digest(TOKENS[1])
    );
    let cfg = Config::from_toml_str(&toml, Path::new("c.toml")).unwrap();
    Access::new(&cfg, tokio::time::Instant::now())
}

fn authorization() -> impl Strategy<Value = Vec<u8>> {
    let scheme = prop::sample::select(vec!["Bearer", "bearer", "BEARER", "Basic", "Bearer\t", ""]);
    let token = prop_oneof![
        prop::sample::select(TOKENS.to_vec()).prop_map(str::to_owned),
        ".{0,30}"
    ];
    let space = prop::sample::select(vec![" ", "  ", "", "\t"]);
    let formed = (scheme, space, token, space_tail())
        .prop_map(|(s, sp, t, tail)| format!("{s}{sp}{t}{tail}").into_bytes());
    prop_oneof![formed, prop::collection::vec(any::<u8>(), 0..48)]
}

fn space_tail() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", " ", "\t", " x"])
}

#[test]
fn authorization_header_2048_cases() {
    let (table, open) = (access(), Access::open());
    let subject = prop::option::of(prop::collection::vec((".{0,4}", ".{0,8}"), 0..3));
    let input = (prop::option::of(authorization()), subject);
    check("authorization_header", 2048, input, |(auth, subject)| {
        let got = table.authenticate(auth.as_deref(), subject.as_deref());
        let open_got = open.authenticate(auth.as_deref(), subject.as_deref());
        prop_assert_eq!(open_got, Ok(Principal::Anonymous));
        let token = auth.as_deref().and_then(|a| {
            let (scheme, rest) = a.split_at(a.iter().position(|b| *b == b' ')?);
            scheme
                .eq_ignore_ascii_case(b"bearer")
                .then(|| rest.trim_ascii())
        });
        let known = TOKENS.iter().position(|t| token == Some(t.as_bytes()));
        match (got, known, &auth, &subject) {
            (Ok(Principal::Client(i)), Some(k), _, _) => prop_assert_eq!(i, k),
            (Err(AuthError::Missing), None, None, None) => {}
            (Err(AuthError::UnknownCertificate), None, None, Some(_)) => {}
            (Err(AuthError::Malformed | AuthError::Unknown), None, Some(_), _) => {}
            (other, k, _, _) => prop_assert!(false, "{other:?} for known token {k:?}"),
        }
        Ok(())
    });
}

// ---- the PROXY protocol header (src/protocol/proxy_header.rs) ----

/// v2's 12-byte signature (proxy-protocol.txt section 2.2).
const PP_V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// v2 families that name no client address: UNSPEC, UDP4, UDP6, UNIX stream, UNIX datagram.
const PP_ADDRESS_FREE: [u8; 5] = [0x00, 0x12, 0x22, 0x31, 0x32];

/// A reader of `data` that hands out at most `max` bytes per read.
struct Chunked<'a> {
    data: &'a [u8],
    max: usize,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.data.len().min(self.max).min(buf.remaining());
        let (now, later) = self.data.split_at(n);
        buf.put_slice(now);
        self.data = later;
        Poll::Ready(Ok(()))
    }
}

/// `read` on `input` (handed out `max` bytes at a time), then the rest of
/// the reader read back.
fn pp_read(
    rt: &tokio::runtime::Runtime,
    input: &[u8],
    max: usize,
) -> (Result<Source, ProxyHeaderError>, Vec<u8>) {
    rt.block_on(async {
        let mut r = Chunked { data: input, max };
        let got = proxy_header::read(&mut r).await;
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        (got, rest)
    })
}

fn pp_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Well-formed TLVs (type, 2-byte length, value) that fit in `room` bytes.
fn pp_tlvs(room: usize) -> impl Strategy<Value = Vec<u8>> {
    let tlv = (any::<u8>(), prop::collection::vec(any::<u8>(), 0..160));
    prop::collection::vec(tlv, 0..6).prop_map(move |tlvs| {
        let mut out = Vec::new();
        for (kind, value) in tlvs {
            if out.len() + 3 + value.len() > room {
                break;
            }
            let len = u16::try_from(value.len()).unwrap().to_be_bytes();
            out.extend([kind, len[0], len[1]]);
            out.extend(value);
        }
        out
    })
}

/// A valid v1 line and the source it names.
fn pp_v1() -> impl Strategy<Value = (Vec<u8>, Source)> {
    let ports = (any::<u16>(), any::<u16>());
    let v4 = (any::<Ipv4Addr>(), any::<Ipv4Addr>(), ports).prop_map(|(s, d, (p, q))| {
        let line = format!("PROXY TCP4 {s} {d} {p} {q}\r\n");
        (
            line.into_bytes(),
            Source::Client(SocketAddr::new(s.into(), p)),
        )
    });
    let v6 = (any::<Ipv6Addr>(), any::<Ipv6Addr>(), ports).prop_map(|(s, d, (p, q))| {
        let line = format!("PROXY TCP6 {s} {d} {p} {q}\r\n");
        (
            line.into_bytes(),
            Source::Client(SocketAddr::new(s.into(), p)),
        )
    });
    let unknown = prop::option::of("[ -~\r]{0,90}").prop_map(|tail| {
        let tail = tail.map(|t| format!(" {t}")).unwrap_or_default();
        (
            format!("PROXY UNKNOWN{tail}\r\n").into_bytes(),
            Source::Local,
        )
    });
    prop_oneof![v4, v6, unknown]
}

/// A valid v2 header (TLVs after the address block) and the source it names.
fn pp_v2() -> impl Strategy<Value = (Vec<u8>, Source)> {
    let ends = (any::<u16>(), any::<u16>());
    let v4 = (any::<Ipv4Addr>(), any::<Ipv4Addr>())
        .prop_map(|(s, d)| (0x11, IpAddr::from(s), [s.octets(), d.octets()].concat()));
    let v6 = (any::<Ipv6Addr>(), any::<Ipv6Addr>())
        .prop_map(|(s, d)| (0x21, IpAddr::from(s), [s.octets(), d.octets()].concat()));
    let proxied = (prop_oneof![v4, v6], ends).prop_map(|((fam, ip, ips), (p, q))| {
        let block = [&ips[..], &p.to_be_bytes(), &q.to_be_bytes()].concat();
        (0x21, fam, block, Source::Client(SocketAddr::new(ip, p)))
    });
    let free =
        (prop::sample::select(PP_ADDRESS_FREE.to_vec()), any::<u8>()).prop_map(|(fam, b)| {
            let len = match fam {
                0x12 => 12,
                0x22 => 36,
                0x31 | 0x32 => 216,
                _ => 0,
            };
            (0x21, fam, vec![b; len], Source::Local)
        });
    let local = (any::<u8>(), prop::collection::vec(any::<u8>(), 0..40))
        .prop_map(|(fam, block)| (0x20, fam, block, Source::Local));
    let header = prop_oneof![3 => proxied, 1 => free, 1 => local];
    header.prop_flat_map(|(ver_cmd, fam, block, source)| {
        pp_tlvs(MAX_HEADER_BYTES - 16 - block.len()).prop_map(move |tlvs| {
            let len = u16::try_from(block.len() + tlvs.len())
                .unwrap()
                .to_be_bytes();
            let head = [&PP_V2_SIG[..], &[ver_cmd, fam], &len, &block, &tlvs].concat();
            (head, source)
        })
    })
}

#[test]
fn proxy_header_any_bytes_2048_cases() {
    let rt = pp_runtime();
    let bytes = prop::collection::vec(any::<u8>(), 0..600);
    let prefixed = |p: &'static [u8]| bytes.clone().prop_map(move |b| [p, &b].concat());
    let input = prop_oneof![
        bytes.clone(),
        prefixed(b"PROXY "),
        prefixed(b"PROXY TCP4 "),
        prefixed(b"PROXY UNKNOWN"),
        prefixed(&PP_V2_SIG[..]),
        prefixed(b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00"),
    ];
    check(
        "proxy_header_any_bytes",
        2048,
        (input, 1usize..20),
        |(input, max)| {
            let (got, rest) = pp_read(&rt, &input, max);
            let used = input.len() - rest.len();
            // v1's longest line is 107 bytes.
            let bound = if input.starts_with(b"PROXY ") {
                107
            } else {
                MAX_HEADER_BYTES
            };
            prop_assert!(used <= bound, "read {} bytes", used);
            prop_assert_eq!(&input[used..], &rest[..]);
            match got {
                Ok(source) => {
                    // What was read is one whole header, and it says the same.
                    let head = &input[..used];
                    let again = if head.starts_with(b"PROXY ") {
                        proxy_header::parse_v1(head)
                    } else {
                        let (fixed, block) = head.split_first_chunk::<16>().unwrap();
                        proxy_header::parse_v2(fixed, block)
                    };
                    prop_assert_eq!(again, Ok(source));
                }
                Err(ProxyHeaderError::Io(kind)) => {
                    prop_assert_eq!(kind, std::io::ErrorKind::UnexpectedEof);
                    prop_assert!(rest.is_empty());
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
            Ok(())
        },
    );
}

#[test]
fn proxy_header_valid_then_trailing_bytes_2048_cases() {
    let rt = pp_runtime();
    let trailing = prop::collection::vec(any::<u8>(), 0..64);
    let input = (prop_oneof![pp_v1(), pp_v2()], trailing, 1usize..40);
    check(
        "proxy_header_valid_then_trailing",
        2048,
        input,
        |((header, source), trailing, max)| {
            prop_assert!(header.len() <= MAX_HEADER_BYTES);
            let input = [&header[..], &trailing].concat();
            let (got, rest) = pp_read(&rt, &input, max);
            prop_assert_eq!(got, Ok(source));
            prop_assert_eq!(rest, trailing);
            Ok(())
        },
    );
}

/// What a header with byte `at` (of its signature, version/command or
/// family) changed may give: the error it must be, or `None` where the
/// change can leave a valid header (then it must agree with the parser).
fn pp_changed(v1: bool, header: &[u8], at: usize) -> Option<Result<Source, ProxyHeaderError>> {
    let (bad_v2, local) = (ProxyHeaderError::BadV2, Some(Ok(Source::Local)));
    match (v1, at, header.get(12), header.get(13)) {
        (true, 0..6, ..) | (false, 0..12, ..) => Some(Err(ProxyHeaderError::NotProxy)),
        (true, ..) => None, // a v1 protocol token: BadV1, checked by the caller
        (false, _, Some(v), _) if v >> 4 != 2 => Some(Err(bad_v2("the version is not 2"))),
        (false, _, Some(v), _) if v & 0x0f == 0 => local,
        (false, _, Some(v), _) if v & 0x0f != 1 => {
            Some(Err(bad_v2("the command is neither LOCAL nor PROXY")))
        }
        (false, _, _, Some(f)) if PP_ADDRESS_FREE.contains(f) => local,
        (false, _, _, Some(0x11 | 0x21)) => None,
        _ => Some(Err(bad_v2("an unknown address family or protocol"))),
    }
}

#[test]
fn proxy_header_one_byte_changed_2048_cases() {
    let rt = pp_runtime();
    let input = (
        prop_oneof![pp_v1(), pp_v2()],
        any::<prop::sample::Index>(),
        1u8..=255,
    );
    check(
        "proxy_header_one_byte_changed",
        2048,
        input,
        |((mut header, _), at, flip)| {
            let v1 = header.starts_with(b"PROXY ");
            let token = header.iter().skip(6).position(|&b| b == b' ' || b == b'\r');
            let at = at.index(if v1 { 6 + token.unwrap_or(0) } else { 14 });
            header[at] ^= flip;
            let input = [&header[..], b"GET / HTTP/1.1\r\n"].concat();
            let (got, rest) = pp_read(&rt, &input, 7);
            prop_assert!(input.len() - rest.len() <= MAX_HEADER_BYTES);
            match (pp_changed(v1, &header, at), &got) {
                (Some(want), got) => prop_assert_eq!(got, &want),
                (None, got) if v1 => prop_assert!(matches!(got, Err(ProxyHeaderError::BadV1(_)))),
                (None, got) => {
                    let (fixed, block) = header.split_first_chunk::<16>().unwrap();
                    prop_assert_eq!(got, &proxy_header::parse_v2(fixed, block));
                }
            }
            if got.is_ok() {
                prop_assert_eq!(&rest[..], b"GET / HTTP/1.1\r\n");
            }
            Ok(())
        },
    );
}
