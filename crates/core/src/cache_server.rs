//! The shared Actions cache of a Gitea or Forgejo group (`spec.cache`), built as pure objects.
//!
//! Both runners take their cache settings from a config file only (no flag, no environment):
//! Gitea Runner's `cache.external_server` and `cache.external_secret`, forgejo-runner's
//! `cache.external_server` and `cache.secret`. Each ships a `cache-server` subcommand that serves
//! the same protocol from a directory. So a group with a cache gets, all under one name
//! ([`crate::names::cache_name`]):
//! - a **Deployment** of one `cache-server` pod (strategy `Recreate`: the server keeps a bbolt
//!   index that one process opens at a time), restricted Pod Security, a read-only root
//!   filesystem, the volume at [`CACHE_DIR`] and its config from the Secret;
//! - a **PersistentVolumeClaim** (`ReadWriteOnce`, `spec.cache.size`, `storageClassName`);
//! - a **Service** whose port is the server's own port (Gitea's job containers call the URL the
//!   server builds from `--host` and its listen port);
//! - a **NetworkPolicy** admitting only the group's runner pods, on that port;
//! - a **Secret** with the shared secret and the two config files that hold it. The secret is
//!   in no pod spec, argument, environment value, log or status: the configs are mounted.
//!
//! The first four are owned by the group. The Secret is owned by the Deployment: the operator
//! holds no right to delete Secrets (only the Job controller's and the garbage collector's
//! cascades remove runner Secrets), so removing `spec.cache` deletes the Deployment and the
//! garbage collector takes the Secret with it; deleting the group takes both.
//!
//! What differs per forge (image, command, port, config keys) comes from
//! [`crate::forge::ForgeSession::cache_server`] as a [`CacheServer`].

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, KeyToPath, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Probe, Secret,
    SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec, TCPSocketAction, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::crd::{CacheSpec, RunnerGroup, RunnerGroupSpec};
use crate::forge::SecretValue;
use crate::names::cache_name;
use crate::runner_job::{
    FORGE_LABEL, GROUP_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, RUNNER_CONTAINER, RunnerJobError,
    group_owner_reference,
};
use crate::runner_pod::security::{RunAs, harden, harden_container};

/// Where the cache server keeps its index and blobs: the claim's mount in the cache pod.
pub const CACHE_DIR: &str = "/cache";
/// Where the Secret's config files are mounted, in the cache pod and in the runner pods.
pub const CONFIG_DIR: &str = "/etc/forgerunner-cache";
/// The server's config file in the cache pod (Secret key [`SERVER_CONFIG_KEY`]).
pub const SERVER_CONFIG_PATH: &str = "/etc/forgerunner-cache/server.yaml";
/// The runner's config file in a runner pod (Secret key [`RUNNER_CONFIG_KEY`]).
pub const RUNNER_CONFIG_PATH: &str = "/etc/forgerunner-cache/config.yaml";
/// Secret key of the shared secret itself, kept so a later pass reuses it.
pub const SECRET_KEY: &str = "secret";
/// Secret key of the server's config file.
pub const SERVER_CONFIG_KEY: &str = "server.yaml";
/// Secret key of the runners' config file.
pub const RUNNER_CONFIG_KEY: &str = "runner.yaml";
/// Label naming what a forgerunner object is for; the cache's objects say [`COMPONENT_VALUE`].
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// Value of [`COMPONENT_LABEL`] on the cache's objects.
pub const COMPONENT_VALUE: &str = "actions-cache";
/// Label naming the group a cache serves. Not [`GROUP_LABEL`]: the operator lists the pods of a
/// group by that label as its runner pods.
pub const CACHE_OF_LABEL: &str = "forgerunner.dev/cache-of";
/// Annotation holding a hash of what the operator wants of the object: a different one makes the
/// next check update it (the server's defaults never count as a change).
pub const SPEC_HASH_ANNOTATION: &str = "forgerunner.dev/spec-hash";
/// Annotation on the cache pod template holding a hash of the server config, so a new config
/// (or a new secret) restarts the server. A hash, never the config.
pub const CONFIG_HASH_ANNOTATION: &str = "forgerunner.dev/config-hash";
/// The numeric user, group and `fsGroup` of the cache pod (the runner images' own user; the claim
/// is writable through `fsGroup`).
pub const CACHE_RUN_AS: RunAs = RunAs {
    user: 1000,
    group: 1000,
};
/// Default `spec.cache.size`.
pub const DEFAULT_CACHE_SIZE: &str = "10Gi";
/// Smallest `spec.cache.size`, in bytes (1Gi).
pub const MIN_CACHE_BYTES: u128 = 1 << 30;
/// Largest `spec.cache.size`, in bytes (10Ti): a typo must not claim a disk array.
pub const MAX_CACHE_BYTES: u128 = 10 << 40;
/// The schema's pattern of `spec.cache.size`: a whole number and an optional unit suffix.
pub const CACHE_SIZE_PATTERN: &str = r"^[0-9]{1,16}(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$";

