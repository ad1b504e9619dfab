//! A live connection to an upstream, whatever its transport.

use super::era::UpstreamEra;
use super::{builtin, http, relay, stdio, SendError};
use crate::protocol::{self, RpcError};
use serde_json::Value;
use std::time::Duration;

/// A live connection.
pub enum Conn {
    /// A child process.
    Stdio(stdio::StdioConn),
    /// A streamable-HTTP server.
    Http(Box<http::HttpConn>),
    /// The in-process `edge` tools.
    Builtin,
}

impl Conn {
    /// Sends one request and waits up to `timeout` for its answer.
    pub async fn send(
        &self,
        method: &str,
        params: Option<Value>,
        era: UpstreamEra,
        timeout: Duration,
        relay: Option<relay::Relay>,
    ) -> Result<Value, SendError> {
        match self {
            Conn::Stdio(c) => c.send(method, params, timeout, relay).await,
            Conn::Http(c) => c.send(method, params, era, timeout, relay).await,
            Conn::Builtin => builtin_send(method, params.as_ref()).await,
        }
    }

    /// Sends a JSON-RPC response to a request the upstream sent.
    pub async fn respond(&self, msg: &Value) -> Result<(), SendError> {
        match self {
            Conn::Stdio(c) => c.respond(msg).await,
            Conn::Http(c) => c.respond(msg).await,
            Conn::Builtin => Ok(()),
        }
    }

    /// Sends one notification (no answer expected).
    pub async fn notify(
        &self,
        method: &str,
        params: Option<Value>,
        era: UpstreamEra,
    ) -> Result<(), SendError> {
        match self {
            Conn::Stdio(c) => c.notify(method, params).await,
            Conn::Http(c) => c.notify(method, params, era).await,
            Conn::Builtin => Ok(()),
        }
    }
}

async fn builtin_send(method: &str, params: Option<&Value>) -> Result<Value, SendError> {
    match method {
        "tools/list" => Ok(builtin::list_tools()),
        "tools/call" => {
            let name = params
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let args = params.and_then(|p| p.get("arguments"));
            match builtin::call_tool(name, args).await {
                Ok(r) => Ok(r),
                // Bad arguments are a tool error the model can read and fix
                // (2025-11-25 schema.json CallToolResult.isError); an unknown
                // tool is a protocol error.
                Err(e @ builtin::BuiltinError::InvalidArguments(_)) => Ok(serde_json::json!({
                    "content": [{"type": "text", "text": e.to_string()}],
                    "isError": true
                })),
                Err(e) => Err(SendError::Rpc(RpcError::new(
                    protocol::INVALID_PARAMS,
                    e.to_string(),
                ))),
            }
        }
        "ping" => Ok(serde_json::json!({})),
        _ => Err(SendError::Rpc(RpcError::new(
            protocol::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        ))),
    }
}
