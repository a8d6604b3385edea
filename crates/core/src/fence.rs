//! The leader's fence: until when this replica may write.
//!
//! A leader renews its Lease in the background; if renewing fails, a standby may take over once
//! the lease expires. Everything that writes (the Kubernetes client, forge calls, the GitHub
//! listener) checks one shared [`Fence`] first, so a deposed leader stops writing at its renew
//! deadline, before any standby can lead, even when its own tasks are slow to notice.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

/// Why a write was refused: this replica does not hold the leader lease (any longer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("this replica does not hold the leader lease (fenced); refusing to write")]
pub struct Fenced;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// Leader election is off: this replica always leads.
    Always,
    /// Held until this instant (exclusive).
    Until(Instant),
    /// Not held.
    Never,
}

/// A shared, cheap to clone handle on "may this replica write now?".
#[derive(Clone, Debug)]
pub struct Fence {
    // A watch channel rather than a plain lock: waiters in `lapsed` learn of revocations and
    // extensions without polling.
    state: Arc<watch::Sender<Hold>>,
}

impl Default for Fence {
    /// An open fence: without leader election there is no one to fence against.
    fn default() -> Self {
        Fence::open()
    }
}

impl Fence {
    fn with(hold: Hold) -> Fence {
        Fence {
            state: Arc::new(watch::Sender::new(hold)),
        }
    }

    /// Always held: for a replica that leads without an election.
    pub fn open() -> Fence {
        Fence::with(Hold::Always)
    }

    /// Not held until [`Fence::hold_until`] is called (by the lease elector).
    pub fn closed() -> Fence {
        Fence::with(Hold::Never)
    }

    /// Holds the fence until `until` (a successful lease write moved the deadline); no effect on
    /// an open fence.
    pub fn hold_until(&self, until: Instant) {
        self.state.send_if_modified(|h| match h {
            Hold::Always => false,
            _ => {
                *h = Hold::Until(until);
                true
            }
        });
    }

    /// Stops holding at once (stepping down, releasing); no effect on an open fence.
    pub fn revoke(&self) {
        self.state.send_if_modified(|h| match h {
            Hold::Always | Hold::Never => false,
            Hold::Until(_) => {
                *h = Hold::Never;
                true
            }
        });
    }

    /// Whether this replica may write at `now`.
    pub fn is_held_at(&self, now: Instant) -> bool {
        match *self.state.borrow() {
            Hold::Always => true,
            Hold::Until(t) => now < t,
            Hold::Never => false,
        }
    }

    /// Whether this replica may write now.
    pub fn is_held(&self) -> bool {
        self.is_held_at(Instant::now())
    }

    /// `Ok` while held; the error to return from a write path otherwise.
    pub fn check(&self) -> Result<(), Fenced> {
        if self.is_held() { Ok(()) } else { Err(Fenced) }
    }

    /// Resolves once the fence is not held (at once if it is not held now). Never resolves for
    /// an open fence.
    pub async fn lapsed(&self) {
        let mut rx = self.state.subscribe();
        loop {
            let hold = *rx.borrow_and_update();
            match hold {
                Hold::Never => return,
                Hold::Until(t) if t <= Instant::now() => return,
                Hold::Until(t) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(t) => {}
                        // The sender lives in `self`, so the channel cannot close while we wait.
                        _ = rx.changed() => {}
                    }
                }
                Hold::Always => {
                    if rx.changed().await.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_open_fence_is_always_held() {
        let f = Fence::open();
        f.revoke();
        f.hold_until(Instant::now());
        assert!(f.is_held());
        assert!(f.check().is_ok());
    }

    #[test]
    fn a_closed_fence_is_held_only_until_its_deadline() {
        let f = Fence::closed();
        assert!(!f.is_held());
        assert_eq!(f.check(), Err(Fenced));
        let now = Instant::now();
        let until = now + Duration::from_secs(10);
        f.hold_until(until);
        assert!(f.is_held_at(now));
        assert!(f.is_held_at(until - Duration::from_millis(1)));
        assert!(!f.is_held_at(until), "the deadline itself is not held");
        let clone = f.clone();
        clone.revoke();
        assert!(!f.is_held_at(now), "clones share one state");
    }

    #[tokio::test(start_paused = true)]
    async fn lapsed_resolves_at_the_deadline_or_on_revoke() {
        let f = Fence::closed();
        f.hold_until(Instant::now() + Duration::from_secs(5));
        let start = Instant::now();
        f.lapsed().await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));

        f.hold_until(Instant::now() + Duration::from_secs(60));
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move { f.lapsed().await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished());
        f.revoke();
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("revoking wakes the waiter")
            .expect("waiter");
    }

    #[tokio::test(start_paused = true)]
    async fn an_extension_moves_the_lapse() {
        let f = Fence::closed();
        f.hold_until(Instant::now() + Duration::from_secs(2));
        let start = Instant::now();
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move { f.lapsed().await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        f.hold_until(Instant::now() + Duration::from_secs(4));
        waiter.await.expect("waiter");
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
