//! The faults: what each scenario breaks, and when. Every scenario waits until the burst is
//! under way (the first jobs finished, most still queued) so the fault lands mid-burst.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use forgerunner_testkit::apiserver::{Fault as ApiFault, Verb};
use forgerunner_testkit::sim::NodeLoss;

use super::cell::{Cell, NAMESPACE};
use super::{ChaosError, ChaosOptions, Scenario};
use crate::world::WorldError;

/// How long a scenario waits for each step before it gives up on the cell.
const STEP: Duration = Duration::from_secs(90);
/// Jobs finished before the fault: the burst is under way, most of it still queued.
const DONE_BEFORE_FAULT: usize = 2;
/// Text in the operator's User-Agent (`forgerunner/<version> (<pod>)`) and in no testkit
/// client's, so API server faults hit the operator and never the cluster simulator.
const OPERATOR_AGENT: &str = "forgerunner/";
/// Groups pointing at a forge that never answers: more than one forge instance's share of the
/// operator's reconcile slots (16), and more than all the slots it had before (16).
const SILENT_GROUPS: usize = 20;
/// Busy runner pods a node loss takes.
const PODS_LOST: usize = 2;

/// What a scenario did.
#[derive(Clone, Debug)]
pub struct InjectedFault {
    /// When the fault hit (recovery is measured from here).
    pub at: Instant,
    /// Forge ids of jobs whose runner the fault killed mid-job.
    pub interrupted: BTreeSet<i64>,
    /// What happened, for the report.
    pub notes: Vec<String>,
}

impl InjectedFault {
    fn now(note: String) -> InjectedFault {
        InjectedFault {
            at: Instant::now(),
            interrupted: BTreeSet::new(),
            notes: vec![note],
        }
    }
}

/// Waits until the burst is under way, then breaks what `scenario` breaks.
pub async fn inject(
    scenario: Scenario,
    cell: &mut Cell,
    _opts: &ChaosOptions,
) -> Result<InjectedFault, ChaosError> {
    match scenario {
        Scenario::OperatorKill => operator_kill(cell).await,
        Scenario::LeaderPartition => leader_partition(cell).await,
        Scenario::ApiServerFaults => api_server_faults(cell).await,
        Scenario::ForgeFaults => forge_faults(cell).await,
        Scenario::NodeLost => node_lost(cell).await,
        Scenario::SilentNeighbours => silent_neighbours(cell).await,
    }
}

async fn under_way(cell: &Cell) -> Result<(), ChaosError> {
    cell.wait_progress(STEP, "the first jobs to finish", |p| p.done >= DONE_BEFORE_FAULT)
        .await
}

async fn operator_kill(cell: &mut Cell) -> Result<InjectedFault, ChaosError> {
    under_way(cell).await?;
    let p = cell.progress();
    let fault = InjectedFault::now(format!(
        "SIGKILL with {} of {} jobs done, {} running; restarted at once",
        p.done, p.total, p.running
    ));
    cell.kill_and_restart(0)?;
    Ok(fault)
}

async fn leader_partition(cell: &mut Cell) -> Result<InjectedFault, ChaosError> {
    let names: Vec<String> = cell.replicas.iter().map(|r| r.name.clone()).collect();
    let leader = match crate::world::wait_until(STEP, "a leader", || async {
        cell.lease_holder().await.is_some_and(|h| names.contains(&h))
    })
    .await
    {
        Ok(()) => cell.lease_holder().await.unwrap_or_default(),
        Err(_) => return Err(cell.no_progress("no replica took the lease")),
    };
    under_way(cell).await?;
    // A standby that is gone cannot take over: say so rather than wait for a takeover.
    let exited = cell.exited();
    if !exited.is_empty() {
        return Err(cell.no_progress(&format!(
            "before the partition of {leader}, replicas had exited: {}",
            exited.join(", ")
        )));
    }
    let at = Instant::now();
    // Every API request of the leader fails, the lease renewals included; its forge traffic
    // still flows (a partition between the operator and the API server only).
    cell.world
        .api
        .inject(ApiFault::error(500).user_agent(&format!("({leader})")));
    let took_over = crate::world::wait_until(STEP, "the standby to take the lease", || async {
        cell.lease_holder().await.is_some_and(|h| h != leader)
    })
    .await;
    if took_over.is_err() {
        cell.world.api.clear_faults();
        return Err(cell.no_progress(&format!("the standby never took the lease from {leader}")));
    }
    let takeover = at.elapsed();
    let done = cell.progress().done;
    // The partition lasts until the new leader has finished a job of its own.
    cell.wait_progress(STEP, "the new leader to finish a job", |p| {
        p.done > done || p.all_done()
    })
    .await?;
    cell.world.api.clear_faults();
    let healed = at.elapsed();
    let restarted = cell.restart_exited()?;
    let mut fault = InjectedFault::now(format!(
        "{leader} cut off (HTTP 500 on every API request); standby leading after {:.1} s; healed after {:.1} s",
        takeover.as_secs_f64(),
        healed.as_secs_f64()
    ));
    fault.at = at;
    if !restarted.is_empty() {
        fault.notes.push(format!(
            "exited during the partition and restarted: {restarted:?}"
        ));
    }
    Ok(fault)
}

