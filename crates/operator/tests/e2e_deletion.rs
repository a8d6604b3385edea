//! End to end: deleting a `RunnerGroup` always works. The credentials Secret deleted first, a
//! forge that drops all traffic, and many groups created and deleted with their own
//! credentials, proxy and CA bundle: the group goes within the cleanup budget, its background
//! work stops, its runner Jobs go, an Event says what may be left, and what the operator cached
//! for it is dropped (the cache gauge returns to 0, memory stays flat).
#![cfg(all(feature = "github", feature = "gitea"))]

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::e2e::{fail_with_output, github_world, start_operator};
use common::gitea_world::{condition, gitea_world};
use common::group::Group;
use forgerunner_core::RunnerGroup;
use forgerunner_core::crd::ForgeKind;
use forgerunner_core::reconcile::cleanup::CLEANUP_BUDGET;
use forgerunner_sandbox::world::operator::OperatorProcess;
use forgerunner_sandbox::world::{World, wait_until};
use forgerunner_testkit::gitea::{Fault as GiteaFault, GiteaFakeHandle};
use forgerunner_testkit::github::Endpoint;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};

/// How long past the budget a deletion may take: a pass already in flight against the
/// dropping forge, the controller's queue, a slow shared CPU.
const SLACK: Duration = Duration::from_secs(60);

async fn delete_group(world: &World, ns: &str, name: &str) {
    Api::<RunnerGroup>::namespaced(world.client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete group");
}

async fn group_gone(world: &World, ns: &str, name: &str) -> bool {
    Api::<RunnerGroup>::namespaced(world.client.clone(), ns)
        .get_opt(name)
        .await
        .is_ok_and(|g| g.is_none())
}

/// Notes of the Events on group `name` with `reason`.
async fn event_notes(world: &World, ns: &str, name: &str, reason: &str) -> Vec<String> {
    let events = Api::<Event>::namespaced(world.client.clone(), ns)
        .list(&Default::default())
        .await
        .expect("list events");
    events
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.note)
        .collect()
}

