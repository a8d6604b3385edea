//! The scheduler's part of the simulated node: whether a pod fits the one node (its
//! `nodeSelector`, required node affinity and resource requests), with kube-scheduler's messages
//! for the pods that do not.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, NodeSelectorRequirement, Pod};

use super::config::SimConfig;
use super::podstatus::is_sidecar;

/// Label every node carries with its own name.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The second sentence kube-scheduler adds when preempting would not help a selector mismatch.
const PREEMPTION_NOT_HELPFUL: &str =
    "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";
/// The second sentence kube-scheduler adds when no lower-priority pod could make room.
const NO_VICTIMS: &str =
    "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";

/// What the scheduler knows of the simulated node.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NodeView {
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Allocatable amount per resource; resources not listed are unlimited.
    pub allocatable: BTreeMap<String, f64>,
}

impl NodeView {
    /// The node `config` describes; quantities that do not parse are left out (unlimited),
    /// with a warning, because a typo should not silently block every pod.
    pub fn from_config(config: &SimConfig) -> NodeView {
        let mut labels = config.node_labels.clone();
        labels
            .entry(HOSTNAME_LABEL.to_owned())
            .or_insert_with(|| config.node_name.clone());
        let mut allocatable = BTreeMap::new();
        for (resource, quantity) in &config.node_allocatable {
            match parse_quantity(quantity) {
                Some(amount) => {
                    allocatable.insert(resource.clone(), amount);
                }
                None => tracing::warn!(%resource, %quantity, "ignoring unparsable node allocatable"),
            }
        }
        NodeView { labels, allocatable }
    }

    /// Why `pod` cannot be scheduled on this node, worded as kube-scheduler's `PodScheduled`
    /// message; `None` when it fits.
    pub fn unschedulable(&self, pod: &Pod) -> Option<String> {
        // The scheduler's filters run node affinity before resource fit and report only the
        // first failing one per node.
        if !self.matches_selectors(pod) {
            return Some(format!(
                "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. {PREEMPTION_NOT_HELPFUL}"
            ));
        }
        let requests = pod_requests(pod);
        let short: Vec<String> = requests
            .iter()
            .filter(|(resource, amount)| self.allocatable.get(*resource).is_some_and(|cap| *amount > cap))
            .map(|(resource, _)| format!("1 Insufficient {resource}"))
            .collect();
        if short.is_empty() {
            return None;
        }
        Some(format!(
            "0/1 nodes are available: {}. {NO_VICTIMS}",
            short.join(", ")
        ))
    }

    fn matches_selectors(&self, pod: &Pod) -> bool {
        let Some(spec) = pod.spec.as_ref() else {
            return true;
        };
        let selector_ok = spec
            .node_selector
            .iter()
            .flatten()
            .all(|(k, v)| self.labels.get(k) == Some(v));
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref());
        // Terms are ORed, the expressions within a term ANDed; no terms means no constraint.
        let affinity_ok = required.is_none_or(|r| {
            r.node_selector_terms.is_empty()
                || r.node_selector_terms.iter().any(|term| {
                    term.match_expressions
                        .iter()
                        .flatten()
                        .all(|req| self.requirement_holds(req))
                })
        });
        selector_ok && affinity_ok
    }

    fn requirement_holds(&self, req: &NodeSelectorRequirement) -> bool {
        let value = self.labels.get(&req.key);
        let values = req.values.as_deref().unwrap_or_default();
        let as_int = |s: &str| s.parse::<i64>().ok();
        match req.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            "Gt" | "Lt" => {
                let (Some(have), Some(bound)) = (
                    value.and_then(|v| as_int(v)),
                    values.first().and_then(|v| as_int(v)),
                ) else {
                    return false;
                };
                if req.operator == "Gt" {
                    have > bound
                } else {
                    have < bound
                }
            }
            _ => false,
        }
    }
}

/// One container's request for `resource` (a limit alone counts as the request, as the API
/// server defaults it).
fn request_of(c: &Container, resource: &str) -> f64 {
    let Some(res) = c.resources.as_ref() else {
        return 0.0;
    };
    let quantity = res
        .requests
        .as_ref()
        .and_then(|r| r.get(resource))
        .or_else(|| res.limits.as_ref().and_then(|l| l.get(resource)));
    quantity.and_then(|q| parse_quantity(&q.0)).unwrap_or(0.0)
}

