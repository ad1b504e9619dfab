//! `upstream.trust`: what a changed or new tool definition of an upstream
//! gets (the pins themselves live in `crate::pins`).

/// What an upstream's tool definitions are trusted with (`upstream.trust`,
/// default `"auto"`). The definition is the tool's name, title,
/// description, input and output schema and annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// `"auto"`: a changed or new tool is served, logged, and its new hash
    /// recorded.
    Auto,
    /// `"pin"`: a tool whose definition changed since it was pinned, or a
    /// tool added after the upstream's first connection, is withheld from
    /// lists and calls until an operator approves it
    /// (`mcp-edge tools approve UPSTREAM [TOOL]`). Needs
    /// `server.state_directory`.
    Pin,
}

impl Trust {
    /// The config value: `"auto"` or `"pin"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Auto => "auto",
            Trust::Pin => "pin",
        }
    }
}
