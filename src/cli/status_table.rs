//! `mcp-edge status`: a running gateway's `/status` as a table.

/// Who may call, and TLS, from `/status` (names and paths only).
fn print_access(v: &serde_json::Value) {
    let a = &v["access"];
    let names: Vec<&str> = (a["clients"].as_array().into_iter().flatten())
        .filter_map(|c| c.as_str())
        .collect();
    let who = match (names.is_empty(), a["allow_unauthenticated"] == true) {
        (false, _) => format!("{} client(s): {}", names.len(), names.join(", ")),
        (true, true) => "anyone (allow_unauthenticated = true)".to_owned(),
        (true, false) => "anyone on loopback (no [[client]])".to_owned(),
    };
    let tls = match v["tls"].as_object() {
        Some(t) => format!(
            "https, certificate valid until {}{}",
            t["not_after"].as_str().unwrap_or("?"),
            if t["client_ca"].is_null() {
                ""
            } else {
                ", client certificates required"
            }
        ),
        None => "plain http".to_owned(),
    };
    println!("access: {who}  ({tls})");
}

/// `/status` as a table.
pub(crate) fn print_status(body: &str) {
    let v: serde_json::Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(_) => return print!("{body}"),
    };
    println!(
        "mcp-edge {}  pid {}  on {}{}",
        v["version"].as_str().unwrap_or("?"),
        v["pid"],
        v["listen"].as_str().unwrap_or("?"),
        v["board"]
            .as_str()
            .map(|b| format!("  board {b}"))
            .unwrap_or_default(),
    );
    if let Some(r) = v["last_reload"].as_object() {
        println!("last reload: {}", r["message"].as_str().unwrap_or(""));
    }
    print_access(&v);
    println!(
        "ready: {}  sessions: {}/{}  heap: {} KiB live, {} KiB peak",
        v["ready"],
        v["sessions"]["active"],
        v["sessions"]["capacity"],
        v["heap"]["live_bytes"].as_u64().unwrap_or(0) / 1024,
        v["heap"]["peak_bytes"].as_u64().unwrap_or(0) / 1024,
    );
    println!(
        "{:<16} {:<8} {:<22} {:>8} {:>6}  detail",
        "UPSTREAM", "TRANSPORT", "STATE", "ATTEMPTS", "TOOLS"
    );
    for u in v["upstreams"].as_array().into_iter().flatten() {
        println!(
            "{:<16} {:<8} {:<22} {:>8} {:>6}  {}",
            format!(
                "{}{}",
                u["name"].as_str().unwrap_or(""),
                if u["required"] == true { " (req)" } else { "" }
            ),
            u["transport"].as_str().unwrap_or(""),
            u["state"].as_str().unwrap_or(""),
            u["attempts"].as_u64().unwrap_or(0),
            u["tools"].as_u64().unwrap_or(0),
            detail(u),
        );
        if let Some(o) = u["oauth"].as_object() {
            let until = o.get("valid_until_unix").and_then(|v| v.as_u64());
            let last = &o.get("last_token_request").cloned().unwrap_or_default();
            println!(
                "{:<16} oauth {}: token {}{}{}",
                "",
                o.get("grant").and_then(|v| v.as_str()).unwrap_or(""),
                mcp_edge::logline::printable(o.get("token").and_then(|v| v.as_str()).unwrap_or("")),
                until
                    .map(|t| format!(
                        ", valid until {}",
                        httpdate::fmt_http_date(
                            std::time::UNIX_EPOCH + std::time::Duration::from_secs(t)
                        )
                    ))
                    .unwrap_or_default(),
                last["outcome"]
                    .as_str()
                    .map(|x| format!(", last token request: {x}"))
                    .unwrap_or_default(),
            );
        }
        let withheld = u["withheld"].as_array().map_or(0, Vec::len);
        if withheld > 0 {
            println!(
                "{:<16} {withheld} tool(s) withheld by their pins: mcp-edge tools list",
                ""
            );
        }
    }
}

/// An upstream's detail, with the protocol versions spoken with it (a
/// dual-era upstream's two).
fn detail(u: &serde_json::Value) -> String {
    let detail = u["detail"].as_str().unwrap_or("");
    let eras: Vec<&str> = (u["eras"].as_array().into_iter().flatten())
        .filter_map(|v| v.as_str())
        .collect();
    match eras.is_empty() {
        true => detail.to_string(),
        false => format!("{detail} ({})", eras.join(" + ")),
    }
}
