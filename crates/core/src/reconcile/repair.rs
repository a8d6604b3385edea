//! Runner Jobs left without their Secret: a previous process (or a pass whose Secret write and
//! undo both failed) created the Job but not the Secret it needs.
//!
//! Such a Job's pod can never start, yet it counts as a pending runner and holds a job's place
//! until the startup timeout. It is retired at once: its Job deleted and its forge registration
//! removed, so the next pass creates a complete runner. Re-issuing credentials for it instead is
//! wrong on forges that bind a runner to one job when it is registered (Forgejo 15's job
//! handle): the Job's pod would keep the old binding while the new registration took another job.

use kube::ResourceExt;
use kube::api::DeleteParams;
use tracing::{debug, info};

use super::apply::{Target, is_status, runner_ref};
use super::error::ReconcileError;
use super::observe::job_phase;
use crate::plan::RunnerPhase;

/// Deletes each pending runner Job whose Secret is missing and deregisters its runner; returns
/// the names of the Jobs deleted.
///
/// Reads one Secret per pending runner, so the reconciler runs it on a group's first pass in a
/// process and after a pass whose writes failed, not on every pass.
pub async fn retire_runners_without_secret(t: &Target<'_>) -> Result<Vec<String>, ReconcileError> {
    let mut retired = Vec::new();
    for job in t.observed.iter().filter(|j| job_phase(j) == RunnerPhase::Pending) {
        let name = job.name_any();
        if t.secrets
            .get_opt(&name)
            .await
            .map_err(ReconcileError::kube("get runner secret"))?
            .is_some()
        {
            continue;
        }
        t.fence.check()?;
        match t.jobs.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(ReconcileError::kube("delete job")(e)),
        }
        // Best effort: a registration the forge keeps is a ghost its next sweep removes.
        if let Err(e) = t
            .forge
            .deregister(t.group, &runner_ref(t.observed, t.registrations, &name))
            .await
        {
            debug!(runner = %name, error = %e, "could not deregister a runner left without its Secret");
        }
        info!(runner = %name, group = %t.group.key, "removed a runner Job left without its Secret");
        retired.push(name);
    }
    Ok(retired)
}
