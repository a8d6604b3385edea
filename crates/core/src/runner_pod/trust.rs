//! A group's extra CA bundle and proxy, carried into its runner pods.
//!
//! The operator trusts `caBundleConfigMap` and uses `proxyUrl` for its own calls; the runners
//! talk to the same forge, so they need the same two settings, each in the form its runtime
//! reads:
//!
//! - [`TrustStyle::Go`] (Gitea and Forgejo runners): the ConfigMap's `ca.crt` is mounted as one
//!   extra file in `/etc/ssl/certs`, which Go's loader reads whole. `SSL_CERT_DIR` is left alone
//!   on purpose: setting it would replace the system directories instead of adding to them.
//!   Proxy as `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`.
//! - [`TrustStyle::Node`] (GitHub's .NET runner with its node actions): `ca.crt` mounted under
//!   `/usr/local/share/ca-certificates`, `NODE_EXTRA_CA_CERTS` pointing at it and
//!   `RUNNER_UPDATE_CA_CERTS=1` (as ARC's `githubServerTLS` does). Proxy as the lowercase
//!   `https_proxy`/`http_proxy`/`no_proxy` the runner documents.
//!
//! `no_proxy` keeps the pod's own loopback (a Docker daemon or cache server on localhost) and
//! cluster-local names (`.svc`, `.cluster.local`) off the proxy. Every variable here gives way to
//! one the group's `spec.template` sets on the same container (in any letter case), so users can
//! widen or narrow the list; the template merge would otherwise keep the default.
//!
//! The proxy URL is the spec's, not a Secret: it ends up in the pod spec and the runner's
//! environment like any other setting, so proxies should authenticate by other means than
//! credentials in the URL.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EnvVar, KeyToPath, PodSpec, Volume, VolumeMount,
};

use crate::crd::RunnerGroupSpec;
use crate::forge::CA_BUNDLE_KEY;

/// Name of the pod volume that holds the CA bundle ConfigMap.
pub const CA_VOLUME: &str = "forgerunner-ca";
/// Where Go runners find the extra CA (one more file in the directory Go reads).
pub const GO_CA_FILE: &str = "/etc/ssl/certs/forgerunner-ca.crt";
/// Where the GitHub runner finds the extra CA.
pub const NODE_CA_FILE: &str = "/usr/local/share/ca-certificates/forgerunner-ca.crt";
/// Hosts that never go through the proxy: the pod itself and cluster-local names.
pub const DEFAULT_NO_PROXY: &str = "localhost,127.0.0.1,::1,.svc,.cluster.local";

/// How a runner's runtime picks up extra CA roots and a proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrustStyle {
    /// Go programs (gitea-runner, act_runner, forgejo-runner).
    Go,
    /// The GitHub Actions runner (.NET) and the node actions it runs.
    Node,
}

impl TrustStyle {
    fn ca_file(self) -> &'static str {
        match self {
            TrustStyle::Go => GO_CA_FILE,
            TrustStyle::Node => NODE_CA_FILE,
        }
    }

    fn proxy_names(self) -> [&'static str; 3] {
        match self {
            TrustStyle::Go => ["HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"],
            TrustStyle::Node => ["https_proxy", "http_proxy", "no_proxy"],
        }
    }
}

/// A group's CA bundle ConfigMap and proxy, as its runner pods need them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunnerTrust<'a> {
    /// Name of the ConfigMap whose key `ca.crt` holds extra PEM roots.
    pub ca_bundle_config_map: Option<&'a str>,
    /// Proxy URL for every request to the forge (and the internet).
    pub proxy_url: Option<&'a str>,
}

