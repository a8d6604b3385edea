//! What the message stream says about our runners: which are working on a job and which the
//! service has seen finish. The reconciler reads it instead of asking the service per runner.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use forgerunner_core::forge::ForgeRunnerState;
use forgerunner_core::job_identity::JobIdentity;

use super::message::{JobKey, JobMessage};

/// Most job requests remembered as waiting: far above any scale set's assigned jobs, a bound in
/// case the service never reports some of them started or completed.
const MAX_WAITING: usize = 10_000;

/// Most runners remembered as busy, and as finished: far above any scale set's runners, a bound
/// against a service that reports runners by the thousand (a hostile `configUrl` answers each
/// long poll at once with 4 MiB of `JobStarted` messages naming runners that do not exist).
const MAX_TRACKED_RUNNERS: usize = 10_000;

/// Longest runner name kept. Ours are named after their Job, a DNS label of at most 63
/// characters; a longer name is no runner of ours.
const MAX_RUNNER_NAME: usize = 63;

/// How long a finished runner's name is kept: far longer than a pod takes to exit and the
/// reconciler takes to notice, short enough that a long-lived listener stays small.
pub const FINISHED_MEMORY: Duration = Duration::from_secs(600);

/// Runner activity from `JobStarted` / `JobCompleted` messages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerActivity {
    /// Busy runners and the job each runs (as far as `JobStarted` told). A hash map: a B-tree
    /// node holds eleven entries of this size (about 2 KiB) even for the one or two runners of a
    /// small group, and every group of the operator keeps one.
    busy: HashMap<String, JobIdentity>,
    finished: BTreeSet<String>,
    /// `finished` in completion order, for pruning.
    finished_order: VecDeque<(Instant, String)>,
    /// Jobs assigned to the scale set and not started or completed yet, with their queue time
    /// where the message gave it.
    waiting: BTreeMap<JobKey, Option<jiff::Timestamp>>,
}

impl RunnerActivity {
    /// A runner started the job `identity` names.
    pub fn started(&mut self, runner: &str, identity: JobIdentity) {
        let room = self.busy.len() < MAX_TRACKED_RUNNERS || self.busy.contains_key(runner);
        if runner.len() <= MAX_RUNNER_NAME && room && !self.finished.contains(runner) {
            self.busy.insert(runner.to_owned(), identity);
        }
    }

    /// The job a busy runner runs, when the message named it.
    pub fn identity_of(&self, runner: &str) -> Option<&JobIdentity> {
        self.busy.get(runner).filter(|id| !id.is_empty())
    }

    /// A runner completed its job; ephemeral runners take no other.
    pub fn completed(&mut self, runner: &str, now: Instant) {
        if self.busy.remove(runner).is_some() && self.busy.is_empty() {
            // Its table is sized for the most runners ever busy at once: let it go.
            self.busy = HashMap::new();
        }
        if runner.len() <= MAX_RUNNER_NAME && self.finished.insert(runner.to_owned()) {
            self.finished_order.push_back((now, runner.to_owned()));
        }
        while let Some((at, name)) = self.finished_order.front() {
            let full = self.finished_order.len() > MAX_TRACKED_RUNNERS;
            if !full && now.saturating_duration_since(*at) < FINISHED_MEMORY {
                break;
            }
            self.finished.remove(name);
            self.finished_order.pop_front();
        }
        if self.finished_order.is_empty() {
            self.finished_order = VecDeque::new();
        }
    }

    /// Forgets which requests wait: after a lost session their `JobStarted`/`JobCompleted` may
    /// never arrive, and the next session's messages say again what is assigned.
    pub fn forget_waiting(&mut self) {
        self.waiting.clear();
    }

    /// Follows which job requests wait for a runner: assigned until started or completed.
    pub fn track_request(&mut self, job: &JobMessage) {
        match job {
            JobMessage::Assigned { key, queued_at, .. } if self.waiting.len() < MAX_WAITING => {
                self.waiting.insert(key.clone(), *queued_at);
            }
            JobMessage::Started { key, .. } | JobMessage::Completed { key, .. } => {
                self.waiting.remove(key);
                if self.waiting.is_empty() {
                    // An empty B-tree keeps its node; every group has this map.
                    self.waiting = BTreeMap::new();
                }
            }
            _ => {}
        }
    }

