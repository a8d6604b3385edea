//! The `RunnerGroup` custom resource (`forgerunner.dev/v1alpha1`).
//!
//! The Rust types are the source of truth: the CRD YAML in the chart is generated from them
//! (`forgerunner crd`) and a test fails when the checked-in copy drifts.

use std::collections::BTreeMap;
use std::fmt;

use crate::cache_server::{CACHE_SIZE_PATTERN, CacheStatus, DEFAULT_CACHE_SIZE};
use crate::docker_cache::{DEFAULT_DOCKER_CACHE_SIZE, MAX_DOCKER_CACHE_CLAIMS};
use crate::embedded::{Embedded, EmbeddedError};
use crate::schedule::{MAX_SCHEDULES, Schedule, ScheduleStatus};
use crate::validate::{
    MAX_FORGE_NAME_LEN, MAX_LABEL_LEN, MAX_LABELS, MAX_OBJECT_NAME_LEN, MAX_REPO_LEN, MAX_RUNNERS_LIMIT,
    MAX_URL_LEN,
};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaimTemplate, PodTemplateSpec, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of every forgerunner resource.
pub const API_GROUP: &str = "forgerunner.dev";

/// Which forge a `RunnerGroup` serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ForgeKind {
    /// GitHub (github.com, GHE.com or GHES) runner scale sets.
    Github,
    /// Gitea 1.25+ Actions.
    Gitea,
    /// Forgejo 11+ Actions (15+ for one ephemeral runner per job).
    Forgejo,
}

impl ForgeKind {
    /// Every forge forgerunner knows, enabled or not.
    pub const ALL: [ForgeKind; 3] = [ForgeKind::Github, ForgeKind::Gitea, ForgeKind::Forgejo];

    /// The lowercase name used in the spec, config and labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ForgeKind::Github => "github",
            ForgeKind::Gitea => "gitea",
            ForgeKind::Forgejo => "forgejo",
        }
    }

    /// Parses the lowercase name used in the spec and in the configuration.
    pub fn parse(name: &str) -> Option<ForgeKind> {
        ForgeKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The JSON path of this forge's block in a spec, e.g. `spec.gitea`.
    pub fn block_field(self) -> &'static str {
        match self {
            ForgeKind::Github => "spec.github",
            ForgeKind::Gitea => "spec.gitea",
            ForgeKind::Forgejo => "spec.forgejo",
        }
    }
}

