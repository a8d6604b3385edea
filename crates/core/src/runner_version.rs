//! Runner releases: the one a group's image pins, the ones its runners report to the forge, and
//! whether the forge still serves them.
//!
//! A forge tells what it knows in [`RunnerVersions`] ([`crate::forge::ForgeView::versions`]):
//! GitHub the release it serves its runners now (runners that fall behind it stop getting jobs),
//! Forgejo 15 and later the version each runner reported. Core turns that into the
//! `RunnerOutdated` condition ([`currency`]) and `forgerunner_runner_version_info`.

use std::collections::BTreeMap;

use crate::conditions::{ConditionReason, ConditionStatus, ConditionType, GroupCondition};
use crate::crd::RunnerGroupSpec;
use crate::runner_job::RUNNER_CONTAINER;

/// A runner release, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunnerRelease(pub u32, pub u32, pub u32);

impl std::fmt::Display for RunnerRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

impl RunnerRelease {
    /// Reads `2.330.0`, `v2.330.0` or a variant of a release such as `0.2.11-dind-rootless`
    /// (the variant is the image's flavour, not another release).
    pub fn parse(text: &str) -> Option<RunnerRelease> {
        let release = text.strip_prefix('v').unwrap_or(text);
        let release = release.split_once('-').map_or(release, |(r, _)| r);
        let mut parts = release.split('.');
        let mut next = || {
            let part = parts.next()?;
            // `+1` or ` 1` parse as numbers in Rust; a release has digits only.
            part.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
            part.parse::<u32>().ok()
        };
        let parsed = RunnerRelease(next()?, next()?, next()?);
        parts.next().is_none().then_some(parsed)
    }
}

/// The release an image reference pins: its tag, when the image's repository is named one of
/// `repositories` (the forge's runner images and mirrors of them, matched by the last path
/// segment) and the tag is a release. `latest`, a digest alone or another image give `None`.
pub fn pinned_release(image: &str, repositories: &[&str]) -> Option<RunnerRelease> {
    let without_digest = image.split('@').next()?;
    let (repository, tag) = without_digest.rsplit_once(':')?;
    let name = repository.rsplit('/').next()?;
    if tag.contains('/') || !repositories.contains(&name) {
        return None;
    }
    RunnerRelease::parse(tag)
}

/// The image of the group's runner container: `spec.image`, else the template's `runner`
/// container's; `None` when neither names one (the forge's default image runs).
pub fn runner_image(spec: &RunnerGroupSpec) -> Option<String> {
    if let Some(image) = spec.image.as_deref().filter(|i| !i.is_empty()) {
        return Some(image.to_owned());
    }
    let containers = spec
        .template
        .as_ref()?
        .raw()
        .pointer("/spec/containers")?
        .as_array()?;
    containers
        .iter()
        .find(|c| c.get("name").and_then(|n| n.as_str()) == Some(RUNNER_CONTAINER))?
        .get("image")?
        .as_str()
        .map(str::to_owned)
}

/// Most distinct reported versions kept per group: the metric's cardinality stays bounded
/// whatever runners a forge lists.
pub const MAX_REPORTED_VERSIONS: usize = 8;

/// What a forge tells of the runner releases of one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerVersions {
    /// The image the group's runners run, and the release it pins when the forge can tell
    /// (`None` inside: a tag that is not a release).
    pub image: Option<(String, Option<RunnerRelease>)>,
    /// The newest release the forge serves its runners now, where it says (GitHub's runner
    /// downloads). Runners behind it stop getting jobs after a while.
    pub served: Option<RunnerRelease>,
    /// The versions the forge's runner listing reports for the group's runners, with how many
    /// runners report each (Forgejo 15 and later); at most [`MAX_REPORTED_VERSIONS`].
    pub reported: BTreeMap<String, u32>,
}

impl RunnerVersions {
    /// Counts one runner reporting `version`; versions past the bound are counted under
    /// `other`, so no runner goes missing from the sum.
    pub fn report(&mut self, version: &str) {
        let version = version.trim();
        let version = if version.is_empty() { "unknown" } else { version };
        // Room for one more distinct version, leaving the last place to `other`.
        let fits = self.reported.contains_key(version) || self.reported.len() + 1 < MAX_REPORTED_VERSIONS;
        let key = if fits { version } else { "other" };
        // Versions are short (a forge caps them); keep a long one from growing the labels.
        let key: String = key.chars().take(64).collect();
        *self.reported.entry(key).or_default() += 1;
    }
}

/// Whether a group's image keeps up with the release its forge serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Currency {
    /// The image pins the served release or a later one.
    Current {
        /// The image.
        image: String,
        /// Its release.
        release: RunnerRelease,
    },
    /// The image pins an older release than the forge serves.
    Behind {
        /// The image.
        image: String,
        /// Its release.
        release: RunnerRelease,
        /// What the forge serves.
        served: RunnerRelease,
    },
    /// The image's tag names no release (`latest`, a digest, a custom image): nothing to compare.
    Unknown {
        /// The image.
        image: String,
    },
}

/// How the group's image compares with what its forge serves; `None` when the forge tells no
/// served release or no image (then there is nothing to say).
pub fn currency(versions: &RunnerVersions) -> Option<Currency> {
    let served = versions.served?;
    let (image, release) = versions.image.clone()?;
    Some(match release {
        None => Currency::Unknown { image },
        Some(release) if release < served => Currency::Behind {
            image,
            release,
            served,
        },
        Some(release) => Currency::Current { image, release },
    })
}

