//! End to end: a forge that answers with a huge body (a hostile server a group's URL points at)
//! costs the real `forgerunner` binary no more than a capped read. The group shows a condition
//! saying the answer was too large, the process stays far below its 128 MiB memory limit, and
//! `/healthz` keeps answering. A listing within every byte cap whose decoded form would be
//! many times larger (H3c of the security review) is bounded by what is kept, not by its bytes.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::e2e::{assert_healthz, assert_peak_rss_under, start_operator};
use common::gitea_world::{gitea_world, wait_or_fail};
use common::group::Group;
use forgerunner_sandbox::world::World;
use forgerunner_testkit::gitea::{Fault, Repeated};

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
    Group::gitea(GROUP)
        .host_label(GROUP)
        .max(2)
        .create(&world, NS)
        .await;

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
    assert_healthz(&op).await;
    assert_peak_rss_under(&op, PEAK_RSS_MIB, &format!("{POLLS} huge answers"));
}

const LABELS_NS: &str = "bounded-labels";
const LABELS_GROUP: &str = "labels";
/// Pages of the hostile job listing: with [`LABELS_PAGE_BYTES`] each, the listing is as large
/// as a listing may be (16 MiB, `ListingLimits::FORGE_DEFAULT.max_bytes`).
const LABELS_PAGES: i64 = 4;
/// Bytes of each page: the largest page body the client reads (4 MiB,
/// `forgerunner_http::rest::MAX_LIST_BYTES`), less a little.
const LABELS_PAGE_BYTES: usize = 4 * 1024 * 1024 - 1024;

/// Page `page` of the hostile listing: one job the group serves, and one whose `labels` are
/// millions of `""` (3 bytes each on the wire, a 24-byte `String` each if decoded as is).
///
/// Real servers send short lists: Gitea's `ActionWorkflowJob.Labels` is the job's `runs-on`
/// (`modules/structs/repo_actions.go`, filled from `ActionRunJob.RunsOn` in
/// `services/convert/convert.go`), stored as `JSON TEXT` (`models/actions/run_job.go`) with no
/// bound on count or length, and neither Gitea's runner registration
/// (`routers/api/actions/runner/runner.go`, which only ellipsizes the runner name to 255) nor
/// act_runner (`internal/pkg/labels/labels.go`, which refuses only an empty label) bounds
/// labels. So only the reading side can: a workflow author's `runs-on`, or a hostile server,
/// decides the length.
fn empty_labels_page(page: i64) -> Repeated {
    let head = format!(
        r#"{{"jobs":[{{"id":{page},"status":"queued","labels":["{LABELS_GROUP}"]}},{{"id":{},"status":"queued","labels":["#,
        100 + page
    );
    let tail = format!(r#"""]}}],"total_count":{}}}"#, 2 * LABELS_PAGES);
    let unit = r#""","#.to_string();
    let count = (LABELS_PAGE_BYTES - head.len() - tail.len()) / unit.len();
    Repeated {
        head,
        unit,
        count,
        tail,
    }
}

/// The group's pending jobs as its status shows them.
async fn pending_jobs(world: &World) -> Option<u32> {
    let group = world.group(LABELS_NS, LABELS_GROUP).await.ok()?;
    group.status.map(|s| s.pending_jobs)
}

/// H3c: a 16 MiB job listing (four 4 MiB pages, each within the page cap) of `""` labels
/// decodes to about 5.6 million `String`s, ~130 MiB, if labels are kept as sent. Kept bounded
/// (at most 65 distinct labels of at most 257 characters per job, each counted against the
/// listing's item budget), the operator stays small, and the group still counts exactly the
/// jobs it serves: the one job per page with its label, not the one with the `""` labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_listing_of_empty_labels_stays_small_when_decoded() {
    let world = gitea_world(LABELS_NS, Duration::from_millis(300)).await;
    let fake = world.gitea.as_ref().expect("Gitea fake");
    for page in 1..=LABELS_PAGES {
        let body = empty_labels_page(page);
        assert!(body.len() <= LABELS_PAGE_BYTES, "{} bytes", body.len());
        fake.inject_fault(Fault::repeated("/actions/jobs", body).query_pair(&format!("page={page}")));
    }
    let op = start_operator(&world, "gitea", "forgerunner-e2e-bounded-labels");
    Group::gitea(LABELS_GROUP)
        .host_label(LABELS_GROUP)
        .max(1)
        .create(&world, LABELS_NS)
        .await;

    let served = LABELS_PAGES as u32;
    wait_or_fail(
        &op,
        "the group's pending jobs to be the jobs it serves",
        || async { pending_jobs(&world).await == Some(served) },
    )
    .await;
    wait_or_fail(&op, "repeated whole listings", || async {
        let pages = fake
            .requests()
            .iter()
            .filter(|r| r.path.contains("/actions/jobs") && r.status == 200)
            .count();
        pages >= POLLS * LABELS_PAGES as usize
    })
    .await;

    assert_eq!(
        pending_jobs(&world).await,
        Some(served),
        "the jobs with the `\"\"` labels are no demand"
    );
    assert_peak_rss_under(
        &op,
        PEAK_RSS_MIB,
        &format!("{POLLS} listings of 16 MiB of empty labels"),
    );
}
