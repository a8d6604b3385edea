//! H3c of the security review, measured: what one Gitea list page decodes to is bounded by the
//! listing's limits, not by what its bytes would decode to as sent. The measure is this
//! process's peak resident memory (`VmHWM`, reset through `/proc/self/clear_refs`) around each
//! decode, so this file holds one test: another running alongside would move the peak.
#![cfg(target_os = "linux")]

use forgerunner_gitea::types::{JOBS_PAGE, WorkflowJob};
use forgerunner_http::{ListingBudget, ListingError, ListingLimits, Page};
use serde::Deserialize;

/// A job decoded as sent, as `WorkflowJob` was before H3c: the control that shows the
/// measure sees what an unbounded decode takes.
#[derive(Deserialize)]
struct JobAsSent {
    #[allow(dead_code)]
    labels: Vec<String>,
}

/// A page decoded as sent, as the client did before H3c (the whole list, then the budget).
#[derive(Deserialize)]
struct PageAsSent {
    jobs: Vec<WorkflowJob>,
}

/// The largest list page the client reads (`forgerunner_http::rest::MAX_LIST_BYTES`).
const PAGE_BYTES: usize = 4 * 1024 * 1024;
/// Most a decode may add to the peak: far below what the pages decode to as sent (tens of MiB),
/// far above the few MiB the bounded decode keeps.
const MAX_GROWTH_MIB: f64 = 12.0;
/// Least the controls (pages decoded as sent) add to the peak, so a measure that missed
/// allocations would fail rather than pass unseen.
const MIN_CONTROL_MIB: f64 = 24.0;

/// A `kB` field of `/proc/self/status`, in MiB.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    kib / 1024.0
}

/// How far `decode` raises the peak resident memory above the resident memory before it.
fn peak_growth_mib<T>(decode: impl FnOnce() -> T) -> (f64, T) {
    // "5" resets the peak to the current resident size (proc(5), `clear_refs`).
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak resident size");
    let before = status_mib("VmRSS:");
    let value = decode();
    (status_mib("VmHWM:") - before, value)
}

/// One job whose `labels` are ~1.4 million `""` (Gitea bounds neither their count nor their
/// length: `ActionRunJob.RunsOn` is `JSON TEXT`): ~32 MiB of `String`s as sent.
fn job_of_empty_labels() -> (String, usize) {
    let head = r#"{"id":1,"status":"queued","labels":["#;
    let tail = r#""gpu"]}"#;
    let repeats = (PAGE_BYTES - head.len() - tail.len()) / 3;
    (format!("{head}{}{tail}", r#""","#.repeat(repeats)), repeats)
}

/// A page of ~300 000 minimal jobs (`{"id":n},`): ~45 MiB of `WorkflowJob`s as sent.
fn page_of_minimal_jobs() -> (String, u64) {
    let mut body = String::from(r#"{"total_count":1,"jobs":["#);
    let mut id = 0u64;
    while body.len() < PAGE_BYTES - 64 {
        id += 1;
        body.push_str(&format!(r#"{{"id":{id}}},"#));
    }
    body.push_str(r#"{"id":0}]}"#);
    (body, id + 1)
}

#[test]
fn decoding_a_hostile_page_takes_memory_bounded_by_the_listing_limits() {
    // The bounded decodes first: memory the allocator keeps after a control is freed would
    // hide what they take.
    let (body, repeats) = job_of_empty_labels();
    let (growth, job) = peak_growth_mib(|| serde_json::from_slice::<WorkflowJob>(body.as_bytes()));
    let job = job.expect("a job");
    eprintln!("a job of {repeats} empty labels: peak +{growth:.1} MiB");
    assert_eq!(job.labels, ["", "gpu"]);
    assert!(
        growth < MAX_GROWTH_MIB,
        "decoding {repeats} empty labels raised the peak by {growth:.1} MiB"
    );
    drop((job, body));

    // The budget stops decoding at the 20 001st entry.
    let (body, jobs) = page_of_minimal_jobs();
    let budget = ListingBudget::new(ListingLimits::FORGE_DEFAULT);
    let (growth, page) = peak_growth_mib(|| budget.decode_page::<WorkflowJob>(body.as_bytes(), JOBS_PAGE));
    eprintln!(
        "a page of {jobs} jobs ({} bytes each): peak +{growth:.1} MiB",
        std::mem::size_of::<WorkflowJob>()
    );
    let max = ListingLimits::FORGE_DEFAULT.max_items;
    assert_eq!(
        page.map(|p| p.map(|p: Page<WorkflowJob>| p.items.len())),
        Some(Err(ListingError::Items(max)))
    );
    assert!(
        growth < MAX_GROWTH_MIB,
        "decoding {jobs} jobs raised the peak by {growth:.1} MiB"
    );

    // The controls: the same bodies decoded as sent take tens of MiB, so the measure sees
    // what an unbounded decode takes.
    let (control, as_sent) = peak_growth_mib(|| serde_json::from_slice::<PageAsSent>(body.as_bytes()));
    assert_eq!(as_sent.map(|p| p.jobs.len() as u64).ok(), Some(jobs));
    eprintln!("the page decoded as sent: peak +{control:.1} MiB");
    assert!(
        control > MIN_CONTROL_MIB,
        "the control took only {control:.1} MiB"
    );
    drop(body);
    let (body, _) = job_of_empty_labels();
    let (control, as_sent) = peak_growth_mib(|| serde_json::from_slice::<JobAsSent>(body.as_bytes()));
    assert!(as_sent.is_ok());
    eprintln!("the job decoded as sent: peak +{control:.1} MiB");
    assert!(
        control > MIN_CONTROL_MIB,
        "the control took only {control:.1} MiB"
    );
}
