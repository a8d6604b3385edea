//! Readiness of the process, as `/readyz` reports it.
//!
//! A leader is ready once its controller's caches have synced; a standby is ready as soon as it
//! campaigns, because it is healthy and able to take over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Shared readiness flags.
#[derive(Debug, Default)]
pub struct Readiness {
    standby: AtomicBool,
    synced: Arc<AtomicBool>,
}

impl Readiness {
    /// Not ready: start-up has not reached the campaign yet.
    pub fn new() -> Self {
        Readiness::default()
    }

    /// We campaign for (or wait on) the lease.
    pub fn standby(&self) {
        self.synced.store(false, Ordering::SeqCst);
        self.standby.store(true, Ordering::SeqCst);
    }

    /// We lead; returns the flag the controller sets once its caches have synced.
    pub fn leading(&self) -> Arc<AtomicBool> {
        self.synced.store(false, Ordering::SeqCst);
        self.standby.store(false, Ordering::SeqCst);
        self.synced.clone()
    }

    /// Shutting down: stop receiving traffic.
    pub fn stopping(&self) {
        self.standby.store(false, Ordering::SeqCst);
        self.synced.store(false, Ordering::SeqCst);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.standby.load(Ordering::SeqCst) || self.synced.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_leadership_cycle() {
        let r = Readiness::new();
        assert!(!r.is_ready(), "not ready before campaigning");
        r.standby();
        assert!(r.is_ready(), "a standby is ready");
        let synced = r.leading();
        assert!(!r.is_ready(), "a new leader waits for its caches");
        synced.store(true, Ordering::SeqCst);
        assert!(r.is_ready());
        r.standby();
        assert!(r.is_ready());
        assert!(!synced.load(Ordering::SeqCst), "the old term's flag is reset");
        r.stopping();
        assert!(!r.is_ready());
    }
}
