//! `mcp-edge tools`: the tool pins of a running gateway (list, show,
//! approve), over [`super::admin_client`].

use super::admin_client::admin;
use anyhow::Context;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub(crate) enum ToolsAction {
    /// Serve a withheld tool again: pin the definition the upstream lists
    /// now (every withheld tool of UPSTREAM when TOOL is left out). Review
    /// it first with `tools show`, and pass the digest shown as --expect:
    /// a definition changed since is then not approved.
    Approve {
        /// The upstream's name.
        upstream: String,
        /// The tool's name at the upstream (as `tools list` shows it).
        tool: Option<String>,
        /// Approve only if TOOL lists this definition now: its SHA-256 (or
        /// a prefix of at least 12 hex characters), as `tools show` prints.
        #[arg(long, value_name = "DIGEST", requires = "tool")]
        expect: Option<String>,
    },
    /// Print the definition UPSTREAM lists now for TOOL (served or
    /// withheld), its digest and the pinned one: what an approval serves.
    Show {
        /// The upstream's name.
        upstream: String,
        /// The tool's name at the upstream.
        tool: String,
    },
    /// Show each upstream's trust, pins and withheld tools, with why.
    List,
}

/// `tools approve` / `tools list` against a running gateway.
pub(crate) fn tools(
    config: &Option<PathBuf>,
    url: Option<String>,
    action: ToolsAction,
) -> anyhow::Result<()> {
    use mcp_edge::logline::printable;
    use serde_json::Value;
    let parse = |body: &str| -> anyhow::Result<Value> {
        serde_json::from_str(body).context("the admin listener's answer is not JSON")
    };
    let tool_line = |w: &Value| {
        let tool = printable(w["tool"].as_str().unwrap_or("?")).into_owned();
        let detail = w["detail"].as_str().or(w["reason"].as_str()).unwrap_or("?");
        format!("{tool}: {}", printable(detail))
    };
    match action {
        ToolsAction::Show { upstream, tool } => {
            let path = format!("/tools?upstream={upstream}");
            let v = parse(&admin(config, url, "GET", &path, None)?)?;
            return show_tool(&v, &upstream, &tool);
        }
        ToolsAction::Approve {
            upstream,
            tool,
            expect,
        } => {
            let ask = serde_json::json!({"upstream": upstream, "tool": tool, "expect": expect});
            let v = parse(&admin(config, url, "POST", "/tools/approve", Some(ask))?)?;
            let approved = v["approved"].as_array().cloned().unwrap_or_default();
            if approved.is_empty() {
                println!("upstream {upstream} withholds nothing: nothing to approve");
            }
            for w in &approved {
                let digest = w["now_sha256"].as_str().unwrap_or("?");
                println!("approved {upstream}: {} (sha256 {digest})", tool_line(w));
            }
            for w in v["withheld"].as_array().into_iter().flatten() {
                println!("still withheld {upstream}: {}", tool_line(w));
            }
        }
        ToolsAction::List => {
            let v = parse(&admin(config, url, "GET", "/status", None)?)?;
            for u in v["upstreams"].as_array().into_iter().flatten() {
                let withheld = u["withheld"].as_array().cloned().unwrap_or_default();
                println!(
                    "{}  trust = {}  pinned {}  served {}  withheld {}",
                    u["name"].as_str().unwrap_or("?"),
                    u["trust"].as_str().unwrap_or("?"),
                    u["pinned"],
                    u["tools"],
                    withheld.len()
                );
                for w in &withheld {
                    println!("  {}", tool_line(w));
                }
            }
        }
    }
    Ok(())
}

/// `tools show`: one tool of `GET /tools`, its definition pretty-printed
/// with every control character escaped (it comes from the upstream).
fn show_tool(v: &serde_json::Value, upstream: &str, tool: &str) -> anyhow::Result<()> {
    use mcp_edge::logline::printable;
    let tools = v["tools"].as_array().into_iter().flatten();
    let Some(t) = tools.into_iter().find(|t| t["tool"] == tool) else {
        anyhow::bail!(
            "upstream {upstream} lists no tool named {:?} now",
            printable(tool)
        );
    };
    let hex = |k: &str| t[k].as_str().unwrap_or("none").to_owned();
    println!("upstream {upstream}, tool {}", printable(tool));
    println!(
        "state:   {}",
        printable(t["detail"].as_str().or(t["state"].as_str()).unwrap_or("?"))
    );
    println!("now:     sha256 {}", hex("now_sha256"));
    println!("pinned:  sha256 {}", hex("pinned_sha256"));
    println!("definition listed now:");
    let pretty = serde_json::to_string_pretty(&t["definition"]).unwrap_or_default();
    for line in pretty.lines() {
        println!("  {}", printable(line));
    }
    if t["state"] == "withheld" {
        println!(
            "to serve it: mcp-edge tools approve --expect {} {upstream} -- <TOOL>",
            hex("now_sha256")
        );
    }
    Ok(())
}
