//! Watch-fed caches, one reflector per watched namespace (or one for all), with a callback run
//! after each event has been applied to the cache.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Called after each watch event, with the (already updated) cache and the namespace that
/// watch covers (`None` = all namespaces).
pub(crate) type Handler<K> = Arc<dyn Fn(&watcher::Event<K>, &Store<K>, Option<&str>) + Send + Sync>;

/// Caches of one kind across the watched namespaces.
pub(crate) struct NsStores<K: Resource<DynamicType = ()> + 'static> {
    all: Option<Store<K>>,
    by_ns: HashMap<String, Store<K>>,
    /// Set once each cache has its first list and the callback has seen it. Our own signal:
    /// `Store::wait_until_ready` keeps one waker only, so a second concurrent waiter can hang.
    ready: Vec<watch::Receiver<bool>>,
}

impl<K> NsStores<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K: Send + Sync + 'static,
{
    /// Starts the watches (one task per namespace) and returns their caches.
    pub fn start(
        client: &kube::Client,
        namespaces: &[String],
        handler: Handler<K>,
        shutdown: &CancellationToken,
        tasks: &mut Vec<JoinHandle<()>>,
    ) -> Self {
        let mut stores = NsStores {
            all: None,
            by_ns: HashMap::new(),
            ready: Vec::new(),
        };
        if namespaces.is_empty() {
            let (store, ready) = spawn_watch(Api::all(client.clone()), None, handler, shutdown, tasks);
            stores.all = Some(store);
            stores.ready.push(ready);
        } else {
            for ns in namespaces {
                let api = Api::namespaced(client.clone(), ns);
                let (store, ready) = spawn_watch(api, Some(ns.clone()), handler.clone(), shutdown, tasks);
                stores.by_ns.insert(ns.clone(), store);
                stores.ready.push(ready);
            }
        }
        stores
    }

    fn store_for(&self, namespace: &str) -> Option<&Store<K>> {
        self.all.as_ref().or_else(|| self.by_ns.get(namespace))
    }

    /// The cached object `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store_for(namespace)?
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The cached objects of `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.store_for(namespace).map_or_else(Vec::new, |store| {
            store
                .state()
                .into_iter()
                .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
                .collect()
        })
    }

    /// Every cached object, of all watched namespaces.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.all
            .iter()
            .chain(self.by_ns.values())
            .flat_map(|store| store.state())
            .collect()
    }

    /// Waits until every cache has completed its first list; safe to call from many tasks.
    pub async fn wait_ready(&self) {
        for ready in &self.ready {
            let mut ready = ready.clone();
            // An error means the watch task ended (shutdown): nothing left to wait for.
            let _ = ready.wait_for(|synced| *synced).await;
        }
    }
}

fn spawn_watch<K>(
    api: Api<K>,
    scope: Option<String>,
    handler: Handler<K>,
    shutdown: &CancellationToken,
    tasks: &mut Vec<JoinHandle<()>>,
) -> (Store<K>, watch::Receiver<bool>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
    let shutdown = shutdown.clone();
    let cache = reader.clone();
    let (ready_tx, ready_rx) = watch::channel(false);
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => break,
                next = stream.next() => next,
            };
            match next {
                Some(Ok(event)) => {
                    handler(&event, &cache, scope.as_deref());
                    if matches!(event, watcher::Event::InitDone) {
                        ready_tx.send_replace(true);
                    }
                }
                Some(Err(err)) => tracing::debug!(error = %err, "simulator watch error; retrying"),
                None => break,
            }
        }
    }));
    (reader, ready_rx)
}
