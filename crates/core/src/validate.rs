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
mod tests {
    use super::*;
    use crate::crd::{GiteaScope, GiteaSpec, GithubSpec};

    fn github() -> RunnerGroupSpec {
        RunnerGroupSpec {
            forge: ForgeKind::Github,
            github: Some(GithubSpec {
                config_url: "https://github.com/my-org".into(),
                credentials: "github-pat".into(),
                runner_group: None,
                scale_set_name: None,
                labels: vec![],
                ca_bundle_config_map: None,
                proxy_url: None,
            }),
            gitea: None,
            min_runners: 0,
            max_runners: 5,
            image: None,
            template: None,
            ttl_seconds_after_finished: None,
            active_deadline_seconds: None,
            idle_timeout_seconds: None,
        }
    }

    fn gitea() -> RunnerGroupSpec {
        RunnerGroupSpec {
            forge: ForgeKind::Gitea,
            github: None,
            gitea: Some(GiteaSpec {
                url: "https://gitea.example.com".into(),
                scope: GiteaScope::Repo,
                org: None,
                user: None,
                repo: Some("alice/app".into()),
                credentials: "gitea-token".into(),
                labels: vec![
                    "ubuntu-latest:docker://node:20-bookworm".into(),
                    "self-hosted:host".into(),
                ],
                poll_interval_seconds: None,
                webhook_secret: None,
            }),
            ..github()
        }
    }

    fn gh(spec: &mut RunnerGroupSpec) -> &mut GithubSpec {
        spec.github.as_mut().expect("github block")
    }

    fn gt(spec: &mut RunnerGroupSpec) -> &mut GiteaSpec {
        spec.gitea.as_mut().expect("gitea block")
    }

