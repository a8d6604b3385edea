//! What the Gitea runner image needs from its pod for the restricted Pod Security profile and
//! `containerMode: dind`; Gitea's runners have no `kubernetes` mode (validation rejects it).

use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::runner_pod::{DindProfile, RunAs, RunnerPodProfile, finish_default_pod};
use k8s_openapi::api::core::v1::PodSpec;

use crate::pod::DATA_DIR;

/// uid and gid 1000: the user of the rootless `gitea/runner` flavour. The basic flavour has no
/// user of its own and would run as root; as 1000 it runs fine with `/data` as its home.
pub const RUN_AS: RunAs = RunAs {
    user: 1000,
    group: 1000,
};

/// How the Gitea runner fits the generic pod settings.
pub const PROFILE: RunnerPodProfile<'static> = RunnerPodProfile {
    run_as: RUN_AS,
    // Without a passwd entry for uid 1000 `HOME` would be `/`; act keeps its action and cache
    // directories under it, so point it at the writable data volume.
    home: Some(DATA_DIR),
    dind: DindProfile {
        // act_runner's state and work live in its data directory.
        work_dir: DATA_DIR,
        externals_dir: None,
        runner_env: &[],
    },
};

/// Adds the group's container mode to a default Gitea pod and hardens it.
pub fn finish_pod(pod: &mut PodSpec, spec: &RunnerGroupSpec) {
    finish_default_pod(pod, &PROFILE, spec.container_mode_type());
}

#[cfg(test)]
mod tests;