impl fmt::Display for ForgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Desired state of a pool of ephemeral runners for one forge.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "forgerunner.dev",
    version = "v1alpha1",
    kind = "RunnerGroup",
    plural = "runnergroups",
    shortname = "rg",
    namespaced,
    status = "RunnerGroupStatus",
    printcolumn = r#"{"name":"Forge","type":"string","jsonPath":".spec.forge"}"#,
    printcolumn = r#"{"name":"Min","type":"integer","jsonPath":".spec.minRunners"}"#,
    printcolumn = r#"{"name":"Max","type":"integer","jsonPath":".spec.maxRunners"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.currentRunners"}"#,
    printcolumn = r#"{"name":"Running","type":"integer","jsonPath":".status.runningJobs"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.pendingRunners"}"#,
    printcolumn = r#"{"name":"Idle","type":"integer","jsonPath":".status.idleRunners"}"#,
    printcolumn = r#"{"name":"Busy","type":"integer","jsonPath":".status.busyRunners"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".status.desiredRunners"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Window","type":"string","jsonPath":".status.schedule.active"}"#,
    printcolumn = r#"{"name":"Next-Change","type":"string","priority":1,"jsonPath":".status.schedule.nextChange"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    // The group's name is the value of the group label on its runners (a label value is at
    // most 63 characters, apimachinery `IsValidLabelValue`); refused where it is typed. CEL at the
    // root may read `metadata.name` (and nothing else of metadata). Only on create: a rule at the
    // root runs again on every update that changes anything (ratcheting skips only an unchanged
    // node), so a group stored before the rule could not even have its finalizer removed.
    validation = kube::core::Rule::new("oldSelf.hasValue() || size(self.metadata.name) <= 63")
        .optional_old_self(true)
        .message("metadata.name must be at most 63 characters: it is the value of the forgerunner.dev/group label on every runner")
        .reason(kube::core::Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
// The rules sit on the spec object (not on the root, where `#[kube(validation)]` would put them and
// where `self` is the whole resource), so `self.forge` resolves. `fieldPath` makes the API server
// name the offending field in its error. `validate::validate_spec` checks the same rules again.
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.forge != 'github' || has(self.github)",
     "message": "github is required when forge is github",
     "fieldPath": ".github", "reason": "FieldValueRequired"},
    {"rule": "self.forge == 'github' || !has(self.github)",
     "message": "github must not be set unless forge is github",
     "fieldPath": ".github", "reason": "FieldValueForbidden"},
    {"rule": "self.forge != 'gitea' || has(self.gitea)",
     "message": "gitea is required when forge is gitea",
     "fieldPath": ".gitea", "reason": "FieldValueRequired"},
    {"rule": "self.forge == 'gitea' || !has(self.gitea)",
     "message": "gitea must not be set unless forge is gitea",
     "fieldPath": ".gitea", "reason": "FieldValueForbidden"},
    {"rule": "self.forge != 'forgejo' || has(self.forgejo)",
     "message": "forgejo is required when forge is forgejo",
     "fieldPath": ".forgejo", "reason": "FieldValueRequired"},
    {"rule": "self.forge == 'forgejo' || !has(self.forgejo)",
     "message": "forgejo must not be set unless forge is forgejo",
     "fieldPath": ".forgejo", "reason": "FieldValueForbidden"},
    {"rule": "self.maxRunners >= 1",
     "message": "maxRunners must be at least 1",
     "fieldPath": ".maxRunners"},
    {"rule": "!has(self.minRunners) || self.minRunners <= self.maxRunners",
     "message": "minRunners must not exceed maxRunners",
     "fieldPath": ".minRunners"},
    {"rule": "!has(self.classes) || self.classes.all(c, !has(c.maxRunners) || c.maxRunners <= self.maxRunners)",
     "message": "a class's maxRunners must not exceed maxRunners",
     "fieldPath": ".classes"},
    {"rule": "self.forge != 'github' || !has(self.cache)",
     "message": "cache must not be set when forge is github: GitHub's runner takes the cache URL from the job message (see docs/caches.md)",
     "fieldPath": ".cache", "reason": "FieldValueForbidden"},
    {"rule": "!has(self.dockerCache) || (has(self.containerMode) && self.containerMode.type == 'dind')",
     "message": "dockerCache is only used with containerMode dind (it holds the Docker daemon's /var/lib/docker)",
     "fieldPath": ".dockerCache", "reason": "FieldValueForbidden"}
]))]
pub struct RunnerGroupSpec {
    /// The forge this group serves; exactly the block of the same name must be set.
    pub forge: ForgeKind,
    /// GitHub settings; required when `forge` is `github`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<GithubSpec>,
    /// Gitea settings; required when `forge` is `gitea`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitea: Option<GiteaSpec>,
    /// Forgejo settings; required when `forge` is `forgejo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forgejo: Option<ForgejoSpec>,
    /// Idle runners kept ready on top of demand.
    #[serde(default)]
    #[schemars(range(min = 0), extend("format" = "int32"))]
    pub min_runners: u32,
    /// Upper bound on runners of this group at any moment (1 to 1000).
    #[schemars(range(min = 1, max = MAX_RUNNERS_LIMIT), extend("format" = "int32"))]
    pub max_runners: u32,
    /// Runner container image; defaults to the forge's official runner image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Pod template merged onto the forge's default runner pod. The container named `runner`
    /// merges into the default runner container; other containers are appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pod_template_schema")]
    pub template: Option<Embedded<PodTemplateSpec>>,
    /// Seconds a finished runner Job is kept before Kubernetes removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Hard limit on a runner's lifetime in seconds (Job `activeDeadlineSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
    /// Seconds a runner may run without taking a job before it is removed (default 600),
    /// counted from when it was first seen running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("format" = "int32"))]
    pub idle_timeout_seconds: Option<u32>,
    /// Seconds a runner may take from its Job's creation to a running runner container (default
    /// 300); a runner not started by then, or stuck sooner on an error Kubernetes will not retry
    /// away (image pull, config, quota), is removed and counted as a failure. One only out of
    /// time (slow pull, no node yet) is kept while a waiting job has no other runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("format" = "int32"))]
    pub startup_timeout_seconds: Option<u32>,
    /// Seconds the group's waiting runners must outnumber the jobs waiting for them before the
    /// surplus is removed (default 120). GitHub cancels a job assignment no runner took in time
    /// and assigns it again a little later; a runner still starting for it must outlive that
    /// gap. 0 removes surplus runners at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("format" = "int32"))]
    pub scale_down_delay_seconds: Option<u32>,
    /// Seconds a job the group serves may wait for a runner before the group reports it stalled
    /// (default 600): condition `QueueStalled` names the job, since when it waits and the likely
    /// cause, and a Warning Event (reason `QueueStalled`) is published once per stall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("format" = "int32"))]
    pub stalled_job_seconds: Option<u32>,
    /// Windows by the calendar that set `minRunners` (and optionally `maxRunners`) while open,
    /// e.g. warm runners on weekdays from 08:00 to 18:00 in one time zone and none at night.
    /// Overlapping windows: the largest `minRunners` and the largest `maxRunners` apply. The
    /// status shows the window in force and the next change (`status.schedule`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_SCHEDULES),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub schedules: Vec<Schedule>,
    /// Re-run through the forge's API the job of a runner the cluster killed (eviction,
    /// preemption, node loss or drain: the pod's `DisruptionTarget` condition), at most
    /// `maxPerHour` per group. Never a job that failed on its own or was cancelled. Unset: such
    /// jobs are reported (Event `JobNotRerun`) but not re-run. GitHub's token needs the
    /// "Actions" repository permission (write), or the `repo` scope for a classic token; Gitea
    /// and Forgejo have no API for it (see docs/operations.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun: Option<RerunSpec>,
    /// How jobs' containers run: beside the runner with a Docker daemon (`dind`), or as pods of
    /// their own through the runner container hooks (`kubernetes`, `kubernetes-novolume`;
    /// GitHub only). Unset: the runner runs steps in its own container, with no daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_mode: Option<ContainerMode>,
    /// A shared Actions cache for the group's runners (Gitea and Forgejo only): the operator
    /// runs the runner's own cache server on a volume of this size, reachable only from the
    /// group's runner pods, and points every runner at it (see docs/caches.md). Removing it
    /// deletes the server and its volume. Unset: each runner keeps its cache in its own pod,
    /// lost when the pod ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSpec>,
    /// A Docker layer cache for `containerMode: dind` (see docs/caches.md): a pool of volumes
    /// the group owns, `<group>-docker-<n>`, each mounted at `/var/lib/docker` by at most one
    /// runner pod at a time, so a runner finds the images and build cache of the runners before
    /// it. A runner that finds every volume in use gets an empty one of its own (a cache miss)
    /// rather than waiting. Removing it deletes the volumes once no runner uses them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_cache: Option<DockerCacheSpec>,
    /// Named runner sizes (Gitea only for now): a job whose `runs-on` names one of a class's
    /// labels gets a runner of that class, registered with the group's labels and the class's,
    /// dressed with its resources, node selector and tolerations (see docs/classes.md). Jobs
    /// that name no class's label get the group's own runners. At most 8 classes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_CLASSES),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub classes: Vec<RunnerClass>,
}

