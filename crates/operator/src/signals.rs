//! SIGTERM/SIGINT → cancel the process-wide shutdown token.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Installs the handlers (errors here are reported before any work starts) and cancels
/// `shutdown` on the first signal.
pub fn spawn(shutdown: CancellationToken) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            _ = shutdown.cancelled() => return,
        };
        tracing::info!(signal = name, "shutting down");
        shutdown.cancel();
    });
    Ok(())
}
