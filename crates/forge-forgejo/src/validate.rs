//! The rules of `spec.forgejo` (`Forge::validate`), twins of the CRD schema's. Where a field
//! means what it means in `spec.gitea` (or `spec.github` for the CA bundle and proxy), the rule
//! and its message are the same.

use forgerunner_core::crd::{ContainerModeType, RunnerGroupSpec};
use forgerunner_core::crd::{ForgejoScope, ForgejoSpec};
use forgerunner_core::validate::{
    MAX_LABEL_LEN, MAX_LABELS, SpecViolation, check_container_mode, is_http_url, is_object_name, violation,
};

use crate::labels::parse_labels;

/// The rules of `spec.forgejo`; empty when valid.
pub fn validate_forgejo(fj: &ForgejoSpec) -> Vec<SpecViolation> {
    let mut out = Vec::new();
    if !is_http_url(&fj.url) {
        out.push(violation(
            "spec.forgejo.url",
            "must be an http:// or https:// URL with a host, e.g. https://forgejo.example.com",
        ));
    }
    if !is_object_name(&fj.credentials) {
        out.push(violation(
            "spec.forgejo.credentials",
            "must name a Secret in the group's namespace",
        ));
    }
    if fj.poll_interval_seconds == Some(0) {
        out.push(violation(
            "spec.forgejo.pollIntervalSeconds",
            "must be at least 1 (or unset for the default 5)",
        ));
    }
    if fj.proxy_url.as_deref().is_some_and(|u| !is_http_url(u)) {
        out.push(violation(
            "spec.forgejo.proxyUrl",
            "must be an http:// or https:// URL with a host",
        ));
    }
    if fj
        .ca_bundle_config_map
        .as_deref()
        .is_some_and(|n| !is_object_name(n))
    {
        out.push(violation(
            "spec.forgejo.caBundleConfigMap",
            "must name a ConfigMap in the group's namespace",
        ));
    }
    check_labels(&fj.labels, &mut out);
    check_scope(fj, &mut out);
    out
}

fn check_labels(labels: &[String], out: &mut Vec<SpecViolation>) {
    if labels.is_empty() {
        out.push(violation("spec.forgejo.labels", "must list at least one label"));
    } else if labels.len() > MAX_LABELS {
        out.push(violation(
            "spec.forgejo.labels",
            format!("must list at most {MAX_LABELS} labels"),
        ));
    }
    let one_bad = labels
        .iter()
        .find(|l| l.len() > MAX_LABEL_LEN || parse_labels(&[l.as_str()]).is_err());
    if let Some(bad) = one_bad {
        out.push(violation(
            "spec.forgejo.labels",
            format!("label {bad:?} must be name, name:host, name:docker://image or name:lxc://template"),
        ));
    } else if let Err(e) = parse_labels(labels) {
        // Each label is fine alone, so the set repeats a name.
        out.push(violation("spec.forgejo.labels", e.to_string()));
    }
}

fn check_scope(fj: &ForgejoSpec, out: &mut Vec<SpecViolation>) {
    let empty = |v: &Option<String>| v.as_deref().is_none_or(str::is_empty);
    match fj.scope {
        ForgejoScope::Org if empty(&fj.org) => {
            out.push(violation("spec.forgejo.org", "is required when scope is org"));
        }
        ForgejoScope::User if empty(&fj.user) => {
            out.push(violation("spec.forgejo.user", "is required when scope is user"));
        }
        ForgejoScope::Repo if fj.repo.is_none() => {
            out.push(violation(
                "spec.forgejo.repo",
                "is required as owner/name when scope is repo",
            ));
        }
        _ => {}
    }
    let owner_name = |r: &str| {
        r.split_once('/')
            .is_some_and(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
    };
    if fj.repo.as_deref().is_some_and(|r| !owner_name(r)) {
        out.push(violation("spec.forgejo.repo", "must be owner/name"));
    }
}

/// `spec.containerMode`: Forgejo's runners run job containers through a Docker daemon,
/// so `dind` (or no mode) works; the `kubernetes` modes need GitHub's runner container hooks.
/// Labels with `docker://` and no mode stay allowed: the image or the template may bring the
/// daemon.
pub fn validate_container_mode(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    check_container_mode(
        spec,
        &[ContainerModeType::Dind],
        "the kubernetes modes need GitHub's runner container hooks",
    )
    .into_iter()
    .collect()
}

#[cfg(test)]
mod container_mode_tests;

#[cfg(test)]
mod tests;