/// Most classes one group may have (`spec.classes`).
pub const MAX_CLASSES: usize = 8;
/// Longest class name: it is a label value and part of metric series, so it stays short.
pub const MAX_CLASS_NAME_LEN: usize = 20;
/// A class name: a DNS label (lowercase letters, digits and `-`, starting and ending with a
/// letter or digit).
pub const CLASS_NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// One named runner size of a group (`spec.classes[]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunnerClass {
    /// The class's name, unique in the group: a DNS label of at most 20 characters. Its runners
    /// carry it in the label `forgerunner.dev/class`.
    #[schemars(length(min = 1, max = MAX_CLASS_NAME_LEN), pattern(CLASS_NAME_PATTERN))]
    pub name: String,
    /// Labels, in the form of the forge block's labels, that jobs name in `runs-on` to get a
    /// runner of this class. The class's runners register with the group's labels and these (a
    /// label named like one of the group's replaces it). A job gets the first class, in spec
    /// order, whose labels it names and whose runners can take it.
    #[schemars(length(min = 1, max = MAX_LABELS), inner(length(min = 1, max = MAX_LABEL_LEN)))]
    pub labels: Vec<String>,
    /// Resources of the runner container of the class's pods; each request or limit given
    /// here replaces the template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Embedded<ResourceRequirements>>,
    /// Node selector of the class's pods, merged onto the template's (the class wins a key both
    /// set).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations added to the template's on the class's pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Embedded<Toleration>>,
    /// Most runners of this class at any moment; at most `spec.maxRunners`, which bounds all
    /// classes together. Unset: only `spec.maxRunners` bounds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_RUNNERS_LIMIT), extend("format" = "int32"))]
    pub max_runners: Option<u32>,
}

