//! One group's session at the forge: a handle on the backend and the group's key; every call
//! goes to the backend's method of the same job.

use async_trait::async_trait;
use forgerunner_core::ForgeError;
use forgerunner_core::crd::RunnerClass;
use forgerunner_core::forge::{
    ForgeSession, ForgeView, GroupContext, GroupKey, RemoveOutcome, RerunOutcome, RunnerCredentials,
    RunnerPodRequest, RunnerRef,
};
use forgerunner_core::job_identity::JobIdentity;
use k8s_openapi::api::core::v1::PodSpec;

use super::GithubForge;

/// One group's session ([`forgerunner_core::forge::Forge::open`]).
pub(crate) struct GithubSession {
    forge: GithubForge,
    key: GroupKey,
}

impl GithubSession {
    /// The session of the group `key` at `forge`.
    pub(crate) fn new(forge: GithubForge, key: GroupKey) -> GithubSession {
        GithubSession { forge, key }
    }
}

#[async_trait]
impl ForgeSession for GithubSession {
    async fn snapshot(&self, group: &GroupContext, runners: &[RunnerRef]) -> Result<ForgeView, ForgeError> {
        self.forge.observe(group, runners).await
    }

    async fn register(
        &self,
        group: &GroupContext,
        runner_name: &str,
        class: Option<&RunnerClass>,
    ) -> Result<RunnerCredentials, ForgeError> {
        self.forge
            .runner_credentials_of_class(group, runner_name, class)
            .await
    }

    fn runner_pod(&self, r: &RunnerPodRequest<'_>) -> PodSpec {
        self.forge
            .default_runner_pod(r.group, r.runner_name, r.secret_name, r.credentials, r.class)
    }

    async fn deregister(
        &self,
        group: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgeError> {
        self.forge.remove_runner(group, runner).await
    }

    async fn rerun_job(
        &self,
        group: &GroupContext,
        runner: &str,
        job: &JobIdentity,
    ) -> Result<RerunOutcome, ForgeError> {
        self.forge.rerun_job(group, runner, job).await
    }

    async fn delete_group(&self, group: &GroupContext) -> Result<(), ForgeError> {
        self.forge.shutdown(group).await
    }

    async fn close(&self) {
        self.forge.release(&self.key).await;
    }
}
