//! The Job controller's `FailedCreate` Events a pass reads for runners that will not start
//! (security review L7): against the testkit's fake API server, each read names one runner Job
//! and carries a `limit`, and one pass makes a bounded number of them, so what a pass reads
//! follows the group, not the namespace's other Events.

use std::collections::BTreeSet;
use std::time::Duration;

use forgerunner_core::forge::ForgeRunnerState;
use forgerunner_core::plan::{ObservedRunner, RunnerPhase};
use forgerunner_core::reconcile::startup_check::{
    FAILED_CREATE_EVENT_LIMIT, MAX_FAILED_CREATE_LOOKUPS, find_stuck,
};
use forgerunner_core::startup::StartupFailure;
use forgerunner_testkit::apiserver::{FakeApiServer, Verb};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Client;
use kube::api::{Api, PostParams};

const NS: &str = "default";
const GROUP: &str = "grp";
/// Long enough that no runner here is failed by the timeout alone.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(600);

/// A `FailedCreate` Event as the Job controller records a pod a ResourceQuota refused
/// (`RealPodControl.createPods`, `pkg/controller/controller_utils.go`).
async fn refused_by_quota(client: &Client, job: &str, suffix: &str) {
    let ev: Event = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{job}.{suffix}"), "namespace": NS},
        "involvedObject": {"kind": "Job", "apiVersion": "batch/v1", "name": job, "namespace": NS},
        "reason": "FailedCreate",
        "type": "Warning",
        "message": format!(
            "Error creating: pods \"{job}-x\" is forbidden: exceeded quota: pods, requested: \
             pods=1, used: pods=1, limited: pods=1"
        ),
        "source": {"component": "job-controller"},
        "count": 1,
        "lastTimestamp": jiff::Timestamp::now().to_string(),
    }))
    .expect("event");
    Api::<Event>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &ev)
        .await
        .expect("create event");
}

fn pending(name: &str, age_seconds: u64) -> ObservedRunner {
    ObservedRunner {
        name: name.to_owned(),
        phase: RunnerPhase::Pending,
        forge_state: ForgeRunnerState::Unknown,
        age_seconds,
        running_seconds: 0,
        ever_busy: false,
        stuck: None,
        outdated: false,
    }
}

/// The decoded query parameters of every Event list the server was asked since the last reset.
fn event_lists(server: &FakeApiServer) -> Vec<Vec<(String, String)>> {
    server
        .requests()
        .records
        .into_iter()
        .filter(|r| r.resource == "events" && r.verb == Some(Verb::List))
        .map(|r| {
            url::form_urlencoded::parse(r.query.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .collect()
}

fn param<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_runner_reads_its_own_jobs_events_only() {
    let server = FakeApiServer::start().await.expect("fake API server");
    let client = server.client().expect("client");
    // A busy namespace: other Jobs' pods refused too, each with its Events.
    for i in 0..40 {
        refused_by_quota(&client, &format!("other-{i:02}"), "a").await;
    }
    let runner = "grp-abcde";
    refused_by_quota(&client, runner, "a").await;
    server.reset_requests();

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let stuck = find_stuck(&pods, &events, GROUP, &[pending(runner, 60)], STARTUP_TIMEOUT).await;

    let got = stuck.get(runner).expect("the refused runner is stuck");
    assert_eq!(got.cause, StartupFailure::QuotaExceeded);
    assert!(got.message.contains("exceeded quota"), "{}", got.message);
    let lists = event_lists(&server);
    assert_eq!(lists.len(), 1, "{lists:?}");
    let selector = param(&lists[0], "fieldSelector").unwrap_or_default();
    let terms: BTreeSet<&str> = selector.split(',').collect();
    assert_eq!(
        terms,
        BTreeSet::from([
            "involvedObject.kind=Job",
            "involvedObject.name=grp-abcde",
            "reason=FailedCreate"
        ]),
        "the read names the runner's Job, not every Job of the namespace"
    );
    assert_eq!(
        param(&lists[0], "limit"),
        Some(FAILED_CREATE_EVENT_LIMIT.to_string().as_str()),
        "the read is bounded"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pass_looks_up_a_bounded_number_of_runners_oldest_first() {
    let server = FakeApiServer::start().await.expect("fake API server");
    let client = server.client().expect("client");
    // A quota refusing every runner pod of a large group: no runner has a pod.
    let runners: Vec<ObservedRunner> = (0..20u64)
        .map(|i| pending(&format!("grp-r{i:02}"), 10 + i))
        .collect();
    for r in &runners {
        refused_by_quota(&client, &r.name, "a").await;
    }
    server.reset_requests();

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let stuck = find_stuck(&pods, &events, GROUP, &runners, STARTUP_TIMEOUT).await;

    assert_eq!(event_lists(&server).len(), MAX_FAILED_CREATE_LOOKUPS);
    // The oldest, nearest to the startup timeout, are the ones looked up; the others wait for
    // the next passes (the ones found here are removed in between).
    let oldest: BTreeSet<String> = (20 - MAX_FAILED_CREATE_LOOKUPS as u64..20)
        .map(|i| format!("grp-r{i:02}"))
        .collect();
    assert_eq!(stuck.keys().cloned().collect::<BTreeSet<_>>(), oldest);
    assert!(stuck.values().all(|s| s.cause == StartupFailure::QuotaExceeded));
    server.shutdown().await;
}
