//! One cell of the chaos table: a world with one forge, one RunnerGroup, the operator (one or
//! two replicas) and a watch on runner Jobs; queueing, waiting and reading back.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use super::{ChaosError, ChaosForge, ChaosOptions};
use crate::world::groups::{GroupSize, PoolOptions};
use crate::world::operator::{OperatorCommand, OperatorProcess, OperatorSettings};
use crate::world::watch::JobWatch;
use crate::world::workload::{ForgeTarget, Progress, Queued};
use crate::world::{World, WorldError, WorldOptions, wait_until};

/// Namespace of each cell's group (every cell has its own API server).
pub const NAMESPACE: &str = "chaos";
/// The group's name.
pub const GROUP: &str = "burst";
/// The lease both replicas campaign for (the operator's default name, in `default`).
const LEASE: &str = "forgerunner";
/// Short leases make a takeover quick (3 s is the operator's minimum).
const LEASE_SECONDS: u32 = 3;
/// Surplus runners (a poll racing a runner that is just taking its job, a restart planning on
/// stale statistics) leave after this; short, so the drain does not wait long for them.
const IDLE_TIMEOUT_SECONDS: u32 = 15;
/// Gitea and Forgejo are polled this often.
const POLL_SECONDS: u32 = 1;
/// How long setting up may take (scale set created, group Ready).
const SETUP: Duration = Duration::from_secs(60);

/// One operator process and the name it reports (its User-Agent ends in `(<name>)`).
pub struct Replica {
    /// `POD_NAME` of the process.
    pub name: String,
    /// The process.
    pub process: OperatorProcess,
}

/// A running cell; dropping it stops everything.
pub struct Cell {
    /// The fake world (only this cell's forge is started).
    pub world: World,
    /// The forge.
    pub forge: ChaosForge,
    /// Where the group's jobs are queued and counted.
    pub target: ForgeTarget,
    /// Every runner Job ever created, with its forge binding.
    pub watch: JobWatch,
    /// The operator replicas, `op-a` first.
    pub replicas: Vec<Replica>,
    command: OperatorCommand,
}

impl Cell {
    /// Starts the world, `replicas` operator processes (leader-elected when more than one)
    /// and the group, and waits until the group can take work.
    pub async fn start(forge: ChaosForge, replicas: usize, opts: &ChaosOptions) -> Result<Cell, ChaosError> {
        let world = World::start(WorldOptions {
            work_time: opts.work_time,
            ..WorldOptions::only(forge.kind())
        })
        .await?;
        world.create_namespace(NAMESPACE).await?;
        let watch = JobWatch::start(world.client.clone(), NAMESPACE);
        let mut cell = Cell {
            world,
            forge,
            target: ForgeTarget {
                forge: forge.kind(),
                label: String::new(),
            },
            watch,
            replicas: Vec::new(),
            command: opts.operator.clone(),
        };
        for i in 0..replicas.max(1) {
            let name = replica_name(i);
            let process = cell.spawn(&name, replicas > 1)?;
            cell.replicas.push(Replica { name, process });
        }
        cell.target = cell.add_group(opts).await?;
        Ok(cell)
    }

    fn spawn(&self, name: &str, leader_election: bool) -> Result<OperatorProcess, WorldError> {
        let settings = OperatorSettings {
            forges: vec![self.forge.name().to_owned()],
            pod_name: name.to_owned(),
            leader_election,
            env: if leader_election {
                vec![(
                    "FORGERUNNER_LEADER_ELECTION_LEASE_DURATION_SECONDS".into(),
                    LEASE_SECONDS.to_string(),
                )]
            } else {
                Vec::new()
            },
            ..OperatorSettings::default()
        };
        Ok(OperatorProcess::spawn(
            &self.command,
            self.world.kubeconfig(),
            &settings,
        )?)
    }

    async fn add_group(&self, opts: &ChaosOptions) -> Result<ForgeTarget, ChaosError> {
        let size = GroupSize {
            min: 0,
            max: opts.max_runners,
            idle_timeout_seconds: Some(IDLE_TIMEOUT_SECONDS),
            startup_timeout_seconds: None,
            scale_down_delay_seconds: None,
        };
        let label = format!("chaos-{GROUP}");
        let w = &self.world;
        let pool = PoolOptions {
            label: &label,
            poll_interval_seconds: POLL_SECONDS,
            webhook_secret: None,
        };
        let target = w
            .add_group(self.forge.kind(), NAMESPACE, GROUP, &size, &pool)
            .await?;
        // A GitHub group takes work once the operator has created its scale set.
        if self.forge == ChaosForge::Github && w.github_scale_set(GROUP, SETUP).await.is_err() {
            return Err(self.no_progress("the scale set was never created"));
        }
        let ready = wait_until(SETUP, "the group to be Ready", || async {
            w.group(NAMESPACE, GROUP)
                .await
                .ok()
                .and_then(|g| g.status)
                .is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
        })
        .await;
        if ready.is_err() {
            return Err(self.no_progress("the group never became Ready"));
        }
        Ok(target)
    }

