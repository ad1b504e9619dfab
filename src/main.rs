//! `mcp-edge` command line: `serve` (the default), `check-config`, `status`,
//! `upstream reconnect`, `tools approve`, `tools list`, `token new`,
//! `--version`, `--help`.

// Functions that fit a screen (tests/it/structure.rs holds the hard line).
#![warn(clippy::too_many_lines)]

use anyhow::Context;
use clap::{Parser, Subcommand};
use mcp_edge::budget::{mib, Estimate};
use mcp_edge::config::{Board, Config};
use mcp_edge::gateway::{Control, Controls};
use std::path::PathBuf;
use std::process::ExitCode;

#[global_allocator]
static ALLOC: mcp_edge::alloc::Counting = mcp_edge::alloc::Counting;

/// A bounded MCP gateway for edge boxes: many upstream MCP servers (stdio,
/// streamable HTTP, built-in) behind one dual-era streamable-HTTP endpoint.
#[derive(Parser)]
#[command(name = "mcp-edge", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Config file (TOML, or an `mcpServers` JSON file) for the default `serve`.
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
    /// Board profile whose capacity defaults apply (keys in the config file
    /// still win): rpi-zero-2w, rpi4-2gb, rpi5-8gb, generic-arm64.
    #[arg(long, global = true, env = "MCP_EDGE_BOARD")]
    board: Option<String>,
    /// Where to reach a running gateway for `status`, `upstream` and `tools`:
    /// `unix:PATH` (its operator socket, every action) or an http URL (its
    /// admin listener: reads only). Default: `server.admin_socket` and
    /// `server.admin_listen` of --config, else /run/mcp-edge/admin.sock and
    /// http://127.0.0.1:9737.
    #[arg(long, global = true)]
    url: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (the default). Without --config it serves the built-in
    /// `edge` tools on http://127.0.0.1:8737/mcp.
    Serve,
    /// Validate a config file and print it resolved, secrets masked, with the
    /// worst-case live heap its capacities allow. Exit 0 if valid (and, with
    /// --board, within the board's heap budget), 1 if not.
    CheckConfig {
        /// The file to check.
        file: PathBuf,
    },
    /// Show a running gateway's upstreams and sessions (its admin `/status`).
    Status,
    /// Operator actions on one upstream of a running gateway.
    Upstream {
        #[command(subcommand)]
        action: UpstreamAction,
    },
    /// Tool pins of a running gateway (`trust = "pin"` withholds a tool
    /// whose definition changed, or that is new, until approved).
    Tools {
        #[command(subcommand)]
        action: ToolsAction,
    },
    /// Log in once to an upstream whose `[upstream.oauth]` grant is
    /// `authorization_code`: prints the authorization URL, waits for the
    /// browser's redirect to http://127.0.0.1:PORT/callback (or the
    /// redirect URL pasted on stdin), stores the tokens under
    /// `server.state_directory`. The running gateway picks them up.
    Login {
        /// The upstream's name.
        name: String,
        /// The loopback port of the redirect URI (reach it from another
        /// machine with `ssh -L PORT:127.0.0.1:PORT box`).
        #[arg(long, default_value_t = mcp_edge::limits::DEFAULT_LOGIN_PORT)]
        port: u16,
    },
    /// Client tokens for `[[client]]` tables.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
}

#[derive(Subcommand)]
enum TokenAction {
    /// Print a fresh random token and the `[[client]]` lines with its
    /// SHA-256 (the token itself is stored nowhere).
    New {
        /// The client's name: 1 to 32 characters of [A-Za-z0-9_-].
        name: String,
    },
}

