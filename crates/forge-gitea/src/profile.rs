//! What Gitea makes of a spec ([`forgerunner_core::forge::Forge::describe`]): the rules of
//! `spec.gitea` and of the container mode, then the profile the Gitea family shares
//! ([`forgerunner_http::profile`]).
//!
//! No exit code of a runner means more than "failed": Gitea Runner (and act_runner before it)
//! has no exit code of its own for "too old for this server". Every failure, a refused `Declare`
//! included, ends the process through cobra with exit code 1, and Gitea refuses no runner for
//! its version (the only version message is the runner's own "Gitea too old to declare", about
//! the server). An outdated runner therefore shows as an ordinary failed runner; the default
//! image is pinned ([`crate::pod::DEFAULT_IMAGE`]) so it does not drift.

use forgerunner_core::crd::{DEFAULT_GITEA_POLL_INTERVAL_SECONDS, RunnerGroupSpec};
use forgerunner_core::forge::ForgeProfile;
use forgerunner_core::validate::SpecViolation;
use forgerunner_http::profile::{Block, Described, describe as profile_of};

use crate::validate::{FIELDS, validate_container_mode, validate_gitea};

/// What a failed cleanup may leave ([`ForgeProfile::cleanup_hint`]).
const CLEANUP_HINT: &str = "runners named after the group may stay registered at Gitea: delete them under \
                            Settings → Actions → Runners of the group's scope (site administration, \
                            organization, user or repository)";

/// The violations of `spec`, or the group's profile.
pub(crate) fn describe(spec: &RunnerGroupSpec) -> Result<ForgeProfile, Vec<SpecViolation>> {
    let gitea = spec.gitea.as_ref();
    let mut violations = gitea.map(validate_gitea).unwrap_or_default();
    violations.extend(validate_container_mode(spec));
    profile_of(Described {
        violations,
        fields: &FIELDS,
        block: gitea.map(|g| Block {
            url: &g.url,
            proxy_url: g.proxy_url.as_deref(),
            credentials: &g.credentials,
            ca_bundle_config_map: g.ca_bundle_config_map.as_deref(),
            webhook_secret: g.webhook_secret.as_deref(),
            poll_interval_seconds: g.poll_interval_seconds(),
        }),
        default_poll_seconds: DEFAULT_GITEA_POLL_INTERVAL_SECONDS,
        cleanup_hint: CLEANUP_HINT.to_owned(),
    })
}
