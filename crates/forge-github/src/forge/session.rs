//! One group's session at GitHub ([`forgerunner_core::forge::Forge::open`]): its runners' JIT
//! configs and removal, its scale sets' deletion, and the release of its listeners. The group's
//! state (client, scale sets, listeners) is the backend's, by the session's key, so that
//! `Forge::shutdown_all` reaches every group's listeners.

use std::collections::BTreeMap;

use async_trait::async_trait;
use forgerunner_core::ForgeError;
use forgerunner_core::forge::{
    ForgeSession, ForgeView, GroupContext, GroupKey, RemoveOutcome, RerunOutcome, RunnerCredentials,
    RunnerPodRequest, RunnerRef, RunnerRequest,
};
use forgerunner_core::job_identity::JobIdentity;
use k8s_openapi::api::core::v1::PodSpec;

use super::{GithubForge, GroupState, ensure};
use crate::error::ApiError;
use crate::listener::Listener;
use crate::runners::{self, Removal};
use crate::{RUNNER_ID_ANNOTATION, SCALE_SET_ID_ANNOTATION, pod, scale_set};

/// How long a release waits for a group's state lock before it gives up on the listener there.
const RELEASE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// One group's session at GitHub.
pub(crate) struct GithubSession {
    pub(super) forge: GithubForge,
    key: GroupKey,
}

impl GithubSession {
    /// The session of the group `key` at `forge`.
    pub(super) fn new(forge: GithubForge, key: GroupKey) -> GithubSession {
        GithubSession { forge, key }
    }

    /// Deletes the group's scale sets (its own and its classes'), after stopping its listeners.
    async fn delete_scale_sets(&self, ctx: &GroupContext) -> Result<(), ApiError> {
        let removed = {
            let mut groups = self
                .forge
                .groups
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            groups.remove(&ctx.key)
        };
        let mut st = match removed {
            Some(entry) => std::mem::take(&mut *entry.lock().await),
            None => GroupState::default(),
        };
        futures::future::join_all(st.take_listeners().into_iter().map(Listener::stop)).await;
        // A new client forgets the sets it knew; the classes' are needed below.
        let known = std::mem::take(&mut st.classes);
        let client = self.forge.ensure_client(ctx, &mut st).await?;
        st.classes = known;
        self.forge.delete_class_sets(ctx, &mut st, &client).await?;
        let id = match &st.scale_set {
            Some(s) => Some(s.id),
            None => {
                let known = ctx.group.status.as_ref().and_then(|s| s.scale_set_id);
                match known {
                    Some(id) => Some(id),
                    None => {
                        let want = ensure::desired(ctx)?;
                        let gid = scale_set::runner_group_id(&client, want.runner_group.as_deref()).await?;
                        scale_set::find(&client, gid, &want.name).await?.map(|s| s.id)
                    }
                }
            }
        };
        if let Some(id) = id {
            scale_set::delete(&client, id).await?;
            tracing::info!(group = %ctx.key, scale_set_id = id, "deleted GitHub runner scale set");
        }
        Ok(())
    }
}

#[async_trait]
impl ForgeSession for GithubSession {
    async fn snapshot(&self, ctx: &GroupContext, runners: &[RunnerRef]) -> Result<ForgeView, ForgeError> {
        Ok(self.view(ctx, runners).await?)
    }