impl<'a> RunnerTrust<'a> {
    /// The settings of a forge block; blank values count as unset.
    pub fn new(ca_bundle_config_map: Option<&'a str>, proxy_url: Option<&'a str>) -> RunnerTrust<'a> {
        let set = |v: Option<&'a str>| v.map(str::trim).filter(|v| !v.is_empty());
        RunnerTrust {
            ca_bundle_config_map: set(ca_bundle_config_map),
            proxy_url: set(proxy_url),
        }
    }

    /// Whether there is anything to add.
    pub fn is_empty(&self) -> bool {
        self.ca_bundle_config_map.is_none() && self.proxy_url.is_none()
    }

    /// Adds the CA volume (once) and, to each container or init container of `pod` named in
    /// `containers`, the CA file and the proxy environment. `spec` is the group's, whose
    /// template may set the same variables itself.
    pub fn apply(&self, pod: &mut PodSpec, containers: &[&str], style: TrustStyle, spec: &RunnerGroupSpec) {
        if self.is_empty() {
            return;
        }
        if let Some(cm) = self.ca_bundle_config_map {
            let volumes = pod.volumes.get_or_insert_with(Vec::new);
            if !volumes.iter().any(|v| v.name == CA_VOLUME) {
                volumes.push(ca_volume(cm));
            }
        }
        let all = pod
            .containers
            .iter_mut()
            .chain(pod.init_containers.iter_mut().flatten());
        for c in all.filter(|c| containers.contains(&c.name.as_str())) {
            let taken = template_env_names(spec, &c.name);
            self.apply_to_container(c, style, &taken);
        }
    }

    /// Adds the CA file and the proxy environment to one container, skipping variables whose
    /// upper-cased name is in `taken`.
    pub fn apply_to_container(&self, c: &mut Container, style: TrustStyle, taken: &BTreeSet<String>) {
        let mut env: Vec<(&str, String)> = Vec::new();
        if self.ca_bundle_config_map.is_some() {
            let file = style.ca_file();
            let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
            if !mounts.iter().any(|m| m.mount_path == file) {
                mounts.push(VolumeMount {
                    name: CA_VOLUME.to_string(),
                    mount_path: file.to_string(),
                    // One file into a directory the image already fills: a subPath mount leaves
                    // the image's own certificates in place.
                    sub_path: Some(CA_BUNDLE_KEY.to_string()),
                    read_only: Some(true),
                    ..VolumeMount::default()
                });
            }
            if style == TrustStyle::Node {
                env.push(("NODE_EXTRA_CA_CERTS", file.to_string()));
                env.push(("RUNNER_UPDATE_CA_CERTS", "1".to_string()));
            }
        }
        if let Some(proxy) = self.proxy_url {
            let [https, http, no] = style.proxy_names();
            env.push((https, proxy.to_string()));
            env.push((http, proxy.to_string()));
            env.push((no, DEFAULT_NO_PROXY.to_string()));
        }
        let list = c.env.get_or_insert_with(Vec::new);
        for (name, value) in env {
            let upper = name.to_ascii_uppercase();
            if taken.contains(&upper) || list.iter().any(|e| e.name.eq_ignore_ascii_case(name)) {
                continue;
            }
            list.push(EnvVar {
                name: name.to_string(),
                value: Some(value),
                value_from: None,
            });
        }
    }
}

/// The ConfigMap volume with only the `ca.crt` key.
fn ca_volume(config_map: &str) -> Volume {
    Volume {
        name: CA_VOLUME.to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.to_string(),
            items: Some(vec![KeyToPath {
                key: CA_BUNDLE_KEY.to_string(),
                path: CA_BUNDLE_KEY.to_string(),
                ..KeyToPath::default()
            }]),
            // The operator reads the same ConfigMap and refuses to work without it, so a pod
            // never waits on a ConfigMap that the group does not also need.
            optional: Some(false),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// Upper-cased names of the env variables the group's template sets on the (init) container
/// `container`.
pub fn template_env_names(spec: &RunnerGroupSpec, container: &str) -> BTreeSet<String> {
    // A template that does not decode is refused by validation before any pod is built.
    let Some(pod) = spec.pod_template().ok().flatten().and_then(|t| t.spec) else {
        return BTreeSet::new();
    };
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .filter(|c| c.name == container)
        .flat_map(|c| c.env.iter().flatten())
        .map(|e| e.name.to_ascii_uppercase())
        .collect()
}

#[cfg(test)]
mod tests;