#[derive(Subcommand)]
enum ToolsAction {
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

#[derive(Subcommand)]
enum UpstreamAction {
    /// Connect now: ends a backoff wait or a credentials parking.
    Reconnect {
        /// The upstream's name.
        name: String,
    },
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    // `MCP_EDGE_BOARD=` (empty, e.g. to clear a drop-in's value) means no board.
    cli.board = cli.board.filter(|b| !b.trim().is_empty());
    init_logs();
    if !matches!(cli.command, Some(Command::Serve) | None) {
        // A one-shot command piped into `head` ends quietly when the pipe
        // closes, like any Unix tool, instead of panicking on EPIPE (Rust
        // ignores SIGPIPE; `serve` keeps ignoring it, a dropped client must
        // not kill the gateway).
        // SAFETY: called before any thread is started; restores the default.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match cli.command {
        Some(Command::CheckConfig { file }) => check_config(&file, cli.board.as_deref()),
        Some(Command::Status) => report(
            admin(&cli.config, cli.url, "GET", "/status", None).map(|body| print_status(&body)),
        ),
        Some(Command::Upstream {
            action: UpstreamAction::Reconnect { name },
        }) => report(
            admin(
                &cli.config,
                cli.url,
                "POST",
                &format!("/upstreams/{name}/reconnect"),
                None,
            )
            .map(|b| print!("{b}")),
        ),
        Some(Command::Tools { action }) => report(tools(&cli.config, cli.url, action)),
        Some(Command::Token {
            action: TokenAction::New { name },
        }) => token_new(&name),
        Some(Command::Login { name, port }) => report(login(cli.config.as_deref(), &name, port)),
        Some(Command::Serve) | None => match serve(cli.config, cli.board.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mcp-edge: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

/// `login NAME`: the upstream's authorization-code login
/// ([`mcp_edge::oauth::login`]), tokens to its token file.
fn login(config: Option<&std::path::Path>, name: &str, port: u16) -> anyhow::Result<()> {
    use mcp_edge::config::{Grant, Transport};
    let path = config.context("login needs --config FILE (the gateway's config)")?;
    let cfg = Config::load(path)?;
    let up = cfg
        .upstreams
        .iter()
        .find(|u| u.name == name)
        .with_context(|| format!("{}: no upstream named {name:?}", path.display()))?;
    let Transport::Http {
        url,
        oauth: Some(oauth),
        ..
    } = &up.transport
    else {
        anyhow::bail!("upstream {name:?} has no [upstream.oauth] table: nothing to log in to");
    };
    if oauth.grant != Grant::AuthorizationCode {
        anyhow::bail!("upstream {name:?} uses grant = \"{}\": the gateway gets its tokens itself, no login needed", oauth.grant.as_str());
    }
    let dir = cfg
        .server
        .state_directory
        .as_deref()
        .context("server.state_directory is not set: the tokens have nowhere to go")?;
    let store = mcp_edge::oauth::store::path(dir, name);
    let login = mcp_edge::oauth::login::Login {
        name,
        url,
        cfg: oauth,
        store: &store,
        port,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(login.run(&mut std::io::stdout()))
        .with_context(|| format!("login to upstream {name:?}"))
}

/// Logs on stderr: level from `MCP_EDGE_LOG` or `RUST_LOG` (default info);
/// under systemd (`JOURNAL_STREAM` set) without timestamps or colours, since
/// journald adds its own; colours only on a terminal.
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MCP_EDGE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        builder.without_time().init();
    } else {
        builder.init();
    }
}

fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-edge: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// One request to a running gateway's admin listener; returns the body.
/// The admin address a config file names. A file that does not validate
/// (say, after an edit the running gateway rejected) is still read for its
/// `server.admin_listen` (or its deprecated alias `metrics_listen`) alone,
/// so `status` works when it is needed most.
fn admin_listen(p: &std::path::Path) -> anyhow::Result<Option<std::net::SocketAddr>> {
    match Config::load(p) {
        Ok(c) => Ok(c.server.admin_listen),
        Err(e) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let raw: toml::Table = toml::from_str(&text)
                .map_err(|_| e)
                .context("invalid config")?;
            let server = raw.get("server");
            let (key, listen) = ["admin_listen", "metrics_listen"]
                .into_iter()
                .find_map(|k| Some((k, server?.get(k)?.as_str())))
                .unwrap_or(("admin_listen", None));
            eprintln!(
                "mcp-edge: note: {} does not validate; asking the admin listener it names",
                p.display()
            );
            match listen {
                Some("off") => Ok(None),
                Some(a) => {
                    Ok(Some(a.parse().with_context(|| {
                        format!("{}: server.{key} {a:?}", p.display())
                    })?))
                }
                None => Ok(Some(mcp_edge::limits::DEFAULT_ADMIN_LISTEN.parse()?)),
            }
        }
    }
}

/// Where the CLI asks a running gateway: its operator socket (every
/// route) and its TCP admin listener (read-only routes).
struct Targets {
    socket: Option<PathBuf>,
    tcp: Option<String>,
}

/// The operator socket well known from the packaged unit
/// (`RuntimeDirectory=mcp-edge`), tried when nothing else names one.
const PACKAGED_SOCKET: &str = "/run/mcp-edge/admin.sock";

/// `--url` (`unix:PATH` or an http URL), else `--config`'s
/// `server.admin_socket` and `server.admin_listen`, else the defaults.
fn targets(config: &Option<PathBuf>, url: Option<String>) -> anyhow::Result<Targets> {
    if let Some(u) = url {
        return Ok(match u.strip_prefix("unix:") {
            Some(p) => Targets {
                socket: Some(p.into()),
                tcp: None,
            },
            None if u.contains("://") => Targets {
                socket: None,
                tcp: Some(u),
            },
            None => Targets {
                socket: None,
                tcp: Some(format!("http://{u}")),
            },
        });
    }
    let (socket, tcp) = match config {
        Some(p) => {
            let socket = match Config::load(p) {
                Ok(c) => c.server.admin_socket,
                Err(e) => {
                    eprintln!("mcp-edge: note: {e:#}; looking for the operator socket elsewhere");
                    None
                }
            };
            (socket, admin_listen(p)?.map(|a| format!("http://{a}")))
        }
        None => (
            None,
            Some(format!("http://{}", mcp_edge::limits::DEFAULT_ADMIN_LISTEN)),
        ),
    };
    let packaged = Some(PathBuf::from(PACKAGED_SOCKET));
    let socket = socket
        .filter(|p| p.exists())
        .or(packaged.filter(|p| p.exists()));
    Ok(Targets { socket, tcp })
}

/// One request to a running gateway; returns the body. Actions that change
/// state go to the operator socket (found from the config, the packaged
/// path, or the gateway's own `/status`); reads go there too and fall back
/// to the TCP admin listener when the socket cannot be used.
fn admin(
    config: &Option<PathBuf>,
    url: Option<String>,
    method: &str,
    path: &str,
    json: Option<serde_json::Value>,
) -> anyhow::Result<String> {
    let t = targets(config, url)?;
    let body = json.map(|v| v.to_string()).unwrap_or_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut socket = t.socket.clone();
        if let (None, Some(base)) = (&socket, &t.tcp) {
            socket = discover_socket(base).await;
        }
        if let Some(p) = &socket {
            match ask(Via::Socket(p), method, path, &body).await {
                Ok(b) => return Ok(b),
                Err(e) if method != "GET" || t.tcp.is_none() => return Err(e),
                Err(e) => eprintln!("mcp-edge: note: {e:#}; asking the TCP admin listener"),
            }
        }
        match &t.tcp {
            Some(base) => ask(Via::Tcp(base), method, path, &body).await,
            None => anyhow::bail!("no operator socket found and server.admin_listen is \"off\": nothing to ask (pass --url unix:PATH)"),
        }
    })
}

