//! The chaos table: one burst of jobs per forge through the real operator while something
//! breaks (the operator is killed, the leader is cut off from the API server, the API server or
//! the forge answers errors, a node is lost under busy runners), then a count of what went
//! wrong: jobs lost, jobs run twice, runners or Jobs left behind.
//!
//! [`run_cell`] runs one scenario on one forge; [`run_row`] runs one scenario on every forge at
//! once (each in its own world, so they share nothing but the CPU). The operator's end-to-end
//! suite and the `chaos` command both call them; [`table`] turns repeated runs into the table of
//! `docs/reliability.md`.

pub mod cell;
pub mod count;
pub mod scenarios;
pub mod table;

use std::time::Duration;

use crate::world::WorldError;
use crate::world::operator::OperatorCommand;

pub use cell::Cell;
pub use count::Outcome;

/// What breaks during a burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// The operator is SIGKILLed mid-burst and started again.
    OperatorKill,
    /// Two replicas; every API request of the leader fails until the standby has taken over,
    /// then the partition heals.
    LeaderPartition,
    /// The API server answers 409s, 500s, slowly, and drops watches.
    ApiServerFaults,
    /// The forge answers 401, 429, 5xx, slowly (past the client timeout where it is short
    /// enough to test) and with garbage bodies.
    ForgeFaults,
    /// Runner pods are deleted while their runners work on a job, as when a node is lost.
    NodeLost,
    /// Twenty more groups in the namespace point at a forge that accepts connections and never
    /// answers (a tenant's broken or hostile forge beside the burst).
    SilentNeighbours,
}

impl Scenario {
    /// Every scenario, in table order.
    pub const ALL: [Scenario; 6] = [
        Scenario::OperatorKill,
        Scenario::LeaderPartition,
        Scenario::ApiServerFaults,
        Scenario::ForgeFaults,
        Scenario::NodeLost,
        Scenario::SilentNeighbours,
    ];

    /// The name in the table and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::OperatorKill => "operator-kill",
            Scenario::LeaderPartition => "leader-partition",
            Scenario::ApiServerFaults => "api-server-faults",
            Scenario::ForgeFaults => "forge-faults",
            Scenario::NodeLost => "node-lost",
            Scenario::SilentNeighbours => "silent-neighbours",
        }
    }

    /// The scenario called `name`.
    pub fn from_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Operator replicas the scenario runs (two only where leadership moves).
    pub fn replicas(self) -> usize {
        if self == Scenario::LeaderPartition { 2 } else { 1 }
    }
}

/// The forge a cell drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChaosForge {
    /// GitHub through the scale set emulator.
    Github,
    /// Gitea through the fake, by polling.
    Gitea,
    /// Forgejo 15 through the fake (per-job runners bound by handle).
    Forgejo,
}

impl ChaosForge {
    /// Every forge, in table order.
    pub const ALL: [ChaosForge; 3] = [ChaosForge::Github, ChaosForge::Gitea, ChaosForge::Forgejo];

    /// The `RunnerGroup` forge it is.
    pub fn kind(self) -> forgerunner_core::crd::ForgeKind {
        use forgerunner_core::crd::ForgeKind;
        match self {
            ChaosForge::Github => ForgeKind::Github,
            ChaosForge::Gitea => ForgeKind::Gitea,
            ChaosForge::Forgejo => ForgeKind::Forgejo,
        }
    }

    /// `github`, `gitea` or `forgejo`: the operator's name for it.
    pub fn name(self) -> &'static str {
        match self {
            ChaosForge::Github => "github",
            ChaosForge::Gitea => "gitea",
            ChaosForge::Forgejo => "forgejo",
        }
    }
}

/// How big and how patient each cell is.
#[derive(Clone, Debug)]
pub struct ChaosOptions {
    /// How to start the operator.
    pub operator: OperatorCommand,
    /// Jobs in each burst.
    pub jobs: usize,
    /// `maxRunners` of each group (below `jobs`, so the burst comes in waves and a fault lands
    /// while work is still queued).
    pub max_runners: u32,
    /// How long a simulated job runs (long enough to catch runners busy).
    pub work_time: Duration,
    /// How long a cell may take to drain after its fault before what is left counts as lost
    /// or leaked.
    pub drain_deadline: Duration,
}

impl ChaosOptions {
    /// The sizes the test suite and the table use, with `operator` as the operator.
    pub fn new(operator: OperatorCommand) -> ChaosOptions {
        ChaosOptions {
            operator,
            jobs: 12,
            max_runners: 4,
            work_time: Duration::from_millis(1500),
            drain_deadline: Duration::from_secs(150),
        }
    }
}

/// Why a cell could not run at all (a cell that ran but lost jobs is an [`Outcome`]).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// The fake world could not be built or driven.
    #[error("world: {0}")]
    World(#[from] WorldError),
    /// The cell never reached the point where its fault belongs (no progress, no leader).
    #[error("{what}; operator log:\n{log}")]
    NoProgress {
        /// What did not happen.
        what: String,
        /// The operators' last output.
        log: String,
    },
}

/// Runs `scenario` on `forge` once: a fresh world, the operator, a burst, the fault, the drain
/// and the count.
pub async fn run_cell(
    scenario: Scenario,
    forge: ChaosForge,
    opts: &ChaosOptions,
) -> Result<Outcome, ChaosError> {
    let mut cell = Cell::start(forge, scenario.replicas(), opts).await?;
    let queued = cell.queue_burst(opts.jobs)?;
    let fault = match scenarios::inject(scenario, &mut cell, opts).await {
        Ok(fault) => fault,
        Err(e) => {
            cell.dump_output(scenario);
            return Err(e);
        }
    };
    let drained = cell.wait_drained(opts.drain_deadline).await;
    let recovery = fault.at.elapsed();
    let mut outcome = cell.count(scenario, queued.len(), &fault).await;
    outcome.recovery = recovery;
    if !drained || !outcome.is_clean() {
        outcome.log_tail = cell.log_tail();
        cell.dump_output(scenario);
    }
    cell.stop();
    Ok(outcome)
}

/// Runs `scenario` on every forge at once, each in its own world; results in
/// [`ChaosForge::ALL`] order.
pub async fn run_row(
    scenario: Scenario,
    opts: &ChaosOptions,
) -> Vec<(ChaosForge, Result<Outcome, ChaosError>)> {
    let cells = ChaosForge::ALL.map(|forge| async move { (forge, run_cell(scenario, forge, opts).await) });
    futures::future::join_all(cells).await
}
