//! Losing the node under a busy GitHub runner, as demos and tests of job re-runs do: find a
//! runner at work whose job the operator knows, then let the simulator take its node away the
//! way an unreachable node goes ([`NodeLoss::Unreachable`]).

use forgerunner_core::job_identity::JOB_RUN_ID_ANNOTATION;
use forgerunner_testkit::sim::NodeLoss;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use scaleset::{JobRequestId, ScaleSetId};

use super::github_work::GithubJobPlay;
use super::{World, WorldError};

/// Label the Job controller puts on each pod of a Job (value: the Job's name, which is the
/// runner's name).
const JOB_NAME_LABEL: &str = "job-name";

/// A GitHub runner whose node was lost while it ran a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostRunner {
    /// The runner, also its Job's name.
    pub runner: String,
    /// Its pod.
    pub pod: String,
    /// The emulator job it was running.
    pub job: JobRequestId,
}

impl World {
    /// The next GitHub runner pod to start plays `play` instead of the world's default work.
    pub fn github_play_next(&self, play: GithubJobPlay) -> Result<(), WorldError> {
        let work = self
            .github_work
            .as_ref()
            .ok_or_else(|| WorldError::Timeout("a GitHub emulator (world started without one)".into()))?;
        work.play_next(play);
        Ok(())
    }

    /// A runner of `scale_set` at work on a job whose runner Job in `namespace` carries the
    /// job's run id (so the operator knows which job it runs): its name and the job.
    pub async fn busy_github_runner(
        &self,
        namespace: &str,
        scale_set: ScaleSetId,
    ) -> Result<Option<(String, JobRequestId)>, WorldError> {
        let Some(emu) = &self.github else {
            return Ok(None);
        };
        let busy: Vec<(String, JobRequestId)> = emu
            .emu
            .state()
            .runners
            .into_iter()
            .filter(|r| r.scale_set_id == scale_set)
            .filter_map(|r| Some((r.name, r.job?)))
            .collect();
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        for (runner, job) in busy {
            let known = jobs.get_opt(&runner).await?.is_some_and(|j| {
                j.metadata
                    .annotations
                    .is_some_and(|a| a.contains_key(JOB_RUN_ID_ANNOTATION))
            });
            if known {
                return Ok(Some((runner, job)));
            }
        }
        Ok(None)
    }

    /// Takes the node from under the pod of `runner` (a runner Job in `namespace`) as an
    /// unreachable node goes; returns the pod's name.
    pub async fn lose_runner_node(&self, namespace: &str, runner: &str) -> Result<String, WorldError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let selector = ListParams::default().labels(&format!("{JOB_NAME_LABEL}={runner}"));
        let pod = pods
            .list(&selector)
            .await?
            .items
            .into_iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
            .and_then(|p| p.metadata.name)
            .ok_or_else(|| WorldError::Timeout(format!("a pod of runner {runner}")))?;
        self.sim.lose_pod(namespace, &pod, NodeLoss::Unreachable).await?;
        Ok(pod)
    }

    /// Finds a busy runner of `scale_set` whose job the operator knows and loses its node;
    /// `None` when no runner is at work on such a job right now.
    pub async fn lose_busy_github_runner(
        &self,
        namespace: &str,
        scale_set: ScaleSetId,
    ) -> Result<Option<LostRunner>, WorldError> {
        let Some((runner, job)) = self.busy_github_runner(namespace, scale_set).await? else {
            return Ok(None);
        };
        let pod = self.lose_runner_node(namespace, &runner).await?;
        Ok(Some(LostRunner { runner, pod, job }))
    }
}