impl RunnerClass {
    /// The runner container's resources, decoded; `Ok(None)` when unset.
    pub fn resources(&self) -> Result<Option<ResourceRequirements>, EmbeddedError> {
        self.resources.as_ref().map(Embedded::decode).transpose()
    }

    /// The tolerations, decoded.
    pub fn tolerations(&self) -> Result<Vec<Toleration>, EmbeddedError> {
        self.tolerations.iter().map(Embedded::decode).collect()
    }
}

/// The group's shared Actions cache (`spec.cache`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheSpec {
    /// Size of the cache's volume (a PersistentVolumeClaim, `ReadWriteOnce`): a whole number with
    /// an optional unit, from 1Gi to 10Ti (default 10Gi). It can grow later where the storage
    /// class allows expansion; it cannot shrink.
    #[serde(default = "default_cache_size")]
    #[schemars(pattern(CACHE_SIZE_PATTERN))]
    pub size: String,
    /// StorageClass of the cache's volume; the cluster's default class when unset. Cannot change
    /// once the volume exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_OBJECT_NAME_LEN))]
    pub storage_class_name: Option<String>,
}

fn default_cache_size() -> String {
    DEFAULT_CACHE_SIZE.to_owned()
}

/// The Docker layer cache of a `dind` group (`spec.dockerCache`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerCacheSpec {
    /// Size of each volume (a PersistentVolumeClaim, `ReadWriteOnce`): a whole number with an
    /// optional unit, from 1Gi to 10Ti (default 20Gi). Applies to volumes made from then on;
    /// existing ones keep their size.
    #[serde(default = "default_docker_cache_size")]
    #[schemars(pattern(CACHE_SIZE_PATTERN))]
    pub size: String,
    /// StorageClass of the volumes; the cluster's default class when unset. Applies to volumes
    /// made from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_OBJECT_NAME_LEN))]
    pub storage_class_name: Option<String>,
    /// How many volumes the pool holds (1 to 100): at most this many runners have a cache at
    /// once. Default: `maxRunners`, at most 100. Lowering it deletes the surplus volumes once
    /// no runner uses them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_DOCKER_CACHE_CLAIMS), extend("format" = "int32"))]
    pub claims: Option<u32>,
}

fn default_docker_cache_size() -> String {
    DEFAULT_DOCKER_CACHE_SIZE.to_owned()
}

/// Re-runs of jobs whose runner the cluster killed (`spec.rerun`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RerunSpec {
    /// Most re-runs this group asks the forge for in any hour (1 to 100): a cluster that keeps
    /// killing runners must not turn one job into endless re-runs.
    #[schemars(range(min = 1, max = MAX_RERUNS_PER_HOUR), extend("format" = "int32"))]
    pub max_per_hour: u32,
}

/// Most `spec.rerun.maxPerHour`.
pub const MAX_RERUNS_PER_HOUR: u32 = 100;

/// Default idle timeout for runners that never take a job.
pub const DEFAULT_IDLE_TIMEOUT_SECONDS: u32 = 600;
/// Default startup timeout of a runner.
pub const DEFAULT_STARTUP_TIMEOUT_SECONDS: u32 = 300;
/// Default time surplus runners are kept before they are removed.
pub const DEFAULT_SCALE_DOWN_DELAY_SECONDS: u32 = 120;
/// Default time a waiting job may wait before the group reports its queue stalled.
pub const DEFAULT_STALLED_JOB_SECONDS: u32 = 600;

