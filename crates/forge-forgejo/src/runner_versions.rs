//! What Forgejo tells of a group's runner releases ([`RunnerVersions`]): the release the group's
//! image pins and, from Forgejo 15 on, the version each of its runners reported.
//!
//! Forgejo 15's runner listing carries `ActionRunner.Version`, "the self-reported version string
//! of Forgejo Runner" (`modules/structs/repo_actions.go@v15.0.3`; the struct and its listing
//! routes came with commit `ddd4cf0d28`, #10450). forgejo-runner sends it on `Register` and
//! `Declare` (`internal/app/run/runner.go`: `Version: ver.Version()`), which the server stores
//! (`routers/api/actions/runner/runner.go` `Declare`). Before 15 no API lists runners. Forgejo
//! serves no runner release and refuses no old runner, so `served` stays unknown.

use std::collections::BTreeSet;

use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::forge::RunnerRef;
use forgerunner_core::runner_version::{RunnerRelease, RunnerVersions, pinned_release, runner_image};

use crate::observe::row_of;
use crate::pod::RUNNER_IMAGE;
use crate::types::Runner;

/// Repository names (last path segment) of forgejo-runner images: `code.forgejo.org/forgejo/runner`
/// ([`RUNNER_IMAGE`]) and `data.forgejo.org/forgejo/runner` (forgejo-runner's
/// `examples/docker-compose`), mirrors of them, and mirrors named `forgejo-runner`.
pub(crate) const RUNNER_REPOSITORIES: &[&str] = &["runner", "forgejo-runner"];

/// The image the group's runners run (`spec.image`, else the template's `runner` container's,
/// else [`RUNNER_IMAGE`]) and the release its tag pins.
pub(crate) fn image_release(spec: &RunnerGroupSpec) -> (String, Option<RunnerRelease>) {
    let image = runner_image(spec).unwrap_or_else(|| RUNNER_IMAGE.to_owned());
    let release = pinned_release(&image, RUNNER_REPOSITORIES);
    (image, release)
}

/// What Forgejo tells of the group's releases before any runner listing: the image only.
pub(crate) fn of_image(spec: &RunnerGroupSpec) -> RunnerVersions {
    RunnerVersions {
        image: Some(image_release(spec)),
        ..RunnerVersions::default()
    }
}

/// Counts the versions the runner listing `rows` reports for our runners `refs`, each listed
/// runner once. Runners of other groups or tenants in the scope are not the group's. A row
/// with no version is a runner that has not connected yet (a row made by `POST` has none until
/// its `Declare`): it reported nothing, so it is not counted.
pub(crate) fn report_listed(versions: &mut RunnerVersions, refs: &[RunnerRef], rows: &[Runner]) {
    let mut counted = BTreeSet::new();
    for row in refs.iter().filter_map(|r| row_of(r, rows)) {
        if counted.insert(row.id) && !row.version.trim().is_empty() {
            versions.report(&row.version);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use forgerunner_core::crd::ForgeKind;
    use forgerunner_core::plan::RunnerPhase;
    use forgerunner_core::testing::RunnerGroupBuilder;

    use super::*;
    use crate::runner_id::RUNNER_ID_ANNOTATION;

    #[test]
    fn the_image_is_the_groups_else_the_default_and_pins_its_tag() {
        let mut g = RunnerGroupBuilder::new(ForgeKind::Forgejo).build();
        assert_eq!(
            image_release(&g.spec),
            (RUNNER_IMAGE.to_owned(), Some(RunnerRelease(12, 8, 2)))
        );
        g.spec.template = Some(
            serde_json::from_value(serde_json::json!({"spec": {"containers": [
                {"name": "runner", "image": "mirror.example/forgejo-runner:11.3.1"},
            ]}}))
            .expect("template"),
        );
        assert_eq!(image_release(&g.spec).1, Some(RunnerRelease(11, 3, 1)));
        let with = |image: &str| {
            let mut g = g.clone();
            g.spec.image = Some(image.to_owned());
            image_release(&g.spec)
        };
        assert_eq!(
            with("data.forgejo.org/forgejo/runner:12.9.0").1,
            Some(RunnerRelease(12, 9, 0))
        );
        assert_eq!(
            with("data.forgejo.org/forgejo/runner:12").1,
            None,
            "not a release"
        );
        assert_eq!(with("code.forgejo.org/forgejo/runner:latest").1, None);
        assert_eq!(
            with("docker.io/gitea/act_runner:0.2.13"),
            ("docker.io/gitea/act_runner:0.2.13".to_owned(), None),
            "another runner's image"
        );
        let v = of_image(&g.spec);
        assert_eq!((v.served, v.reported.len()), (None, 0));
        assert_eq!(v.image.map(|i| i.1), Some(Some(RunnerRelease(11, 3, 1))));
    }

    fn row(id: i64, name: &str, version: &str) -> Runner {
        Runner {
            id,
            name: name.to_owned(),
            version: version.to_owned(),
            ..Runner::default()
        }
    }

    fn ours(name: &str, id: Option<i64>) -> RunnerRef {
        RunnerRef {
            name: name.to_owned(),
            annotations: id
                .map(|id| BTreeMap::from([(RUNNER_ID_ANNOTATION.to_owned(), id.to_string())]))
                .unwrap_or_default(),
            phase: RunnerPhase::Running,
            stored: true,
            registered_at: None,
            connected_since: None,
        }
    }

    #[test]
    fn only_our_listed_runners_that_reported_a_version_count_once_each() {
        let rows = [
            row(1, "g-aaaaa", "12.8.2"),
            row(2, "g-bbbbb", "12.8.2"),
            row(3, "g-ccccc", "12.9.0"),
            row(4, "g-ddddd", ""),
            row(5, "other-zzzzz", "11.0.0"),
            row(6, "g-qqqqq", "10.0.0"),
        ];
        let refs = [
            ours("g-aaaaa", Some(1)),
            // No id recorded: found by name.
            ours("g-bbbbb", None),
            ours("g-ccccc", Some(3)),
            // An id naming a runner already counted counts it once.
            ours("g-eeeee", Some(3)),
            ours("g-ddddd", Some(4)),
            // Not listed.
            ours("g-fffff", Some(9)),
        ];
        let mut v = RunnerVersions::default();
        report_listed(&mut v, &refs, &rows);
        assert_eq!(
            v.reported,
            BTreeMap::from([("12.8.2".to_owned(), 2), ("12.9.0".to_owned(), 1)])
        );
    }
}
