//! A runner Job as the operator's store keeps it.

use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

/// A runner `batch/v1` Job as the operator reads it back: its metadata and status, no spec.
///
/// The store holds every runner Job of every group for as long as it exists. A decoded `Job`
/// is 2.8 KiB before any of its strings, most of it the pod template, which nothing reads
/// after the Job is made; decoding into this type skips the spec, so it is never allocated.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ObservedJob {
    /// The Job's metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The Job's status, as the Job controller last wrote it.
    #[serde(default)]
    pub status: Option<JobStatus>,
}

impl k8s_openapi::Resource for ObservedJob {
    const API_VERSION: &'static str = <Job as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Job as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Job as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Job as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Job as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Job as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for ObservedJob {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<Job> for ObservedJob {
    fn from(job: Job) -> Self {
        ObservedJob {
            metadata: job.metadata,
            status: job.status,
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::Resource;
    use serde_json::json;

    use super::*;

    /// A Job on the wire is `metadata`, `spec` and `status`, each optional (`k8s.io/api`
    /// `batch/v1/types.go` `Job`: `json:"metadata,omitempty"`, `json:"spec,omitempty"`,
    /// `json:"status,omitempty"`, as vendored in openshift-kni/scheduler-plugins); a watch
    /// event or list item carries all three.
    #[test]
    fn decoding_keeps_metadata_and_status_and_skips_the_spec() {
        let job: ObservedJob = serde_json::from_value(json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "g-abcde", "namespace": "ci", "labels": {"a": "b"}},
            "spec": {"template": {"spec": {"containers": [{"name": "runner", "image": "x"}]}}},
            "status": {"active": 1},
        }))
        .expect("decodes");
        assert_eq!(job.metadata.name.as_deref(), Some("g-abcde"));
        assert_eq!(job.status.and_then(|s| s.active), Some(1));
        assert!(
            size_of::<ObservedJob>() * 3 < size_of::<Job>(),
            "smaller than a Job"
        );
        let bare: ObservedJob =
            serde_json::from_value(json!({"metadata": {"name": "g-fresh"}})).expect("decodes");
        assert_eq!(bare.status, None, "a Job the Job controller has not written yet");
    }

    #[test]
    fn it_is_addressed_as_a_batch_v1_job() {
        assert_eq!(ObservedJob::api_version(&()), "batch/v1");
        assert_eq!(ObservedJob::kind(&()), "Job");
        assert_eq!(ObservedJob::plural(&()), "jobs");
        assert_eq!(
            ObservedJob::url_path(&(), Some("ci")),
            "/apis/batch/v1/namespaces/ci/jobs"
        );
    }
}
