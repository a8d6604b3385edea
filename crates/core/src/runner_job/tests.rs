//! Unit tests of runner Job building and template merge.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, PodSpec, PodTemplateSpec, ResourceRequirements,
    SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::crd::ForgeKind;
use crate::embedded::Embedded;
use crate::forge::SecretValue;
use crate::testing::RunnerGroupBuilder;

const TOKEN: &str = "super-secret-registration-token-123";

/// The group the tests build runners of: Gitea group `ci/linux-x64`, as stored (with a uid).
fn group() -> RunnerGroupBuilder {
    RunnerGroup::test(ForgeKind::Gitea)
        .named("ci", "linux-x64")
        .uid("uid-123")
        .credentials("gitea-creds")
        .ttl_after_finished(300)
        .active_deadline(3600)
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn default_pod(secret_name: &str) -> PodSpec {
    PodSpec {
        containers: vec![Container {
            name: "runner".into(),
            image: Some("gitea/act_runner:0.2".into()),
            command: Some(vec!["/bin/run".into()]),
            env: Some(vec![
                env("GITEA_INSTANCE_URL", "https://gitea.example.com"),
                secret_env("GITEA_RUNNER_REGISTRATION_TOKEN", secret_name, "token"),
            ]),
            volume_mounts: Some(vec![VolumeMount {
                name: "data".into(),
                mount_path: "/data".into(),
                ..VolumeMount::default()
            }]),
            ..Container::default()
        }],
        volumes: Some(vec![Volume {
            name: "data".into(),
            ..Volume::default()
        }]),
        restart_policy: Some("Always".into()),
        ..PodSpec::default()
    }
}

fn creds() -> RunnerCredentials {
    RunnerCredentials {
        secret_data: BTreeMap::from([("token".to_owned(), SecretValue::new(TOKEN))]),
        env: BTreeMap::from([("GITEA_RUNNER_NAME".to_owned(), "linux-x64-abcde".to_owned())]),
        annotations: BTreeMap::from([("forgerunner.dev/runner-id".to_owned(), "42".to_owned())]),
    }
}

fn build(g: &RunnerGroup) -> Job {
    let c = creds();
    build_runner_job(RunnerJobInput {
        group: g,
        runner_name: "linux-x64-abcde",
        default_pod: default_pod("linux-x64-abcde"),
        credentials: &c,
    })
    .expect("job builds")
}

fn pod_spec(job: &Job) -> &PodSpec {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

fn runner(job: &Job) -> &Container {
    pod_spec(job)
        .containers
        .iter()
        .find(|c| c.name == "runner")
        .expect("runner container")
}

fn env_value<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
    c.env.as_ref()?.iter().find(|e| e.name == name)
}

fn template(spec: PodSpec, labels: &[(&str, &str)]) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            name: Some("ignored".into()),
            namespace: Some("elsewhere".into()),
            ..ObjectMeta::default()
        }),
        spec: Some(spec),
    }
}

#[test]
fn job_has_contract_fields() {
    let g = group().build();
    let job = build(&g);
    assert_eq!(job.metadata.name.as_deref(), Some("linux-x64-abcde"));
    assert_eq!(job.metadata.namespace.as_deref(), Some("ci"));
    let labels = job.metadata.labels.as_ref().expect("labels");
    assert_eq!(
        labels.get(MANAGED_BY_LABEL).map(String::as_str),
        Some("forgerunner")
    );
    assert_eq!(labels.get(GROUP_LABEL).map(String::as_str), Some("linux-x64"));
    assert_eq!(labels.get(FORGE_LABEL).map(String::as_str), Some("gitea"));
    let owner = &job.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(owner.kind, "RunnerGroup");
    assert_eq!(owner.uid, "uid-123");
    assert_eq!(owner.controller, Some(true));
    let spec = job.spec.as_ref().expect("spec");
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.ttl_seconds_after_finished, Some(300));
    assert_eq!(spec.active_deadline_seconds, Some(3600));
    let pod_meta = spec.template.metadata.as_ref().expect("pod meta");
    assert_eq!(
        pod_meta
            .labels
            .as_ref()
            .expect("pod labels")
            .get(GROUP_LABEL)
            .map(String::as_str),
        Some("linux-x64")
    );
    assert_eq!(pod_spec(&job).restart_policy.as_deref(), Some("Never"));
    let ann = job.metadata.annotations.as_ref().expect("annotations");
    assert_eq!(
        ann.get("forgerunner.dev/runner-id").map(String::as_str),
        Some("42")
    );
}

