//! `mcp-edge serve`: the runtime, the signals as the gateway's controls,
//! and the hand-over to its composition root.

use anyhow::Context;
use mcp_edge::config::{Board, Config};
use mcp_edge::gateway::{Control, Controls};
use std::path::PathBuf;

/// `serve`: load the config, start the runtime, hand over to the gateway's
/// composition root ([`mcp_edge::gateway::run`]) with the signals as its controls.
pub(crate) fn serve(path: Option<PathBuf>, board: Option<&str>) -> anyhow::Result<()> {
    let board = board.map(Board::named).transpose()?;
    let config = match &path {
        Some(p) => Config::load_for(p, board.as_ref()).context("invalid config")?,
        None => Config::embedded_default_for(board.as_ref()),
    };
    let runtime = runtime()?;
    runtime.block_on(async move {
        let signals = Signals::install()?;
        // Boxed: the whole gateway future, made once.
        Box::pin(mcp_edge::gateway::run(config, path, signals)).await?;
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
