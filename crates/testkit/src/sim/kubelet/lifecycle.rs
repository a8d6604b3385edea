//! One pod's life on the simulated node: scheduling, init containers and native sidecars in
//! order, image pulls, configuration, then the main container's behaviour and exit.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::{CANCEL_GRACE, Kubelet, Run, lock, sleep_or_cancel};
use crate::sim::behaviour::{ContainerBehaviour, PodInfo, PodScratch};
use crate::sim::config::Counters;
use crate::sim::env::{self, FieldContext, Resolved};
use crate::sim::podstatus::{InitRecord, Stage, is_sidecar, main_container, unschedulable_status};

/// Which container a waiting reason belongs to.
#[derive(Clone, Copy, Debug)]
enum Slot {
    /// The main container: reported through [`Stage::Waiting`].
    Main,
    /// Init container at this index: reported in its [`InitRecord`].
    Init(usize),
}

/// How one init container ended.
enum InitOutcome {
    /// Finished (exit 0) or, for a sidecar, started: go on.
    Done,
    /// Exited non-zero: the pod fails.
    Failed,
    /// Stuck (pull failure) or cancelled: nothing more to do for this pod.
    Stop,
}

/// `container`'s mounts of the pod's `emptyDir` volumes: (mount path, volume name).
fn empty_dir_mounts(pod: &Pod, container: &Container) -> Vec<(String, String)> {
    let empty_dirs: HashSet<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| v.empty_dir.is_some())
        .map(|v| v.name.as_str())
        .collect();
    container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| empty_dirs.contains(m.name.as_str()))
        .map(|m| (m.mount_path.clone(), m.name.clone()))
        .collect()
}

/// Runs a behaviour until it exits (its code) or `cancel` fires (`None`, after a grace period
/// for a cooperative behaviour to clean up: the pod is gone or finished elsewhere).
async fn play(
    behaviour: Arc<dyn ContainerBehaviour>,
    info: PodInfo,
    cancel: &CancellationToken,
) -> Option<i32> {
    let run = behaviour.run(info);
    let mut run = std::pin::pin!(run);
    tokio::select! {
        biased;
        code = &mut run => Some(code),
        _ = cancel.cancelled() => {
            let _ = tokio::time::timeout(CANCEL_GRACE, run).await;
            None
        }
    }
}

/// Records what init container `index` is doing.
fn set_record(run: &Run, index: usize, record: InitRecord) {
    let mut records = lock(&run.init);
    while records.len() < index {
        records.push(InitRecord::Waiting {
            reason: "PodInitializing".to_owned(),
            message: None,
        });
    }
    if records.len() == index {
        records.push(record);
    } else {
        records[index] = record;
    }
}

