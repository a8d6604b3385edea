//! The Forgejo runner id recorded on a runner's Job (15+), for deletion after a restart.
//!
//! Everything else Forgejo's view needs over time is core's: when this session registered each
//! runner (`RunnerRef::registered_at`), since when the forge has shown it connected
//! (`RunnerRef::connected_since`), which job each new runner is bound to and which listed jobs
//! need no new runner (`forgerunner_core::reconcile::ledger::Reservations`), and which offline
//! rows are ghosts (`forgerunner_core::reconcile::ledger::OfflineRows`).

use forgerunner_core::forge::RunnerRef;

/// Job annotation: the Forgejo runner id (v15), for deletion after a restart.
pub const RUNNER_ID_ANNOTATION: &str = "forgerunner.dev/forgejo-runner-id";

/// The runner id recorded on a runner's Job, if any.
pub fn of(r: &RunnerRef) -> Option<i64> {
    r.annotations
        .get(RUNNER_ID_ANNOTATION)
        .and_then(|v| v.trim().parse().ok())
}
