//! `x-mcp-header`: tool parameters mirrored into `Mcp-Param-{Name}` HTTP
//! headers (`../shared/spec/2026-07-28/transports-streamable-http.mdx`
//! §Custom Headers from Tool Parameters).
//!
//! mcp-edge is both sides of it: a client of its modern HTTP upstreams
//! (it must send the headers, and leave out tools whose annotations break
//! the rules) and a server to its modern downstream clients (it must check
//! that the headers they send match the body: 400 + `-32020` otherwise).

use serde_json::Value;

/// One annotated parameter: the header's name part and the chain of
/// `properties` keys leading to the parameter in the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// `{Name}` of `Mcp-Param-{Name}`, as the tool wrote it.
    pub name: String,
    /// Property names from the arguments' root to the parameter.
    pub path: Vec<String>,
}

/// Decodes a header value that may use the Base64 sentinel `=?base64?…?=`
/// (§Value Encoding); `None` when the Base64 or its UTF-8 is invalid.
pub fn decode_sentinel(v: &str) -> Option<String> {
    use base64::Engine;
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
        None => Some(v.to_string()),
    }
}

/// Largest integer a header may carry (JavaScript's safe range, §Schema Extension).
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The annotations of a tool's `inputSchema`, or why they make the tool
/// invalid (§Schema Extension: empty or non-token names, duplicates in any
/// case, a non-primitive or `number` parameter, or an annotation that is
/// not reachable from the root through `properties` keys alone).
pub fn annotations(input_schema: &Value) -> Result<Vec<ParamHeader>, String> {
    let mut found = Vec::new();
    walk(input_schema, &mut Vec::new(), &mut found)?;
    let anywhere = count_anywhere(input_schema);
    if anywhere != found.len() {
        return Err(
            "an x-mcp-header annotation is not reachable through `properties` keys alone".into(),
        );
    }
    let mut seen: Vec<String> = Vec::new();
    for h in &found {
        let lower = h.name.to_ascii_lowercase();
        if seen.contains(&lower) {
            return Err(format!("x-mcp-header {:?} is used twice", h.name));
        }
        seen.push(lower);
    }
    Ok(found)
}

fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<ParamHeader>) -> Result<(), String> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (key, prop) in props {
        path.push(key.clone());
        if let Some(h) = prop.get("x-mcp-header") {
            let name = h
                .as_str()
                .filter(|n| !n.is_empty() && n.bytes().all(is_tchar))
                .ok_or_else(|| format!("x-mcp-header of {key:?} is not an HTTP token"))?;
            let ty = prop.get("type").and_then(Value::as_str);
            if !matches!(ty, Some("string" | "integer" | "boolean")) {
                return Err(format!(
                    "x-mcp-header {name:?} is on a parameter of type {}, not string, integer or boolean",
                    ty.unwrap_or("(none)")
                ));
            }
            out.push(ParamHeader {
                name: name.to_string(),
                path: path.clone(),
            });
        }
        walk(prop, path, out)?;
        path.pop();
    }
    Ok(())
}

fn count_anywhere(v: &Value) -> usize {
    match v {
        Value::Object(o) => {
            usize::from(o.contains_key("x-mcp-header"))
                + o.values().map(count_anywhere).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(count_anywhere).sum(),
        _ => 0,
    }
}

/// The value at `path` in the call's `arguments`, if present.
pub fn extract<'a>(arguments: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    let mut v = arguments?;
    for key in path {
        v = v.get(key)?;
    }
    (!v.is_null()).then_some(v)
}

/// The header text of a parameter value before encoding (§Value Encoding,
/// type conversion): strings as-is, integers in decimal, booleans
/// lowercase; `None` for anything else (or an integer out of the safe range).
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => n
            .as_i64()
            .filter(|i| i.abs() <= MAX_SAFE_INTEGER)
            .map(|i| i.to_string()),
        _ => None,
    }
}

