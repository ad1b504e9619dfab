//! Real SDK pairs across eras, MRTR bridged (issue 13, part 3): legacy
//! clients with elicitation, sampling and roots callbacks — Python
//! `mcp==1.30.0` and the TypeScript SDK — call, through mcp-edge, a tool of
//! the Python `mcp==2.3.0` server in its modern era
//! (`fixture_modern_server.py` `meet`), whose SDK resolvers turn the three
//! questions into two `InputRequiredResult` rounds. The clients see plain
//! server→client requests; the tool's text shows the values round-tripped.

use crate::support;

use crate::support::peers::{self, ClientKind};
use serde_json::Value;

const MEET: &str = r#"[{"name": "mh__meet"}]"#;
const EXPECTED: &str = "name=test roots=file:///interop/root llm=canned sampling reply from mcp-edge interop client (asked: Say hello to test)";

/// What the client was asked, in order, as `method: text`.
fn asked(out: &Value) -> Vec<String> {
    let list = out["asked"].as_array().unwrap_or_else(|| panic!("{out}"));
    list.iter()
        .map(|a| {
            format!(
                "{}: {}",
                a["method"].as_str().unwrap(),
                a["text"].as_str().unwrap()
            )
        })
        .collect()
}

async fn meet_through_mcp_edge(kind: ClientKind) {
    let (_modern, port) = peers::spawn_fixture_modern_server();
    let upstream =
        format!("[[upstream]]\nname = \"mh\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n");
    let gw = support::start("", &upstream).await;
    let up = gw.app().router().upstreams()[0].clone();
    assert_eq!(
        up.negotiated().unwrap().era,
        mcp_edge::upstream::UpstreamEra::Modern
    );
    let url = format!("http://{}/mcp", gw.local_addr());
    let out = peers::run_client(kind, &url, MEET).await;
    assert_eq!(
        out["protocolVersion"], "2025-11-25",
        "{kind:?} is legacy: {out}"
    );
    assert_eq!(peers::call_text(&out, 0), EXPECTED, "{kind:?}: {out}");
    let mut q = asked(&out);
    // Round 1 (name and roots, in either order), then round 2 (sampling,
    // which needs the name).
    assert_eq!(
        q.pop().as_deref(),
        Some("sampling/createMessage: Say hello to test"),
        "{kind:?}"
    );
    q.sort();
    assert_eq!(
        q,
        ["elicitation/create: What is your name?", "roots/list: "],
        "{kind:?}: {out}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_1_30_client_answers_a_2_3_modern_servers_input() {
    meet_through_mcp_edge(ClientKind::V1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client_answers_a_2_3_modern_servers_input() {
    meet_through_mcp_edge(ClientKind::Ts).await;
}
