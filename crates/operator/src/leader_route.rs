//! Where webhook deliveries go: this process when it leads, else the leader's HTTP endpoint.
//!
//! Only the leader runs reconcilers, so a delivery answered by a standby would wake nothing.
//! The leader writes its endpoint (`http://$POD_IP:<port>`) into an annotation of the Lease it
//! renews anyway; standbys read it on the Lease reads they make while campaigning and forward
//! deliveries there. No extra API calls, and no Service or extra RBAC is needed.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, PoisonError, RwLock};

/// Lease annotation holding the leader's webhook endpoint.
pub const ENDPOINT_ANNOTATION: &str = "forgerunner.dev/webhook-endpoint";

/// Longest endpoint taken from a Lease (an IPv6 URL with a port is about 50 characters).
const MAX_ENDPOINT_LEN: usize = 128;

/// Where deliveries should be handled now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Route {
    /// No leader is known (campaigning, or the leader advertises no endpoint).
    #[default]
    Unknown,
    /// This process leads (or leader election is off).
    Local,
    /// Another instance leads and serves webhooks at this base URL.
    Remote(String),
}

/// The current [`Route`], shared between the leadership loop, the lease reads and the HTTP
/// handlers.
#[derive(Clone, Debug, Default)]
pub struct LeaderRoute(Arc<RwLock<Route>>);

impl LeaderRoute {
    /// The route now.
    pub fn get(&self) -> Route {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Replaces the route.
    pub fn set(&self, route: Route) {
        let mut current = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if *current != route {
            tracing::debug!(route = ?route, "webhook route changed");
            *current = route;
        }
    }

    /// Records what a Lease held by someone else advertises (its annotations).
    pub fn learn_from(&self, annotations: Option<&BTreeMap<String, String>>) {
        self.set(advertised(annotations).map_or(Route::Unknown, Route::Remote));
    }
}

/// The endpoint a Lease advertises, if it is a plain `http://` URL of sane length.
pub fn advertised(annotations: Option<&BTreeMap<String, String>>) -> Option<String> {
    annotations?
        .get(ENDPOINT_ANNOTATION)
        .map(|v| v.trim())
        .filter(|v| v.len() <= MAX_ENDPOINT_LEN && v.starts_with("http://") && v.len() > "http://".len())
        .map(str::to_owned)
}

/// Writes `endpoint` into `annotations` (or removes a stale one when we advertise nothing).
pub fn advertise(annotations: &mut Option<BTreeMap<String, String>>, endpoint: Option<&str>) {
    match endpoint {
        Some(url) => {
            annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ENDPOINT_ANNOTATION.to_owned(), url.to_owned());
        }
        None => {
            if let Some(a) = annotations.as_mut() {
                a.remove(ENDPOINT_ANNOTATION);
            }
        }
    }
}

/// Our endpoint as peers reach it: `http://<pod_ip>:<port>`; `None` without a valid pod IP
/// (then standbys cannot forward and answer 503).
pub fn endpoint_url(pod_ip: Option<&str>, port: u16) -> Option<String> {
    match pod_ip?.trim().parse::<IpAddr>().ok()? {
        IpAddr::V4(ip) => Some(format!("http://{ip}:{port}")),
        IpAddr::V6(ip) => Some(format!("http://[{ip}]:{port}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_urls_from_pod_ips() {
        assert_eq!(
            endpoint_url(Some("10.1.2.3"), 8080).as_deref(),
            Some("http://10.1.2.3:8080")
        );
        assert_eq!(
            endpoint_url(Some(" fd00::1 "), 8080).as_deref(),
            Some("http://[fd00::1]:8080")
        );
        assert_eq!(endpoint_url(Some("pod.local"), 8080), None);
        assert_eq!(endpoint_url(Some(""), 8080), None);
        assert_eq!(endpoint_url(None, 8080), None);
    }

    #[test]
    fn the_annotation_round_trips_and_junk_is_ignored() {
        let mut a = None;
        advertise(&mut a, Some("http://10.0.0.1:8080"));
        assert_eq!(advertised(a.as_ref()).as_deref(), Some("http://10.0.0.1:8080"));
        advertise(&mut a, None);
        assert_eq!(advertised(a.as_ref()), None);
        for junk in [
            "https://x",
            "file:///etc/passwd",
            "http://",
            &format!("http://{}", "a".repeat(200)),
        ] {
            let mut a = None;
            advertise(&mut a, Some(junk));
            assert_eq!(advertised(a.as_ref()), None, "{junk}");
        }
    }

    #[test]
    fn a_standby_follows_what_the_lease_says() {
        let route = LeaderRoute::default();
        assert_eq!(route.get(), Route::Unknown);
        let mut a = None;
        advertise(&mut a, Some("http://10.0.0.1:8080"));
        route.learn_from(a.as_ref());
        assert_eq!(route.get(), Route::Remote("http://10.0.0.1:8080".into()));
        route.learn_from(None);
        assert_eq!(route.get(), Route::Unknown);
        route.set(Route::Local);
        assert_eq!(route.get(), Route::Local);
    }
}