/// Checks a downstream request's `Mcp-Param-*` headers against its
/// arguments (§Server Validation): for every annotation, the header must be
/// present exactly when the argument is, and decode to the same text.
/// `header(name)` returns the raw value of `Mcp-Param-{name}`. Errors: the
/// `-32020` message.
pub fn check<'h>(
    params: &[ParamHeader],
    arguments: Option<&Value>,
    header: impl Fn(&str) -> Option<&'h str>,
) -> Result<(), String> {
    for p in params {
        let want = extract(arguments, &p.path).and_then(text);
        let got = header(&p.name);
        match (want, got) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(format!(
                    "Header mismatch: Mcp-Param-{} header is missing",
                    p.name
                ))
            }
            (None, Some(_)) => {
                return Err(format!(
                    "Header mismatch: Mcp-Param-{} header is sent but the argument is absent",
                    p.name
                ))
            }
            (Some(w), Some(g)) => {
                let decoded = decode_sentinel(g).ok_or_else(|| {
                    format!(
                        "Header mismatch: Mcp-Param-{} header is not valid base64",
                        p.name
                    )
                })?;
                if decoded != w {
                    return Err(format!(
                        "Header mismatch: Mcp-Param-{} header value '{decoded}' does not match body value '{w}'",
                        p.name
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The `Mcp-Param-*` headers to send upstream for a call with `arguments`
/// (§Client Behavior): name and raw text (encode with
/// `upstream::http::header_safe`).
pub fn to_send(params: &[ParamHeader], arguments: Option<&Value>) -> Vec<(String, String)> {
    params
        .iter()
        .filter_map(|p| {
            let v = extract(arguments, &p.path).and_then(text)?;
            Some((format!("mcp-param-{}", p.name.to_ascii_lowercase()), v))
        })
        .collect()
}

/// Annotations of the tool named `name` in `tools` (a `tools/list` array);
/// empty when it has none or is not there.
pub fn of_tool(tools: &[Value], name: &str) -> Vec<ParamHeader> {
    tools
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
        .and_then(|t| t.get("inputSchema"))
        .and_then(|s| annotations(s).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(props: Value) -> Value {
        json!({"type": "object", "properties": props})
    }

    #[test]
    fn valid_annotations_are_found_with_their_paths() {
        let s = schema(json!({
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry-Run"}}},
            "q": {"type": "string"}
        }));
        let mut a = annotations(&s).unwrap();
        a.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(
            a[0],
            ParamHeader {
                name: "Dry-Run".into(),
                path: vec!["opts".into(), "dry".into()]
            }
        );
        assert_eq!(a[1].path, vec!["region".to_string()]);
    }

    #[test]
    fn invalid_annotations_make_the_tool_invalid() {
        for bad in [
            schema(json!({"r": {"type": "string", "x-mcp-header": ""}})),
            schema(json!({"r": {"type": "string", "x-mcp-header": "Has Space"}})),
            schema(json!({"r": {"type": "number", "x-mcp-header": "R"}})),
            schema(
                json!({"r": {"type": "string", "x-mcp-header": "R"}, "s": {"type": "string", "x-mcp-header": "r"}}),
            ),
            schema(
                json!({"l": {"type": "array", "items": {"type": "string", "x-mcp-header": "L"}}}),
            ),
            json!({"oneOf": [{"properties": {"r": {"type": "string", "x-mcp-header": "R"}}}]}),
        ] {
            assert!(annotations(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn headers_must_match_the_body() {
        let p = vec![ParamHeader {
            name: "Region".into(),
            path: vec!["region".into()],
        }];
        let args = json!({"region": "us-west1"});
        let none = |_: &str| None;
        assert!(check(&p, Some(&args), |_| Some("us-west1")).is_ok());
        assert!(check(&p, Some(&args), |_| Some("=?base64?dXMtd2VzdDE=?=")).is_ok());
        assert!(check(&p, Some(&args), |_| Some("eu-west1"))
            .unwrap_err()
            .contains("does not match"));
        assert!(check(&p, Some(&args), none)
            .unwrap_err()
            .contains("missing"));
        assert!(check(&p, Some(&json!({})), |_| Some("x"))
            .unwrap_err()
            .contains("absent"));
        assert!(check(&p, Some(&json!({})), none).is_ok());
        assert_eq!(
            to_send(&p, Some(&json!({"region": "eu"}))),
            vec![("mcp-param-region".to_string(), "eu".to_string())]
        );
        assert_eq!(text(&json!(42)), Some("42".into()));
        assert_eq!(text(&json!(true)), Some("true".into()));
        assert_eq!(text(&json!(1.5)), None);
    }
}
