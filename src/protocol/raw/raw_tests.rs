use super::*;
use serde_json::json;

fn raw(text: &str) -> RawResult {
    RawResult::new(Bytes::copy_from_slice(text.as_bytes())).expect("an object")
}

fn joined(c: Chunks) -> String {
    c.iter()
        .map(|b| std::str::from_utf8(b).expect("utf-8"))
        .collect()
}

#[test]
fn reads_the_top_level_only() {
    let r = raw(r#"{"content":[{"type":"text","text":"{\"isError\":true}"}],"isError":true}"#);
    assert!(r.is_tool_error());
    assert_eq!(r.result_type(), None);

    let r = raw(r#" {"resultType":"input_required","inputRequests":{}} "#);
    assert_eq!(r.result_type(), Some(ResultType::InputRequired));
    let t = raw(r#"{"resultType":"task","taskId":"t"}"#);
    assert_eq!(t.result_type(), Some(ResultType::Task));
    assert!(RawResult::new(Bytes::from_static(b"[1]")).is_none());
    assert!(RawResult::new(Bytes::from_static(b"{\"a\":")).is_none());
}

#[test]
fn a_result_response_is_written_around_the_bytes_as_received() {
    let text = r#"{"content":[{"type":"text","text":"x"}], "z":1.50}"#;
    let out = Outgoing::result(json!("a-1"), Payload::Raw(raw(text)));
    let len = out.len();
    let c = out.chunks(false);
    assert_eq!(c[1], text.as_bytes(), "the upstream's bytes, unchanged");
    let s = joined(c);
    assert_eq!(len, s.len());
    assert!(s.contains("\"z\":1.50"), "numbers as sent: {s}");
    assert_eq!(
        serde_json::from_str::<Value>(&s).unwrap(),
        serde_json::from_str::<Value>(&format!(
            r#"{{"jsonrpc":"2.0","id":"a-1","result":{text}}}"#
        ))
        .unwrap()
    );
    let sse = joined(Outgoing::result(json!(7), Payload::Raw(raw(text))).chunks(true));
    assert_eq!(
        sse,
        format!("event: message\ndata: {{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{text}}}\n\n")
    );
}

#[test]
fn added_members_are_spliced_in() {
    for (text, want) in [
        ("{}", json!({"resultType": "complete", "ttlMs": 5})),
        (
            "{ \"a\" : 1 }\n",
            json!({"a": 1, "resultType": "complete", "ttlMs": 5}),
        ),
    ] {
        let mut r = raw(text);
        r.add_members(Cow::Borrowed("\"resultType\":\"complete\""));
        r.add_members(Cow::Borrowed("\"ttlMs\":5"));
        assert_eq!(r.clone().into_value(), want);
        let out = Outgoing::result(json!(1), Payload::Raw(r));
        let len = out.len();
        let s = joined(out.chunks(false));
        assert_eq!(len, s.len(), "{s}");
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["result"], want);
    }
}

#[test]
fn pretty_printed_text_is_reframed_for_sse() {
    let r = raw("{\n  \"a\": [1,\n 2]\n}");
    let s = joined(Outgoing::result(json!(1), Payload::Raw(r.clone())).chunks(true));
    assert_eq!(s.matches("data: ").count(), 1, "{s}");
    assert_eq!(
        s.split('\n').count(),
        4,
        "event, one data line, blank: {s:?}"
    );
    assert!(s.ends_with("}\n\n"), "{s:?}");
    let json_text = s.strip_prefix("event: message\ndata: ").unwrap().trim_end();
    let v: Value = serde_json::from_str(json_text).unwrap();
    assert_eq!(v["result"], json!({"a": [1, 2]}));
    assert!(
        json_text.contains(r#"{   "a": [1,  2] }"#),
        "spaces for line breaks: {json_text}"
    );
    // The result's own buffer is changed in place when it is not shared.
    let own = RawResult::new(Bytes::from(b"{\r\n\"b\": 1\n}".to_vec())).unwrap();
    let at = own.bytes.as_ptr();
    let c = Outgoing::result(json!(2), Payload::Raw(own)).chunks(true);
    assert_eq!((c[1].as_ptr(), &c[1][..]), (at, &b"{  \"b\": 1 }"[..]));
    // Plain JSON keeps the bytes as they are.
    let c = Outgoing::result(json!(1), Payload::Raw(r)).chunks(false);
    assert_eq!(c[1], "{\n  \"a\": [1,\n 2]\n}".as_bytes());
}
