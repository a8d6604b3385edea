//! Each rule of `validate_spec`, with the field its violation names.

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
