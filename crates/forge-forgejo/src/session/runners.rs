//! What a pass does at Forgejo besides observing: issue a new runner's credentials
//! (`ForgeSession::register`: create an ephemeral runner on 15+, bound to the job core reserved
//! for it; hand out the registration token on 11–14) and remove a runner that will never run
//! (`ForgeSession::deregister`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use forgerunner_core::forge::{GroupContext, RemoveOutcome, RunnerCredentials, RunnerRef, RunnerRequest};
use forgerunner_core::plan::RunnerPhase;

use super::ForgejoSession;
use crate::classes::runner_labels;
use crate::client::DeleteOutcome;
use crate::error::ForgejoError;
use crate::forge::Resolved;
use crate::pod::{
    ENV_INSTANCE_URL, ENV_JOB_HANDLE, ENV_RUNNER_UUID, REGISTRATION_TOKEN_KEY, TOKEN_KEY, register_env,
};
use crate::runner_id::{self, RUNNER_ID_ANNOTATION};
use crate::types::{Runner, RunnerStatus};
use crate::version::Mode;

/// Secret key of the group's credentials that may hold a fixed registration token.
const SECRET_REGISTRATION_TOKEN_KEY: &str = "registration_token";

impl ForgejoSession {
    /// A new runner's credentials.
    pub(super) async fn credentials(
        &self,
        ctx: &GroupContext,
        request: &RunnerRequest<'_>,
    ) -> Result<RunnerCredentials, ForgejoError> {
        let forge = &self.forge;
        let r = forge.resolve(ctx).await?;
        let (runner_name, class) = (request.name, request.class);
        match r.mode {
            Mode::Ephemeral => self.create_ephemeral(ctx, &r, request).await,
            Mode::RegistrationToken => {
                let token = match ctx.credentials.get(SECRET_REGISTRATION_TOKEN_KEY) {
                    Some(t) => t.clone(),
                    None => forge.registration_token(&r).await?,
                };
                Ok(RunnerCredentials {
                    secret_data: BTreeMap::from([(REGISTRATION_TOKEN_KEY.to_string(), token)]),
                    env: register_env(&r.spec.url, runner_name, &runner_labels(&r.spec.labels, class)),
                    annotations: BTreeMap::new(),
                })
            }
        }
    }

    /// Creates the ephemeral runner, bound to the job core reserved for it
    /// ([`RunnerRequest::job`]: its handle is the job's binding), if any; an unbound runner takes
    /// any job its labels match.
    async fn create_ephemeral(
        &self,
        ctx: &GroupContext,
        r: &Resolved<'_>,
        request: &RunnerRequest<'_>,
    ) -> Result<RunnerCredentials, ForgejoError> {
        let forge = &self.forge;
        let runner_name = request.name;
        let handle = request.job.and_then(|j| j.binding.clone());
        let created = r
            .instance
            .client
            .create_runner(
                r.version,
                &r.scope,
                runner_name,
                &crate::row_mark::description(&ctx.uid),
            )
            .await?;
        // The cached runner listing predates this runner: the next pass reads a fresh one.
        forge.expire_runners(r).await;
        let mut env = BTreeMap::from([
            (ENV_INSTANCE_URL.to_string(), r.spec.url.trim().to_string()),
            (ENV_RUNNER_UUID.to_string(), created.uuid.clone()),
        ]);
        let mut annotations = BTreeMap::from([(RUNNER_ID_ANNOTATION.to_string(), created.id.to_string())]);
        if let Some(h) = handle {
            // Bound to this job before its pod starts: its identity goes on at creation, from
            // the listing the job was reserved from (cached).
            // A failed read only leaves the identity to be recorded once the runner works; the
            // runner row exists by now and must reach its pod.
            if let Ok(jobs) = forge.jobs(r).await
                && let Some(job) = jobs.value.iter().find(|j| j.handle == h)
            {
                annotations.extend(job.identity().annotations());
            }
            env.insert(ENV_JOB_HANDLE.to_string(), h);
        }
        tracing::debug!(
            group = %ctx.key,
            runner = runner_name,
            runner_id = created.id,
            class = request.class.map(|c| c.name.as_str()).unwrap_or_default(),
            bound = env.contains_key(ENV_JOB_HANDLE),
            "created ephemeral Forgejo runner"
        );
        Ok(RunnerCredentials {
            secret_data: BTreeMap::from([(TOKEN_KEY.to_string(), created.token)]),
            env,
            annotations,
        })
    }

    /// Deletes the runner's row unless it is at work; on 11–14, with no runner API, there is
    /// nothing to delete.
    pub(super) async fn remove(
        &self,
        ctx: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgejoError> {
        let forge = &self.forge;
        let r = forge.resolve(ctx).await?;
        if r.mode == Mode::RegistrationToken {
            // No runner API before 15: nothing can be deregistered. The row stays until someone
            // deletes it, or (12+) Forgejo's `cron.cleanup_offline_runners` does, which is off
            // by default and keeps org/user/repo runners unless `GLOBAL_SCOPE_ONLY = false`.
            return Ok(RemoveOutcome::Removed);
        }
        let client = &r.instance.client;
        // Always fresh data: deleting a runner that just took a job would kill the job.
        let row = match runner_id::of(runner) {
            Some(id) => match client.get_runner(r.version, &r.scope, id).await? {
                // The id comes from a Job annotation anyone who may edit Jobs can rewrite: the
                // row it names is ours only if it carries the runner's name. Otherwise it is
                // someone else's runner at the scope, never deleted; ours is looked up by name.
                Some(row) if row.name != runner.name => {
                    tracing::warn!(
                        group = %ctx.key,
                        runner = %runner.name,
                        runner_id = row.id,
                        "the runner id on the runner's Job names another runner at Forgejo; \
                         not deleting that one"
                    );
                    self.runner_named(&r, &runner.name).await?
                }
                found => found,
            },
            None => self.runner_named(&r, &runner.name).await?,
        };
        let Some(row) = row else {
            return Ok(RemoveOutcome::Removed);
        };
        if row.status == RunnerStatus::Active {
            return Ok(RemoveOutcome::Busy);
        }
        // A bound runner leaves idle although it has been polling for its job long enough to
        // get it: Forgejo withholds that job (14+: queued behind its concurrency group, yet
        // listed `waiting`), and core backs it off instead of binding a new runner to it at
        // once. Only removals tell: the planner removes a runner that never got a job through
        // its idle timeout, and a stuck one never connected.
        let withheld = runner.binding().is_some()
            && runner.phase == RunnerPhase::Running
            && row.status == RunnerStatus::Idle
            && runner.connected_since.map_or(Duration::ZERO, |since| {
                Instant::now().saturating_duration_since(since)
            }) >= forge.opts.held_evidence;
        let outcome = client.delete_runner(r.version, &r.scope, row.id).await?;
        forge.expire_runners(&r).await;
        tracing::debug!(
            group = %ctx.key,
            runner = %runner.name,
            runner_id = row.id,
            already_gone = outcome == DeleteOutcome::AlreadyGone,
            withheld,
            "removed Forgejo runner"
        );
        Ok(if withheld {
            RemoveOutcome::Withheld
        } else {
            RemoveOutcome::Removed
        })
    }

    /// The row named `name` in a fresh listing of the group's scope, if any.
    async fn runner_named(&self, r: &Resolved<'_>, name: &str) -> Result<Option<Runner>, ForgejoError> {
        let forge = &self.forge;
        let rows = forge.runners(r, Duration::ZERO).await?;
        Ok(rows.value.rows.iter().find(|x| x.name == name).cloned())
    }
}
