//! Per-stage job latency from what each pass observes. Pure: the pass hands in the waiting jobs,
//! the runners and the clock, and gets back the durations to record.
//!
//! Each runner stage is recorded once per runner, queued → seen once per job, and seen → runner
//! once per runner Job created for a waiting job: the tracker remembers, per group and for the
//! life of the process, the step each runner was last seen at and the jobs it has seen, and only
//! a step change it saw counts. After a restart (or a new leadership term) the first pass only
//! takes note of where things are, so nothing is counted twice across processes. Both maps hold
//! only what the current pass still shows, so they stay as small as the group.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::forge::{ForgeRunnerState, WaitingJob};
use crate::metrics::Stage;
use crate::plan::{ObservedRunner, RunnerPhase};

/// Where a runner is on its way, ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RunnerStep {
    /// Job created, pod not running yet.
    Pending,
    /// Pod running, no job yet.
    Running,
    /// Working on a job.
    Busy,
    /// Finished (job done, pod exited or being removed).
    Done,
}

/// The step of a runner in one observation.
pub fn runner_step(r: &ObservedRunner) -> RunnerStep {
    let ended = matches!(
        r.phase,
        RunnerPhase::Succeeded | RunnerPhase::Failed | RunnerPhase::Terminating
    );
    if ended || r.forge_state == ForgeRunnerState::Finished {
        RunnerStep::Done
    } else if r.forge_state == ForgeRunnerState::Busy || r.ever_busy {
        RunnerStep::Busy
    } else if r.phase == RunnerPhase::Running {
        RunnerStep::Running
    } else {
        RunnerStep::Pending
    }
}

/// Whether a finished runner ran a job (an idle runner removed or timed out did not).
fn ran_a_job(r: &ObservedRunner) -> bool {
    r.ever_busy || r.forge_state == ForgeRunnerState::Finished || r.phase == RunnerPhase::Succeeded
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Track {
    step: RunnerStep,
    /// When the step began; unknown for what the first pass found mid-way.
    since: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    at: Timestamp,
    /// The forge's queue time, never after `at`.
    queued_at: Option<Timestamp>,
    /// A runner was created for it (or it was already waiting when this process started).
    served: bool,
}

/// What one pass adds to the metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StageSamples {
    /// Stage durations in seconds.
    pub stages: Vec<(Stage, f64)>,
    /// Queued (or first seen) → runner Job created, in seconds.
    pub queue_to_runner: Vec<f64>,
    /// Runners whose job started, one per job.
    pub started: Vec<String>,
    /// Runners whose job completed, one per job.
    pub completed: Vec<String>,
}

/// Per-group memory of what was already counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageTracker {
    primed: bool,
    runners: BTreeMap<String, Track>,
    jobs: BTreeMap<String, Seen>,
}

/// Oldest first: first seen, then the forge's queue time (known before unknown), then the id
/// (numbers in numeric order), which is the order forges hand jobs to runners.
fn age_order((a_id, a): (&str, &Seen), (b_id, b): (&str, &Seen)) -> std::cmp::Ordering {
    fn key<'a>(id: &'a str, s: &Seen) -> (Timestamp, bool, Option<Timestamp>, usize, &'a str) {
        (s.at, s.queued_at.is_none(), s.queued_at, id.len(), id)
    }
    key(a_id, a).cmp(&key(b_id, b))
}

/// The forge's queue time of a job first seen at `seen`, never after it. A job is seen after it
/// was queued, so a later queue time is the forge's clock ahead of ours (or read after this
/// pass read its clock): taken as is, queue → runner would come out shorter than seen → runner.
/// Clamped, the stages add up: queue → runner = queue → seen + seen → runner. A time the forge
/// gives in whole seconds is kept as given, the start of its second: Gitea cuts its times down
/// (`time.Now().Unix()`), so that start is never after the job was queued, where the end of
/// the second would be for nearly every job, and queue → seen overstates by under a second.
fn no_later_than_seen(queued: Timestamp, seen: Timestamp) -> Timestamp {
    queued.min(seen)
}

