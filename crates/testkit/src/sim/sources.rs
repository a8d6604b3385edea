//! Cached Secrets and ConfigMaps for env/volume resolution, plus a change signal so pods
//! waiting for a missing Secret re-check as soon as one arrives.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::env::SourceLookup;
use super::stores::{Handler, NsStores};

/// Secret and ConfigMap caches of the watched namespaces.
pub(crate) struct Sources {
    secrets: NsStores<Secret>,
    config_maps: NsStores<ConfigMap>,
    changes: watch::Receiver<u64>,
}

impl Sources {
    /// Starts the watches.
    pub fn start(
        client: &kube::Client,
        namespaces: &[String],
        shutdown: &CancellationToken,
        tasks: &mut Vec<JoinHandle<()>>,
    ) -> Sources {
        let (tx, changes) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let bump = {
            let tx = tx.clone();
            move || tx.send_modify(|n| *n = n.wrapping_add(1))
        };
        let on_secret: Handler<Secret> = {
            let bump = bump.clone();
            Arc::new(move |_, _, _| bump())
        };
        let on_config_map: Handler<ConfigMap> = Arc::new(move |_, _, _| bump());
        Sources {
            secrets: NsStores::start(client, namespaces, on_secret, shutdown, tasks),
            config_maps: NsStores::start(client, namespaces, on_config_map, shutdown, tasks),
            changes,
        }
    }

    /// A receiver that fires on any Secret/ConfigMap change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// Waits for the first list of both kinds.
    pub async fn wait_ready(&self) {
        self.secrets.wait_ready().await;
        self.config_maps.wait_ready().await;
    }
}

impl SourceLookup for Sources {
    fn secret(&self, namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
        let secret = self.secrets.get(namespace, name)?;
        let mut out: BTreeMap<String, String> = secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
            .collect();
        // An API server converts stringData into data on write; a minimal fake may not.
        out.extend(
            secret
                .string_data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        Some(out)
    }

    fn config_map(&self, namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
        let cm = self.config_maps.get(namespace, name)?;
        let mut out = cm.data.clone().unwrap_or_default();
        out.extend(
            cm.binary_data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned())),
        );
        Some(out)
    }
}