#[test]
fn credential_env_is_set_and_no_secret_literal_in_job() {
    let g = group().build();
    let job = build(&g);
    let r = runner(&job);
    assert_eq!(
        env_value(r, "GITEA_RUNNER_NAME").and_then(|e| e.value.as_deref()),
        Some("linux-x64-abcde")
    );
    let json = serde_json::to_string(&job).expect("serialize");
    assert!(!json.contains(TOKEN), "secret literal leaked into the Job");
    let reg = env_value(r, "GITEA_RUNNER_REGISTRATION_TOKEN").expect("token env");
    assert!(reg.value.is_none() && reg.value_from.is_some());
}

#[test]
fn missing_uid_is_an_error() {
    let mut g = group().build();
    g.metadata.uid = None;
    let c = creds();
    let err = build_runner_job(RunnerJobInput {
        group: &g,
        runner_name: "x-abcde",
        default_pod: PodSpec::default(),
        credentials: &c,
    })
    .expect_err("no uid");
    assert_eq!(err, RunnerJobError::MissingGroupMetadata("uid"));
}

#[test]
fn spec_image_then_template_image() {
    let mut g = group().build();
    g.spec.image = Some("my/runner:1".into());
    assert_eq!(runner(&build(&g)).image.as_deref(), Some("my/runner:1"));
    g.spec.template = Some(Embedded::new(&template(
        PodSpec {
            containers: vec![Container {
                name: "runner".into(),
                image: Some("tpl/runner:2".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        },
        &[],
    )));
    assert_eq!(runner(&build(&g)).image.as_deref(), Some("tpl/runner:2"));
}

#[test]
fn runner_container_merges_resources_env_and_mounts() {
    let limits = BTreeMap::from([("cpu".to_owned(), Quantity("2".into()))]);
    let tpl = PodSpec {
        containers: vec![Container {
            name: "runner".into(),
            resources: Some(ResourceRequirements {
                limits: Some(limits.clone()),
                ..ResourceRequirements::default()
            }),
            env: Some(vec![
                env("EXTRA", "1"),
                env("GITEA_RUNNER_NAME", "hijack"),
                env("GITEA_RUNNER_REGISTRATION_TOKEN", "literal"),
            ]),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "cache".into(),
                    mount_path: "/cache".into(),
                    ..VolumeMount::default()
                },
                VolumeMount {
                    name: "evil".into(),
                    mount_path: "/data".into(),
                    ..VolumeMount::default()
                },
            ]),
            ..Container::default()
        }],
        ..PodSpec::default()
    };
    let g = group().template(template(tpl, &[])).build();
    let job = build(&g);
    let r = runner(&job);
    assert_eq!(pod_spec(&job).containers.len(), 1);
    assert_eq!(r.resources.as_ref().and_then(|x| x.limits.clone()), Some(limits));
    assert_eq!(
        r.image.as_deref(),
        Some("gitea/act_runner:0.2"),
        "image kept when template has none"
    );
    assert_eq!(r.command.as_deref(), Some(&["/bin/run".to_owned()][..]));
    assert_eq!(env_value(r, "EXTRA").and_then(|e| e.value.as_deref()), Some("1"));
    assert_eq!(
        env_value(r, "GITEA_RUNNER_NAME").and_then(|e| e.value.as_deref()),
        Some("linux-x64-abcde")
    );
    assert!(
        env_value(r, "GITEA_RUNNER_REGISTRATION_TOKEN")
            .and_then(|e| e.value.as_ref())
            .is_none()
    );
    let names: Vec<&str> = r.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert_eq!(names.iter().filter(|n| **n == "GITEA_RUNNER_NAME").count(), 1);
    let mounts: Vec<(&str, &str)> = r
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    assert_eq!(mounts, [("data", "/data"), ("cache", "/cache")]);
}

#[test]
fn other_containers_and_init_containers_are_appended() {
    let tpl = PodSpec {
        containers: vec![
            Container {
                name: "dind".into(),
                image: Some("docker:dind".into()),
                ..Container::default()
            },
            Container {
                name: "runner".into(),
                args: Some(vec!["--x".into()]),
                ..Container::default()
            },
        ],
        init_containers: Some(vec![Container {
            name: "init".into(),
            image: Some("busybox".into()),
            ..Container::default()
        }]),
        ..PodSpec::default()
    };
    let job = build(&group().template(template(tpl, &[])).build());
    let spec = pod_spec(&job);
    let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["runner", "dind"]);
    assert_eq!(runner(&job).args.as_deref(), Some(&["--x".to_owned()][..]));
    let init: Vec<&str> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(init, ["init"]);
}

