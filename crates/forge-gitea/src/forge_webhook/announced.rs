//! Jobs announced by `workflow_job` deliveries since the cached listing was fetched (pure).
//!
//! This is how a delivery gives a runner at once without a fresh listing, accounted by job id
//! and runner name so that the planner neither creates a duplicate nor holds a job back:
//!
//! - A job announced `queued` after the listing's fetch started, and absent from it, is demand.
//! - A job the listing shows queued but a delivery shows taken (`in_progress`/`completed`) is
//!   not demand any more. States of one attempt only advance, so the most advanced of listing
//!   and deliveries is the truth as far as known, whatever order the deliveries came in.
//! - A job this process asked Gitea to re-run is demand again on its `queued` delivery, although
//!   that delivery repeats the attempt of the `completed` one before it (below).
//! - The runner that took a job, if it is the group's, is reported `Busy` (`in_progress`) or
//!   `Finished` (`completed`): the planner then neither counts it as a runner still waiting for
//!   a job nor as one whose job a stale listing may still count, so job and runner leave the
//!   arithmetic together.
//!
//! Polling stays the source of truth: every entry is forgotten once a listing fetched after
//! its last delivery exists, so a wrong, lost, late or forged delivery shifts demand for at
//! most one poll interval. When a delivery is late or lost the error is on the safe side: a
//! job stays queued (its runner is then counted as waiting, as with a stale listing) or a
//! finished runner is discounted twice until the next listing (a later runner, no duplicate).
//!
//! Re-runs on Gitea 1.26 keep the job's id **and its attempt**: `rerunWorkflowJob`
//! (`services/actions/rerun.go`) puts the same `ActionRunJob` row back to waiting without
//! touching `Attempt`, which only `CreateTaskForRunner` (`models/actions/task.go`) raises when a
//! runner takes the job. So the re-run's `queued` delivery carries the `run_attempt` of the
//! killed task's `completed` one, and by the rule above (the most advanced state of an attempt
//! wins) it would change nothing until the next listing. It cannot be told from a stale `queued`
//! by its content: from 1.27 `queued`, `in_progress` and `completed` of one job all carry the
//! attempt's number (the take no longer raises it), so a late `queued` after `completed` looks
//! the same. What does tell them apart is this process's own request: a `queued` delivery of a
//! job it asked to re-run ([`Announced::rerun_asked`]), received after the request went out,
//! starts the job afresh, once. A re-run asked for by someone else (the web UI) still waits
//! for the next listing. The request is noted before it is sent, as the delivery can arrive
//! before the answer, and forgotten once refused or once a listing fetched after the answer
//! (which shows the job queued again) is accounted.
//!
//! Memory is bounded by bytes: verified bodies of up to 1 MiB come from
//! anyone with a webhook secret, and a listing whose fetch keeps failing is never covered. Each
//! entry keeps only strings a group could use (labels within the schema's bounds, a runner name
//! as long as the operator makes them, the job's identity clipped as it is written), each
//! listing keeps at most [`MAX_ANNOUNCED_BYTES`], and all listings together at most
//! [`MAX_ANNOUNCED_TOTAL_BYTES`], the largest listings giving way first. What is forgotten
//! only waits for the next listing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::time::Instant;

use forgerunner_core::forge::ForgeRunnerState;
use forgerunner_core::job_identity::JobIdentity;
use forgerunner_core::names::{RUNNER_NAME_PREFIX_MAX, RUNNER_NAME_SUFFIX_LEN, is_runner_name_of};

use crate::types::{JobStatus, WorkflowJob};
use crate::webhook::{RunsOn, WorkflowJobEvent};

/// Most bytes remembered per listing: about 3000 typical jobs, at least 40 of the largest the
/// bounds allow. Beyond it the earliest announced are forgotten, which only delays them to the
/// next listing.
pub(crate) const MAX_ANNOUNCED_BYTES: usize = 1 << 20;

/// Most bytes remembered over all listings; see [`trim_total`].
pub(crate) const MAX_ANNOUNCED_TOTAL_BYTES: usize = 8 << 20;

