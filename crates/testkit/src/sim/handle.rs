//! Starting and controlling the simulator.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::behaviour::ContainerBehaviour;
use super::cache_server::CacheServers;
use super::cache_server::client::RunnerCache;
use super::cache_server::protocol::CacheServerStats;
use super::config::{Counters, NodeLoss, SimConfig, SimError, SimStats};
use super::jobs::controller::JobController;
use super::jobs::events::JobEvents;
use super::jobs::quota::{FailedCreates, PodQuotas};
use super::kubelet::Kubelet;
use super::registry::BehaviourRegistry;
use super::sources::Sources;
use super::stores::{Handler, NsStores};

/// Entry point: a Job controller and a kubelet stand-in driven by watches through any
/// `kube::Client` (the fake API server, or a real cluster with the parts it lacks).
pub struct Simulator;

impl Simulator {
    /// Starts the simulator's tasks on the current Tokio runtime.
    pub fn start(client: kube::Client, config: SimConfig) -> SimHandle {
        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        let registry = Arc::new(BehaviourRegistry::default());
        let counters = Arc::new(Counters::default());
        let quotas = Arc::new(PodQuotas::new(config.pod_quotas.clone()));

        let kubelet = config.run_kubelet.then(|| {
            let sources = Sources::start(&client, &config.namespaces, &shutdown, &mut tasks);
            Arc::new(Kubelet::new(
                client.clone(),
                config.clone(),
                registry.clone(),
                sources,
                counters.clone(),
                shutdown.clone(),
            ))
        });
        let runner_cache = RunnerCache::default();
        // Serving a workload's pod is the kubelet's part.
        let cache_servers = config.run_kubelet.then(|| {
            CacheServers::start(
                &client,
                &config.namespaces,
                runner_cache.network.clone(),
                &shutdown,
                &mut tasks,
            )
        });
        let job_events = config.run_job_controller.then(JobEvents::new);

        let on_pod: Handler<Pod> = {
            let kubelet = kubelet.clone();
            let events = job_events.as_ref().map(|(events, _)| events.clone());
            Arc::new(
                move |event: &watcher::Event<Pod>, store: &Store<Pod>, scope: Option<&str>| {
                    if let Some(kubelet) = &kubelet {
                        kubelet.on_event(event);
                    }
                    if let Some(events) = &events {
                        events.pod_event(event, store, scope);
                    }
                },
            )
        };
        let pods = Arc::new(NsStores::start(
            &client,
            &config.namespaces,
            on_pod,
            &shutdown,
            &mut tasks,
        ));

        if let Some((events, rx)) = job_events {
            let jobs = NsStores::start(
                &client,
                &config.namespaces,
                events.job_handler(),
                &shutdown,
                &mut tasks,
            );
            let controller = Arc::new(JobController {
                client: client.clone(),
                config: config.clone(),
                jobs,
                pods: pods.clone(),
                memory: events.memory(),
                index: events.index(),
                counters: counters.clone(),
                quotas: quotas.clone(),
                failed_creates: FailedCreates::new(config.failed_create_backoff),
            });
            tasks.push(tokio::spawn(controller.run(rx, shutdown.clone())));
        }

        SimHandle {
            registry,
            kubelet,
            pods,
            counters,
            quotas,
            runner_cache,
            cache_servers,
            shutdown,
            tasks,
        }
    }
}