#[test]
fn volumes_appended_but_default_names_reserved() {
    let tpl = PodSpec {
        volumes: Some(vec![
            Volume {
                name: "cache".into(),
                ..Volume::default()
            },
            Volume {
                name: "data".into(),
                host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
                    path: "/".into(),
                    type_: None,
                }),
                ..Volume::default()
            },
        ]),
        ..PodSpec::default()
    };
    let job = build(&group().template(template(tpl, &[])).build());
    let vols = pod_spec(&job).volumes.as_ref().expect("volumes");
    let names: Vec<&str> = vols.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["data", "cache"]);
    assert!(vols[0].host_path.is_none(), "default volume must not be replaced");
}

#[test]
fn reserved_pod_fields_and_labels_are_not_taken() {
    let tpl = PodSpec {
        restart_policy: Some("Always".into()),
        service_account_name: Some("runner-sa".into()),
        node_selector: Some(BTreeMap::from([("pool".to_owned(), "ci".to_owned())])),
        ..PodSpec::default()
    };
    let t = template(
        tpl,
        &[
            ("team", "infra"),
            (GROUP_LABEL, "other"),
            (MANAGED_BY_LABEL, "helm"),
        ],
    );
    let job = build(&group().template(t).build());
    let spec = pod_spec(&job);
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.service_account_name.as_deref(), Some("runner-sa"));
    assert_eq!(
        spec.node_selector
            .as_ref()
            .and_then(|n| n.get("pool"))
            .map(String::as_str),
        Some("ci")
    );
    let labels = job
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.as_ref())
        .expect("labels");
    assert_eq!(labels.get("team").map(String::as_str), Some("infra"));
    assert_eq!(labels.get(GROUP_LABEL).map(String::as_str), Some("linux-x64"));
    assert_eq!(
        labels.get(MANAGED_BY_LABEL).map(String::as_str),
        Some("forgerunner")
    );
    assert_eq!(job.metadata.name.as_deref(), Some("linux-x64-abcde"));
    assert_eq!(job.metadata.namespace.as_deref(), Some("ci"));
}

#[test]
fn first_container_is_the_runner_when_none_named_runner() {
    let default = PodSpec {
        containers: vec![
            Container {
                name: "main".into(),
                image: Some("a".into()),
                ..Container::default()
            },
            Container {
                name: "side".into(),
                image: Some("b".into()),
                ..Container::default()
            },
        ],
        ..PodSpec::default()
    };
    let tpl = PodSpec {
        containers: vec![
            Container {
                name: "runner".into(),
                image: Some("c".into()),
                ..Container::default()
            },
            Container {
                name: "side".into(),
                image: Some("d".into()),
                ..Container::default()
            },
        ],
        ..PodSpec::default()
    };
    let merged = merge_pod_spec(default, Some(&tpl));
    let got: Vec<(&str, Option<&str>)> = merged
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c.image.as_deref()))
        .collect();
    assert_eq!(got, [("runner", Some("c")), ("side", Some("d"))]);
}

#[test]
fn ports_dedupe_and_empty_template_keeps_default() {
    let mut d = Container {
        name: "runner".into(),
        ports: Some(vec![ContainerPort {
            container_port: 80,
            ..ContainerPort::default()
        }]),
        ..Container::default()
    };
    let t = Container {
        name: "runner".into(),
        image: Some(String::new()),
        command: Some(vec![]),
        ports: Some(vec![
            ContainerPort {
                container_port: 80,
                ..ContainerPort::default()
            },
            ContainerPort {
                container_port: 81,
                ..ContainerPort::default()
            },
        ]),
        ..Container::default()
    };
    d.image = Some("keep".into());
    merge_container(&mut d, &t);
    assert_eq!(d.image.as_deref(), Some("keep"));
    assert_eq!(d.ports.as_ref().map(Vec::len), Some(2));
    let no_template = merge_pod_spec(default_pod("s"), None);
    assert_eq!(no_template.restart_policy.as_deref(), Some("Never"));
    assert_eq!(no_template.containers.len(), 1);
}

#[test]
fn secret_is_owned_by_job_and_holds_data() {
    let g = group().build();
    let mut job = build(&g);
    let c = creds();
    assert_eq!(
        build_runner_secret(&job, &c).expect_err("no uid"),
        RunnerJobError::MissingJobMetadata("uid")
    );
    job.metadata.uid = Some("job-uid".into());
    let s = build_runner_secret(&job, &c).expect("secret");
    assert_eq!(s.metadata.name.as_deref(), Some("linux-x64-abcde"));
    assert_eq!(s.metadata.namespace.as_deref(), Some("ci"));
    let owner = &s.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Job", "job-uid"));
    let data = s.data.as_ref().expect("data");
    assert_eq!(data.get("token").map(|b| b.0.as_slice()), Some(TOKEN.as_bytes()));
    assert!(
        !format!("{c:?}").contains(TOKEN),
        "Debug of credentials must be redacted"
    );
}