/// How a runner runs its jobs' containers (ARC's `containerMode`, same words and shape).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.type == 'kubernetes' || !has(self.kubernetesModeWorkVolumeClaim)",
     "message": "kubernetesModeWorkVolumeClaim is only used with type kubernetes",
     "fieldPath": ".kubernetesModeWorkVolumeClaim", "reason": "FieldValueForbidden"}
]))]
pub struct ContainerMode {
    /// The mode.
    #[serde(rename = "type")]
    pub type_: ContainerModeType,
    /// `kubernetes` mode: the claim template of the work volume each runner gets (an ephemeral
    /// volume, deleted with the pod). Defaults to 1 GiB `ReadWriteOnce` of the default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_mode_work_volume_claim: Option<Embedded<PersistentVolumeClaimTemplate>>,
}

/// The container modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ContainerModeType {
    /// Docker-in-Docker: a privileged `docker:dind` native sidecar, socket on a shared volume.
    #[serde(rename = "dind")]
    Dind,
    /// Runner container hooks: job containers run as pods; the work directory is a volume.
    #[serde(rename = "kubernetes")]
    Kubernetes,
    /// Runner container hooks without a shared work volume (files are copied into job pods).
    #[serde(rename = "kubernetes-novolume")]
    KubernetesNoVolume,
}

impl ContainerModeType {
    /// The word used in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerModeType::Dind => "dind",
            ContainerModeType::Kubernetes => "kubernetes",
            ContainerModeType::KubernetesNoVolume => "kubernetes-novolume",
        }
    }
}

impl RunnerGroupSpec {
    /// The forges whose block is set in this spec (exactly `forge`'s in a valid spec).
    pub fn forge_blocks_set(&self) -> Vec<ForgeKind> {
        let set = [
            (ForgeKind::Github, self.github.is_some()),
            (ForgeKind::Gitea, self.gitea.is_some()),
            (ForgeKind::Forgejo, self.forgejo.is_some()),
        ];
        set.into_iter().filter(|(_, s)| *s).map(|(k, _)| k).collect()
    }

    /// The idle timeout with its default applied.
    pub fn idle_timeout_seconds(&self) -> u32 {
        self.idle_timeout_seconds.unwrap_or(DEFAULT_IDLE_TIMEOUT_SECONDS)
    }

    /// The startup timeout with its default applied.
    pub fn startup_timeout_seconds(&self) -> u32 {
        self.startup_timeout_seconds
            .unwrap_or(DEFAULT_STARTUP_TIMEOUT_SECONDS)
    }

    /// The scale-down delay with its default applied.
    pub fn scale_down_delay_seconds(&self) -> u32 {
        self.scale_down_delay_seconds
            .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS)
    }

    /// The stalled-job threshold with its default applied.
    pub fn stalled_job_seconds(&self) -> u32 {
        self.stalled_job_seconds.unwrap_or(DEFAULT_STALLED_JOB_SECONDS)
    }

    /// The container mode's type, if a mode is set.
    pub fn container_mode_type(&self) -> Option<ContainerModeType> {
        self.container_mode.as_ref().map(|m| m.type_)
    }

    /// The pod template, decoded; `Ok(None)` when unset. An error is the spec's (validation
    /// reports it as `InvalidSpec` naming the field), never the watch's.
    pub fn pod_template(&self) -> Result<Option<PodTemplateSpec>, EmbeddedError> {
        self.template.as_ref().map(Embedded::decode).transpose()
    }

    /// The `kubernetes` mode's work volume claim template, decoded; `Ok(None)` when unset.
    pub fn work_volume_claim(&self) -> Result<Option<PersistentVolumeClaimTemplate>, EmbeddedError> {
        self.container_mode
            .as_ref()
            .and_then(|m| m.kubernetes_mode_work_volume_claim.as_ref())
            .map(Embedded::decode)
            .transpose()
    }
}

