//! The `Bearer` challenge of a 401 or 403 (`WWW-Authenticate`, RFC 9110
//! §11.6.1; parameters of RFC 6750 §3 and RFC 9728 §5.1): where the
//! protected-resource metadata is, which scopes the resource wants, and
//! why it refused (`insufficient_scope`, the MCP authorization spec's
//! "Scope Challenge Handling").

/// What a `Bearer` challenge says; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// `resource_metadata`: the protected-resource metadata URL.
    pub resource_metadata: Option<String>,
    /// `scope`: space-separated scopes the resource asks for.
    pub scope: Option<String>,
    /// `error` (`invalid_token`, `insufficient_scope`, …).
    pub error: Option<String>,
}

impl Challenge {
    /// The `Bearer` challenge among the header values given, if any (other
    /// schemes are skipped). Malformed parameters end the parse; what was
    /// read before them is kept.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<Challenge> {
        values.into_iter().find_map(bearer_in)
    }

    /// True when the resource refused for want of scope (RFC 6750 §3.1).
    pub fn insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

/// The `Bearer` challenge in one header value (which may hold several
/// challenges, comma-separated).
fn bearer_in(value: &str) -> Option<Challenge> {
    let mut rest = value;
    loop {
        let (scheme, after) = token(rest.trim_start());
        if scheme.is_empty() {
            return None;
        }
        let (params, next) = params(after);
        if scheme.eq_ignore_ascii_case("bearer") {
            return Some(params);
        }
        rest = next?;
    }
}

/// The auth-params after a scheme, and the text of the next challenge.
fn params(mut s: &str) -> (Challenge, Option<&str>) {
    let mut c = Challenge::default();
    loop {
        s = s.trim_start().trim_start_matches(',').trim_start();
        let (name, after) = token(s);
        if name.is_empty() {
            return (c, None);
        }
        let after_ws = after.trim_start();
        let Some(v) = after_ws.strip_prefix('=') else {
            // A bare token: the next challenge's scheme starts here.
            return (c, Some(s));
        };
        let (value, after) = value(v.trim_start());
        let Some(value) = value else {
            return (c, None);
        };
        match name.to_ascii_lowercase().as_str() {
            "resource_metadata" => c.resource_metadata = Some(value),
            "scope" => c.scope = Some(value),
            "error" => c.error = Some(value),
            _ => {}
        }
        s = after;
    }
}

/// A token (RFC 9110 §5.6.2) at the start of `s`, and what follows.
fn token(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)))
        .unwrap_or(s.len());
    s.split_at(end)
}

/// A token or quoted-string value (RFC 9110 §5.6.4), unescaped.
fn value(s: &str) -> (Option<String>, &str) {
    let Some(q) = s.strip_prefix('"') else {
        let (t, rest) = token(s);
        return ((!t.is_empty()).then(|| t.to_string()), rest);
    };
    let mut out = String::new();
    let mut chars = q.char_indices();
    while let Some((i, ch)) = chars.next() {
        match ch {
            '"' => return (Some(out), &q[i + 1..]),
            '\\' => match chars.next() {
                Some((_, e)) => out.push(e),
                None => return (None, ""),
            },
            c => out.push(c),
        }
    }
    (None, "")
}

#[cfg(test)]
mod tests {
    use super::Challenge;

    #[test]
    fn reads_the_bearer_parameters() {
        let c = Challenge::parse([
            r#"Bearer error="insufficient_scope", scope="files:read files:write", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource""#,
        ])
        .unwrap();
        assert_eq!(c.scope.as_deref(), Some("files:read files:write"));
        assert!(c.insufficient_scope());
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource")
        );
    }

    #[test]
    fn skips_other_schemes_and_reads_tokens_and_escapes() {
        let c = Challenge::parse([r#"Basic realm="x", Bearer scope=read, error="a\"b""#]).unwrap();
        assert_eq!(c.scope.as_deref(), Some("read"));
        assert_eq!(c.error.as_deref(), Some("a\"b"));
        let c = Challenge::parse(["Basic realm=\"x\"", "bearer"]).unwrap();
        assert_eq!(c, Challenge::default());
        assert_eq!(Challenge::parse(["Basic realm=\"x\""]), None);
        assert_eq!(Challenge::parse([""]), None);
    }

    #[test]
    fn an_unterminated_quote_keeps_what_came_before() {
        let c = Challenge::parse([r#"Bearer scope="a", resource_metadata="https://x"#]).unwrap();
        assert_eq!(c.scope.as_deref(), Some("a"));
        assert_eq!(c.resource_metadata, None);
    }
}
