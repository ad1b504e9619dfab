//! `Config::render_masked`: the resolved config as TOML, secrets masked.

use std::fmt::{self, Write as _};
use std::path::Path;
use std::time::Duration;

use super::{
    AuditConfig, AuditSink, ClientConfig, Config, Credential, EraPreference, Rate, ServerConfig,
    ToolNameRule, Transport, UpstreamConfig,
};

/// Replacement for a masked value.
const MASK: &str = "***";
/// Upper-case fragments of names whose values are treated as secrets.
const SECRET_WORDS: [&str; 6] = ["TOKEN", "SECRET", "KEY", "PASS", "AUTH", "CREDENTIAL"];

pub(super) fn render(cfg: &Config) -> String {
    let mut o = String::new();
    o.push_str("# mcp-edge resolved configuration (secrets masked)\n");
    match &cfg.source {
        Some(p) => line(&mut o, "# source: ", &path(p)),
        None => o.push_str("# source: embedded default\n"),
    }
    for note in &cfg.notes {
        line(&mut o, "# note: ", note);
    }
    server(&mut o, &cfg.server);
    o.push_str("\n[watchdog]\n");
    kv(
        &mut o,
        "required_grace",
        duration(cfg.watchdog.required_grace),
    );
    for up in &cfg.upstreams {
        upstream(&mut o, up);
    }
    for c in &cfg.clients {
        client(&mut o, c);
    }
    audit(&mut o, cfg.audit.as_ref());
    o
}

/// The `[server]` section.
fn server(o: &mut String, s: &ServerConfig) {
    o.push_str("\n[server]\n");
    let rule = match s.tool_names {
        ToolNameRule::Strict => "strict",
        ToolNameRule::Spec => "spec",
    };
    let admin = s.admin_listen.map_or("off".to_owned(), |a| a.to_string());
    for (key, value) in [
        ("listen", quote(&s.listen.to_string())),
        ("allowed_origins", array(&s.allowed_origins)),
        ("allowed_hosts", array(&s.allowed_hosts)),
        ("max_body_bytes", s.max_body_bytes.to_string()),
        ("session_capacity", s.session_capacity.to_string()),
        ("session_idle_timeout", duration(s.session_idle_timeout)),
        (
            "session_min_idle_before_evict",
            duration(s.session_min_idle_before_evict),
        ),
        ("keepalive", duration(s.keepalive)),
        ("max_connections", s.max_connections.to_string()),
        (
            "max_connections_per_peer",
            s.max_connections_per_peer.to_string(),
        ),
        ("sse_queue_depth", s.sse_queue_depth.to_string()),
        (
            "max_pending_server_requests",
            s.max_pending_server_requests.to_string(),
        ),
        ("tool_name_separator", quote(&s.tool_name_separator)),
        ("tool_names", quote(rule)),
        ("admin_listen", quote(&admin)),
    ] {
        kv(o, key, value);
    }
    match &s.state_directory {
        Some(p) => kv(o, "state_directory", quote(&path(p))),
        None => o.push_str("# state_directory: not set (backoff state is kept in memory only)\n"),
    }
    match &s.admin_socket {
        Some(p) => kv(o, "admin_socket", quote(&path(p))),
        None => o.push_str("admin_socket = \"off\"  # no operator socket: nothing can approve tools or force reconnects\n"),
    }
    match &s.tls {
        Some(t) => {
            kv(o, "tls_cert", quote(&path(&t.cert)));
            kv(o, "tls_key", quote(&path(&t.key)));
            match &t.client_ca {
                Some(p) => kv(o, "tls_client_ca", quote(&path(p))),
                None => o.push_str("# tls_client_ca: not set (no client certificate asked for)\n"),
            }
            line(o, "# tls_cert notAfter: ", &t.not_after);
        }
        None => o.push_str("# tls_cert, tls_key: not set (plain HTTP)\n"),
    }
    kv(
        o,
        "allow_unauthenticated",
        s.allow_unauthenticated.to_string(),
    );
    o.push_str(&super::fleet::printed(&s.fleet));
}

/// One `[[client]]` table; a token only as its digest (not a secret).
fn client(o: &mut String, c: &ClientConfig) {
    o.push_str("\n[[client]]\n");
    kv(o, "name", quote(&c.name));
    match &c.credential {
        Credential::Token { file: Some(p), .. } => kv(o, "token_file", quote(&path(p))),
        Credential::Token { sha256, file: None } => {
            kv(o, "token_sha256", quote(&hex(sha256.expose())));
        }
        Credential::CertSubject(pairs) => kv(o, "cert_subject", quote(&subject(pairs))),
    }
    match &c.allow {
        Some(a) => kv(o, "allow", array(a)),
        None => o.push_str("# allow: not set (every name)\n"),
    }
    kv(o, "deny", array(&c.deny));
    match &c.rate {
        Some(r) => kv(o, "rate", quote(&rate(r))),
        None => o.push_str("# rate: not set (unlimited)\n"),
    }
    kv(o, "share", c.share.to_string());
}

