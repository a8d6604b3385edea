//! Records the job a runner runs on its Job and pod, once the forge tells it after creation
//! (GitHub's `JobStarted`, a Gitea listing showing the runner's job in progress).
//!
//! Best effort: the annotations are for people and dashboards, so a failed write is logged and
//! retried on a later pass (the Job in the store still lacks them), never a reconcile failure.
//! The pod writes run beside the pass, not in it: a pass that waited for a pod list and patch
//! held back the group's next pass, and with it the runner for the next job.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use tracing::{debug, info, warn};

use super::apply::is_status;
use super::runner_exit::JOB_NAME_LABEL;
use crate::forge::GroupKey;
use crate::job_identity::JobIdentity;
use crate::runner_job::{GROUP_LABEL, ObservedJob};

/// Runners among `observed` whose identity the forge now tells and whose Job lacks it, with
/// the annotations to add. Pure.
pub fn identities_to_record(
    observed: &[Arc<ObservedJob>],
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

/// Runners whose identity a writer is recording or has recorded, until their Job goes: a pass
/// does not hand the same runner out twice while the store does not show the annotations yet.
#[derive(Clone, Debug, Default)]
pub struct IdentityWrites(Arc<Mutex<BTreeSet<String>>>);

impl IdentityWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops from `todo` the runners already handed out and claims the rest; forgets runners
    /// whose Job is no longer among `observed`.
    pub fn claim(
        &self,
        todo: &mut BTreeMap<String, BTreeMap<String, String>>,
        observed: &[Arc<ObservedJob>],
    ) {
        let mut claimed = self.lock();
        let live: BTreeSet<&str> = observed
            .iter()
            .filter_map(|j| j.metadata.name.as_deref())
            .collect();
        claimed.retain(|name| live.contains(name.as_str()));
        todo.retain(|name, _| !claimed.contains(name));
        claimed.extend(todo.keys().cloned());
    }

    /// A write for `runner` failed: a later pass may hand it out again.
    fn release(&self, runner: &str) {
        self.lock().remove(runner);
    }
}

/// Records `todo` on the runners' Jobs and pods in a task of its own (see the module comment),
/// in the current span.
pub fn spawn_record_identities(
    jobs: Api<Job>,
    pods: Api<Pod>,
    key: GroupKey,
    todo: BTreeMap<String, BTreeMap<String, String>>,
    marked_busy: Vec<String>,
    writes: IdentityWrites,
) {
    if todo.is_empty() {
        return;
    }
    let task = async move {
        record_identities(&jobs, &pods, &key, &todo, &marked_busy, &writes).await;
    };
    tokio::spawn(tracing::Instrument::in_current_span(task));
}

/// Patches the identity annotations onto each runner's Job and pod; returns how many Jobs were
/// annotated. Runners in `marked_busy` got them with their busy mark already (one write less).
/// A runner whose write failed is released from `writes` for a later pass.
pub async fn record_identities(
    jobs: &Api<Job>,
    pods: &Api<Pod>,
    key: &GroupKey,
    todo: &BTreeMap<String, BTreeMap<String, String>>,
    marked_busy: &[String],
    writes: &IdentityWrites,
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
                writes.release(name);
                warn!(group = %key, runner = %name, error = %e, "could not annotate the runner Job with its job")
            }
        }
    }
    // Metadata-only lists, each naming at most MAX_NAMED_RUNNERS runners: whole pods would be
    // read only to learn their names, and a burst group's whole pod list (a thousand pods with
    // their managed fields) is megabytes held at once.
    let names: Vec<&str> = todo.keys().map(String::as_str).collect();
    for chunk in names.chunks(MAX_NAMED_RUNNERS) {
        let lp = ListParams::default().labels(&pod_selector(key, chunk));
        let list = match pods.list_metadata(&lp).await {
            Ok(l) => l.items,
            Err(e) => {
                warn!(group = %key, error = %e, "could not list runner pods to annotate them");
                for name in chunk {
                    writes.release(name);
                }
                continue;
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
                    if let Some(runner) = job_name {
                        writes.release(runner);
                    }
                    warn!(group = %key, pod = pod_name, error = %e, "could not annotate the runner pod with its job")
                }
            }
        }
    }
    done.len()
}

/// Most runners named in one pod selector (the selector goes in the URL).
const MAX_NAMED_RUNNERS: usize = 50;

/// The label selector for the pods of `runners` (runner Job names) in the group `key`.
fn pod_selector(key: &GroupKey, runners: &[&str]) -> String {
    format!(
        "{GROUP_LABEL}={},{JOB_NAME_LABEL} in ({})",
        key.name,
        runners.join(",")
    )
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

    fn job(name: &str, annotations: &[(&str, &str)]) -> Arc<ObservedJob> {
        Arc::new(crate::testing::annotated_job(name, annotations))
    }

    fn id(run: &str) -> JobIdentity {
        JobIdentity {
            run_id: Some(run.into()),
            job_name: Some("build".into()),
            ..JobIdentity::default()
        }
    }

    #[test]
    fn pod_selector_names_the_runners_in_the_group() {
        let key = GroupKey {
            namespace: "ci".into(),
            name: "linux".into(),
        };
        assert_eq!(
            pod_selector(&key, &["r-1", "r-2"]),
            format!("{GROUP_LABEL}=linux,{JOB_NAME_LABEL} in (r-1,r-2)")
        );
    }

    #[test]
    fn a_runner_is_handed_out_once_until_released_or_gone() {
        let writes = IdentityWrites::default();
        let observed = vec![job("a", &[]), job("b", &[])];
        let todo_of = |names: &[&str]| -> BTreeMap<String, BTreeMap<String, String>> {
            names.iter().map(|n| ((*n).to_owned(), BTreeMap::new())).collect()
        };
        let mut first = todo_of(&["a", "b"]);
        writes.claim(&mut first, &observed);
        assert_eq!(first.len(), 2);
        let mut again = todo_of(&["a", "b"]);
        writes.claim(&mut again, &observed);
        assert!(again.is_empty(), "both are being written");
        writes.release("b");
        let mut retry = todo_of(&["a", "b"]);
        writes.claim(&mut retry, &observed);
        assert_eq!(retry.keys().collect::<Vec<_>>(), ["b"]);
        // a's Job went: its claim goes with it.
        let mut after = BTreeMap::new();
        writes.claim(&mut after, &observed[1..]);
        assert_eq!(writes.lock().iter().collect::<Vec<_>>(), ["b"]);
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
