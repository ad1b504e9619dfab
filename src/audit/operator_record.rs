//! An operator's action on the operator socket (`server.admin_socket`) as
//! an audit line: who (the peer's uid and pid, from `SO_PEERCRED`), what
//! (`tools/approve`, `upstreams/reconnect`, or `admin` for a refused peer),
//! on which upstream and tool, and how it ended. The keys of a call's line
//! are kept (`client` is `"operator"`, `session` `"admin-socket"`) so one
//! reader takes both, with `uid` and `pid` added.

use super::{Audit, Entry};
use serde::Serialize;
use std::time::SystemTime;

/// The peer an operator action came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operator {
    /// Its user id.
    pub uid: u32,
    /// Its process id.
    pub pid: i32,
}

/// One operator action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Who.
    pub by: Operator,
    /// `tools/approve`, `upstreams/reconnect`, `admin` (refused peer).
    pub method: &'static str,
    /// The upstream acted on.
    pub upstream: Option<String>,
    /// The tool approved.
    pub tool: Option<String>,
    /// `ok`, `refused`, `conflict`, `not_found`, `error`.
    pub outcome: &'static str,
}

impl Operator {
    /// `method` on `upstream` (and `tool`) by this peer, ended as `outcome`.
    pub fn audited(
        self,
        method: &'static str,
        upstream: Option<&str>,
        tool: Option<&str>,
        outcome: &'static str,
    ) -> Action {
        Action {
            by: self,
            method,
            upstream: upstream.map(str::to_owned),
            tool: tool.map(str::to_owned),
            outcome,
        }
    }
}

#[derive(Serialize)]
struct Line<'a> {
    time: String,
    client: &'static str,
    uid: u32,
    pid: i32,
    session: &'static str,
    method: &'static str,
    upstream: Option<&'a str>,
    name: Option<&'a str>,
    outcome: &'static str,
}

impl Action {
    fn entry(self) -> Option<Entry> {
        let line = Line {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            client: "operator",
            uid: self.by.uid,
            pid: self.by.pid,
            session: "admin-socket",
            method: self.method,
            upstream: self.upstream.as_deref(),
            name: self.tool.as_deref(),
            outcome: self.outcome,
        };
        let line = serde_json::to_string(&line).ok()?;
        Some(Entry {
            line,
            arguments_at: None,
            client: format!("operator uid={} pid={}", self.by.uid, self.by.pid),
            name: self.tool.unwrap_or_default(),
            upstream: self.upstream.unwrap_or_else(|| "-".into()),
            method: self.method,
            outcome: self.outcome,
        })
    }
}

impl Audit {
    /// Queues an operator action's line (see the module docs); never waits.
    pub fn operator(&self, a: Action) {
        match a.entry() {
            Some(e) => self.queue(e),
            None => self.write_error(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operator_line_names_the_peer() {
        let by = Operator {
            uid: 1000,
            pid: 4242,
        };
        let e = by
            .audited("tools/approve", Some("files"), Some("echo"), "ok")
            .entry()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&e.line).unwrap();
        assert_eq!(v["uid"], 1000);
        assert_eq!(v["pid"], 4242);
        assert_eq!(v["client"], "operator");
        assert_eq!(v["method"], "tools/approve");
        assert_eq!(
            (v["upstream"].as_str(), v["name"].as_str()),
            (Some("files"), Some("echo"))
        );
        assert_eq!(v["outcome"], "ok");
    }
}
