//! Each rule of `validate_spec`, with the field its violation names.

use super::*;
use crate::crd::{ForgeKind, RunnerGroup};
use crate::embedded::Embedded;

fn github() -> RunnerGroupSpec {
    RunnerGroup::test(ForgeKind::Github).spec()
}

fn gitea() -> RunnerGroupSpec {
    RunnerGroup::test(ForgeKind::Gitea)
        .repo("alice/app")
        .labels(["ubuntu-latest:docker://node:20-bookworm", "self-hosted:host"])
        .spec()
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
fn a_name_is_measured_in_characters_as_the_api_server_counts_them() {
    // 255 two-byte characters pass; one more does not.
    let long = "é".repeat(MAX_FORGE_NAME_LEN);
    assert_eq!(check_length("spec.x", Some(&long), MAX_FORGE_NAME_LEN), None);
    let longer = format!("{long}é");
    let v = check_length("spec.x", Some(&longer), MAX_FORGE_NAME_LEN).expect("too long");
    assert_eq!(v.field, "spec.x");
    assert!(v.to_string().contains("at most 255 characters"), "{v}");
    assert_eq!(check_length("spec.x", None, 1), None);
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

/// `spec` with `spec.cache` set to `cache` (JSON, as a user writes it).
fn with_cache(spec: &RunnerGroupSpec, cache: serde_json::Value) -> RunnerGroupSpec {
    let mut v = serde_json::to_value(spec).expect("spec");
    v["cache"] = cache;
    serde_json::from_value(v).expect("spec")
}

#[test]
fn a_cache_size_is_a_whole_quantity_between_1gi_and_10ti() {
    for good in ["1Gi", "10Gi", "2048Mi", "50G", "10Ti"] {
        let s = with_cache(&gitea(), serde_json::json!({"size": good}));
        assert!(fields(&s).is_empty(), "{good}: {:?}", validate_spec(&s));
    }
    for bad in ["ten", "10GB", "0", "512Mi", "11T", "20Ti", "1.5Gi", "-1Gi", ""] {
        let s = with_cache(&gitea(), serde_json::json!({"size": bad}));
        let v = validate_spec(&s);
        assert_eq!(
            v.iter().map(|v| v.field).collect::<Vec<_>>(),
            ["spec.cache.size"],
            "{bad}"
        );
        assert!(v[0].message.contains("between 1Gi and 10Ti"), "{bad}: {}", v[0]);
    }
}

#[test]
fn a_cache_without_a_size_gets_ten_gibibytes() {
    let s = with_cache(&gitea(), serde_json::json!({}));
    assert!(fields(&s).is_empty());
    let v = serde_json::to_value(&s).expect("spec");
    assert_eq!(v["cache"]["size"], "10Gi");
}

#[test]
fn a_cache_storage_class_is_an_object_name() {
    let s = with_cache(&gitea(), serde_json::json!({"storageClassName": "fast-ssd"}));
    assert!(fields(&s).is_empty());
    let s = with_cache(&gitea(), serde_json::json!({"storageClassName": "Fast SSD"}));
    assert_eq!(fields(&s), ["spec.cache.storageClassName"]);
    let s = with_cache(&gitea(), serde_json::json!({"storageClassName": "a".repeat(254)}));
    assert_eq!(fields(&s), ["spec.cache.storageClassName"]);
}

#[test]
fn a_cache_on_a_github_group_is_refused_with_the_reason() {
    let s = with_cache(&github(), serde_json::json!({"size": "10Gi"}));
    let v = validate_spec(&s);
    assert_eq!(v.iter().map(|v| v.field).collect::<Vec<_>>(), ["spec.cache"]);
    assert!(v[0].message.contains("job message"), "{}", v[0]);
    assert!(v[0].message.contains("docs/caches.md"), "{}", v[0]);
}

#[test]
fn a_cache_and_a_config_file_of_the_users_own_are_refused_together() {
    let mut s = with_cache(&gitea(), serde_json::json!({"size": "10Gi"}));
    s.template = Some(Embedded::from_raw(serde_json::json!({
        "spec": {"containers": [{"name": "runner",
            "env": [{"name": "CONFIG_FILE", "value": "/etc/runner/config.yaml"}]}]}
    })));
    let v = validate_spec(&s);
    assert_eq!(v.iter().map(|v| v.field).collect::<Vec<_>>(), ["spec.cache"]);
    assert!(v[0].message.contains("CONFIG_FILE"), "{}", v[0]);
}

/// `spec` in `containerMode` `mode` (none: unset) with `spec.dockerCache` set to `cache`.
fn with_docker_cache(
    spec: &RunnerGroupSpec,
    mode: Option<&str>,
    cache: serde_json::Value,
) -> RunnerGroupSpec {
    let mut v = serde_json::to_value(spec).expect("spec");
    if let Some(mode) = mode {
        v["containerMode"] = serde_json::json!({"type": mode});
    }
    v["dockerCache"] = cache;
    serde_json::from_value(v).expect("spec")
}

#[test]
fn a_docker_cache_needs_dind() {
    for spec in [gitea(), github()] {
        let s = with_docker_cache(&spec, Some("dind"), serde_json::json!({}));
        assert!(fields(&s).is_empty(), "{:?}", validate_spec(&s));
        let v = serde_json::to_value(&s).expect("spec");
        assert_eq!(v["dockerCache"]["size"], "20Gi", "the default size");
    }
    let s = with_docker_cache(&gitea(), None, serde_json::json!({"size": "20Gi"}));
    let v = validate_spec(&s);
    assert_eq!(
        v.iter().map(|v| v.field).collect::<Vec<_>>(),
        ["spec.dockerCache"]
    );
    assert!(v[0].message.contains("containerMode dind"), "{}", v[0]);
    let s = with_docker_cache(&github(), Some("kubernetes"), serde_json::json!({}));
    assert_eq!(fields(&s), ["spec.dockerCache"]);
}

#[test]
fn a_docker_cache_has_a_size_a_class_and_a_pool_within_bounds() {
    let s = with_docker_cache(
        &gitea(),
        Some("dind"),
        serde_json::json!({"size": "100Gi", "storageClassName": "ssd", "claims": 100}),
    );
    assert!(fields(&s).is_empty(), "{:?}", validate_spec(&s));
    for (cache, field) in [
        (serde_json::json!({"size": "512Mi"}), "spec.dockerCache.size"),
        (serde_json::json!({"size": "lots"}), "spec.dockerCache.size"),
        (
            serde_json::json!({"storageClassName": "Fast SSD"}),
            "spec.dockerCache.storageClassName",
        ),
        (serde_json::json!({"claims": 0}), "spec.dockerCache.claims"),
        (serde_json::json!({"claims": 101}), "spec.dockerCache.claims"),
    ] {
        let s = with_docker_cache(&gitea(), Some("dind"), cache.clone());
        assert_eq!(fields(&s), [field], "{cache}");
    }
}
