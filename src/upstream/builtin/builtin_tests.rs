//! Tests of the built-in `edge` tools against fixture `/proc` and `/sys` trees.
use super::*;
use std::fs;

/// A temp root with the given files (relative paths) written into it.
fn fixture(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (rel, content) in files {
        let path = dir.path().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }
    dir
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap()
}

fn assert_error(result: &Value, needle: &str) {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    assert!(text(result).contains(needle), "{result}");
}

#[tokio::test]
async fn uptime_from_fixture() {
    let root = fixture(&[("proc/uptime", "273906.52 1000.00\n")]);
    let r = call_tool_at(root.path(), "uptime", None).await.unwrap();
    assert_eq!(r["isError"], false);
    assert_eq!(r["structuredContent"]["seconds"], 273906.52);
    assert_eq!(r["structuredContent"]["human"], "3d 4h 5m 6s");
    assert_eq!(text(&r), "up 3d 4h 5m 6s (273906 s since boot)");
}

#[tokio::test]
async fn uptime_parse_errors_are_results() {
    for bad in ["", "abc 1.0", "-5 1", "nan 1", "inf 1"] {
        let root = fixture(&[("proc/uptime", bad)]);
        let r = call_tool_at(root.path(), "uptime", None).await.unwrap();
        assert_error(&r, "cannot parse /proc/uptime");
    }
}

#[tokio::test]
async fn missing_proc_file_is_error_result() {
    let root = fixture(&[]);
    for tool in ["uptime", "load_average", "memory"] {
        let r = call_tool_at(root.path(), tool, None).await.unwrap();
        assert_error(&r, "cannot read");
    }
}

#[test]
fn human_duration_units() {
    assert_eq!(human_duration(0.4), "0s");
    assert_eq!(human_duration(59.9), "59s");
    assert_eq!(human_duration(3600.0), "1h 0m 0s");
    assert_eq!(human_duration(86_400.0 + 61.0), "1d 0h 1m 1s");
}

#[tokio::test]
async fn load_average_from_fixture() {
    let root = fixture(&[("proc/loadavg", "1.27 0.36 0.12 5/100 4984\n")]);
    let r = load_average_at(root.path(), 4).await;
    assert_eq!(
        r["structuredContent"],
        json!({ "load_1m": 1.27, "load_5m": 0.36, "load_15m": 0.12, "cpus": 4 })
    );
    assert_eq!(
        text(&r),
        "load average 1.27 0.36 0.12 (1/5/15 min) on 4 CPUs"
    );
    let root = fixture(&[("proc/loadavg", "1.0 2.0\n")]);
    let r = load_average_at(root.path(), 4).await;
    assert_error(&r, "fewer than three fields");
}

const MEMINFO: &str = "MemTotal:       24684092 kB\nMemFree:        22788856 kB\nMemAvailable:   24102548 kB\nBuffers:           16552 kB\nSwapTotal:       1048576 kB\nSwapFree:         524288 kB\nHugePages_Total:       0\n";

#[tokio::test]
async fn memory_from_fixture() {
    let root = fixture(&[("proc/meminfo", MEMINFO)]);
    let r = call_tool_at(root.path(), "memory", Some(&json!({})))
        .await
        .unwrap();
    assert_eq!(
        r["structuredContent"],
        json!({
            "total_bytes": 24684092u64 * 1024,
            "available_bytes": 24102548u64 * 1024,
            "free_bytes": 22788856u64 * 1024,
            "swap_total_bytes": 1024u64 * 1024 * 1024,
            "swap_free_bytes": 512u64 * 1024 * 1024
        })
    );
    assert_eq!(
        text(&r),
        "memory: 23.0 GiB available of 23.5 GiB (21.7 GiB free); swap: 512.0 MiB free of 1.0 GiB"
    );
}

