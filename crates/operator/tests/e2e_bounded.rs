//! End to end: a forge that answers with a huge body (a hostile server a group's URL points at)
//! costs the real `forgerunner` binary no more than a capped read. The group shows a condition
//! saying the answer was too large, the process stays far below its 128 MiB memory limit, and
//! `/healthz` keeps answering.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::e2e::{fail_with_output, start_operator};
use common::gitea_world::{gitea_group, gitea_world, wait_or_fail};
use forgerunner_sandbox::world::World;
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_testkit::gitea::Fault;

const NS: &str = "bounded";
const GROUP: &str = "huge";
/// What the fake streams per job listing: twice the operator's memory limit, so reading it
/// whole would show in the peak RSS however the allocator behaves.
const BODY: usize = 256 * 1024 * 1024;
/// Peak resident memory the operator must stay under: well below the chart's 128 MiB limit.
const PEAK_RSS_MIB: f64 = 96.0;
/// Listings refused before memory is read, so the peak covers repeated refusals.
const POLLS: usize = 3;

/// Messages of the group's conditions.
async fn condition_messages(world: &World) -> Vec<String> {
    let Ok(group) = world.group(NS, GROUP).await else {
        return Vec::new();
    };
    group
        .status
        .map(|s| s.conditions.into_iter().map(|c| c.message).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_huge_forge_answer_is_a_condition_not_an_oom() {
    let world = gitea_world(NS, Duration::from_millis(300)).await;
    let fake = world.gitea.as_ref().expect("Gitea fake");
    fake.inject_fault(Fault::huge_body("/actions/jobs", BODY));
    let op = start_operator(&world, "gitea", "forgerunner-e2e-bounded");
    let size = GroupSize {
        min: 0,
        max: 2,
        idle_timeout_seconds: None,
        startup_timeout_seconds: None,
        scale_down_delay_seconds: None,
    };
    world
        .add_gitea_group_with(NS, GROUP, &gitea_group(GROUP), &size)
        .await
        .expect("group");

    wait_or_fail(&op, "a condition saying the answer was too large", || async {
        condition_messages(&world)
            .await
            .iter()
            .any(|m| m.contains("response too large to list Actions jobs"))
    })
    .await;
    wait_or_fail(&op, "repeated job listings", || async {
        fake.requests()
            .iter()
            .filter(|r| r.path.contains("/actions/jobs"))
            .count()
            >= POLLS
    })
    .await;

    let messages = condition_messages(&world).await;
    assert!(
        messages.iter().all(|m| !m.contains("    ")),
        "no condition quotes the body: {messages:?}"
    );
    let health = reqwest::get(format!("http://{}/healthz", op.http_addr()))
        .await
        .map(|r| r.status().as_u16());
    if health.as_ref().ok() != Some(&200) {
        fail_with_output(&op, &format!("/healthz answered {health:?}"));
    }
    let Some((peak_mib, _)) = op.resource_usage() else {
        fail_with_output(&op, "no /proc reading of the operator");
    };
    eprintln!("operator peak RSS: {peak_mib:.1} MiB");
    assert!(
        peak_mib < PEAK_RSS_MIB,
        "peak RSS {peak_mib:.1} MiB after {POLLS} huge answers (limit {PEAK_RSS_MIB} MiB)"
    );
}
