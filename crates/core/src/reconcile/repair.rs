//! Crash recovery for runner Jobs a previous process created but did not finish setting up.
//!
//! A runner is a Job plus a Secret owned by it, written one after the other. A process killed
//! between the two leaves a Job whose pod can never start (its Secret is missing), yet it counts
//! as a pending runner and holds a job's place until the idle timeout. The first pass of a new
//! process for a group gives every such Job its Secret, so its runner starts and takes that job.

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use tracing::info;

use super::apply::Target;
use super::error::ReconcileError;
use super::observe::job_phase;
use crate::plan::RunnerPhase;
use crate::runner_job::build_runner_secret;

/// Writes the missing Secret of each pending runner Job; returns how many it wrote.
///
/// Runs once per group per process: it reads one Secret per pending runner. The runner's new
/// forge ids (a fresh JIT registration replaces the one the crash orphaned) go onto the Job so
/// removal deregisters the right one.
pub async fn restore_missing_secrets(t: &Target<'_>) -> Result<u32, ReconcileError> {
    let mut restored = 0;
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
        let creds = t.forge.runner_credentials(t.group, &name).await?;
        let secret = build_runner_secret(job, &creds)?;
        t.secrets
            .create(&super::apply::post_params(), &secret)
            .await
            .map_err(ReconcileError::kube("create secret"))?;
        if !creds.annotations.is_empty() {
            let patch = serde_json::json!({"metadata": {"annotations": creds.annotations}});
            t.jobs
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(ReconcileError::kube("annotate job"))?;
        }
        info!(runner = %name, group = %t.group.key, "restored the Secret of a runner a previous process left without one");
        restored += 1;
    }
    Ok(restored)
}