/// The `[audit]` section, or a comment that there is none.
fn audit(o: &mut String, a: Option<&AuditConfig>) {
    let Some(a) = a else {
        o.push_str("\n# [audit]: not set (no audit log)\n");
        return;
    };
    o.push_str("\n[audit]\n");
    let sink = match &a.sink {
        AuditSink::File(p) => path(p),
        AuditSink::Journal => "journal".to_owned(),
    };
    kv(o, "path", quote(&sink));
    kv(o, "max_bytes", a.max_bytes.to_string());
    kv(o, "keep", a.keep.to_string());
    kv(o, "arguments", a.arguments.to_string());
}

/// Lower-case hex of a digest.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// `CN=a, O=b`, with `\` and `,` in values escaped as the parser reads them.
fn subject(pairs: &[(String, String)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", v.replace('\\', "\\\\").replace(',', "\\,")))
        .collect();
    parts.join(", ")
}

/// `20/s`, `5/m`, `1/h`.
fn rate(r: &Rate) -> String {
    let unit = match r.per.as_secs() {
        3600 => "h",
        60 => "m",
        _ => "s",
    };
    format!("{}/{unit}", r.count)
}

/// One `[[upstream]]` table: the common keys, then the transport's.
fn upstream(o: &mut String, up: &UpstreamConfig) {
    o.push_str("\n[[upstream]]\n");
    let transport = up.transport.name();
    let era = match up.era {
        EraPreference::Auto => "auto",
        EraPreference::Legacy => "legacy",
        EraPreference::Modern => "modern",
    };
    for (key, value) in [
        ("name", quote(&up.name)),
        ("transport", quote(transport)),
        ("enabled", up.enabled.to_string()),
        ("required", up.required.to_string()),
        ("era", quote(era)),
        ("trust", quote(up.trust.as_str())),
        ("prefix", quote(&up.prefix)),
        ("call_timeout", duration(up.call_timeout)),
        ("max_in_flight", up.max_in_flight.to_string()),
        ("max_result_bytes", up.max_result_bytes.to_string()),
        ("max_catalog_entries", up.max_catalog_entries.to_string()),
        ("max_catalog_bytes", up.max_catalog_bytes.to_string()),
        ("health_interval", duration(up.health_interval)),
        ("probe_timeout", duration(up.probe_timeout)),
        ("probe_misses", up.probe_misses.to_string()),
        ("backoff_initial", duration(up.backoff_initial)),
        ("backoff_factor", float(up.backoff_factor)),
        ("backoff_cap", duration(up.backoff_cap)),
        ("stable_period", duration(up.stable_period)),
        ("retry_after_cap", duration(up.retry_after_cap)),
        ("connect_on_demand", up.connect_on_demand.to_string()),
        ("startup_timeout", duration(up.startup_timeout)),
    ] {
        kv(o, key, value);
    }
    transport_keys(o, &up.transport);
}

/// The keys of one transport, secrets masked.
fn transport_keys(o: &mut String, transport: &Transport) {
    match transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
            sandbox,
        } => {
            kv(o, "command", quote(command));
            kv(o, "args", array(&mask_args(args)));
            let env = env.iter().map(|(k, v)| (k.as_str(), mask_env_value(k, v)));
            kv(o, "env", inline_table(env));
            match cwd {
                Some(c) => kv(o, "cwd", quote(&path(c))),
                None => o.push_str("# cwd: not set (inherits the working directory)\n"),
            }
            sandbox_keys(o, sandbox, cwd.as_deref());
        }
        Transport::Http {
            url,
            headers,
            bearer_token_file,
            oauth,
            ..
        } => {
            kv(o, "url", quote(&mask_url(url)));
            let headers = headers.keys().map(|k| (k.as_str(), MASK.to_owned()));
            kv(o, "headers", inline_table(headers));
            match bearer_token_file {
                Some(p) => kv(o, "bearer_token_file", quote(&path(p))),
                None => o.push_str("# bearer_token_file: not set\n"),
            }
            if let Some(a) = oauth {
                kv(o, "oauth", oauth_table(a));
            }
        }
        Transport::Builtin => {}
    }
}

