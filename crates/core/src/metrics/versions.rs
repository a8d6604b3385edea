//! `forgerunner_runner_version_info{forge,namespace,group,version,source}`: the runner releases a
//! group runs, from its image's tag (`source="image"`, value 1) and from what its runners report
//! to the forge (`source="forge"`, value: how many runners report it).
//!
//! The versions a group shows change from pass to pass, so the series it exported last are
//! kept here to drop the ones that no longer hold; the forge already bounds how many it reports
//! ([`crate::runner_version::MAX_REPORTED_VERSIONS`]).

use prometheus_client::encoding::EncodeLabelSet;

use super::group::GroupLabels;
use super::series_book::SeriesBook;
use crate::runner_version::RunnerVersions;

/// Where a version was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VersionSource {
    /// The tag of the group's runner image.
    Image,
    /// The forge's runner listing, as the runners reported it.
    Forge,
}

impl VersionSource {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            VersionSource::Image => "image",
            VersionSource::Forge => "forge",
        }
    }
}

/// Labels of the version gauge.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct VersionLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
    /// Namespace of the group.
    pub namespace: String,
    /// Name of the group.
    pub group: String,
    /// The release (`2.331.0`), or `unknown` for an image whose tag names none.
    pub version: String,
    /// [`VersionSource::as_str`].
    pub source: &'static str,
}

/// The version gauge and, per group, the series it last set.
pub type RunnerVersionSeries = SeriesBook<VersionLabels>;

impl RunnerVersionSeries {
    /// Sets the group's series to what `versions` tells, dropping those it no longer shows.
    pub fn set(&self, group: &GroupLabels, versions: &RunnerVersions) {
        let label = |version: String, source: VersionSource| VersionLabels {
            forge: group.forge,
            namespace: group.namespace.clone(),
            group: group.group.clone(),
            version,
            source: source.as_str(),
        };
        let mut now: Vec<(VersionLabels, i64)> = Vec::new();
        if let Some((_, release)) = &versions.image {
            let version = release.map_or_else(|| "unknown".to_owned(), |r| r.to_string());
            now.push((label(version, VersionSource::Image), 1));
        }
        for (version, runners) in &versions.reported {
            now.push((label(version.clone(), VersionSource::Forge), i64::from(*runners)));
        }
        self.show(group, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner_version::RunnerRelease;

    fn exported(series: &RunnerVersionSeries) -> String {
        series.exported("runner_version_info")
    }

    #[test]
    fn a_groups_series_follow_its_versions_and_go_with_it() {
        let series = RunnerVersionSeries::default();
        let g = GroupLabels {
            forge: "forgejo",
            namespace: "ns".into(),
            group: "g".into(),
        };
        let mut v = RunnerVersions {
            image: Some(("img:11.1.0".into(), Some(RunnerRelease(11, 1, 0)))),
            ..RunnerVersions::default()
        };
        v.report("11.1.0");
        v.report("11.0.2");
        v.report("11.1.0");
        series.set(&g, &v);
        let text = exported(&series);
        assert!(text.contains(r#"version="11.1.0",source="image"} 1"#), "{text}");
        assert!(text.contains(r#"version="11.1.0",source="forge"} 2"#), "{text}");
        assert!(text.contains(r#"version="11.0.2",source="forge"} 1"#), "{text}");

        v.reported.remove("11.0.2");
        v.image = Some(("img:latest".into(), None));
        series.set(&g, &v);
        let text = exported(&series);
        assert!(
            !text.contains("11.0.2"),
            "a version no runner reports is dropped: {text}"
        );
        assert!(text.contains(r#"version="unknown",source="image"} 1"#), "{text}");

        series.remove_group(&g);
        assert_eq!(exported(&series).trim(), "", "a deleted group leaves no series");
    }
}