async fn api_server_faults(cell: &mut Cell) -> Result<InjectedFault, ChaosError> {
    under_way(cell).await?;
    let api = &cell.world.api;
    let op = |f: ApiFault| f.user_agent(OPERATOR_AGENT);
    // Conflicts on writes (a stale resourceVersion), 500s on every kind of call, slow answers,
    // and watches cut at once and then right after each re-watch.
    api.inject(op(ApiFault::error(409).verb(Verb::Patch).times(4)));
    api.inject(op(ApiFault::error(409).verb(Verb::Update).times(2)));
    api.inject(op(ApiFault::error(500)
        .verb(Verb::Create)
        .resource("jobs")
        .times(3)));
    api.inject(op(ApiFault::error(500)
        .verb(Verb::Create)
        .resource("secrets")
        .times(2)));
    api.inject(op(ApiFault::error(500).verb(Verb::Delete).times(3)));
    api.inject(op(ApiFault::error(500).verb(Verb::List).times(2)));
    api.inject(op(ApiFault::latency(Duration::from_millis(1500)).times(20)));
    api.inject(op(ApiFault::drop_watch(Duration::from_millis(500)).times(8)));
    api.drop_watches();
    Ok(InjectedFault::now(
        "operator's requests only: 409 on 6 writes, 500 on 10 calls, 1.5 s latency on 20, every watch dropped, then 8 re-watches cut after 0.5 s".to_owned(),
    ))
}

async fn forge_faults(cell: &mut Cell) -> Result<InjectedFault, ChaosError> {
    under_way(cell).await?;
    let Some(fake) = cell.world.forge(cell.forge.kind()) else {
        return Err(cell.no_progress(&format!("no {}", crate::world::fake_name(cell.forge.kind()))));
    };
    let Some(note) = fake.inject_faults(&cell.target.label) else {
        return Err(cell.no_progress("the forge knows no pool of the group"));
    };
    Ok(InjectedFault::now(note))
}

/// Runner names and the forge job each works on now.
fn busy_runners(cell: &Cell) -> Vec<(String, i64)> {
    cell.world
        .forge(cell.forge.kind())
        .map_or_else(Vec::new, |f| f.busy_runners())
}

async fn node_lost(cell: &mut Cell) -> Result<InjectedFault, ChaosError> {
    under_way(cell).await?;
    let busy = crate::world::wait_until(STEP, "runners busy with a job", || async {
        busy_runners(cell).len() >= PODS_LOST
    })
    .await;
    if busy.is_err() {
        return Err(cell.no_progress("too few runners were ever busy at once"));
    }
    let busy = busy_runners(cell);
    let pods = cell.pods().await?;
    let at = Instant::now();
    let mut interrupted = BTreeSet::new();
    let mut lost = Vec::new();
    for (runner, job) in busy.into_iter().take(PODS_LOST) {
        // A runner's name is its Job's; the pod carries the Job's name as a label.
        let pod = pods.iter().find_map(|p| {
            let labels = p.metadata.labels.as_ref()?;
            (labels.get("job-name") == Some(&runner))
                .then(|| p.metadata.name.clone())
                .flatten()
        });
        let Some(pod) = pod else { continue };
        if cell
            .world
            .sim
            .lose_pod(NAMESPACE, &pod, NodeLoss::Delete)
            .await
            .is_ok()
        {
            interrupted.insert(job);
            lost.push(format!("{runner} (job {job})"));
        }
    }
    Ok(InjectedFault {
        at,
        notes: vec![format!(
            "{} busy runner pods deleted mid-job: {} (their jobs end failed or cancelled at the forge)",
            interrupted.len(),
            lost.join(", ")
        )],
        interrupted,
    })
}

/// A server that accepts every connection and never answers, for as long as the process runs:
/// the outage a forge behind a load balancer shows. Returns its URL.
async fn silent_forge() -> Result<String, ChaosError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(WorldError::from)?;
    let addr = listener.local_addr().map_err(WorldError::from)?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    Ok(format!("http://{addr}"))
}

async fn silent_neighbours(cell: &mut Cell) -> Result<InjectedFault, ChaosError> {
    let url = silent_forge().await?;
    under_way(cell).await?;
    let at = Instant::now();
    for i in 0..SILENT_GROUPS {
        cell.world
            .add_group_at(NAMESPACE, &format!("silent-{i}"), cell.forge.kind(), &url)
            .await?;
    }
    let mut fault = InjectedFault::now(format!(
        "{SILENT_GROUPS} groups in the namespace point at a forge that accepts connections and never answers"
    ));
    fault.at = at;
    Ok(fault)
}
