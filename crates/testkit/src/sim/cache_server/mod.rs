//! Shared Actions caches in the simulator: a Deployment whose pod runs Gitea Runner's
//! `cache-server` gets a fake of that server ([`protocol`]), reachable through the cluster
//! network ([`super::network`]) at the Service that selects it; simulated runners play their
//! jobs' cache steps against it ([`client`]).
//!
//! The pod is recognised by what it runs, as the real image would: a container whose command
//! is `gitea-runner` or `act_runner` with the subcommand `cache-server` (gitea-runner v1.0.8
//! `internal/app/cmd/cmd.go`: flags `--dir/-d`, `--host/-s`, `--port/-p` and the root flag
//! `--config/-c`; the flags win over the config's `cache.dir/host/port`, `cache-server.go`
//! `runCacheServer`). Its config file is read from the pod's mounts (a Secret or ConfigMap
//! volume; until it exists the server does not start, as the kubelet would not start the
//! container). gitea-runner ≥ 0.6.0 refuses to start without `cache.external_secret`
//! (`cache-server.go`: "cache.external_secret must be set for cache-server"); the legacy
//! `act_runner` binary serves without one.
//!
//! What the server stores lives with the claim mounted at `--dir` (by claim name), so a new
//! server pod of the same Deployment finds the old entries; without a claim each start is
//! empty. No Pod object is created: the Deployment stands for its one pod, its `status` says
//! one replica is ready once the server listens.

pub mod client;
pub mod protocol;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::protocol::{CacheServerStats, ServerCounters, ServerSettings, Volume};
use super::env::{FieldContext, SourceLookup, resolve};
use super::network::{Backend, ClusterNetwork, ServiceRoute};
use super::stores::{Handler, NsStores};

/// Binaries whose `cache-server` subcommand the simulator plays.
pub const CACHE_SERVER_BINARIES: [&str; 2] = ["gitea-runner", "act_runner"];

/// What a cache-server container's command line says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerFlags {
    /// The binary (basename).
    pub binary: String,
    /// `--config/-c`.
    pub config: Option<String>,
    /// `--dir/-d`.
    pub dir: Option<String>,
    /// `--host/-s`.
    pub host: Option<String>,
    /// `--port/-p`.
    pub port: Option<i32>,
}

/// The flags of `container` when it runs a Gitea Runner `cache-server`.
pub fn cache_server_flags(container: &Container) -> Option<ServerFlags> {
    let words: Vec<&str> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .map(String::as_str)
        .collect();
    let binary = words.first()?.rsplit('/').next()?;
    if !CACHE_SERVER_BINARIES.contains(&binary) || !words.contains(&"cache-server") {
        return None;
    }
    let value = |long: &str, short: &str| {
        words.iter().enumerate().find_map(|(i, w)| {
            if let Some(v) = w.strip_prefix(&format!("{long}=")) {
                return Some(v.to_owned());
            }
            (*w == long || *w == short)
                .then(|| words.get(i + 1).map(|v| (*v).to_owned()))
                .flatten()
        })
    };
    Some(ServerFlags {
        binary: binary.to_owned(),
        config: value("--config", "-c"),
        dir: value("--dir", "-d"),
        host: value("--host", "-s"),
        port: value("--port", "-p").and_then(|p| p.parse().ok()),
    })
}

/// The routes of `service`.
fn route_of(service: &Service) -> ServiceRoute {
    let spec = service.spec.as_ref();
    ServiceRoute {
        selector: spec.and_then(|s| s.selector.clone()).unwrap_or_default(),
        ports: spec
            .and_then(|s| s.ports.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|p| match &p.target_port {
                None => Some((p.port, p.port)),
                Some(IntOrString::Int(t)) => Some((p.port, *t)),
                Some(IntOrString::String(_)) => None,
            })
            .collect(),
    }
}

/// Secrets and ConfigMaps read once, for [`resolve`].
#[derive(Default)]
struct Fetched {
    secrets: BTreeMap<String, BTreeMap<String, String>>,
    config_maps: BTreeMap<String, BTreeMap<String, String>>,
}

impl SourceLookup for Fetched {
    fn secret(&self, _namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
        self.secrets.get(name).cloned()
    }

    fn config_map(&self, _namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
        self.config_maps.get(name).cloned()
    }
}

/// `(namespace, name)` of an object.
type Key = (String, String);

/// One server the simulator runs for a Deployment.
struct Running {
    /// The pod template it was started from: a new one restarts the server.
    template: String,
    stop: CancellationToken,
}

