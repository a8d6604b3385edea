//! The runner release a group's image pins, and GitHub's floor for it.
//!
//! github.com (and GHE.com) register only runners of release 2.329.0 or later since 2026-09-25
//! (GitHub's announcement, community discussion #194762; brownouts from 2026-08-24). A runner
//! below it never takes a job: each pod starts, fails to register and is replaced, until the
//! image is updated. A group whose image names such a release is refused with the image to use
//! instead. GHES sets its own floor with its release, so it is not checked there, and neither
//! is an image whose tag is not a runner release (`latest`, a digest, a custom image's tag).

use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::runner_version::{RunnerRelease, pinned_release, runner_image};
use forgerunner_core::validate::{SpecViolation, violation};

use crate::config_url::ConfigUrl;
use crate::pod::DEFAULT_RUNNER_IMAGE;

/// The oldest runner release github.com registers.
pub const HOSTED_MINIMUM: RunnerRelease = RunnerRelease(2, 329, 0);

/// Image repositories whose tag is a GitHub runner release: GitHub's own image, and mirrors
/// of it under the same name.
pub const RUNNER_REPOSITORIES: &[&str] = &["actions-runner"];

/// The image the group's runners run (`spec.image`, the template's runner container, else
/// [`DEFAULT_RUNNER_IMAGE`]) and the release its tag pins, if it pins one.
pub fn image_release(spec: &RunnerGroupSpec) -> (String, Option<RunnerRelease>) {
    let image = runner_image(spec).unwrap_or_else(|| DEFAULT_RUNNER_IMAGE.to_owned());
    let release = pinned_release(&image, RUNNER_REPOSITORIES);
    (image, release)
}

/// A violation when the group registers at github.com with a runner release it refuses.
pub fn check(spec: &RunnerGroupSpec) -> Option<SpecViolation> {
    let gh = spec.github.as_ref()?;
    if !ConfigUrl::parse(&gh.config_url).ok()?.hosted {
        return None;
    }
    let (image, release) = image_release(spec);
    let release = release?;
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

    #[test]
    fn the_image_is_the_groups_else_the_default_and_only_a_release_tag_pins() {
        let mut g = RunnerGroupBuilder::new(ForgeKind::Github).build();
        assert_eq!(image_release(&g.spec), (DEFAULT_RUNNER_IMAGE.to_owned(), None));
        g.spec.image = Some("mirror.example:5000/actions-runner:v2.330.1".into());
        assert_eq!(
            image_release(&g.spec).1,
            Some(RunnerRelease(2, 330, 1)),
            "a mirror of the runner image"
        );
        g.spec.image = Some("example.com/my-runner:2.1.0".into());
        assert_eq!(image_release(&g.spec).1, None, "not GitHub's runner image");
    }
}
