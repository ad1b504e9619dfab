//! Config layer: fixtures under `tests/fixtures/config/{valid,invalid}`.
//!
//! Every file in `valid/` must load. Every file in `invalid/` must fail, and
//! the error message must contain the file name and each expectation: for
//! TOML the leading `# expect: <substring>` lines, for anything else the
//! lines of the sibling `<stem>.expect` file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcp_edge::config::{
    token_sha256, AuditConfig, AuditSink, Config, ConfigError, Credential, EraPreference, Rate,
    Secret, ToolNameRule, Transport, UpstreamConfig, Wire,
};
use mcp_edge::limits;

/// What an unset `server.state_directory` resolves to in this process: the
/// first path of `$STATE_DIRECTORY` (systemd), else none.
fn env_state_directory() -> Option<PathBuf> {
    let v = std::env::var("STATE_DIRECTORY").ok()?;
    let first = v.split(':').next().unwrap_or_default();
    (!first.is_empty()).then(|| PathBuf::from(first))
}

/// Every supervisor key of `up` is at its default.
fn assert_supervisor_defaults(up: &UpstreamConfig) {
    assert_eq!(up.health_interval, limits::DEFAULT_HEALTH_INTERVAL);
    assert_eq!(up.probe_timeout, limits::DEFAULT_PROBE_TIMEOUT);
    assert_eq!(up.probe_misses, limits::DEFAULT_PROBE_MISSES);
    assert_eq!(up.backoff_initial, limits::DEFAULT_BACKOFF_INITIAL);
    assert_eq!(up.backoff_factor, limits::DEFAULT_BACKOFF_FACTOR);
    assert_eq!(up.backoff_cap, limits::DEFAULT_BACKOFF_CAP);
    assert_eq!(up.stable_period, limits::DEFAULT_STABLE_PERIOD);
    assert_eq!(up.retry_after_cap, limits::DEFAULT_RETRY_AFTER_CAP);
    assert!(!up.connect_on_demand);
    assert_eq!(up.startup_timeout, limits::DEFAULT_STARTUP_TIMEOUT);
}

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/config")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_none_or(|e| e != "expect"))
        .collect();
    files.sort();
    files
}

fn fixture(kind: &str, name: &str) -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/config")
        .join(kind)
        .join(name);
    Config::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn expectations(path: &Path) -> Vec<String> {
    let found: Vec<String> = if path.extension().is_some_and(|e| e == "toml") {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map_while(|l| l.strip_prefix("# expect:"))
            .map(|s| s.trim().to_owned())
            .collect()
    } else {
        let exp = path.with_extension("expect");
        std::fs::read_to_string(&exp)
            .unwrap_or_else(|e| panic!("{}: needs a sibling .expect file: {e}", path.display()))
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert!(
        !found.is_empty(),
        "{}: no expectation (`# expect: <substring>` first line or a .expect file)",
        path.display()
    );
    found
}

#[test]
fn every_valid_fixture_loads() {
    let files = fixtures("valid");
    assert!(files.len() >= 5, "{files:?}");
    for path in files {
        let cfg = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.source.as_deref(), Some(path.as_path()));
        assert!(!cfg.upstreams.is_empty());
    }
}

#[test]
fn every_invalid_fixture_fails_naming_file_and_key() {
    let files = fixtures("invalid");
    assert!(files.len() >= 14, "{files:?}");
    for path in files {
        let expect = expectations(&path);
        let err = match Config::load(&path) {
            Ok(_) => panic!("{}: loaded, but it is an invalid fixture", path.display()),
            Err(e) => e.to_string(),
        };
        let prefix = format!("{}: ", path.display());
        assert!(
            err.starts_with(&prefix),
            "{err:?} doesn't start with {prefix:?}"
        );
        for want in expect {
            assert!(
                err.contains(&want),
                "{}:\n  error:  {err}\n  wanted: {want}",
                path.display()
            );
        }
    }
}

#[test]
fn error_message_shape() {
    let text = r#"
[[upstream]]
name = "a"
command = "a"

[[upstream]]
name = "b"
url = "gopher://h"
"#;
    let err = Config::from_toml_str(text, Path::new("config.toml")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "config.toml: upstream[1].url: must be an http:// or https:// URL"
    );
    assert_eq!(err.key(), Some("upstream[1].url"));
    assert!(matches!(err, ConfigError::Invalid { .. }));
}

