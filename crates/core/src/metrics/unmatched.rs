//! `forgerunner_unmatched_waiting_jobs{namespace,forge}`: jobs waiting in a scope that no
//! group's labels match (the classic typo in `runs-on`).
//!
//! Each group's pass tells which jobs of its scope no group can take; the gauge of a namespace
//! counts the distinct ones over the namespace's groups, so two groups watching one scope count
//! a job once. Kept by the forge backends that can tell (Gitea, Forgejo), one book each.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;

use super::Metrics;
use crate::forge::GroupKey;

/// Labels of the unmatched-jobs gauge.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct NamespaceLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
    /// Namespace of the groups.
    pub namespace: String,
}

/// Per group, the ids of the jobs of its scope that no group can take.
#[derive(Debug)]
pub struct UnmatchedBook {
    forge: &'static str,
    groups: Mutex<HashMap<GroupKey, BTreeSet<String>>>,
}

impl UnmatchedBook {
    /// An empty book for `forge`.
    pub fn new(forge: &'static str) -> UnmatchedBook {
        UnmatchedBook {
            forge,
            groups: Mutex::default(),
        }
    }

    /// Takes in what one pass of `key` saw and sets its namespace's gauge.
    pub fn record(&self, metrics: &Metrics, key: &GroupKey, ids: BTreeSet<String>) {
        let Ok(mut groups) = self.groups.lock() else {
            return;
        };
        groups.insert(key.clone(), ids);
        self.report(&groups, metrics, &key.namespace);
    }

    /// Forgets a released group and sets its namespace's gauge without it.
    pub fn forget(&self, metrics: &Metrics, key: &GroupKey) {
        let Ok(mut groups) = self.groups.lock() else {
            return;
        };
        if groups.remove(key).is_some() {
            self.report(&groups, metrics, &key.namespace);
        }
    }

    /// Forgets every group and drops this forge's series (leadership lost).
    pub fn clear(&self, metrics: &Metrics) {
        let Ok(mut groups) = self.groups.lock() else {
            return;
        };
        let namespaces: BTreeSet<String> = groups.keys().map(|k| k.namespace.clone()).collect();
        *groups = HashMap::new();
        for namespace in namespaces {
            self.report(&groups, metrics, &namespace);
        }
    }

    /// Sets the gauge of `namespace` to the distinct unmatched jobs of its groups; a namespace
    /// with no group left has no series.
    fn report(&self, groups: &HashMap<GroupKey, BTreeSet<String>>, metrics: &Metrics, namespace: &str) {
        let labels = NamespaceLabels {
            forge: self.forge,
            namespace: namespace.to_owned(),
        };
        let mut any = false;
        let mut ids: BTreeSet<&str> = BTreeSet::new();
        for v in groups
            .iter()
            .filter(|(k, _)| k.namespace == namespace)
            .map(|(_, v)| v)
        {
            any = true;
            ids.extend(v.iter().map(String::as_str));
        }
        if any {
            let n = i64::try_from(ids.len()).unwrap_or(i64::MAX);
            metrics.unmatched_waiting_jobs.get_or_create(&labels).set(n);
        } else {
            metrics.unmatched_waiting_jobs.remove(&labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::*;

    fn key(namespace: &str, name: &str) -> GroupKey {
        GroupKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn ids(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn scrape(registry: &Registry) -> String {
        let mut out = String::new();
        encode(&mut out, registry).expect("encode");
        out
    }

    #[test]
    fn a_namespace_counts_each_unmatched_job_once_and_forgets_released_groups() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let book = UnmatchedBook::new("gitea");
        book.record(&metrics, &key("ci", "a"), ids(&["7", "8"]));
        book.record(&metrics, &key("ci", "b"), ids(&["8", "9"]));
        book.record(&metrics, &key("other", "c"), ids(&[]));
        let text = scrape(&registry);
        assert!(
            text.contains(r#"forgerunner_unmatched_waiting_jobs{forge="gitea",namespace="ci"} 3"#),
            "{text}"
        );
        assert!(text.contains(r#"forgerunner_unmatched_waiting_jobs{forge="gitea",namespace="other"} 0"#));
        book.forget(&metrics, &key("ci", "b"));
        assert!(
            scrape(&registry)
                .contains(r#"forgerunner_unmatched_waiting_jobs{forge="gitea",namespace="ci"} 2"#)
        );
        book.forget(&metrics, &key("ci", "a"));
        assert!(
            !scrape(&registry).contains(r#"namespace="ci""#),
            "no group left, no series"
        );
        book.clear(&metrics);
        assert!(!scrape(&registry).contains("forgerunner_unmatched_waiting_jobs{"));
    }
}