/// GitHub runner scale set settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.configUrl.matches('^https?://[^/]+')",
     "message": "configUrl must be an http:// or https:// URL with a host",
     "fieldPath": ".configUrl"},
    {"rule": "!has(self.proxyUrl) || self.proxyUrl.matches('^https?://[^/]+')",
     "message": "proxyUrl must be an http:// or https:// URL with a host",
     "fieldPath": ".proxyUrl"}
]))]
pub struct GithubSpec {
    /// Organization, repository or enterprise URL, e.g. `https://github.com/my-org`
    /// (GHES and GHE.com hosts allowed).
    #[schemars(length(min = 1, max = MAX_URL_LEN))]
    pub config_url: String,
    /// Name of a Secret in this namespace with `github_token`, or `github_app_id`,
    /// `github_app_installation_id` and `github_app_private_key`.
    #[schemars(length(min = 1, max = MAX_OBJECT_NAME_LEN))]
    pub credentials: String,
    /// Runner group the scale set joins; the default group when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_FORGE_NAME_LEN))]
    pub runner_group: Option<String>,
    /// Scale set name, which is also the `runs-on` label; defaults to the RunnerGroup's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_FORGE_NAME_LEN))]
    pub scale_set_name: Option<String>,
    /// Extra labels of the scale set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LABELS), inner(length(min = 1, max = MAX_LABEL_LEN)))]
    pub labels: Vec<String>,
    /// Name of a ConfigMap in this namespace whose key `ca.crt` holds extra trusted CA certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    pub ca_bundle_config_map: Option<String>,
    /// HTTP(S) proxy URL for calls to GitHub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_URL_LEN))]
    pub proxy_url: Option<String>,
}

/// Which level of a Gitea or Forgejo instance the runners register at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GiteaScope {
    /// Instance-wide runners (admin token).
    Global,
    /// Runners of one organization.
    Org,
    /// Runners of one user's repositories.
    User,
    /// Runners of one repository (`owner/name`).
    Repo,
}

impl GiteaScope {
    /// The lowercase name used in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            GiteaScope::Global => "global",
            GiteaScope::Org => "org",
            GiteaScope::User => "user",
            GiteaScope::Repo => "repo",
        }
    }
}

/// Gitea Actions settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.url.matches('^https?://[^/]+')",
     "message": "url must be an http:// or https:// URL with a host",
     "fieldPath": ".url"},
    {"rule": "self.scope != 'org' || (has(self.org) && size(self.org) > 0)",
     "message": "org is required when scope is org",
     "fieldPath": ".org", "reason": "FieldValueRequired"},
    {"rule": "self.scope != 'user' || (has(self.user) && size(self.user) > 0)",
     "message": "user is required when scope is user",
     "fieldPath": ".user", "reason": "FieldValueRequired"},
    {"rule": "self.scope != 'repo' || has(self.repo)",
     "message": "repo (owner/name) is required when scope is repo",
     "fieldPath": ".repo", "reason": "FieldValueRequired"},
    {"rule": "!has(self.repo) || self.repo.matches('^[^/]+/[^/]+$')",
     "message": "repo must be owner/name",
     "fieldPath": ".repo"},
    {"rule": "self.labels.all(l, l.matches('^[^:, ]+(:host|:docker://[^, ]+)?$'))",
     "message": "each label must be name, name:host or name:docker://image",
     "fieldPath": ".labels"},
    {"rule": "!has(self.proxyUrl) || self.proxyUrl.matches('^https?://[^/]+')",
     "message": "proxyUrl must be an http:// or https:// URL with a host",
     "fieldPath": ".proxyUrl"}
]))]
pub struct GiteaSpec {
    /// Base URL of the Gitea instance, e.g. `https://gitea.example.com`.
    #[schemars(length(min = 1, max = MAX_URL_LEN))]
    pub url: String,
    /// Level the runners register at.
    pub scope: GiteaScope,
    /// Organization name, for `scope: org`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_FORGE_NAME_LEN))]
    pub org: Option<String>,
    /// User name, for `scope: user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_FORGE_NAME_LEN))]
    pub user: Option<String>,
    /// Repository as `owner/name`, for `scope: repo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_REPO_LEN))]
    pub repo: Option<String>,
    /// Name of a Secret in this namespace: key `token` holds the API token, optional key
    /// `registration_token` a fixed runner registration token.
    #[schemars(length(min = 1, max = MAX_OBJECT_NAME_LEN))]
    pub credentials: String,
    /// Runner labels in act_runner form `name[:docker://image|:host]`; jobs whose `runs-on`
    /// labels are all among these names are served by this group.
    #[schemars(length(min = 1, max = MAX_LABELS), inner(length(min = 1, max = MAX_LABEL_LEN)))]
    pub labels: Vec<String>,
    /// Seconds between polls of the queued jobs (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("format" = "int32"))]
    pub poll_interval_seconds: Option<u32>,
    /// Name of a Secret whose key `secret` verifies `workflow_job` webhooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    pub webhook_secret: Option<String>,
    /// Name of a ConfigMap in this namespace whose key `ca.crt` holds extra trusted CA
    /// certificates, for the operator's calls and the runner pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    pub ca_bundle_config_map: Option<String>,
    /// HTTP(S) proxy URL for calls to Gitea, from the operator and the runner pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_URL_LEN))]
    pub proxy_url: Option<String>,
}

