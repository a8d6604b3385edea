//! Pure status building: conditions for success and failure, counts, facts.

use crate::schedule::ScheduleStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::conditions::{
    ConditionReason, ConditionStatus, ConditionType, GroupCondition, find, merge_conditions,
};
use crate::crd::RunnerGroupStatus;
use crate::error::ErrorCategory;
use crate::forge::ForgeFacts;
use crate::plan::{FAILURE_THROTTLE_THRESHOLD, ObservedRunner, RunnerCounts, RunnerPhase};
use crate::startup::StartupFailure;

/// What one successful pass did, as far as the status cares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassSummary {
    /// Counts from the plan.
    pub counts: RunnerCounts,
    /// Forge facts from the demand.
    pub facts: ForgeFacts,
    /// Consecutive runner failures after this pass.
    pub failed_runners: u32,
    /// Runner Jobs created in this pass.
    pub created: u32,
    /// Active runners removed in this pass (idle timeout, scale-down).
    pub scaled_down: u32,
    /// The plan held creation back because runners keep failing.
    pub throttled: bool,
    /// Demand asks for more than `maxRunners`.
    pub at_max: bool,
    /// The first step of the apply that failed, if any (the rest still ran).
    pub apply_error: Option<(ErrorCategory, String)>,
    /// A failed runner exited as outdated, and since then no runner finished well and the spec
    /// did not change.
    pub runner_outdated: bool,
    /// Runners did not start: the cause and Kubernetes' message, from this pass or carried
    /// over until a runner starts or the spec changes ([`startup_failure_persists`]).
    pub startup_failure: Option<(StartupFailure, String)>,
    /// Runner Jobs this pass counted as failed (the failure time moves on).
    pub failed_now: u32,
    /// A runner out of time to start that is kept because a waiting job needs it: the cause
    /// and Kubernetes' message ([`crate::plan::Plan::waiting_out`]).
    pub waiting_out: Option<(StartupFailure, String)>,
    /// Where the group's schedules stand and the limits they set (`None` without schedules).
    pub schedule: Option<ScheduleStatus>,
    /// The group's shared cache as the pass kept it (`None` without `spec.cache`).
    pub cache: Option<crate::cache_server::CacheStatus>,
    /// The runners of each class of `spec.classes` ([`super::classes::class_statuses`]).
    pub classes: Vec<crate::crd::ClassStatus>,
}

/// What `Degraded` says while runners exit as outdated.
pub const RUNNER_OUTDATED_MESSAGE: &str = "a runner exited because its version is too old for the forge; \
update spec.image (or the image of the runner container in spec.template) to a current runner release";

fn c(t: ConditionType, s: ConditionStatus, r: ConditionReason, m: impl Into<String>) -> GroupCondition {
    GroupCondition::new(t, s, r, m)
}

/// The five conditions after a pass that reached the forge.
pub fn success_conditions(p: &PassSummary) -> Vec<GroupCondition> {
    use ConditionStatus::True;
    let counts = &p.counts;
    let ready_msg = format!(
        "{} runners ({} busy, {} idle), {} jobs waiting, {} desired",
        counts.current, counts.running_jobs, counts.idle, counts.pending_jobs, counts.desired
    );
    vec![
        c(ConditionType::Ready, True, ConditionReason::Reconciled, ready_msg),
        c(
            ConditionType::ForgeConnected,
            True,
            ConditionReason::Connected,
            "forge answered",
        ),
        c(
            ConditionType::CredentialsValid,
            True,
            ConditionReason::CredentialsAccepted,
            "credentials accepted",
        ),
        scaling_condition(p),
        degraded_condition(p),
    ]
}

/// `Scaling` after a pass: what it created or removed, or why it did neither.
fn scaling_condition(p: &PassSummary) -> GroupCondition {
    use ConditionStatus::{False, True};
    if p.created > 0 {
        c(
            ConditionType::Scaling,
            True,
            ConditionReason::ScalingUp,
            format!("creating {} runners", p.created),
        )
    } else if p.scaled_down > 0 {
        c(
            ConditionType::Scaling,
            True,
            ConditionReason::ScalingDown,
            format!("removing {} idle runners", p.scaled_down),
        )
    } else if p.at_max {
        c(
            ConditionType::Scaling,
            False,
            ConditionReason::AtMaxRunners,
            "demand exceeds spec.maxRunners",
        )
    } else {
        c(
            ConditionType::Scaling,
            False,
            ConditionReason::Steady,
            "runner count matches demand",
        )
    }
}

