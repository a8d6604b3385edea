//! Records the job a runner runs on its Job and pod, once the forge tells it after creation
//! (GitHub's `JobStarted`, a Gitea listing showing the runner's job in progress).
//!
//! Best effort: the annotations are for people and dashboards, so a failed write is logged and
//! retried on a later pass (the Job in the store still lacks them), never a reconcile failure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use tracing::{debug, info, warn};

use super::apply::is_status;
use super::runner_exit::JOB_NAME_LABEL;
use crate::forge::GroupKey;
use crate::job_identity::JobIdentity;
use crate::runner_job::GROUP_LABEL;

/// Runners among `observed` whose identity the forge now tells and whose Job lacks it, with
/// the annotations to add. Pure.
pub fn identities_to_record(
    observed: &[Arc<Job>],
    identities: &BTreeMap<String, JobIdentity>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for job in observed {
        let Some(name) = job.metadata.name.as_deref() else {
            continue;
        };
        let Some(id) = identities.get(name) else {
            continue;
        };
        let annotations = id.annotations();
        if annotations.is_empty() || job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let current = job.metadata.annotations.clone().unwrap_or_default();
        if !id.recorded_in(&current) {
            out.insert(name.to_owned(), annotations);
        }
    }
    out
}

/// Patches the identity annotations onto each runner's Job and pod; returns how many Jobs were
/// annotated. Runners in `marked_busy` got them with their busy mark already (one write less).
pub async fn record_identities(
    jobs: &Api<Job>,
    pods: &Api<Pod>,
    key: &GroupKey,
    todo: &BTreeMap<String, BTreeMap<String, String>>,
    marked_busy: &[String],
) -> usize {
    if todo.is_empty() {
        return 0;
    }
    let mut done = BTreeSet::new();
    for (name, annotations) in todo {
        log_identity(key, name, annotations);
        if marked_busy.contains(name) {
            continue;
        }
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        match jobs
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                done.insert(name.as_str());
            }
            Err(e) if is_status(&e, 404) => {}
            Err(e) => {
                warn!(group = %key, runner = %name, error = %e, "could not annotate the runner Job with its job")
            }
        }
    }
    // One metadata-only list rather than one per runner: a burst group has a thousand pods,
    // and whole pods would be read (and held) only to learn their names.
    let lp = ListParams::default().labels(&pod_selector(key, todo.keys()));
    let list = match pods.list_metadata(&lp).await {
        Ok(l) => l.items,
        Err(e) => {
            warn!(group = %key, error = %e, "could not list runner pods to annotate them");
            return done.len();
        }
    };
    for pod in list {
        let job_name = pod.metadata.labels.as_ref().and_then(|l| l.get(JOB_NAME_LABEL));
        let (Some(pod_name), Some(annotations)) =
            (pod.metadata.name.as_deref(), job_name.and_then(|j| todo.get(j)))
        else {
            continue;
        };
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        match pods
            .patch(pod_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => debug!(group = %key, pod = pod_name, "runner pod annotated with its job"),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => {
                warn!(group = %key, pod = pod_name, error = %e, "could not annotate the runner pod with its job")
            }
        }
    }
    done.len()
}

/// Most runners named in one pod selector; past it the selector is the group's alone (a URL
/// stays short, and a burst's pass reads the group's pod names once).
const MAX_NAMED_RUNNERS: usize = 50;

/// The label selector for the pods of `runners` (runner Job names) in the group `key`.
fn pod_selector<'a>(key: &GroupKey, runners: impl ExactSizeIterator<Item = &'a String>) -> String {
    let group = format!("{GROUP_LABEL}={}", key.name);
    if runners.len() > MAX_NAMED_RUNNERS {
        return group;
    }
    let names: Vec<&str> = runners.map(String::as_str).collect();
    format!("{group},{JOB_NAME_LABEL} in ({})", names.join(","))
}

/// The log line that ties a runner to its forge job.
fn log_identity(key: &GroupKey, runner: &str, annotations: &BTreeMap<String, String>) {
    let id = JobIdentity::from_annotations(annotations);
    let show = |v: &Option<String>| v.clone().unwrap_or_default();
    info!(
        group = %key,
        runner,
        repository = %show(&id.repository),
        workflow = %show(&id.workflow),
        run_id = %show(&id.run_id),
        job_name = %show(&id.job_name),
        job_id = %show(&id.job_id),
        "runner is running a job"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_identity::{JOB_NAME_ANNOTATION, JOB_RUN_ID_ANNOTATION};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn job(name: &str, annotations: &[(&str, &str)]) -> Arc<Job> {
        Arc::new(Job {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Job::default()
        })
    }

    fn id(run: &str) -> JobIdentity {
        JobIdentity {
            run_id: Some(run.into()),
            job_name: Some("build".into()),
            ..JobIdentity::default()
        }
    }

    #[test]
    fn pod_selector_names_a_few_runners_and_falls_back_to_the_group() {
        let key = GroupKey {
            namespace: "ci".into(),
            name: "linux".into(),
        };
        let few = ["r-1".to_owned(), "r-2".to_owned()];
        assert_eq!(
            pod_selector(&key, few.iter()),
            format!("{GROUP_LABEL}=linux,{JOB_NAME_LABEL} in (r-1,r-2)")
        );
        let many: Vec<String> = (0..=MAX_NAMED_RUNNERS).map(|i| format!("r-{i}")).collect();
        assert_eq!(pod_selector(&key, many.iter()), format!("{GROUP_LABEL}=linux"));
    }

    #[test]
    fn only_runners_missing_their_identity_are_patched() {
        let observed = vec![
            job("a", &[]),
            job(
                "b",
                &[(JOB_RUN_ID_ANNOTATION, "7"), (JOB_NAME_ANNOTATION, "build")],
            ),
            job(
                "c",
                &[(JOB_RUN_ID_ANNOTATION, "6"), (JOB_NAME_ANNOTATION, "build")],
            ),
            job("d", &[]),
        ];
        let identities: BTreeMap<String, JobIdentity> = [
            ("a".to_owned(), id("5")),
            ("b".to_owned(), id("7")),
            ("c".to_owned(), id("7")),
            ("gone".to_owned(), id("8")),
            ("d".to_owned(), JobIdentity::default()),
        ]
        .into();
        let todo = identities_to_record(&observed, &identities);
        assert_eq!(todo.keys().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(todo["c"][JOB_RUN_ID_ANNOTATION], "7");
    }
}
