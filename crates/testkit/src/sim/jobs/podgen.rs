//! Building a Job's pod from its template, the way the Kubernetes Job controller names and
//! labels it.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rand::Rng;
use thiserror::Error;

/// Characters Kubernetes uses for generated name suffixes (no vowels, no look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Longest prefix Kubernetes keeps for `generateName` (63 − 5 random − 1 dash).
const MAX_PREFIX: usize = 57;

/// Labels the Job controller puts on its pods.
pub const JOB_NAME_LABEL: &str = "job-name";
/// The namespaced form of [`JOB_NAME_LABEL`].
pub const BATCH_JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// Legacy controller-uid label.
pub const CONTROLLER_UID_LABEL: &str = "controller-uid";
/// The namespaced form of [`CONTROLLER_UID_LABEL`].
pub const BATCH_CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";

/// Why a pod cannot be built from a Job.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum PodGenError {
    /// The Job has no name, namespace or UID (not yet persisted).
    #[error("job is missing metadata.{0}")]
    MissingMetadata(&'static str),
    /// The Job's template has no pod spec.
    #[error("job template has no pod spec")]
    MissingSpec,
}

/// Five random characters from the Kubernetes name-suffix alphabet.
pub fn random_suffix() -> String {
    let mut rng = rand::rng();
    (0..5)
        .map(|_| {
            let i = rng.random_range(0..SUFFIX_ALPHABET.len());
            char::from(SUFFIX_ALPHABET[i])
        })
        .collect()
}

/// `<job name truncated to 57>-<5 random>`.
pub fn pod_name(job_name: &str) -> String {
    let cut = job_name
        .char_indices()
        .nth(MAX_PREFIX)
        .map_or(job_name.len(), |(i, _)| i);
    format!("{}-{}", &job_name[..cut], random_suffix())
}

/// The `generateName` the Job controller creates a Job's pods with (`<job>-`); the API server
/// keeps 58 characters of it and appends 5 random ones.
pub fn generate_name(job_name: &str) -> String {
    format!("{job_name}-")
}

/// The pod for `job`, named `name`: template labels and annotations, the Job labels, and an
/// owner reference to the Job (controller, blockOwnerDeletion).
pub fn build_pod(job: &Job, name: String) -> Result<Pod, PodGenError> {
    let meta = &job.metadata;
    let job_name = meta.name.clone().ok_or(PodGenError::MissingMetadata("name"))?;
    let namespace = meta
        .namespace
        .clone()
        .ok_or(PodGenError::MissingMetadata("namespace"))?;
    let uid = meta.uid.clone().ok_or(PodGenError::MissingMetadata("uid"))?;
    let template = job.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let spec = template.spec.ok_or(PodGenError::MissingSpec)?;
    let tmeta = template.metadata.unwrap_or_default();
    let mut labels = tmeta.labels.unwrap_or_default();
    labels.insert(JOB_NAME_LABEL.to_owned(), job_name.clone());
    labels.insert(BATCH_JOB_NAME_LABEL.to_owned(), job_name.clone());
    labels.insert(CONTROLLER_UID_LABEL.to_owned(), uid.clone());
    labels.insert(BATCH_CONTROLLER_UID_LABEL.to_owned(), uid.clone());
    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            labels: Some(labels),
            annotations: tmeta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".to_owned(),
                kind: "Job".to_owned(),
                name: job_name,
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// The UID of the Job controlling `pod`, if a Job does.
pub fn controlling_job_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "Job" && o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// The name of the Job controlling `pod`, if a Job does.
pub fn controlling_job_name(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "Job" && o.controller == Some(true))
        .map(|o| o.name.as_str())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job() -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": "runner-abc", "namespace": "ns", "uid": "u-1"},
            "spec": {"template": {
                "metadata": {"labels": {"app": "r"}, "annotations": {"a": "b"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "runner", "image": "img"}]}
            }}
        }))
        .unwrap()
    }

    #[test]
    fn pod_carries_labels_and_owner() {
        let pod = build_pod(&job(), pod_name("runner-abc")).unwrap();
        let name = pod.metadata.name.clone().unwrap();
        assert!(
            name.starts_with("runner-abc-") && name.len() == "runner-abc-".len() + 5,
            "{name}"
        );
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app"], "r");
        assert_eq!(labels[JOB_NAME_LABEL], "runner-abc");
        assert_eq!(labels[BATCH_CONTROLLER_UID_LABEL], "u-1");
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()["a"], "b");
        assert_eq!(controlling_job_uid(&pod), Some("u-1"));
        assert_eq!(controlling_job_name(&pod), Some("runner-abc"));
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.block_owner_deletion, Some(true));
    }

    #[test]
    fn long_names_are_truncated_and_suffix_alphabet_respected() {
        let long = "x".repeat(80);
        let name = pod_name(&long);
        assert_eq!(name.len(), 63);
        assert!(name[58..].bytes().all(|b| SUFFIX_ALPHABET.contains(&b)));
    }

    #[test]
    fn unpersisted_job_is_an_error() {
        let mut j = job();
        j.metadata.uid = None;
        assert_eq!(
            build_pod(&j, "p".into()),
            Err(PodGenError::MissingMetadata("uid"))
        );
    }
}