/// Default seconds between Gitea polls.
pub const DEFAULT_GITEA_POLL_INTERVAL_SECONDS: u32 = 5;

impl GiteaSpec {
    /// The poll interval with its default applied.
    pub fn poll_interval_seconds(&self) -> u32 {
        self.poll_interval_seconds
            .unwrap_or(DEFAULT_GITEA_POLL_INTERVAL_SECONDS)
    }
}

/// The scope of a Forgejo group: the same levels, words and meaning as Gitea's.
pub type ForgejoScope = GiteaScope;

/// Forgejo Actions settings (Forgejo 11 or newer; 15 or newer for one ephemeral runner per job).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.url.matches('^https?://[^/]+')",
     "message": "url must be an http:// or https:// URL with a host",
     "fieldPath": ".url"},
    {"rule": "self.scope != 'org' || (has(self.org) && size(self.org) > 0)",
     "message": "org is required when scope is org",
     "fieldPath": ".org", "reason": "FieldValueRequired"},
    {"rule": "self.scope != 'user' || (has(self.user) && size(self.user) > 0)",
     "message": "user is required when scope is user",
     "fieldPath": ".user", "reason": "FieldValueRequired"},
    {"rule": "self.scope != 'repo' || has(self.repo)",
     "message": "repo (owner/name) is required when scope is repo",
     "fieldPath": ".repo", "reason": "FieldValueRequired"},
    {"rule": "!has(self.repo) || self.repo.matches('^[^/]+/[^/]+$')",
     "message": "repo must be owner/name",
     "fieldPath": ".repo"},
    {"rule": "self.labels.all(l, l.matches('^[^:, ]+(:host|:docker(://[^, ]+)?)?$'))",
     "message": "each label must be name, name:host or name:docker://image (lxc cannot run in a pod)",
     "fieldPath": ".labels"},
    {"rule": "!has(self.proxyUrl) || self.proxyUrl.matches('^https?://[^/]+')",
     "message": "proxyUrl must be an http:// or https:// URL with a host",
     "fieldPath": ".proxyUrl"}
]))]
pub struct ForgejoSpec {
    /// Base URL of the Forgejo instance, e.g. `https://forgejo.example.com`.
    #[schemars(length(min = 1, max = MAX_URL_LEN))]
    pub url: String,
    /// Level the runners register at.
    pub scope: ForgejoScope,
    /// Organization name, for `scope: org`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_FORGE_NAME_LEN))]
    pub org: Option<String>,
    /// User name, for `scope: user` (the token's own user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_FORGE_NAME_LEN))]
    pub user: Option<String>,
    /// Repository as `owner/name`, for `scope: repo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_REPO_LEN))]
    pub repo: Option<String>,
    /// Name of a Secret in this namespace: key `token` holds the API token, optional key
    /// `registration_token` a fixed runner registration token (Forgejo 11–14 only).
    #[schemars(length(min = 1, max = MAX_OBJECT_NAME_LEN))]
    pub credentials: String,
    /// Runner labels in forgejo-runner form `name[:docker://image|:host]` (no scheme means
    /// docker, which needs `containerMode: dind`); jobs whose `runs-on` labels are all among
    /// these names are served by this group.
    #[schemars(length(min = 1, max = MAX_LABELS), inner(length(min = 1, max = MAX_LABEL_LEN)))]
    pub labels: Vec<String>,
    /// Seconds between polls of the waiting jobs (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("format" = "int32"))]
    pub poll_interval_seconds: Option<u32>,
    /// Name of a ConfigMap in this namespace whose key `ca.crt` holds extra trusted CA certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    pub ca_bundle_config_map: Option<String>,
    /// HTTP(S) proxy URL for calls to Forgejo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_URL_LEN))]
    pub proxy_url: Option<String>,
}