/// The operator socket a running gateway names in its `/status`, if it
/// exists here.
async fn discover_socket(base: &str) -> Option<PathBuf> {
    let body = ask(Via::Tcp(base), "GET", "/status", "").await.ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let p = PathBuf::from(v["admin_socket"].as_str()?);
    p.exists().then_some(p)
}

/// How one request reaches the gateway.
enum Via<'a> {
    Socket(&'a std::path::Path),
    Tcp(&'a str),
}

/// One request over `via`; the body of a 2xx answer, else an error with
/// the answer's reason.
async fn ask(via: Via<'_>, method: &str, path: &str, body: &str) -> anyhow::Result<String> {
    use http_body_util::{BodyExt, Full};
    let timeout = mcp_edge::limits::ADMIN_CLIENT_TIMEOUT;
    let (place, host) = match &via {
        Via::Socket(p) => (
            format!("the operator socket {}", p.display()),
            "localhost".to_owned(),
        ),
        Via::Tcp(base) => (
            format!("the admin listener at {}{path}", base.trim_end_matches('/')),
            host_of(base),
        ),
    };
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, &host)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_owned())))?;
    let exchange = async {
        let mut sender = match &via {
            Via::Socket(p) => handshake(tokio::net::UnixStream::connect(p).await?).await?,
            Via::Tcp(_) => handshake(tokio::net::TcpStream::connect(&host).await?).await?,
        };
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes();
        anyhow::Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    };
    let (status, body) = tokio::time::timeout(timeout, exchange)
        .await
        .with_context(|| format!("{place}: no answer within {timeout:?}"))?
        .with_context(|| format!("cannot reach {place} (is the gateway running? the operator socket serves root and the gateway's user)"))?;
    if !status.is_success() {
        // A JSON answer's "error", else the text; upstream text made printable.
        let v: Option<serde_json::Value> = serde_json::from_str(&body).ok();
        let why = v
            .as_ref()
            .and_then(|v| v["error"].as_str())
            .unwrap_or(body.trim());
        anyhow::bail!(
            "{place}: HTTP {status}: {}",
            mcp_edge::logline::printable(why)
        );
    }
    Ok(body)
}

