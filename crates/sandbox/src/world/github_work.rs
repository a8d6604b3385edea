//! How the world's simulated GitHub runners work their job: by default for the world's work
//! time, and for the next few runner pods otherwise when a demo or a test asks (a runner kept
//! busy until its node goes, one whose job fails by itself).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use forgerunner_testkit::github::{Emulator, GithubRunner, RunnerOptions, parse_jit_config};
use forgerunner_testkit::sim::{ContainerBehaviour, PodInfo};

/// Env var holding a runner's JIT config.
const JIT_CONFIG_ENV: &str = "ACTIONS_RUNNER_INPUT_JITCONFIG";
/// How long a runner kept busy works: far past any test or demo.
const UNTIL_KILLED: Duration = Duration::from_secs(24 * 3600);
/// How often a runner that will fail looks whether it has its job yet.
const CLAIM_POLL: Duration = Duration::from_millis(50);
/// Exit code of a runner whose job failed by itself.
pub const EXIT_FAILED: i32 = 1;

/// How one runner pod plays its job, other than the default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GithubJobPlay {
    /// Works on its job until its pod goes (a node loss, a deletion).
    UntilKilled,
    /// Takes its job; the job fails and the runner container exits [`EXIT_FAILED`], with no
    /// disruption: the failure is the runner's own.
    FailsByItself,
}

/// The behaviour of the GitHub runner image: the world's runner, or the play asked for next.
pub struct GithubWork {
    emu: Arc<Emulator>,
    default: Arc<GithubRunner>,
    long: Arc<GithubRunner>,
    next: Mutex<VecDeque<GithubJobPlay>>,
}

impl GithubWork {
    /// Plays `default` unless told otherwise through [`GithubWork::play_next`].
    pub fn new(emu: Arc<Emulator>, default: Arc<GithubRunner>) -> GithubWork {
        let long = GithubRunner::new(
            emu.clone(),
            RunnerOptions {
                work_time: UNTIL_KILLED,
                ..RunnerOptions::default()
            },
        );
        GithubWork {
            emu,
            default,
            long: Arc::new(long),
            next: Mutex::new(VecDeque::new()),
        }
    }

    /// The next runner pod to start plays `play`; later calls queue behind it.
    pub fn play_next(&self, play: GithubJobPlay) {
        self.next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push_back(play);
    }

    fn take_next(&self) -> Option<GithubJobPlay> {
        self.next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front()
    }

    /// Whether runner `name` has a job at the emulator.
    fn has_job(&self, name: &str) -> bool {
        self.emu
            .state()
            .runners
            .iter()
            .any(|r| r.name == name && r.job.is_some())
    }

    /// Lets the runner take its job, then stops it (the runner reports the job failed) and
    /// exits [`EXIT_FAILED`].
    async fn fail_after_claim(&self, pod: PodInfo) -> i32 {
        let Some(name) = pod
            .env
            .get(JIT_CONFIG_ENV)
            .and_then(|b| parse_jit_config(b))
            .map(|j| j.runner_name)
        else {
            return self.long.run(pod).await;
        };
        let outer = pod.cancel.clone();
        let stop = outer.child_token();
        let inner = PodInfo {
            cancel: stop.clone(),
            ..pod
        };
        let run = self.long.run(inner);
        let mut run = std::pin::pin!(run);
        loop {
            tokio::select! {
                code = &mut run => return code,
                () = tokio::time::sleep(CLAIM_POLL) => {
                    if self.has_job(&name) {
                        stop.cancel();
                        run.await;
                        return EXIT_FAILED;
                    }
                }
            }
        }
    }
}

#[async_trait]
impl ContainerBehaviour for GithubWork {
    async fn run(&self, pod: PodInfo) -> i32 {
        if pod.init {
            return self.default.run(pod).await;
        }
        match self.take_next() {
            None => self.default.run(pod).await,
            Some(GithubJobPlay::UntilKilled) => self.long.run(pod).await,
            Some(GithubJobPlay::FailsByItself) => self.fail_after_claim(pod).await,
        }
    }
}