/// The simulator's cache-server player.
pub(crate) struct CacheServers {
    client: kube::Client,
    network: ClusterNetwork,
    deployments: NsStores<Deployment>,
    services: NsStores<Service>,
    changed: Arc<Notify>,
    running: Mutex<BTreeMap<Key, Running>>,
    /// By `(namespace, claim)`: the data outlives the server pod.
    volumes: Mutex<BTreeMap<Key, Arc<Mutex<Volume>>>>,
    /// By `(namespace, deployment)`: kept across restarts.
    counters: Mutex<BTreeMap<Key, Arc<ServerCounters>>>,
    service_namespaces: Mutex<BTreeSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Fallback re-check when no watch event arrives (a config Secret created later).
const RECHECK: Duration = Duration::from_millis(300);

impl CacheServers {
    /// Starts the watches of Deployments and Services and the loop that keeps servers in step.
    pub fn start(
        client: &kube::Client,
        namespaces: &[String],
        network: ClusterNetwork,
        shutdown: &CancellationToken,
        tasks: &mut Vec<JoinHandle<()>>,
    ) -> Arc<CacheServers> {
        let changed = Arc::new(Notify::new());
        let on_deployment: Handler<Deployment> = {
            let changed = changed.clone();
            Arc::new(move |_: &watcher::Event<Deployment>, _, _| changed.notify_one())
        };
        let on_service: Handler<Service> = {
            let changed = changed.clone();
            Arc::new(move |_: &watcher::Event<Service>, _, _| changed.notify_one())
        };
        let servers = Arc::new(CacheServers {
            client: client.clone(),
            network,
            deployments: NsStores::start(client, namespaces, on_deployment, shutdown, tasks),
            services: NsStores::start(client, namespaces, on_service, shutdown, tasks),
            changed,
            running: Mutex::new(BTreeMap::new()),
            volumes: Mutex::new(BTreeMap::new()),
            counters: Mutex::new(BTreeMap::new()),
            service_namespaces: Mutex::new(BTreeSet::new()),
        });
        tasks.push(tokio::spawn(servers.clone().run(shutdown.clone())));
        servers
    }

    /// Counts of the server of Deployment `namespace/name`, once it ever started.
    pub fn stats(&self, namespace: &str, name: &str) -> Option<CacheServerStats> {
        lock(&self.counters)
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|c| c.snapshot())
    }