/// The pod's effective requests: main containers and sidecars run together; each
/// run-to-completion init container runs alone beside the sidecars started before it.
pub(crate) fn pod_requests(pod: &Pod) -> BTreeMap<String, f64> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::new();
    };
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let mut names: Vec<String> = Vec::new();
    for c in spec.containers.iter().chain(init) {
        let res = c.resources.as_ref();
        for map in [
            res.and_then(|r| r.requests.as_ref()),
            res.and_then(|r| r.limits.as_ref()),
        ]
        .into_iter()
        .flatten()
        {
            names.extend(map.keys().cloned());
        }
    }
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|resource| {
            let mut sidecars = 0.0;
            let mut peak_init: f64 = 0.0;
            for c in init {
                if is_sidecar(c) {
                    sidecars += request_of(c, &resource);
                } else {
                    peak_init = peak_init.max(sidecars + request_of(c, &resource));
                }
            }
            let main: f64 = spec.containers.iter().map(|c| request_of(c, &resource)).sum();
            (resource, peak_init.max(main + sidecars))
        })
        .collect()
}

/// Parses a Kubernetes quantity (`500m`, `2`, `1.5Gi`, `10M`, `1e3`) into base units.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let (number, factor) = SUFFIXES
        .iter()
        .find_map(|(suffix, factor)| s.strip_suffix(suffix).map(|n| (n, *factor)))
        .unwrap_or((s, 1.0));
    if number.is_empty() || !number.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c)) {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    value.is_finite().then_some(value * factor)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node() -> NodeView {
        NodeView::from_config(&SimConfig {
            node_allocatable: [("cpu".to_owned(), "2".to_owned())].into(),
            ..SimConfig::default()
        })
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("1Gi"), Some(1_073_741_824.0));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("Gi"), None);
        assert_eq!(parse_quantity("lots"), None);
    }

    #[test]
    fn selector_and_affinity() {
        let n = node();
        assert_eq!(n.labels[HOSTNAME_LABEL], "sim-node-1");
        let ok = pod(json!({"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": []}));
        assert_eq!(n.unschedulable(&ok), None);
        let bad = pod(json!({"nodeSelector": {"gpu": "yes"}, "containers": []}));
        let msg = n.unschedulable(&bad).unwrap();
        assert!(
            msg.starts_with(
                "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption:"
            ),
            "{msg}"
        );
        let affinity = |op: &str, values: serde_json::Value| {
            pod(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/os", "operator": op, "values": values}]}]
            }}}, "containers": []}),
            )
        };
        assert_eq!(n.unschedulable(&affinity("In", json!(["linux"]))), None);
        assert!(n.unschedulable(&affinity("NotIn", json!(["linux"]))).is_some());
        assert!(n.unschedulable(&affinity("DoesNotExist", json!([]))).is_some());
    }

    #[test]
    fn requests_against_allocatable() {
        let n = node();
        let c = |name: &str, cpu: &str| json!({"name": name, "image": "i", "resources": {"requests": {"cpu": cpu}}});
        let fits = pod(json!({"containers": [c("a", "1"), c("b", "500m")]}));
        assert_eq!(n.unschedulable(&fits), None);
        let big = pod(json!({"containers": [c("a", "1500m"), c("b", "1")]}));
        let msg = n.unschedulable(&big).unwrap();
        assert_eq!(
            msg,
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        );
        // A sidecar adds to the main containers; a plain init container only peaks alone.
        let mut sidecar = c("dind", "1500m");
        sidecar["restartPolicy"] = json!("Always");
        let with_sidecar = pod(json!({"initContainers": [sidecar], "containers": [c("a", "1")]}));
        assert!(n.unschedulable(&with_sidecar).is_some());
        let with_init = pod(json!({"initContainers": [c("reg", "2")], "containers": [c("a", "1")]}));
        assert_eq!(n.unschedulable(&with_init), None);
    }
}
