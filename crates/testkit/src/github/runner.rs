//! A `ContainerBehaviour` playing an ephemeral GitHub runner against the emulator: it reads its
//! JIT config, takes one job assigned to its scale set, works, completes it and exits 0.

use std::collections::{BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use scaleset::JobRequestId;
use scaleset::testing::{Emulator, JobState};
use serde::Deserialize;
use tokio::time::Instant;

use super::view::{ClaimView, Lookup};
use crate::sim::behaviour::{ContainerBehaviour, PodInfo};

/// Env var holding the runner's JIT config (from the runner Secret).
pub const JIT_CONFIG_ENV: &str = "ACTIONS_RUNNER_INPUT_JITCONFIG";

/// Exit code of a runner started without a usable JIT config (the real runner fails too).
pub const EXIT_BAD_CONFIG: i32 = 2;
/// Exit code when the pod is cancelled mid-job (as if killed by SIGTERM).
pub const EXIT_KILLED: i32 = 143;

/// How simulated runners behave.
#[derive(Clone, Debug)]
pub struct RunnerOptions {
    /// Time a job takes once started.
    pub work_time: Duration,
    /// How often an idle runner looks for an assigned job.
    pub poll_interval: Duration,
    /// Exit 0 after waiting this long without a job; `None` waits until cancelled.
    pub idle_exit_after: Option<Duration>,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            work_time: Duration::from_millis(200),
            poll_interval: Duration::from_millis(50),
            idle_exit_after: None,
        }
    }
}

/// What the emulator's JIT config blob says.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JitInfo {
    /// Runner id at the service.
    pub runner_id: i64,
    /// Runner name.
    pub runner_name: String,
    /// Scale set the runner belongs to.
    pub scale_set_id: i64,
}

/// Decodes an emulator JIT config (base64 JSON); `None` if it is not one.
pub fn parse_jit_config(blob: &str) -> Option<JitInfo> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob.trim())
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The simulated runner; one instance serves every pod of the simulator.
pub struct GithubRunner {
    emu: Arc<Emulator>,
    opts: RunnerOptions,
    /// Serialises "find an unclaimed job, start it" across simulated runners, so two runners
    /// never race for the same job (real GitHub hands each job to one runner); holds the
    /// emulator snapshot they share.
    claim: Mutex<ClaimView>,
    /// Runners that have run their one job.
    finished: Mutex<BTreeSet<String>>,
}

/// The behaviour to register for the runner image: `sim.register_behaviour("ghcr.io/actions/", runner_behaviour(emu, opts))`.
pub fn runner_behaviour(emu: Arc<Emulator>, opts: RunnerOptions) -> Arc<dyn ContainerBehaviour> {
    Arc::new(GithubRunner::new(emu, opts))
}

/// Runs beside the simulated runners as GitHub re-assigns jobs: an assignment no runner of the
/// scale set took within `policy.after` is cancelled and the job queued again
/// ([`GithubRunner::reassign_unclaimed`]). Ends when `stop` is cancelled.
pub fn spawn_reassignment(
    runners: Arc<GithubRunner>,
    policy: ReassignPolicy,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ledger = Reassignments::default();
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(policy.tick) => {}
            }
            let requeue = runners.reassign_unclaimed(&policy, &mut ledger, Instant::now());
            for (scale_set, labels, attempt) in requeue {
                let emu = runners.emu.clone();
                let delay = policy.requeue_delay.saturating_mul(attempt);
                let chains = ledger.pending.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let id = emu.queue_job(scale_set, labels);
                    chains
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((id, attempt));
                });
            }
        }
    })
}

/// How the real service treats an assignment no runner picks up (actions/scaleset README.md,
/// "Job Reassignment": "GitHub cancels the assignment and requeues the job. This can happen up
/// to 3 times with incremental delays").
#[derive(Clone, Copy, Debug)]
pub struct ReassignPolicy {
    /// How long an assigned job may wait for a runner before the assignment is cancelled.
    pub after: Duration,
    /// The delay before the first re-queue; the n-th waits n times this.
    pub requeue_delay: Duration,
    /// Re-queues per job; after the last one the assignment stands until a runner takes it.
    pub attempts: u32,
    /// How often assignments are checked.
    pub tick: Duration,
}

impl ReassignPolicy {
    /// GitHub's three attempts, with `after` and `requeue_delay` scaled to a test.
    pub fn github(after: Duration, requeue_delay: Duration) -> ReassignPolicy {
        ReassignPolicy {
            after,
            requeue_delay,
            attempts: 3,
            tick: Duration::from_millis(50),
        }
    }
}