    /// The jobs waiting for a runner and their queue times, for the latency per stage.
    pub fn waiting_requests(&self) -> impl Iterator<Item = (&JobKey, Option<jiff::Timestamp>)> + '_ {
        self.waiting.iter().map(|(key, at)| (key, *at))
    }

    /// What the messages say about one runner, if anything.
    pub fn state_of(&self, runner: &str) -> Option<ForgeRunnerState> {
        if self.finished.contains(runner) {
            Some(ForgeRunnerState::Finished)
        } else if self.busy.contains_key(runner) {
            Some(ForgeRunnerState::Busy)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message stream is whatever the service at `configUrl` sends. The upstream listener
    /// keeps no per-runner state: `actions/scaleset` `listener/listener.go`,
    /// `Listener.handleMessage`, passes each `JobStarted`/`JobCompleted` to its `Scaler` and
    /// keeps nothing. Ours remembers runners, so a service naming runners by the thousand must
    /// not grow it without bound.
    #[test]
    fn runners_a_service_floods_with_are_bounded() {
        let mut a = RunnerActivity::default();
        let now = Instant::now();
        for i in 0..MAX_TRACKED_RUNNERS + 500 {
            a.started(&format!("r-{i}"), JobIdentity::default());
            a.completed(&format!("done-{i}"), now);
        }
        assert_eq!(a.busy.len(), MAX_TRACKED_RUNNERS);
        assert_eq!(a.finished.len(), MAX_TRACKED_RUNNERS);
        assert_eq!(a.finished_order.len(), MAX_TRACKED_RUNNERS);
        assert_eq!(a.state_of("done-0"), None, "the oldest finished name went first");
        assert_eq!(
            a.state_of(&format!("done-{}", MAX_TRACKED_RUNNERS + 499)),
            Some(ForgeRunnerState::Finished)
        );
        // A runner already known still updates when the map is full.
        a.started("r-0", JobIdentity::default());
        assert_eq!(a.state_of("r-0"), Some(ForgeRunnerState::Busy));
        let long = "x".repeat(MAX_RUNNER_NAME + 1);
        let mut b = RunnerActivity::default();
        b.started(&long, JobIdentity::default());
        b.completed(&long, now);
        assert_eq!(b.state_of(&long), None, "no runner of ours has such a name");
    }

    #[test]
    fn requests_wait_from_assigned_to_started_or_completed() {
        let mut a = RunnerActivity::default();
        let queued: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        for id in [1, 2, 3] {
            a.track_request(&JobMessage::Assigned {
                runner_request_id: id,
                key: JobKey::Request(id),
                queued_at: Some(queued),
            });
        }
        a.track_request(&JobMessage::Started {
            runner_request_id: 1,
            key: JobKey::Request(1),
            runner_name: "r".into(),
            identity: Default::default(),
        });
        // Cancelled before it started: completed without a runner.
        a.track_request(&JobMessage::Completed {
            runner_request_id: 3,
            key: JobKey::Request(3),
            runner_name: String::new(),
            result: "canceled".into(),
        });
        assert_eq!(
            a.waiting_requests().collect::<Vec<_>>(),
            [(&JobKey::Request(2), Some(queued))]
        );
        // A lost session: what it showed waiting may start or end unseen.
        a.forget_waiting();
        assert_eq!(a.waiting_requests().count(), 0);
    }

    #[test]
    fn started_then_completed() {
        let mut a = RunnerActivity::default();
        let t = Instant::now();
        assert_eq!(a.state_of("r1"), None);
        let id = JobIdentity {
            run_id: Some("7".into()),
            ..JobIdentity::default()
        };
        a.started("r1", id.clone());
        assert_eq!(a.state_of("r1"), Some(ForgeRunnerState::Busy));
        assert_eq!(a.identity_of("r1"), Some(&id));
        a.completed("r1", t);
        assert_eq!(a.state_of("r1"), Some(ForgeRunnerState::Finished));
        assert_eq!(a.identity_of("r1"), None);
    }

    #[test]
    fn a_late_started_message_does_not_revive_a_finished_runner() {
        let mut a = RunnerActivity::default();
        a.completed("r1", Instant::now());
        a.started("r1", JobIdentity::default());
        assert_eq!(a.state_of("r1"), Some(ForgeRunnerState::Finished));
    }

    #[test]
    fn finished_names_are_forgotten_after_the_memory() {
        let mut a = RunnerActivity::default();
        let t0 = Instant::now();
        a.completed("old", t0);
        a.completed("old", t0 + Duration::from_secs(1));
        a.completed("new", t0 + FINISHED_MEMORY);
        assert_eq!(a.state_of("old"), None, "pruned once the memory has passed");
        assert_eq!(a.state_of("new"), Some(ForgeRunnerState::Finished));
    }
}
