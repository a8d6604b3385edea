//! The group's view at GitHub ([`forgerunner_core::forge::ForgeSession::snapshot`]): demand
//! from each scale set's statistics, and each runner's state from what its listener's messages
//! told, without a request per runner.

use std::collections::BTreeMap;

use forgerunner_core::forge::{ForgeFacts, ForgeRunnerState, ForgeView, GroupContext, RunnerRef, WaitingJob};
use forgerunner_core::runner_job::BUSY_ANNOTATION;
use forgerunner_core::runner_version::RunnerVersions;

use super::classes;
use super::session::GithubSession;
use crate::error::ApiError;
use crate::listener::Listener;
use crate::runner_downloads::served_release_of;
use crate::{RUNNER_ID_ANNOTATION, SCALE_SET_ID_ANNOTATION, scale_set};

impl GithubSession {
    /// The forge's view of the group and of `runners`.
    pub(super) async fn view(
        &self,
        ctx: &GroupContext,
        runners: &[RunnerRef],
    ) -> Result<ForgeView, ApiError> {
        let entry = self.forge.entry(&ctx.key);
        let mut st = entry.lock().await;
        let (client, id) = self.forge.ensure(ctx, &mut st).await?;
        self.forge.ensure_listener(ctx, &mut st, &client, id);
        self.forge.ensure_classes(ctx, &mut st, &client, runners).await?;
        // Each scale set of the group (its own first, then its classes') with what its
        // listener knows. Statistics and runner activity of one message batch are recorded
        // together.
        let mut sets: Vec<SetReading> = vec![SetReading {
            id,
            labels: Vec::new(),
            state: st.listener.as_ref().map(Listener::state).unwrap_or_default(),
        }];
        for class in &ctx.group.spec.classes {
            let Some(set) = st.classes.get(&class.name) else {
                continue;
            };
            let Some(info) = &set.scale_set else {
                continue;
            };
            sets.push(SetReading {
                id: info.id,
                labels: classes::reported_labels(class),
                state: set.listener.as_ref().map(Listener::state).unwrap_or_default(),
            });
        }
        let mut waiting_jobs = 0u32;
        let mut complete = true;
        for set in &sets {
            // Without a session (opening, or waiting out a 409 after a crash) there are no
            // messages naming busy or finished runners: fall back to the scale set's
            // statistics. A poll that keeps failing makes the session's statistics stale:
            // still the best demand there is, but no view to scale down on.
            let (stats, set_complete) = match set.state.statistics {
                Some(s) => statistics_basis(Some(s), set.state.last_error.is_some(), None),
                None => match scale_set::get(&client, set.id).await? {
                    Some(found) => statistics_basis(None, false, found.statistics),
                    None => {
                        // Deleted between ensure and now: recreated on the next call.
                        st.forget_set(set.id);
                        return Err(not_ready());
                    }
                },
            };
            // Assigned counts running jobs too; both numbers come from one snapshot, so a job
            // whose runner finished before `JobCompleted` arrived still counts as running,
            // never as waiting: no ledger of finished runners is needed.
            waiting_jobs = waiting_jobs
                .saturating_add(stats.total_assigned_jobs.saturating_sub(stats.total_running_jobs));
            complete &= set_complete;
        }
        // With the sets of removed classes whose runners are still around: those may be at
        // work, and are not runners of a set made again.
        let ids = st.set_ids();
        let tracked = |name: &str| sets.iter().find_map(|s| s.state.runners.state_of(name));
        // No request per runner: the message streams say who is busy or finished, and a runner
        // with a JIT config is registered (removal treats 404 as already gone).
        let states = runners
            .iter()
            .filter_map(|r| {
                let state = tracked(&r.name).or_else(|| {
                    if registered_in_another_scale_set(r, &ids) {
                        // The scale set was deleted and made again: the runner cannot take
                        // this set's jobs, so it covers no demand and goes first.
                        return Some(ForgeRunnerState::Offline);
                    }
                    r.annotations
                        .contains_key(RUNNER_ID_ANNOTATION)
                        .then_some(ForgeRunnerState::Idle)
                })?;
                Some((r.name.clone(), state))
            })
            .collect();
        let job_identities = runners
            .iter()
            .filter_map(|r| {
                let identity = sets.iter().find_map(|s| s.state.runners.identity_of(&r.name))?;
                Some((r.name.clone(), identity.clone()))
            })
            .collect();
        // An adopted runner shown idle may be working: scaling down on such a view could remove
        // a runner made for a waiting job and make another later. Until the adopted runners
        // are gone or marked busy, surplus runners leave through the idle timeout.
        let complete = complete && !runners.iter().any(|r| activity_unknown(r, tracked(&r.name)));
        // GitHub's runner APIs carry no runner version: the image is all there is to compare.
        let versions = RunnerVersions {
            image: Some(crate::runner_version::image_release(&ctx.group.spec)),
            served: served_release_of(&self.forge.served, &client, &ctx.key),
            reported: BTreeMap::new(),
        };
        Ok(ForgeView {
            waiting_jobs,
            // Job requests the messages show assigned and not started, with `JobAssigned`'s
            // queue time for the "queued → seen" stage. The set a job was assigned to is its
            // class: its labels make core's choice give its runner that class.
            waiting: sets
                .iter()
                .flat_map(|set| {
                    set.state
                        .runners
                        .waiting_requests()
                        .map(|(key, queued_at)| WaitingJob {
                            id: key.to_string(),
                            queued_at,
                            labels: set.labels.clone(),
                            binding: None,
                        })
                })
                .collect(),
            runners: states,
            // The Actions service drops offline ephemeral runners itself; nothing to report.
            listed_rows: None,
            complete,
            facts: ForgeFacts {
                scale_set_id: Some(id),
                forge_version: None,
            },
            job_identities,
            budget: client.budget(),
            stranded: Default::default(),
            // One statistics message is one consistent snapshot: nothing to net.
            listed_at: None,
            accounted: Default::default(),
            takes_by_success_only: false,
            // Scale sets match by name: a job for no scale set never reaches a listener.
            unmatched: Vec::new(),
            versions,
        })
    }
}

