//! Which series of a per-group gauge each group last set, so that a pass drops the ones that no
//! longer hold (a class the spec lost, a version no runner reports) and a deleted group leaves
//! none behind. A family cannot list one group's series itself.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::group::GroupLabels;

/// A per-group gauge family and, per group, the label sets it last set there. Bounded by the
/// groups times what each may show (the callers' own bounds).
#[derive(Debug)]
pub struct SeriesBook<L> {
    /// The exported family.
    pub family: Family<L, Gauge>,
    shown: Mutex<HashMap<GroupLabels, Vec<L>>>,
}

impl<L: Clone + Eq + Hash> Default for SeriesBook<L> {
    fn default() -> Self {
        SeriesBook {
            family: Family::default(),
            shown: Mutex::default(),
        }
    }
}

impl<L: Clone + Eq + Hash> SeriesBook<L> {
    /// Sets `group`'s series to `now`, removing those it set last time and not now. A poisoned
    /// book sets nothing.
    pub fn show(&self, group: &GroupLabels, now: Vec<(L, i64)>) {
        let Ok(mut shown) = self.shown.lock() else {
            return;
        };
        let before = if now.is_empty() {
            shown.remove(group)
        } else {
            shown.insert(group.clone(), now.iter().map(|(l, _)| l.clone()).collect())
        };
        for stale in before.unwrap_or_default() {
            if !now.iter().any(|(l, _)| *l == stale) {
                self.family.remove(&stale);
            }
        }
        for (labels, value) in now {
            self.family.get_or_create(&labels).set(value);
        }
    }

    /// Drops the series of one group (deleted).
    pub fn remove_group(&self, group: &GroupLabels) {
        self.show(group, Vec::new());
    }

    /// Drops every series (leadership lost).
    pub fn clear(&self) {
        if let Ok(mut shown) = self.shown.lock() {
            shown.clear();
        }
        self.family.clear();
    }
}

/// The book's series in the text format, without comment lines, the family registered as
/// `name`.
#[cfg(test)]
impl<L> SeriesBook<L>
where
    L: Clone + Eq + Hash + std::fmt::Debug + Send + Sync + 'static,
    L: prometheus_client::encoding::EncodeLabelSet,
{
    pub(crate) fn exported(&self, name: &str) -> String {
        let mut r = prometheus_client::registry::Registry::default();
        r.register(name, "test", self.family.clone());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).expect("encode");
        out.lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str) -> GroupLabels {
        GroupLabels {
            forge: "gitea",
            namespace: "ns".into(),
            group: name.into(),
        }
    }

    /// Which of `probes` `family` holds, with their values, sorted (`get` creates nothing).
    fn held(family: &Family<(String, u8), Gauge>, probes: &[(String, u8)]) -> Vec<(String, u8, i64)> {
        let mut out: Vec<_> = probes
            .iter()
            .filter_map(|l| family.get(l).map(|g| (l.0.clone(), l.1, g.get())))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_groups_series_follow_what_it_shows_and_leave_others_alone() {
        let book = SeriesBook::default();
        let l = |g: &str, n: u8| (g.to_owned(), n);
        let probes = [l("a", 1), l("a", 2), l("b", 1)];
        book.show(&group("a"), vec![(l("a", 1), 3), (l("a", 2), 4)]);
        book.show(&group("b"), vec![(l("b", 1), 5)]);
        assert_eq!(held(&book.family, &probes).len(), 3);
        book.show(&group("a"), vec![(l("a", 2), 6)]);
        assert_eq!(
            held(&book.family, &probes),
            [("a".to_owned(), 2, 6), ("b".to_owned(), 1, 5)],
            "a's dropped series went, b's stayed"
        );
        book.remove_group(&group("a"));
        assert_eq!(held(&book.family, &probes), [("b".to_owned(), 1, 5)]);
        book.clear();
        assert!(held(&book.family, &probes).is_empty());
    }
}
