//! End to end under faults: the real `forgerunner` binary is killed and restarted mid-burst,
//! the forges and the Kubernetes API answer errors and 429s, and still every job completes,
//! no runner is created twice for a job, nothing leaks and `maxRunners` holds. The Forgejo test
//! also needs the `forgejo` feature.
#![cfg(all(feature = "github", feature = "gitea"))]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::e2e::{OUTPUT_LINES, assert_runners_bounded, fail_with_output, start_world};
use common::gitea_world::wait_within;
use common::group::Group;
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::operator::OperatorProcess;
use forgerunner_sandbox::world::watch::JobWatch;
use forgerunner_sandbox::world::{World, WorldOptions};
use forgerunner_testkit::apiserver::{Fault as ApiFault, Verb};
use forgerunner_testkit::gitea::Fault as GiteaFault;
use forgerunner_testkit::github::{Endpoint, Fault as GithubFault};

const NS: &str = "faults";
const MAX: u32 = 5;
const DRAIN: Duration = Duration::from_secs(180);

fn start_operator(world: &World, forge: &str) -> OperatorProcess {
    common::e2e::start_operator(world, forge, "forgerunner-faults")
}

/// A world with only `forge`'s fake (`github`, `gitea` or `forgejo`).
async fn world(forge: &str) -> World {
    let opts = WorldOptions {
        github: forge == "github",
        gitea: forge == "gitea",
        forgejo: forge == "forgejo",
        work_time: Duration::from_millis(300),
        ..WorldOptions::default()
    };
    start_world(opts, NS).await
}

/// Every group here: up to [`MAX`] runners, and a 20 s idle timeout so a surplus runner leaves
/// within the drain (while a killed process's session is still held at GitHub, the new one plans
/// on snapshot statistics and never scales down).
fn group_size() -> GroupSize {
    GroupSize {
        min: 0,
        max: MAX,
        idle_timeout_seconds: Some(20),
        startup_timeout_seconds: None,
        scale_down_delay_seconds: None,
    }
}

