//! Pure building of runner Jobs and their Secrets.
//!
//! One runner = one `batch/v1` Job with `backoffLimit: 0` and a pod that never restarts, plus a
//! Secret of the same name holding what the runner needs to join the forge. The Secret is owned by
//! the Job, the Job by the `RunnerGroup`, so deleting either cascades.

mod observed;
pub mod template;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{EnvVar, PodSpec, PodTemplateSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::crd::{RunnerGroup, RunnerGroupSpec};
use crate::embedded::EmbeddedError;
use crate::forge::RunnerCredentials;

pub use observed::ObservedJob;
pub use template::{RUNNER_CONTAINER, merge_container, merge_pod_spec};

/// Label naming the manager of every object forgerunner creates.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY_VALUE: &str = "forgerunner";
/// Label selector matching every runner Job of this operator.
pub const MANAGED_BY_SELECTOR: &str = "app.kubernetes.io/managed-by=forgerunner";
/// Label holding the owning group's name.
pub const GROUP_LABEL: &str = "forgerunner.dev/group";
/// Label holding the forge (`spec.forge`: `github`, `gitea`, `forgejo`).
pub const FORGE_LABEL: &str = "forgerunner.dev/forge";
/// Annotation set to `true` once the runner was seen busy; it is never idle again.
pub const BUSY_ANNOTATION: &str = "forgerunner.dev/busy";
/// Annotation holding [`template_hash`] of the spec a runner's pod was built from.
pub const TEMPLATE_HASH_ANNOTATION: &str = "forgerunner.dev/template-hash";
/// Annotation holding the binding of the one job a runner was made for
/// ([`crate::forge::WaitingJob::binding`]); absent on a runner that takes any job. Two runner
/// Jobs with the same value would be two runners for one job.
pub const JOB_BINDING_ANNOTATION: &str = "forgerunner.dev/job-binding";
/// Records on a new runner's Job `annotations` the binding of the job it was made for, if any
/// ([`JOB_BINDING_ANNOTATION`]).
pub fn record_binding(
    annotations: &mut std::collections::BTreeMap<String, String>,
    job: Option<&crate::forge::WaitingJob>,
) {
    if let Some(b) = job.and_then(|j| j.binding.as_ref()) {
        annotations.insert(JOB_BINDING_ANNOTATION.to_owned(), b.clone());
    }
}

/// Spec fields that never change a runner's pod: scaling and timing, and forge settings the
/// operator alone uses. A change to one of them must not replace idle runners.
const NOT_POD_SHAPING: [&str; 5] = [
    "minRunners",
    "maxRunners",
    "idleTimeoutSeconds",
    "startupTimeoutSeconds",
    "ttlSecondsAfterFinished",
];
/// The same, inside the forge's block.
const NOT_POD_SHAPING_IN_FORGE_BLOCK: [&str; 3] = ["pollIntervalSeconds", "webhookSecret", "credentials"];
/// Why a runner Job cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunnerJobError {
    /// The group lacks a name, namespace or uid (it was not read from the API server).
    #[error("RunnerGroup is missing metadata.{0}")]
    MissingGroupMetadata(&'static str),
    /// The Job lacks a name or uid, so its Secret cannot be owned by it.
    #[error("runner Job is missing metadata.{0}")]
    MissingJobMetadata(&'static str),
    /// `spec.template` does not decode as a pod template (validation refuses such a spec first).
    #[error("spec.template: {0}")]
    InvalidTemplate(#[from] EmbeddedError),
    /// A class's resources or tolerations do not decode (validation refuses such a spec first).
    #[error("spec.classes: class {0}: {1}")]
    InvalidClass(String, EmbeddedError),
}

/// A short stable hash of everything in `spec` that shapes a runner's pod (image, template,
/// container mode, the forge's block); idle runners whose Job carries another one are replaced.
/// Stable across operator versions and processes: FNV-1a over the canonical JSON (object keys
/// sorted), so it only changes when the spec does.
pub fn template_hash(spec: &RunnerGroupSpec) -> String {
    let mut value = serde_json::to_value(spec).unwrap_or_default();
    if let Some(obj) = value.as_object_mut() {
        for k in NOT_POD_SHAPING {
            obj.remove(k);
        }
        // A runner pod mounts the cache's config whatever its size or class: only whether
        // there is a cache shapes the pod.
        if let Some(cache) = obj.get_mut("cache") {
            *cache = serde_json::Value::Bool(true);
        }
        // Likewise the Docker layer cache: its size and pool never shape a pod.
        if let Some(cache) = obj.get_mut("dockerCache") {
            *cache = serde_json::Value::Bool(true);
        }
        // The embedded objects as their typed form writes them, so `cpu: 2` and `cpu: "2"` (and
        // runners made before the template was kept as stored) hash alike.
        if let Ok(Some(t)) = spec.pod_template() {
            obj.insert("template".to_owned(), serde_json::to_value(t).unwrap_or_default());
        }
        if let Some(classes) = crate::runner_class::overlay::hash_form(spec) {
            obj.insert("classes".to_owned(), classes);
        }
        if let (Ok(Some(claim)), Some(mode)) = (
            spec.work_volume_claim(),
            obj.get_mut("containerMode").and_then(|m| m.as_object_mut()),
        ) {
            mode.insert(
                "kubernetesModeWorkVolumeClaim".to_owned(),
                serde_json::to_value(claim).unwrap_or_default(),
            );
        }
        for forge in crate::crd::ForgeKind::ALL {
            if let Some(block) = obj.get_mut(forge.as_str()).and_then(|b| b.as_object_mut()) {
                for k in NOT_POD_SHAPING_IN_FORGE_BLOCK {
                    block.remove(k);
                }
            }
        }
    }
    // serde_json's map is ordered by key, so the text is canonical.
    format!("{:016x}", crate::stable_hash::fnv1a(value.to_string().as_bytes()))
}

/// The labels every runner Job and pod of `group` carries.
pub fn runner_labels(group: &RunnerGroup) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (
            GROUP_LABEL.to_owned(),
            group.metadata.name.clone().unwrap_or_default(),
        ),
        (FORGE_LABEL.to_owned(), group.spec.forge.as_str().to_owned()),
    ])
}

