//! The Docker layer cache of a `dind` group (`spec.dockerCache`), as pure objects and choices.
//!
//! A Docker daemon's data root must never be opened by two daemons: each keeps its own reference
//! counts, and sharing one loses data (moby/moby#42336; ARC #944). So the cache is a pool of
//! `ReadWriteOnce` claims the group owns, `<group>-docker-<n>`, and each runner Job is given one
//! that no other runner of the group uses, mounted at `/var/lib/docker` in its `dind` sidecar
//! in place of the `emptyDir`. When every claim is in use, the runner gets the `emptyDir` (a
//! cache miss) rather than waiting for one: a job never waits on the cache.
//!
//! Which claims are in use is read from the cluster, never from the operator's memory: the
//! volumes of the group's runner Jobs (their pod templates) and of its runner pods. The pods
//! count because a Job deleted in the background is gone from the API before its pod has
//! stopped; a pod object is removed only once the kubelet has stopped its containers and
//! unmounted its volumes, so a claim no pod and no Job names is free.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSpec,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::cache_server::COMPONENT_LABEL;
use crate::crd::{ContainerModeType, RunnerGroup, RunnerGroupSpec};
use crate::runner_job::{
    FORGE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, RunnerJobError, group_owner_reference,
};
use crate::runner_pod::dind::DIND_STORAGE_VOLUME;

/// Default `spec.dockerCache.size`.
pub const DEFAULT_DOCKER_CACHE_SIZE: &str = "20Gi";
/// Most claims one pool holds (`spec.dockerCache.claims`, and the default's cap).
pub const MAX_DOCKER_CACHE_CLAIMS: u32 = 100;
/// Label naming the group whose pool a claim is in.
pub const DOCKER_CACHE_OF_LABEL: &str = "forgerunner.dev/docker-cache-of";
/// Value of [`COMPONENT_LABEL`] on the pool's claims.
pub const DOCKER_CACHE_COMPONENT: &str = "docker-cache";

/// Name of claim `index` of `group_name`'s pool.
pub fn claim_name(group_name: &str, index: u32) -> String {
    format!("{group_name}-docker-{index}")
}

/// How many claims `spec` asks for: `claims`, else `maxRunners` capped at
/// [`MAX_DOCKER_CACHE_CLAIMS`]; 0 without `spec.dockerCache` or outside `dind` (validation
/// refuses that spec, and such a runner has no daemon to give a cache).
pub fn pool_size(spec: &RunnerGroupSpec) -> u32 {
    let dind = spec
        .container_mode
        .as_ref()
        .is_some_and(|m| m.type_ == ContainerModeType::Dind);
    match &spec.docker_cache {
        Some(cache) if dind => cache
            .claims
            .unwrap_or(spec.max_runners)
            .min(MAX_DOCKER_CACHE_CLAIMS),
        _ => 0,
    }
}

/// The names of the claims `group`'s pool is to hold, in the order they are handed out.
pub fn pool_names(group: &RunnerGroup) -> Vec<String> {
    let name = group.name_any();
    (0..pool_size(&group.spec))
        .map(|i| claim_name(&name, i))
        .collect()
}

/// The labels of `group`'s pool claims; [`DOCKER_CACHE_OF_LABEL`] alone selects them.
pub fn pool_labels(group: &RunnerGroup) -> BTreeMap<String, String> {
    BTreeMap::from([
        (COMPONENT_LABEL.to_owned(), DOCKER_CACHE_COMPONENT.to_owned()),
        (DOCKER_CACHE_OF_LABEL.to_owned(), group.name_any()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (FORGE_LABEL.to_owned(), group.spec.forge.as_str().to_owned()),
    ])
}

/// The label selector of `group`'s pool claims.
pub fn pool_selector(group: &RunnerGroup) -> String {
    format!("{DOCKER_CACHE_OF_LABEL}={}", group.name_any())
}

/// Claim `name` of `group`'s pool: owned by the group (deleting the group deletes it),
/// `ReadWriteOnce`, of `spec.dockerCache`'s size and class. `None` without `spec.dockerCache`.
pub fn pool_claim(group: &RunnerGroup, name: &str) -> Result<Option<PersistentVolumeClaim>, RunnerJobError> {
    let Some(cache) = &group.spec.docker_cache else {
        return Ok(None);
    };
    let owner = group_owner_reference(group)?;
    Ok(Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: group.namespace(),
            labels: Some(pool_labels(group)),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            storage_class_name: cache.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(cache.size.clone()),
                )])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }))
}

/// The pod spec of a runner Job's template.
pub fn job_pod(job: &Job) -> Option<&PodSpec> {
    job.spec.as_ref()?.template.spec.as_ref()
}

/// The claims any of `pods` names in a volume.
pub fn claims_in_use<'a>(pods: impl IntoIterator<Item = &'a PodSpec>) -> BTreeSet<String> {
    pods.into_iter()
        .flat_map(|p| p.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect()
}

/// One claim for each of `count` runners about to be made, from `pool` (in its order, so the
/// claims used before come first and keep their cache warm): never one of `in_use`, never the
/// same one twice; `None` (the `emptyDir`) for the runners beyond the free claims.
pub fn choose_claims(pool: &[String], in_use: &BTreeSet<String>, count: usize) -> Vec<Option<String>> {
    let mut seen = BTreeSet::new();
    let mut free = pool
        .iter()
        .filter(|c| !in_use.contains(*c) && seen.insert(c.as_str()))
        .cloned();
    (0..count).map(|_| free.next()).collect()
}

/// Mounts `claim` as the `dind` sidecar's data root in `job`'s pod, in place of its `emptyDir`;
/// returns whether the pod has that volume (a pod without `dind` is left alone).
pub fn mount_claim(job: &mut Job, claim: &str) -> bool {
    let volume = job
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
        .and_then(|p| p.volumes.as_mut())
        .and_then(|v| v.iter_mut().find(|v| v.name == DIND_STORAGE_VOLUME));
    let Some(volume) = volume else {
        return false;
    };
    volume.empty_dir = None;
    volume.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
        claim_name: claim.to_owned(),
        read_only: None,
    });
    true
}

#[cfg(test)]
mod tests;
