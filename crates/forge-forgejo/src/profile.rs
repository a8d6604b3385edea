//! What Forgejo makes of a spec ([`forgerunner_core::forge::Forge::describe`]): the rules of
//! `spec.forgejo`, of the container mode and of the Docker daemon its labels need, then the
//! profile the Gitea family shares ([`forgerunner_http::profile`]). Forgejo has no job-level
//! webhook: its groups are polled only, and name no webhook Secret.

use forgerunner_core::crd::{DEFAULT_FORGEJO_POLL_INTERVAL_SECONDS, ForgejoScope, RunnerGroupSpec};
use forgerunner_core::forge::ForgeProfile;
use forgerunner_core::validate::SpecViolation;
use forgerunner_http::profile::{Block, Described, describe as profile_of};

use crate::validate::{
    FIELDS, validate_class_docker_daemon, validate_container_mode, validate_docker_daemon, validate_forgejo,
};

/// The violations of `spec`, or the group's profile.
pub(crate) fn describe(spec: &RunnerGroupSpec) -> Result<ForgeProfile, Vec<SpecViolation>> {
    let forgejo = spec.forgejo.as_ref();
    let mut violations = forgejo.map(validate_forgejo).unwrap_or_default();
    violations.extend(validate_container_mode(spec));
    violations.extend(validate_docker_daemon(spec));
    violations.extend(validate_class_docker_daemon(spec));
    profile_of(Described {
        violations,
        fields: &FIELDS,
        block: forgejo.map(|f| Block {
            url: &f.url,
            proxy_url: f.proxy_url.as_deref(),
            credentials: &f.credentials,
            ca_bundle_config_map: f.ca_bundle_config_map.as_deref(),
            webhook_secret: None,
            poll_interval_seconds: f.poll_interval_seconds(),
        }),
        default_poll_seconds: DEFAULT_FORGEJO_POLL_INTERVAL_SECONDS,
        cleanup_hint: cleanup_hint(spec),
    })
}

/// What a failed cleanup may leave ([`ForgeProfile::cleanup_hint`]).
fn cleanup_hint(spec: &RunnerGroupSpec) -> String {
    // Forgejo's own cleanup of offline runners (`services/cron/tasks_actions.go`
    // `registerOfflineRunnersCleanup`) exists from 12, is off by default, and by default
    // deletes only instance-wide runners (`GLOBAL_SCOPE_ONLY`); 11 has none, and there is no
    // runner DELETE in the API before 15.
    let global = spec
        .forgejo
        .as_ref()
        .is_some_and(|f| f.scope == ForgejoScope::Global);
    let scope_setting = if global {
        ""
    } else {
        " and GLOBAL_SCOPE_ONLY = false (org, user and repository runners are kept otherwise)"
    };
    format!(
        "runners named after the group may stay registered at Forgejo: delete them under \
         Settings → Actions → Runners of the group's scope. On Forgejo 12 or newer the \
         [cron.cleanup_offline_runners] job can remove offline runners after a day: set \
         ENABLED = true{scope_setting}; Forgejo 11 has no such job"
    )
}
