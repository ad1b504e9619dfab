//! A gateway served in-process ([`Gateway::serve`]) and driven by
//! [`Control`]s, as `main.rs` drives it by signals (tests/it/reload.rs,
//! tests/it/tls.rs).

use super::eventually::eventually_sync;
use mcp_edge::gateway::{Control, Gateway};
use std::time::Duration;

/// A gateway served in-process ([`Gateway::serve`]) on the config file
/// `cfg`, driven by [`Control`]s as `main.rs` drives it by signals.
pub struct InProcess {
    /// The served gateway's downstream state.
    pub app: std::sync::Arc<mcp_edge::downstream::App>,
    /// Its `/mcp` address.
    pub addr: std::net::SocketAddr,
    /// What `main.rs`'s signal handlers would send.
    pub controls: tokio::sync::mpsc::Sender<Control>,
    served: tokio::task::JoinHandle<()>,
}

impl InProcess {
    /// Serving `cfg` (under `board`), its upstreams settled.
    pub async fn start(cfg: &std::path::Path, board: Option<&str>) -> InProcess {
        let g = InProcess::spawn(cfg, board).await;
        g.wait_ready().await;
        g
    }

    /// Serving, not yet waiting for its upstreams' first attempts.
    pub async fn spawn(cfg: &std::path::Path, board: Option<&str>) -> InProcess {
        let board = board.map(|b| mcp_edge::config::Board::named(b).unwrap());
        let config = mcp_edge::config::Config::load_for(cfg, board.as_ref()).unwrap();
        InProcess::serve(Gateway::start(config).await.unwrap(), cfg)
    }

    /// Serves `gw` (started by the caller, on any config); reloads re-read `cfg`.
    pub fn serve(gw: Gateway, cfg: &std::path::Path) -> InProcess {
        let (app, addr) = (gw.app().clone(), gw.local_addr());
        let (controls, rx) = tokio::sync::mpsc::channel(4);
        let cfg = cfg.to_path_buf();
        let served = tokio::spawn(async move { gw.serve(Some(&cfg), rx).await });
        InProcess {
            app,
            addr,
            controls,
            served,
        }
    }

    /// Waits (up to 30 s) until `/readyz` would say ready.
    pub async fn wait_ready(&self) {
        let ready = || self.app.is_ready();
        eventually_sync("the gateway ready", Duration::from_secs(30), ready).await
    }

    /// Asks for a reload and returns the report it left for `/status`.
    pub async fn reload(&self) -> String {
        let before = self.last_reload();
        self.controls.send(Control::Reload).await.unwrap();
        let report = eventually_sync("a new reload report", Duration::from_secs(60), || {
            Some(self.last_reload()).filter(|now| *now != before)
        })
        .await;
        report.expect("a reload report").message
    }

    /// What the last reload left for `/status`.
    pub fn last_reload(&self) -> Option<mcp_edge::downstream::LastReload> {
        self.app.last_reload()
    }

    /// Stops it as `SIGTERM` would, waiting (up to 30 s) for the end; a
    /// second stop cuts the drain short (`server.drain_grace`), as a second
    /// `SIGTERM` does (both are ignored by a gateway already past them).
    pub async fn stop(self) {
        let _ = self.controls.send(Control::Stop).await;
        let _ = self.controls.send(Control::Stop).await;
        tokio::time::timeout(Duration::from_secs(30), self.served)
            .await
            .expect("serve ends on Control::Stop")
            .unwrap();
    }
}