/// Waits up to `deadline` for the group to be gone; how long that took.
async fn wait_gone(
    world: &World,
    op: &OperatorProcess,
    ns: &str,
    name: &str,
    deadline: Duration,
) -> Duration {
    let started = Instant::now();
    if wait_until(deadline, "the group to be gone", || group_gone(world, ns, name))
        .await
        .is_err()
    {
        fail_with_output(op, &format!("group {ns}/{name} still exists after {deadline:?}"));
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_group_deleted_after_its_secret_stops_listening_and_goes() {
    const NS: &str = "del-secret";
    const GROUP: &str = "gh-del";
    let world = github_world(NS, Duration::from_millis(300)).await;
    Group::github(GROUP).min(1).max(3).create(&world, NS).await;
    let op = start_operator(&world, "github", "forgerunner-e2e-deletion");
    let emu = world.github.as_ref().expect("emulator").emu.clone();
    let Ok(set_id) = world.github_scale_set(GROUP, Duration::from_secs(90)).await else {
        fail_with_output(&op, "no scale set");
    };
    let ready = wait_until(Duration::from_secs(90), "a session and a runner Job", || async {
        emu.state().sessions.iter().any(|s| s.scale_set_id == set_id)
            && world
                .runner_jobs(NS, Some(GROUP))
                .await
                .is_ok_and(|j| !j.is_empty())
    })
    .await;
    if ready.is_err() {
        fail_with_output(&op, "no session or no runner Job");
    }

    // The Secret goes first (a namespace deletion, `kubectl delete -f` of both), then the group.
    Api::<Secret>::namespaced(world.client.clone(), NS)
        .delete(&format!("{GROUP}-github"), &DeleteParams::default())
        .await
        .expect("delete secret");
    delete_group(&world, NS, GROUP).await;
    wait_gone(&world, &op, NS, GROUP, Duration::from_secs(60)).await;

    let jobs = world.runner_jobs(NS, Some(GROUP)).await.expect("jobs");
    assert!(
        jobs.is_empty(),
        "{} runner Jobs left after the group went",
        jobs.len()
    );
    assert!(
        !emu.state().sessions.iter().any(|s| s.scale_set_id == set_id),
        "the listener's message session is still open"
    );
    let polls = || emu.requests_to(Endpoint::GetMessage).len() + emu.requests_to(Endpoint::AcquireJobs).len();
    let before = polls();
    world.queue_github_job(set_id, GROUP).expect("queue");
    // The long poll is 1 s: a listener still running would poll (and acquire) within this.
    let polled = wait_until(Duration::from_secs(5), "a poll after deletion", || {
        std::future::ready(polls() > before)
    })
    .await;
    assert!(
        polled.is_err(),
        "the listener kept polling the deleted group's scale set ({} requests since)",
        polls() - before
    );
    let notes = event_notes(&world, NS, GROUP, "CleanupAbandoned").await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("scale set") && n.contains("does not exist")),
        "an Event names what is left and why: {notes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forge_dropping_all_traffic_holds_deletion_no_longer_than_the_budget() {
    const NS: &str = "del-drop";
    const GROUP: &str = "drop";
    const RUNNERS: u32 = 5;
    let world = gitea_world(NS, Duration::from_millis(300)).await;
    Group::gitea(GROUP)
        .host_label("drop")
        .min(RUNNERS)
        .max(RUNNERS)
        .create(&world, NS)
        .await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-deletion");
    let fake = world.gitea.as_ref().expect("gitea").clone();
    let registered = || {
        fake.runners()
            .iter()
            .filter(|r| r.name.starts_with(&format!("{GROUP}-")))
            .count()
    };
    let up = wait_until(
        Duration::from_secs(120),
        "every idle runner registered",
        || async {
            registered() >= RUNNERS as usize
                && world
                    .runner_jobs(NS, Some(GROUP))
                    .await
                    .is_ok_and(|j| j.len() == RUNNERS as usize)
        },
    )
    .await;
    if up.is_err() {
        fail_with_output(&op, "the idle runners did not come up");
    }

    // From now on every request hangs far beyond any client timeout.
    fake.inject_fault(GiteaFault::latency("", Duration::from_secs(3600)));
    delete_group(&world, NS, GROUP).await;
    let took = wait_gone(&world, &op, NS, GROUP, CLEANUP_BUDGET + SLACK).await;
    fake.clear_faults();

    let jobs = world.runner_jobs(NS, Some(GROUP)).await.expect("jobs");
    assert!(jobs.is_empty(), "{} runner Jobs left", jobs.len());
    let notes = [
        event_notes(&world, NS, GROUP, "CleanupIncomplete").await,
        event_notes(&world, NS, GROUP, "CleanupAbandoned").await,
    ]
    .concat();
    assert!(
        notes.iter().any(|n| n.contains("Settings → Actions → Runners")),
        "an Event tells how to remove what is left (took {took:?}): {notes:?}"
    );
}

/// A self-signed CA (P-256, made for tests only), the same as the Gitea wire tests use.
const TEST_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBkjCCATmgAwIBAgIUW9WEKO/YPI0N4HixsGeXbMpfKtUwCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTZm9yZ2VydW5uZXIgdGVzdCBDQTAgFw0yNjExMjMyMzMwMTVa
GA8yMTI2MTAzMDIzMzAxNVowHjEcMBoGA1UEAwwTZm9yZ2VydW5uZXIgdGVzdCBD
QTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABH7f1miDQadsujyiVV8rIQQ7p4j5
DR+BQ5yEQuBblHCtd4pScc0r6h3MxvuK7aRBFBE3WGJ+HekmZJV6Y2Xa2bWjUzBR
MB0GA1UdDgQWBBQzXdhdmxCdRPa+RZ2r2/+yTgLW4jAfBgNVHSMEGDAWgBQzXdhd
mxCdRPa+RZ2r2/+yTgLW4jAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0cA
MEQCIACFyzUzo9JKdd3Cd6CxnoinNl19V1wQKaku+qpdlqHXAiAvIEEo9Aejh7cW
1TxNt/ndImsQysS+SIpmV8QC8Rj/fQ==
-----END CERTIFICATE-----
";

/// Cycles of the churn test, and how many run at once. 1000 cycles took 96 s alone on the
/// shared 2-core machine and 800 took 103 s under load, over the ~90 s a test may take.
const CHURN_CYCLES: usize = 700;
const CHURN_PARALLEL: usize = 8;
/// Cycles before the first memory reading: by then the allocator has settled and what lives
/// for a poll interval after a group (its 30 s poll timer, the controller's requeue) is at
/// its steady level.
const CHURN_WARM_UP: usize = 250;
/// Growth of resident memory tolerated between the readings: allocator noise, plus kube's
/// Event recorder, which keeps every Event it published for six minutes to aggregate repeats
/// (about four condition Events per group here, some 2 KiB each with their keys). Without
/// pruning the backend's caches, each cycle kept about 150 KiB (one client with its own root
/// store and connection pool per tenant).
const RSS_NOISE_MIB: f64 = 4.0;
const EVENT_CACHE_PER_CYCLE_KIB: f64 = 8.0;

fn vm_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .expect("VmRSS")
        / 1024.0
}

