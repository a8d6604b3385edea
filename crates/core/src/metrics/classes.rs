//! `forgerunner_class_runners{forge,namespace,group,class}`: the runners of each class of a
//! group's `spec.classes` (the `runners` of `status.classes`). A group has at most
//! [`crate::crd::MAX_CLASSES`] classes, so the series are bounded by the groups.
//!
//! The classes a group has change with its spec, so the series it exported last are kept here
//! to drop those of a class the spec no longer has.

use prometheus_client::encoding::EncodeLabelSet;

use super::group::GroupLabels;
use super::series_book::SeriesBook;
use crate::crd::ClassStatus;

/// Labels of the class gauge.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ClassLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
    /// Namespace of the group.
    pub namespace: String,
    /// Name of the group.
    pub group: String,
    /// Name of the class.
    pub class: String,
}

/// The class gauge and, per group, the series it last set.
pub type ClassSeries = SeriesBook<ClassLabels>;

impl ClassSeries {
    /// Sets the group's series to `classes`, dropping those of classes it no longer has.
    pub fn set(&self, group: &GroupLabels, classes: &[ClassStatus]) {
        let now = classes
            .iter()
            .map(|c| {
                let labels = ClassLabels {
                    forge: group.forge,
                    namespace: group.namespace.clone(),
                    group: group.group.clone(),
                    class: c.name.clone(),
                };
                (labels, i64::from(c.runners))
            })
            .collect();
        self.show(group, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exported(series: &ClassSeries) -> String {
        series.exported("class_runners")
    }

    fn class(name: &str, runners: u32) -> ClassStatus {
        ClassStatus {
            name: name.into(),
            runners,
            busy: 0,
        }
    }

    #[test]
    fn a_groups_series_follow_its_classes_and_go_with_it() {
        let series = ClassSeries::default();
        let g = GroupLabels {
            forge: "gitea",
            namespace: "ns".into(),
            group: "g".into(),
        };
        series.set(&g, &[class("small", 2), class("large", 1)]);
        let text = exported(&series);
        assert!(
            text.contains(r#"class_runners{forge="gitea",namespace="ns",group="g",class="small"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"class="large"} 1"#), "{text}");
        series.set(&g, &[class("small", 0)]);
        let text = exported(&series);
        assert!(
            !text.contains("large"),
            "a class the spec dropped is dropped: {text}"
        );
        assert!(text.contains(r#"class="small"} 0"#), "{text}");
        series.remove_group(&g);
        assert_eq!(exported(&series).trim(), "", "a deleted group leaves no series");
    }
}