/// Default seconds between Forgejo polls.
pub const DEFAULT_FORGEJO_POLL_INTERVAL_SECONDS: u32 = 5;

impl ForgejoSpec {
    /// The poll interval with its default applied.
    pub fn poll_interval_seconds(&self) -> u32 {
        self.poll_interval_seconds
            .unwrap_or(DEFAULT_FORGEJO_POLL_INTERVAL_SECONDS)
    }
}

/// Observed state of a `RunnerGroup`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunnerGroupStatus {
    /// Generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `ForgeConnected`, `CredentialsValid`, `Scaling`, `Degraded`, `QueueStalled`, and `RunnerOutdated` where the forge tells which runner release it serves (GitHub).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Runners the forge's demand asks for.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub desired_runners: u32,
    /// Runner Jobs that exist and have not finished.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub current_runners: u32,
    /// Runners whose pod runs and that wait for a job.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub idle_runners: u32,
    /// Runner Jobs whose pod is not running yet.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub pending_runners: u32,
    /// Runners working on a job (the same number as `runningJobs`, under ARC's name).
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub busy_runners: u32,
    /// Runners working on a job.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub running_jobs: u32,
    /// Jobs the forge has that wait for a runner of this group.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub pending_jobs: u32,
    /// Runners that failed since the last successful one.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub failed_runners: u32,
    /// When a runner last failed (drives the backoff of runner creation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_runner_failure_time: Option<Time>,
    /// What Kubernetes said about the last runner that did not start (quoted in `Degraded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_runner_failure_message: Option<String>,
    /// When the forge was last asked for demand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_poll_time: Option<Time>,
    /// GitHub: id of the runner scale set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_set_id: Option<i64>,
    /// Gitea or Forgejo: server version reported by `/api/v1/version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forge_version: Option<String>,
    /// Where `spec.schedules` stand: the window in force, the limits it sets and when that next
    /// changes; unset without schedules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleStatus>,
    /// The shared Actions cache (`spec.cache`): the URL the runners use and the size of its
    /// volume; unset without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheStatus>,
    /// The runners of each class of `spec.classes`, in spec order; empty without classes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub classes: Vec<ClassStatus>,
}

/// The runners of one class (`status.classes[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassStatus {
    /// The class's name.
    pub name: String,
    /// Runner Jobs of the class whose pods may still run (pending, running or terminating).
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub runners: u32,
    /// Runners of the class working on a job.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub busy: u32,
}

/// First line of the generated CRD file, so nobody edits the chart copy by hand.
pub const CRD_YAML_HEADER: &str =
    "# Generated from the Rust types by `forgerunner crd`; do not edit by hand.\n";

/// The `RunnerGroup` CustomResourceDefinition as YAML, exactly as the chart ships it
/// (`charts/forgerunner/crds/runnergroups.yaml`); `forgerunner crd` prints it.
pub fn crd_yaml() -> String {
    let crd = RunnerGroup::crd();
    // Serializing a CRD value cannot fail in practice; JSON is valid YAML, so it is the fallback
    // rather than a panic.
    let body = serde_yaml::to_string(&crd)
        .or_else(|_| serde_json::to_string_pretty(&crd).map(|json| json + "\n"))
        .unwrap_or_default();
    format!("{CRD_YAML_HEADER}{body}")
}

/// The pod template's schema: the typed pod template's, except that `spec.containers` is not
/// required (a template may only add a node selector; the forge's default pod has the runner
/// container).
fn pod_template_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Embedded<PodTemplateSpec>>();
    if let Some(pod) = schema
        .as_object_mut()
        .and_then(|s| s.get_mut("properties"))
        .and_then(|p| p.get_mut("spec"))
        .and_then(serde_json::Value::as_object_mut)
    {
        pod.remove("required");
    }
    schema
}