/// `host:port` of an http base URL: the `Host` header and the address connected to.
fn host_of(base: &str) -> String {
    let rest = base.split_once("://").map_or(base, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// An HTTP/1.1 connection over `io`, driven on the current runtime.
async fn handshake<S>(
    io: S,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await?;
    #[allow(clippy::disallowed_methods)] // the CLI's one connection, on its own runtime
    tokio::spawn(conn);
    Ok(sender)
}

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
fn print_status(body: &str) {
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
            u["detail"].as_str().unwrap_or(""),
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

/// `tools approve` / `tools list` against a running gateway.
fn tools(config: &Option<PathBuf>, url: Option<String>, action: ToolsAction) -> anyhow::Result<()> {
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

/// `check-config`: the resolved config, its worst-case heap, and the
/// board budget verdict.
fn check_config(file: &std::path::Path, board: Option<&str>) -> ExitCode {
    let board = match board.map(Board::named).transpose() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("mcp-edge: {e}");
            return ExitCode::FAILURE;
        }
    };
    let c = match Config::load_for(file, board.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-edge: invalid config: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", c.render_masked());
    let estimate = Estimate::of(&c);
    print!("\n{}", estimate.render());
    match &c.board {
        None => ExitCode::SUCCESS,
        Some(b) if estimate.total() <= b.heap_budget_bytes => {
            println!(
                "# board {}: worst case {} is within the heap budget {}",
                b.name,
                mib(estimate.total()),
                mib(b.heap_budget_bytes)
            );
            ExitCode::SUCCESS
        }
        Some(b) => {
            eprintln!(
                "mcp-edge: {}: the worst-case live heap {} exceeds the {} budget of board {}; lower the capacities above",
                file.display(),
                mib(estimate.total()),
                mib(b.heap_budget_bytes),
                b.name
            );
            ExitCode::FAILURE
        }
    }
}

/// Prefix of tokens made by `token new`, so a leaked one is recognisable.
const TOKEN_PREFIX: &str = "mcpe_";

/// `token new NAME`: a fresh token and the `[[client]]` lines for it. Exit 2
/// for a bad name, 1 when the system has no randomness to give.
fn token_new(name: &str) -> ExitCode {
    use base64::Engine;
    if let Err(m) = mcp_edge::config::check_client_name(name) {
        eprintln!("mcp-edge: token new: the client name {m}");
        return ExitCode::from(2);
    }
    let mut bytes = [0u8; mcp_edge::limits::CLIENT_TOKEN_BYTES];
    if let Err(e) = getrandom::fill(&mut bytes) {
        eprintln!("mcp-edge: token new: no system randomness: {e}");
        return ExitCode::FAILURE;
    }
    let token = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let digest: String = mcp_edge::config::token_sha256(&token)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    println!("# token for client {name:?}: give it to the client, it is not stored anywhere.");
    println!("# The client sends:  Authorization: Bearer {token}");
    println!("{token}");
    println!();
    println!("[[client]]");
    println!("name = {name:?}");
    println!("token_sha256 = \"{digest}\"");
    ExitCode::SUCCESS
}

/// `serve`: load the config, start the runtime, hand over to the gateway's
/// composition root ([`mcp_edge::gateway::run`]) with the signals as its controls.
fn serve(path: Option<PathBuf>, board: Option<&str>) -> anyhow::Result<()> {
    let board = board.map(Board::named).transpose()?;
    let config = match &path {
        Some(p) => Config::load_for(p, board.as_ref()).context("invalid config")?,
        None => Config::embedded_default_for(board.as_ref()),
    };
    let runtime = runtime()?;
    runtime.block_on(async move {
        let signals = Signals::install()?;
        mcp_edge::gateway::run(config, path, signals).await?;
        Ok(())
    })
}

/// The tokio runtime: [`mcp_edge::limits::RUNTIME_WORKERS`] worker
/// threads, or `MCP_EDGE_WORKERS` (`0`: one thread, tokio's
/// `current_thread` runtime; for measuring, docs/benchmarks.md).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let workers = match std::env::var("MCP_EDGE_WORKERS") {
        Ok(v) => (v.parse::<usize>().ok().filter(|n| *n <= 64))
            .with_context(|| format!("MCP_EDGE_WORKERS={v:?}: expected 0 to 64"))?,
        Err(_) => mcp_edge::limits::RUNTIME_WORKERS,
    };
    let mut b = match workers {
        0 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
    };
    b.enable_all().build().context("starting the tokio runtime")
}

/// SIGTERM (`systemctl stop`) and SIGINT (Ctrl-C) mean stop; SIGHUP
/// (`systemctl reload`) means reload. Installed before the gateway starts,
/// so an early signal cannot hit the default action (termination).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("SIGINT handler")?,
            hup: signal(SignalKind::hangup()).context("SIGHUP handler")?,
        })
    }
}

impl Controls for Signals {
    async fn next(&mut self) -> Control {
        tokio::select! {
            _ = self.term.recv() => Control::Stop,
            _ = self.int.recv() => Control::Stop,
            _ = self.hup.recv() => Control::Reload,
        }
    }
}