/// The owner reference making `group` the controller of a runner Job.
pub fn group_owner_reference(group: &RunnerGroup) -> Result<OwnerReference, RunnerJobError> {
    group
        .controller_owner_ref(&())
        .ok_or(RunnerJobError::MissingGroupMetadata("uid"))
}

/// Everything one runner Job is built from.
#[derive(Clone, Debug)]
pub struct RunnerJobInput<'a> {
    /// The owning group, as read from the API server (name, namespace and uid set).
    pub group: &'a RunnerGroup,
    /// The runner's name (= Job name = Secret name = forge-side runner name).
    pub runner_name: &'a str,
    /// The forge's default pod (`ForgeSession::runner_pod`).
    pub default_pod: PodSpec,
    /// What the forge issued for this runner; only `env` and `annotations` reach the Job.
    pub credentials: &'a RunnerCredentials,
}

/// Builds the runner Job: default pod + `spec.image` + credential env, then the user's template,
/// then the reserved fields (restart policy, labels, owner).
pub fn build_runner_job(input: RunnerJobInput<'_>) -> Result<Job, RunnerJobError> {
    let group = input.group;
    let namespace = group
        .metadata
        .namespace
        .clone()
        .ok_or(RunnerJobError::MissingGroupMetadata("namespace"))?;
    if group.metadata.name.is_none() {
        return Err(RunnerJobError::MissingGroupMetadata("name"));
    }
    let owner = group_owner_reference(group)?;

    let mut pod = input.default_pod;
    if let Some(i) = template::runner_container_index(&pod)
        && let Some(runner) = pod.containers.get_mut(i)
    {
        if let Some(image) = group.spec.image.as_deref().filter(|i| !i.is_empty()) {
            runner.image = Some(image.to_owned());
        }
        // Credential env goes in before the merge so the template cannot override it.
        let env = runner.env.get_or_insert_with(Vec::new);
        for (name, value) in &input.credentials.env {
            match env.iter_mut().find(|e| &e.name == name) {
                Some(e) => {
                    e.value = Some(value.clone());
                    e.value_from = None;
                }
                None => env.push(EnvVar {
                    name: name.clone(),
                    value: Some(value.clone()),
                    value_from: None,
                }),
            }
        }
    }
    let tpl = group.spec.pod_template()?;
    let tpl = tpl.as_ref();
    let pod = merge_pod_spec(pod, template::template_spec(tpl));

    let labels = runner_labels(group);
    let tpl_meta = tpl.and_then(|t| t.metadata.as_ref());
    let pod_labels = template::merge_metadata_map(&labels, tpl_meta.and_then(|m| m.labels.as_ref()));
    let mut job_annotations: BTreeMap<String, String> = input.credentials.annotations.clone();
    job_annotations.retain(|k, _| !k.is_empty());
    job_annotations.insert(TEMPLATE_HASH_ANNOTATION.to_owned(), template_hash(&group.spec));
    let pod_annotations =
        template::merge_metadata_map(&job_annotations, tpl_meta.and_then(|m| m.annotations.as_ref()));

    Ok(Job {
        metadata: ObjectMeta {
            name: Some(input.runner_name.to_owned()),
            namespace: Some(namespace),
            labels: Some(labels),
            annotations: (!job_annotations.is_empty()).then_some(job_annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            completions: Some(1),
            parallelism: Some(1),
            ttl_seconds_after_finished: group.spec.ttl_seconds_after_finished,
            active_deadline_seconds: group.spec.active_deadline_seconds,
            // So the Job remembers a disruption its pod no longer can (PodGC force-deletes the
            // pods of a deleted Node): see `runner_pod::disruption::job`.
            pod_failure_policy: Some(crate::runner_pod::disruption::runner_pod_failure_policy()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: (!pod_annotations.is_empty()).then_some(pod_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    })
}

/// Builds the runner Secret for a created Job: same name and labels, owned by the Job (so it goes
/// when the Job goes), data from `credentials.secret_data`.
pub fn build_runner_secret(job: &Job, credentials: &RunnerCredentials) -> Result<Secret, RunnerJobError> {
    let name = job
        .metadata
        .name
        .clone()
        .ok_or(RunnerJobError::MissingJobMetadata("name"))?;
    let uid = job
        .metadata
        .uid
        .clone()
        .ok_or(RunnerJobError::MissingJobMetadata("uid"))?;
    let owner = OwnerReference {
        api_version: "batch/v1".to_owned(),
        kind: "Job".to_owned(),
        name: name.clone(),
        uid,
        controller: Some(true),
        // No blockOwnerDeletion: it would need `jobs/finalizers` rights for no benefit here.
        block_owner_deletion: None,
    };
    let data: BTreeMap<String, ByteString> = credentials
        .secret_data
        .iter()
        .map(|(k, v)| (k.clone(), ByteString(v.expose().as_bytes().to_vec())))
        .collect();
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: job.metadata.namespace.clone(),
            labels: job.metadata.labels.clone(),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        immutable: Some(true),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    })
}

#[cfg(test)]
mod tests;