/// Whether the messages may not have told what `r` is doing: an active runner this session
/// did not register (it adopted it after a restart or a new leadership term), that no message
/// named and that was never marked busy. Its job may have started before this session.
fn activity_unknown(r: &RunnerRef, tracked: Option<ForgeRunnerState>) -> bool {
    r.phase.is_active()
        && tracked.is_none()
        && !r.registered_here()
        && r.annotations.get(BUSY_ANNOTATION).map(String::as_str) != Some("true")
}

/// The statistics to plan on, and whether the view is complete enough to scale down on: the
/// session's while its polls succeed; stale ones while they fail (still the best demand there
/// is, but runners may have taken jobs unseen); without a session the scale set's, never
/// complete. `statistics` is `omitempty` on the scale set (actions/scaleset `types.go`,
/// `RunnerScaleSet`) and no upstream client reads it from there: when it is absent the pass
/// still runs (cleanup, status) on no known demand, and scales nothing down.
fn statistics_basis(
    session: Option<crate::types::Statistics>,
    polls_failing: bool,
    scale_set: Option<crate::types::Statistics>,
) -> (crate::types::Statistics, bool) {
    match session {
        Some(s) => (s, !polls_failing),
        None => (scale_set.unwrap_or_default(), false),
    }
}

/// Whether the runner's Job says it was registered in a scale set other than the group's
/// `current` ones (one deleted since, then made again under the same name).
fn registered_in_another_scale_set(r: &RunnerRef, current: &[i64]) -> bool {
    r.annotations
        .get(SCALE_SET_ID_ANNOTATION)
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|set| !current.contains(&set))
}

/// One scale set of a group in a pass: its id, the labels its waiting jobs are reported with
/// (none for the group's own set) and what its listener knows.
struct SetReading {
    id: i64,
    labels: Vec<String>,
    state: crate::listener::ListenerState,
}

fn not_ready() -> ApiError {
    ApiError::NotReady("the scale set has not reported statistics yet".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// D5/D6 of the GitHub findings: a scale set without `statistics` (it is `omitempty`)
    /// must not fail the pass, and statistics of a session whose polls fail are no ground to
    /// scale down on.
    #[test]
    fn the_view_is_complete_only_on_a_healthy_sessions_statistics() {
        let stats = crate::types::Statistics {
            total_assigned_jobs: 3,
            ..Default::default()
        };
        assert_eq!(statistics_basis(Some(stats), false, None), (stats, true));
        assert_eq!(statistics_basis(Some(stats), true, None), (stats, false));
        assert_eq!(statistics_basis(None, false, Some(stats)), (stats, false));
        assert_eq!(
            statistics_basis(None, false, None),
            (crate::types::Statistics::default(), false),
            "no statistics on the scale set: no known demand, no error"
        );
    }

    #[test]
    fn a_runner_of_a_scale_set_made_again_is_not_supply() {
        let runner = |set: Option<&str>| RunnerRef {
            name: "r".into(),
            annotations: set
                .map(|v| BTreeMap::from([(SCALE_SET_ID_ANNOTATION.to_owned(), v.to_owned())]))
                .unwrap_or_default(),
            phase: forgerunner_core::plan::RunnerPhase::Running,
            stored: true,
            registered_at: None,
            connected_since: None,
        };
        assert!(registered_in_another_scale_set(&runner(Some("7")), &[8]));
        assert!(!registered_in_another_scale_set(&runner(Some("8")), &[8]));
        assert!(
            !registered_in_another_scale_set(&runner(Some("9")), &[8, 9]),
            "a runner of a class's scale set is supply"
        );
        assert!(
            !registered_in_another_scale_set(&runner(None), &[8]),
            "older Jobs without the id are left alone"
        );
        assert!(!registered_in_another_scale_set(&runner(Some("x")), &[8]));
    }
}