/// Most re-runs remembered per listing while their `queued` delivery is awaited. Re-runs come
/// from runners the cluster killed, a few at a time; past this a re-run waits for the next
/// listing.
pub(crate) const MAX_ASKED_RERUNS: usize = 1024;

/// Longest runner name kept: the longest the operator makes (`names::runner_name`). A longer
/// one is no group's runner, so it is not kept.
const MAX_RUNNER_NAME_LEN: usize = RUNNER_NAME_PREFIX_MAX + 1 + RUNNER_NAME_SUFFIX_LEN;

/// What the deliveries told about one job.
#[derive(Clone, Debug)]
struct Seen {
    /// When the first delivery of this attempt arrived: only a job first announced after a
    /// listing started can be missing from it and still queued.
    first_received: Instant,
    /// When the latest delivery arrived: a listing that started later covers them all.
    last_received: Instant,
    attempt: i64,
    status: JobStatus,
    labels: RunsOn,
    /// Empty when unknown, or when too long to be a name the operator made.
    runner_name: String,
    /// When the forge queued the job, as the first delivery that carried it told.
    queued_at: Option<jiff::Timestamp>,
    /// Repository, run, name and id of the job (the same in every delivery of it), clipped as
    /// annotations are ([`JobIdentity::sanitized`]).
    identity: JobIdentity,
    /// Queued again by a re-run this process asked for: a listing fetched before the re-run
    /// may still show the killed attempt in progress, which does not make it taken.
    rerun: bool,
}

impl Seen {
    /// What the entry holds, its map slot included: the unit of the memory bounds.
    fn bytes(&self) -> usize {
        let id = &self.identity;
        let strings: usize = [&id.repository, &id.workflow, &id.run_id, &id.job_name, &id.job_id]
            .into_iter()
            .map(|v| v.as_ref().map_or(0, String::capacity))
            .sum();
        // The map's slot and control byte, plus the entry itself.
        std::mem::size_of::<(i64, Seen)>()
            + 1
            + self.labels.heap_bytes()
            + self.runner_name.capacity()
            + strings
    }
}

/// `name` if it can be a runner name the operator made, else empty (unknown).
fn kept_runner_name(name: &str) -> String {
    if name.len() <= MAX_RUNNER_NAME_LEN {
        name.to_owned()
    } else {
        String::new()
    }
}

/// Order of a job's states within one attempt; the most advanced known state wins. `None`: a
/// state this version does not know (ignored).
fn rank(s: &JobStatus) -> Option<u8> {
    match s {
        JobStatus::Waiting => Some(0),
        JobStatus::Queued => Some(1),
        JobStatus::InProgress => Some(2),
        JobStatus::Completed => Some(3),
        JobStatus::Other => None,
    }
}

/// Whether a job in state `s` was taken (or finished) in its attempt.
fn taken(s: &JobStatus) -> bool {
    matches!(s, JobStatus::InProgress | JobStatus::Completed)
}

/// One group's view of the announced jobs on top of a listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GroupView {
    /// Queued jobs absent from the listing that the group can serve.
    pub(crate) unlisted_queued: u32,
    /// Their ids, queue times (for the latency per stage) and `runs-on` labels (for the class of
    /// their runner).
    pub(crate) unlisted: Vec<(i64, Option<jiff::Timestamp>, Vec<String>)>,
    /// Ids the listing shows queued that deliveries show taken or finished.
    pub(crate) taken: HashSet<i64>,
    /// The group's runners that deliveries show working (`Busy`) or done (`Finished`).
    pub(crate) runners: BTreeMap<String, ForgeRunnerState>,
    /// The jobs of the group's runners that deliveries show working, by runner.
    pub(crate) identities: BTreeMap<String, JobIdentity>,
}

/// The announced jobs of one listing scope.
#[derive(Debug, Default)]
pub(crate) struct Announced {
    jobs: HashMap<i64, Seen>,
    /// Fetch start of the newest listing accounted: deliveries before it are already in it.
    covered_until: Option<Instant>,
    /// What `jobs` holds ([`Seen::bytes`] summed).
    bytes: usize,
    /// Jobs this process asked Gitea to re-run, each with when Gitea's answer came (`None`
    /// while the request is out), until their `queued` delivery or a later listing.
    asked: HashMap<i64, Option<Instant>>,
}