/// `sandbox`, `paths_rw`, `paths_ro`, `network`, then as comments what
/// the child gets on this machine ([`crate::sandbox::describe`]).
fn sandbox_keys(o: &mut String, spec: &crate::sandbox::Spec, cwd: Option<&Path>) {
    let strings = |ps: &[std::path::PathBuf]| ps.iter().map(|p| path(p)).collect::<Vec<_>>();
    kv(o, "sandbox", quote(spec.mode.as_str()));
    kv(o, "paths_rw", array(&strings(&spec.paths_rw)));
    kv(o, "paths_ro", array(&strings(&spec.paths_ro)));
    kv(o, "network", spec.network.to_string());
    let d = crate::sandbox::describe(spec, cwd);
    let _ = writeln!(
        o,
        "# child home: {} (HOME; TMPDIR {}; each created 0700; <state_directory>/children/NAME, \
         or without a state_directory <TMPDIR or /tmp>/mcp-edge-<uid>/children/NAME)",
        d["home"].as_str().unwrap_or(""),
        d["tmp"].as_str().unwrap_or(""),
    );
    let _ = writeln!(
        o,
        "# environment: {}",
        d["environment"].as_str().unwrap_or("")
    );
    if let Some(abi) = d["landlock"].get("abi") {
        let _ = writeln!(o, "# sandbox landlock: ABI {abi} on this kernel");
    }
    for key in [
        "landlock",
        "enforced",
        "degraded",
        "network",
        "no_new_privs",
    ] {
        if let Some(v) = d.get(key).filter(|v| !v.is_object()) {
            let _ = writeln!(
                o,
                "# sandbox {key}: {}",
                v.as_str().map_or_else(|| v.to_string(), str::to_owned)
            );
        }
    }
    for key in ["paths_ro", "paths_rw", "missing", "split", "refused"] {
        if let Some(list) = d.get(key).and_then(|v| v.as_array()) {
            if list.is_empty() && (key == "split" || key == "refused") {
                continue;
            }
            let items: Vec<&str> = list.iter().filter_map(|v| v.as_str()).collect();
            // A path may hold a control character, which a comment cannot.
            let shown = crate::logline::printable(&items.join(", ")).into_owned();
            let _ = writeln!(o, "# sandbox grants {key}: {shown}");
        }
    }
}

impl fmt::Debug for Transport {
    /// As `check-config` shows it: URL credentials, header values, secret
    /// env values and secret args masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
                sandbox,
            } => {
                let env: std::collections::BTreeMap<&str, String> = env
                    .iter()
                    .map(|(k, v)| (k.as_str(), mask_env_value(k, v)))
                    .collect();
                f.debug_struct("Stdio")
                    .field("command", command)
                    .field("args", &mask_args(args))
                    .field("env", &env)
                    .field("cwd", cwd)
                    .field("sandbox", sandbox)
                    .finish()
            }
            Transport::Http {
                url,
                wire,
                headers,
                bearer_token_file,
                oauth,
            } => f
                .debug_struct("Http")
                .field("url", &mask_url(url))
                .field("wire", wire)
                .field("headers", headers)
                .field("bearer_token_file", bearer_token_file)
                .field("oauth", oauth)
                .finish(),
            Transport::Builtin => f.write_str("Builtin"),
        }
    }
}

/// `[upstream.oauth]` as an inline table (the same keys; file paths, never
/// what the files hold).
fn oauth_table(a: &super::OAuthConfig) -> String {
    use super::ClientAuth;
    let mut e = vec![format!("grant = {}", quote(a.grant.as_str()))];
    let mut opt = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            e.push(format!("{k} = {}", quote(v)));
        }
    };
    opt("client_id", &a.client_id);
    opt("client_metadata_url", &a.client_metadata_url);
    opt("token_endpoint", &a.token_endpoint);
    opt("resource", &a.resource);
    match &a.auth {
        ClientAuth::Secret(p) => e.push(format!("client_secret_file = {}", quote(&path(p)))),
        ClientAuth::PrivateKey(p) => e.push(format!("private_key_file = {}", quote(&path(p)))),
        ClientAuth::None => {}
    }
    if let Some(s) = &a.scopes {
        e.push(format!("scopes = {}", array(s)));
    }
    format!("{{ {} }}", e.join(", "))
}

