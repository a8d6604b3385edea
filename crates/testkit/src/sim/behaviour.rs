//! What a simulated container "does": pluggable behaviours chosen by image.
//!
//! The kubelet stand-in resolves a pod's environment (literal values, `secretKeyRef`,
//! `configMapKeyRef`), its command and args (with `$(VAR)` expansion) and mounted
//! Secret/ConfigMap files, then runs the behaviour registered for
//! the image of the container named `runner` (or the first container). The behaviour's return
//! value is the container's exit code: 0 ends the pod `Succeeded`, anything else `Failed`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

/// The view of a pod a behaviour gets.
#[derive(Clone, Debug)]
pub struct PodInfo {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod labels (the Job's labels plus `job-name`).
    pub labels: BTreeMap<String, String>,
    /// Pod annotations.
    pub annotations: BTreeMap<String, String>,
    /// Image of the container the behaviour plays.
    pub image: String,
    /// `command` of that container, `$(VAR)` expanded from its environment (empty when the
    /// spec leaves it to the image's entrypoint).
    pub command: Vec<String>,
    /// `args` of that container, `$(VAR)` expanded from its environment.
    pub args: Vec<String>,
    /// Resolved environment of that container.
    pub env: BTreeMap<String, String>,
    /// Mounted Secret/ConfigMap files: full path (mountPath/key) → content.
    pub files: BTreeMap<String, String>,
    /// Cancelled when the pod is deleted, evicted or its node is lost.
    pub cancel: CancellationToken,
}

/// A container's simulated work; returns the exit code.
#[async_trait]
pub trait ContainerBehaviour: Send + Sync + 'static {
    /// Runs until done (return the exit code) or until `pod.cancel` fires.
    async fn run(&self, pod: PodInfo) -> i32;
}
