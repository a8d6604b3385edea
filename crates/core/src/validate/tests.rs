//! Each rule of `validate_spec`, with the field its violation names.

use super::*;
use crate::crd::{ForgeKind, GiteaScope, GiteaSpec, GithubSpec};
use crate::embedded::Embedded;

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
        forgejo: None,
        min_runners: 0,
        max_runners: 5,
        image: None,
        template: None,
        ttl_seconds_after_finished: None,
        active_deadline_seconds: None,
        idle_timeout_seconds: None,
        startup_timeout_seconds: None,
        scale_down_delay_seconds: None,
        container_mode: None,
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
            ca_bundle_config_map: None,
            proxy_url: None,
        }),
        ..github()
    }
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
    s.startup_timeout_seconds = Some(0);
    s.active_deadline_seconds = Some(0);
    s.ttl_seconds_after_finished = Some(-1);
    assert_eq!(
        fields(&s),
        [
            "spec.idleTimeoutSeconds",
            "spec.startupTimeoutSeconds",
            "spec.activeDeadlineSeconds",
            "spec.ttlSecondsAfterFinished"
        ]
    );
    s.idle_timeout_seconds = Some(1);
    s.startup_timeout_seconds = Some(1);
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
    assert_eq!(fields(&s), ["spec.github", "spec.gitea"]);
}

#[test]
fn violation_display_names_the_field() {
    let mut s = gitea();
    s.max_runners = 0;
    let text = validate_spec(&s)[0].to_string();
    assert!(text.starts_with("spec.maxRunners: "), "{text}");
}

#[test]
fn work_volume_claim_only_with_kubernetes_mode() {
    use crate::crd::{ContainerMode, ContainerModeType};
    use crate::runner_pod::default_work_volume_claim;
    let mut s = github();
    s.container_mode = Some(ContainerMode {
        type_: ContainerModeType::Kubernetes,
        kubernetes_mode_work_volume_claim: Some(Embedded::new(&default_work_volume_claim())),
    });
    assert!(fields(&s).is_empty());
    for other in [ContainerModeType::Dind, ContainerModeType::KubernetesNoVolume] {
        if let Some(m) = s.container_mode.as_mut() {
            m.type_ = other;
        }
        assert_eq!(
            fields(&s),
            ["spec.containerMode.kubernetesModeWorkVolumeClaim"],
            "{other:?}"
        );
    }
}

#[test]
fn container_mode_support_is_the_forges_to_say() {
    use crate::crd::{ContainerMode, ContainerModeType};
    let mut s = gitea();
    let only_dind = [ContainerModeType::Dind];
    let why = "kubernetes mode needs GitHub's runner container hooks";
    assert_eq!(check_container_mode(&s, &only_dind, why), None, "no mode");
    for (mode, ok) in [
        (ContainerModeType::Dind, true),
        (ContainerModeType::Kubernetes, false),
        (ContainerModeType::KubernetesNoVolume, false),
    ] {
        s.container_mode = Some(ContainerMode {
            type_: mode,
            kubernetes_mode_work_volume_claim: None,
        });
        let v = check_container_mode(&s, &only_dind, why);
        assert_eq!(v.is_none(), ok, "{mode:?}");
        if let Some(v) = v {
            assert_eq!(v.field, "spec.containerMode.type");
            assert_eq!(
                v.message,
                "kubernetes mode needs GitHub's runner container hooks; gitea runners support dind or no mode"
            );
        }
    }
}

#[test]
fn max_runners_has_an_upper_bound() {
    let mut s = github();
    s.max_runners = MAX_RUNNERS_LIMIT;
    assert!(fields(&s).is_empty());
    s.max_runners = MAX_RUNNERS_LIMIT + 1;
    assert_eq!(fields(&s), ["spec.maxRunners"]);
    let text = validate_spec(&s)[0].to_string();
    assert!(text.contains("at most 1000"), "{text}");
}

#[test]
fn forge_names_have_the_schemas_max_length() {
    let long = |n: usize| Some("é".repeat(n));
    let mut s = github();
    if let Some(gh) = s.github.as_mut() {
        // Characters, as the API server counts them, not bytes: 255 two-byte characters pass.
        gh.runner_group = long(MAX_FORGE_NAME_LEN);
        gh.scale_set_name = long(MAX_FORGE_NAME_LEN);
    }
    assert!(fields(&s).is_empty());
    if let Some(gh) = s.github.as_mut() {
        gh.runner_group = long(MAX_FORGE_NAME_LEN + 1);
        gh.scale_set_name = long(MAX_FORGE_NAME_LEN + 1);
    }
    assert_eq!(
        fields(&s),
        ["spec.github.runnerGroup", "spec.github.scaleSetName"]
    );
    let mut s = gitea();
    if let Some(gt) = s.gitea.as_mut() {
        gt.org = long(MAX_FORGE_NAME_LEN + 1);
        gt.user = long(MAX_FORGE_NAME_LEN + 1);
        gt.repo = Some(format!("o/{}", "r".repeat(MAX_REPO_LEN - 1)));
    }
    assert_eq!(
        fields(&s),
        ["spec.gitea.org", "spec.gitea.user", "spec.gitea.repo"]
    );
}

#[test]
fn an_embedded_object_that_does_not_decode_names_its_field() {
    use crate::crd::{ContainerMode, ContainerModeType};
    let mut s = github();
    s.template = Some(Embedded::from_raw(serde_json::json!({
        "spec": {"containers": [{"name": "runner", "securityContext": {"runAsUser": "1000"}}]}
    })));
    s.container_mode = Some(ContainerMode {
        type_: ContainerModeType::Kubernetes,
        kubernetes_mode_work_volume_claim: Some(Embedded::from_raw(serde_json::json!({"spec": []}))),
    });
    let v = validate_spec(&s);
    assert_eq!(
        v.iter().map(|v| v.field).collect::<Vec<_>>(),
        [
            "spec.template",
            "spec.containerMode.kubernetesModeWorkVolumeClaim"
        ]
    );
    assert!(
        v[0].to_string()
            .starts_with("spec.template: spec.containers[0].securityContext.runAsUser: invalid type"),
        "{}",
        v[0]
    );
}