/// An env value as shown: secret-looking names are masked whole; any other
/// value that is a URL (e.g. `DATABASE_URL`) loses its credentials.
fn mask_env_value(name: &str, value: &str) -> String {
    if is_secret_name(name) {
        MASK.to_owned()
    } else if value.contains("://") {
        mask_url(value)
    } else {
        value.to_owned()
    }
}

fn kv(o: &mut String, key: &str, value: String) {
    let _ = writeln!(o, "{key} = {value}");
}

fn line(o: &mut String, lead: &str, text: &str) {
    // A comment must stay on one line.
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let _ = writeln!(o, "{lead}{text}");
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn duration(d: Duration) -> String {
    quote(&humantime::format_duration(d).to_string())
}

/// A TOML float: `2.0`, `1.5` (shortest text that reads back the same value).
fn float(v: f64) -> String {
    format!("{v:?}")
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML key: bare when possible.
fn key(s: &str) -> String {
    let bare = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        s.to_owned()
    } else {
        quote(s)
    }
}

fn array(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", items.join(", "))
}

fn inline_table<'a>(entries: impl Iterator<Item = (&'a str, String)>) -> String {
    let entries: Vec<String> = entries
        .map(|(k, v)| format!("{} = {}", key(k), quote(&v)))
        .collect();
    if entries.is_empty() {
        "{}".to_owned()
    } else {
        format!("{{ {} }}", entries.join(", "))
    }
}

/// Whether a variable, header or flag name suggests its value is a secret.
fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_WORDS.iter().any(|w| upper.contains(w))
}

/// `scheme://user:pw@host/p?q#f` → `scheme://***@host/p?***#***`; other
/// strings unchanged. Used wherever an upstream URL is shown (check-config,
/// errors sent to clients, `/status`, logs): credentials in the userinfo or
/// the query must not leave the config.
pub fn mask_url(s: &str) -> String {
    let Some(scheme_end) = s.find("://").map(|i| i + 3) else {
        return s.to_owned();
    };
    let (head, rest) = s.split_at(scheme_end);
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let mut out = head.to_owned();
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(MASK);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let (before_frag, frag) = match tail.find('#') {
        Some(i) => (&tail[..i], true),
        None => (tail, false),
    };
    match before_frag.find('?') {
        Some(q) => {
            out.push_str(&before_frag[..=q]);
            out.push_str(MASK);
        }
        None => out.push_str(before_frag),
    }
    if frag {
        out.push('#');
        out.push_str(MASK);
    }
    out
}

/// Masks secrets in a command line: the value after a secret-looking flag
/// (`--api-key X`), `--token=X`, `API_KEY=X`, `Authorization: X`, and URL
/// credentials.
fn mask_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut value_is_secret = false;
    for arg in args {
        let masked = if value_is_secret {
            value_is_secret = false;
            MASK.to_owned()
        } else if arg.contains("://") && !arg.starts_with('-') {
            mask_url(arg)
        } else if let Some((name, value)) = arg.split_once('=') {
            if is_secret_name(name) {
                format!("{name}={MASK}")
            } else {
                format!("{name}={}", mask_url(value))
            }
        } else if arg.starts_with('-') {
            value_is_secret = is_secret_name(arg.trim_start_matches('-'));
            arg.clone()
        } else if let Some((name, _)) = arg.split_once(':') {
            let header_like = !name.is_empty() && !name.contains(char::is_whitespace);
            if header_like && is_secret_name(name) {
                format!("{name}: {MASK}")
            } else {
                arg.clone()
            }
        } else {
            arg.clone()
        };
        out.push(masked);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn urls() {
        assert_eq!(mask_url("https://h/mcp"), "https://h/mcp");
        assert_eq!(
            mask_url("https://u:p@h:8/p?k=v#f"),
            "https://***@h:8/p?***#***"
        );
        assert_eq!(mask_url("http://h?x"), "http://h?***");
        assert_eq!(mask_url("plain"), "plain");
    }

    #[test]
    fn args() {
        let got = mask_args(&s(&[
            "-y",
            "--api-key",
            "sk-1",
            "--token=abc",
            "API_KEY=xyz",
            "LOG=debug",
            "Authorization: Bearer q",
            "https://u:p@h/x?k=1",
            "--verbose",
            "file.txt",
        ]));
        assert_eq!(
            got,
            s(&[
                "-y",
                "--api-key",
                "***",
                "--token=***",
                "API_KEY=***",
                "LOG=debug",
                "Authorization: ***",
                "https://***@h/x?***",
                "--verbose",
                "file.txt",
            ])
        );
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(key("X-Api-Key"), "X-Api-Key");
        assert_eq!(key("a b"), "\"a b\"");
    }
}
