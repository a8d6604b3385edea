//! Which class a job wants, the labels of a class's runners and the overlay on a runner Job.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::crd::RunnerClass;

fn class(name: &str, labels: &[&str], max: Option<u32>) -> ClassMatch {
    ClassMatch {
        name: name.into(),
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        max_runners: max,
    }
}

fn names(labels: &[&str]) -> BTreeSet<String> {
    labels.iter().map(|l| (*l).to_owned()).collect()
}

/// small [linux] and large [linux, large] over a group whose own label is `self-hosted`.
fn sizes() -> Vec<ClassMatch> {
    vec![
        class("small", &["linux"], None),
        class("large", &["linux", "large"], None),
    ]
}

#[test]
fn a_job_wants_the_first_class_it_names_that_can_take_it() {
    let group = names(&["self-hosted"]);
    let c = sizes();
    assert_eq!(wanted(&c, &group, &["linux"]), Wanted::Class(0));
    assert_eq!(wanted(&c, &group, &["linux", "large"]), Wanted::Class(1));
    assert_eq!(wanted(&c, &group, &["large", "self-hosted"]), Wanted::Class(1));
    assert_eq!(wanted(&c, &group, &["self-hosted"]), Wanted::Group);
    assert_eq!(
        wanted(&c, &group, &[] as &[&str]),
        Wanted::Group,
        "an empty runs-on names no class"
    );
    assert_eq!(wanted(&c, &group, &["large", "gpu"]), Wanted::Nobody);
    // A class the job does not name is not chosen just because the group's labels take it.
    let only_large = [class("large", &["large"], None)];
    let linux = names(&["linux"]);
    assert_eq!(wanted(&only_large, &linux, &["linux"]), Wanted::Group);
    assert_eq!(wanted(&only_large, &linux, &["linux", "large"]), Wanted::Class(0));
}

/// Which runner a job is for (the runner a reservation may bind to it): the first class that
/// takes it, or the group's own.
#[test]
fn a_job_is_for_the_first_class_that_takes_it() {
    let group = names(&["self-hosted", "linux"]);
    let c = sizes();
    assert!(is_for(&c, &group, &["linux"], Some("small")));
    assert!(
        !is_for(&c, &group, &["linux"], Some("large")),
        "small comes first"
    );
    assert!(is_for(&c, &group, &["linux", "large"], Some("large")));
    assert!(!is_for(&c, &group, &["linux", "large"], Some("small")));
    assert!(!is_for(&c, &group, &["linux", "large"], None));
    assert!(is_for(&c, &group, &["self-hosted"], None));
    assert!(!is_for(&c, &group, &["large", "gpu"], None));
}

#[test]
fn a_class_label_replaces_the_group_label_of_its_name() {
    let c: RunnerClass = serde_json::from_value(serde_json::json!({
        "name": "gpu", "labels": ["ubuntu:docker://cuda:12", "gpu"]
    }))
    .expect("class");
    let group = vec![
        "ubuntu:docker://node:20".to_owned(),
        "self-hosted:host".to_owned(),
    ];
    assert_eq!(
        runner_labels(&group, &c),
        ["self-hosted:host", "ubuntu:docker://cuda:12", "gpu"]
    );
}

fn runner_job() -> Job {
    Job {
        metadata: Default::default(),
        spec: Some(JobSpec {
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![
                        Container {
                            name: "dind".into(),
                            ..Container::default()
                        },
                        Container {
                            name: "runner".into(),
                            resources: Some(ResourceRequirements {
                                requests: Some(BTreeMap::from([
                                    ("cpu".to_owned(), Quantity("1".into())),
                                    ("memory".to_owned(), Quantity("1Gi".into())),
                                ])),
                                ..ResourceRequirements::default()
                            }),
                            ..Container::default()
                        },
                    ],
                    node_selector: Some(BTreeMap::from([("zone".to_owned(), "a".to_owned())])),
                    tolerations: Some(vec![Toleration {
                        key: Some("spot".into()),
                        operator: Some("Exists".into()),
                        ..Toleration::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

#[test]
fn the_overlay_lays_the_class_over_the_template() {
    let c: RunnerClass = serde_json::from_value(serde_json::json!({
        "name": "large", "labels": ["large"],
        "resources": {"requests": {"cpu": 4}, "limits": {"memory": "16Gi"}},
        "nodeSelector": {"pool": "big", "zone": "b"},
        "tolerations": [
            {"key": "spot", "operator": "Exists"},
            {"key": "big", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}
        ]
    }))
    .expect("class");
    let mut j = runner_job();
    dress_job(&mut j, &c).expect("dressed");
    assert_eq!(job_class(&j), Some("large"));
    let template = &j.spec.as_ref().expect("spec").template;
    let pod_labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    assert_eq!(
        pod_labels.and_then(|l| l.get(CLASS_LABEL)).map(String::as_str),
        Some("large")
    );
    let pod = template.spec.as_ref().expect("pod");
    assert!(
        pod.containers[0].resources.is_none(),
        "only the runner container is sized"
    );
    let res = pod.containers[1].resources.as_ref().expect("resources");
    let requests = res.requests.as_ref().expect("requests");
    assert_eq!(
        requests["cpu"],
        Quantity("4".into()),
        "the class's request replaces the template's"
    );
    assert_eq!(
        requests["memory"],
        Quantity("1Gi".into()),
        "the template's other requests stay"
    );
    assert_eq!(
        res.limits.as_ref().expect("limits")["memory"],
        Quantity("16Gi".into())
    );
    let selector = pod.node_selector.as_ref().expect("selector");
    assert_eq!(
        (selector["zone"].as_str(), selector["pool"].as_str()),
        ("b", "big")
    );
    let keys: Vec<_> = pod
        .tolerations
        .iter()
        .flatten()
        .filter_map(|t| t.key.as_deref())
        .collect();
    assert_eq!(keys, ["spot", "big"], "an equal toleration is not repeated");
}

#[test]
fn an_undecodable_class_names_itself() {
    let c: RunnerClass = serde_json::from_value(serde_json::json!({
        "name": "odd", "labels": ["odd"], "tolerations": [{"key": 3}]
    }))
    .expect("class");
    let err = dress_job(&mut runner_job(), &c).expect_err("a number is no key");
    assert!(err.to_string().starts_with("spec.classes: class odd: "), "{err}");
}

#[test]
fn a_class_change_replaces_runners_unless_only_its_limit_moved() {
    use crate::crd::{ForgeKind, RunnerGroup};
    use crate::runner_job::template_hash;
    let with = |classes: serde_json::Value| {
        let mut spec = RunnerGroup::test(ForgeKind::Gitea).spec();
        spec.classes = serde_json::from_value(classes).expect("classes");
        template_hash(&spec)
    };
    let base = with(serde_json::json!([
        {"name": "large", "labels": ["large"], "resources": {"requests": {"cpu": 4}}}
    ]));
    let quoted = with(serde_json::json!([
        {"name": "large", "labels": ["large"], "resources": {"requests": {"cpu": "4"}}}
    ]));
    let limited = with(serde_json::json!([
        {"name": "large", "labels": ["large"], "maxRunners": 2, "resources": {"requests": {"cpu": "4"}}}
    ]));
    let bigger = with(serde_json::json!([
        {"name": "large", "labels": ["large"], "resources": {"requests": {"cpu": "8"}}}
    ]));
    assert_eq!(base, quoted, "cpu: 4 and cpu: \"4\" are one pod");
    assert_eq!(base, limited, "a class's maxRunners shapes no pod");
    assert_ne!(base, bigger);
    assert_ne!(base, with(serde_json::json!([])));
}
