//! The runner release a group's image pins, and GitHub's floor for it.
//!
//! github.com (and GHE.com) register only runners of release 2.329.0 or later since 2026-09-25
//! (GitHub's announcement, community discussion #194762; brownouts from 2026-08-24). A runner
//! below it never takes a job: each pod starts, fails to register and is replaced, until the
//! image is updated. A group whose image names such a release is refused with the image to use
//! instead. GHES sets its own floor with its release, so it is not checked there, and neither
//! is an image whose tag is not a runner release (`latest`, a digest, a custom image's tag).

use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::runner_job::RUNNER_CONTAINER;
use forgerunner_core::validate::{SpecViolation, violation};

use crate::config_url::ConfigUrl;

/// The oldest runner release github.com registers.
pub const HOSTED_MINIMUM: RunnerRelease = RunnerRelease(2, 329, 0);

/// A runner release, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunnerRelease(pub u32, pub u32, pub u32);

impl std::fmt::Display for RunnerRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The runner release an image reference pins: the tag of an image named `actions-runner`
/// (GitHub's own, or a mirror of it), when the tag is a release (`2.330.0`, `v2.330.0`).
pub fn pinned_release(image: &str) -> Option<RunnerRelease> {
    let without_digest = image.split('@').next()?;
    let (repository, tag) = without_digest.rsplit_once(':')?;
    if tag.contains('/') || !repository.rsplit('/').next()?.ends_with("actions-runner") {
        return None;
    }
    let mut parts = tag.trim_start_matches('v').split('.');
    let mut next = || parts.next()?.parse::<u32>().ok();
    let release = RunnerRelease(next()?, next()?, next()?);
    parts.next().is_none().then_some(release)
}

/// The image of the group's runner container: `spec.image`, else the template's `runner`
/// container's.
fn runner_image(spec: &RunnerGroupSpec) -> Option<String> {
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

/// A violation when the group registers at github.com with a runner release it refuses.
pub fn check(spec: &RunnerGroupSpec) -> Option<SpecViolation> {
    let gh = spec.github.as_ref()?;
    if !ConfigUrl::parse(&gh.config_url).ok()?.hosted {
        return None;
    }
    let image = runner_image(spec)?;
    let release = pinned_release(&image)?;
    (release < HOSTED_MINIMUM).then(|| {
        let field = if spec.image.as_deref().is_some_and(|i| !i.is_empty()) {
            "spec.image"
        } else {
            "spec.template"
        };
        violation(
            field,
            format!(
                "image {image} runs runner {release}, older than {HOSTED_MINIMUM}, the oldest \
                 release github.com registers since 2026-09-25: its runners would never take a \
                 job; use ghcr.io/actions/actions-runner:{HOSTED_MINIMUM} or later"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use forgerunner_core::crd::ForgeKind;
    use forgerunner_core::testing::RunnerGroupBuilder;

    #[test]
    fn releases_come_from_runner_image_tags_only() {
        let r = |i| pinned_release(i);
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
        assert_eq!(
            r("example.com/my-runner:2.1.0"),
            None,
            "not GitHub's runner image"
        );
        assert_eq!(r("ghcr.io/actions/actions-runner:2.330.0-ubuntu"), None);
    }

    fn spec(url: &str, image: &str) -> RunnerGroupSpec {
        let mut g = RunnerGroupBuilder::new(ForgeKind::Github).build();
        g.spec.github.as_mut().expect("github").config_url = url.into();
        g.spec.image = Some(image.into());
        g.spec
    }

    #[test]
    fn github_com_refuses_runners_below_its_floor_and_ghes_is_left_alone() {
        let old = "ghcr.io/actions/actions-runner:2.328.0";
        let v = check(&spec("https://github.com/org", old)).expect("refused");
        assert_eq!(v.field, "spec.image");
        assert!(v.to_string().contains("2.329.0"), "{v}");
        assert!(check(&spec("https://tenant.ghe.com/org", old)).is_some());
        assert!(
            check(&spec("https://github.example.com/org", old)).is_none(),
            "GHES"
        );
        assert!(
            check(&spec(
                "https://github.com/org",
                "ghcr.io/actions/actions-runner:2.329.0"
            ))
            .is_none()
        );
        assert!(
            check(&spec(
                "https://github.com/org",
                "ghcr.io/actions/actions-runner:latest"
            ))
            .is_none()
        );
    }
}
