//! The rules of `spec.gitea` (`Forge::describe`), twins of the CRD schema's. The rules it shares
//! with `spec.forgejo` are [`forgerunner_http::spec_rules`]'; only the webhook Secret and the label
//! forms are Gitea's own.

use forgerunner_core::crd::GiteaSpec;
use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::validate::{SpecViolation, is_object_name, is_runner_label, violation};
use forgerunner_http::spec_rules::{self as rules, BlockFields};

/// Paths of `spec.gitea`'s fields, which the shared rules name.
pub(crate) const FIELDS: BlockFields = forgerunner_http::block_fields!("gitea");

/// The rules of `spec.gitea`; empty when valid.
pub fn validate_gitea(gt: &GiteaSpec) -> Vec<SpecViolation> {
    let (org, user, repo) = (gt.org.as_deref(), gt.user.as_deref(), gt.repo.as_deref());
    let mut out = Vec::new();
    rules::check_name_lengths(&FIELDS, org, user, repo, &mut out);
    rules::check_url(&FIELDS, &gt.url, &mut out);
    rules::check_credentials(&FIELDS, &gt.credentials, &mut out);
    if gt.webhook_secret.as_deref().is_some_and(|n| !is_object_name(n)) {
        out.push(violation(
            "spec.gitea.webhookSecret",
            "must name a Secret in the group's namespace",
        ));
    }
    rules::check_proxy_url(&FIELDS, gt.proxy_url.as_deref(), &mut out);
    rules::check_ca_bundle_config_map(&FIELDS, gt.ca_bundle_config_map.as_deref(), &mut out);
    rules::check_poll_interval(&FIELDS, gt.poll_interval_seconds, &mut out);
    rules::check_label_count(&FIELDS, &gt.labels, &mut out);
    let forms = "name, name:host or name:docker://image";
    rules::check_label_forms(&FIELDS, &gt.labels, is_runner_label, forms, &mut out);
    rules::check_scope(&FIELDS, gt.scope, org, user, repo, &mut out);
    out
}

/// `spec.containerMode`: Gitea's runners run job containers through a Docker daemon,
/// so `dind` (or no mode) works; the `kubernetes` modes need GitHub's runner container hooks.
/// Labels with `docker://` and no mode stay allowed: the image or the template may bring the
/// daemon.
pub fn validate_container_mode(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    rules::check_container_mode(spec)
}

#[cfg(test)]
mod container_mode_tests;

#[cfg(test)]
mod tests {
    use forgerunner_http::spec_rules::testing::Harness;
    use serde_json::json;

    use super::*;

    /// `spec.gitea` under the tables it shares with `spec.forgejo`.
    pub(super) fn harness() -> Harness {
        Harness::new(FIELDS, |s| s.gitea.as_ref().map(validate_gitea))
    }

    forgerunner_http::block_rule_tests!(harness());

    #[test]
    fn violations_come_in_rule_order() {
        harness().every_setting_wrong(
            &[("webhookSecret", json!("Not A Name"))],
            &[
                "spec.gitea.url",
                "spec.gitea.credentials",
                "spec.gitea.webhookSecret",
                "spec.gitea.proxyUrl",
                "spec.gitea.caBundleConfigMap",
                "spec.gitea.pollIntervalSeconds",
            ],
        );
    }
}