/// `Degraded` after a pass: the most pressing of what goes wrong, or healthy.
fn degraded_condition(p: &PassSummary) -> GroupCondition {
    use ConditionStatus::{False, True};
    if let Some((cat, msg)) = &p.apply_error {
        c(
            ConditionType::Degraded,
            True,
            ConditionReason::Error(*cat),
            msg.clone(),
        )
    } else if p.runner_outdated {
        c(
            ConditionType::Degraded,
            True,
            ConditionReason::RunnerOutdated,
            RUNNER_OUTDATED_MESSAGE,
        )
    } else if let Some((cause, msg)) = &p.startup_failure {
        c(
            ConditionType::Degraded,
            True,
            ConditionReason::Startup(*cause),
            format!(
                "runners do not start ({} failed in a row; creation backs off): {}; last: {msg}",
                p.failed_runners,
                cause.hint()
            ),
        )
    } else if let Some((cause, msg)) = &p.waiting_out {
        c(
            ConditionType::Degraded,
            True,
            ConditionReason::Startup(*cause),
            format!(
                "a runner a job waits for has not started within startupTimeoutSeconds; it is kept while the \
                 job waits (a node may still be added): {}; last: {msg}",
                cause.hint()
            ),
        )
    } else if p.throttled || p.failed_runners >= FAILURE_THROTTLE_THRESHOLD {
        c(
            ConditionType::Degraded,
            True,
            ConditionReason::RunnersFailing,
            format!(
                "{} runners failed in a row; creating one at a time until one succeeds (check the runner pods' logs)",
                p.failed_runners
            ),
        )
    } else {
        c(
            ConditionType::Degraded,
            False,
            ConditionReason::Healthy,
            "no failures",
        )
    }
}

/// The conditions a failed pass knows about; the others keep their old values.
pub fn error_conditions(category: ErrorCategory, message: &str) -> Vec<GroupCondition> {
    use ConditionStatus::False;
    let reason = ConditionReason::Error(category);
    let mut out = vec![c(ConditionType::Ready, False, reason, message)];
    match category {
        ErrorCategory::SecretNotFound | ErrorCategory::InvalidCredentials => {
            out.push(c(ConditionType::CredentialsValid, False, reason, message));
        }
        ErrorCategory::Unauthorized => {
            out.push(c(ConditionType::CredentialsValid, False, reason, message));
            // The forge answered, it just said no.
            out.push(c(
                ConditionType::ForgeConnected,
                ConditionStatus::True,
                ConditionReason::Connected,
                "forge answered",
            ));
        }
        ErrorCategory::ForgeNotFound
        | ErrorCategory::ForgeConfig
        | ErrorCategory::RateLimited
        | ErrorCategory::ForgeUnavailable
        | ErrorCategory::ForgeNotReady
        | ErrorCategory::ForgeTimeout => {
            out.push(c(ConditionType::ForgeConnected, False, reason, message));
        }
        ErrorCategory::InvalidSpec
        | ErrorCategory::ForgeDisabled
        | ErrorCategory::ForgeHostNotAllowed
        | ErrorCategory::Kubernetes
        | ErrorCategory::RunnerRbacConflict
        | ErrorCategory::RunnerHooksDisabled
        | ErrorCategory::CacheConflict => {}
    }
    out
}

