//! Runner classes on Gitea: the jobs a class's runners can take are the group's demand, each
//! waiting job carries the labels its runner's class is chosen from, and a class's runner
//! registers with the group's labels and the class's (Gitea hands a job to any runner whose
//! labels hold every `runs-on` name: there is no other way to get a job to a runner).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use forgerunner_core::crd::{GiteaScope, GiteaSpec, RunnerClass};
use forgerunner_core::forge::{ReconcileTrigger, RunnerCredentials};
use forgerunner_core::metrics::Metrics;
use forgerunner_gitea::GiteaForge;
use forgerunner_http::pod_checks::default_pod;
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, GiteaFakeHandle};

fn classes() -> Vec<RunnerClass> {
    serde_json::from_value(serde_json::json!([
        {"name": "small", "labels": ["linux"]},
        {"name": "large", "labels": ["linux", "large"], "resources": {"requests": {"cpu": "4"}}}
    ]))
    .unwrap()
}

fn spec(url: &str) -> GiteaSpec {
    GiteaSpec {
        url: url.to_string(),
        scope: GiteaScope::Global,
        org: None,
        user: None,
        repo: None,
        credentials: "creds".into(),
        labels: vec!["self-hosted:host".into()],
        poll_interval_seconds: Some(1),
        webhook_secret: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    }
}

fn forge() -> GiteaForge {
    let (trigger, _rx) = ReconcileTrigger::channel();
    GiteaForge::new(Arc::new(Metrics::default()), trigger)
}

#[tokio::test]
async fn the_jobs_of_every_class_are_demand_with_their_labels() {
    let fake = GiteaFakeHandle::start(FakeConfig::default()).await.unwrap();
    let small = fake.queue_job("acme/app", &["linux"]);
    let large = fake.queue_job("acme/app", &["linux", "large"]);
    let own = fake.queue_job("acme/app", &["self-hosted"]);
    let none = fake.queue_job("acme/app", &["gpu"]);
    let mut ctx = common::group_context("sized", spec(&fake.url()), ADMIN_TOKEN);
    let f = forge();

    let plain = common::view(&f, &ctx).await.unwrap();
    assert_eq!(
        plain.waiting_jobs, 1,
        "without classes only the group's own labels serve"
    );

    ctx.group.spec.classes = classes();
    let f = forge();
    let view = common::view(&f, &ctx).await.unwrap();
    assert_eq!(view.waiting_jobs, 3, "the classes' jobs are the group's too");
    let labels: BTreeMap<String, Vec<String>> = view
        .waiting
        .iter()
        .map(|j| (j.id.clone(), j.labels.clone()))
        .collect();
    assert_eq!(labels[&small.to_string()], ["linux"]);
    assert_eq!(labels[&large.to_string()], ["linux", "large"]);
    assert_eq!(labels[&own.to_string()], ["self-hosted"]);
    assert!(
        !labels.contains_key(&none.to_string()),
        "no runner of the group takes gpu"
    );
    assert!(
        view.unmatched.iter().any(|j| j.id == none.to_string()),
        "gpu is unmatched: {:?}",
        view.unmatched
    );
    assert!(
        !view.unmatched.iter().any(|j| j.id == large.to_string()),
        "a class's job is no typo"
    );
}

#[test]
fn a_class_runner_registers_with_the_group_labels_and_its_class_labels() {
    let mut group = common::group_context("sized", spec("https://gitea.example"), ADMIN_TOKEN).group;
    group.spec.classes = classes();
    let creds = RunnerCredentials {
        secret_data: BTreeMap::new(),
        env: BTreeMap::new(),
        annotations: BTreeMap::new(),
    };
    let f = forge();
    let registered = |class: Option<&RunnerClass>| {
        let pod = default_pod(&f, &group, "sized-abcde", "sized-abcde", &creds, class);
        let containers = pod.init_containers.iter().flatten().chain(&pod.containers);
        containers
            .map(|c| {
                let env = c.env.iter().flatten();
                let labels = env.clone().find(|e| e.name == "GITEA_RUNNER_LABELS");
                (
                    c.name.clone(),
                    labels.and_then(|e| e.value.clone()).unwrap_or_default(),
                )
            })
            .collect::<Vec<_>>()
    };
    let own = registered(None);
    assert_eq!(
        own,
        [
            ("register".to_owned(), "self-hosted:host".to_owned()),
            ("runner".to_owned(), "self-hosted:host".to_owned())
        ]
    );
    let large = registered(group.spec.classes.get(1));
    assert_eq!(
        large,
        [
            ("register".to_owned(), "self-hosted:host,linux,large".to_owned()),
            ("runner".to_owned(), "self-hosted:host,linux,large".to_owned())
        ]
    );
}