async fn wait_drained(world: &World, progress: impl Fn() -> (bool, usize), op: &OperatorProcess) {
    wait_within(op, DRAIN, "every job done and nothing left", || async {
        let (done, registered) = progress();
        done && registered == 0 && world.runner_jobs(NS, None).await.is_ok_and(|j| j.is_empty())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn github_restart_and_faults_mid_burst_lose_nothing() {
    let world = world("github").await;
    let watch = JobWatch::start(world.client.clone(), NS);
    let mut op = start_operator(&world, "github");
    Group::github("gh").size(&group_size()).create(&world, NS).await;
    let scale_set = world
        .github_scale_set("gh", Duration::from_secs(60))
        .await
        .expect("scale set");
    let emu = world.github.as_ref().expect("emulator").emu.clone();

    let jobs = 30;
    for _ in 0..jobs {
        world.queue_github_job(scale_set, "gh").expect("queue");
    }
    // Faults while the burst runs: the service throttles and fails, tokens expire.
    emu.inject(GithubFault::status(Endpoint::GenerateJitConfig, 503).times(2));
    emu.inject(GithubFault::too_many_requests(Endpoint::GetMessage, Some(Duration::from_secs(1))).times(1));
    world
        .api
        .inject(ApiFault::error(503).verb(Verb::Create).resource("jobs").times(2));
    wait_within(&op, DRAIN, "a third of the jobs", || async {
        world.github_progress(scale_set).done >= 10
    })
    .await;
    emu.expire_admin_tokens();
    emu.expire_queue_token(scale_set);

    // A crash mid-burst: the new process must adopt the runners the old one created.
    op.kill();
    let before_restart = op.output_tail(OUTPUT_LINES);
    let mut op = start_operator(&world, "github");
    // A registration whose Job never existed can only come from the kill landing between the
    // JIT config call and the Job create (documented in docs/github.md: the service drops
    // runners that never connect); every runner that had a Job must be deregistered.
    let had_job = |name: &str| watch.group("gh").created.iter().any(|(n, _)| n == name);
    let registered_with_job = || {
        emu.state()
            .runners
            .iter()
            .filter(|r| r.scale_set_id == scale_set && had_job(&r.name))
            .count()
    };
    wait_drained(
        &world,
        || (world.github_progress(scale_set).all_done(), registered_with_job()),
        &op,
    )
    .await;

    let tally = watch.group("gh");
    assert_eq!(world.github_progress(scale_set).done, jobs);
    assert!(
        tally.peak_active <= MAX as usize,
        "peak {} > max {MAX}",
        tally.peak_active
    );
    // A kill between a runner's Job and its Secret leaves a Job that can never start; the new
    // process retires it and makes a complete runner. Any other runner Job that never ran is a
    // duplicate.
    let log = op.output();
    let retired = |name: &str| {
        log.iter()
            .any(|l| l.contains("left without its Secret") && l.contains(name))
    };
    let never_ran: Vec<&str> = tally
        .created
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !tally.started.contains(*n))
        .collect();
    if tally.started.len() != jobs || never_ran.iter().any(|n| !retired(n)) {
        fail_with_output(
            &op,
            &format!(
                "one runner per job, no duplicate after the restart: {} runner Jobs ran for {jobs} jobs, {never_ran:?} never ran; the operator before the restart logged:\n{before_restart}",
                tally.started.len(),
            ),
        );
    }
    assert!(op.exit_status().is_none(), "the operator never exits on faults");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gitea_restart_errors_and_cancellations_lose_nothing() {
    let world = world("gitea").await;
    let watch = JobWatch::start(world.client.clone(), NS);
    let mut op = start_operator(&world, "gitea");
    Group::gitea("gt")
        .in_world_org()
        .label("linux")
        .size(&group_size())
        .create(&world, NS)
        .await;
    let fake = world.gitea.as_ref().expect("gitea fake").clone();

    let jobs = 24;
    let mut ids = Vec::new();
    for _ in 0..jobs {
        ids.push(world.queue_gitea_job(&["linux"]).expect("queue").id);
    }
    // Two jobs are cancelled before any runner can take them.
    fake.cancel_job(ids[jobs - 1]);
    fake.cancel_job(ids[jobs - 2]);
    fake.inject_fault(GiteaFault::status("/actions/jobs", 500).times(3));
    fake.inject_fault(GiteaFault::latency("/actions/runners", Duration::from_millis(300)).times(5));
    world.api.inject(
        ApiFault::error(429)
            .verb(Verb::Patch)
            .resource("runnergroups/status")
            .times(2)
            .retry_after(1),
    );

    let progress = || {
        let p = world.gitea_progress(&["linux"]);
        (p.all_done(), p.registered_runners)
    };
    wait_within(&op, DRAIN, "a third of the jobs", || async {
        world.gitea_progress(&["linux"]).done >= 8
    })
    .await;
    op.kill();
    let mut op = start_operator(&world, "gitea");
    wait_drained(&world, progress, &op).await;

    assert_eq!(
        world.gitea_progress(&["linux"]).done,
        jobs,
        "cancelled jobs count as done"
    );
    // Polling can race a runner that is just picking its job; such a spare runner is bounded
    // by the idle timeout (which the drain above waited out) and never more than one per poll.
    assert_runners_bounded(&watch.group("gt"), MAX, jobs);
    assert!(op.exit_status().is_none(), "the operator never exits on faults");
}

/// Forgejo 15 under every kind of forge error during a burst (401s, a 404, 429s with
/// `Retry-After`, 5xx on runner creation, a malformed body, a request past the client's
/// timeout), Kubernetes 429s, two cancellations and a crash mid-burst: every job runs exactly
/// once, every runner row is gone at the end (ephemeral ones after their job, the rest deleted
/// over REST), no runner Job is left and `maxRunners` holds.
#[cfg(feature = "forgejo")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forgejo_restart_and_forge_errors_lose_nothing() {
    use forgerunner_testkit::forgejo::{Conclusion, Fault as ForgejoFault, JobStatus};

    let world = world("forgejo").await;
    let watch = JobWatch::start(world.client.clone(), NS);
    let mut op = start_operator(&world, "forgejo");
    Group::forgejo("fj")
        .in_world_org()
        .host_label("linux")
        .size(&group_size())
        .create(&world, NS)
        .await;
    let fake = world.forgejo.as_ref().expect("forgejo fake").clone();

    let jobs = 24;
    let mut ids = Vec::new();
    for _ in 0..jobs {
        ids.push(world.queue_forgejo_job(&["linux"]).expect("queue").id);
    }
    // Two jobs are cancelled before any runner can take them.
    let cancelled = [ids[jobs - 1], ids[jobs - 2]];
    for id in cancelled {
        fake.cancel_job(id);
    }
    // While the burst starts: 429s with `Retry-After`, a malformed body, 5xx on runner
    // creation, Kubernetes 429s.
    let jobs_list = "/runners/jobs";
    fake.inject_fault(ForgejoFault::status(jobs_list, 429).retry_after("1").times(2));
    fake.inject_fault(ForgejoFault::garbage(jobs_list).times(1));
    fake.inject_fault(
        ForgejoFault::status("/actions/runners", 503)
            .method("POST")
            .times(2),
    );
    world.api.inject(
        ApiFault::error(429)
            .verb(Verb::Patch)
            .resource("runnergroups/status")
            .times(2)
            .retry_after(1),
    );
    wait_within(&op, DRAIN, "the first jobs", || async {
        world.forgejo_progress(&["linux"]).done >= 3
    })
    .await;
    // While runners work (their Jobs' events keep the group reconciling; a 401 or 404 is
    // otherwise retried only after a minute): the token is refused for a while, then a listing
    // is not found. First matching rule wins, so they come in this order.
    fake.inject_fault(ForgejoFault::status(jobs_list, 401).times(2));
    fake.inject_fault(ForgejoFault::status(jobs_list, 404).times(1));
    // Job listings only: a GET of a runner that is already gone is a 404 too.
    let answered = |status: u16| {
        fake.requests()
            .iter()
            .filter(|r| r.status == status && r.path.ends_with(jobs_list))
            .count()
    };
    wait_within(&op, DRAIN, "the 401s and the 404", || async {
        answered(401) >= 2 && answered(404) >= 1
    })
    .await;
    wait_within(&op, DRAIN, "a third of the jobs", || async {
        world.forgejo_progress(&["linux"]).done >= 8
    })
    .await;
    assert!(op.exit_status().is_none(), "the operator never exits on faults");
    // A crash mid-burst: the new process must adopt the runners (and bindings) of the old one.
    op.kill();
    // The new process's first listing outlives the client's 15 s timeout (and is retried).
    fake.inject_fault(ForgejoFault::latency(jobs_list, Duration::from_secs(16)).times(1));
    let mut op = start_operator(&world, "forgejo");
    let progress = || {
        let p = world.forgejo_progress(&["linux"]);
        (p.all_done(), fake.runners().len())
    };
    wait_drained(&world, progress, &op).await;

    assert_eq!(
        world.forgejo_progress(&["linux"]).done,
        jobs,
        "cancelled jobs count as done"
    );
    for id in ids {
        let job = fake.job(id).expect("job");
        let tasks = fake.tasks_for_job(id).len();
        if cancelled.contains(&id) {
            assert_eq!(job.status, JobStatus::Done(Conclusion::Cancelled), "job {id}");
            assert_eq!(tasks, 0, "cancelled job {id} was never taken");
        } else {
            assert_eq!(job.status, JobStatus::Done(Conclusion::Success), "job {id}");
            assert_eq!(tasks, 1, "job {id} ran exactly once");
        }
    }
    // Each runner is bound to one job's handle, so no job gets a second runner; a runner made
    // for a cancelled job (when a listing saw it waiting) idles until the idle timeout, which
    // the drain above waited out.
    assert_runners_bounded(&watch.group("fj"), MAX, jobs);
    assert!(op.exit_status().is_none(), "the operator never exits on faults");
}
