//! `mcp-edge` command line: `serve` (the default), `check-config`, `--version`, `--help`.

use anyhow::Context;
use clap::{Parser, Subcommand};
use mcp_edge::config::Config;
use mcp_edge::http::Gateway;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (the default). Without --config it serves the built-in
    /// `edge` tools on http://127.0.0.1:8737/mcp.
    Serve,
    /// Validate a config file and print it resolved, secrets masked. Exit 0 if valid, 1 if not.
    CheckConfig {
        /// The file to check.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MCP_EDGE_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Some(Command::CheckConfig { file }) => match Config::load(&file) {
            Ok(c) => {
                print!("{}", c.render_masked());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mcp-edge: invalid config: {e}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Serve) | None => match serve(cli.config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mcp-edge: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

fn serve(path: Option<PathBuf>) -> anyhow::Result<()> {
    let config = match &path {
        Some(p) => Config::load(p).context("invalid config")?,
        None => Config::embedded_default(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async move {
        mcp_edge::metrics::prometheus();
        let gateway = Gateway::start(config).await?;
        eprintln!("mcp-edge listening on http://{}/mcp", gateway.local_addr());
        let ready = gateway.wait_upstreams(Duration::from_secs(30)).await;
        let total = gateway
            .app()
            .router
            .upstreams()
            .iter()
            .filter(|u| u.config.enabled)
            .count();
        mcp_edge::notify::ready(&format!("{ready}/{total} upstreams ready"));
        wait_for_signal().await;
        mcp_edge::notify::stopping();
        gateway.shutdown().await;
        Ok(())
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
