//! A class on a runner's Job: its label, and its resources, node selector and tolerations on the
//! pod, laid over what the forge's default pod and the user's template made.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements, Toleration};

use super::CLASS_LABEL;
use crate::crd::{RunnerClass, RunnerGroupSpec};
use crate::runner_job::RunnerJobError;
use crate::runner_job::template::runner_container_index;

/// The class a runner's Job names ([`CLASS_LABEL`]); `None` for the group's own runners.
pub fn job_class(job: &impl kube::Resource) -> Option<&str> {
    job.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(CLASS_LABEL))
        .map(String::as_str)
}

/// Puts `class` on a runner Job built by [`crate::runner_job::build_runner_job`]: the class
/// label on the Job and its pod, the class's resources on the runner container, its node
/// selector and tolerations on the pod. The reserved fields the build set are not touched.
pub fn dress_job(job: &mut Job, class: &RunnerClass) -> Result<(), RunnerJobError> {
    let invalid = |e| RunnerJobError::InvalidClass(class.name.clone(), e);
    let resources = class.resources().map_err(invalid)?;
    let tolerations = class.tolerations().map_err(invalid)?;
    job.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(CLASS_LABEL.to_owned(), class.name.clone());
    let Some(spec) = job.spec.as_mut() else {
        return Ok(());
    };
    spec.template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default)
        .insert(CLASS_LABEL.to_owned(), class.name.clone());
    if let Some(pod) = spec.template.spec.as_mut() {
        dress_pod(pod, class, resources.as_ref(), &tolerations);
    }
    Ok(())
}

/// The overlay on the pod itself.
fn dress_pod(
    pod: &mut PodSpec,
    class: &RunnerClass,
    resources: Option<&ResourceRequirements>,
    tolerations: &[Toleration],
) {
    if let Some(res) = resources
        && let Some(i) = runner_container_index(pod)
        && let Some(runner) = pod.containers.get_mut(i)
    {
        let have = runner.resources.get_or_insert_with(Default::default);
        for (ours, theirs) in [
            (&mut have.requests, &res.requests),
            (&mut have.limits, &res.limits),
        ] {
            if let Some(theirs) = theirs.as_ref().filter(|m| !m.is_empty()) {
                ours.get_or_insert_with(Default::default)
                    .extend(theirs.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        for claim in res.claims.iter().flatten() {
            let claims = have.claims.get_or_insert_with(Vec::new);
            if !claims.iter().any(|c| c.name == claim.name) {
                claims.push(claim.clone());
            }
        }
    }
    if !class.node_selector.is_empty() {
        pod.node_selector
            .get_or_insert_with(Default::default)
            .extend(class.node_selector.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    for t in tolerations {
        let have = pod.tolerations.get_or_insert_with(Vec::new);
        if !have.contains(t) {
            have.push(t.clone());
        }
    }
}

/// The classes of `spec` as they shape runner pods, for the template hash: the embedded objects
/// in their typed form (so `cpu: 4` and `cpu: "4"` hash alike) and without `maxRunners`, which
/// shapes no pod. `None` without classes.
pub fn hash_form(spec: &RunnerGroupSpec) -> Option<serde_json::Value> {
    if spec.classes.is_empty() {
        return None;
    }
    let classes: Vec<serde_json::Value> = spec
        .classes
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "labels": c.labels,
                "resources": c.resources().ok().flatten(),
                "nodeSelector": c.node_selector,
                "tolerations": c.tolerations().unwrap_or_default(),
            })
        })
        .collect();
    Some(serde_json::Value::Array(classes))
}