    async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.changed.notified() => {}
                _ = tokio::time::sleep(RECHECK) => {}
            }
            self.sync_services();
            self.sync_servers().await;
        }
        for (_, running) in std::mem::take(&mut *lock(&self.running)) {
            running.stop.cancel();
        }
    }

    fn sync_services(&self) {
        let mut by_ns: BTreeMap<String, BTreeMap<String, ServiceRoute>> = BTreeMap::new();
        for service in self.services.all() {
            let (Some(ns), Some(name)) = (&service.metadata.namespace, &service.metadata.name) else {
                continue;
            };
            by_ns
                .entry(ns.clone())
                .or_default()
                .insert(name.clone(), route_of(&service));
        }
        let mut seen = lock(&self.service_namespaces);
        for ns in seen.iter() {
            if !by_ns.contains_key(ns) {
                self.network.set_services(ns, BTreeMap::new());
            }
        }
        *seen = by_ns.keys().cloned().collect();
        for (ns, routes) in by_ns {
            self.network.set_services(&ns, routes);
        }
    }

    async fn sync_servers(&self) {
        let mut wanted = BTreeMap::new();
        for deployment in self.deployments.all() {
            let meta = &deployment.metadata;
            let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) else {
                continue;
            };
            let spec = &deployment.spec;
            let scaled_down = spec.replicas == Some(0);
            let serves = spec
                .template
                .spec
                .as_ref()
                .is_some_and(|p| p.containers.iter().any(|c| cache_server_flags(c).is_some()));
            if serves && !scaled_down && meta.deletion_timestamp.is_none() {
                wanted.insert((ns.clone(), name.clone()), deployment.clone());
            }
        }
        {
            let mut running = lock(&self.running);
            let stale: Vec<_> = running
                .iter()
                .filter(|(key, r)| wanted.get(*key).is_none_or(|d| template_text(d) != r.template))
                .map(|(key, _)| key.clone())
                .collect();
            for key in stale {
                if let Some(r) = running.remove(&key) {
                    r.stop.cancel();
                    self.network.remove_backend(&key.0, &key.1);
                }
            }
        }
        for (key, deployment) in wanted {
            if lock(&self.running).contains_key(&key) {
                continue;
            }
            if let Some(running) = self.start_server(&key.0, &key.1, &deployment).await {
                lock(&self.running).insert(key, running);
            }
        }
    }

    /// Starts the server of `deployment`; `None` while it cannot start (config not there yet,
    /// or a config the real server refuses).
    async fn start_server(&self, ns: &str, name: &str, deployment: &Deployment) -> Option<Running> {
        let template = &deployment.spec.template;
        let pod_spec = template.spec.as_ref()?;
        let container = pod_spec
            .containers
            .iter()
            .find(|c| cache_server_flags(c).is_some())?;
        let flags = cache_server_flags(container)?;
        let pod = Pod {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("{name}-sim")),
                namespace: Some(ns.to_owned()),
                labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
                ..Default::default()
            },
            spec: Some(pod_spec.clone()),
            status: None,
        };
        let fetched = self.fetch_sources(ns, &pod).await;
        let resolved = resolve(&pod, container, &fetched, &FieldContext::default()).ok()?;
        let config: serde_yaml::Value = match &flags.config {
            Some(path) => serde_yaml::from_str(resolved.files.get(path)?).ok()?,
            None => serde_yaml::Value::Null,
        };
        let cache = &config["cache"];
        let secret = cache["external_secret"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        if secret.is_none() && flags.binary != "act_runner" {
            tracing::debug!(%ns, %name, "simulated cache-server refuses to start without cache.external_secret");
            return None;
        }
        let port = flags
            .port
            .or_else(|| cache["port"].as_i64().and_then(|p| i32::try_from(p).ok()))?;
        let host = flags
            .host
            .clone()
            .or_else(|| cache["host"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "127.0.0.1".to_owned());
        let volume = self.volume_for(ns, pod_spec, container, flags.dir.as_deref());
        let counters = lock(&self.counters)
            .entry((ns.to_owned(), name.to_owned()))
            .or_default()
            .clone();
        let stop = CancellationToken::new();
        let settings = ServerSettings { host, port, secret };
        let addr = protocol::serve(settings, volume, counters, stop.clone())
            .await
            .ok()?;
        self.network.set_backend(
            ns,
            name,
            Backend {
                labels: pod.metadata.labels.clone().unwrap_or_default(),
                port,
                addr,
            },
        );
        self.report_ready(ns, name).await;
        Some(Running {
            template: template_text(deployment),
            stop,
        })
    }

    /// Reads the Secrets and ConfigMaps the pod's volumes name.
    async fn fetch_sources(&self, ns: &str, pod: &Pod) -> Fetched {
        let mut fetched = Fetched::default();
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        for volume in volumes.into_iter().flatten() {
            if let Some(name) = volume.secret.as_ref().and_then(|s| s.secret_name.clone())
                && let Ok(Some(secret)) = Api::<Secret>::namespaced(self.client.clone(), ns)
                    .get_opt(&name)
                    .await
            {
                let data = secret
                    .data
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                    .chain(secret.string_data.clone().into_iter().flatten())
                    .collect();
                fetched.secrets.insert(name, data);
            }
            if let Some(name) = volume.config_map.as_ref().map(|c| c.name.clone())
                && let Ok(Some(cm)) = Api::<ConfigMap>::namespaced(self.client.clone(), ns)
                    .get_opt(&name)
                    .await
            {
                fetched
                    .config_maps
                    .insert(name, cm.data.clone().unwrap_or_default());
            }
        }
        fetched
    }

    /// The storage behind `dir`: the claim mounted there (shared by every start), else new.
    fn volume_for(
        &self,
        ns: &str,
        pod: &k8s_openapi::api::core::v1::PodSpec,
        container: &Container,
        dir: Option<&str>,
    ) -> Arc<Mutex<Volume>> {
        let claim = dir.and_then(|dir| {
            let mount = container
                .volume_mounts
                .iter()
                .flatten()
                .find(|m| m.mount_path.trim_end_matches('/') == dir.trim_end_matches('/'))?;
            let volume = pod.volumes.iter().flatten().find(|v| v.name == mount.name)?;
            Some(volume.persistent_volume_claim.as_ref()?.claim_name.clone())
        });
        match claim {
            Some(claim) => lock(&self.volumes)
                .entry((ns.to_owned(), claim))
                .or_default()
                .clone(),
            None => Arc::default(),
        }
    }

    /// Says in the Deployment's status that its one pod is ready (for `kubectl get deploy`).
    async fn report_ready(&self, ns: &str, name: &str) {
        let status = serde_json::json!({"status": {
            "replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
        }});
        let api = Api::<Deployment>::namespaced(self.client.clone(), ns);
        if let Err(e) = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            tracing::debug!(error = %e, %ns, %name, "simulated cache server: status not written");
        }
    }
}

/// The pod template as text, to notice a change.
fn template_text(deployment: &Deployment) -> String {
    serde_json::to_string(&deployment.spec.template).unwrap_or_default()
}