#[tokio::test]
async fn memory_missing_or_bad_field_is_error_result() {
    let root = fixture(&[("proc/meminfo", "MemTotal: 1 kB\nMemFree: 1 kB\n")]);
    let r = memory_at(root.path()).await;
    assert_error(&r, "MemAvailable is missing");
    let root = fixture(&[("proc/meminfo", &MEMINFO.replace("22788856", "x"))]);
    let r = memory_at(root.path()).await;
    assert_error(&r, "MemFree: `x` is not a whole number");
}

#[test]
fn human_bytes_units() {
    assert_eq!(human_bytes(0), "0 B");
    assert_eq!(human_bytes(1023), "1023 B");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
}

#[tokio::test]
async fn thermal_from_fixture() {
    let root = fixture(&[
        ("sys/class/thermal/thermal_zone0/type", "cpu-thermal\n"),
        ("sys/class/thermal/thermal_zone0/temp", "48312\n"),
        ("sys/class/thermal/thermal_zone10/type", "gpu-thermal\n"),
        ("sys/class/thermal/thermal_zone10/temp", "-1500\n"),
        ("sys/class/thermal/thermal_zone2/type", "broken\n"),
        ("sys/class/thermal/thermal_zone2/temp", "\n"),
        ("sys/class/thermal/cooling_device0/type", "fan\n"),
    ]);
    let r = call_tool_at(root.path(), "thermal", None).await.unwrap();
    assert_eq!(r["isError"], false);
    let zones = &r["structuredContent"]["zones"];
    assert_eq!(zones.as_array().unwrap().len(), 3);
    assert_eq!(
        zones[0],
        json!({ "zone": "thermal_zone0", "type": "cpu-thermal", "celsius": 48.312 })
    );
    assert_eq!(zones[1]["zone"], "thermal_zone2");
    assert_eq!(zones[1]["celsius"], Value::Null);
    assert!(zones[1]["error"]
        .as_str()
        .unwrap()
        .contains("is not an integer"));
    assert_eq!(
        zones[2],
        json!({ "zone": "thermal_zone10", "type": "gpu-thermal", "celsius": -1.5 })
    );
    assert!(r["structuredContent"].get("note").is_none());
    assert_eq!(
        text(&r),
        "thermal_zone0 (cpu-thermal) 48.3 °C; thermal_zone2 (broken) unreadable; thermal_zone10 (gpu-thermal) -1.5 °C"
    );
}

#[tokio::test]
async fn thermal_none_is_empty_with_note() {
    // Neither a missing class directory nor an empty one is an error.
    for root in [fixture(&[]), fixture(&[("sys/class/thermal/.keep", "")])] {
        let r = thermal_at(root.path()).await;
        assert_eq!(r["isError"], false);
        assert_eq!(r["structuredContent"]["zones"], json!([]));
        assert!(r["structuredContent"]["note"]
            .as_str()
            .unwrap()
            .contains("no thermal zones"));
    }
}

#[test]
fn disk_usage_path_validation() {
    assert_eq!(disk_usage_path(None).unwrap(), PathBuf::from("/"));
    assert_eq!(
        disk_usage_path(Some(&json!({ "path": null }))).unwrap(),
        PathBuf::from("/")
    );
    assert_eq!(
        disk_usage_path(Some(&json!({ "path": "/tmp" }))).unwrap(),
        PathBuf::from("/tmp")
    );
    for bad in [
        json!([]),
        json!({ "path": 3 }),
        json!({ "path": "" }),
        json!({ "path": "rel/ative" }),
        json!({ "path": "/a\u{0}b" }),
        json!({ "path": "/", "other": 1 }),
    ] {
        assert!(
            matches!(
                disk_usage_path(Some(&bad)),
                Err(BuiltinError::InvalidArguments(_))
            ),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn statvfs_cap_is_released() {
    // Several sequential calls must not leak in-flight slots.
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..(MAX_STATVFS_IN_FLIGHT * 2) {
        let r = disk_usage(dir.path().to_owned()).await;
        assert_eq!(r["isError"], false, "{r}");
    }
}