#[test]
fn unknown_key_is_named_and_typed() {
    let text = "[[upstream]]\nname = \"a\"\ncommand = \"a\"\nautoApprove = []\n";
    let err = Config::from_toml_str(text, Path::new("c.toml")).unwrap_err();
    assert_eq!(err.key(), Some("upstream[0].autoApprove"));
    assert!(
        err.to_string().contains("unknown key `autoApprove`"),
        "{err}"
    );
}

#[test]
fn syntax_error_is_a_parse_error_with_position() {
    let err = Config::from_toml_str("[server]\nlisten = \n", Path::new("c.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Parse { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("c.toml: line 2, column"),
        "{err}"
    );
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let err = Config::load(Path::new("/nonexistent/mcp-edge.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Io { .. }));
    assert!(err.to_string().starts_with("/nonexistent/mcp-edge.toml: "));
}

#[test]
fn too_many_upstreams() {
    let mut text = String::new();
    for i in 0..=limits::MAX_UPSTREAMS {
        text.push_str(&format!("[[upstream]]\nname = \"u{i}\"\ncommand = \"x\"\n"));
    }
    let err = Config::from_toml_str(&text, Path::new("c.toml")).unwrap_err();
    assert_eq!(err.key(), Some("upstream"), "{err}");
    text.truncate(text.rfind("[[upstream]]").unwrap());
    Config::from_toml_str(&text, Path::new("c.toml")).unwrap();
}

#[test]
fn minimal_stdio_gets_every_default() {
    let cfg = fixture("valid", "minimal_stdio.toml");
    let s = &cfg.server;
    assert_eq!(s.listen, limits::DEFAULT_LISTEN.parse().unwrap());
    assert!(s.allowed_origins.is_empty() && s.allowed_hosts.is_empty());
    assert_eq!(s.max_body_bytes, limits::DEFAULT_MAX_BODY_BYTES);
    assert_eq!(s.session_capacity, limits::DEFAULT_SESSION_CAPACITY);
    assert_eq!(s.session_idle_timeout, limits::DEFAULT_SESSION_IDLE_TIMEOUT);
    assert_eq!(
        s.session_min_idle_before_evict,
        limits::DEFAULT_SESSION_MIN_IDLE_BEFORE_EVICT
    );
    assert_eq!(s.keepalive, limits::DEFAULT_KEEPALIVE);
    assert_eq!(s.max_connections, limits::DEFAULT_MAX_CONNECTIONS);
    assert_eq!(s.sse_queue_depth, limits::RELAY_QUEUE_DEPTH);
    assert_eq!(
        s.max_pending_server_requests,
        limits::PENDING_SERVER_REQUESTS
    );
    assert_eq!(s.tool_name_separator, "__");
    assert_eq!(s.tool_names, ToolNameRule::Strict);
    assert_eq!(
        s.admin_listen,
        Some(limits::DEFAULT_ADMIN_LISTEN.parse().unwrap())
    );
    assert_eq!(s.state_directory, env_state_directory());
    assert_eq!(cfg.watchdog.required_grace, limits::DEFAULT_REQUIRED_GRACE);
    let [up] = &cfg.upstreams[..] else {
        panic!("{:?}", cfg.upstreams)
    };
    assert_eq!((up.name.as_str(), up.prefix.as_str()), ("fs", "fs"));
    assert!(up.enabled);
    assert!(!up.required);
    assert_eq!(up.era, EraPreference::Auto);
    assert_eq!(up.call_timeout, limits::DEFAULT_CALL_TIMEOUT);
    assert_eq!(up.max_in_flight, limits::DEFAULT_MAX_IN_FLIGHT);
    assert_eq!(up.max_result_bytes, limits::DEFAULT_MAX_RESULT_BYTES);
    assert_eq!(up.max_catalog_entries, limits::MAX_CATALOG_ENTRIES);
    assert_eq!(up.max_catalog_bytes, limits::DEFAULT_MAX_CATALOG_BYTES);
    assert_supervisor_defaults(up);
    match &up.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
            ..
        } => {
            assert_eq!(command, "npx");
            assert!(args.is_empty() && env.is_empty() && cwd.is_none());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn full_example_resolves_every_key() {
    let cfg = fixture("valid", "full.toml");
    let s = &cfg.server;
    assert_eq!(s.listen.to_string(), "0.0.0.0:8737");
    assert_eq!(
        s.allowed_origins,
        ["https://app.example", "http://localhost:5173"]
    );
    assert_eq!(s.allowed_hosts, ["gateway.local", "edge-01.lan"]);
    assert_eq!(s.max_body_bytes, 2 * 1024 * 1024);
    assert_eq!(s.session_capacity, 512);
    assert_eq!(s.session_idle_timeout, Duration::from_secs(45 * 60));
    assert_eq!(s.session_min_idle_before_evict, Duration::from_secs(5 * 60));
    assert_eq!(s.keepalive, Duration::from_secs(20));
    assert_eq!(s.max_connections, 1024);
    assert_eq!(s.sse_queue_depth, 64);
    assert_eq!(s.max_pending_server_requests, 8);
    assert_eq!(s.tool_name_separator, ".");
    assert_eq!(s.tool_names, ToolNameRule::Spec);
    assert_eq!(s.admin_listen.unwrap().to_string(), "127.0.0.1:9737");
    assert_eq!(
        s.state_directory.as_deref(),
        Some(Path::new("/var/lib/mcp-edge"))
    );

    let names: Vec<_> = cfg.upstreams.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["fs", "remote", "edge", "old"]);
    let fs = &cfg.upstreams[0];
    assert_eq!(fs.prefix, "files");
    assert_eq!(fs.era, EraPreference::Legacy);
    assert_eq!(fs.call_timeout, Duration::from_secs(120));
    assert_eq!((fs.max_in_flight, fs.max_result_bytes), (16, 1024 * 1024));
    assert_eq!(
        (fs.max_catalog_entries, fs.max_catalog_bytes),
        (256, 512 * 1024)
    );
    assert_eq!(fs.health_interval, Duration::from_secs(45));
    assert_eq!(fs.probe_timeout, Duration::from_secs(5));
    assert_eq!(fs.probe_misses, 5);
    assert_eq!(fs.backoff_initial, Duration::from_millis(500));
    assert_eq!(fs.backoff_factor, 1.5);
    assert_eq!(fs.backoff_cap, Duration::from_secs(10 * 60));
    assert_eq!(fs.stable_period, Duration::from_secs(2 * 60));
    assert_eq!(fs.retry_after_cap, Duration::from_secs(30 * 60));
    assert!(fs.connect_on_demand);
    assert_eq!(fs.startup_timeout, Duration::from_secs(45));
    match &fs.transport {
        Transport::Stdio { args, env, cwd, .. } => {
            assert_eq!(args.len(), 3);
            assert_eq!(env["NODE_ENV"], "production");
            assert_eq!(cwd.as_deref(), Some(Path::new("/srv")));
        }
        other => panic!("{other:?}"),
    }
    let remote = &cfg.upstreams[1];
    assert_eq!(
        (remote.prefix.as_str(), remote.era),
        ("remote", EraPreference::Modern)
    );
    // An integer factor is accepted; zero stable period is allowed.
    assert_eq!(remote.backoff_factor, 3.0);
    assert_eq!(remote.stable_period, Duration::ZERO);
    assert_eq!(remote.health_interval, limits::DEFAULT_HEALTH_INTERVAL);
    match &remote.transport {
        Transport::Http {
            url,
            wire: Wire::Streamable,
            headers,
            bearer_token_file,
            oauth: None,
        } => {
            assert_eq!(url, "https://mcp.example.com/mcp");
            assert_eq!(headers["X-Tenant"].expose(), "acme");
            assert_eq!(
                bearer_token_file.as_deref(),
                Some(Path::new("/run/credentials/mcp-edge/remote-token"))
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(cfg.upstreams[2].transport, Transport::Builtin));
    assert_eq!(cfg.upstreams[2].prefix, "");
    // Disabled upstreams may share a prefix with an enabled one.
    assert!(!cfg.upstreams[3].enabled);
    assert_eq!(cfg.upstreams[3].prefix, "files");
    full_example_network_keys(&cfg);
}

/// `[[client]]` and `[audit]` of `full.toml` (TLS needs files: unit tests).
fn full_example_network_keys(cfg: &Config) {
    assert!(cfg.server.tls.is_none());
    assert!(!cfg.server.allow_unauthenticated);
    let names: Vec<_> = cfg.clients.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["build-agent", "dashboard"]);
    let agent = &cfg.clients[0];
    assert_eq!(
        agent.credential,
        Credential::Token {
            sha256: Secret::new(token_sha256("test")),
            file: None
        }
    );
    assert_eq!(
        agent.allow.as_deref(),
        Some(&["files.read_*".to_owned(), "edge__*".to_owned()][..])
    );
    assert_eq!(agent.deny, ["files.write_*"]);
    let second = Duration::from_secs(1);
    assert_eq!(
        agent.rate,
        Some(Rate {
            count: 20,
            per: second
        })
    );
    let dashboard = &cfg.clients[1];
    assert_eq!(dashboard.allow, Some(vec![]));
    assert!(dashboard.deny.is_empty());
    let minute = Duration::from_secs(60);
    assert_eq!(
        dashboard.rate,
        Some(Rate {
            count: 100,
            per: minute
        })
    );
    let audit = AuditConfig {
        sink: AuditSink::File("/var/lib/mcp-edge/audit.jsonl".into()),
        max_bytes: 1024 * 1024,
        keep: 3,
        arguments: true,
    };
    assert_eq!(cfg.audit, Some(audit));
}

#[test]
fn claude_desktop_file() {
    let cfg = fixture("valid", "claude_desktop.json");
    // Server section defaults.
    assert_eq!(cfg.server.listen, limits::DEFAULT_LISTEN.parse().unwrap());
    let [fs, git] = &cfg.upstreams[..] else {
        panic!("{:?}", cfg.upstreams)
    };
    assert_eq!(
        (fs.name.as_str(), fs.prefix.as_str()),
        ("filesystem", "filesystem")
    );
    assert!(fs.enabled);
    assert_eq!(fs.call_timeout, limits::DEFAULT_CALL_TIMEOUT);
    assert_eq!(fs.max_catalog_entries, limits::MAX_CATALOG_ENTRIES);
    assert_eq!(fs.max_catalog_bytes, limits::DEFAULT_MAX_CATALOG_BYTES);
    assert_supervisor_defaults(fs);
    assert_supervisor_defaults(git);
    assert_eq!(cfg.server.state_directory, env_state_directory());
    assert_eq!(cfg.server.sse_queue_depth, limits::RELAY_QUEUE_DEPTH);
    assert_eq!(
        cfg.server.max_pending_server_requests,
        limits::PENDING_SERVER_REQUESTS
    );
    match &fs.transport {
        Transport::Stdio {
            command, args, env, ..
        } => {
            assert_eq!(command, "npx");
            assert_eq!(args[0], "-y");
            assert_eq!(env["BRAVE_API_KEY"], "fixture-secret");
        }
        other => panic!("{other:?}"),
    }
    assert!(!git.enabled);
    match &git.transport {
        Transport::Stdio { cwd, .. } => assert_eq!(cwd.as_deref(), Some(Path::new("/srv/repo"))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn mcp_servers_with_url() {
    let cfg = fixture("valid", "mcp_url.json");
    assert_eq!(cfg.upstreams.len(), 3);
    for up in &cfg.upstreams {
        assert!(matches!(up.transport, Transport::Http { .. }), "{up:?}");
    }
    match &cfg.upstreams[0].transport {
        Transport::Http {
            url,
            wire: Wire::Streamable,
            headers,
            bearer_token_file,
            oauth: None,
        } => {
            assert_eq!(url, "https://mcp.example.com/mcp");
            assert_eq!(headers["Authorization"].expose(), "Bearer fixture-secret");
            assert!(bearer_token_file.is_none());
        }
        other => panic!("{other:?}"),
    }
}

/// The 2024-11-05 HTTP+SSE transport: `transport = "sse"` in TOML, `"type":
/// "sse"` in an `mcpServers` file (as Claude Desktop and VS Code write it);
/// the same keys as `http`, rendered back as `sse`.
#[test]
fn sse_upstreams_are_http_upstreams_of_the_2024_wire() {
    let cfg = fixture("valid", "sse.json");
    let wires: Vec<_> = (cfg.upstreams.iter())
        .map(|u| match &u.transport {
            Transport::Http { url, wire, .. } => (url.as_str(), *wire),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        wires,
        [
            ("https://h.example/sse", Wire::Sse),
            ("https://h.example/mcp", Wire::Streamable)
        ]
    );
    let toml = "[[upstream]]\nname = \"old\"\ntransport = \"sse\"\nurl = \"http://127.0.0.1:9/sse\"\nbearer_token_file = \"/run/t\"\n";
    let cfg = Config::from_toml_str(toml, Path::new("t.toml")).expect("valid");
    assert!(matches!(
        &cfg.upstreams[0].transport,
        Transport::Http {
            wire: Wire::Sse,
            bearer_token_file: Some(_),
            ..
        }
    ));
    let rendered = cfg.render_masked();
    assert!(rendered.contains("transport = \"sse\""), "{rendered}");
}

#[test]
fn format_is_sniffed_without_known_extension() {
    let cfg = fixture("valid", "sniffed_json.conf");
    assert_eq!(cfg.upstreams[0].name, "fs");
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("mcp-edge.conf");
    std::fs::write(&toml, "[[upstream]]\nname = \"t\"\ncommand = \"x\"\n").unwrap();
    assert_eq!(Config::load(&toml).unwrap().upstreams[0].name, "t");
}

#[test]
fn embedded_default() {
    let cfg = Config::embedded_default();
    assert!(cfg.source.is_none());
    assert_eq!(cfg.server.listen, limits::DEFAULT_LISTEN.parse().unwrap());
    assert_eq!(
        cfg.server.session_capacity,
        limits::DEFAULT_SESSION_CAPACITY
    );
    let [edge] = &cfg.upstreams[..] else {
        panic!("{:?}", cfg.upstreams)
    };
    assert_eq!((edge.name.as_str(), edge.prefix.as_str()), ("edge", "edge"));
    assert!(edge.enabled);
    assert!(matches!(edge.transport, Transport::Builtin));
    assert_eq!(
        cfg.server.session_min_idle_before_evict,
        limits::DEFAULT_SESSION_MIN_IDLE_BEFORE_EVICT
    );
    assert_eq!(cfg.server.sse_queue_depth, limits::RELAY_QUEUE_DEPTH);
    assert_eq!(
        cfg.server.max_pending_server_requests,
        limits::PENDING_SERVER_REQUESTS
    );
    assert_eq!(edge.max_catalog_entries, limits::MAX_CATALOG_ENTRIES);
    assert_eq!(edge.max_catalog_bytes, limits::DEFAULT_MAX_CATALOG_BYTES);
    assert_supervisor_defaults(edge);
    // An absolute $STATE_DIRECTORY is used, anything else ignored.
    assert_eq!(
        cfg.server.state_directory,
        env_state_directory().filter(|p| p.is_absolute())
    );
    // The rendering of the default is itself a valid config.
    Config::from_toml_str(&cfg.render_masked(), Path::new("default.toml")).unwrap();
}

#[test]
fn render_masks_secrets() {
    let db = mcp_edge::config::Config::from_toml_str(
        "[[upstream]]\nname = \"db\"\ncommand = \"x\"\nenv = { DATABASE_URL = \"postgres://u:dbpass@h/db\" }\n",
        std::path::Path::new("db.toml"),
    )
    .unwrap()
    .render_masked();
    assert!(
        !db.contains("dbpass") && db.contains("postgres://***@h/db"),
        "{db}"
    );
    let headers = fixture("valid", "http_headers.toml").render_masked();
    assert!(!headers.contains("sk-fixture-header-secret"), "{headers}");
    assert!(headers.contains("X-Api-Key = \"***\""), "{headers}");
    assert!(headers.contains("User-Agent = \"***\""), "{headers}");

    let full = fixture("valid", "full.toml").render_masked();
    assert!(!full.contains("ghp_fixture_secret"), "{full}");
    assert!(full.contains("GITHUB_TOKEN = \"***\""), "{full}");
    assert!(full.contains("NODE_ENV = \"production\""), "{full}");
    assert!(
        full.contains("bearer_token_file = \"/run/credentials/mcp-edge/remote-token\""),
        "{full}"
    );
    assert!(full.contains("session_idle_timeout = \"45m\""), "{full}");
    assert!(full.contains("call_timeout = \"2m\""), "{full}");
    for want in [
        "session_min_idle_before_evict = \"5m\"",
        "sse_queue_depth = 64",
        "max_pending_server_requests = 8",
        "max_catalog_entries = 256",
        "max_catalog_bytes = 524288",
        "state_directory = \"/var/lib/mcp-edge\"",
        "health_interval = \"45s\"",
        "probe_timeout = \"5s\"",
        "probe_misses = 5",
        "backoff_initial = \"500ms\"",
        "backoff_factor = 1.5",
        "backoff_cap = \"10m\"",
        "stable_period = \"2m\"",
        "retry_after_cap = \"30m\"",
        "connect_on_demand = true",
        "startup_timeout = \"45s\"",
        "backoff_factor = 3.0",
        "stable_period = \"0s\"",
    ] {
        assert!(full.contains(want), "{want} missing:\n{full}");
    }
    assert!(full.contains("admin_listen = \"127.0.0.1:9737\""), "{full}");

    for name in ["claude_desktop.json", "mcp_url.json"] {
        let out = fixture("valid", name).render_masked();
        assert!(!out.contains("fixture-secret"), "{out}");
    }

    let text = r#"
[[upstream]]
name = "r"
url = "https://alice:hunter2@mcp.example/v1/mcp?api_key=abc123"

[[upstream]]
name = "s"
command = "mcp-remote"
args = ["https://mcp.example/mcp?token=xyz789", "--header", "Authorization: Bearer qqq111", "--api-key", "k-555"]
env = { DB_PASSWORD = "pw-1", Auth_Header = "a-2", PATH = "/usr/bin" }
"#;
    let out = Config::from_toml_str(text, Path::new("c.toml"))
        .unwrap()
        .render_masked();
    for secret in [
        "alice", "hunter2", "abc123", "xyz789", "qqq111", "k-555", "pw-1", "a-2",
    ] {
        assert!(!out.contains(secret), "{secret} leaked:\n{out}");
    }
    assert!(
        out.contains("url = \"https://***@mcp.example/v1/mcp?***\""),
        "{out}"
    );
    assert!(out.contains("PATH = \"/usr/bin\""), "{out}");
}

#[test]
fn render_round_trips() {
    for path in fixtures("valid") {
        let first = Config::load(&path).unwrap().render_masked();
        let again = Config::from_toml_str(&first, &path)
            .unwrap_or_else(|e| {
                panic!(
                    "re-parsing the rendering of {}: {e}\n{first}",
                    path.display()
                )
            })
            .render_masked();
        assert_eq!(first, again, "{}", path.display());
    }
}

#[test]
fn min_idle_before_evict_bounds() {
    const UP: &str = "[[upstream]]\nname = \"a\"\ncommand = \"a\"\n";
    let load = |server: &str| {
        Config::from_toml_str(&format!("[server]\n{server}\n{UP}"), Path::new("c.toml"))
    };
    // Zero is allowed (any idle session may be evicted) and round-trips.
    let cfg = load("session_min_idle_before_evict = \"0s\"").unwrap();
    assert_eq!(cfg.server.session_min_idle_before_evict, Duration::ZERO);
    let again = Config::from_toml_str(&cfg.render_masked(), Path::new("c.toml")).unwrap();
    assert_eq!(again.server.session_min_idle_before_evict, Duration::ZERO);
    // Equal to the idle timeout is allowed.
    let cfg =
        load("session_idle_timeout = \"2m\"\nsession_min_idle_before_evict = \"2m\"").unwrap();
    assert_eq!(
        cfg.server.session_min_idle_before_evict,
        Duration::from_secs(120)
    );
    // Unset, the default never exceeds a shorter idle timeout.
    let cfg = load("session_idle_timeout = \"20s\"").unwrap();
    assert_eq!(
        cfg.server.session_min_idle_before_evict,
        Duration::from_secs(20)
    );
    // Longer than the idle timeout is an error naming the key.
    let err = load("session_idle_timeout = \"20s\"\nsession_min_idle_before_evict = \"21s\"")
        .unwrap_err();
    assert_eq!(
        err.key(),
        Some("server.session_min_idle_before_evict"),
        "{err}"
    );
    assert!(err.to_string().contains("session_idle_timeout"), "{err}");
    // "off" words are still rejected.
    let err = load("session_min_idle_before_evict = \"off\"").unwrap_err();
    assert_eq!(
        err.key(),
        Some("server.session_min_idle_before_evict"),
        "{err}"
    );
}

#[test]
fn supervisor_key_bounds() {
    let load = |keys: &str| {
        Config::from_toml_str(
            &format!("[[upstream]]\nname = \"a\"\ncommand = \"a\"\n{keys}\n"),
            Path::new("c.toml"),
        )
    };
    let up = |keys: &str| load(keys).unwrap().upstreams.remove(0);
    // Unset, probe_timeout never exceeds a shorter health interval.
    let u = up("health_interval = \"2s\"");
    assert_eq!(u.probe_timeout, Duration::from_secs(2));
    // Equal is allowed.
    let u = up("health_interval = \"5s\"\nprobe_timeout = \"5s\"");
    assert_eq!(u.probe_timeout, Duration::from_secs(5));
    // Unset, backoff_cap never falls below a longer initial delay.
    let u = up("backoff_initial = \"1h\"");
    assert_eq!(u.backoff_cap, Duration::from_secs(3600));
    let u = up("backoff_initial = \"2m\"\nbackoff_cap = \"2m\"");
    assert_eq!(u.backoff_cap, Duration::from_secs(120));
    // Range ends are inclusive.
    let u = up("backoff_factor = 1\nprobe_misses = 100\nprobe_timeout = \"100ms\"");
    assert_eq!(
        (u.backoff_factor, u.probe_misses, u.probe_timeout),
        (1.0, 100, Duration::from_millis(100))
    );
    assert_eq!(up("backoff_factor = 10.0").backoff_factor, 10.0);
    assert_eq!(up("stable_period = \"0s\"").stable_period, Duration::ZERO);
    assert_eq!(
        up("startup_timeout = \"10m\"").startup_timeout,
        Duration::from_secs(600)
    );
    // Each rejection names its key.
    for (keys, key) in [
        ("backoff_factor = nan", "upstream[0].backoff_factor"),
        ("backoff_factor = inf", "upstream[0].backoff_factor"),
        ("backoff_factor = 10.01", "upstream[0].backoff_factor"),
        ("probe_misses = -1", "upstream[0].probe_misses"),
        ("health_interval = \"0s\"", "upstream[0].health_interval"),
        ("health_interval = \"off\"", "upstream[0].health_interval"),
        ("probe_timeout = \"6m\"", "upstream[0].probe_timeout"),
        ("backoff_initial = \"2h\"", "upstream[0].backoff_initial"),
        ("backoff_cap = \"500ms\"", "upstream[0].backoff_cap"),
        ("retry_after_cap = \"25h\"", "upstream[0].retry_after_cap"),
        ("startup_timeout = \"500ms\"", "upstream[0].startup_timeout"),
        ("connect_on_demand = 1", "upstream[0].connect_on_demand"),
    ] {
        let err = load(keys).unwrap_err();
        assert_eq!(err.key(), Some(key), "{keys}: {err}");
    }
    // Non-default values, including odd factors, round-trip.
    let cfg =
        load("backoff_factor = 1.1\nbackoff_initial = \"150ms\"\nprobe_timeout = \"1s 500ms\"")
            .unwrap();
    let first = cfg.render_masked();
    let again = Config::from_toml_str(&first, Path::new("c.toml")).unwrap();
    assert_eq!(again.upstreams[0].backoff_factor, 1.1);
    assert_eq!(
        again.upstreams[0].probe_timeout,
        Duration::from_millis(1500)
    );
    assert_eq!(again.render_masked(), first);
}

#[test]
fn admin_listener_defaults_follow_listen_and_can_be_turned_off() {
    let one = "[[upstream]]\nname = \"fs\"\ncommand = \"x\"\n";
    let load = |server: &str| {
        Config::from_toml_str(&format!("[server]\n{server}\n{one}"), Path::new("c.toml")).unwrap()
    };
    // An ephemeral listen port gives an ephemeral admin port (parallel tests never collide).
    let c = load("listen = \"127.0.0.1:0\"");
    assert_eq!(c.server.admin_listen.unwrap().to_string(), "127.0.0.1:0");
    let c = load("admin_listen = \"off\"");
    assert_eq!(c.server.admin_listen, None);
    assert!(c.render_masked().contains("admin_listen = \"off\""));
    // "off" survives a render → parse round trip.
    let again = Config::from_toml_str(&c.render_masked(), Path::new("r.toml")).unwrap();
    assert_eq!(again.server.admin_listen, None);
}

#[test]
fn required_upstreams_and_their_grace() {
    let text = "[watchdog]\nrequired_grace = \"90s\"\n[[upstream]]\nname = \"fs\"\ncommand = \"x\"\nrequired = true\n";
    let c = Config::from_toml_str(text, Path::new("c.toml")).unwrap();
    assert!(c.upstreams[0].required);
    assert_eq!(c.watchdog.required_grace, Duration::from_secs(90));
    let r = c.render_masked();
    assert!(
        r.contains("required = true") && r.contains("required_grace = \"1m 30s\""),
        "{r}"
    );
    let again = Config::from_toml_str(&r, Path::new("r.toml")).unwrap();
    assert_eq!(again.watchdog, c.watchdog);
    assert_eq!(again.upstreams, c.upstreams);
}

#[test]
fn metrics_listen_is_a_deprecated_alias_of_admin_listen() {
    let one = "[[upstream]]\nname = \"fs\"\ncommand = \"x\"\n";
    let text = format!("[server]\nmetrics_listen = \"127.0.0.1:9801\"\n{one}");
    let c = Config::from_toml_str(&text, Path::new("c.toml")).unwrap();
    assert_eq!(c.server.admin_listen.unwrap().to_string(), "127.0.0.1:9801");
    // check-config's rendering notes the old name and writes the new one.
    let out = c.render_masked();
    assert!(
        out.contains(
            "# note: server.metrics_listen is deprecated; rename it to server.admin_listen\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("\nadmin_listen = \"127.0.0.1:9801\"\n"),
        "{out}"
    );
    assert!(!out.contains("\nmetrics_listen"), "{out}");
    // The rendering reads back the same, without the note.
    let again = Config::from_toml_str(&out, Path::new("r.toml")).unwrap();
    assert_eq!(again.server.admin_listen, c.server.admin_listen);
    assert!(again.notes.is_empty(), "{:?}", again.notes);
    // "off" through the alias.
    let text = format!("[server]\nmetrics_listen = \"off\"\n{one}");
    let c = Config::from_toml_str(&text, Path::new("c.toml")).unwrap();
    assert_eq!(c.server.admin_listen, None);
    // The documented key alone: no note.
    let text = format!("[server]\nadmin_listen = \"127.0.0.1:9801\"\n{one}");
    let c = Config::from_toml_str(&text, Path::new("c.toml")).unwrap();
    assert!(c.notes.is_empty(), "{:?}", c.notes);
    assert!(!c.render_masked().contains("# note:"));
}

#[test]
fn admin_listen_and_metrics_listen_together_name_both_keys() {
    let text = "[server]\nadmin_listen = \"127.0.0.1:9800\"\nmetrics_listen = \"127.0.0.1:9801\"\n\
                [[upstream]]\nname = \"fs\"\ncommand = \"x\"\n";
    let e = Config::from_toml_str(text, Path::new("c.toml")).unwrap_err();
    assert_eq!(e.key(), Some("server.metrics_listen"), "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with("c.toml: server.metrics_listen: "), "{msg}");
    assert!(msg.contains("server.admin_listen"), "{msg}");
}

/// `[upstream.oauth]` as `check-config` shows it: every key, file paths
/// but never what the files hold, in a form that loads again.
#[test]
fn oauth_tables_render_without_secrets_and_load_again() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/config/valid/oauth_client_credentials.toml");
    let cfg = Config::load(&path).unwrap();
    let shown = cfg.render_masked();
    assert!(shown.contains("grant = \"client_credentials\""), "{shown}");
    assert!(
        shown.contains("client_secret_file = \"tests/fixtures/config/oauth-secret.txt\""),
        "{shown}"
    );
    assert!(shown.contains("resource = \"\""), "{shown}");
    assert!(shown.contains("grant = \"authorization_code\""), "{shown}");
    let debug = format!("{cfg:?}");
    for text in [&shown, &debug] {
        assert!(!text.contains("fixture-client-secret"), "{text}");
    }
    let dir = tempfile::tempdir().unwrap();
    let again = dir.path().join("again.toml");
    std::fs::write(&again, &shown).unwrap();
    let reloaded = Config::load(&again).unwrap_or_else(|e| panic!("{e}\n{shown}"));
    assert_eq!(
        format!("{:?}", reloaded.upstreams[0].transport),
        format!("{:?}", cfg.upstreams[0].transport)
    );
}
