//! Registering and removing one runner of the group (`ForgeSession::register` and
//! `ForgeSession::deregister`).

use std::collections::BTreeMap;
use std::time::Duration;

use forgerunner_core::forge::{GroupContext, RemoveOutcome, RunnerCredentials, RunnerRef};

use super::GiteaSession;
use crate::error::GiteaError;
use crate::forge::GiteaForge;
use crate::pod::{self, REGISTRATION_TOKEN_KEY};
use crate::types::Runner;

/// Fresh runner listings a removal makes at most while they shift under it (see
/// [`crate::client::RunnerListing::complete`]); each further one is only made when the one before skipped or
/// repeated rows and did not show the runner.
const REMOVAL_LISTINGS: usize = 3;

impl GiteaSession {
    /// What a new runner of the group needs to join (`ForgeSession::register`): the scope's
    /// registration token (or the fixed one of a global group) and its environment.
    pub(super) async fn credentials(
        &self,
        ctx: &GroupContext,
        runner_name: &str,
    ) -> Result<RunnerCredentials, GiteaError> {
        let forge = &self.forge;
        let r = forge.resolve(ctx)?;
        GiteaForge::check_fixed_token(ctx, &r)?;
        let token = match ctx.credentials.get(REGISTRATION_TOKEN_KEY) {
            Some(t) => t.clone(),
            None => {
                forge.ensure_ready(&r).await?;
                let cell = forge.tokens.shared(&r.listing);
                let t = cell
                    .get(
                        forge.opts.token_ttl,
                        r.instance.client.registration_token(&r.scope),
                    )
                    .await?;
                forge.report_cache();
                (*t.value).clone()
            }
        };
        let mut env = pod::runner_env(r.spec, runner_name);
        // The labels are the pod's to say: a class's runner registers with its class's, which
        // the credentials (made before the class is known to the forge) would overwrite.
        env.remove(pod::LABELS_ENV);
        Ok(RunnerCredentials {
            secret_data: BTreeMap::from([(REGISTRATION_TOKEN_KEY.to_string(), token)]),
            env,
            annotations: BTreeMap::new(),
        })
    }

    /// Deletes the runner's rows unless it works (`ForgeSession::deregister`).
    pub(super) async fn remove(
        &self,
        ctx: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, GiteaError> {
        let forge = &self.forge;
        // No `check_fixed_token` here: removal uses only the API token, and refusing it would
        // keep a misconfigured group from cleaning up while it is fixed or deleted.
        let r = forge.resolve(ctx)?;
        forge.ensure_ready(&r).await?;
        let mut ours: BTreeMap<i64, Runner> = BTreeMap::new();
        let mut settled = false;
        for _ in 0..REMOVAL_LISTINGS {
            // Always a fresh listing: removing a runner that just took a job would kill the job.
            let listing = forge.runners(&r, Duration::ZERO).await?;
            for x in listing.value.runners.iter().filter(|x| x.name == runner.name) {
                ours.insert(x.id, x.clone());
            }
            if ours.values().any(|x| x.busy) {
                return Ok(RemoveOutcome::Busy);
            }
            // Found, or not registered by the word of a listing whose pages fit together. A
            // listing that shifted between its pages may have skipped the runner just because
            // it polled (perhaps taking a job), so it is not taken for "gone": look again.
            if !ours.is_empty() || listing.value.complete {
                settled = true;
                break;
            }
        }
        // Still missing after listings that all shifted: only a runner at work must stay, and
        // the jobs listing (not ordered by polls) names it. One not at work is gone, or idle
        // and skipped each time: its Job may go, and a row left behind is swept as a ghost.
        if !settled && forge.works(&r, &runner.name).await? {
            return Ok(RemoveOutcome::Busy);
        }
        for id in ours.keys() {
            r.instance.client.delete_runner(&r.scope, *id).await?;
        }
        forge.runners_cell(&r.listing).expire().await;
        Ok(RemoveOutcome::Removed)
    }
}
