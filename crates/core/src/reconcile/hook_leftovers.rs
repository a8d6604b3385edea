//! Pods and Secrets the runner container hooks left behind.
//!
//! In the container modes that run job containers as pods of their own, the hooks make those
//! pods (and the Secrets that pass job secrets to them) with the label `runner-pod=<runner pod
//! name>` and no owner (actions/runner-container-hooks `packages/k8s/src/hooks/constants.ts`,
//! `RunnerInstanceLabel`; `packages/k8s/src/k8s/index.ts`, `createJobPod`). They delete them at
//! the end of a job; a runner pod that dies mid-job (OOM, eviction, a lost node, the Job's
//! `activeDeadlineSeconds`) leaves them, and a job pod runs `tail -f /dev/null` for ever. ARC
//! deletes them with each runner (`ephemeralrunner_controller.go`,
//! `cleanupContainerHooksResources`); so does this, for runner pods of the group that are gone
//! or finished.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use kube::core::ObjectMeta;
use tracing::{info, warn};

use crate::names::is_runner_name_of;
use crate::runner_job::GROUP_LABEL;

/// The label the hooks put on what they create: the name of the runner pod they serve.
pub const RUNNER_POD_LABEL: &str = "runner-pod";

/// How often a group's leftovers are looked for when no runner went away meanwhile.
pub const SWEEP_EVERY: Duration = Duration::from_secs(300);

/// Length of the random suffix the Job controller gives its pods (`generateName`).
const POD_SUFFIX_LEN: usize = 5;

/// Whether `runner_pod` is the name of a pod of one of `group`'s runner Jobs
/// (`<runner name>-<5 random>`).
pub fn is_runner_pod_of(group: &str, runner_pod: &str) -> bool {
    runner_pod
        .rsplit_once('-')
        .is_some_and(|(job, suffix)| suffix.len() == POD_SUFFIX_LEN && is_runner_name_of(group, job))
}

/// Of the hook objects (`metadata` of pods or Secrets labelled [`RUNNER_POD_LABEL`]), the names
/// of those made for a runner pod of `group` that is no longer running (`live`: the group's
/// runner pods that are neither finished nor being deleted).
pub fn leftovers(group: &str, live: &BTreeSet<String>, objects: &[&ObjectMeta]) -> Vec<String> {
    objects
        .iter()
        .filter_map(|m| {
            let runner_pod = m.labels.as_ref()?.get(RUNNER_POD_LABEL)?;
            let ours = is_runner_pod_of(group, runner_pod) && !live.contains(runner_pod);
            (ours && m.deletion_timestamp.is_none())
                .then(|| m.name.clone())
                .flatten()
        })
        .collect()
}

/// The group's runner pods that may still run a job.
fn live_runner_pods(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// When the group's leftovers were last looked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepClock(Option<Instant>);

impl SweepClock {
    /// Whether to look now: a runner went away this pass, or the last look is old.
    pub fn due(&self, runner_went: bool, now: Instant) -> bool {
        runner_went || self.0.is_none_or(|at| now.duration_since(at) >= SWEEP_EVERY)
    }

    /// Records a look.
    pub fn swept(&mut self, now: Instant) {
        self.0 = Some(now);
    }
}

/// Deletes the hook pods and Secrets of `group`'s runner pods that are gone or finished.
/// Best effort: a failure is logged and retried at the next sweep; returns how many objects
/// were deleted.
pub async fn sweep(pods: &Api<Pod>, secrets: &Api<Secret>, group: &str) -> usize {
    let Ok(runners) = pods
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={group}")))
        .await
        .inspect_err(|e| warn!(group, error = %e, "could not list runner pods for hook leftovers"))
    else {
        return 0;
    };
    let live = live_runner_pods(&runners.items);
    sweep_kind(pods, group, &live, "pod").await + sweep_kind(secrets, group, &live, "Secret").await
}

/// Deletes the leftovers of one kind (listed by metadata only: names and labels are enough).
async fn sweep_kind<K>(api: &Api<K>, group: &str, live: &BTreeSet<String>, kind: &str) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let listed = match api
        .list_metadata(&ListParams::default().labels(RUNNER_POD_LABEL))
        .await
    {
        Ok(list) => list,
        Err(e) => {
            warn!(group, kind, error = %e, "could not list runner container hook leftovers");
            return 0;
        }
    };
    let metas: Vec<&ObjectMeta> = listed.items.iter().map(|m| &m.metadata).collect();
    let mut deleted = 0;
    for name in leftovers(group, live, &metas) {
        deleted += usize::from(delete(api, &name, group, kind).await);
    }
    deleted
}

async fn delete<K>(api: &Api<K>, name: &str, group: &str, kind: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {
            info!(group, name, kind, "deleted a runner container hook leftover");
            true
        }
        Err(kube::Error::Api(s)) if s.code == 404 => false,
        Err(e) => {
            warn!(group, name, kind, error = %e, "could not delete a runner container hook leftover");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn meta(name: &str, runner_pod: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            labels: runner_pod.map(|p| BTreeMap::from([(RUNNER_POD_LABEL.to_owned(), p.to_owned())])),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_runner_pod_name_is_its_jobs_name_and_five_characters() {
        assert!(is_runner_pod_of("ci", "ci-ab12c-x9z8w"));
        assert!(
            !is_runner_pod_of("ci", "ci-ab12c"),
            "a Job name is not a pod name"
        );
        assert!(!is_runner_pod_of("ci", "cd-ab12c-x9z8w"), "another group's");
        assert!(!is_runner_pod_of("ci", "ci-ab12c-x9z8"));
        // A group whose name extends another's never takes the other's pods, nor the reverse.
        assert!(
            !is_runner_pod_of("ci", "ci-ab12c-x9z8w-qwert"),
            "group ci-ab12c's"
        );
        assert!(!is_runner_pod_of("ci-ab12c", "ci-ab12c-qwert"), "group ci's");
    }

    #[test]
    fn only_leftovers_of_this_groups_runner_pods_that_no_longer_run_are_taken() {
        let live = BTreeSet::from(["ci-aaaaa-11111".to_owned()]);
        let dead_job_pod = meta("ci-bbbbb-22222-workflow", Some("ci-bbbbb-22222"));
        let live_job_pod = meta("ci-aaaaa-11111-workflow", Some("ci-aaaaa-11111"));
        let other_group = meta("cd-ccccc-33333-workflow", Some("cd-ccccc-33333"));
        let unlabelled = meta("something", None);
        let mut going = meta("ci-ddddd-44444-workflow", Some("ci-ddddd-44444"));
        going.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        let objects = [&dead_job_pod, &live_job_pod, &other_group, &unlabelled, &going];
        assert_eq!(
            leftovers("ci", &live, &objects),
            vec!["ci-bbbbb-22222-workflow".to_owned()]
        );
    }

    #[test]
    fn the_sweep_runs_when_a_runner_went_or_when_it_is_due() {
        let mut clock = SweepClock::default();
        let t0 = Instant::now();
        assert!(clock.due(false, t0), "first pass");
        clock.swept(t0);
        assert!(!clock.due(false, t0 + Duration::from_secs(10)));
        assert!(clock.due(true, t0 + Duration::from_secs(10)));
        assert!(clock.due(false, t0 + SWEEP_EVERY));
    }
}