/// What the re-assignment remembers: when each assignment was first seen, and how many times
/// each job (by its latest request id) was re-queued.
#[derive(Debug, Default)]
pub struct Reassignments {
    assigned_since: HashMap<i64, Instant>,
    attempts: HashMap<i64, u32>,
    /// Jobs queued again (their new id and attempt), not yet taken into `attempts`.
    pending: Arc<Mutex<Vec<(JobRequestId, u32)>>>,
    /// Assignments cancelled so far.
    pub cancelled: u32,
}

impl GithubRunner {
    /// A runner behaviour on `emu`.
    pub fn new(emu: Arc<Emulator>, opts: RunnerOptions) -> GithubRunner {
        GithubRunner {
            emu,
            opts,
            claim: Mutex::new(ClaimView::default()),
            finished: Mutex::default(),
        }
    }

    /// One round of GitHub's re-assignment ([`spawn_reassignment`]): cancels every assignment
    /// older than `policy.after` that no runner took and that has attempts left, and returns the
    /// jobs to queue again (scale set, labels, attempt). Holds the claim lock, so no simulated
    /// runner starts a job while it is being cancelled.
    pub fn reassign_unclaimed(
        &self,
        policy: &ReassignPolicy,
        ledger: &mut Reassignments,
        now: Instant,
    ) -> Vec<(scaleset::ScaleSetId, Vec<String>, u32)> {
        let mut view = self
            .claim
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (id, attempt) in ledger
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            ledger.attempts.insert(id.0, attempt);
        }
        let state = self.emu.state();
        let assigned: Vec<_> = state
            .jobs
            .iter()
            .filter(|j| j.state == JobState::Assigned && j.runner_id.is_none())
            .collect();
        ledger
            .assigned_since
            .retain(|id, _| assigned.iter().any(|j| j.id.0 == *id));
        let mut requeue = Vec::new();
        for job in assigned {
            let since = *ledger.assigned_since.entry(job.id.0).or_insert(now);
            let attempt = ledger.attempts.get(&job.id.0).copied().unwrap_or(0);
            if now.duration_since(since) < policy.after || attempt >= policy.attempts {
                continue;
            }
            self.emu.complete_job(job.id, Some("canceled"));
            ledger.assigned_since.remove(&job.id.0);
            ledger.cancelled += 1;
            requeue.push((job.scale_set_id, job.labels.clone(), attempt + 1));
        }
        if !requeue.is_empty() {
            view.invalidate();
        }
        requeue
    }

    /// Names of runners that completed their job.
    pub fn finished_runners(&self) -> BTreeSet<String> {
        self.finished
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether the runner is registered; then the oldest assigned job of its scale set without
    /// a runner, started on it. `Err(())` when the registration is gone. `started` is when the
    /// runner started: older snapshots may not know it yet.
    fn try_claim(&self, jit: &JitInfo, started: Instant) -> Result<Option<JobRequestId>, ()> {
        let mut view = self
            .claim
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let job = match view.lookup(&self.emu, jit.scale_set_id, jit.runner_id, started) {
            Lookup::Gone => return Err(()),
            Lookup::Unknown | Lookup::Registered(None) => return Ok(None),
            Lookup::Registered(Some(job)) => job,
        };
        // Whatever happens next, this job is no longer free for anyone else.
        view.taken(jit.scale_set_id, job);
        let emu = &self.emu;
        let name = jit.runner_name.as_str();
        let job = JobRequestId(job);
        // The emulator panics on a protocol violation; keep a surprise from killing the pod task.
        match std::panic::catch_unwind(AssertUnwindSafe(|| emu.start_job(job, Some(name)))) {
            Ok(_) => Ok(Some(job)),
            Err(_) => {
                // The snapshot was wrong about this job (someone else moved it): look afresh.
                view.invalidate();
                Ok(None)
            }
        }
    }
}

