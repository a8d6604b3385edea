//! Watches runner Jobs as they come and go, to measure latency and check the `maxRunners`
//! ceiling from outside the operator, the way a user with `kubectl get -w` would.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::task::JoinHandle;

use super::{GROUP_LABEL, MANAGED_BY_SELECTOR};

/// What the watcher saw, per group.
#[derive(Clone, Debug, Default)]
pub struct GroupTally {
    /// When each runner Job was first seen, in order of appearance.
    pub created: Vec<(String, Instant)>,
    /// Runner Jobs present and not finished right now.
    pub active: BTreeSet<String>,
    /// The most runner Jobs active at once.
    pub peak_active: usize,
    /// Runner Jobs that finished successfully.
    pub succeeded: BTreeSet<String>,
    /// Runner Jobs that failed.
    pub failed: BTreeSet<String>,
    /// The job each runner Job was made for, where its forge binds runners to jobs (the
    /// [`BINDING_ANNOTATION`] value, by runner Job name).
    pub bindings: BTreeMap<String, String>,
    /// Runner Jobs whose pod ever got ready or finished: those that could run a job (a Job
    /// deleted before its pod started never could).
    pub started: BTreeSet<String>,
    /// The size of each runner Job's runner, by runner Job name.
    pub sizes: BTreeMap<String, RunnerSize>,
}

/// What a runner Job says of its runner's size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerSize {
    /// Its class (label [`CLASS_LABEL`]), when the group has classes.
    pub class: Option<String>,
    /// The CPU request of its `runner` container.
    pub cpu: Option<String>,
}

/// Label naming a runner's class (`spec.classes`).
pub const CLASS_LABEL: &str = "forgerunner.dev/class";

impl RunnerSize {
    fn of(job: &Job) -> RunnerSize {
        let class = job
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(CLASS_LABEL))
            .cloned();
        let cpu = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.iter().find(|c| c.name == "runner"))
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("cpu"))
            .map(|q| q.0.clone());
        RunnerSize { class, cpu }
    }
}

/// Annotation binding a runner Job to one forge job (Forgejo 15's job handle); two runner Jobs
/// with the same value are two runners for one job.
pub const BINDING_ANNOTATION: &str = forgerunner_core::runner_job::JOB_BINDING_ANNOTATION;

/// A background watch of every runner Job in a namespace.
pub struct JobWatch {
    tally: Arc<Mutex<BTreeMap<String, GroupTally>>>,
    task: JoinHandle<()>,
}

fn finished(job: &Job) -> Option<bool> {
    let status = job.status.as_ref()?;
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let done = |kind: &str| conditions.iter().any(|c| c.type_ == kind && c.status == "True");
    if done("Complete") || status.succeeded.unwrap_or(0) > 0 {
        Some(true)
    } else if done("Failed") || status.failed.unwrap_or(0) > 0 {
        Some(false)
    } else {
        None
    }
}

impl JobWatch {
    /// Starts watching runner Jobs in `namespace`.
    pub fn start(client: kube::Client, namespace: &str) -> JobWatch {
        let api: Api<Job> = Api::namespaced(client, namespace);
        let tally: Arc<Mutex<BTreeMap<String, GroupTally>>> = Arc::default();
        let sink = tally.clone();
        let task = tokio::spawn(async move {
            let config = watcher::Config::default().labels(MANAGED_BY_SELECTOR);
            // Backoff: once the world's API server is gone, an unbacked watcher retries in a
            // loop that never yields, and the runtime's shutdown waits on it forever.
            let mut stream = watcher::watcher(api, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                let Ok(mut tally) = sink.lock() else { return };
                match event {
                    Event::Apply(job) | Event::InitApply(job) => record(&mut tally, &job, false),
                    Event::Delete(job) => record(&mut tally, &job, true),
                    Event::Init | Event::InitDone => {}
                }
            }
        });
        JobWatch { tally, task }
    }

    /// A snapshot of what was seen for `group`.
    pub fn group(&self, group: &str) -> GroupTally {
        self.tally
            .lock()
            .ok()
            .and_then(|t| t.get(group).cloned())
            .unwrap_or_default()
    }

    /// Runner Jobs present and not finished right now, across every group.
    pub fn active_count(&self) -> usize {
        self.tally
            .lock()
            .map(|t| t.values().map(|g| g.active.len()).sum())
            .unwrap_or(0)
    }

    /// Snapshots of every group seen.
    pub fn all(&self) -> BTreeMap<String, GroupTally> {
        self.tally.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

fn record(tally: &mut BTreeMap<String, GroupTally>, job: &Job, deleted: bool) {
    let Some(name) = job.metadata.name.clone() else {
        return;
    };
    let Some(group) = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(GROUP_LABEL))
        .cloned()
    else {
        return;
    };
    let t = tally.entry(group).or_default();
    if !t.created.iter().any(|(n, _)| *n == name) {
        t.created.push((name.clone(), Instant::now()));
    }
    t.sizes.entry(name.clone()).or_insert_with(|| RunnerSize::of(job));
    if let Some(binding) = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BINDING_ANNOTATION))
    {
        t.bindings.insert(name.clone(), binding.clone());
    }
    let ready = job.status.as_ref().and_then(|s| s.ready).unwrap_or(0) > 0;
    if ready || finished(job).is_some() {
        t.started.insert(name.clone());
    }
    match (deleted, finished(job)) {
        (_, Some(ok)) => {
            t.active.remove(&name);
            if ok {
                t.succeeded.insert(name);
            } else {
                t.failed.insert(name);
            }
        }
        (true, None) => {
            t.active.remove(&name);
        }
        (false, None) => {
            t.active.insert(name);
            t.peak_active = t.peak_active.max(t.active.len());
        }
    }
}

impl Drop for JobWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
