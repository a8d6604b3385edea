//! The leadership loop: campaign, run the controller while leading, step down cleanly.
//!
//! Forges keep one [`ReconcileTrigger`] for the life of the process, but each term gets a
//! fresh controller that consumes its own receiver. A relay forwards triggers to the current
//! term and drops them between terms (a new controller reconciles every group on start anyway).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use forgerunner_core::metrics::Metrics;
use forgerunner_core::{Fence, GroupKey};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controller::{ControllerError, ControllerOptions, ForgeSet, run_controller};
use crate::forges;
use crate::health::Readiness;
use crate::leader_route::{LeaderRoute, Route};
use crate::lease::{HoldEnd, LeaderElector};

/// Bounds of each step of stepping down, so shutdown ends within the pod's grace period.
#[derive(Clone, Copy, Debug)]
pub struct StepDownBudget {
    /// Wait for the controller to stop.
    pub controller: Duration,
    /// Wait for the forges to release their sessions.
    pub forges: Duration,
    /// Wait for the lease release.
    pub lease: Duration,
}

impl Default for StepDownBudget {
    fn default() -> Self {
        StepDownBudget {
            controller: Duration::from_secs(8),
            forges: Duration::from_secs(6),
            lease: Duration::from_secs(3),
        }
    }
}

/// Everything a term needs.
pub struct Leadership {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Enabled forges.
    pub forges: Arc<dyn ForgeSet>,
    /// Shared metrics.
    pub metrics: Arc<Metrics>,
    /// Namespaces to watch; empty = all.
    pub namespaces: Vec<String>,
    /// Our identity (pod name), for Events.
    pub instance: String,
    /// Reconciles run at once.
    pub concurrency: u16,
    /// Hosts the groups' forge URLs may point at (empty: any).
    pub forge_hosts: forgerunner_core::forge_hosts::ForgeHostAllowlist,
    /// The ClusterRoles runner RBAC binds (`None`: no runner container hooks).
    pub runner_hooks: Option<forgerunner_core::reconcile::runner_rbac::RunnerHooks>,
    /// Readiness flags.
    pub readiness: Arc<Readiness>,
    /// `None` when leader election is disabled: lead at once, once.
    pub elector: Option<LeaderElector>,
    /// Held while the elector's lease is fresh (always, without an election); every write path
    /// checks it.
    pub fence: Fence,
    /// Step-down bounds.
    pub budget: StepDownBudget,
    /// Where webhook deliveries go: here while a term runs.
    pub route: LeaderRoute,
}

/// Forwards the process-wide trigger stream to the current term's controller.
#[derive(Clone, Default)]
struct Relay(Arc<Mutex<Option<UnboundedSender<GroupKey>>>>);

impl Relay {
    fn set(&self, target: Option<UnboundedSender<GroupKey>>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = target;
    }

    fn forward(&self, key: GroupKey) {
        if let Some(tx) = self.0.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            let _ = tx.send(key);
        }
    }

    fn spawn(&self, mut source: UnboundedReceiver<GroupKey>) -> tokio::task::JoinHandle<()> {
        let relay = self.clone();
        tokio::spawn(async move {
            while let Some(key) = source.recv().await {
                relay.forward(key);
            }
        })
    }
}

/// Why leading stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum LeadershipError {
    /// The controller returned an error.
    #[error(transparent)]
    Controller(#[from] ControllerError),
    /// The controller returned although nothing asked it to stop.
    #[error("the controller stopped although no shutdown was requested")]
    StoppedUnasked,
    /// The controller task panicked or was aborted.
    #[error("the controller task ended abnormally: {0}")]
    Task(String),
}

/// How one term ended.
enum TermEnd {
    Lost,
    Shutdown,
    Failed(LeadershipError),
}

impl Leadership {
    /// Runs terms until `shutdown` fires (Ok) or a controller fails (Err). Leadership losses
    /// stop the term's controller and forge sessions and go back to campaigning.
    pub async fn run(
        mut self,
        triggers: UnboundedReceiver<GroupKey>,
        shutdown: CancellationToken,
    ) -> Result<(), LeadershipError> {
        let relay = Relay::default();
        let relay_task = relay.spawn(triggers);
        let result = loop {
            self.readiness.standby();
            self.metrics.leader.set(0);
            if let Some(elector) = self.elector.as_mut() {
                if !elector.acquire(&shutdown).await {
                    break Ok(());
                }
                tracing::info!(identity = %elector.settings().identity, "acquired the lease; leading");
            }
            match self.term(&relay, &shutdown).await {
                TermEnd::Lost => continue,
                TermEnd::Shutdown => break Ok(()),
                TermEnd::Failed(e) => break Err(e),
            }
        };
        self.readiness.stopping();
        self.metrics.leader.set(0);
        if let Some(elector) = self.elector.as_mut() {
            match tokio::time::timeout(self.budget.lease, elector.release()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot release the lease; it will expire"),
                Err(_) => tracing::warn!("releasing the lease timed out; it will expire"),
            }
        }
        relay_task.abort();
        result
    }