#[async_trait]
impl ContainerBehaviour for GithubRunner {
    async fn run(&self, pod: PodInfo) -> i32 {
        // Init containers on the runner image (the CA bundle, dind's externals copy) do their
        // file work and exit; only the runner container takes a job.
        if pod.init {
            return 0;
        }
        let Some(jit) = pod.env.get(JIT_CONFIG_ENV).and_then(|b| parse_jit_config(b)) else {
            tracing::warn!(pod = %pod.name, "simulated GitHub runner without a usable JIT config");
            return EXIT_BAD_CONFIG;
        };
        let started = Instant::now();
        loop {
            match self.try_claim(&jit, started) {
                // Deregistered while idle (scale-down): the runner process ends.
                Err(()) => return 0,
                Ok(Some(job)) => {
                    tokio::select! {
                        () = pod.cancel.cancelled() => {
                            let emu = self.emu.clone();
                            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| emu.complete_job(job, Some("failed"))));
                            return EXIT_KILLED;
                        }
                        () = tokio::time::sleep(self.opts.work_time) => {}
                    }
                    let emu = self.emu.clone();
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        emu.complete_job(job, Some("succeeded"))
                    }));
                    self.finished
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(jit.runner_name.clone());
                    return 0;
                }
                Ok(None) => {}
            }
            if self.opts.idle_exit_after.is_some_and(|d| started.elapsed() >= d) {
                return 0;
            }
            tokio::select! {
                () = pod.cancel.cancelled() => return 0,
                () = tokio::time::sleep(self.opts.poll_interval) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use scaleset::{JitRunnerSetting, RunnerScaleSetSpec};
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// The blob the emulator issues, rebuilt from the runner reference (no `secrecy` dependency).
    fn blob(jit: &scaleset::JitRunnerConfig) -> String {
        let r = jit.runner.as_ref().unwrap();
        let json =
            serde_json::json!({"runnerId": r.id, "runnerName": r.name, "scaleSetId": r.runner_scale_set_id});
        base64::engine::general_purpose::STANDARD.encode(json.to_string())
    }

    fn pod(env: BTreeMap<String, String>, cancel: CancellationToken) -> PodInfo {
        PodInfo {
            namespace: "ns".into(),
            name: "r1".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            image: "ghcr.io/actions/actions-runner:latest".into(),
            command: Vec::new(),
            args: Vec::new(),
            env,
            files: BTreeMap::new(),
            cancel,
            container: "runner".into(),
            init: false,
            scratch: Default::default(),
        }
    }

    #[tokio::test]
    async fn takes_one_assigned_job_completes_it_and_exits_zero() {
        let emu = Arc::new(
            Emulator::builder()
                .long_poll(Duration::from_millis(100))
                .start()
                .await,
        );
        let client = emu.client();
        let set = client
            .create_runner_scale_set(&RunnerScaleSetSpec::new("sim"))
            .await
            .unwrap();
        let jit = client
            .generate_jit_config(set.id, &JitRunnerSetting::new("r1"))
            .await
            .unwrap();
        let blob = blob(&jit);
        assert_eq!(parse_jit_config(&blob).unwrap().runner_name, "r1");

        let session = client.create_message_session(set.id, "t").await.unwrap();
        let job = emu.queue_job(set.id, Vec::<String>::new());
        session.acquire_jobs(&[job]).await.unwrap();

        let behaviour = GithubRunner::new(emu.clone(), RunnerOptions::default());
        let env = BTreeMap::from([(JIT_CONFIG_ENV.to_string(), blob)]);
        let code = tokio::time::timeout(
            Duration::from_secs(10),
            behaviour.run(pod(env, CancellationToken::new())),
        )
        .await
        .unwrap();
        assert_eq!(code, 0);
        let state = emu.state();
        assert_eq!(state.jobs[0].state, JobState::Completed);
        assert_eq!(state.jobs[0].result.as_deref(), Some("succeeded"));
        assert!(state.runners.is_empty(), "ephemeral runner gone");
        assert!(behaviour.finished_runners().contains("r1"));
        session.close().await.unwrap();
    }

    #[tokio::test]
    async fn idle_runner_waits_until_cancelled_and_bad_config_fails() {
        let emu = Arc::new(
            Emulator::builder()
                .long_poll(Duration::from_millis(100))
                .start()
                .await,
        );
        let client = emu.client();
        let set = client
            .create_runner_scale_set(&RunnerScaleSetSpec::new("idle"))
            .await
            .unwrap();
        let jit = client
            .generate_jit_config(set.id, &JitRunnerSetting::new("idle-1"))
            .await
            .unwrap();
        let blob = blob(&jit);
        let behaviour = Arc::new(GithubRunner::new(emu.clone(), RunnerOptions::default()));
        let cancel = CancellationToken::new();
        let env = BTreeMap::from([(JIT_CONFIG_ENV.to_string(), blob)]);
        let task = tokio::spawn({
            let b = behaviour.clone();
            let p = pod(env, cancel.clone());
            async move { b.run(p).await }
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(!task.is_finished(), "an idle runner keeps waiting");
        cancel.cancel();
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .unwrap()
                .unwrap(),
            0
        );

        let code = behaviour
            .run(pod(BTreeMap::new(), CancellationToken::new()))
            .await;
        assert_eq!(code, EXIT_BAD_CONFIG);
        let env = BTreeMap::from([(JIT_CONFIG_ENV.to_string(), "not base64!".to_string())]);
        assert_eq!(
            behaviour.run(pod(env, CancellationToken::new())).await,
            EXIT_BAD_CONFIG
        );
    }
}