    /// Queues `n` jobs at once.
    pub fn queue_burst(&self, n: usize) -> Result<Vec<Queued>, WorldError> {
        (0..n).map(|_| self.target.queue(&self.world)).collect()
    }

    /// Where the group's jobs stand.
    pub fn progress(&self) -> Progress {
        self.target.progress(&self.world)
    }

    /// Waits up to `timeout` until `check` holds for the group's progress.
    pub async fn wait_progress(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&Progress) -> bool,
    ) -> Result<(), ChaosError> {
        let reached = wait_until(timeout, what, || async { check(&self.progress()) }).await;
        reached.map_err(|_| self.no_progress(&format!("timed out waiting for {what}")))
    }

    /// Waits up to `timeout` until every job has ended and nothing is left (runner Jobs, pods,
    /// registered runners); whether it got there.
    pub async fn wait_drained(&self, timeout: Duration) -> bool {
        wait_until(timeout, "the burst to drain", || async {
            let p = self.progress();
            p.queued == 0 && p.running == 0 && self.leaks().await.total() == 0
        })
        .await
        .is_ok()
    }

    /// Runner pods in the cell's namespace (any phase).
    pub async fn pods(&self) -> Result<Vec<Pod>, WorldError> {
        let api: Api<Pod> = Api::namespaced(self.world.client.clone(), NAMESPACE);
        Ok(api.list(&ListParams::default()).await?.items)
    }

    /// Who holds the operator's lease now, if anyone.
    pub async fn lease_holder(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.world.client.clone(), "default");
        leases
            .get_opt(LEASE)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    }

    /// Kills replica `i` at once (SIGKILL) and starts a new process under the same name, as
    /// the Deployment's pod would be restarted.
    pub fn kill_and_restart(&mut self, i: usize) -> Result<(), WorldError> {
        let leader_election = self.replicas.len() > 1;
        let name = self.replicas[i].name.clone();
        self.replicas[i].process.kill();
        self.replicas[i].process = self.spawn(&name, leader_election)?;
        Ok(())
    }

    /// Starts again every replica whose process has exited (the kubelet restarts a container
    /// that exits); the names of those restarted.
    pub fn restart_exited(&mut self) -> Result<Vec<String>, WorldError> {
        let mut restarted = Vec::new();
        for i in 0..self.replicas.len() {
            if self.replicas[i].process.exit_status().is_some() {
                self.kill_and_restart(i)?;
                restarted.push(self.replicas[i].name.clone());
            }
        }
        Ok(restarted)
    }

    /// The replicas whose process has exited, each with its exit status.
    pub fn exited(&mut self) -> Vec<String> {
        self.replicas
            .iter_mut()
            .filter_map(|r| r.process.exit_status().map(|s| format!("{} ({s})", r.name)))
            .collect()
    }

    /// The operators' last lines of output, each prefixed by its replica's name.
    pub fn log_tail(&self) -> String {
        self.replicas
            .iter()
            .map(|r| format!("--- {} ---\n{}", r.name, r.process.output_tail(40)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// With `CHAOS_DUMP=<dir>`, saves every replica's whole output there as
    /// `<scenario>-<forge>-<replica>.log`, to trace a failed cell.
    pub fn dump_output(&self, scenario: super::Scenario) {
        let Some(dir) = std::env::var_os("CHAOS_DUMP") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        let _ = std::fs::create_dir_all(&dir);
        for r in &self.replicas {
            let file = dir.join(format!(
                "{}-{}-{}.log",
                scenario.name(),
                self.forge.name(),
                r.name
            ));
            let _ = std::fs::write(file, r.process.output().join("\n"));
        }
    }

    /// An error saying `what` did not happen, with the operators' output.
    pub fn no_progress(&self, what: &str) -> ChaosError {
        ChaosError::NoProgress {
            what: format!("{} on {}", what, self.forge.name()),
            log: self.log_tail(),
        }
    }

    /// Stops every replica (SIGTERM, then SIGKILL after a grace period).
    pub fn stop(&mut self) {
        for r in &mut self.replicas {
            r.process.stop(Duration::from_secs(5));
        }
    }
}

/// `op-a`, `op-b`, …: the replicas' pod names.
pub fn replica_name(i: usize) -> String {
    let letter = char::from(b'a' + u8::try_from(i % 26).unwrap_or(0));
    format!("op-{letter}")
}
