//! Logging setup: text or JSON lines on stdout, filtered by `RUST_LOG` or the configured level.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global tracing subscriber. `RUST_LOG`, when set, wins over `level` so that a
/// person debugging can raise verbosity without touching the deployment's config.
pub fn init(format: LogFormat, level: &str) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info")));
    // Colours only for a person at a terminal, never in collected pod logs.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_ansi(std::io::stdout().is_terminal());
    // A second init (tests that call run twice) is harmless: the first subscriber stays.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
