//! Spec validation the reconciler runs again (a cluster may skip the CRD's CEL rules).

use crate::crd::{ForgeKind, GiteaScope, RunnerGroupSpec};

/// A spec rule that does not hold; `field` is the JSON path a user must fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecViolation {
    /// JSON path of the offending field, e.g. `spec.gitea.org`.
    pub field: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

fn violation(field: &'static str, message: impl Into<String>) -> SpecViolation {
    SpecViolation { field, message: message.into() }
}

fn is_http_url(url: &str) -> bool {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|host| !host.is_empty() && !host.starts_with('/'))
}

/// Checks every rule of the CRD schema (and CEL rules) on a spec; empty when valid.
pub fn validate_spec(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    let mut out = Vec::new();
    if spec.max_runners < 1 {
        out.push(violation("spec.maxRunners", "must be at least 1"));
    }
    if spec.min_runners > spec.max_runners {
        out.push(violation(
            "spec.minRunners",
            format!("{} exceeds spec.maxRunners {}", spec.min_runners, spec.max_runners),
        ));
    }
    match spec.forge {
        ForgeKind::Github if spec.gitea.is_some() => {
            out.push(violation("spec.gitea", "must not be set when spec.forge is github"));
        }
        ForgeKind::Gitea if spec.github.is_some() => {
            out.push(violation("spec.github", "must not be set when spec.forge is gitea"));
        }
        _ => {}
    }
    match spec.forge {
        ForgeKind::Github => match &spec.github {
            None => out.push(violation("spec.github", "is required when spec.forge is github")),
            Some(gh) => {
                if !is_http_url(&gh.config_url) {
                    out.push(violation("spec.github.configUrl", "must be an http:// or https:// URL"));
                }
                if gh.credentials.is_empty() {
                    out.push(violation("spec.github.credentials", "must name a Secret"));
                }
            }
        },
        ForgeKind::Gitea => match &spec.gitea {
            None => out.push(violation("spec.gitea", "is required when spec.forge is gitea")),
            Some(gt) => {
                if !is_http_url(&gt.url) {
                    out.push(violation("spec.gitea.url", "must be an http:// or https:// URL"));
                }
                if gt.credentials.is_empty() {
                    out.push(violation("spec.gitea.credentials", "must name a Secret"));
                }
                if gt.labels.is_empty() {
                    out.push(violation("spec.gitea.labels", "must list at least one label"));
                }
                let empty = |v: &Option<String>| v.as_deref().is_none_or(str::is_empty);
                match gt.scope {
                    GiteaScope::Org if empty(&gt.org) => {
                        out.push(violation("spec.gitea.org", "is required when scope is org"));
                    }
                    GiteaScope::User if empty(&gt.user) => {
                        out.push(violation("spec.gitea.user", "is required when scope is user"));
                    }
                    GiteaScope::Repo => {
                        let ok = gt.repo.as_deref().is_some_and(|r| {
                            r.split_once('/').is_some_and(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
                        });
                        if !ok {
                            out.push(violation("spec.gitea.repo", "is required as owner/name when scope is repo"));
                        }
                    }
                    _ => {}
                }
            }
        },
    }
    out
}
