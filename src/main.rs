//! `mcp-edge` command line: `serve` (the default), `check-config`, `status`,
//! `upstream reconnect`, `tools approve`, `tools list`, `tools show`,
//! `token new`, `login`, `--version`, `--help`. The commands themselves are
//! in the binary's own modules, `src/cli/`.

// Functions that fit a screen (tests/it/structure.rs holds the hard line).
#![warn(clippy::too_many_lines)]

use clap::{Parser, Subcommand};
use cli::pin_commands::ToolsAction;
use cli::{admin_client, daemon, local_commands, pin_commands, status_table};
use std::path::PathBuf;
use std::process::ExitCode;

/// The binary's own modules, in `src/cli/` (the library never uses them;
/// `tests/it/structure.rs` checks both): how the CLI reaches a running
/// gateway, and each group of commands.
mod cli {
    pub(crate) mod admin_client;
    pub(crate) mod daemon;
    pub(crate) mod local_commands;
    pub(crate) mod pin_commands;
    pub(crate) mod status_table;
}

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
        Some(Command::CheckConfig { file }) => {
            local_commands::check_config(&file, cli.board.as_deref())
        }
        Some(Command::Status) => report(
            admin_client::admin(&cli.config, cli.url, "GET", "/status", None)
                .map(|body| status_table::print_status(&body)),
        ),
        Some(Command::Upstream {
            action: UpstreamAction::Reconnect { name },
        }) => report(
            admin_client::admin(
                &cli.config,
                cli.url,
                "POST",
                &format!("/upstreams/{name}/reconnect"),
                None,
            )
            .map(|b| print!("{b}")),
        ),
        Some(Command::Tools { action }) => {
            report(pin_commands::tools(&cli.config, cli.url, action))
        }
        Some(Command::Token {
            action: TokenAction::New { name },
        }) => local_commands::token_new(&name),
        Some(Command::Login { name, port }) => {
            report(local_commands::login(cli.config.as_deref(), &name, port))
        }
        Some(Command::Serve) | None => report(daemon::serve(cli.config, cli.board.as_deref())),
    }
}

/// Logs on stderr: level from `MCP_EDGE_LOG` or `RUST_LOG` (default info),
/// as `level` or `target=level,...` directives (`tracing_subscriber`'s
/// `Targets`: no regular-expression engine in the binary); a value that is
/// not such directives is said on stderr and `info` used. Under systemd
/// (`JOURNAL_STREAM` set) without timestamps or colours, since journald
/// adds its own; colours only on a terminal.
fn init_logs() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let (var, value) = match std::env::var("MCP_EDGE_LOG") {
        Ok(v) => ("MCP_EDGE_LOG", v),
        Err(_) => ("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_default()),
    };
    let filter = match value.trim() {
        "" => tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO),
        v => v.parse().unwrap_or_else(|e| {
            eprintln!("mcp-edge: {var}={v:?} is not log directives ({e}); logging at info");
            tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO)
        }),
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let registry = tracing_subscriber::registry().with(filter);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        registry.with(fmt.without_time()).init();
    } else {
        registry.with(fmt).init();
    }
}

/// Exit 0, or 1 with the error and its causes on stderr.
fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-edge: {e:#}");
            ExitCode::FAILURE
        }
    }
}
