//! A forge call of a pass: traced in its own span and bounded by the context's deadline.

use std::future::Future;

use tracing::Instrument;

use std::time::Duration;

use super::error::ReconcileError;
use super::spans::forge_call;
use crate::forge::{ForgeError, GroupContext};

/// Runs the forge call `call` of `group`, giving up after `after` (a pass uses
/// [`super::context::Context::forge_deadline`]) with
/// [`ReconcileError::ForgeTimeout`]. Dropping a call part way is safe for every call a pass
/// makes: listings only read, and a registration or removal cut short is found again by the
/// next pass (a registration without its Job is a stray the forge's listing reports).
pub async fn bounded<T>(
    after: Duration,
    call: &'static str,
    group: &GroupContext,
    fut: impl Future<Output = Result<T, ForgeError>>,
) -> Result<T, ReconcileError> {
    match tokio::time::timeout(after, fut.instrument(forge_call(call, group))).await {
        Ok(result) => result.map_err(ReconcileError::from),
        Err(_) => Err(ReconcileError::ForgeTimeout { call, after }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ForgeKind;
    use crate::error::ErrorCategory;
    use crate::forge::{Credentials, GroupKey};
    use crate::testing::RunnerGroupBuilder;

    fn group() -> GroupContext {
        GroupContext {
            key: GroupKey {
                namespace: "ns".into(),
                name: "g".into(),
            },
            uid: "uid".into(),
            group: RunnerGroupBuilder::new(ForgeKind::Gitea).build(),
            credentials: Credentials::default(),
            ca_bundle: None,
            webhook_secret: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_ends_at_the_deadline() {
        let after = Duration::from_secs(60);
        let never = std::future::pending::<Result<(), ForgeError>>();
        let err = bounded(after, "observe", &group(), never)
            .await
            .expect_err("gave up");
        assert_eq!(err.category(), ErrorCategory::ForgeTimeout);
        let text = err.to_string();
        assert!(text.contains("observe") && text.contains("60s"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn answers_and_errors_within_the_deadline_pass_through() {
        let after = Duration::from_secs(60);
        let ok = bounded(after, "observe", &group(), async { Ok::<_, ForgeError>(7) }).await;
        assert_eq!(ok.ok(), Some(7));
        let failed = async { Err::<(), _>(ForgeError::Unavailable("503".into())) };
        let err = bounded(after, "observe", &group(), failed)
            .await
            .expect_err("failed");
        assert_eq!(err.category(), ErrorCategory::ForgeUnavailable);
    }
}
