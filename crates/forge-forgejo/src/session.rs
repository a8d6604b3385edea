//! One group at Forgejo ([`ForgeSession`]): its snapshot ([`view`]), registering and removing
//! its runners ([`runners`]), their pods and its cache server. What the group's passes share
//! with other groups (clients, listings, tokens) and the group's book of job handles are the
//! backend's ([`ForgejoForge`]); the session is the backend and the group's key.
//!
//! No `rerun_job` (`Unsupported`): no Forgejo, v11 to v17-dev, has a re-run API route; only its UI.

use async_trait::async_trait;
use forgerunner_core::cache_server::CacheServer;
use forgerunner_core::forge::{
    ForgeSession, ForgeView, GroupContext, GroupKey, RemoveOutcome, RunnerCredentials, RunnerPodRequest,
    RunnerRef, RunnerRequest, SecretValue,
};
use forgerunner_core::{ForgeError, RunnerGroup};
use k8s_openapi::api::core::v1::PodSpec;

use crate::forge::ForgejoForge;

mod runners;
mod view;

/// One group's session ([`forgerunner_core::forge::Forge::open`]).
pub(crate) struct ForgejoSession {
    forge: ForgejoForge,
    key: GroupKey,
}

impl ForgejoSession {
    /// The session of the group `key` at `forge`.
    pub(crate) fn new(forge: ForgejoForge, key: GroupKey) -> ForgejoSession {
        ForgejoSession { forge, key }
    }
}

#[async_trait]
impl ForgeSession for ForgejoSession {
    async fn snapshot(&self, group: &GroupContext, runners: &[RunnerRef]) -> Result<ForgeView, ForgeError> {
        Ok(self.view(group, runners).await?)
    }

    /// Forgejo 15 binds the runner to the job core reserved for it.
    async fn register(
        &self,
        group: &GroupContext,
        request: &RunnerRequest<'_>,
    ) -> Result<RunnerCredentials, ForgeError> {
        Ok(self.credentials(group, request).await?)
    }

    fn runner_pod(&self, request: &RunnerPodRequest<'_>) -> PodSpec {
        crate::pod::runner_pod(request)
    }

    /// forgejo-runner's own `cache-server` ([`crate::cache`]).
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

    /// Nothing of the group's stays at Forgejo but runner rows (see the profile's cleanup
    /// hint): the group's book and what only it used in this process go.
    async fn delete_group(&self, group: &GroupContext) -> Result<(), ForgeError> {
        self.forge.release_group(&group.key);
        Ok(())
    }

    async fn close(&self) {
        self.forge.release_group(&self.key);
    }
}
