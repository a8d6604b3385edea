//! Two real `forgerunner` processes with leader election against one cluster: the leader can no
//! longer renew its Lease (the API server fails only its lease calls; every other call of it
//! still succeeds) while it is busy creating runners with a slow forge. It must stop writing by
//! its renew deadline, before the standby takes over, and the jobs must still all complete.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::e2e::{assert_runners_bounded, fail_with_output, start_world};
use common::gitea_world::wait_within;
use common::group::Group;
use common::leader::{LEASE_SECONDS, lease_holder, start_candidate as start};
use forgerunner_sandbox::world::operator::OperatorProcess;
use forgerunner_sandbox::world::watch::JobWatch;
use forgerunner_sandbox::world::{World, WorldOptions, wait_until};
use forgerunner_testkit::apiserver::{Fault as ApiFault, RequestRecord};
use forgerunner_testkit::gitea::Fault as GiteaFault;

const NS: &str = "fence";
const LABELS: &[&str] = &["linux"];
const MAX: u32 = 6;
const DRAIN: Duration = Duration::from_secs(180);

/// The renew deadline the operator derives from [`LEASE_SECONDS`] (two thirds of it).
fn renew_deadline() -> Duration {
    Duration::from_secs(LEASE_SECONDS) * 2 / 3
}

async fn wait_for_holder(world: &World, who: &str, within: Duration, op: &OperatorProcess) {
    let held = wait_until(within, "the lease holder", || async {
        lease_holder(world).await.as_deref() == Some(who)
    })
    .await;
    if held.is_err() {
        fail_with_output(op, &format!("{who} did not take the lease"));
    }
}

fn by(r: &RequestRecord, who: &str) -> bool {
    r.user_agent.contains(&format!("({who})"))
}

fn is_write(r: &RequestRecord) -> bool {
    matches!(r.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
}

/// Arrival times of `who`'s writes to anything but the Lease.
fn writes_by(log: &[RequestRecord], who: &str) -> Vec<Instant> {
    log.iter()
        .filter(|r| by(r, who) && is_write(r) && r.resource != "leases")
        .map(|r| r.at)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deposed_leader_stops_writing_before_the_standby_leads() {
    let opts = WorldOptions {
        github: false,
        gitea: true,
        forgejo: false,
        work_time: Duration::from_secs(2),
        ..WorldOptions::default()
    };
    let world = start_world(opts, NS).await;
    let watch = JobWatch::start(world.client.clone(), NS);
    let a = start(&world, "op-a");
    wait_for_holder(&world, "op-a", Duration::from_secs(60), &a).await;
    let b = start(&world, "op-b");
    let fake = world.gitea.as_ref().expect("gitea fake").clone();
    // A slow forge: every pass spends a second listing jobs before it writes, so passes are
    // under way whenever the lease deadline passes.
    fake.inject_fault(GiteaFault::latency("/actions/jobs", Duration::from_secs(1)));
    Group::gitea("gt")
        .in_world_org()
        .labels(LABELS)
        .max(MAX)
        .idle_timeout(20)
        .create(&world, NS)
        .await;
    let mut jobs = 0;
    for _ in 0..MAX {
        world.queue_gitea_job(LABELS).expect("queue");
        jobs += 1;
    }
    wait_within(&a, DRAIN, "op-a's first runners", || async {
        !watch.group("gt").created.is_empty()
    })
    .await;
    // More work while op-a loses the lease: only its lease calls fail from now on.
    for _ in 0..MAX {
        world.queue_gitea_job(LABELS).expect("queue");
        jobs += 1;
    }
    world
        .api
        .inject(ApiFault::error(500).resource("leases").user_agent("(op-a)"));
    wait_for_holder(&world, "op-b", Duration::from_secs(60), &b).await;
    for _ in 0..MAX {
        world.queue_gitea_job(LABELS).expect("queue");
        jobs += 1;
    }

    wait_within(&b, DRAIN, "every job done and nothing left", || async {
        let p = world.gitea_progress(LABELS);
        p.done == jobs
            && p.registered_runners == 0
            && world.runner_jobs(NS, None).await.is_ok_and(|j| j.is_empty())
    })
    .await;

    let log = world.api.requests().records;
    let last_lease_write = log
        .iter()
        .filter(|r| by(r, "op-a") && is_write(r) && r.resource == "leases" && r.status < 300)
        .map(|r| r.at)
        .max()
        .expect("op-a wrote its lease");
    let deadline = last_lease_write + renew_deadline();
    let a_writes = writes_by(&log, "op-a");
    let b_writes = writes_by(&log, "op-b");
    assert!(!a_writes.is_empty(), "op-a led and wrote");
    let late: Vec<Duration> = a_writes
        .iter()
        .filter(|at| **at > deadline)
        .map(|at| *at - deadline)
        .collect();
    assert!(
        late.is_empty(),
        "op-a wrote {} times after its renew deadline (by {late:?}); op-a log:\n{}",
        late.len(),
        a.output_tail(common::e2e::OUTPUT_LINES)
    );
    let last_a = a_writes.iter().max().expect("op-a writes");
    let first_b = b_writes.iter().min().expect("op-b led and wrote");
    assert!(
        last_a < first_b,
        "two leaders wrote at once: op-b's first write came {:?} before op-a's last",
        *last_a - *first_b
    );
    assert!(
        *first_b >= last_lease_write + Duration::from_secs(LEASE_SECONDS),
        "op-b led before op-a's lease expired"
    );

    // One runner per job; polling may race a runner picking its job (a spare runner, removed
    // by the idle timeout the drain waited out), never a runner made twice.
    assert_runners_bounded(&watch.group("gt"), MAX, jobs);
    assert!(lease_holder(&world).await.as_deref() == Some("op-b"));
    drop((a, b));
}
