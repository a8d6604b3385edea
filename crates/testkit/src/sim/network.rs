//! In-cluster addresses for the simulator: a Service's DNS name and port lead to the local
//! socket of the simulated pod behind it, as cluster DNS and kube-proxy would.
//!
//! Services come from the API (their `selector` and `ports`); backends are the simulated
//! servers the simulator runs for workloads it plays (such as the Actions cache server of a
//! Deployment), each with its pod template's labels and its container port. A name resolves
//! only when the Service exists, one of its ports is the port asked for, and a backend of the
//! Service's namespace carries every selector label and listens on the `targetPort` (an
//! integer; a named `targetPort` resolves to nothing here). So a Service that selects the wrong
//! pods or names the wrong port is unreachable, as it would be in a cluster.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

/// A Service as routing sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceRoute {
    /// `spec.selector`.
    pub selector: BTreeMap<String, String>,
    /// `(port, targetPort)` pairs; `targetPort` defaults to `port`.
    pub ports: Vec<(i32, i32)>,
}

/// A simulated server standing for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// The pod's labels (its template's).
    pub labels: BTreeMap<String, String>,
    /// The container port it serves.
    pub port: i32,
    /// Where it really listens, on this machine.
    pub addr: SocketAddr,
}

#[derive(Debug, Default)]
struct Routes {
    /// `(namespace, name)` → route.
    services: BTreeMap<(String, String), ServiceRoute>,
    /// `(namespace, owner)` → backend; the owner is the workload the simulator plays.
    backends: BTreeMap<(String, String), Backend>,
}

/// The simulated cluster network; clones share one table.
#[derive(Clone, Debug, Default)]
pub struct ClusterNetwork {
    routes: Arc<RwLock<Routes>>,
}

impl ClusterNetwork {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Routes> {
        self.routes.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Routes> {
        self.routes.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the Services of `namespace` with `services` (name → route).
    pub fn set_services(&self, namespace: &str, services: BTreeMap<String, ServiceRoute>) {
        let mut routes = self.write();
        routes.services.retain(|(ns, _), _| ns != namespace);
        for (name, route) in services {
            routes.services.insert((namespace.to_owned(), name), route);
        }
    }

    /// Adds or replaces the backend that workload `owner` of `namespace` runs.
    pub fn set_backend(&self, namespace: &str, owner: &str, backend: Backend) {
        self.write()
            .backends
            .insert((namespace.to_owned(), owner.to_owned()), backend);
    }

    /// Removes the backend of workload `owner` of `namespace`.
    pub fn remove_backend(&self, namespace: &str, owner: &str) {
        self.write()
            .backends
            .remove(&(namespace.to_owned(), owner.to_owned()));
    }

    /// The local address behind `host:port`, where `host` is a Service's DNS name
    /// (`<svc>.<ns>.svc.cluster.local`, `<svc>.<ns>.svc` or `<svc>.<ns>`).
    pub fn resolve(&self, host: &str, port: i32) -> Option<SocketAddr> {
        let (service, namespace) = service_of(host)?;
        let routes = self.read();
        let route = routes.services.get(&(namespace.to_owned(), service.to_owned()))?;
        let target = route.ports.iter().find(|(p, _)| *p == port)?.1;
        routes
            .backends
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|(_, b)| b)
            .find(|b| b.port == target && route.selector.iter().all(|(k, v)| b.labels.get(k) == Some(v)))
            .map(|b| b.addr)
    }

    /// `url` with its in-cluster host and port replaced by the local address behind them;
    /// `None` when the host does not resolve.
    pub fn local_url(&self, url: &str) -> Option<String> {
        let mut parsed = reqwest::Url::parse(url).ok()?;
        let host = parsed.host_str()?.to_owned();
        let port = i32::from(parsed.port_or_known_default()?);
        let addr = self.resolve(&host, port)?;
        parsed.set_ip_host(addr.ip()).ok()?;
        parsed.set_port(Some(addr.port())).ok()?;
        Some(parsed.into())
    }
}

/// `(service, namespace)` of an in-cluster DNS name.
fn service_of(host: &str) -> Option<(&str, &str)> {
    let short = host
        .strip_suffix(".svc.cluster.local")
        .or_else(|| host.strip_suffix(".svc"))
        .unwrap_or(host);
    let (service, namespace) = short.split_once('.')?;
    (!service.is_empty() && !namespace.is_empty() && !namespace.contains('.')).then_some((service, namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn network() -> ClusterNetwork {
        let net = ClusterNetwork::default();
        net.set_services(
            "ci",
            BTreeMap::from([(
                "web-cache".to_owned(),
                ServiceRoute {
                    selector: labels(&[("app", "cache")]),
                    ports: vec![(8088, 8088)],
                },
            )]),
        );
        net
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_service_name_leads_to_the_backend_it_selects() {
        let net = network();
        assert_eq!(
            net.resolve("web-cache.ci.svc.cluster.local", 8088),
            None,
            "no backend yet"
        );
        net.set_backend(
            "ci",
            "other",
            Backend {
                labels: labels(&[("app", "other")]),
                port: 8088,
                addr: addr(1),
            },
        );
        net.set_backend(
            "ci",
            "cache",
            Backend {
                labels: labels(&[("app", "cache"), ("extra", "x")]),
                port: 8088,
                addr: addr(2),
            },
        );
        for host in [
            "web-cache.ci.svc.cluster.local",
            "web-cache.ci.svc",
            "web-cache.ci",
        ] {
            assert_eq!(net.resolve(host, 8088), Some(addr(2)), "{host}");
        }
        assert_eq!(
            net.resolve("web-cache.ci.svc.cluster.local", 80),
            None,
            "not a Service port"
        );
        assert_eq!(net.resolve("web-cache.other.svc.cluster.local", 8088), None);
        assert_eq!(
            net.local_url("http://web-cache.ci.svc.cluster.local:8088/_apis/x?k=1")
                .as_deref(),
            Some("http://127.0.0.1:2/_apis/x?k=1")
        );
        net.remove_backend("ci", "cache");
        assert_eq!(net.resolve("web-cache.ci.svc.cluster.local", 8088), None);
    }

    #[test]
    fn a_target_port_the_backend_does_not_serve_is_unreachable() {
        let net = ClusterNetwork::default();
        net.set_services(
            "ci",
            BTreeMap::from([(
                "s".to_owned(),
                ServiceRoute {
                    selector: labels(&[("app", "cache")]),
                    ports: vec![(80, 8088)],
                },
            )]),
        );
        net.set_backend(
            "ci",
            "cache",
            Backend {
                labels: labels(&[("app", "cache")]),
                port: 4000,
                addr: addr(3),
            },
        );
        assert_eq!(net.resolve("s.ci.svc.cluster.local", 80), None);
        net.set_backend(
            "ci",
            "cache",
            Backend {
                labels: labels(&[("app", "cache")]),
                port: 8088,
                addr: addr(3),
            },
        );
        assert_eq!(net.resolve("s.ci.svc.cluster.local", 80), Some(addr(3)));
    }
}