/// Name of the cache container in the cache pod.
const SERVER_CONTAINER: &str = "cache-server";
/// Name of the runner pods' volume holding the runner config.
pub const RUNNER_CONFIG_VOLUME: &str = "actions-cache-config";
const CACHE_VOLUME: &str = "cache";
const CONFIG_VOLUME: &str = "config";
const TMP_VOLUME: &str = "tmp";

/// What a forge's cache server is ([`crate::forge::ForgeSession::cache_server`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheServer {
    /// Image of the server: the runners' own, so server and runners speak the same release
    /// (forgejo-runner's MAC changed between releases).
    pub image: String,
    /// The container's command (the runner binary).
    pub command: Vec<String>,
    /// Its arguments: `cache-server`, the config at [`SERVER_CONFIG_PATH`], [`CACHE_DIR`], the port.
    pub args: Vec<String>,
    /// The port the server listens on; the Service's port too.
    pub port: i32,
    /// The URL runners are given (`cache.external_server`), shown in `status.cache.url`.
    pub url: String,
    /// The server's config file, the secret in it.
    pub server_config: SecretValue,
    /// The runners' config file, the secret in it.
    pub runner_config: SecretValue,
}

/// The cache as `status.cache` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheStatus {
    /// The URL the runners reach the cache server at.
    pub url: String,
    /// The size of the cache's volume: its capacity once bound, else the size asked for.
    pub size: String,
}

/// The objects of a group's cache the group owns; the Secret is built apart
/// ([`cache_secret`]), as it is owned by the Deployment once that exists.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheObjects {
    /// The server.
    pub deployment: Deployment,
    /// Its volume.
    pub claim: PersistentVolumeClaim,
    /// Its address.
    pub service: Service,
    /// Who may reach it.
    pub policy: NetworkPolicy,
}

/// The in-cluster host name of the group's cache Service (`<name>.<namespace>.svc.cluster.local`):
/// what Gitea's server puts in its download URLs, and what runners and jobs resolve.
pub fn service_host(group: &RunnerGroup) -> String {
    format!(
        "{}.{}.svc.cluster.local",
        cache_name(&group.name_any()),
        group.namespace().unwrap_or_default()
    )
}

/// A fresh shared secret: 32 random bytes, hex.
pub fn new_secret() -> SecretValue {
    let bytes: [u8; 32] = rand::rng().random();
    SecretValue::new(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The bytes `size` stands for, if it is a whole number with an optional Kubernetes unit suffix
/// (`Ki`…`Ei`, `k`…`E`); decimals and exponents are not accepted.
pub fn size_bytes(size: &str) -> Option<u128> {
    const UNITS: [(&str, u128); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    let (digits, unit) = UNITS
        .iter()
        .find_map(|(suffix, unit)| size.strip_suffix(suffix).map(|d| (d, *unit)))
        .unwrap_or((size, 1));
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u128>().ok().map(|n| n * unit)
}

/// The labels of every cache object of `group`.
pub fn cache_labels(group: &RunnerGroup) -> BTreeMap<String, String> {
    let mut labels = cache_selector(group);
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned());
    labels.insert(FORGE_LABEL.to_owned(), group.spec.forge.as_str().to_owned());
    labels
}

/// The labels that select the cache pod (Deployment, Service, NetworkPolicy).
pub fn cache_selector(group: &RunnerGroup) -> BTreeMap<String, String> {
    BTreeMap::from([
        (COMPONENT_LABEL.to_owned(), COMPONENT_VALUE.to_owned()),
        (CACHE_OF_LABEL.to_owned(), group.name_any()),
    ])
}

/// The labels every runner pod of `group` carries and the NetworkPolicy admits
/// ([`crate::runner_job::runner_labels`] without the forge, which a spec may change).
fn runner_selector(group: &RunnerGroup) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (GROUP_LABEL.to_owned(), group.name_any()),
    ])
}

