//! What every forge's default runner pod shares: the restricted-profile hardening, the checker of
//! that profile, and the container modes that are not the forge's own.
//!
//! A forge builds its pod (image, command, env, secret mounts) and hands it to
//! [`finish_default_pod`] with its image's [`RunnerPodProfile`]; modes that need the forge's own
//! runner features (GitHub's `kubernetes` container hooks) are added by the forge before that.

pub mod dind;
pub mod disruption;
pub mod restricted;
pub mod security;
pub mod trust;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EphemeralVolumeSource, PersistentVolumeClaimSpec, PersistentVolumeClaimTemplate,
    PodSpec, Volume, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::crd::ContainerModeType;

pub use dind::{DindProfile, add_dind};
pub use restricted::{PodSecurityViolation, PssRule, restricted_violations};
pub use security::{RunAs, harden};

/// Name of the runner container (the template merge key).
pub const RUNNER_CONTAINER: &str = crate::runner_job::RUNNER_CONTAINER;
/// Size of the `kubernetes` mode work volume when the spec names no claim.
pub const DEFAULT_WORK_VOLUME_SIZE: &str = "1Gi";

/// What a forge's runner image needs from its default pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunnerPodProfile<'a> {
    /// The user and group of the image's runner process.
    pub run_as: RunAs,
    /// `HOME` of the runner container, for images whose runner user has no home of its own (run
    /// as an arbitrary uid, the process would get `/`, which it cannot write).
    pub home: Option<&'a str>,
    /// How `dind` fits this runner.
    pub dind: DindProfile<'a>,
}

/// Finishes a forge's default pod: adds `mode`'s containers when it is one core knows (`dind`),
/// then hardens the pod for the `restricted` profile. The `kubernetes` modes are the forge's to
/// add before this call (they need its runner's hooks); here they only get the hardening.
pub fn finish_default_pod(
    pod: &mut PodSpec,
    profile: &RunnerPodProfile<'_>,
    mode: Option<ContainerModeType>,
) {
    if let Some(home) = profile.home {
        set_env_default(pod, "HOME", home);
    }
    if mode == Some(ContainerModeType::Dind) {
        add_dind(pod, &profile.dind, profile.run_as.group);
    }
    harden(pod, profile.run_as);
}

/// The runner container of a default pod: the one named `runner`, else the first.
pub fn runner_container_mut(pod: &mut PodSpec) -> Option<&mut Container> {
    let i = crate::runner_job::template::runner_container_index(pod)?;
    pod.containers.get_mut(i)
}

/// Sets `name=value` in the runner container's env unless it is already there.
pub fn set_env_default(pod: &mut PodSpec, name: &str, value: &str) {
    if let Some(runner) = runner_container_mut(pod) {
        let env = runner.env.get_or_insert_with(Vec::new);
        if !env.iter().any(|e| e.name == name) {
            env.push(EnvVar {
                name: name.to_owned(),
                value: Some(value.to_owned()),
                value_from: None,
            });
        }
    }
}

/// The claim of a work volume when the spec names none: 1 GiB `ReadWriteOnce` of the default
/// storage class (ARC's chart default).
pub fn default_work_volume_claim() -> PersistentVolumeClaimTemplate {
    PersistentVolumeClaimTemplate {
        metadata: None,
        spec: PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(DEFAULT_WORK_VOLUME_SIZE.to_owned()),
                )])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        },
    }
}

/// A generic ephemeral volume named `name` from `claim` (or [`default_work_volume_claim`]): a
/// claim made for the pod and deleted with it, named `<pod>-<name>` by Kubernetes.
pub fn ephemeral_volume(name: &str, claim: Option<&PersistentVolumeClaimTemplate>) -> Volume {
    Volume {
        name: name.to_owned(),
        ephemeral: Some(EphemeralVolumeSource {
            volume_claim_template: Some(claim.cloned().unwrap_or_else(default_work_volume_claim)),
        }),
        ..Volume::default()
    }
}

#[cfg(test)]
mod tests;