fn secs(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

impl StageTracker {
    /// Takes in one pass: the jobs the forge shows waiting, the runners, how many runner Jobs the
    /// pass created, and each runner's Job creation time.
    pub fn pass(
        &mut self,
        waiting: &[WaitingJob],
        runners: &[ObservedRunner],
        created: usize,
        job_created_at: impl Fn(&str) -> Option<Timestamp>,
        now: Timestamp,
    ) -> StageSamples {
        let mut out = StageSamples::default();
        // At a process's first pass, runners not busy yet may already cover waiting jobs.
        let covering = runners
            .iter()
            .filter(|r| runner_step(r) < RunnerStep::Busy)
            .count();
        self.jobs(waiting, covering, now, &mut out);
        self.created(created, now, &mut out);
        self.runners(runners, job_created_at, now, &mut out);
        self.primed = true;
        out
    }

    fn jobs(&mut self, waiting: &[WaitingJob], covering: usize, now: Timestamp, out: &mut StageSamples) {
        let mut left_unserved = 0;
        self.jobs.retain(|id, s| {
            let shown = waiting.iter().any(|w| &w.id == id);
            left_unserved += usize::from(!shown && !s.served);
            shown
        });
        // Each job matched with a runner and still waiting has that runner waiting too. When
        // fewer runners wait than such jobs while jobs left unmatched, a runner made for one of
        // them took another job: that job waits for a runner again, so its runner counts.
        // (A job cancelled, or taken by another group's or a warm runner, leaves the matched
        // jobs' runners waiting, and hands nothing back.)
        let matched = self.jobs.values().filter(|s| s.served).count();
        self.hand_back(left_unserved.min(matched.saturating_sub(covering)));
        let mut covered = 0;
        for w in waiting {
            if self.jobs.contains_key(&w.id) {
                continue;
            }
            let queued_at = w.queued_at.map(|q| no_later_than_seen(q, now));
            if self.primed
                && let Some(q) = queued_at
            {
                out.stages.push((Stage::QueuedToSeen, secs(q, now)));
            }
            // A job already waiting at the first pass is not measured from the queue (a
            // predecessor may have seen it), but one no runner covers still gets its runner.
            let served = !self.primed && covered < covering;
            covered += usize::from(served);
            self.jobs.insert(
                w.id.clone(),
                Seen {
                    at: now,
                    queued_at: if self.primed { queued_at } else { None },
                    served,
                },
            );
        }
    }

    /// Marks the `n` newest served jobs as waiting for a runner again.
    fn hand_back(&mut self, n: usize) {
        let mut served: Vec<(&String, &mut Seen)> = self.jobs.iter_mut().filter(|(_, s)| s.served).collect();
        served.sort_by(|a, b| age_order((b.0, &*b.1), (a.0, &*a.1)));
        for (_, s) in served.into_iter().take(n) {
            s.served = false;
        }
    }

    /// Matches `n` new runner Jobs with the oldest waiting jobs not yet served.
    fn created(&mut self, n: usize, now: Timestamp, out: &mut StageSamples) {
        let mut open: Vec<(&String, &mut Seen)> = self.jobs.iter_mut().filter(|(_, s)| !s.served).collect();
        open.sort_by(|a, b| age_order((a.0, &*a.1), (b.0, &*b.1)));
        for (_, s) in open.into_iter().take(n) {
            s.served = true;
            out.stages.push((Stage::SeenToRunner, secs(s.at, now)));
            out.queue_to_runner.push(secs(s.queued_at.unwrap_or(s.at), now));
        }
    }

    fn runners(
        &mut self,
        runners: &[ObservedRunner],
        job_created_at: impl Fn(&str) -> Option<Timestamp>,
        now: Timestamp,
        out: &mut StageSamples,
    ) {
        self.runners
            .retain(|name, _| runners.iter().any(|r| &r.name == name));
        for r in runners {
            let step = runner_step(r);
            let prev = match self.runners.get(&r.name) {
                Some(t) => t.clone(),
                // A runner new to a primed tracker was pending when its Job was created.
                None if self.primed => Track {
                    step: RunnerStep::Pending,
                    since: Some(job_created_at(&r.name).unwrap_or(now)),
                },
                // First pass of this process: only take note.
                None => {
                    self.runners.insert(r.name.clone(), Track { step, since: None });
                    continue;
                }
            };
            if step <= prev.step {
                self.runners.entry(r.name.clone()).or_insert(prev);
                continue;
            }
            transition(&r.name, &prev, step, ran_a_job(r), now, out);
            self.runners.insert(
                r.name.clone(),
                Track {
                    step,
                    since: Some(now),
                },
            );
        }
    }
}

/// What a step change from `prev` to `step` at `now` records. A stage whose both ends were
/// seen gets a duration; a skipped step (the runner went through it between two passes) only
/// counts the job.
fn transition(
    runner: &str,
    prev: &Track,
    step: RunnerStep,
    ran_a_job: bool,
    now: Timestamp,
    out: &mut StageSamples,
) {
    let stage = match (prev.step, step) {
        (RunnerStep::Pending, RunnerStep::Running) => Some(Stage::RunnerToPodRunning),
        (RunnerStep::Running, RunnerStep::Busy) => Some(Stage::PodRunningToJobStarted),
        (RunnerStep::Busy, RunnerStep::Done) => Some(Stage::JobExecution),
        // The forge saw the job start before the Job's status showed the pod ready (it lags the
        // pod): the pod ran by then, and took its job as it started.
        (RunnerStep::Pending, RunnerStep::Busy) => Some(Stage::RunnerToPodRunning),
        _ => None,
    };
    if let (Some(stage), Some(since)) = (stage, prev.since) {
        out.stages.push((stage, secs(since, now)));
        if (prev.step, step) == (RunnerStep::Pending, RunnerStep::Busy) {
            out.stages.push((Stage::PodRunningToJobStarted, 0.0));
        }
    }
    let job_now = step == RunnerStep::Busy || (step == RunnerStep::Done && ran_a_job);
    if prev.step < RunnerStep::Busy && job_now {
        out.started.push(runner.to_owned());
    }
    if step == RunnerStep::Done && (prev.step == RunnerStep::Busy || ran_a_job) {
        out.completed.push(runner.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid timestamp")
    }

    fn runner(name: &str, phase: RunnerPhase, forge_state: ForgeRunnerState) -> ObservedRunner {
        ObservedRunner {
            name: name.into(),
            phase,
            forge_state,
            age_seconds: 0,
            running_seconds: 0,
            ever_busy: false,
            stuck: None,
            outdated: false,
        }
    }

    fn waiting(id: &str, queued: Option<i64>) -> WaitingJob {
        WaitingJob {
            id: id.into(),
            queued_at: queued.map(ts),
            labels: Vec::new(),
            binding: None,
        }
    }

    fn created_at_100(_: &str) -> Option<Timestamp> {
        Some(ts(100))
    }

    fn stages(s: &StageSamples) -> Vec<(Stage, u64)> {
        s.stages.iter().map(|(st, v)| (*st, v.round() as u64)).collect()
    }

    #[test]
    fn a_job_through_every_stage_is_recorded_once() {
        use ForgeRunnerState::{Busy, Finished, Idle, Unknown};
        let mut t = StageTracker::default();
        // First pass: nothing waiting yet.
        assert_eq!(
            t.pass(&[], &[], 0, created_at_100, ts(90)),
            StageSamples::default()
        );
        // A job queued at 80 is seen at 95, its runner is created at 100.
        let q = [waiting("7", Some(80))];
        let s = t.pass(&q, &[], 0, created_at_100, ts(95));
        assert_eq!(stages(&s), [(Stage::QueuedToSeen, 15)]);
        let s = t.pass(&q, &[], 1, created_at_100, ts(100));
        assert_eq!(stages(&s), [(Stage::SeenToRunner, 5)]);
        assert_eq!(s.queue_to_runner, [20.0]);
        // Later passes show the same job waiting: nothing more.
        let pending = [runner("r", RunnerPhase::Pending, Unknown)];
        assert_eq!(stages(&t.pass(&q, &pending, 0, created_at_100, ts(101))), []);
        let running = [runner("r", RunnerPhase::Running, Idle)];
        let s = t.pass(&[], &running, 0, created_at_100, ts(110));
        assert_eq!(stages(&s), [(Stage::RunnerToPodRunning, 10)]);
        let busy = [runner("r", RunnerPhase::Running, Busy)];
        let s = t.pass(&[], &busy, 0, created_at_100, ts(113));
        assert_eq!(stages(&s), [(Stage::PodRunningToJobStarted, 3)]);
        assert_eq!((s.started.len(), s.completed.len()), (1, 0));
        assert_eq!(
            t.pass(&[], &busy, 0, created_at_100, ts(120)),
            StageSamples::default()
        );
        let done = [runner("r", RunnerPhase::Running, Finished)];
        let s = t.pass(&[], &done, 0, created_at_100, ts(173));
        assert_eq!(stages(&s), [(Stage::JobExecution, 60)]);
        assert_eq!((s.started.len(), s.completed.len()), (0, 1));
        let gone = [runner("r", RunnerPhase::Succeeded, Unknown)];
        assert_eq!(
            t.pass(&[], &gone, 0, created_at_100, ts(180)),
            StageSamples::default()
        );
        assert_eq!(
            t.pass(&[], &[], 0, created_at_100, ts(181)),
            StageSamples::default()
        );
        assert!(
            t.runners.is_empty() && t.jobs.is_empty(),
            "the maps only hold what is shown"
        );
    }

    #[test]
    fn first_pass_after_restart_counts_nothing() {
        let mut t = StageTracker::default();
        let mid = [
            runner("a", RunnerPhase::Running, ForgeRunnerState::Busy),
            runner("b", RunnerPhase::Running, ForgeRunnerState::Idle),
        ];
        let s = t.pass(&[waiting("1", Some(0))], &mid, 1, created_at_100, ts(200));
        assert_eq!(
            s,
            StageSamples::default(),
            "already waiting and served, or mid-way"
        );
        // `a` finishes and `b` takes a job: both steps began before this process, so only the
        // jobs count, with no durations.
        let later = [
            runner("a", RunnerPhase::Succeeded, ForgeRunnerState::Unknown),
            runner("b", RunnerPhase::Running, ForgeRunnerState::Busy),
        ];
        let s = t.pass(&[waiting("1", Some(0))], &later, 1, created_at_100, ts(230));
        assert_eq!(stages(&s), []);
        assert_eq!((s.started.len(), s.completed.len()), (1, 1));
        // `b`'s job ends: its start was seen, so its execution is measured.
        let end = [runner("b", RunnerPhase::Succeeded, ForgeRunnerState::Unknown)];
        let s = t.pass(&[], &end, 0, created_at_100, ts(290));
        assert_eq!(stages(&s), [(Stage::JobExecution, 60)]);
        assert!(
            s.queue_to_runner.is_empty(),
            "job 1 was waiting before this process"
        );
    }

    #[test]
    fn first_pass_serves_jobs_no_runner_covers() {
        let mut t = StageTracker::default();
        let idle = [runner("a", RunnerPhase::Running, ForgeRunnerState::Idle)];
        let two = [waiting("1", Some(0)), waiting("2", Some(0))];
        // `a` covers one job; the pass creates a runner for the other, timed from first seen.
        let s = t.pass(&two, &idle, 1, created_at_100, ts(200));
        assert_eq!(stages(&s), [(Stage::SeenToRunner, 0)]);
        assert_eq!(
            s.queue_to_runner,
            [0.0],
            "not from the queue time a predecessor saw"
        );
        assert_eq!(
            t.pass(&two, &idle, 1, created_at_100, ts(210)),
            StageSamples::default()
        );
    }

    #[test]
    fn skipped_steps_count_jobs_but_no_durations() {
        let mut t = StageTracker::default();
        t.pass(&[], &[], 0, created_at_100, ts(100));
        // Seen first already finished after a job: started and completed, no durations.
        let done = [runner("a", RunnerPhase::Succeeded, ForgeRunnerState::Unknown)];
        let s = t.pass(&[], &done, 0, created_at_100, ts(150));
        assert_eq!((stages(&s), s.started.len(), s.completed.len()), (vec![], 1, 1));
        // An idle runner removed never ran a job.
        let mut t = StageTracker::default();
        t.pass(&[], &[], 0, created_at_100, ts(100));
        let idle = [runner("b", RunnerPhase::Running, ForgeRunnerState::Idle)];
        let s = t.pass(&[], &idle, 0, created_at_100, ts(120));
        assert_eq!(
            stages(&s),
            [(Stage::RunnerToPodRunning, 20)],
            "from the Job's creation"
        );
        let removed = [runner("b", RunnerPhase::Terminating, ForgeRunnerState::Idle)];
        let s = t.pass(&[], &removed, 0, created_at_100, ts(130));
        assert_eq!((stages(&s), s.started.len(), s.completed.len()), (vec![], 0, 0));
        // Busy before the Job's status showed the pod ready: running when the job started.
        let mut t = StageTracker::default();
        t.pass(&[], &[], 0, created_at_100, ts(100));
        let busy = [runner("c", RunnerPhase::Pending, ForgeRunnerState::Busy)];
        let s = t.pass(&[], &busy, 0, created_at_100, ts(104));
        assert_eq!(
            stages(&s),
            [(Stage::RunnerToPodRunning, 4), (Stage::PodRunningToJobStarted, 0)]
        );
        assert_eq!(s.started.len(), 1);
    }

    #[test]
    fn jobs_seen_together_are_served_in_queue_order() {
        let served = |t: &StageTracker| -> Vec<String> {
            t.jobs
                .iter()
                .filter(|(_, s)| s.served)
                .map(|(id, _)| id.clone())
                .collect()
        };
        let mut t = StageTracker::default();
        t.pass(&[], &[], 0, created_at_100, ts(0));
        // Ids compare as numbers: "2" is older than "10", as the forge hands them out.
        let both = [waiting("10", None), waiting("2", None)];
        t.pass(&both, &[], 1, created_at_100, ts(5));
        assert_eq!(served(&t), ["2"]);
        // The forge's queue time comes before the id, and a known one before none.
        let mut t = StageTracker::default();
        t.pass(&[], &[], 0, created_at_100, ts(0));
        let three = [waiting("1", None), waiting("5", Some(3)), waiting("6", Some(2))];
        t.pass(&three, &[], 2, created_at_100, ts(5));
        assert_eq!(served(&t), ["5", "6"]);
    }

    #[test]
    fn a_job_taken_by_another_jobs_runner_hands_that_runner_back() {
        use ForgeRunnerState::{Busy, Unknown};
        let mut t = StageTracker::default();
        t.pass(&[], &[], 0, created_at_100, ts(0));
        let both = [waiting("1", Some(0)), waiting("2", Some(1))];
        assert_eq!(
            t.pass(&both, &[], 1, created_at_100, ts(5)).queue_to_runner.len(),
            1
        );
        // The runner made for "1" took "2": "1" waits for a runner again.
        let working = [runner("r1", RunnerPhase::Running, Busy)];
        let s = t.pass(&[waiting("1", Some(0))], &working, 1, created_at_100, ts(9));
        assert_eq!(s.queue_to_runner, [9.0]);
        assert!(s.stages.contains(&(Stage::SeenToRunner, 4.0)), "{s:?}");
        // Every creation counted, never more than one per creation.
        let pending = [runner("r2", RunnerPhase::Pending, Unknown)];
        let s = t.pass(&[waiting("1", Some(0))], &pending, 1, created_at_100, ts(12));
        assert!(s.queue_to_runner.is_empty());
    }

    #[test]
    fn a_cancelled_job_hands_nothing_back() {
        use ForgeRunnerState::Unknown;
        let mut t = StageTracker::default();
        t.pass(&[], &[], 0, created_at_100, ts(0));
        let both = [waiting("1", Some(0)), waiting("2", Some(1))];
        t.pass(&both, &[], 1, created_at_100, ts(5));
        // "2" is cancelled; the runner made for "1" is still pending, so "1" keeps it.
        let pending = [runner("r1", RunnerPhase::Pending, Unknown)];
        let one = [waiting("1", Some(0)), waiting("3", Some(6))];
        let s = t.pass(&one, &pending, 1, created_at_100, ts(9));
        assert_eq!(
            s.queue_to_runner,
            [3.0],
            "the new runner is for \"3\", queued at 6"
        );
    }

    /// One job through a primed tracker, each time in milliseconds: the forge's queue time,
    /// first seen, runner Job created. Returns queued → seen, seen → runner and queue → runner.
    fn one_job(queued_ms: i64, seen_ms: i64, runner_ms: i64) -> (f64, f64, f64) {
        let ms = |m| Timestamp::from_millisecond(m).expect("valid timestamp");
        let mut t = StageTracker::default();
        t.pass(&[], &[], 0, created_at_100, ms(0));
        let q = [WaitingJob {
            id: "1".into(),
            queued_at: Some(ms(queued_ms)),
            labels: Vec::new(),
            binding: None,
        }];
        let seen = t.pass(&q, &[], 0, created_at_100, ms(seen_ms));
        let made = t.pass(&q, &[], 1, created_at_100, ms(runner_ms));
        match (&seen.stages[..], &made.stages[..], &made.queue_to_runner[..]) {
            ([(Stage::QueuedToSeen, a)], [(Stage::SeenToRunner, b)], [c]) => (*a, *b, *c),
            other => panic!("one sample per stage: {other:?}"),
        }
    }

    #[test]
    fn per_job_queued_before_seen_before_runner() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // (queue time as the forge gives it, first seen, runner created), in ms, and what
        // queued → seen must be.
        let cases = [
            // Queued at 10.9 s: Gitea cuts its time to the second (10 s), seen 50 ms later.
            (10_000, 10_950, 11_500, 0.95),
            // The same time rounded up to 11 s, as the Gitea fake used to: after first seen.
            (11_000, 10_950, 11_500, 0.0),
            // The forge's clock 30 s ahead of ours: queued "in the future".
            (40_950, 10_950, 11_500, 0.0),
            // Seen in the pass whose clock was read just before the listing showed the job.
            (10_960, 10_950, 11_500, 0.0),
        ];
        for (queued, seen, runner, want) in cases {
            let (q_s, s_r, q_r) = one_job(queued, seen, runner);
            let case = format!("queued {queued} seen {seen} runner {runner}: {q_s} {s_r} {q_r}");
            assert!(q_s >= 0.0 && s_r >= 0.0, "{case}");
            assert!(close(q_s, want), "{case}");
            assert!(close(s_r, 0.55), "{case}");
            // The stages add up: queue → runner is queue → seen and seen → runner.
            assert!(close(q_r, q_s + s_r), "{case}");
        }
    }

    #[test]
    fn creations_serve_the_oldest_jobs_and_no_more() {
        let mut t = StageTracker::default();
        t.pass(&[], &[], 0, created_at_100, ts(0));
        t.pass(&[waiting("b", None)], &[], 0, created_at_100, ts(10));
        let both = [waiting("a", Some(1)), waiting("b", None)];
        t.pass(&both, &[], 0, created_at_100, ts(12));
        let s = t.pass(&both, &[], 1, created_at_100, ts(20));
        assert_eq!(stages(&s), [(Stage::SeenToRunner, 10)], "b was seen first");
        assert_eq!(s.queue_to_runner, [10.0], "without a queue time, from first seen");
        let s = t.pass(&both, &[], 5, created_at_100, ts(30));
        assert_eq!(stages(&s), [(Stage::SeenToRunner, 18)]);
        assert_eq!(s.queue_to_runner, [29.0]);
        assert_eq!(
            t.pass(&both, &[], 3, created_at_100, ts(40)),
            StageSamples::default()
        );
    }
}