/// The operator's `forgerunner_forge_cache_entries` for `forge`, summed over kinds; `None`
/// when the metric is not exported.
async fn cache_entries(op: &OperatorProcess, forge: &str) -> Option<i64> {
    let text = reqwest::get(format!(
        "http://{}/metrics",
        op.metrics_addr().await.expect("operator listening")
    ))
    .await
    .ok()?
    .text()
    .await
    .ok()?;
    let prefix = format!("forgerunner_forge_cache_entries{{forge=\"{forge}\"");
    let values: Vec<i64> = text
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// One tenant's group: its own token, its own proxy credentials, the shared CA bundle.
async fn churn_cycle(world: &World, fake: &GiteaFakeHandle, op: &OperatorProcess, ns: &str, i: usize) {
    let name = format!("churn-{i}");
    let token = fake.add_token(&format!("tenant{i}"), true);
    let secrets: Api<Secret> = Api::namespaced(world.client.clone(), ns);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([("token".to_owned(), token)])),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    // The fake also serves absolute-form (proxied) requests; the user part makes each
    // tenant's proxy setting its own.
    let proxy = fake
        .url()
        .replacen("http://", &format!("http://tenant{i}:pw@"), 1);
    let group = RunnerGroup::test(ForgeKind::Gitea)
        .named(ns, &name)
        .url(fake.url())
        .credentials(&name)
        .labels(["churn:host"])
        .poll_interval(30)
        .ca_bundle("corp-ca")
        .proxy(proxy)
        .max(1)
        .build();
    Api::<RunnerGroup>::namespaced(world.client.clone(), ns)
        .create(&PostParams::default(), &group)
        .await
        .expect("group");
    let connected = wait_until(Duration::from_secs(60), "the group connected", || async {
        condition(world, ns, &name, "ForgeConnected")
            .await
            .is_some_and(|(status, _, _)| status == "True")
    })
    .await;
    if connected.is_err() {
        let cond = condition(world, ns, &name, "Ready").await;
        fail_with_output(op, &format!("{name} never connected: {cond:?}"));
    }
    delete_group(world, ns, &name).await;
    wait_gone(world, op, ns, &name, Duration::from_secs(60)).await;
    secrets
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_of_groups_with_their_own_credentials_leaves_no_cache_and_flat_memory() {
    const NS: &str = "del-churn";
    let world = gitea_world(NS, Duration::from_millis(300)).await;
    let ca = ConfigMap {
        metadata: ObjectMeta {
            name: Some("corp-ca".to_owned()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("ca.crt".to_owned(), TEST_CA.to_owned())])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(world.client.clone(), NS)
        .create(&PostParams::default(), &ca)
        .await
        .expect("configmap");
    let op = start_operator(&world, "gitea", "forgerunner-e2e-deletion");
    let fake = world.gitea.as_ref().expect("gitea").clone();
    let started = Instant::now();
    let run = |range: std::ops::Range<usize>| {
        futures::stream::iter(range)
            .for_each_concurrent(CHURN_PARALLEL, |i| churn_cycle(&world, &fake, &op, NS, i))
    };
    run(0..CHURN_WARM_UP).await;
    let warm = vm_rss_mib(op.pid());
    run(CHURN_WARM_UP..CHURN_CYCLES).await;
    let end = vm_rss_mib(op.pid());
    let took = started.elapsed();
    eprintln!(
        "churn: {CHURN_CYCLES} cycles in {took:?}; VmRSS {warm:.1} MiB after warm-up, {end:.1} MiB at the end"
    );

    let entries = cache_entries(&op, "gitea").await;
    assert_eq!(
        entries,
        Some(0),
        "forge cache entries left after every group went"
    );
    let measured = CHURN_CYCLES - CHURN_WARM_UP;
    let allowed = RSS_NOISE_MIB + EVENT_CACHE_PER_CYCLE_KIB * measured as f64 / 1024.0;
    assert!(
        end - warm <= allowed,
        "operator memory grew by {:.1} MiB over {measured} cycles ({warm:.1} → {end:.1} MiB; \
         {allowed:.1} MiB allowed)",
        end - warm,
    );
}