impl Announced {
    /// Records one verified delivery received at `received`.
    pub(crate) fn record(&mut self, event: &WorkflowJobEvent, received: Instant) {
        let Some(new_rank) = rank(&event.action) else {
            return;
        };
        if self.covered_until.is_some_and(|c| received < c) {
            return;
        }
        // The `queued` delivery of a re-run this process asked for.
        let ours = event.action == JobStatus::Queued && self.asked.contains_key(&event.job_id);
        let fresh = || Seen {
            first_received: received,
            last_received: received,
            attempt: event.run_attempt,
            status: event.action.clone(),
            labels: event.labels.clone(),
            runner_name: kept_runner_name(&event.runner_name),
            queued_at: event.created_at,
            identity: event.identity().sanitized(),
            rerun: ours,
        };
        let (before, after) = match self.jobs.get_mut(&event.job_id) {
            // A re-run keeps the job id: a higher attempt is a new job, and so is our own
            // re-run's `queued` at the attempt of the task it replaces (see the module's doc).
            Some(seen)
                if event.run_attempt > seen.attempt
                    || (ours && event.run_attempt == seen.attempt && taken(&seen.status)) =>
            {
                let before = seen.bytes();
                *seen = fresh();
                (before, seen.bytes())
            }
            Some(seen) if event.run_attempt == seen.attempt => {
                let before = seen.bytes();
                seen.last_received = seen.last_received.max(received);
                if rank(&seen.status).is_none_or(|r| new_rank > r) {
                    seen.status = event.action.clone();
                }
                // The runner's name may come with any later delivery (and vanish once an
                // ephemeral runner is deleted): keep the first one learnt.
                if seen.runner_name.is_empty() {
                    seen.runner_name = kept_runner_name(&event.runner_name);
                }
                if seen.labels.is_empty() {
                    seen.labels = event.labels.clone();
                }
                seen.queued_at = seen.queued_at.or(event.created_at);
                (before, seen.bytes())
            }
            Some(_) => return, // an older attempt's late delivery
            None => {
                let seen = fresh();
                let after = seen.bytes();
                self.jobs.insert(event.job_id, seen);
                (0, after)
            }
        };
        if ours {
            // One re-run, one fresh start: a second `queued` of it changes nothing more.
            self.asked.remove(&event.job_id);
        }
        self.bytes = self.bytes.saturating_sub(before).saturating_add(after);
        while self.bytes > MAX_ANNOUNCED_BYTES {
            if !self.forget_earliest() {
                break;
            }
        }
    }

    /// Notes that this process is about to ask Gitea to re-run job `id`, so that the `queued`
    /// delivery the re-run sends starts it afresh. Nothing is noted past [`MAX_ASKED_RERUNS`].
    pub(crate) fn rerun_asked(&mut self, id: i64) {
        if self.asked.len() < MAX_ASKED_RERUNS || self.asked.contains_key(&id) {
            self.asked.insert(id, None);
        }
    }

    /// Gitea answered the re-run of job `id` at `at`: `queued` when it may have queued the job
    /// again (a refusal queued nothing, so its delivery is not awaited).
    pub(crate) fn rerun_answered(&mut self, id: i64, at: Instant, queued: bool) {
        if !queued {
            self.asked.remove(&id);
        } else if let Some(answered) = self.asked.get_mut(&id) {
            *answered = Some(at);
        }
    }

    /// Forgets the job announced first; `false` when there is none.
    fn forget_earliest(&mut self) -> bool {
        let earliest = self
            .jobs
            .iter()
            .min_by_key(|(_, s)| s.first_received)
            .map(|(id, _)| *id);
        match earliest.and_then(|id| self.jobs.remove(&id)) {
            Some(gone) => {
                self.bytes = self.bytes.saturating_sub(gone.bytes());
                true
            }
            None => false,
        }
    }

