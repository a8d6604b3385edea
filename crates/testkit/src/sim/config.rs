//! Simulator settings, errors and counters.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use forgerunner_core::ErrorCategory;
use thiserror::Error;

/// How the simulator behaves; `Default` suits tests.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Namespaces to simulate; empty means all.
    pub namespaces: Vec<String>,
    /// Delay between a pod's creation and its containers running (0 allowed).
    pub start_delay: Duration,
    /// Images starting with any of these prefixes fail to pull (`ErrImagePull`, then
    /// `ImagePullBackOff`).
    pub image_pull_failures: Vec<String>,
    /// Time between `ErrImagePull` and `ImagePullBackOff`.
    pub image_pull_backoff: Duration,
    /// Fallback re-check of a missing Secret/ConfigMap when no watch change arrives.
    pub config_retry: Duration,
    /// Run the Job controller (turn off against a real cluster that has one).
    pub run_job_controller: bool,
    /// Run the kubelet stand-in (turn off against a real cluster that has nodes).
    pub run_kubelet: bool,
    /// Job reconciles running at once.
    pub job_workers: usize,
    /// Name of the simulated node (downward API `spec.nodeName`).
    pub node_name: String,
    /// Delete the pods of a deleted Job, for API servers without a garbage collector (the fake
    /// and real clusters collect them, so this is off by default).
    pub collect_orphans: bool,
    /// Images starting with a prefix here pull slowly but successfully: the container waits
    /// `ContainerCreating` for the paired duration, then starts.
    pub slow_pulls: Vec<(String, Duration)>,
    /// Labels of the simulated node, matched against pods' `nodeSelector` and required node
    /// affinity; `kubernetes.io/hostname` is added from `node_name` when missing.
    pub node_labels: BTreeMap<String, String>,
    /// Allocatable amount per resource (`cpu` → `"4"`, `memory` → `"8Gi"`); a pod requesting
    /// more of one stays `Pending` and unschedulable. Resources not listed are unlimited, so
    /// the default (empty) fits every pod.
    pub node_allocatable: BTreeMap<String, String>,
    /// Per-namespace cap on non-terminal pods, as a `pods` ResourceQuota: the Job controller
    /// refuses pods beyond it with a `FailedCreate` event and retries with backoff.
    pub pod_quotas: BTreeMap<String, u32>,
    /// First retry delay after the Job controller failed to create a pod; doubles per
    /// consecutive failure, up to 16 times this.
    pub failed_create_backoff: Duration,
    /// How long a pod of an unreachable node ([`NodeLoss::Unreachable`]) stays `Terminating`
    /// before PodGC fails and removes it, as once its Node object is deleted: PodGC's
    /// quarantine of a missing node is 40 s (`quarantineTime`,
    /// `pkg/controller/podgc/gc_controller.go`); a real Node object also lingers a while.
    pub lost_node_gc_after: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            namespaces: Vec::new(),
            start_delay: Duration::from_millis(50),
            image_pull_failures: Vec::new(),
            image_pull_backoff: Duration::from_millis(100),
            config_retry: Duration::from_secs(1),
            run_job_controller: true,
            run_kubelet: true,
            job_workers: 8,
            node_name: "sim-node-1".to_owned(),
            collect_orphans: false,
            slow_pulls: Vec::new(),
            node_labels: [
                ("kubernetes.io/os".to_owned(), "linux".to_owned()),
                ("kubernetes.io/hostname".to_owned(), "sim-node-1".to_owned()),
            ]
            .into(),
            node_allocatable: BTreeMap::new(),
            pod_quotas: BTreeMap::new(),
            failed_create_backoff: Duration::from_millis(200),
            lost_node_gc_after: Duration::from_secs(40),
        }
    }
}

/// What happens to a pod whose node is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeLoss {
    /// The pod is deleted at once, with no trace of why (a shortcut: no controller leaves a
    /// pod like that).
    Delete,
    /// The pod is marked `Failed` with reason `NodeLost` mid-run (a shortcut mixing the old
    /// node controller's reason with the taint manager's `DisruptionTarget`).
    Fail,
    /// The node stops answering, and the control plane does what it does from Kubernetes 1.26
    /// on ([`crate::sim::node_loss`]): `Ready=False` (Event `NodeNotReady`), the taint
    /// manager's `DisruptionTarget=True` reason `DeletionByTaintManager` and a delete no
    /// kubelet confirms, so the pod stays `Terminating` in phase `Running`; after
    /// [`SimConfig::lost_node_gc_after`], PodGC's phase `Failed`, reason `DeletionByPodGC`, and
    /// the pod is gone.
    Unreachable,
    /// The node's Node object is deleted (a cloud controller, Karpenter, the cluster autoscaler;
    /// the common end of a spot instance) while the pod runs, and PodGC does what it does then
    /// ([`crate::sim::node_loss`] step 4): phase `Failed`, `DisruptionTarget=True` reason
    /// `DeletionByPodGC`, and a delete with grace 0, so the pod is gone at once.
    NodeDeleted,
}

/// Failures of the simulator's control calls.
#[derive(Debug, Error)]
pub enum SimError {
    /// The Kubernetes API refused or failed a call.
    #[error("kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    /// The pod does not exist.
    #[error("pod {namespace}/{name} not found")]
    PodNotFound {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The call needs the kubelet, which this simulator does not run.
    #[error("the kubelet stand-in is disabled")]
    KubeletDisabled,
    /// A resource quantity did not parse (e.g. `"2 cores"`).
    #[error("invalid quantity {quantity:?} for resource {resource}")]
    InvalidQuantity {
        /// Resource name.
        resource: String,
        /// The text given.
        quantity: String,
    },
}

impl SimError {
    /// Bounded category for labels and messages.
    pub fn category(&self) -> ErrorCategory {
        match self {
            SimError::Kube(_) | SimError::PodNotFound { .. } | SimError::KubeletDisabled => {
                ErrorCategory::Kubernetes
            }
            SimError::InvalidQuantity { .. } => ErrorCategory::InvalidSpec,
        }
    }
}

/// Live counters, updated by the controller and kubelet.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub pods_created: AtomicU64,
    pub pods_started: AtomicU64,
    pub pods_succeeded: AtomicU64,
    pub pods_failed: AtomicU64,
    pub jobs_completed: AtomicU64,
    pub jobs_failed: AtomicU64,
    pub jobs_deleted: AtomicU64,
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> SimStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SimStats {
            pods_created: get(&self.pods_created),
            pods_started: get(&self.pods_started),
            pods_succeeded: get(&self.pods_succeeded),
            pods_failed: get(&self.pods_failed),
            jobs_completed: get(&self.jobs_completed),
            jobs_failed: get(&self.jobs_failed),
            jobs_deleted: get(&self.jobs_deleted),
        }
    }
}

/// A snapshot of what the simulator has done since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Pods the Job controller created.
    pub pods_created: u64,
    /// Pods the kubelet moved to `Running`.
    pub pods_started: u64,
    /// Pods whose behaviour exited 0.
    pub pods_succeeded: u64,
    /// Pods whose behaviour exited non-zero, or were evicted / lost.
    pub pods_failed: u64,
    /// Jobs marked `Complete`.
    pub jobs_completed: u64,
    /// Jobs marked `Failed`.
    pub jobs_failed: u64,
    /// Jobs deleted after `ttlSecondsAfterFinished`.
    pub jobs_deleted: u64,
}