    /// A JIT config for the runner from the scale set of its class (`None`: the group's own): a
    /// runner takes only the jobs of the set it registered in.
    async fn register(
        &self,
        ctx: &GroupContext,
        request: &RunnerRequest<'_>,
    ) -> Result<RunnerCredentials, ForgeError> {
        let (runner_name, class) = (request.name, request.class);
        let entry = self.forge.entry(&ctx.key);
        let work_folder = pod::work_folder(&ctx.group);
        let mut attempt = 0;
        loop {
            let (client, id) = {
                let mut st = entry.lock().await;
                let (client, id) = self.forge.ensure(ctx, &mut st).await?;
                match class {
                    Some(class) => {
                        let class_id = self.forge.ensure_class(ctx, &mut st, &client, class).await?;
                        (client, class_id)
                    }
                    None => (client, id),
                }
            };
            match runners::generate_jit_config(&client, id, runner_name, &work_folder).await {
                Ok(jit) => {
                    let mut secret_data = BTreeMap::new();
                    secret_data.insert(pod::JIT_CONFIG_KEY.to_string(), jit.encoded);
                    let mut annotations = BTreeMap::new();
                    annotations.insert(RUNNER_ID_ANNOTATION.to_string(), jit.runner.id.to_string());
                    annotations.insert(SCALE_SET_ID_ANNOTATION.to_string(), id.to_string());
                    return Ok(RunnerCredentials {
                        secret_data,
                        env: BTreeMap::new(),
                        annotations,
                    });
                }
                // The scale set vanished under us: recreate it once.
                Err(e) if e.status() == Some(404) && attempt == 0 => {
                    attempt += 1;
                    entry.lock().await.forget_set(id);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn runner_pod(&self, r: &RunnerPodRequest<'_>) -> PodSpec {
        // A class's labels are its scale set's: the JIT config carries them.
        pod::default_runner_pod(r.group, r.secret_name)
    }

    /// Removes `runner` at the service, by an id the service itself gave for its name.
    ///
    /// The Job's `runner-id` annotation is not that: anyone who may edit Jobs in the namespace
    /// can rewrite it, and a DELETE of `agents/{id}` removes any runner the admin token reaches
    /// (self-hosted runners of the scope, other scale sets). So the id is the one this session
    /// got with the JIT config (core tells it in the annotations of a runner registered here,
    /// from its own books, never from the Job), or else the one the service lists under the
    /// runner's name (`agents?agentName=`, one request, as scaleset's `GetRunnerByName`); a
    /// runner of that name in another scale set than the group's is not ours and is left alone.
    async fn deregister(&self, ctx: &GroupContext, runner: &RunnerRef) -> Result<RemoveOutcome, ForgeError> {
        let (client, mut sets) = {
            let entry = self.forge.entry(&ctx.key);
            let mut st = entry.lock().await;
            let client = self.forge.ensure_client(ctx, &mut st).await?;
            (client, st.set_ids())
        };
        if sets.is_empty() {
            sets.extend(ctx.group.status.as_ref().and_then(|s| s.scale_set_id));
        }
        let annotated = runner
            .annotations
            .get(RUNNER_ID_ANNOTATION)
            .and_then(|v| v.parse::<i64>().ok());
        let issued = annotated.filter(|_| runner.registered_here());
        let id = match issued {
            Some(id) => Some(id),
            None => match runners::find_by_name(&client, &runner.name).await? {
                Some(found) if !sets.is_empty() && !sets.contains(&found.runner_scale_set_id) => {
                    tracing::warn!(
                        group = %ctx.key,
                        runner = %runner.name,
                        runner_id = found.id,
                        scale_set_id = found.runner_scale_set_id,
                        "a runner of this name is registered outside the group's scale sets; not deleting it"
                    );
                    None
                }
                found => found.map(|f| f.id),
            },
        };
        if let (Some(id), Some(a)) = (id, annotated)
            && a != id
        {
            tracing::warn!(
                group = %ctx.key,
                runner = %runner.name,
                runner_id = id,
                annotated_id = a,
                "the runner id on the runner's Job is not the service's; removing by the service's"
            );
        }
        let Some(id) = id else {
            return Ok(RemoveOutcome::Removed);
        };
        match runners::remove(&client, id).await? {
            Removal::Removed => Ok(RemoveOutcome::Removed),
            Removal::Busy => Ok(RemoveOutcome::Busy),
        }
    }

    async fn rerun_job(
        &self,
        ctx: &GroupContext,
        runner: &str,
        job: &JobIdentity,
    ) -> Result<RerunOutcome, ForgeError> {
        let client = {
            let entry = self.forge.entry(&ctx.key);
            let mut st = entry.lock().await;
            self.forge.ensure_client(ctx, &mut st).await?
        };
        crate::rerun::rerun_job(&client, runner, job).await
    }

    async fn delete_group(&self, ctx: &GroupContext) -> Result<(), ForgeError> {
        // Errors go to the reconciler, which bounds the retries and tells the user what is
        // left (the finalizer is never held beyond its cleanup budget).
        match self.delete_scale_sets(ctx).await {
            Ok(()) => Ok(()),
            Err(e) if e.status() == Some(404) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Stops the group's listeners (bounded) and forgets its state and transport.
    async fn close(&self) {
        let removed = self
            .forge
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.key);
        if let Some(entry) = removed {
            // A pass holding the lock against a forge that drops traffic must not block us:
            // the listener is what has to stop, and it is only taken out under the lock.
            let listeners = match tokio::time::timeout(RELEASE_LOCK_WAIT, entry.lock()).await {
                Ok(mut st) => st.take_listeners(),
                Err(_) => Vec::new(),
            };
            let limit = self.forge.opts.shutdown_timeout.saturating_mul(2);
            let stopped = listeners.len();
            futures::future::join_all(listeners.into_iter().map(|l| l.stop_within(limit))).await;
            if stopped > 0 {
                tracing::info!(group = %self.key, listeners = stopped, "GitHub listeners stopped");
            }
        }
        self.forge
            .transports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .release(&self.key);
        self.forge
            .served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .release(&self.key);
        self.forge.report_cache();
    }
}