#[test]
fn template_hash_follows_what_shapes_the_pod_only() {
    let base = group().build();
    let h = template_hash(&base.spec);
    assert_eq!(h, template_hash(&base.spec.clone()), "stable");
    assert_eq!(h.len(), 16);

    let mut scaled = base.spec.clone();
    scaled.min_runners = 3;
    scaled.max_runners = 40;
    scaled.idle_timeout_seconds = Some(30);
    scaled.startup_timeout_seconds = Some(60);
    scaled.ttl_seconds_after_finished = Some(5);
    if let Some(g) = scaled.gitea.as_mut() {
        g.poll_interval_seconds = Some(9);
        g.credentials = "other".into();
    }
    assert_eq!(
        template_hash(&scaled),
        h,
        "scaling, timing and operator-only settings keep it"
    );

    let mut image = base.spec.clone();
    image.image = Some("gitea/runner:2".into());
    assert_ne!(template_hash(&image), h, "a new image changes it");
    let mut labels = base.spec.clone();
    if let Some(g) = labels.gitea.as_mut() {
        g.labels.push("gpu".into());
    }
    assert_ne!(template_hash(&labels), h, "the forge block shapes the runner");
    let templated = group()
        .template(template(PodSpec::default(), &[("team", "a")]))
        .build();
    assert_ne!(template_hash(&templated.spec), h, "a template changes it");
}

/// A runner pod mounts the cache config when the group has a cache, whatever its size or class:
/// only adding or removing `spec.cache` replaces idle runners.
#[test]
fn template_hash_follows_whether_there_is_a_cache_not_its_size() {
    let base = group().build();
    let cached = group().cache("10Gi").build();
    assert_ne!(template_hash(&base.spec), template_hash(&cached.spec));
    let mut bigger = cached.spec.clone();
    if let Some(c) = bigger.cache.as_mut() {
        c.size = "50Gi".into();
        c.storage_class_name = Some("fast".into());
    }
    assert_eq!(template_hash(&cached.spec), template_hash(&bigger));
}

#[test]
fn jobs_carry_the_template_hash() {
    let g = group().build();
    let job = build(&g);
    let annotations = job.metadata.annotations.expect("annotations");
    assert_eq!(
        annotations.get(TEMPLATE_HASH_ANNOTATION),
        Some(&template_hash(&g.spec))
    );
}

/// The hash reads the template as its typed form writes it: a template written `cpu: 2` hashes as
/// one written `cpu: "2"`, and as the typed template of the versions before the template was
/// kept as stored (whose runners must not all be replaced by the upgrade).
#[test]
fn template_hash_reads_the_typed_template() {
    let mut as_typed = group().build();
    let mut as_stored = group().build();
    let stored = serde_json::json!({"spec": {"containers": [
        {"name": "runner", "resources": {"limits": {"cpu": 2}}}
    ]}});
    as_stored.spec.template = Some(Embedded::from_raw(stored.clone()));
    let typed: PodTemplateSpec = serde_json::from_value(stored).expect("template");
    as_typed.spec.template = Some(Embedded::new(&typed));
    assert_ne!(
        as_typed.spec.template, as_stored.spec.template,
        "stored differently"
    );
    assert_eq!(template_hash(&as_typed.spec), template_hash(&as_stored.spec));
    let mut bigger = as_stored.clone();
    bigger.spec.template = Some(Embedded::from_raw(serde_json::json!({"spec": {"containers": [
        {"name": "runner", "resources": {"limits": {"cpu": 3}}}
    ]}})));
    assert_ne!(template_hash(&bigger.spec), template_hash(&as_stored.spec));
}

/// Every runner Job fails on its pod's `DisruptionTarget` through its `podFailurePolicy`, so
/// the Job still tells a disruption once PodGC force-deleted the pod; the policy needs the pod's
/// `restartPolicy: Never`, which a template cannot change.
#[test]
fn jobs_fail_on_a_disrupted_pod_by_their_pod_failure_policy() {
    let mut g = group().build();
    g.spec.template = Some(Embedded::new(&template(
        PodSpec {
            restart_policy: Some("OnFailure".into()),
            ..PodSpec::default()
        },
        &[],
    )));
    let job = build(&g);
    let policy = job.spec.as_ref().and_then(|s| s.pod_failure_policy.as_ref());
    assert_eq!(
        policy,
        Some(&crate::runner_pod::disruption::runner_pod_failure_policy())
    );
    assert_eq!(pod_spec(&job).restart_policy.as_deref(), Some("Never"));
}
