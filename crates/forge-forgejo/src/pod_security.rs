//! What the Forgejo runner image needs from its pod for the restricted Pod Security profile and
//! `containerMode: dind`; Forgejo's runners have no `kubernetes` mode (validation rejects it).

use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::runner_pod::{DindProfile, RunAs, RunnerPodProfile, finish_default_pod};
use k8s_openapi::api::core::v1::PodSpec;

use crate::pod::DATA_DIR;

/// The image's `USER 1000:1000`, numeric so that the kubelet can enforce `runAsNonRoot`.
pub const RUN_AS: RunAs = RunAs {
    user: 1000,
    group: 1000,
};

/// How the Forgejo runner fits the generic pod settings.
pub const PROFILE: RunnerPodProfile<'static> = RunnerPodProfile {
    run_as: RUN_AS,
    // The stock image sets `HOME=/data` (forgejo-runner `Dockerfile`), but a `spec.image` without
    // it runs uid 1000 with `HOME=/`, and forgejo-runner keeps its cache and host work
    // directories under `HOME` (`internal/pkg/config/config.go` `New`: `os.UserHomeDir()`), which
    // `/` cannot hold: set it to the writable data volume, as the image does.
    home: Some(DATA_DIR),
    dind: DindProfile {
        // forgejo-runner's home and work directory.
        work_dir: DATA_DIR,
        externals_dir: None,
        runner_env: &[],
    },
};

/// Adds the group's container mode to a default Forgejo pod and hardens it.
pub fn finish_pod(pod: &mut PodSpec, spec: &RunnerGroupSpec) {
    finish_default_pod(pod, &PROFILE, spec.container_mode_type());
}

#[cfg(test)]
mod tests;
