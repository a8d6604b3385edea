//! One group's session at the forge: a handle on the backend and the group's key; every call
//! goes to the backend's method of the same job.

use async_trait::async_trait;
use forgerunner_core::cache_server::CacheServer;
use forgerunner_core::crd::RunnerClass;
use forgerunner_core::forge::{
    ForgeSession, ForgeView, GroupContext, GroupKey, RemoveOutcome, RunnerCredentials, RunnerPodRequest,
    RunnerRef, SecretValue,
};
use forgerunner_core::{ForgeError, RunnerGroup};
use k8s_openapi::api::core::v1::PodSpec;

use crate::forge::ForgejoForge;

/// One group's session ([`forgerunner_core::forge::Forge::open`]).
pub(crate) struct Session {
    forge: ForgejoForge,
    key: GroupKey,
}

impl Session {
    /// The session of the group `key` at `forge`.
    pub(crate) fn new(forge: ForgejoForge, key: GroupKey) -> Session {
        Session { forge, key }
    }
}

#[async_trait]
impl ForgeSession for Session {
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

    fn cache_server(
        &self,
        group: &RunnerGroup,
        service_host: &str,
        secret: &SecretValue,
    ) -> Option<CacheServer> {
        self.forge.cache_server(group, service_host, secret)
    }

    async fn deregister(
        &self,
        group: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgeError> {
        self.forge.remove_runner(group, runner).await
    }

    async fn delete_group(&self, group: &GroupContext) -> Result<(), ForgeError> {
        self.forge.shutdown(group).await
    }

    async fn close(&self) {
        self.forge.release(&self.key).await;
    }
}
