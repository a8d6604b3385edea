//! What a simulated container "does": pluggable behaviours chosen by image.
//!
//! The kubelet stand-in resolves a pod's environment (literal values, `secretKeyRef`,
//! `configMapKeyRef`), its command and args (with `$(VAR)` expansion) and mounted
//! Secret/ConfigMap files, then runs the behaviour registered for
//! the image of the container named `runner` (or the first container). The behaviour's return
//! value is the container's exit code: 0 ends the pod `Succeeded`, anything else `Failed`.
//!
//! Run-to-completion init containers run first, in order, each with the behaviour registered
//! for its image (by image only: the behaviour label names the main container's; none
//! registered means it succeeds at once); a non-zero exit fails the pod. Native sidecars
//! (`restartPolicy: Always`) only start. All containers of a pod share one [`PodScratch`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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
    /// Name of the container being played.
    pub container: String,
    /// Whether that container is a (run-to-completion) init container.
    pub init: bool,
    /// The pod's `emptyDir` volumes as this container mounts them; shared by all containers of
    /// the pod, so an init container can leave files for the main one.
    pub scratch: PodScratch,
}

impl PodInfo {
    /// Reads a file an earlier container of the pod wrote under one of this container's
    /// `emptyDir` mounts.
    pub fn read_scratch(&self, path: &str) -> Option<String> {
        self.scratch.read(path)
    }

    /// Writes a file under one of this container's `emptyDir` mounts; returns false when no
    /// such mount holds `path`.
    pub fn write_scratch(&self, path: &str, content: &str) -> bool {
        self.scratch.write(path, content)
    }
}

/// The `emptyDir` volumes of one pod, seen through one container's mounts.
#[derive(Clone, Debug, Default)]
pub struct PodScratch {
    /// Volume name → relative path → content; one map per pod.
    volumes: Arc<Mutex<BTreeMap<String, BTreeMap<String, String>>>>,
    /// This container's `emptyDir` mounts: mount path → volume name.
    mounts: Vec<(String, String)>,
}

impl PodScratch {
    /// The same volumes seen through other mounts (another container of the pod).
    pub fn with_mounts(&self, mounts: Vec<(String, String)>) -> PodScratch {
        PodScratch {
            volumes: self.volumes.clone(),
            mounts,
        }
    }

    /// The volume and relative path `path` falls under (the longest mount path wins).
    fn locate(&self, path: &str) -> Option<(String, String)> {
        self.mounts
            .iter()
            .filter_map(|(mount, volume)| {
                let rest = path.strip_prefix(mount.trim_end_matches('/'))?;
                let rest = rest.strip_prefix('/')?;
                Some((mount.len(), volume.clone(), rest.to_owned()))
            })
            .max_by_key(|(len, _, _)| *len)
            .map(|(_, volume, rest)| (volume, rest))
    }

    /// Reads `path` (absolute, under one of the mounts).
    pub fn read(&self, path: &str) -> Option<String> {
        let (volume, rel) = self.locate(path)?;
        let volumes = self.volumes.lock().unwrap_or_else(|p| p.into_inner());
        volumes.get(&volume)?.get(&rel).cloned()
    }

    /// Writes `path` (absolute, under one of the mounts); false when no mount holds it.
    pub fn write(&self, path: &str, content: &str) -> bool {
        let Some((volume, rel)) = self.locate(path) else {
            return false;
        };
        let mut volumes = self.volumes.lock().unwrap_or_else(|p| p.into_inner());
        volumes.entry(volume).or_default().insert(rel, content.to_owned());
        true
    }
}

/// A container's simulated work; returns the exit code.
#[async_trait]
pub trait ContainerBehaviour: Send + Sync + 'static {
    /// Runs until done (return the exit code) or until `pod.cancel` fires.
    async fn run(&self, pod: PodInfo) -> i32;
}