/// The new status: `prev` with counts and facts from `pass` (when the pass got that far), merged
/// conditions, and the generation they describe.
pub fn build_status(
    prev: Option<&RunnerGroupStatus>,
    generation: Option<i64>,
    conditions: &[GroupCondition],
    pass: Option<&PassSummary>,
    now: &Time,
) -> RunnerGroupStatus {
    let mut st = prev.cloned().unwrap_or_default();
    let old: Vec<Condition> = st.conditions.clone();
    let fresh: Vec<Condition> = conditions
        .iter()
        .map(|g| g.to_condition(generation, now))
        .collect();
    st.conditions = merge_conditions(&old, fresh, now);
    st.observed_generation = generation;
    if let Some(p) = pass {
        st.desired_runners = p.counts.desired;
        st.current_runners = p.counts.current;
        st.idle_runners = p.counts.idle.saturating_sub(p.counts.pending_runners);
        st.pending_runners = p.counts.pending_runners;
        st.running_jobs = p.counts.running_jobs;
        st.busy_runners = p.counts.running_jobs;
        st.pending_jobs = p.counts.pending_jobs;
        st.failed_runners = p.failed_runners;
        if p.failed_now > 0 {
            st.last_runner_failure_time = Some(now.clone());
        }
        if let Some((_, msg)) = p.startup_failure.as_ref().or(p.waiting_out.as_ref()) {
            st.last_runner_failure_message = Some(msg.clone());
        }
        st.last_poll_time = Some(now.clone());
        if p.facts.scale_set_id.is_some() {
            st.scale_set_id = p.facts.scale_set_id;
        }
        if p.facts.forge_version.is_some() {
            st.forge_version = p.facts.forge_version.clone();
        }
        st.schedule = p.schedule.clone();
        st.cache = p.cache.clone();
        st.classes.clone_from(&p.classes);
    }
    st
}

/// Whether `Degraded=RunnerOutdated` still holds after a pass: it was reported for the current
/// generation (a spec change, such as a new image, clears it) and no runner finished well since.
/// Kept in the status rather than in memory so that it survives operator restarts.
pub fn outdated_persists(prev: Option<&RunnerGroupStatus>, generation: Option<i64>, succeeded: u32) -> bool {
    let Some(d) = prev.and_then(|s| find(&s.conditions, ConditionType::Degraded)) else {
        return false;
    };
    succeeded == 0
        && d.status == ConditionStatus::True.as_str()
        && d.reason == ConditionReason::RunnerOutdated.as_str()
        && d.observed_generation == generation
}

/// The startup failure `Degraded` reported for the current generation, while the group has not
/// recovered since: kept so the condition does not flap to another reason (or to healthy)
/// between two failed attempts.
///
/// `recovered_since(t)` says whether the group recovered after `t`, the last runner failure
/// (or, without one recorded, when `Degraded` turned true): a runner created since then started,
/// or a runner finished well. A runner that was already running before the failure is no sign
/// of recovery: under a pod quota of one, the admitted runner runs while every other is refused.
pub fn startup_failure_persists(
    prev: Option<&RunnerGroupStatus>,
    generation: Option<i64>,
    recovered_since: impl FnOnce(jiff::Timestamp) -> bool,
) -> Option<(StartupFailure, String)> {
    let st = prev?;
    let d = find(&st.conditions, ConditionType::Degraded)?;
    if d.status != ConditionStatus::True.as_str() || d.observed_generation != generation {
        return None;
    }
    let cause = StartupFailure::parse(&d.reason)?;
    let since = st
        .last_runner_failure_time
        .as_ref()
        .unwrap_or(&d.last_transition_time);
    if recovered_since(since.0) {
        return None;
    }
    Some((cause, st.last_runner_failure_message.clone().unwrap_or_default()))
}

