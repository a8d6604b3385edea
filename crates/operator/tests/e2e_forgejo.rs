//! End-to-end for Forgejo: the real `forgerunner` binary against the fake API server, the
//! cluster simulator and the Forgejo fake.
//!
//! - Forgejo 15 (ephemeral runners bound to a job handle): 50 queued jobs across two label sets
//!   are served by two RunnerGroups (`maxRunners: 8`): every job runs once, on a runner of the
//!   group whose labels match; no group ever has more than 8 runners; one runner Job per job;
//!   nothing stays registered and no Job is left; jobs no group matches stay waiting.
//! - Forgejo 14 (registration-token path): a small burst completes.
//! - Forgejo 10: refused with `Ready=False` (`ForgeConfig`) naming the version; no runner Job.
#![cfg(feature = "forgejo")]

#[allow(dead_code)]
mod common;

use std::cell::Cell;
use std::time::Duration;

use common::e2e::{OUTPUT_LINES, fail_with_output, start_operator, start_world, wait_nothing_left};
use common::group::Group;
use forgerunner_sandbox::world::operator::OperatorSettings;
use forgerunner_sandbox::world::watch::JobWatch;
use forgerunner_sandbox::world::{World, WorldOptions, wait_until};
use forgerunner_testkit::forgejo::{Conclusion, ForgejoFakeHandle, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::ListParams;

const GROUPS: [(&str, &str); 2] = [("fj-linux", "linux"), ("fj-gpu", "gpu")];
const JOBS: usize = 50;
const MAX_RUNNERS: usize = 8;
/// Every wait of these tests; generous for a busy 2-core machine.
const DEADLINE: Duration = Duration::from_secs(300);

/// A world with only the Forgejo fake, playing `version`.
async fn forgejo_world(namespace: &str, version: &str) -> (World, ForgejoFakeHandle) {
    let opts = WorldOptions {
        github: false,
        gitea: false,
        forgejo: true,
        forgejo_version: version.to_owned(),
        work_time: Duration::from_millis(300),
        ..WorldOptions::default()
    };
    let world = start_world(opts, namespace).await;
    let fake = world.forgejo.clone().expect("forgejo fake");
    (world, fake)
}

/// The group's condition of type `kind`, as stored.
async fn condition(world: &World, namespace: &str, group: &str, kind: &str) -> Option<Condition> {
    let group = world.group(namespace, group).await.ok()?;
    group.status?.conditions.into_iter().find(|c| c.type_ == kind)
}

/// Runner rows at the fake named after `group`'s runners (`<group>-<5 chars>`).
fn registered_of(fake: &ForgejoFakeHandle, group: &str) -> usize {
    let prefix = format!("{group}-");
    fake.runners()
        .iter()
        .filter(|r| r.name.starts_with(&prefix))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_jobs_two_label_sets_two_groups_max_eight() {
    const NS: &str = "e2e-forgejo";
    let (world, fake) = forgejo_world(NS, "15.0.3+gitea-1.22.0").await;
    let watch = JobWatch::start(world.client.clone(), NS);
    for (name, label) in GROUPS {
        Group::forgejo(name)
            .host_label(label)
            .max(MAX_RUNNERS as u32)
            .idle_timeout(5)
            .create(&world, NS)
            .await;
    }
    let settings = OperatorSettings {
        forges: vec!["forgejo".to_owned()],
        pod_name: "forgerunner-e2e-forgejo".to_owned(),
        log_level: std::env::var("E2E_LOG_LEVEL").unwrap_or_else(|_| "info".to_owned()),
        ..OperatorSettings::default()
    };
    let op = common::e2e::start_operator_with(&world, &settings);

    let unmatched: Vec<i64> = (0..3)
        .map(|_| world.queue_forgejo_job(&["windows"]).expect("queue").id)
        .collect();
    let queued: Vec<i64> = (0..JOBS)
        .map(|i| world.queue_forgejo_job(&[GROUPS[i % 2].1]).expect("queue").id)
        .collect();

    // Runner rows are counted by name: a row created over REST declares its labels only once
    // its pod connects.
    let max_registered = Cell::new([0usize; 2]);
    let done = || {
        let mut registered = max_registered.get();
        let mut done = 0;
        for (i, (name, label)) in GROUPS.iter().enumerate() {
            registered[i] = registered[i].max(registered_of(&fake, name));
            done += world.forgejo_progress(&[*label]).done;
        }
        max_registered.set(registered);
        done
    };
    let completed = wait_until(DEADLINE, "every job to complete", || {
        std::future::ready(done() == JOBS)
    })
    .await;
    let max_active = GROUPS.map(|(name, _)| watch.group(name).peak_active);
    assert!(
        completed.is_ok(),
        "only {}/{JOBS} jobs completed (max active {max_active:?}); operator log:\n{}",
        done(),
        op.output_tail(OUTPUT_LINES)
    );
    for id in &queued {
        let job = fake.job(*id).expect("job");
        assert_eq!(job.status, JobStatus::Done(Conclusion::Success), "job {id}");
        let tasks = fake.tasks_for_job(*id);
        assert_eq!(tasks.len(), 1, "job {id} ran once: {tasks:?}");
        let task = &tasks[0];
        assert!(
            job.runs_on.iter().all(|l| task.runner_labels.contains(l)),
            "job {id} ({:?}) ran on a runner with labels {:?}",
            job.runs_on,
            task.runner_labels
        );
        let (group, _) = GROUPS.iter().find(|(_, l)| job.runs_on[0] == *l).expect("group");
        assert!(
            task.runner_name.starts_with(&format!("{group}-")),
            "job {id} on {}",
            task.runner_name
        );
    }
    let max_registered = max_registered.get();
    for (i, (name, _)) in GROUPS.iter().enumerate() {
        assert!(
            max_active[i] <= MAX_RUNNERS,
            "{name}: {} runner Jobs at once",
            max_active[i]
        );
        assert!(
            max_registered[i] <= MAX_RUNNERS,
            "{name}: {} runners registered",
            max_registered[i]
        );
        assert!(max_active[i] > 1, "{name}: runners worked in parallel");
    }

    // Afterwards: no runner registered at Forgejo (ephemeral runners are deleted after their
    // job), no Job in the cluster; the unmatched jobs are still waiting and nobody took them.
    let registered = || fake.runners().len();
    wait_nothing_left(&world, &op, DEADLINE, NS, &ListParams::default(), registered).await;
    for (name, _) in GROUPS {
        let created = watch.group(name).created.len();
        if created != JOBS / 2 {
            fail_with_output(
                &op,
                &format!(
                    "{name}: {created} runner Jobs for {} jobs (a duplicate)",
                    JOBS / 2
                ),
            );
        }
    }
    for id in unmatched {
        let job = fake.job(id).expect("job");
        assert_eq!(job.status, JobStatus::Waiting, "unmatched job {id} stays waiting");
        assert!(job.runner_id.is_none(), "unmatched job {id} has no runner");
        assert!(fake.tasks_for_job(id).is_empty(), "unmatched job {id} got a task");
    }
}

/// Forgejo 14 has no runner REST API, so the operator takes the registration-token path. What
/// differs from 15, and is checked here:
/// - runners are not created over REST nor bound to a job: each pod registers itself with the
///   scope's shared registration token (fetched by the operator) and runs one job, any job its
///   labels match;
/// - runners cannot be listed or deleted before 15, so they stay registered after their job
///   (only Forgejo 12+'s `cron.cleanup_offline_runners`, off by default and for global runners
///   unless `GLOBAL_SCOPE_ONLY = false`, removes such rows): "nothing left" means no
///   runner Job and no runner at work, not no runner row; every row left is one of ours;
/// - a runner state is a guess (running jobs count as busy runners), so a runner the planner
///   made for a job another runner took idles until the idle timeout reaps its Job: runner Jobs
///   may outnumber jobs, never exceed `maxRunners` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_14_registration_token_path_small_burst() {
    const NS: &str = "e2e-forgejo-14";
    const GROUP: &str = "fj14";
    const BURST: usize = 6;
    const MAX: u32 = 3;
    let (world, fake) = forgejo_world(NS, "14.0.4+gitea-1.22.0").await;
    let watch = JobWatch::start(world.client.clone(), NS);
    Group::forgejo(GROUP)
        .in_world_org()
        .host_label("linux")
        .max(MAX)
        .idle_timeout(5)
        .create(&world, NS)
        .await;
    let op = start_operator(&world, "forgejo", "forgerunner-e2e-forgejo-14");
    let queued: Vec<i64> = (0..BURST)
        .map(|_| world.queue_forgejo_job(&["linux"]).expect("queue").id)
        .collect();

    let completed = wait_until(DEADLINE, "the burst to complete", || {
        std::future::ready(world.forgejo_progress(&["linux"]).done == BURST)
    })
    .await;
    if completed.is_err() {
        fail_with_output(&op, "the Forgejo 14 burst did not complete");
    }
    for id in &queued {
        let job = fake.job(*id).expect("job");
        assert_eq!(job.status, JobStatus::Done(Conclusion::Success), "job {id}");
        let tasks = fake.tasks_for_job(*id);
        assert_eq!(tasks.len(), 1, "job {id} ran once: {tasks:?}");
        assert!(
            tasks[0].runner_name.starts_with(&format!("{GROUP}-")),
            "job {id} on {}",
            tasks[0].runner_name
        );
    }

    // No runner Job left (surplus runners leave through the idle timeout); runner rows stay.
    let working = || fake.runners().iter().filter(|r| r.task.is_some()).count();
    wait_nothing_left(&world, &op, DEADLINE, NS, &ListParams::default(), working).await;
    let tally = watch.group(GROUP);
    assert!(
        tally.peak_active <= MAX as usize,
        "peak {} > max {MAX}",
        tally.peak_active
    );
    assert!(tally.created.len() >= BURST, "created {}", tally.created.len());
    let ours = |name: &str| tally.created.iter().any(|(n, _)| n == name);
    for runner in fake.runners() {
        assert!(
            ours(&runner.name),
            "runner {} is not one of the group's",
            runner.name
        );
        assert!(!runner.ephemeral, "Forgejo 14 runners are never ephemeral");
    }
    let requests = fake.requests();
    assert!(
        requests.iter().any(|r| r.path.ends_with("/registration-token")),
        "the operator fetched the registration token"
    );
    assert!(
        !requests
            .iter()
            .any(|r| r.method == "POST" && r.path.ends_with("/actions/runners")),
        "no runner is created over REST before Forgejo 15"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_10_is_refused_with_a_config_condition_naming_the_version() {
    const NS: &str = "e2e-forgejo-10";
    const GROUP: &str = "fj10";
    let (world, fake) = forgejo_world(NS, "10.0.1+gitea-1.22.0").await;
    Group::forgejo(GROUP)
        .in_world_org()
        .host_label("linux")
        .max(4)
        .create(&world, NS)
        .await;
    let mut op = start_operator(&world, "forgejo", "forgerunner-e2e-forgejo-10");
    for _ in 0..3 {
        world.queue_forgejo_job(&["linux"]).expect("queue");
    }

    // `ForgeError::Config` is the `ForgeConfig` category: `Ready=False` and
    // `ForgeConnected=False` with that reason and the backend's message.
    let refused = wait_until(DEADLINE, "Ready=False with reason ForgeConfig", || async {
        condition(&world, NS, GROUP, "Ready")
            .await
            .is_some_and(|c| c.status == "False" && c.reason == "ForgeConfig")
    })
    .await;
    if refused.is_err() {
        fail_with_output(&op, "the group was not refused");
    }
    let ready = condition(&world, NS, GROUP, "Ready").await.expect("Ready");
    assert!(
        ready.message.contains("10.0.1") && ready.message.contains("not supported"),
        "message names the version: {:?}",
        ready.message
    );
    let connected = condition(&world, NS, GROUP, "ForgeConnected")
        .await
        .expect("ForgeConnected");
    assert_eq!(
        (connected.status.as_str(), connected.reason.as_str()),
        ("False", "ForgeConfig")
    );
    assert!(
        world.runner_jobs(NS, None).await.expect("list").is_empty(),
        "no runner Job for a refused group"
    );
    assert!(fake.runners().is_empty(), "no runner at the forge");
    assert!(fake.tasks().is_empty(), "no job was taken");
    assert!(op.exit_status().is_none(), "the operator keeps running");
}

/// A process killed between a runner's registration and its Job leaves a runner row at Forgejo
/// that nothing in the cluster names. Forgejo 15 creates the row at `POST …/actions/runners`
/// with the description it is given (`routers/api/v1/shared/runners.go` `RegisterRunner`) and
/// lists that description back (`services/convert/convert.go` `ToActionRunner`), as the fake
/// does: the row carries the group's mark, so the restarted process removes it well before the
/// 300 s a row that may be a same-named group's elsewhere is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_registered_by_a_killed_process_without_its_job_is_removed() {
    const NS: &str = "e2e-forgejo-kill";
    const GROUP: &str = "fjkill";
    const JOBS: usize = 2;
    /// Well under the 300 s ghost grace of an unmarked row.
    const REMOVED_WITHIN: Duration = Duration::from_secs(150);
    let (world, fake) = forgejo_world(NS, "15.0.3+gitea-1.22.0").await;
    Group::forgejo(GROUP)
        .in_world_org()
        .host_label("linux")
        .max(JOBS as u32)
        .idle_timeout(5)
        .create(&world, NS)
        .await;
    // Every Job create hangs, so the process is killed with its runners registered and no Job
    // made; the hung requests outlive the test.
    world.api.inject(
        forgerunner_testkit::apiserver::Fault::latency(Duration::from_secs(3600))
            .verb(forgerunner_testkit::apiserver::Verb::Create)
            .resource("jobs"),
    );
    let mut op = start_operator(&world, "forgejo", "forgerunner-e2e-forgejo-kill");
    for _ in 0..JOBS {
        world.queue_forgejo_job(&["linux"]).expect("queue");
    }
    let registered = wait_until(DEADLINE, "the runners registered", || {
        std::future::ready(registered_of(&fake, GROUP) == JOBS)
    })
    .await;
    if registered.is_err() {
        fail_with_output(&op, "the runners were never registered");
    }
    op.kill();
    world.api.clear_faults();
    assert!(
        world.runner_jobs(NS, None).await.expect("list").is_empty(),
        "the kill left no runner Job"
    );
    let left_behind: Vec<String> = fake.runners().into_iter().map(|r| r.name).collect();

    let op = start_operator(&world, "forgejo", "forgerunner-e2e-forgejo-kill");
    let jobs_done = wait_until(DEADLINE, "every job to complete", || {
        std::future::ready(world.forgejo_progress(&["linux"]).done == JOBS)
    })
    .await;
    if jobs_done.is_err() {
        fail_with_output(&op, "the jobs did not complete after the restart");
    }
    let removed = wait_until(REMOVED_WITHIN, "the rows the kill left to go", || {
        std::future::ready(fake.runners().iter().all(|r| !left_behind.contains(&r.name)))
    })
    .await;
    if removed.is_err() {
        fail_with_output(
            &op,
            &format!(
                "rows left by the killed process still registered after {REMOVED_WITHIN:?}: {:?}",
                fake.runners().iter().map(|r| &r.name).collect::<Vec<_>>()
            ),
        );
    }
    let registered = || fake.runners().len();
    wait_nothing_left(&world, &op, DEADLINE, NS, &ListParams::default(), registered).await;
}
