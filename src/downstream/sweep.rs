//! The one timer of the downstream tables (a task of the composition root).

use super::app::App;
use super::rounds;
use std::sync::Arc;
use tokio::sync::watch;

/// One timer for the whole table: removes idle sessions every
/// `min(idle_timeout / 4, 60 s, 10 s)` (lookups also expire lazily), and
/// parked calls whose time is up ([`rounds::expire`]) and call streams
/// not resumed in time or of ended sessions ([`super::resume`]); expires tasks and
/// cancels the abandoned ones ([`crate::router::Router::cancel_orphans`]). A task of the
/// composition root.
pub async fn sweep_sessions(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let period = (app.server.session_idle_timeout / 4)
        .min(crate::limits::SESSION_SWEEP_MAX_PERIOD)
        .min(crate::limits::PARKED_SWEEP_PERIOD);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.changed() => return,
        }
        // Idle sessions end (with everything they held); expired tasks
        // go, and tasks abandoned by their callers are cancelled upstream.
        app.sessions.sweep();
        let now = tokio::time::Instant::now();
        drop(app.resumes.sweep(now, |id| app.sessions.is_live(id)));
        app.router.tasks().expire(tokio::time::Instant::now());
        app.router.cancel_orphans().await;
        rounds::expire(&app, tokio::time::Instant::now()).await;
    }
}
