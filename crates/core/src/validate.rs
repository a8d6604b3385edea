//! Spec validation the reconciler runs again (a cluster may skip the CRD's CEL rules, and an object
//! stored before a rule existed is never re-checked by the API server).
//!
//! Every rule of the CRD schema has a twin here; each violation names the JSON path to fix.

use crate::crd::{ForgeKind, GiteaScope, GiteaSpec, GithubSpec, RunnerGroupSpec};

/// A spec rule that does not hold; `field` is the JSON path a user must fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecViolation {
    /// JSON path of the offending field, e.g. `spec.gitea.org`.
    pub field: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Longest URL the schema accepts (`maxLength` of `configUrl`, `url`, `proxyUrl`).
const MAX_URL_LEN: usize = 2048;
/// Longest Kubernetes object name (DNS-1123 subdomain).
const MAX_OBJECT_NAME_LEN: usize = 253;
/// Most labels the schema accepts on one group.
const MAX_LABELS: usize = 64;
/// Longest single label the schema accepts.
const MAX_LABEL_LEN: usize = 256;

fn violation(field: &'static str, message: impl Into<String>) -> SpecViolation {
    SpecViolation {
        field,
        message: message.into(),
    }
}

/// `http://` or `https://` followed by a non-empty host, like the CEL rule `^https?://[^/]+`.
fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|host| !host.is_empty() && !host.starts_with('/')) && url.len() <= MAX_URL_LEN
}

/// A DNS-1123 subdomain: what Kubernetes accepts as a Secret or ConfigMap name.
fn is_object_name(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= MAX_OBJECT_NAME_LEN
        && name.split('.').all(|part| {
            part.starts_with(alnum) && part.ends_with(alnum) && part.chars().all(|c| alnum(c) || c == '-')
        })
}

/// act_runner label form `name`, `name:host` or `name:docker://image` (no commas or spaces, since
/// the runner receives the list comma-separated).
fn is_runner_label(label: &str) -> bool {
    let plain = |s: &str| !s.is_empty() && !s.contains([',', ' '] as [char; 2]);
    if label.len() > MAX_LABEL_LEN {
        return false;
    }
    match label.split_once(':') {
        None => plain(label),
        Some((name, schema)) => {
            plain(name)
                && !name.contains(':')
                && (schema == "host" || schema.strip_prefix("docker://").is_some_and(plain))
        }
    }
}

/// Checks every rule of the CRD schema (and CEL rules) on a spec; empty when valid.
pub fn validate_spec(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    let mut out = Vec::new();
    check_common(spec, &mut out);
    match spec.forge {
        ForgeKind::Github => {
            if spec.gitea.is_some() {
                out.push(violation(
                    "spec.gitea",
                    "must not be set when spec.forge is github",
                ));
            }
            match &spec.github {
                None => out.push(violation("spec.github", "is required when spec.forge is github")),
                Some(gh) => check_github(gh, &mut out),
            }
        }
        ForgeKind::Gitea => {
            if spec.github.is_some() {
                out.push(violation(
                    "spec.github",
                    "must not be set when spec.forge is gitea",
                ));
            }
            match &spec.gitea {
                None => out.push(violation("spec.gitea", "is required when spec.forge is gitea")),
                Some(gt) => check_gitea(gt, &mut out),
            }
        }
    }
    out
}

fn check_common(spec: &RunnerGroupSpec, out: &mut Vec<SpecViolation>) {
    if spec.max_runners < 1 {
        out.push(violation("spec.maxRunners", "must be at least 1"));
    }
    if spec.min_runners > spec.max_runners {
        out.push(violation(
            "spec.minRunners",
            format!(
                "{} exceeds spec.maxRunners {}",
                spec.min_runners, spec.max_runners
            ),
        ));
    }
    if spec.idle_timeout_seconds == Some(0) {
        out.push(violation(
            "spec.idleTimeoutSeconds",
            "must be at least 1 (or unset for the default)",
        ));
    }
    if spec.active_deadline_seconds.is_some_and(|s| s < 1) {
        out.push(violation(
            "spec.activeDeadlineSeconds",
            "must be at least 1 (or unset for no deadline)",
        ));
    }
    if spec.ttl_seconds_after_finished.is_some_and(|s| s < 0) {
        out.push(violation("spec.ttlSecondsAfterFinished", "must not be negative"));
    }
    if spec.image.as_deref().is_some_and(|i| i.trim().is_empty()) {
        out.push(violation(
            "spec.image",
            "must not be empty (leave it unset for the forge's default)",
        ));
    }
}