/// A stable hash of `value`'s JSON, for [`SPEC_HASH_ANNOTATION`] and [`CONFIG_HASH_ANNOTATION`].
fn hash_of(value: &impl Serialize) -> String {
    let text = serde_json::to_string(value).unwrap_or_default();
    format!("{:016x}", crate::stable_hash::fnv1a(text.as_bytes()))
}

fn meta(group: &RunnerGroup, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(cache_name(&group.name_any())),
        namespace: group.namespace(),
        labels: Some(cache_labels(group)),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

/// Sets [`SPEC_HASH_ANNOTATION`] of `meta` to the hash of `spec`.
fn stamp(meta: &mut ObjectMeta, spec: &impl Serialize) {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(SPEC_HASH_ANNOTATION.to_owned(), hash_of(spec));
}

/// The group's cache objects for `cache` served by `server`. Fails only for a group not read
/// from the API server (no uid to own the objects).
pub fn cache_objects(
    group: &RunnerGroup,
    cache: &CacheSpec,
    server: &CacheServer,
) -> Result<CacheObjects, RunnerJobError> {
    let owner = group_owner_reference(group)?;
    let mut deployment = Deployment {
        metadata: meta(group, &owner),
        spec: deployment_spec(group, server),
        status: None,
    };
    stamp(&mut deployment.metadata, &deployment.spec);
    let mut claim = PersistentVolumeClaim {
        metadata: meta(group, &owner),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(cache.size.clone()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: cache.storage_class_name.clone(),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    };
    stamp(&mut claim.metadata, &claim.spec);
    let mut service = Service {
        metadata: meta(group, &owner),
        spec: Some(ServiceSpec {
            selector: Some(cache_selector(group)),
            ports: Some(vec![ServicePort {
                name: Some("http".to_owned()),
                port: server.port,
                target_port: Some(IntOrString::Int(server.port)),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    stamp(&mut service.metadata, &service.spec);
    let mut policy = NetworkPolicy {
        metadata: meta(group, &owner),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(cache_selector(group)),
                match_expressions: None,
            }),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                // A pod selector without a namespace selector: the group's namespace only.
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(runner_selector(group)),
                        match_expressions: None,
                    }),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(server.port)),
                    protocol: Some("TCP".to_owned()),
                    end_port: None,
                }]),
            }]),
            egress: None,
        }),
    };
    stamp(&mut policy.metadata, &policy.spec);
    Ok(CacheObjects {
        deployment,
        claim,
        service,
        policy,
    })
}

/// The cache pod's Deployment spec: one replica, recreated rather than rolled.
fn deployment_spec(group: &RunnerGroup, server: &CacheServer) -> DeploymentSpec {
    let selector = cache_selector(group);
    let labels = cache_labels(group);
    let annotations = BTreeMap::from([(
        CONFIG_HASH_ANNOTATION.to_owned(),
        // The config holds the secret: a new secret restarts the server too. The hash reveals
        // nothing of a 256-bit random secret.
        hash_of(&server.server_config.expose()),
    )]);
    DeploymentSpec {
        replicas: Some(1),
        revision_history_limit: Some(2),
        selector: LabelSelector {
            match_labels: Some(selector),
            match_expressions: None,
        },
        strategy: Some(DeploymentStrategy {
            type_: Some("Recreate".to_owned()),
            rolling_update: None,
        }),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            }),
            spec: Some(pod_spec(group, server)),
        },
        ..DeploymentSpec::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// The cache pod: restricted Pod Security with a read-only root filesystem; it writes to the
/// claim and to an emptyDir at `/tmp` (its `HOME`) only.
fn pod_spec(group: &RunnerGroup, server: &CacheServer) -> PodSpec {
    let mut container = Container {
        name: SERVER_CONTAINER.to_owned(),
        image: Some(server.image.clone()),
        command: Some(server.command.clone()),
        args: Some(server.args.clone()),
        env: Some(vec![EnvVar {
            name: "HOME".to_owned(),
            value: Some("/tmp".to_owned()),
            value_from: None,
        }]),
        ports: Some(vec![ContainerPort {
            name: Some("http".to_owned()),
            container_port: server.port,
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(server.port),
                host: None,
            }),
            period_seconds: Some(10),
            ..Probe::default()
        }),
        volume_mounts: Some(vec![
            mount(CACHE_VOLUME, CACHE_DIR, false),
            mount(CONFIG_VOLUME, CONFIG_DIR, true),
            mount(TMP_VOLUME, "/tmp", false),
        ]),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    harden_container(&mut container);
    let mut pod = PodSpec {
        containers: vec![container],
        enable_service_links: Some(false),
        image_pull_secrets: template_pull_secrets(&group.spec),
        volumes: Some(vec![
            Volume {
                name: CACHE_VOLUME.to_owned(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: cache_name(&group.name_any()),
                    read_only: None,
                }),
                ..Volume::default()
            },
            config_volume(group, CONFIG_VOLUME, SERVER_CONFIG_KEY, "server.yaml"),
            Volume {
                name: TMP_VOLUME.to_owned(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            },
        ]),
        ..PodSpec::default()
    };
    harden(&mut pod, CACHE_RUN_AS);
    pod
}