/// A running simulator; dropping it without [`SimHandle::shutdown`] leaves its tasks running
/// until the runtime ends.
pub struct SimHandle {
    registry: Arc<BehaviourRegistry>,
    kubelet: Option<Arc<Kubelet>>,
    pods: Arc<NsStores<Pod>>,
    counters: Arc<Counters>,
    quotas: Arc<PodQuotas>,
    runner_cache: RunnerCache,
    cache_servers: Option<Arc<CacheServers>>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl SimHandle {
    /// Runs `behaviour` for containers whose image starts with `image_prefix` (longest wins).
    pub fn register_behaviour(&self, image_prefix: &str, behaviour: Arc<dyn ContainerBehaviour>) {
        self.registry.register_prefix(image_prefix, behaviour);
    }

    /// Runs `behaviour` for pods labelled `testkit.forgerunner.dev/behaviour=<name>`.
    pub fn register_named_behaviour(&self, name: &str, behaviour: Arc<dyn ContainerBehaviour>) {
        self.registry.register_named(name, behaviour);
    }

    /// Makes images starting with `image_prefix` fail to pull from now on.
    pub fn fail_image_pulls(&self, image_prefix: &str) -> Result<(), SimError> {
        self.kubelet()?.fail_image_pulls(image_prefix);
        Ok(())
    }

    /// Makes images starting with `image_prefix` pull slowly from now on: containers wait
    /// `ContainerCreating` for `delay`, then start (the longest matching prefix wins).
    pub fn slow_image_pulls(&self, image_prefix: &str, delay: Duration) -> Result<(), SimError> {
        self.kubelet()?.slow_image_pulls(image_prefix, delay);
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) a label of the simulated node. Pods whose
    /// `nodeSelector` or required node affinity the node does not match stay `Pending`,
    /// unschedulable; they are re-checked on every change.
    pub fn set_node_label(&self, key: &str, value: Option<&str>) -> Result<(), SimError> {
        self.kubelet()?.set_node_label(key, value);
        Ok(())
    }

    /// Sets (`Some`, a quantity such as `"2"`, `"500m"`, `"4Gi"`) or lifts (`None`) the node's
    /// allocatable amount of `resource`. Pods requesting more stay `Pending`, unschedulable;
    /// they are re-checked on every change.
    pub fn set_node_allocatable(&self, resource: &str, quantity: Option<&str>) -> Result<(), SimError> {
        self.kubelet()?.set_node_allocatable(resource, quantity)
    }

    /// Caps (`Some`) or uncaps (`None`) the non-terminal pods of `namespace`, like a `pods`
    /// ResourceQuota named [`POD_QUOTA_NAME`](super::POD_QUOTA_NAME): the Job controller
    /// records a `FailedCreate` event instead of creating a pod beyond it, and retries with
    /// backoff. Only the simulator's Job controller honours it.
    pub fn set_pod_quota(&self, namespace: &str, limit: Option<u32>) {
        self.quotas.set(namespace, limit);
    }

    /// Waits until the pod caches have their first list (Jobs and Secrets follow the same path).
    pub async fn wait_ready(&self) {
        self.pods.wait_ready().await;
    }

    fn kubelet(&self) -> Result<&Arc<Kubelet>, SimError> {
        self.kubelet.as_ref().ok_or(SimError::KubeletDisabled)
    }

    /// Evicts a pod (phase `Failed`, reason `Evicted`); its behaviour is cancelled.
    pub async fn evict(&self, namespace: &str, pod: &str) -> Result<(), SimError> {
        self.kubelet()?.evict(namespace, pod).await
    }

    /// Loses the node under one pod mid-run, as `mode` says ([`NodeLoss::Unreachable`] plays
    /// what a real control plane does).
    pub async fn lose_pod(&self, namespace: &str, pod: &str, mode: NodeLoss) -> Result<(), SimError> {
        self.kubelet()?.lose_pod(namespace, pod, mode).await
    }

    /// Loses the node under every unfinished pod; returns how many were hit.
    pub async fn lose_node(&self, mode: NodeLoss) -> Result<usize, SimError> {
        self.kubelet()?.lose_node(mode).await
    }

    /// The cluster network and cache journal for simulated runners: hand it to a runner
    /// behaviour so its jobs reach the cache servers the simulator plays, and read what their
    /// cache steps found from its journal.
    pub fn runner_cache(&self) -> RunnerCache {
        self.runner_cache.clone()
    }

    /// Counts of the simulated cache server of Deployment `namespace/name` (see
    /// [`super::cache_server`]), once it ever started.
    pub fn cache_server_stats(&self, namespace: &str, name: &str) -> Option<CacheServerStats> {
        self.cache_servers.as_ref()?.stats(namespace, name)
    }

    /// Counters of what the simulator did so far.
    pub fn stats(&self) -> SimStats {
        self.counters.snapshot()
    }

    /// Stops all watches, reconciles and behaviours (behaviours see their `cancel` fire).
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