    /// Forgets what a listing whose fetch started at `fetched_at` covers.
    pub(crate) fn covered_by(&mut self, fetched_at: Instant) {
        if self.covered_until.is_some_and(|c| c >= fetched_at) {
            return;
        }
        self.covered_until = Some(fetched_at);
        self.jobs.retain(|_, s| s.last_received >= fetched_at);
        // A listing fetched after Gitea answered shows the re-run job queued; one fetched while
        // the request was out may not.
        self.asked
            .retain(|_, answered| answered.is_none_or(|at| at >= fetched_at));
        self.bytes = self.jobs.values().map(Seen::bytes).sum();
    }

    /// Whether nothing is remembered.
    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The view of the group named `group` (whose labels accept a job when `serves` says so)
    /// on `listing`, fetched at `fetched_at`.
    pub(crate) fn view(
        &self,
        group: &str,
        fetched_at: Instant,
        listing: &[WorkflowJob],
        serves: impl Fn(&[String]) -> bool,
    ) -> GroupView {
        let listed: HashMap<i64, &JobStatus> = listing.iter().map(|j| (j.id, &j.status)).collect();
        let mut view = GroupView::default();
        for (id, s) in &self.jobs {
            let in_listing = match listed.get(id) {
                Some(JobStatus::Queued) => {
                    if taken(&s.status) {
                        view.taken.insert(*id);
                    }
                    true
                }
                // A listing older than our re-run shows the killed attempt, not this one.
                Some(_) => !s.rerun,
                None => false,
            };
            let new = s.first_received >= fetched_at;
            if !in_listing && new && s.status == JobStatus::Queued && s.labels.served_by(&serves) {
                view.unlisted_queued = view.unlisted_queued.saturating_add(1);
                let labels = s.labels.names().map(<[String]>::to_vec).unwrap_or_default();
                view.unlisted.push((*id, s.queued_at, labels));
            }
            if is_runner_name_of(group, &s.runner_name) {
                let state = match s.status {
                    JobStatus::InProgress => {
                        view.identities.insert(s.runner_name.clone(), s.identity.clone());
                        ForgeRunnerState::Busy
                    }
                    JobStatus::Completed => ForgeRunnerState::Finished,
                    _ => continue,
                };
                view.runners.insert(s.runner_name.clone(), state);
            }
        }
        view
    }
}