/// The image pull Secrets of the group's pod template: the server runs the runners' image, from
/// the same registry.
fn template_pull_secrets(
    spec: &RunnerGroupSpec,
) -> Option<Vec<k8s_openapi::api::core::v1::LocalObjectReference>> {
    spec.pod_template()
        .ok()
        .flatten()
        .and_then(|t| t.spec)
        .and_then(|s| s.image_pull_secrets)
        .filter(|s| !s.is_empty())
}

/// A volume of the cache Secret holding just `key`, as `path`.
fn config_volume(group: &RunnerGroup, name: &str, key: &str, path: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(cache_name(&group.name_any())),
            items: Some(vec![KeyToPath {
                key: key.to_owned(),
                path: path.to_owned(),
                ..KeyToPath::default()
            }]),
            optional: Some(false),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The cache Secret: the shared secret and both config files, owned by `owner` (the cache
/// Deployment).
pub fn cache_secret(
    group: &RunnerGroup,
    server: &CacheServer,
    secret: &SecretValue,
    owner: OwnerReference,
) -> Secret {
    let bytes = |v: &SecretValue| ByteString(v.expose().as_bytes().to_vec());
    Secret {
        metadata: meta(group, &owner),
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([
            (SECRET_KEY.to_owned(), bytes(secret)),
            (SERVER_CONFIG_KEY.to_owned(), bytes(&server.server_config)),
            (RUNNER_CONFIG_KEY.to_owned(), bytes(&server.runner_config)),
        ])),
        ..Secret::default()
    }
}

/// The shared secret an existing cache Secret holds, if any (a later pass reuses it rather than
/// rotating it: a new one restarts the server and fails the jobs running).
pub fn stored_secret(secret: &Secret) -> Option<SecretValue> {
    let value = secret.data.as_ref()?.get(SECRET_KEY)?;
    let text = std::str::from_utf8(&value.0).ok()?.trim();
    (!text.is_empty()).then(|| SecretValue::new(text))
}

/// What `status.cache` says of a cache served at `url` on `claim`.
pub fn cache_status(url: &str, claim: &PersistentVolumeClaim) -> CacheStatus {
    let capacity = claim
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    let requested = claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    CacheStatus {
        url: url.to_owned(),
        size: capacity.or(requested).map(|q| q.0.clone()).unwrap_or_default(),
    }
}

/// Mounts the group's runner config (Secret key [`RUNNER_CONFIG_KEY`] only: never the server's
/// config or the bare secret) read-only into `containers` of a runner pod, and returns the path
/// the runner's `--config` must name; `None` when the group has no cache (the pod is left
/// alone).
pub fn mount_runner_config(
    group: &RunnerGroup,
    pod: &mut PodSpec,
    containers: &[&str],
) -> Option<&'static str> {
    group.spec.cache.as_ref()?;
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    if !volumes.iter().any(|v| v.name == RUNNER_CONFIG_VOLUME) {
        volumes.push(config_volume(
            group,
            RUNNER_CONFIG_VOLUME,
            RUNNER_CONFIG_KEY,
            "config.yaml",
        ));
    }
    let all = pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten());
    for c in all.filter(|c| containers.contains(&c.name.as_str())) {
        let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
        if !mounts.iter().any(|m| m.mount_path == CONFIG_DIR) {
            mounts.push(mount(RUNNER_CONFIG_VOLUME, CONFIG_DIR, true));
        }
    }
    Some(RUNNER_CONFIG_PATH)
}

/// Whether the user's template names a config file of its own for the runner (`CONFIG_FILE` on
/// the `runner` container, the convention both forges' pods follow): the operator then cannot
/// give the runner its cache config too.
pub fn template_names_config_file(spec: &RunnerGroupSpec) -> bool {
    let Ok(Some(template)) = spec.pod_template() else {
        return false;
    };
    template
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter(|c| c.name == RUNNER_CONTAINER)
        .flat_map(|c| c.env.iter().flatten())
        .any(|e| e.name == "CONFIG_FILE")
}

#[cfg(test)]
mod tests;