/// Whether one of `runners` created at or after `since` has started (runs or finished well).
/// Creation timestamps have whole seconds, so a runner created in the second of `since` counts.
pub fn runner_started_since(
    runners: &[ObservedRunner],
    since: jiff::Timestamp,
    now: jiff::Timestamp,
) -> bool {
    runners.iter().any(|r| {
        let created = now
            .as_second()
            .saturating_sub(i64::try_from(r.age_seconds).unwrap_or(i64::MAX));
        matches!(r.phase, RunnerPhase::Running | RunnerPhase::Succeeded) && created >= since.as_second()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Time {
        Time(jiff::Timestamp::from_second(s).expect("valid timestamp"))
    }

    #[test]
    fn success_status_has_counts_and_ready() {
        let pass = PassSummary {
            counts: RunnerCounts {
                desired: 3,
                current: 3,
                idle: 1,
                running_jobs: 2,
                pending_jobs: 0,
                failed: 0,
                pending_runners: 0,
            },
            facts: ForgeFacts {
                scale_set_id: Some(7),
                forge_version: None,
            },
            created: 3,
            ..PassSummary::default()
        };
        let st = build_status(None, Some(4), &success_conditions(&pass), Some(&pass), &t(100));
        assert_eq!(
            (
                st.desired_runners,
                st.current_runners,
                st.idle_runners,
                st.running_jobs
            ),
            (3, 3, 1, 2)
        );
        assert_eq!(st.observed_generation, Some(4));
        assert_eq!(st.scale_set_id, Some(7));
        assert_eq!(st.last_poll_time, Some(t(100)));
        let ready = find(&st.conditions, ConditionType::Ready).expect("ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Reconciled")
        );
        let scaling = find(&st.conditions, ConditionType::Scaling).expect("scaling");
        assert_eq!(scaling.reason, "ScalingUp");
        assert_eq!(st.conditions.len(), 5);
    }

    #[test]
    fn error_status_keeps_counts_and_other_conditions() {
        let pass = PassSummary {
            counts: RunnerCounts {
                current: 2,
                ..RunnerCounts::default()
            },
            ..PassSummary::default()
        };
        let ok = build_status(None, Some(1), &success_conditions(&pass), Some(&pass), &t(100));
        let conds = error_conditions(ErrorCategory::SecretNotFound, "Secret ci/creds does not exist");
        let st = build_status(Some(&ok), Some(2), &conds, None, &t(200));
        assert_eq!(st.current_runners, 2);
        assert_eq!(st.last_poll_time, Some(t(100)), "no poll happened");
        let ready = find(&st.conditions, ConditionType::Ready).expect("ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "SecretNotFound")
        );
        assert_eq!(ready.last_transition_time, t(200));
        assert!(ready.message.contains("ci/creds"));
        let creds = find(&st.conditions, ConditionType::CredentialsValid).expect("creds");
        assert_eq!(creds.status, "False");
        let scaling = find(&st.conditions, ConditionType::Scaling).expect("kept");
        assert_eq!(scaling.last_transition_time, t(100));
    }

    #[test]
    fn forge_errors_mark_forge_connected() {
        let conds = error_conditions(ErrorCategory::ForgeUnavailable, "503");
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == ConditionType::ForgeConnected && c.status == ConditionStatus::False)
        );
        let conds = error_conditions(ErrorCategory::Unauthorized, "401");
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == ConditionType::ForgeConnected && c.status == ConditionStatus::True)
        );
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == ConditionType::CredentialsValid && c.status == ConditionStatus::False)
        );
    }

    #[test]
    fn degraded_on_failures_and_apply_errors() {
        let p = PassSummary {
            failed_runners: FAILURE_THROTTLE_THRESHOLD,
            ..PassSummary::default()
        };
        let d = success_conditions(&p)
            .into_iter()
            .find(|c| c.type_ == ConditionType::Degraded)
            .expect("degraded");
        assert_eq!(
            (d.status, d.reason),
            (ConditionStatus::True, ConditionReason::RunnersFailing)
        );
        let p = PassSummary {
            apply_error: Some((ErrorCategory::Kubernetes, "create job: 500".into())),
            ..PassSummary::default()
        };
        let d = success_conditions(&p)
            .into_iter()
            .find(|c| c.type_ == ConditionType::Degraded)
            .expect("degraded");
        assert_eq!(d.reason, ConditionReason::Error(ErrorCategory::Kubernetes));
        let p = PassSummary {
            at_max: true,
            ..PassSummary::default()
        };
        let s = success_conditions(&p)
            .into_iter()
            .find(|c| c.type_ == ConditionType::Scaling)
            .expect("scaling");
        assert_eq!(s.reason, ConditionReason::AtMaxRunners);
    }

    #[test]
    fn outdated_runner_degrades_until_success_or_spec_change() {
        let p = PassSummary {
            runner_outdated: true,
            failed_runners: FAILURE_THROTTLE_THRESHOLD,
            ..PassSummary::default()
        };
        let st = build_status(None, Some(3), &success_conditions(&p), Some(&p), &t(100));
        let d = find(&st.conditions, ConditionType::Degraded).expect("degraded");
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "RunnerOutdated"),
            "outdated wins over the generic failure reason"
        );
        assert!(d.message.contains("spec.image"));
        assert!(outdated_persists(Some(&st), Some(3), 0));
        assert!(
            !outdated_persists(Some(&st), Some(3), 1),
            "a runner finished well"
        );
        assert!(!outdated_persists(Some(&st), Some(4), 0), "the spec changed");
        assert!(!outdated_persists(None, Some(3), 0));
        let healthy = build_status(
            None,
            Some(3),
            &success_conditions(&PassSummary::default()),
            None,
            &t(1),
        );
        assert!(!outdated_persists(Some(&healthy), Some(3), 0));
    }

    #[test]
    fn startup_failure_degrades_until_a_runner_starts_or_the_spec_changes() {
        let p = PassSummary {
            startup_failure: Some((
                StartupFailure::ImagePullFailed,
                "Back-off pulling image \"x\"".into(),
            )),
            failed_runners: 2,
            failed_now: 1,
            ..PassSummary::default()
        };
        let st = build_status(None, Some(3), &success_conditions(&p), Some(&p), &t(100));
        let d = find(&st.conditions, ConditionType::Degraded).expect("degraded");
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "ImagePullFailed")
        );
        assert!(d.message.contains("Back-off pulling image"), "{}", d.message);
        assert!(
            d.message.contains("spec.image"),
            "names what to fix: {}",
            d.message
        );
        assert_eq!(st.last_runner_failure_time, Some(t(100)));
        assert_eq!(
            startup_failure_persists(Some(&st), Some(3), |_| false),
            Some((
                StartupFailure::ImagePullFailed,
                "Back-off pulling image \"x\"".into()
            ))
        );
        assert_eq!(
            startup_failure_persists(Some(&st), Some(3), |_| true),
            None,
            "a runner started"
        );
        assert_eq!(
            startup_failure_persists(Some(&st), Some(4), |_| false),
            None,
            "the spec changed"
        );
    }

    /// Under a pod quota of one, the admitted runner runs while the others are refused: that
    /// runner predates the failure and is no sign of recovery, so `Degraded=QuotaExceeded`
    /// stays instead of flapping to `RunnersFailing`/healthy on the next pass.
    #[test]
    fn startup_failure_persists_until_a_runner_created_since_starts_or_one_succeeds() {
        let p = PassSummary {
            startup_failure: Some((
                StartupFailure::QuotaExceeded,
                "pods \"q-abcde-x\" is forbidden: exceeded quota: pods-quota".into(),
            )),
            failed_runners: 2,
            failed_now: 2,
            ..PassSummary::default()
        };
        let st = build_status(None, Some(1), &success_conditions(&p), Some(&p), &t(1000));
        let now = jiff::Timestamp::from_second(1003).expect("ts");
        let at = |s: i64| jiff::Timestamp::from_second(s).expect("ts");
        let runner = |phase, age_seconds| ObservedRunner {
            name: "q-abcde".into(),
            phase,
            forge_state: crate::forge::ForgeRunnerState::Unknown,
            age_seconds,
            running_seconds: 0,
            ever_busy: false,
            stuck: None,
            outdated: false,
        };
        let persists = |runners: &[ObservedRunner], succeeded: u32| {
            startup_failure_persists(Some(&st), Some(1), |since| {
                succeeded > 0 || runner_started_since(runners, since, now)
            })
        };
        // The admitted runner was created 8 s before the failure (at 992) and runs.
        let admitted = runner(RunnerPhase::Running, 11);
        assert_eq!(
            persists(std::slice::from_ref(&admitted), 0).map(|(c, _)| c),
            Some(StartupFailure::QuotaExceeded),
            "a runner running since before the failure does not clear it"
        );
        assert_eq!(
            persists(&[admitted.clone(), runner(RunnerPhase::Pending, 1)], 0),
            Some((
                StartupFailure::QuotaExceeded,
                "pods \"q-abcde-x\" is forbidden: exceeded quota: pods-quota".into()
            )),
            "a new runner still pending does not clear it"
        );
        assert_eq!(
            persists(&[admitted.clone(), runner(RunnerPhase::Running, 3)], 0),
            None,
            "a runner created in the second of the failure started"
        );
        assert_eq!(persists(&[admitted], 1), None, "a runner finished well");
        assert!(!runner_started_since(
            &[runner(RunnerPhase::Failed, 1)],
            at(1000),
            now
        ));
        assert!(runner_started_since(
            &[runner(RunnerPhase::Succeeded, 1)],
            at(1000),
            now
        ));
    }
}