impl Kubelet {
    /// Plays `run`'s pod from admission to its main container's exit.
    pub(super) async fn run_pod(self: Arc<Self>, run: Run) {
        let cancel = run.cancel.clone();
        let Some(main) = main_container(&run.pod).cloned() else {
            return;
        };
        if !self.wait_schedulable(&run).await || !sleep_or_cancel(self.config.start_delay, &cancel).await {
            return;
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = self.sources.wait_ready() => {}
        }
        // One set of emptyDir volumes per pod, each container seeing it through its own mounts.
        let scratch = PodScratch::default();
        let inits = run
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.clone())
            .unwrap_or_default();
        if !inits.is_empty() && !self.write(&run, &Stage::Initializing).await {
            return;
        }
        for (index, container) in inits.iter().enumerate() {
            match self.run_init(&run, index, container, &scratch).await {
                InitOutcome::Done => {}
                InitOutcome::Stop => return,
                InitOutcome::Failed => {
                    if !run.terminal.swap(true, Ordering::SeqCst) {
                        Counters::bump(&self.counters.pods_failed);
                        self.write(&run, &Stage::InitFailed).await;
                    }
                    return;
                }
            }
        }
        let image = main.image.clone().unwrap_or_default();
        if !self.pull(&run, Slot::Main, &image).await {
            return;
        }
        let Some(resolved) = self.resolve_config(&run, Slot::Main, &main).await else {
            return;
        };
        let started = Timestamp::now();
        if !self.write(&run, &Stage::Running { started }).await {
            return;
        }
        Counters::bump(&self.counters.pods_started);
        let behaviour = self.registry.resolve(&image, run.pod.labels());
        let info = self.pod_info(&run, &main, resolved, false, &scratch);
        let exit_code = match behaviour {
            Some(behaviour) => play(behaviour, info, &cancel).await,
            // No behaviour: an outside driver plays the container through the API.
            None => {
                cancel.cancelled().await;
                None
            }
        };
        let Some(exit_code) = exit_code else {
            return;
        };
        if run.terminal.swap(true, Ordering::SeqCst) {
            return;
        }
        let counter = if exit_code == 0 {
            &self.counters.pods_succeeded
        } else {
            &self.counters.pods_failed
        };
        Counters::bump(counter);
        self.write(&run, &Stage::Exited { started, exit_code }).await;
    }

    /// Holds the pod `Pending` while the node cannot take it, re-checking whenever the node
    /// changes; returns false when the pod went away meanwhile.
    async fn wait_schedulable(&self, run: &Run) -> bool {
        let mut node = self.node.subscribe();
        let mut reported: Option<String> = None;
        loop {
            let why = node.borrow_and_update().unschedulable(&run.pod);
            let Some(message) = why else {
                return true;
            };
            if reported.as_deref() != Some(message.as_str()) {
                let status = unschedulable_status(&message, Timestamp::now());
                if !self.write_status(run, status).await {
                    return false;
                }
                reported = Some(message);
            }
            tokio::select! {
                biased;
                _ = run.cancel.cancelled() => return false,
                changed = node.changed() => if changed.is_err() { return false },
            }
        }
    }

    /// Runs init container `index`: pull, configuration, then its behaviour (by image alone)
    /// for a run-to-completion one; a sidecar only starts and keeps running.
    async fn run_init(
        &self,
        run: &Run,
        index: usize,
        container: &Container,
        scratch: &PodScratch,
    ) -> InitOutcome {
        let slot = Slot::Init(index);
        let image = container.image.clone().unwrap_or_default();
        if !self.pull(run, slot, &image).await {
            return InitOutcome::Stop;
        }
        let Some(resolved) = self.resolve_config(run, slot, container).await else {
            return InitOutcome::Stop;
        };
        let started = Timestamp::now();
        set_record(run, index, InitRecord::Running { started });
        if !self.write(run, &Stage::Initializing).await {
            return InitOutcome::Stop;
        }
        if is_sidecar(container) {
            return InitOutcome::Done;
        }
        // The pod's behaviour label names what its main container does, so init containers
        // are matched by image only.
        let behaviour = self.registry.resolve(&image, &BTreeMap::new());
        let exit_code = match behaviour {
            Some(behaviour) => {
                let info = self.pod_info(run, container, resolved, true, scratch);
                match play(behaviour, info, &run.cancel).await {
                    Some(code) => code,
                    None => return InitOutcome::Stop,
                }
            }
            None => 0,
        };
        let finished = Timestamp::now();
        set_record(
            run,
            index,
            InitRecord::Exited {
                started,
                finished,
                exit_code,
            },
        );
        if exit_code == 0 {
            InitOutcome::Done
        } else {
            InitOutcome::Failed
        }
    }

    /// Reports a waiting reason for `slot`; false when the pod is gone.
    async fn report_waiting(&self, run: &Run, slot: Slot, reason: &str, message: Option<String>) -> bool {
        let reason = reason.to_owned();
        match slot {
            Slot::Main => self.write(run, &Stage::Waiting { reason, message }).await,
            Slot::Init(index) => {
                set_record(run, index, InitRecord::Waiting { reason, message });
                self.write(run, &Stage::Initializing).await
            }
        }
    }

    /// Pulls `image` for `slot`: a failing pull reports `ErrImagePull`, then `ImagePullBackOff`
    /// and stays stuck (false); a slow one waits `ContainerCreating` first.
    async fn pull(&self, run: &Run, slot: Slot, image: &str) -> bool {
        if self.pull_fails(image) {
            let message = Some(format!("failed to pull image \"{image}\": not found"));
            if !self.report_waiting(run, slot, "ErrImagePull", message).await
                || !sleep_or_cancel(self.config.image_pull_backoff, &run.cancel).await
            {
                return false;
            }
            let message = Some(format!("Back-off pulling image \"{image}\""));
            self.report_waiting(run, slot, "ImagePullBackOff", message).await;
            return false;
        }
        if let Some(delay) = self.pull_delay(image) {
            return self.report_waiting(run, slot, "ContainerCreating", None).await
                && sleep_or_cancel(delay, &run.cancel).await;
        }
        !run.cancel.is_cancelled()
    }

    /// Resolves `container`'s env and files, reporting (once per distinct message) and
    /// retrying while a Secret or ConfigMap is missing; `None` when the pod went away.
    async fn resolve_config(&self, run: &Run, slot: Slot, container: &Container) -> Option<Resolved> {
        let cancel = &run.cancel;
        let ctx = FieldContext {
            node_name: self.config.node_name.clone(),
            pod_ip: run.place.pod_ip.clone(),
            host_ip: run.place.host_ip.clone(),
        };
        let mut changes = self.sources.changes();
        let mut reported: Option<String> = None;
        let resolved = loop {
            changes.borrow_and_update();
            match env::resolve(&run.pod, container, &self.sources, &ctx) {
                Ok(resolved) => break resolved,
                Err(err) => {
                    let message = err.to_string();
                    if reported.as_deref() != Some(message.as_str()) {
                        let reason = err.waiting_reason();
                        if !self
                            .report_waiting(run, slot, reason, Some(message.clone()))
                            .await
                        {
                            return None;
                        }
                        reported = Some(message);
                    }
                    let retry = self.config.config_retry;
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => return None,
                        changed = changes.changed() => {
                            if changed.is_err() && !sleep_or_cancel(retry, cancel).await {
                                return None;
                            }
                        }
                        _ = tokio::time::sleep(retry) => {}
                    }
                }
            }
        };
        (!cancel.is_cancelled()).then_some(resolved)
    }

    /// The view of the pod a behaviour playing `container` gets.
    fn pod_info(
        &self,
        run: &Run,
        container: &Container,
        resolved: Resolved,
        init: bool,
        scratch: &PodScratch,
    ) -> PodInfo {
        // The kubelet expands `$(VAR)` in command and args from the container's environment.
        let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
            v.iter()
                .flatten()
                .map(|s| env::expand(s, &resolved.env))
                .collect()
        };
        let command = expand_all(&container.command);
        let args = expand_all(&container.args);
        PodInfo {
            namespace: run.pod.namespace().unwrap_or_default(),
            name: run.pod.name_any(),
            labels: run.pod.labels().clone(),
            annotations: run.pod.annotations().clone(),
            image: container.image.clone().unwrap_or_default(),
            command,
            args,
            env: resolved.env,
            files: resolved.files,
            cancel: run.cancel.clone(),
            container: container.name.clone(),
            init,
            scratch: scratch.with_mounts(empty_dir_mounts(&run.pod, container)),
        }
    }
}