    /// The fields named by the violations, in order.
    fn fields(spec: &RunnerGroupSpec) -> Vec<&'static str> {
        validate_spec(spec).into_iter().map(|v| v.field).collect()
    }

    #[test]
    fn valid_specs_pass() {
        assert_eq!(fields(&github()), Vec::<&str>::new());
        assert_eq!(fields(&gitea()), Vec::<&str>::new());
    }

    #[test]
    fn max_runners_zero() {
        let mut s = github();
        s.max_runners = 0;
        assert_eq!(fields(&s), ["spec.maxRunners"]);
    }

    #[test]
    fn min_above_max_names_min() {
        let mut s = github();
        s.min_runners = 6;
        let v = validate_spec(&s);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "spec.minRunners");
        assert!(v[0].to_string().contains("spec.maxRunners 5"), "{}", v[0]);
    }

    #[test]
    fn min_equal_max_is_fine() {
        let mut s = gitea();
        s.min_runners = 5;
        assert!(fields(&s).is_empty());
    }

    #[test]
    fn duration_bounds() {
        let mut s = github();
        s.idle_timeout_seconds = Some(0);
        s.active_deadline_seconds = Some(0);
        s.ttl_seconds_after_finished = Some(-1);
        assert_eq!(
            fields(&s),
            [
                "spec.idleTimeoutSeconds",
                "spec.activeDeadlineSeconds",
                "spec.ttlSecondsAfterFinished"
            ]
        );
        s.idle_timeout_seconds = Some(1);
        s.active_deadline_seconds = Some(1);
        s.ttl_seconds_after_finished = Some(0);
        assert!(fields(&s).is_empty());
    }

    #[test]
    fn empty_image() {
        let mut s = github();
        s.image = Some(" ".into());
        assert_eq!(fields(&s), ["spec.image"]);
    }

    #[test]
    fn forge_block_missing() {
        let mut s = github();
        s.github = None;
        assert_eq!(fields(&s), ["spec.github"]);
        let mut s = gitea();
        s.gitea = None;
        assert_eq!(fields(&s), ["spec.gitea"]);
    }

    #[test]
    fn other_forge_block_forbidden() {
        let mut s = github();
        s.gitea = gitea().gitea;
        assert_eq!(fields(&s), ["spec.gitea"]);
        let mut s = gitea();
        s.github = github().github;
        assert_eq!(fields(&s), ["spec.github"]);
    }

    #[test]
    fn wrong_block_only() {
        let mut s = github();
        s.github = None;
        s.gitea = gitea().gitea;
        assert_eq!(fields(&s), ["spec.gitea", "spec.github"]);
    }

    #[test]
    fn github_urls() {
        for bad in [
            "github.com/my-org",
            "ftp://github.com/x",
            "https://",
            "https:///path",
            "",
        ] {
            let mut s = github();
            gh(&mut s).config_url = bad.into();
            assert_eq!(fields(&s), ["spec.github.configUrl"], "{bad:?}");
        }
        for good in [
            "http://ghes.local/org",
            "https://github.example.com/enterprises/e",
            "https://github.com/o/r",
        ] {
            let mut s = github();
            gh(&mut s).config_url = good.into();
            assert!(fields(&s).is_empty(), "{good:?}");
        }
        let mut s = github();
        gh(&mut s).config_url = format!("https://github.com/{}", "a".repeat(MAX_URL_LEN));
        assert_eq!(fields(&s), ["spec.github.configUrl"]);
    }

    #[test]
    fn github_proxy_and_ca_bundle() {
        let mut s = github();
        gh(&mut s).proxy_url = Some("proxy:3128".into());
        gh(&mut s).ca_bundle_config_map = Some("Bad_Name".into());
        assert_eq!(
            fields(&s),
            ["spec.github.proxyUrl", "spec.github.caBundleConfigMap"]
        );
        gh(&mut s).proxy_url = Some("http://proxy.internal:3128".into());
        gh(&mut s).ca_bundle_config_map = Some("corp-ca".into());
        assert!(fields(&s).is_empty());
    }

    #[test]
    fn credentials_must_be_a_secret_name() {
        for bad in ["", "Upper", "-lead", "trail-", "under_score", "a..b"] {
            let mut s = github();
            gh(&mut s).credentials = bad.into();
            assert_eq!(fields(&s), ["spec.github.credentials"], "{bad:?}");
            let mut s = gitea();
            gt(&mut s).credentials = bad.into();
            assert_eq!(fields(&s), ["spec.gitea.credentials"], "{bad:?}");
        }
        let mut s = gitea();
        gt(&mut s).credentials = "a".repeat(254);
        assert_eq!(fields(&s), ["spec.gitea.credentials"]);
        gt(&mut s).credentials = "gitea.token-1".into();
        assert!(fields(&s).is_empty());
    }

    #[test]
    fn github_labels() {
        let mut s = github();
        gh(&mut s).labels = vec!["linux".into(), String::new()];
        assert_eq!(fields(&s), ["spec.github.labels"]);
        gh(&mut s).labels = (0..65).map(|i| format!("l{i}")).collect();
        assert_eq!(fields(&s), ["spec.github.labels"]);
    }

    #[test]
    fn gitea_url() {
        let mut s = gitea();
        gt(&mut s).url = "gitea.example.com".into();
        assert_eq!(fields(&s), ["spec.gitea.url"]);
    }

    #[test]
    fn gitea_webhook_secret_and_poll_interval() {
        let mut s = gitea();
        gt(&mut s).webhook_secret = Some("Not A Name".into());
        gt(&mut s).poll_interval_seconds = Some(0);
        assert_eq!(
            fields(&s),
            ["spec.gitea.webhookSecret", "spec.gitea.pollIntervalSeconds"]
        );
    }

    #[test]
    fn gitea_labels_required() {
        let mut s = gitea();
        gt(&mut s).labels.clear();
        assert_eq!(fields(&s), ["spec.gitea.labels"]);
    }

    #[test]
    fn gitea_label_forms() {
        for good in [
            "ubuntu-latest",
            "linux:host",
            "ubuntu-22.04:docker://ghcr.io/catthehacker/ubuntu:act-22.04",
        ] {
            let mut s = gitea();
            gt(&mut s).labels = vec![good.into()];
            assert!(fields(&s).is_empty(), "{good:?}");
        }
        for bad in [
            "",
            ":host",
            "a:vm",
            "a:docker://",
            "a:docker:image",
            "a,b",
            "a b",
            "a::host",
        ] {
            let mut s = gitea();
            gt(&mut s).labels = vec![bad.into()];
            let v = validate_spec(&s);
            assert_eq!(v.len(), 1, "{bad:?}");
            assert_eq!(v[0].field, "spec.gitea.labels");
            assert!(
                v[0].message.contains(&format!("{bad:?}")),
                "{bad:?}: {}",
                v[0].message
            );
        }
    }

    #[test]
    fn gitea_scope_needs_its_name() {
        let mut s = gitea();
        gt(&mut s).scope = GiteaScope::Org;
        assert_eq!(fields(&s), ["spec.gitea.org"]);
        gt(&mut s).org = Some(String::new());
        assert_eq!(fields(&s), ["spec.gitea.org"]);
        gt(&mut s).org = Some("acme".into());
        assert!(fields(&s).is_empty());

        gt(&mut s).scope = GiteaScope::User;
        assert_eq!(fields(&s), ["spec.gitea.user"]);
        gt(&mut s).user = Some("alice".into());
        assert!(fields(&s).is_empty());

        gt(&mut s).scope = GiteaScope::Repo;
        gt(&mut s).repo = None;
        assert_eq!(fields(&s), ["spec.gitea.repo"]);
    }

    #[test]
    fn gitea_global_needs_nothing() {
        let mut s = gitea();
        gt(&mut s).scope = GiteaScope::Global;
        gt(&mut s).repo = None;
        assert!(fields(&s).is_empty());
    }

    #[test]
    fn gitea_repo_shape() {
        for bad in ["app", "/app", "alice/", "alice/app/x", ""] {
            let mut s = gitea();
            gt(&mut s).repo = Some(bad.into());
            assert_eq!(fields(&s), ["spec.gitea.repo"], "{bad:?}");
        }
    }

    #[test]
    fn violation_display_names_the_field() {
        let mut s = gitea();
        gt(&mut s).url = "nope".into();
        let text = validate_spec(&s)[0].to_string();
        assert!(text.starts_with("spec.gitea.url: "), "{text}");
    }
}
