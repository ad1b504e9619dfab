//! The built-in `edge` upstream through its public API: the tool list shape
//! (Tool / ListToolsResult in `../shared/spec/2025-11-25/schema.json`),
//! argument errors, `disk_usage` on a temp dir, and a smoke run of every
//! tool against the real /proc and /sys.

use mcp_edge::upstream::builtin::{self, BuiltinError};
use serde_json::{json, Value};

fn tools() -> Vec<Value> {
    builtin::list_tools()["tools"].as_array().unwrap().clone()
}

fn text(result: &Value) -> &str {
    let content = result["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "{result}");
    assert_eq!(content[0]["type"], "text");
    content[0]["text"].as_str().unwrap()
}

#[test]
fn server_info_is_crate_version() {
    assert_eq!(
        builtin::server_info(),
        ("mcp-edge-builtin", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn list_tools_shape() {
    let list = builtin::list_tools();
    assert_eq!(list.as_object().unwrap().len(), 1, "only `tools`: {list}");
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["uptime", "load_average", "memory", "disk_usage", "thermal"]
    );
    for tool in tools() {
        let name = tool["name"].as_str().unwrap();
        assert!(
            (1..=64).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{name}"
        );
        assert!(tool["title"].is_string(), "{name}");
        assert!(!tool["description"].as_str().unwrap().is_empty(), "{name}");
        assert_eq!(tool["inputSchema"]["type"], "object", "{name}");
        assert_eq!(tool["outputSchema"]["type"], "object", "{name}");
        assert_eq!(
            tool["annotations"],
            json!({ "readOnlyHint": true, "openWorldHint": false }),
            "{name}"
        );
        // Every required output field is declared.
        let props = tool["outputSchema"]["properties"].as_object().unwrap();
        for req in tool["outputSchema"]["required"].as_array().unwrap() {
            assert!(props.contains_key(req.as_str().unwrap()), "{name}: {req}");
        }
    }
}

#[tokio::test]
async fn unknown_tool_is_err() {
    assert_eq!(
        builtin::call_tool("reboot", None).await,
        Err(BuiltinError::UnknownTool("reboot".to_owned()))
    );
}

#[tokio::test]
async fn invalid_arguments_are_err() {
    let cases = [
        ("uptime", json!({ "x": 1 })),
        ("memory", json!("nope")),
        ("thermal", json!([1])),
        ("disk_usage", json!({ "path": 7 })),
        ("disk_usage", json!({ "path": "relative" })),
        ("disk_usage", json!({ "path": "/", "extra": true })),
    ];
    for (tool, args) in cases {
        let r = builtin::call_tool(tool, Some(&args)).await;
        assert!(
            matches!(r, Err(BuiltinError::InvalidArguments(_))),
            "{tool} {args}: {r:?}"
        );
    }
    // Absent, null and empty arguments are all fine.
    for args in [None, Some(&Value::Null), Some(&json!({}))] {
        assert!(builtin::call_tool("uptime", args).await.is_ok());
    }
}

#[tokio::test]
async fn disk_usage_on_temp_dir_and_missing_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let r = builtin::call_tool("disk_usage", Some(&json!({ "path": path })))
        .await
        .unwrap();
    assert_eq!(r["isError"], false, "{r}");
    let s = &r["structuredContent"];
    assert_eq!(s["path"], path);
    let total = s["total_bytes"].as_u64().unwrap();
    let free = s["free_bytes"].as_u64().unwrap();
    let avail = s["available_bytes"].as_u64().unwrap();
    assert!(total > 0 && free <= total && avail <= free, "{s}");
    assert_eq!(s["used_bytes"].as_u64().unwrap(), total - free);
    assert!(text(&r).starts_with(path), "{r}");

    let missing = dir.path().join("no/such/dir");
    let missing = missing.to_str().unwrap();
    let r = builtin::call_tool("disk_usage", Some(&json!({ "path": missing })))
        .await
        .unwrap();
    assert_eq!(r["isError"], true, "{r}");
    assert!(r.get("structuredContent").is_none(), "{r}");
    let t = text(&r);
    assert!(t.contains(missing) && t.contains("No such file"), "{t}");

    // Default path is `/`.
    let r = builtin::call_tool("disk_usage", None).await.unwrap();
    assert_eq!(r["structuredContent"]["path"], "/", "{r}");
}

/// Every tool against the real box: succeeds (thermal may be empty) and
/// carries the fields its outputSchema requires.
#[tokio::test]
async fn smoke_real_proc_and_sys() {
    for tool in tools() {
        let name = tool["name"].as_str().unwrap();
        let r = builtin::call_tool(name, None).await.unwrap();
        assert_eq!(r["isError"], false, "{name}: {r}");
        assert!(!text(&r).is_empty());
        let s = r["structuredContent"].as_object().unwrap();
        for req in tool["outputSchema"]["required"].as_array().unwrap() {
            assert!(
                s.contains_key(req.as_str().unwrap()),
                "{name}: {req} in {r}"
            );
        }
    }
    let r = builtin::call_tool("uptime", None).await.unwrap();
    assert!(r["structuredContent"]["seconds"].as_f64().unwrap() > 0.0);
    let r = builtin::call_tool("load_average", None).await.unwrap();
    assert!(r["structuredContent"]["cpus"].as_u64().unwrap() >= 1);
    let r = builtin::call_tool("memory", None).await.unwrap();
    let m = &r["structuredContent"];
    assert!(m["total_bytes"].as_u64().unwrap() > 0);
    assert!(m["available_bytes"].as_u64() <= m["total_bytes"].as_u64());
}
