//! The rules of `spec.gitea` (`Forge::validate`), twins of the CRD schema's.

use forgerunner_core::crd::{ContainerModeType, RunnerGroupSpec};
use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::validate::{
    MAX_FORGE_NAME_LEN, MAX_LABELS, MAX_REPO_LEN, SpecViolation, check_container_mode, check_length,
    is_http_url, is_object_name, is_runner_label, violation,
};

/// The rules of `spec.gitea`; empty when valid.
pub fn validate_gitea(gt: &GiteaSpec) -> Vec<SpecViolation> {
    let mut out = Vec::new();
    let out = &mut out;
    out.extend(check_length(
        "spec.gitea.org",
        gt.org.as_deref(),
        MAX_FORGE_NAME_LEN,
    ));
    out.extend(check_length(
        "spec.gitea.user",
        gt.user.as_deref(),
        MAX_FORGE_NAME_LEN,
    ));
    out.extend(check_length("spec.gitea.repo", gt.repo.as_deref(), MAX_REPO_LEN));
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
    // The CA bundle and proxy follow the same rules and messages as spec.forgejo's.
    if gt.proxy_url.as_deref().is_some_and(|u| !is_http_url(u)) {
        out.push(violation(
            "spec.gitea.proxyUrl",
            "must be an http:// or https:// URL with a host",
        ));
    }
    if gt
        .ca_bundle_config_map
        .as_deref()
        .is_some_and(|n| !is_object_name(n))
    {
        out.push(violation(
            "spec.gitea.caBundleConfigMap",
            "must name a ConfigMap in the group's namespace",
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
    std::mem::take(out)
}

/// `spec.containerMode`: Gitea's runners run job containers through a Docker daemon,
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
mod tests {
    use forgerunner_core::crd::RunnerGroupSpec;
    use forgerunner_core::validate::validate_spec;

    use super::*;

    fn gitea() -> RunnerGroupSpec {
        serde_json::from_value(serde_json::json!({
            "forge": "gitea", "maxRunners": 5,
            "gitea": {
                "url": "https://gitea.example.com", "scope": "repo", "repo": "alice/app",
                "credentials": "gitea-token",
                "labels": ["ubuntu-latest:docker://node:20-bookworm", "self-hosted:host"]
            }
        }))
        .expect("spec")
    }

    fn gt(spec: &mut RunnerGroupSpec) -> &mut GiteaSpec {
        spec.gitea.as_mut().expect("gitea block")
    }

    /// The violations of the whole spec, in order.
    fn violations(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
        let mut v = validate_spec(spec);
        if let Some(gt) = &spec.gitea {
            v.extend(validate_gitea(gt));
        }
        v
    }

    /// The fields named by the violations of the whole spec, in order.
    fn fields(spec: &RunnerGroupSpec) -> Vec<&'static str> {
        violations(spec).into_iter().map(|v| v.field).collect()
    }

    #[test]
    fn names_have_the_schemas_max_length() {
        let long = |n: usize| Some("é".repeat(n));
        let mut s = gitea();
        gt(&mut s).org = long(MAX_FORGE_NAME_LEN + 1);
        gt(&mut s).user = long(MAX_FORGE_NAME_LEN + 1);
        gt(&mut s).repo = Some(format!("o/{}", "r".repeat(MAX_REPO_LEN - 1)));
        assert_eq!(
            fields(&s),
            ["spec.gitea.org", "spec.gitea.user", "spec.gitea.repo"]
        );
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
    fn gitea_proxy_and_ca_bundle() {
        let mut s = gitea();
        gt(&mut s).proxy_url = Some("proxy:3128".into());
        gt(&mut s).ca_bundle_config_map = Some("Bad_Name".into());
        assert_eq!(
            fields(&s),
            ["spec.gitea.proxyUrl", "spec.gitea.caBundleConfigMap"]
        );
        gt(&mut s).proxy_url = Some("http://proxy.corp:3128".into());
        gt(&mut s).ca_bundle_config_map = Some("corp-ca".into());
        assert!(fields(&s).is_empty());
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
            let v = violations(&s);
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
    fn credentials_must_be_a_secret_name() {
        for bad in ["", "Upper", "-lead", "trail-", "under_score", "a..b"] {
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
    fn violation_display_names_the_field() {
        let mut s = gitea();
        gt(&mut s).url = "nope".into();
        let text = violations(&s)[0].to_string();
        assert!(text.starts_with("spec.gitea.url: "), "{text}");
    }
}
