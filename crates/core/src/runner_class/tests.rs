//! The class choice (cases and properties) and the overlay on a runner Job.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;

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

fn job(id: &str, queued: i64, labels: &[&str]) -> WaitingJob {
    WaitingJob {
        id: id.into(),
        queued_at: Some(jiff::Timestamp::from_second(queued).expect("valid timestamp")),
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
    }
}

/// small [linux] and large [linux, large] over a group whose own label is `self-hosted`.
fn sizes() -> Vec<ClassMatch> {
    vec![
        class("small", &["linux"], None),
        class("large", &["linux", "large"], None),
    ]
}

fn choice(
    classes: &[ClassMatch],
    group: &[&str],
    waiting: &[WaitingJob],
    existing: &[(Option<&str>, u32, u32)],
    create: u32,
) -> Vec<Option<String>> {
    let existing: BTreeMap<Option<String>, ClassCount> = existing
        .iter()
        .map(|(k, occupied, covering)| {
            (
                k.map(str::to_owned),
                ClassCount {
                    occupied: *occupied,
                    covering: *covering,
                },
            )
        })
        .collect();
    choose(&ChoiceInput {
        classes,
        group_labels: &names(group),
        waiting,
        existing: &existing,
        create,
    })
}

fn s(name: &str) -> Option<String> {
    Some(name.to_owned())
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

#[test]
fn two_sizes_of_jobs_get_two_sizes_of_runners() {
    let waiting = [job("1", 10, &["linux"]), job("2", 11, &["linux", "large"])];
    assert_eq!(
        choice(&sizes(), &["self-hosted"], &waiting, &[], 2),
        [s("small"), s("large")]
    );
}

#[test]
fn a_job_with_a_runner_of_its_class_coming_gets_no_second_one() {
    let waiting = [job("1", 10, &["linux", "large"]), job("2", 11, &["linux"])];
    // A large runner waits already (pending): only the small job needs one.
    let chosen = choice(&sizes(), &["x"], &waiting, &[(s("large").as_deref(), 1, 1)], 1);
    assert_eq!(chosen, [s("small")]);
    // A busy large runner covers no waiting job.
    let chosen = choice(&sizes(), &["x"], &waiting, &[(s("large").as_deref(), 1, 0)], 2);
    assert_eq!(chosen, [s("large"), s("small")]);
}

#[test]
fn oldest_jobs_first_when_the_planner_creates_fewer() {
    let waiting = [
        job("3", 30, &["linux"]),
        job("1", 10, &["linux", "large"]),
        job("2", 20, &["linux"]),
    ];
    assert_eq!(choice(&sizes(), &["x"], &waiting, &[], 1), [s("large")]);
    assert_eq!(
        choice(&sizes(), &["x"], &waiting, &[], 2),
        [s("large"), s("small")]
    );
}

#[test]
fn a_full_class_gets_no_runner_and_its_jobs_get_none_of_another_class() {
    let classes = [
        class("small", &["linux"], None),
        class("large", &["linux", "large"], Some(1)),
    ];
    let waiting = [
        job("1", 10, &["linux", "large"]),
        job("2", 11, &["linux", "large"]),
        job("3", 12, &["linux"]),
    ];
    // One large runner runs already (busy): the class is full. The planner counted a runner
    // for each job; the two large jobs wait.
    let chosen = choice(&classes, &["x"], &waiting, &[(Some("large"), 1, 0)], 3);
    assert_eq!(chosen, [s("small")]);
    // Free of it: one more large runner, not two.
    let chosen = choice(&classes, &["x"], &waiting, &[], 3);
    assert_eq!(chosen, [s("large"), s("small")]);
}

#[test]
fn runners_beyond_the_jobs_are_the_groups_own() {
    // minRunners: the planner wants two idle runners on top of the one job.
    let waiting = [job("1", 10, &["linux", "large"])];
    assert_eq!(
        choice(&sizes(), &["self-hosted"], &waiting, &[], 3),
        [s("large"), None, None]
    );
    // A job for the group's own labels gets one of the group's own.
    let waiting = [job("1", 10, &["self-hosted"])];
    assert_eq!(choice(&sizes(), &["self-hosted"], &waiting, &[], 1), [None]);
}

#[test]
fn without_classes_every_runner_is_the_groups_own() {
    let waiting = [job("1", 10, &["linux"])];
    assert_eq!(choice(&[], &["linux"], &waiting, &[], 2), [None, None]);
    assert!(choice(&sizes(), &["x"], &waiting, &[], 0).is_empty());
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

/// A generated pass: classes, waiting jobs and the runners each class has.
#[derive(Clone, Debug)]
struct Pass {
    classes: Vec<ClassMatch>,
    waiting: Vec<WaitingJob>,
    existing: BTreeMap<Option<String>, ClassCount>,
    create: u32,
}

const LABELS: [&str; 4] = ["linux", "large", "gpu", "arm"];

fn pass() -> impl Strategy<Value = Pass> {
    let class = (
        proptest::sample::subsequence(LABELS.to_vec(), 1..=3),
        proptest::option::of(1u32..4),
    );
    let a_job = (proptest::sample::subsequence(LABELS.to_vec(), 0..=3), 0i64..50);
    let count = (0u32..4, 0u32..4).prop_map(|(a, b)| ClassCount {
        occupied: a.max(b),
        covering: a.min(b),
    });
    (
        proptest::collection::vec(class, 0..4),
        proptest::collection::vec(a_job, 0..12),
        proptest::collection::vec(count, 5),
        0u32..15,
    )
        .prop_map(|(classes, jobs, counts, create)| {
            let classes: Vec<ClassMatch> = classes
                .into_iter()
                .enumerate()
                .map(|(i, (labels, max))| ClassMatch {
                    name: format!("c{i}"),
                    labels: labels.into_iter().map(str::to_owned).collect(),
                    max_runners: max,
                })
                .collect();
            let waiting = jobs
                .into_iter()
                .enumerate()
                .map(|(i, (labels, t))| job(&i.to_string(), t, &labels))
                .collect();
            let mut existing = BTreeMap::new();
            for (i, c) in counts.into_iter().enumerate() {
                let key = if i == 0 { None } else { Some(format!("c{}", i - 1)) };
                existing.insert(key, c);
            }
            Pass {
                classes,
                waiting,
                existing,
                create,
            }
        })
}

/// Waiting jobs that want each class (`None`: the group's own), over a group labelled `linux`.
fn demand(p: &Pass, group: &BTreeSet<String>) -> BTreeMap<Option<String>, u32> {
    let mut out = BTreeMap::new();
    for j in &p.waiting {
        let key = match wanted(&p.classes, group, &j.labels) {
            Wanted::Nobody => continue,
            Wanted::Group => None,
            Wanted::Class(i) => Some(p.classes[i].name.clone()),
        };
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Never more runners than the planner creates, never a class past its `maxRunners`, and
    /// never more runners of a class than the jobs wanting it that have none coming.
    #[test]
    fn the_choice_keeps_every_bound(p in pass()) {
        let group = names(&["linux"]);
        let chosen = choose(&ChoiceInput {
            classes: &p.classes,
            group_labels: &group,
            waiting: &p.waiting,
            existing: &p.existing,
            create: p.create,
        });
        prop_assert!(chosen.len() <= p.create as usize);
        let wants = demand(&p, &group);
        for c in &p.classes {
            let made = chosen.iter().filter(|k| k.as_deref() == Some(c.name.as_str())).count() as u32;
            let have = p.existing.get(&Some(c.name.clone())).copied().unwrap_or_default();
            if let Some(max) = c.max_runners {
                prop_assert!(made == 0 || have.occupied + made <= max, "{} past its max", c.name);
            }
            let needs = wants.get(&Some(c.name.clone())).copied().unwrap_or(0);
            prop_assert!(made <= needs.saturating_sub(have.covering), "{} made {made} for {needs} jobs", c.name);
        }
        if p.classes.iter().all(|c| c.max_runners.is_none()) {
            prop_assert_eq!(chosen.len(), p.create as usize, "only a full class makes fewer");
        }
    }

    /// With enough runners and no limits, every job that wants a class and has no runner of it
    /// coming gets exactly one, and the same pass always chooses the same.
    #[test]
    fn enough_runners_give_each_uncovered_job_its_class(p in pass()) {
        let group = names(&["linux"]);
        let classes: Vec<ClassMatch> = p.classes.iter().cloned().map(|mut c| { c.max_runners = None; c }).collect();
        let input = ChoiceInput {
            classes: &classes,
            group_labels: &group,
            waiting: &p.waiting,
            existing: &p.existing,
            create: 20,
        };
        let chosen = choose(&input);
        prop_assert_eq!(&chosen, &choose(&input));
        let q = Pass { classes: classes.clone(), ..p.clone() };
        for (key, needs) in demand(&q, &group) {
            let Some(name) = key else { continue };
            let have = p.existing.get(&Some(name.clone())).map_or(0, |c| c.covering);
            let made = chosen.iter().filter(|k| k.as_deref() == Some(name.as_str())).count() as u32;
            prop_assert_eq!(made, needs.saturating_sub(have), "class {}", name);
        }
    }
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