    async fn term(&mut self, relay: &Relay, shutdown: &CancellationToken) -> TermEnd {
        let term = shutdown.child_token();
        let (tx, rx) = mpsc::unbounded_channel();
        relay.set(Some(tx));
        self.route.set(Route::Local);
        let synced = self.readiness.leading();
        self.metrics.leader.set(1);
        let mut controller = tokio::spawn(run_controller(
            self.client.clone(),
            self.forges.clone(),
            self.metrics.clone(),
            rx,
            ControllerOptions {
                namespaces: self.namespaces.clone(),
                instance: self.instance.clone(),
                concurrency: self.concurrency,
                forge_hosts: self.forge_hosts.clone(),
                fence: self.fence.clone(),
                runner_hooks: self.runner_hooks.clone(),
                calendar: Default::default(),
            },
            synced,
            term.clone(),
        ));
        let hold = async {
            match self.elector.as_mut() {
                Some(elector) => elector.hold(&term).await,
                None => {
                    term.cancelled().await;
                    HoldEnd::Cancelled
                }
            }
        };
        let mut finished = None;
        let end = tokio::select! {
            joined = &mut controller => {
                let end = match joined {
                    Ok(Ok(())) if shutdown.is_cancelled() => TermEnd::Shutdown,
                    Ok(Ok(())) => TermEnd::Failed(LeadershipError::StoppedUnasked),
                    Ok(Err(e)) => TermEnd::Failed(e.into()),
                    Err(e) => TermEnd::Failed(LeadershipError::Task(e.to_string())),
                };
                finished = Some(());
                end
            }
            held = hold => match held {
                HoldEnd::Lost => TermEnd::Lost,
                HoldEnd::Cancelled => TermEnd::Shutdown,
            },
        };
        // Stop taking work at once: on a lost lease another instance may already lead.
        term.cancel();
        relay.set(None);
        // Until the next lease read names the new leader, deliveries are refused (503).
        self.route.set(Route::Unknown);
        match &end {
            TermEnd::Lost => tracing::warn!("leadership lost; stopping the controller"),
            TermEnd::Shutdown => tracing::info!("shutting down the controller"),
            TermEnd::Failed(e) => tracing::error!(error = %e, "the controller failed"),
        }
        if finished.is_none() {
            self.stop_controller(&end, &mut controller).await;
        }
        // Only the leader exports group gauges: the next leader's values replace ours, and a
        // dashboard that sums across pods must not count a group twice.
        self.metrics.clear_group_gauges();
        if tokio::time::timeout(self.budget.forges, forges::shutdown_all(self.forges.as_ref()))
            .await
            .is_err()
        {
            tracing::warn!("forge sessions did not close in time");
        }
        end
    }

    /// Stops a term's controller. On a lost lease at once: a standby may lead soon and every
    /// write already fails, so nothing is worth finishing; aborting drops in-flight reconciles
    /// with their forge calls (run_controller owns its tasks, so they all go). On shutdown the
    /// lease is still ours until released: let passes finish within the budget.
    async fn stop_controller(&self, end: &TermEnd, controller: &mut JoinHandle<Result<(), ControllerError>>) {
        if !matches!(end, TermEnd::Lost) {
            if tokio::time::timeout(self.budget.controller, &mut *controller)
                .await
                .is_ok()
            {
                return;
            }
            tracing::warn!("the controller did not stop in time; aborting it");
        }
        controller.abort();
        // Aborted tasks end at their next await; one stuck in blocking code cannot write anyway
        // (every write path checks the fence), so it is left behind rather than killing the
        // process and the standby it now is.
        if tokio::time::timeout(self.budget.controller, &mut *controller)
            .await
            .is_err()
        {
            tracing::error!("the aborted controller has not stopped; its writes stay fenced");
        }
    }
}
