//! One group at Gitea ([`ForgeSession`]): its snapshot ([`view`]), registering and removing its
//! runners ([`runners`]), their pods, its cache server and re-runs. What the group's passes
//! share with other groups (clients, listings, tokens, webhook accounting) is the backend's
//! ([`GiteaForge`]); the session is the backend and the group's key.

use async_trait::async_trait;
use forgerunner_core::cache_server::CacheServer;
use forgerunner_core::forge::{
    ForgeSession, ForgeView, GroupContext, GroupKey, RemoveOutcome, RerunOutcome, RunnerCredentials,
    RunnerPodRequest, RunnerRef, RunnerRequest, SecretValue,
};
use forgerunner_core::job_identity::JobIdentity;
use forgerunner_core::{ForgeError, RunnerGroup};
use k8s_openapi::api::core::v1::PodSpec;

use crate::forge::GiteaForge;

mod runners;
mod view;

/// One group's session ([`forgerunner_core::forge::Forge::open`]).
pub(crate) struct GiteaSession {
    forge: GiteaForge,
    key: GroupKey,
}

impl GiteaSession {
    /// The session of the group `key` at `forge`.
    pub(crate) fn new(forge: GiteaForge, key: GroupKey) -> GiteaSession {
        GiteaSession { forge, key }
    }
}

#[async_trait]
impl ForgeSession for GiteaSession {
    async fn snapshot(&self, group: &GroupContext, runners: &[RunnerRef]) -> Result<ForgeView, ForgeError> {
        Ok(self.view(group, runners).await?)
    }

    /// A class's labels reach its runner through the pod ([`ForgeSession::runner_pod`]).
    async fn register(
        &self,
        group: &GroupContext,
        request: &RunnerRequest<'_>,
    ) -> Result<RunnerCredentials, ForgeError> {
        Ok(self.credentials(group, request.name).await?)
    }

    fn runner_pod(&self, request: &RunnerPodRequest<'_>) -> PodSpec {
        crate::pod::runner_pod(request)
    }

    /// Gitea Runner's own `cache-server` ([`crate::cache`]).
    fn cache_server(
        &self,
        group: &RunnerGroup,
        service_host: &str,
        secret: &SecretValue,
    ) -> Option<CacheServer> {
        Some(crate::cache::cache_server(group, service_host, secret))
    }

    async fn deregister(
        &self,
        group: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgeError> {
        Ok(self.remove(group, runner).await?)
    }

    /// Gitea 1.26+ only (see `crate::rerun`); older servers answer `Unsupported` unasked.
    async fn rerun_job(
        &self,
        group: &GroupContext,
        runner: &str,
        job: &JobIdentity,
    ) -> Result<RerunOutcome, ForgeError> {
        let r = self.forge.resolve(group)?;
        let (version, _) = self.forge.ensure_ready(&r).await?;
        let ask = |job_id| self.forge.rerun_asked(&r.listing, job_id);
        crate::rerun::rerun_job(&r.instance.client, &r.scope, version, runner, job, ask).await
    }

    /// Nothing of the group's stays at Gitea but runner rows (see the profile's cleanup hint):
    /// the group's state in this process goes.
    async fn delete_group(&self, group: &GroupContext) -> Result<(), ForgeError> {
        self.forge.release_group(&group.key);
        Ok(())
    }

    async fn close(&self) {
        self.forge.release_group(&self.key);
        self.forge.unmatched.forget(&self.forge.metrics, &self.key);
    }
}