/// Forgets announced jobs until all listings of `state` together hold at most `budget` bytes,
/// each time the earliest job of the listing holding the most.
///
/// Taking from the largest listing first keeps one tenant's flood (many listings, or large
/// ones) from pushing out a small listing's few jobs before its own.
pub(crate) fn trim_total<K: Eq + Hash>(state: &mut HashMap<K, Announced>, budget: usize) {
    let mut total: usize = state.values().map(|a| a.bytes).sum();
    while total > budget {
        let Some(largest) = state.values_mut().max_by_key(|a| a.bytes) else {
            return;
        };
        let before = largest.bytes;
        if !largest.forget_earliest() {
            return;
        }
        total = total.saturating_sub(before.saturating_sub(largest.bytes));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn event(id: i64, action: JobStatus, runner: &str) -> WorkflowJobEvent {
        WorkflowJobEvent {
            action,
            job_id: id,
            run_attempt: 1,
            labels: RunsOn::new(["linux"]),
            runner_name: runner.into(),
            created_at: None,
            run_id: 9,
            job_name: "build".into(),
            owner: "acme".into(),
            repo: "app".into(),
            organization: None,
        }
    }

    fn listed(id: i64, status: JobStatus) -> WorkflowJob {
        serde_json::from_value(serde_json::json!({"id": id, "labels": ["linux"]}))
            .map(|mut j: WorkflowJob| {
                j.status = status;
                j
            })
            .unwrap()
    }

    fn linux(labels: &[String]) -> bool {
        labels.iter().all(|l| l == "linux")
    }

    fn view(a: &Announced, at: Instant, listing: &[WorkflowJob]) -> GroupView {
        a.view("g", at, listing, linux)
    }

    fn runners(pairs: &[(&str, ForgeRunnerState)]) -> BTreeMap<String, ForgeRunnerState> {
        pairs.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    }

    #[test]
    fn queued_counts_until_a_later_listing_covers_it() {
        let t0 = Instant::now();
        let mut a = Announced::default();
        a.record(&event(1, JobStatus::Queued, ""), t0 + Duration::from_millis(10));
        assert_eq!(
            view(&a, t0, &[]).unlisted_queued,
            1,
            "announced after the listing started"
        );
        let with_it = [listed(1, JobStatus::Queued)];
        assert_eq!(
            view(&a, t0, &with_it),
            GroupView::default(),
            "counted by the listing only"
        );
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            view(&a, later, &[]).unlisted_queued,
            0,
            "older than the listing: done since"
        );
        a.covered_by(later);
        assert!(a.is_empty());
        a.record(&event(2, JobStatus::Queued, ""), t0 + Duration::from_millis(500));
        assert!(
            a.is_empty(),
            "a delivery older than an accounted listing is ignored"
        );
    }

    #[test]
    fn taken_jobs_leave_with_their_runner() {
        let t0 = Instant::now();
        let at = t0 + Duration::from_millis(1);
        let mut a = Announced::default();
        for id in 1..=4 {
            a.record(&event(id, JobStatus::Queued, ""), at);
        }
        a.record(&event(1, JobStatus::InProgress, "g-abc12"), at);
        a.record(&event(2, JobStatus::InProgress, "other-abc12"), at);
        a.record(&event(3, JobStatus::Completed, ""), at);
        a.record(&event(4, JobStatus::Waiting, ""), at);
        let v = view(&a, t0, &[]);
        // 1: ours, working; 2: another group's; 3: cancelled while queued; 4: a stale
        // `waiting` does not undo `queued`.
        assert_eq!(v.unlisted_queued, 1);
        assert_eq!(v.runners, runners(&[("g-abc12", ForgeRunnerState::Busy)]));
        let job = &v.identities["g-abc12"];
        assert_eq!(
            (job.repository.as_deref(), job.job_id.as_deref()),
            (Some("acme/app"), Some("1")),
            "the working runner's job"
        );
        assert_eq!(v.identities.len(), 1, "ours only, working only");
        a.record(&event(1, JobStatus::Completed, ""), at);
        let v = view(&a, t0, &[]);
        assert_eq!(
            v.runners,
            runners(&[("g-abc12", ForgeRunnerState::Finished)]),
            "the runner's name is kept once learnt"
        );
    }

    #[test]
    fn deliveries_newer_than_the_listing_update_listed_jobs() {
        let t0 = Instant::now();
        let mut a = Announced::default();
        let before = t0 - Duration::from_millis(5);
        a.record(&event(1, JobStatus::Queued, ""), before);
        a.record(
            &event(1, JobStatus::InProgress, "g-abc12"),
            t0 + Duration::from_millis(5),
        );
        a.record(
            &event(2, JobStatus::Completed, "g-xyz98"),
            t0 + Duration::from_millis(5),
        );
        a.record(&event(3, JobStatus::Queued, ""), t0 + Duration::from_millis(5));
        let listing = [
            listed(1, JobStatus::Queued),
            listed(2, JobStatus::InProgress),
            listed(3, JobStatus::InProgress),
        ];
        a.covered_by(t0);
        let v = view(&a, t0, &listing);
        assert_eq!(v.taken, HashSet::from([1]), "listed queued, then taken");
        assert_eq!(
            v.unlisted_queued, 0,
            "a late `queued` does not undo a listed `in_progress`"
        );
        assert_eq!(
            v.runners,
            runners(&[
                ("g-abc12", ForgeRunnerState::Busy),
                ("g-xyz98", ForgeRunnerState::Finished)
            ])
        );
    }

    #[test]
    fn out_of_order_reruns_labels_and_unknown_states() {
        let t0 = Instant::now();
        let at = t0 + Duration::from_millis(1);
        let mut a = Announced::default();
        a.record(&event(1, JobStatus::InProgress, "other-abc12"), at);
        a.record(&event(1, JobStatus::Queued, ""), at);
        assert_eq!(
            view(&a, t0, &[]).unlisted_queued,
            0,
            "late `queued` after `in_progress`"
        );
        let mut rerun = event(1, JobStatus::Queued, "");
        rerun.run_attempt = 2;
        a.record(&rerun, at);
        assert_eq!(view(&a, t0, &[]).unlisted_queued, 1, "a re-run is a new job");
        a.record(&event(1, JobStatus::Completed, ""), at);
        assert_eq!(
            view(&a, t0, &[]).unlisted_queued,
            1,
            "the old attempt's late delivery"
        );
        let mut gpu = event(5, JobStatus::Queued, "");
        gpu.labels = RunsOn::new(["gpu"]);
        a.record(&gpu, at);
        a.record(&event(6, JobStatus::Other, ""), at);
        a.record(&event(7, JobStatus::Waiting, ""), at);
        assert_eq!(
            view(&a, t0, &[]).unlisted_queued,
            1,
            "labels must match; unknown and blocked jobs are not demand"
        );
    }

    /// The deliveries of one job on Gitea 1.26 up to its re-run: `queued` at attempt 0, taken
    /// and finished at attempt 1 by `g-abc12`, and the re-run's `queued` at attempt 1 again.
    fn killed_then_rerun(id: i64) -> [WorkflowJobEvent; 4] {
        let at = |action, runner, attempt| WorkflowJobEvent {
            run_attempt: attempt,
            ..event(id, action, runner)
        };
        [
            at(JobStatus::Queued, "", 0),
            at(JobStatus::InProgress, "g-abc12", 1),
            at(JobStatus::Completed, "g-abc12", 1),
            at(JobStatus::Queued, "", 1),
        ]
    }

    #[test]
    fn our_reruns_queued_delivery_is_demand_at_once() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let [queued, working, killed, rerun] = killed_then_rerun(1);
        let mut a = Announced::default();
        a.record(&queued, ms(1));
        a.record(&working, ms(2));
        a.record(&killed, ms(3));
        a.rerun_asked(1);
        a.record(&rerun, ms(4));
        let v = view(&a, t0, &[]);
        assert_eq!(v.unlisted_queued, 1, "the re-run job waits again");
        assert_eq!(v.unlisted[0].0, 1);
        assert!(v.runners.is_empty(), "the killed runner is no longer this job's");
        assert!(a.asked.is_empty(), "one re-run, one fresh start");
        // A listing fetched before the re-run shows the killed attempt still running.
        let stale = [listed(1, JobStatus::InProgress)];
        assert_eq!(view(&a, t0, &stale).unlisted_queued, 1);
        // One fetched after it shows the job queued: counted there, not twice.
        assert_eq!(
            view(&a, t0, &[listed(1, JobStatus::Queued)]),
            GroupView::default()
        );
        // The new runner takes it at attempt 2 (1.26 raises the attempt on each take).
        a.record(
            &WorkflowJobEvent {
                run_attempt: 2,
                ..event(1, JobStatus::InProgress, "g-new12")
            },
            ms(5),
        );
        let v = view(&a, t0, &stale);
        assert_eq!(v.unlisted_queued, 0);
        assert_eq!(v.runners, runners(&[("g-new12", ForgeRunnerState::Busy)]));
    }

    /// Without a re-run of ours, a `queued` at the attempt of a finished job is a late delivery
    /// (from 1.27 every delivery of a job carries its attempt's number): no runner for it, and
    /// neither for a replay after our re-run was served, nor for an older attempt's `queued`.
    #[test]
    fn a_stale_queued_after_completed_is_not_demand() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let [queued, working, killed, rerun] = killed_then_rerun(1);
        let mut a = Announced::default();
        a.record(&working, ms(1));
        a.record(&killed, ms(2));
        a.record(&rerun, ms(3));
        assert_eq!(view(&a, t0, &[]).unlisted_queued, 0, "not asked by us");
        a.rerun_asked(1);
        a.record(&queued, ms(4));
        assert_eq!(
            view(&a, t0, &[]).unlisted_queued,
            0,
            "an older attempt's `queued`"
        );
        assert_eq!(a.asked.len(), 1, "still awaited");
        a.record(&rerun, ms(5));
        assert_eq!(view(&a, t0, &[]).unlisted_queued, 1);
        a.record(&killed, ms(6));
        a.record(&rerun, ms(7));
        assert_eq!(
            view(&a, t0, &[]).unlisted_queued,
            0,
            "a `completed` at that attempt (cancelled while queued) ends it; a replayed `queued` does not restart it"
        );
    }

    #[test]
    fn an_asked_rerun_is_awaited_until_refused_or_a_later_listing() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut a = Announced::default();
        a.rerun_asked(1);
        a.rerun_answered(1, ms(1), false);
        a.rerun_asked(2);
        a.rerun_answered(2, ms(10), true);
        a.rerun_asked(3);
        assert_eq!(a.asked.len(), 2, "a refusal queued nothing");
        a.covered_by(ms(5));
        assert_eq!(
            a.asked.len(),
            2,
            "a listing from before the answer may not show the job"
        );
        a.covered_by(ms(11));
        assert_eq!(
            a.asked.keys().collect::<Vec<_>>(),
            [&3],
            "a listing after the answer shows it; one still out stays"
        );
        a.rerun_answered(4, ms(12), true);
        assert!(
            !a.asked.contains_key(&4),
            "an answer to nothing asked notes nothing"
        );
        for id in 0..(MAX_ASKED_RERUNS as i64 + 10) {
            a.rerun_asked(id);
        }
        assert_eq!(a.asked.len(), MAX_ASKED_RERUNS, "bounded");
    }

    #[test]
    fn an_unlisted_job_keeps_the_queue_time_a_delivery_told() {
        let t0 = Instant::now();
        let at = t0 + Duration::from_millis(1);
        let queued: jiff::Timestamp = "2026-11-24T10:00:00Z".parse().unwrap();
        let mut a = Announced::default();
        a.record(&event(1, JobStatus::Queued, ""), at);
        let mut told = event(2, JobStatus::Queued, "");
        told.created_at = Some(queued);
        a.record(&told, at);
        let mut unlisted = view(&a, t0, &[]).unlisted;
        unlisted.sort();
        let linux = vec!["linux".to_owned()];
        assert_eq!(
            unlisted,
            [(1, None, linux.clone()), (2, Some(queued), linux)],
            "with the labels the delivery told"
        );
        // A later delivery of the same attempt fills a time the first one lacked.
        let mut again = event(1, JobStatus::Queued, "");
        again.created_at = Some(queued);
        a.record(&again, at);
        assert!(
            view(&a, t0, &[])
                .unlisted
                .iter()
                .all(|(_, q, _)| *q == Some(queued))
        );
    }

    /// Heap bytes the remembered strings hold: what a delivery's body (up to 1 MiB) could
    /// otherwise make the operator keep.
    fn string_bytes(a: &Announced) -> usize {
        let opt = |v: &Option<String>| v.as_ref().map_or(0, String::capacity);
        a.jobs
            .values()
            .map(|s| {
                let labels = s.labels.heap_bytes();
                let id = &s.identity;
                labels
                    + s.runner_name.capacity()
                    + opt(&id.repository)
                    + opt(&id.workflow)
                    + opt(&id.run_id)
                    + opt(&id.job_name)
                    + opt(&id.job_id)
            })
            .sum()
    }

    /// A delivery whose strings are as large as the CRD lets a group's be: many of them still fit
    /// a fixed number of bytes per listing.
    #[test]
    fn memory_is_bounded_by_bytes() {
        let t0 = Instant::now();
        let mut a = Announced::default();
        for id in 0..5000i64 {
            let mut e = event(id, JobStatus::Queued, "");
            e.labels = RunsOn::new((0..64).map(|n| format!("{n:0>256}")));
            e.job_name = "n".repeat(256);
            a.record(&e, t0 + Duration::from_micros(id as u64));
        }
        let held = string_bytes(&a);
        assert!(
            held <= MAX_ANNOUNCED_BYTES,
            "{held} bytes of strings for one listing"
        );
        assert!(a.bytes <= MAX_ANNOUNCED_BYTES, "{} bytes accounted", a.bytes);
        assert_eq!(a.bytes, a.jobs.values().map(Seen::bytes).sum::<usize>());
        assert!(a.jobs.contains_key(&4999), "the latest is kept");
        assert!(!a.jobs.contains_key(&0), "the earliest is forgotten first");
    }

    /// Strings longer, or labels more, than any group can have are not kept: no group could
    /// serve such a job (a group has at most 64 labels of at most 256 characters) or own such a
    /// runner, and the job's identity is only ever written clipped.
    #[test]
    fn strings_beyond_any_groups_bounds_are_not_kept() {
        let t0 = Instant::now();
        let at = t0 + Duration::from_millis(1);
        let mut a = Announced::default();
        let mut many = event(1, JobStatus::Queued, "");
        many.labels = RunsOn::new((0..65).map(|n| format!("l{n}")));
        a.record(&many, at);
        let mut long = event(2, JobStatus::InProgress, &"r".repeat(10_000));
        long.labels = RunsOn::new(["x".repeat(257)]);
        long.job_name = "n".repeat(100_000);
        long.owner = "o".repeat(10_000);
        a.record(&long, at);
        let held = string_bytes(&a);
        assert!(held <= 4096, "{held} bytes of strings for two jobs");
        let any = |_: &[String]| true;
        assert_eq!(
            a.view("g", t0, &[], any).unlisted_queued,
            0,
            "no group can serve more labels than the CRD allows"
        );
    }

    #[test]
    fn memory_is_bounded() {
        let t0 = Instant::now();
        let mut a = Announced::default();
        let n = 5000i64;
        for id in 0..n {
            a.record(
                &event(id, JobStatus::Queued, ""),
                t0 + Duration::from_micros(id as u64),
            );
        }
        assert!(a.bytes <= MAX_ANNOUNCED_BYTES);
        assert!(a.jobs.len() > 2000, "typical jobs: {} kept", a.jobs.len());
        assert!(!a.jobs.contains_key(&0), "the earliest is forgotten first");
        assert!(a.jobs.contains_key(&(n - 1)));
        a.covered_by(t0 + Duration::from_micros(n as u64 - 10));
        assert_eq!(a.jobs.len(), 10);
        assert_eq!(a.bytes, a.jobs.values().map(Seen::bytes).sum::<usize>());
    }

    /// Over all listings the largest give way first: one tenant's many or large listings do
    /// not push out another listing's few jobs.
    #[test]
    fn the_largest_listings_give_way_first() {
        let t0 = Instant::now();
        let mut state: HashMap<&str, Announced> = HashMap::new();
        let small = state.entry("small").or_default();
        small.record(&event(1, JobStatus::Queued, ""), t0);
        let one = small.bytes;
        for l in ["flood-1", "flood-2", "flood-3"] {
            let a = state.entry(l).or_default();
            for id in 0..100 {
                a.record(
                    &event(id, JobStatus::Queued, ""),
                    t0 + Duration::from_micros(id as u64),
                );
            }
        }
        let budget = 60 * one;
        trim_total(&mut state, budget);
        let total: usize = state.values().map(|a| a.bytes).sum();
        assert!(total <= budget, "{total} > {budget}");
        assert_eq!(state["small"].jobs.len(), 1, "the small listing keeps its job");
        for l in ["flood-1", "flood-2", "flood-3"] {
            assert!(
                (18..=21).contains(&state[l].jobs.len()),
                "{l}: {} jobs",
                state[l].jobs.len()
            );
            assert!(state[l].jobs.contains_key(&99), "{l} keeps its latest");
        }
        trim_total(&mut state, 0);
        assert!(state.values().all(Announced::is_empty), "nothing fits no budget");
    }
}
