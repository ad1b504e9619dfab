//! How an upstream is reached: the [`Transport`] of an `[[upstream]]`
//! (its `Debug`, masking secrets as `check-config` does, is in `render`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{OAuthConfig, Secret};

/// How an upstream is reached (`upstream.transport`). `Debug` masks
/// secrets as `check-config` does (URL credentials, header values, secret
/// env values and args).
#[derive(Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
    /// `command` is non-empty; `cwd` `None` = inherit.
    Stdio {
        /// Program to run (looked up on `PATH` when not absolute).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// The config's environment variables: the child's environment
        /// is these on top of `PATH`, `HOME`, `TMPDIR`, `LANG`
        /// ([`crate::sandbox::environment`]), never mcp-edge's own.
        env: BTreeMap<String, String>,
        /// Working directory; `None` = inherit.
        cwd: Option<PathBuf>,
        /// `sandbox`, `paths_rw`, `paths_ro`, `network`, and the child's home.
        sandbox: crate::sandbox::Spec,
    },
    /// A remote HTTP server (`transport = "http"`, or `"sse"` for the
    /// 2024-11-05 HTTP+SSE transport: [`Wire`]). `url` is a validated
    /// http(s) URL (no fragment); `headers` names are valid HTTP header
    /// names and values valid header values; `bearer_token_file` is the
    /// path with `$CREDENTIALS_DIRECTORY/` already expanded (the file is
    /// read by the transport, not here).
    Http {
        /// The MCP endpoint, `http://` or `https://` (the SSE stream's, for
        /// [`Wire::Sse`]).
        url: String,
        /// Which of the two HTTP transports it speaks.
        wire: Wire,
        /// Extra request headers (values are secrets: masked in `check-config`).
        headers: BTreeMap<String, Secret<String>>,
        /// File holding a bearer token, read at each connect (`Authorization: Bearer …`).
        bearer_token_file: Option<PathBuf>,
        /// `[upstream.oauth]`: access tokens from an authorization server.
        oauth: Option<Box<OAuthConfig>>,
    },
    /// The in-process `edge` tools.
    Builtin,
}

impl Transport {
    /// Its `transport` key: `"stdio"`, `"http"`, `"sse"` or `"builtin"`.
    pub fn name(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http {
                wire: Wire::Sse, ..
            } => "sse",
            Transport::Http { .. } => "http",
            Transport::Builtin => "builtin",
        }
    }
}

/// The HTTP transport an upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Streamable HTTP (`transport = "http"`): one POST per message, its
    /// answer in the response (2025-03-26 onwards).
    Streamable,
    /// The HTTP+SSE transport of 2024-11-05 (`transport = "sse"`): a GET
    /// stream whose first event names the URL messages are POSTed to, and
    /// every answer on the stream.
    Sse,
}