fn check_github(gh: &GithubSpec, out: &mut Vec<SpecViolation>) {
    if !is_http_url(&gh.config_url) {
        out.push(violation(
            "spec.github.configUrl",
            "must be an http:// or https:// URL with a host, e.g. https://github.com/my-org",
        ));
    }
    if !is_object_name(&gh.credentials) {
        out.push(violation(
            "spec.github.credentials",
            "must name a Secret in the group's namespace",
        ));
    }
    if gh.proxy_url.as_deref().is_some_and(|u| !is_http_url(u)) {
        out.push(violation(
            "spec.github.proxyUrl",
            "must be an http:// or https:// URL with a host",
        ));
    }
    if gh
        .ca_bundle_config_map
        .as_deref()
        .is_some_and(|n| !is_object_name(n))
    {
        out.push(violation(
            "spec.github.caBundleConfigMap",
            "must name a ConfigMap in the group's namespace",
        ));
    }
    if gh.labels.len() > MAX_LABELS {
        out.push(violation(
            "spec.github.labels",
            format!("must list at most {MAX_LABELS} labels"),
        ));
    }
    if let Some(bad) = gh.labels.iter().find(|l| l.is_empty() || l.len() > MAX_LABEL_LEN) {
        out.push(violation(
            "spec.github.labels",
            format!("label {bad:?} must be 1 to {MAX_LABEL_LEN} characters"),
        ));
    }
}

fn check_gitea(gt: &GiteaSpec, out: &mut Vec<SpecViolation>) {
    if !is_http_url(&gt.url) {
        out.push(violation(
            "spec.gitea.url",
            "must be an http:// or https:// URL with a host, e.g. https://gitea.example.com",
        ));
    }
    if !is_object_name(&gt.credentials) {
        out.push(violation(
            "spec.gitea.credentials",
            "must name a Secret in the group's namespace",
        ));
    }
    if gt.webhook_secret.as_deref().is_some_and(|n| !is_object_name(n)) {
        out.push(violation(
            "spec.gitea.webhookSecret",
            "must name a Secret in the group's namespace",
        ));
    }
    if gt.poll_interval_seconds == Some(0) {
        out.push(violation(
            "spec.gitea.pollIntervalSeconds",
            "must be at least 1 (or unset for the default 5)",
        ));
    }
    if gt.labels.is_empty() {
        out.push(violation("spec.gitea.labels", "must list at least one label"));
    } else if gt.labels.len() > MAX_LABELS {
        out.push(violation(
            "spec.gitea.labels",
            format!("must list at most {MAX_LABELS} labels"),
        ));
    }
    if let Some(bad) = gt.labels.iter().find(|l| !is_runner_label(l)) {
        out.push(violation(
            "spec.gitea.labels",
            format!("label {bad:?} must be name, name:host or name:docker://image"),
        ));
    }
    let empty = |v: &Option<String>| v.as_deref().is_none_or(str::is_empty);
    match gt.scope {
        GiteaScope::Org if empty(&gt.org) => {
            out.push(violation("spec.gitea.org", "is required when scope is org"));
        }
        GiteaScope::User if empty(&gt.user) => {
            out.push(violation("spec.gitea.user", "is required when scope is user"));
        }
        GiteaScope::Repo if gt.repo.is_none() => {
            out.push(violation(
                "spec.gitea.repo",
                "is required as owner/name when scope is repo",
            ));
        }
        _ => {}
    }
    let owner_name = |r: &str| {
        r.split_once('/')
            .is_some_and(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
    };
    if gt.repo.as_deref().is_some_and(|r| !owner_name(r)) {
        out.push(violation("spec.gitea.repo", "must be owner/name"));
    }
}

#[cfg(test)]
mod tests;
