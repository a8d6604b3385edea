//! State shared by the HTTP handlers and the in-process handle.

use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::faults::{Faults, RequestLog};
use super::store::{Store, StoreConfig};

/// Tunables of a fake API server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Watch history and fan-out sizing.
    pub store: StoreConfig,
    /// How often watches with allowWatchBookmarks get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Server-initiated disconnect of every watch after this long (None: only timeoutSeconds).
    pub watch_max_duration: Option<Duration>,
    /// Whether to keep a record of every request (counts stay available either way).
    pub log_requests: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            store: StoreConfig::default(),
            bookmark_interval: Duration::from_secs(5),
            watch_max_duration: None,
            log_requests: true,
        }
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Everything a request handler needs.
pub struct Shared {
    /// The cluster state.
    pub store: Mutex<Store>,
    /// The request log.
    pub log: Mutex<RequestLog>,
    /// Active faults.
    pub faults: Mutex<Faults>,
    /// Tunables.
    pub config: ServerConfig,
    /// Cancelled when the server stops.
    pub shutdown: CancellationToken,
    /// Cancelled (and replaced) to drop every open watch.
    pub drop_all: Mutex<CancellationToken>,
    /// The listening address.
    pub addr: SocketAddr,
}