/// The `RunnerOutdated` condition for `currency`: True names the image to update and the
/// release to update to.
pub fn outdated_condition(currency: &Currency) -> GroupCondition {
    let (status, reason, message) = match currency {
        Currency::Behind {
            image,
            release,
            served,
        } => (
            ConditionStatus::True,
            ConditionReason::NewerReleaseServed,
            format!(
                "image {image} runs runner {release} and the forge serves {served}: a forge that \
                 enforces an update window stops giving jobs to runners behind it (github.com: 30 \
                 days after a release); update the image to {served} or later"
            ),
        ),
        Currency::Current { image, release } => (
            ConditionStatus::False,
            ConditionReason::ReleaseCurrent,
            format!("image {image} runs runner {release}, the release the forge serves or later"),
        ),
        Currency::Unknown { image } => (
            ConditionStatus::Unknown,
            ConditionReason::ReleaseUnknown,
            format!(
                "the tag of image {image} names no runner release, so it cannot be compared with \
                 the release the forge serves; pin a release tag to be warned before the forge \
                 stops serving it"
            ),
        ),
    };
    GroupCondition::new(ConditionType::RunnerOutdated, status, reason, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ForgeKind;
    use crate::testing::RunnerGroupBuilder;

    #[test]
    fn releases_parse_with_an_optional_v_and_variant() {
        let p = RunnerRelease::parse;
        assert_eq!(p("2.330.0"), Some(RunnerRelease(2, 330, 0)));
        assert_eq!(p("v2.330.1"), Some(RunnerRelease(2, 330, 1)));
        assert_eq!(p("0.2.11-dind-rootless"), Some(RunnerRelease(0, 2, 11)));
        assert_eq!(p("latest"), None);
        assert_eq!(p("2.330"), None);
        assert_eq!(p("2.330.0.1"), None);
        assert_eq!(p("2.+330.0"), None);
        assert_eq!(p(""), None);
    }

    #[test]
    fn releases_come_from_the_named_images_tags_only() {
        let gh = ["actions-runner"];
        let r = |i| pinned_release(i, &gh);
        assert_eq!(
            r("ghcr.io/actions/actions-runner:2.328.0"),
            Some(RunnerRelease(2, 328, 0))
        );
        assert_eq!(
            r("mirror.example:5000/actions-runner:v2.330.1"),
            Some(RunnerRelease(2, 330, 1))
        );
        assert_eq!(
            r("ghcr.io/actions/actions-runner:2.329.0@sha256:abcd"),
            Some(RunnerRelease(2, 329, 0))
        );
        assert_eq!(r("ghcr.io/actions/actions-runner:latest"), None);
        assert_eq!(r("ghcr.io/actions/actions-runner"), None);
        assert_eq!(r("registry:5000/actions-runner"), None, "a port is no tag");
        assert_eq!(r("example.com/my-runner:2.1.0"), None, "another image");
        assert_eq!(
            pinned_release("docker.io/gitea/act_runner:0.2.13-dind-rootless", &["act_runner"]),
            Some(RunnerRelease(0, 2, 13))
        );
    }

    #[test]
    fn the_runner_image_is_the_specs_else_the_templates_runner_container() {
        let mut g = RunnerGroupBuilder::new(ForgeKind::Github).build();
        assert_eq!(runner_image(&g.spec), None);
        g.spec.template = Some(
            serde_json::from_value(serde_json::json!({"spec": {"containers": [
                {"name": "sidecar", "image": "busybox:1"},
                {"name": "runner", "image": "mirror/actions-runner:2.331.0"},
            ]}}))
            .expect("template"),
        );
        assert_eq!(
            runner_image(&g.spec).as_deref(),
            Some("mirror/actions-runner:2.331.0")
        );
        g.spec.image = Some("ghcr.io/actions/actions-runner:2.332.0".into());
        assert_eq!(
            runner_image(&g.spec).as_deref(),
            Some("ghcr.io/actions/actions-runner:2.332.0")
        );
    }

    #[test]
    fn currency_compares_the_image_with_the_served_release() {
        let image = |r| Some(("img".to_owned(), r));
        let v = |image, served| RunnerVersions {
            image,
            served,
            reported: BTreeMap::new(),
        };
        let (old, new) = (RunnerRelease(2, 329, 0), RunnerRelease(2, 331, 0));
        assert_eq!(
            currency(&v(image(Some(old)), None)),
            None,
            "nothing served: nothing to say"
        );
        assert_eq!(currency(&v(None, Some(new))), None);
        assert!(matches!(
            currency(&v(image(Some(old)), Some(new))),
            Some(Currency::Behind { release, served, .. }) if release == old && served == new
        ));
        assert!(matches!(
            currency(&v(image(Some(new)), Some(new))),
            Some(Currency::Current { .. })
        ));
        assert!(matches!(
            currency(&v(image(None), Some(new))),
            Some(Currency::Unknown { .. })
        ));
    }

    #[test]
    fn reported_versions_stay_bounded_and_every_runner_counts() {
        let mut v = RunnerVersions::default();
        for i in 0..20 {
            v.report(&format!("1.{i}.0"));
        }
        v.report("1.0.0");
        v.report("  ");
        assert!(v.reported.len() <= MAX_REPORTED_VERSIONS, "{:?}", v.reported);
        assert_eq!(v.reported.values().sum::<u32>(), 22);
        assert_eq!(v.reported.get("1.0.0"), Some(&2));
        assert!(v.reported.contains_key("other"));
    }
}
