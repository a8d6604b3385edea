//! Tunables of the GitHub backend.

use std::time::Duration;

use forgerunner_core::Fence;

use crate::backoff::Backoff;
use crate::client::HttpOptions;

/// Tunables of the GitHub backend; the defaults suit production.
#[derive(Clone, Debug)]
pub struct GithubOptions {
    /// HTTP timeouts and request retries.
    pub http: HttpOptions,
    /// Listener backoff after errors.
    pub listener_backoff: Backoff,
    /// Listener backoff while another session holds the scale set (409).
    pub conflict_backoff: Backoff,
    /// Bound on deleting a session at shutdown.
    pub shutdown_timeout: Duration,
    /// Session owner name: env `POD_NAME`, else `HOSTNAME`, else `forgerunner`.
    pub owner_name: String,
    /// The leader's fence: no listener starts, opens a session or takes a job while it is not
    /// held. Open by default (no leader election).
    pub fence: Fence,
}

impl Default for GithubOptions {
    fn default() -> Self {
        let owner_name = ["POD_NAME", "HOSTNAME"]
            .iter()
            .filter_map(|k| std::env::var(k).ok())
            .find(|v| !v.trim().is_empty())
            .unwrap_or_else(|| "forgerunner".into());
        GithubOptions {
            http: HttpOptions::default(),
            listener_backoff: Backoff {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(60),
            },
            conflict_backoff: Backoff {
                base: Duration::from_secs(30),
                cap: Duration::from_secs(60),
            },
            shutdown_timeout: Duration::from_secs(10),
            owner_name,
            fence: Fence::open(),
        }
    }
}
