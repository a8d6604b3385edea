//! End-to-end (GitHub issue 5): the real `forgerunner` binary against the fake API server, the
//! cluster simulator and the Gitea fake. 50 queued jobs across two label sets are served by two
//! RunnerGroups (`maxRunners: 8`): every job runs on a runner whose labels match, no group ever
//! has more than 8 runners, nothing stays registered and no Job is left; jobs no group matches
//! stay queued and get no runner.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::cell::Cell;
use std::time::Duration;

use common::e2e::{OUTPUT_LINES, start_operator, wait_nothing_left};
use common::gitea_world::gitea_world;
use common::group::Group;
use forgerunner_sandbox::world::wait_until;
use forgerunner_sandbox::world::watch::JobWatch;
use forgerunner_testkit::gitea::{Conclusion, JobState};
use kube::api::ListParams;

const NS: &str = "e2e-gitea";
const GROUPS: [(&str, &str); 2] = [("gt-linux", "linux"), ("gt-gpu", "gpu")];
const JOBS: usize = 50;
const MAX_RUNNERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_jobs_two_label_sets_two_groups_max_eight() {
    let world = gitea_world(NS, Duration::from_millis(300)).await;
    let gitea = world.gitea.clone().expect("gitea fake");
    let watch = JobWatch::start(world.client.clone(), NS);
    for (name, label) in GROUPS {
        Group::gitea(name)
            .host_label(label)
            .max(MAX_RUNNERS as u32)
            .idle_timeout(5)
            .create(&world, NS)
            .await;
    }
    let op = start_operator(&world, "gitea", "forgerunner-e2e-gitea");

    let unmatched: Vec<i64> = (0..3)
        .map(|_| world.queue_gitea_job(&["windows"]).expect("queue").id)
        .collect();
    let queued: Vec<i64> = (0..JOBS)
        .map(|i| world.queue_gitea_job(&[GROUPS[i % 2].1]).expect("queue").id)
        .collect();

    let max_registered = Cell::new([0usize; 2]);
    let done = || {
        let mut registered = max_registered.get();
        let mut done = 0;
        for (i, (_, label)) in GROUPS.iter().enumerate() {
            let progress = world.gitea_progress(&[*label]);
            registered[i] = registered[i].max(progress.registered_runners);
            done += progress.done;
        }
        max_registered.set(registered);
        done
    };
    let completed = wait_until(Duration::from_secs(300), "every job to complete", || {
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
    for job in gitea.jobs().iter().filter(|j| queued.contains(&j.id)) {
        assert_eq!(job.state, JobState::Done(Conclusion::Success), "job {}", job.id);
        assert!(
            job.labels.iter().all(|l| job.runner_labels.contains(l)),
            "job {} ({:?}) ran on a runner with labels {:?}",
            job.id,
            job.labels,
            job.runner_labels
        );
        let (group, _) = GROUPS.iter().find(|(_, l)| job.labels[0] == *l).expect("group");
        assert!(
            job.runner_name.starts_with(&format!("{group}-")),
            "job {} on {}",
            job.id,
            job.runner_name
        );
    }
    let max_registered = max_registered.get();
    for i in 0..2 {
        assert!(
            max_active[i] <= MAX_RUNNERS,
            "{}: {} runner Jobs at once",
            GROUPS[i].0,
            max_active[i]
        );
        assert!(
            max_registered[i] <= MAX_RUNNERS,
            "{}: {} runners registered",
            GROUPS[i].0,
            max_registered[i]
        );
        assert!(max_active[i] > 1, "{}: runners worked in parallel", GROUPS[i].0);
    }

    // Afterwards: nothing registered at Gitea, no Job in the cluster; the unmatched jobs are
    // still queued and nobody took them.
    let registered = || gitea.runners().len();
    wait_nothing_left(
        &world,
        &op,
        Duration::from_secs(120),
        NS,
        &ListParams::default(),
        registered,
    )
    .await;
    for id in unmatched {
        let job = gitea.job(id).expect("job");
        assert_eq!(job.state, JobState::Waiting, "unmatched job {id} stays queued");
        assert!(job.runner_name.is_empty());
    }
}
