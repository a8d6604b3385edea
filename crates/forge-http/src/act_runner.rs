//! What the Gitea-family runner images need from their pod for the restricted Pod Security
//! profile and `containerMode: dind`. forgejo-runner is a fork of Gitea's act_runner and both
//! images run the same way: uid 1000, state and work in `/data`. Neither has a `kubernetes`
//! mode (each forge's validation rejects it).

use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::runner_pod::{DindProfile, RunAs, RunnerPodProfile, finish_default_pod};
use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, KeyToPath, PodSpec, SecretVolumeSource, Volume, VolumeMount,
};

/// Where the runner keeps its state and work (an emptyDir, so every runner starts fresh).
pub const DATA_DIR: &str = "/data";
/// The volume at [`DATA_DIR`].
pub const DATA_VOLUME: &str = "data";
/// Name of the init container that registers a runner with a registration token, leaving its
/// `.runner` file in [`DATA_DIR`] for the runner container.
pub const REGISTER_CONTAINER: &str = "register";

/// uid and gid 1000, numeric so that the kubelet can enforce `runAsNonRoot`: forgejo-runner's
/// `USER 1000:1000` and the rootless `gitea/runner` flavour's user. The basic Gitea flavour has
/// no user of its own and would run as root; as 1000 it runs fine with `/data` as its home.
pub const RUN_AS: RunAs = RunAs {
    user: 1000,
    group: 1000,
};

/// How the runner fits the generic pod settings.
pub const PROFILE: RunnerPodProfile<'static> = RunnerPodProfile {
    run_as: RUN_AS,
    // An image without a passwd entry for uid 1000 (Gitea's basic flavour, a `spec.image`
    // without forgejo-runner's `HOME=/data`) gets `HOME=/`, and both runners keep their action,
    // cache and host work directories under `HOME` (forgejo-runner `internal/pkg/config/config.go`
    // `New`: `os.UserHomeDir()`), which `/` cannot hold: point it at the writable data volume.
    home: Some(DATA_DIR),
    dind: DindProfile {
        // The runner's state and work live in its data directory.
        work_dir: DATA_DIR,
        externals_dir: None,
        runner_env: &[],
    },
};

/// Adds the group's container mode to a default runner pod and hardens it.
pub fn finish_pod(pod: &mut PodSpec, spec: &RunnerGroupSpec) {
    finish_default_pod(pod, &PROFILE, spec.container_mode_type());
}

/// The data volume: an emptyDir, so every runner starts fresh.
pub fn data_volume() -> Volume {
    Volume {
        name: DATA_VOLUME.to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

/// The data volume mounted at [`DATA_DIR`], writable.
pub fn data_mount() -> VolumeMount {
    VolumeMount {
        name: DATA_VOLUME.to_string(),
        mount_path: DATA_DIR.to_string(),
        ..VolumeMount::default()
    }
}

/// Volume `name` holding the one key `key` of Secret `secret_name`, as a file named after the
/// key; the pod does not start without it (a runner without its token could only fail).
pub fn secret_key_volume(name: &str, secret_name: &str, key: &str) -> Volume {
    Volume {
        name: name.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret_name.to_string()),
            items: Some(vec![KeyToPath {
                key: key.to_string(),
                path: key.to_string(),
                ..KeyToPath::default()
            }]),
            optional: Some(false),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}
