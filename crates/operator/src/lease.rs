//! Leader election on a `coordination.k8s.io/v1` Lease, fenced by optimistic concurrency.
//!
//! Every write is a full `replace` carrying the `resourceVersion` we read, so two candidates
//! that both see a free lease cannot both win: the second write gets 409 Conflict. Expiry is
//! judged the way client-go does it, from when *we* last saw the record change (a local
//! monotonic clock), so clock skew between nodes cannot make a follower steal a live lease.
//!
//! Timing follows client-go: a leader renews every retry period; its renew deadline counts from
//! the instant its last successful write was sent (no follower can have seen the record change
//! earlier), each renewal attempt is cut off at that deadline, and the leader steps down at it,
//! before any follower may take over. The [`Fence`] mirrors the deadline for every write path.

use std::time::Duration;

use forgerunner_core::Fence;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::leader_route::{LeaderRoute, advertise};

/// Where the lease lives and who we are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// Our holder identity (pod name or hostname).
    pub identity: String,
    /// How long a lease stays valid after its last renewal.
    pub duration: Duration,
    /// Our webhook endpoint, advertised on the Lease while we lead so standbys can forward
    /// deliveries to us; `None` advertises nothing.
    pub advertise: Option<String>,
    /// A leader whose last successful write was sent this long ago steps down; less than
    /// `duration`, so it stops before a follower may take over.
    pub renew_deadline: Duration,
    /// Leaders renew, and followers look at the lease, this often; less than `renew_deadline`.
    pub retry_period: Duration,
}

impl LeaseSettings {
    /// When a leader whose successful write was sent at `sent` must step down.
    pub fn step_down_at(&self, sent: Instant) -> Instant {
        sent + self.renew_deadline
    }

    /// Until when the fence holds after a successful write sent at `sent`: a little before the
    /// step-down, so that a write admitted at the last moment still reaches the API server
    /// before the deadline.
    pub fn fence_until(&self, sent: Instant) -> Instant {
        self.step_down_at(sent) - write_margin(self.renew_deadline)
    }
}

/// Time left for a write admitted just before the fence closes to arrive: a tenth of the
/// renew deadline, at most one second.
fn write_margin(renew_deadline: Duration) -> Duration {
    (renew_deadline / 10).min(Duration::from_secs(1))
}

/// A failed Lease API call.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server refused or failed the call.
    #[error("lease API call failed: {0}")]
    Kube(#[from] kube::Error),
    /// The call did not finish in time.
    #[error("lease API call timed out")]
    Timeout,
}

/// Why [`LeaderElector::hold`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldEnd {
    /// Someone else holds the lease now, or renewing failed for too long.
    Lost,
    /// The caller cancelled (shutdown); the lease is still ours until released.
    Cancelled,
}

/// What to do with the lease as last read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it.
    Take,
    /// Someone else holds it and it is fresh.
    Wait,
}

/// Pure decision from the lease's holder and how long its record has stood unchanged.
fn decide(holder: Option<&str>, identity: &str, unchanged_for: Duration, lease_duration: Duration) -> Step {
    match holder.filter(|h| !h.is_empty()) {
        Some(h) if h == identity => Step::Renew,
        None => Step::Take,
        Some(_) if unchanged_for >= lease_duration => Step::Take,
        Some(_) => Step::Wait,
    }
}

/// The last version of the record we saw, and when we first saw it.
#[derive(Clone, Debug)]
struct Observation {
    resource_version: Option<String>,
    since: Instant,
}

/// Campaigns for, holds and releases one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
    observed: Option<Observation>,
    /// Updated with the leader's advertised endpoint whenever another instance holds the lease.
    route: LeaderRoute,
    /// When our last successful acquiring or renewing write was sent.
    renewed_at: Option<Instant>,
    fence: Fence,
}

impl LeaderElector {
    /// An elector for the lease `settings` names; it holds `fence` while it leads.
    pub fn new(client: Client, settings: LeaseSettings, fence: Fence) -> Self {
        let api = Api::namespaced(client, &settings.namespace);
        LeaderElector {
            api,
            settings,
            observed: None,
            route: LeaderRoute::default(),
            renewed_at: None,
            fence,
        }
    }

    /// Shares `route`: each read of a lease held by someone else updates it.
    pub fn with_route(mut self, route: LeaderRoute) -> Self {
        self.route = route;
        self
    }

    /// Our settings.
    pub fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    /// Retries until we lead (`true`) or `cancel` fires (`false`).
    pub async fn acquire(&mut self, cancel: &CancellationToken) -> bool {
        let mut announced_holder: Option<String> = None;
        loop {
            match self.attempt().await {
                Ok(Attempt::Leading) => return true,
                Ok(Attempt::HeldBy(holder)) => {
                    if announced_holder.as_deref() != Some(holder.as_str()) {
                        tracing::info!(lease = %self.settings.name, %holder, "standing by; another instance leads");
                        announced_holder = Some(holder);
                    }
                }
                Err(e) => {
                    tracing::warn!(lease = %self.settings.name, error = %e, "cannot read or take the lease")
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(self.settings.retry_period) => {}
            }
        }
    }

    /// Renews until leadership is lost or `cancel` fires. Call only after [`Self::acquire`].
    ///
    /// Steps down (revoking the fence) at the renew deadline itself: a renewal still under way
    /// then is abandoned rather than awaited.
    pub async fn hold(&mut self, cancel: &CancellationToken) -> HoldEnd {
        loop {
            let Some(deadline) = self.renewed_at.map(|t| self.settings.step_down_at(t)) else {
                return self.step_down("never acquired");
            };
            tokio::select! {
                _ = cancel.cancelled() => return HoldEnd::Cancelled,
                _ = tokio::time::sleep_until(deadline) => return self.step_down("not renewed by its deadline"),
                _ = tokio::time::sleep(self.settings.retry_period) => {}
            }
            let attempt = tokio::select! {
                _ = cancel.cancelled() => return HoldEnd::Cancelled,
                a = tokio::time::timeout_at(deadline, self.attempt()) => a,
            };
            match attempt {
                Err(_) => return self.step_down("not renewed by its deadline"),
                Ok(Ok(Attempt::Leading)) => {}
                Ok(Ok(Attempt::HeldBy(holder))) => {
                    tracing::warn!(lease = %self.settings.name, %holder, "lost the lease to another instance");
                    return self.step_down("held by another instance");
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.settings.name, error = %e, "cannot renew the lease")
                }
            }
        }
    }

    fn step_down(&mut self, why: &'static str) -> HoldEnd {
        self.fence.revoke();
        self.renewed_at = None;
        tracing::warn!(lease = %self.settings.name, reason = why, "stepping down; every write is fenced");
        HoldEnd::Lost
    }

    /// Records a successful acquiring or renewing write sent at `sent`.
    fn renewed(&mut self, sent: Instant) {
        self.renewed_at = Some(sent);
        self.fence.hold_until(self.settings.fence_until(sent));
    }

    /// Gives the lease up if we hold it, so a standby can take over at once.
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        // From here on this replica writes nothing but the lease itself.
        self.fence.revoke();
        self.renewed_at = None;
        let Some(mut lease) = self.timed(self.api.get_opt(&self.settings.name)).await? else {
            return Ok(());
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.acquire_time = None;
        spec.renew_time = None;
        lease.spec = Some(spec);
        advertise(&mut lease.metadata.annotations, None);
        self.timed(
            self.api
                .replace(&self.settings.name, &PostParams::default(), &lease),
        )
        .await?;
        tracing::info!(lease = %self.settings.name, "released the lease");
        Ok(())
    }

    /// One read-decide-write round.
    async fn attempt(&mut self) -> Result<Attempt, LeaseError> {
        let now = Instant::now();
        let Some(mut lease) = self.timed(self.api.get_opt(&self.settings.name)).await? else {
            return self.create().await;
        };
        let rv = lease.metadata.resource_version.clone();
        let since = match &self.observed {
            Some(o) if o.resource_version == rv => o.since,
            _ => now,
        };
        self.observed = Some(Observation {
            resource_version: rv,
            since,
        });
        let mut spec = lease.spec.take().unwrap_or_default();
        let lease_duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.settings.duration);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let stamp = Some(MicroTime(Timestamp::now()));
        match decide(
            Some(&holder),
            &self.settings.identity,
            now.duration_since(since),
            lease_duration,
        ) {
            Step::Wait => {
                self.route.learn_from(lease.metadata.annotations.as_ref());
                return Ok(Attempt::HeldBy(holder));
            }
            Step::Renew => {}
            Step::Take => {
                spec.holder_identity = Some(self.settings.identity.clone());
                spec.acquire_time = stamp.clone();
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            }
        }
        spec.renew_time = stamp;
        spec.lease_duration_seconds = Some(self.duration_seconds());
        lease.spec = Some(spec);
        advertise(
            &mut lease.metadata.annotations,
            self.settings.advertise.as_deref(),
        );
        // The resourceVersion we read travels with the write: a stale view gets 409.
        let sent = Instant::now();
        match self
            .timed(
                self.api
                    .replace(&self.settings.name, &PostParams::default(), &lease),
            )
            .await
        {
            Ok(written) => {
                self.observed = Some(Observation {
                    resource_version: written.metadata.resource_version,
                    since: Instant::now(),
                });
                self.renewed(sent);
                Ok(Attempt::Leading)
            }
            Err(LeaseError::Kube(kube::Error::Api(s))) if s.code == 409 => Ok(Attempt::HeldBy(holder)),
            Err(e) => Err(e),
        }
    }

    async fn create(&mut self) -> Result<Attempt, LeaseError> {
        let stamp = Some(MicroTime(Timestamp::now()));
        let mut metadata = ObjectMeta {
            name: Some(self.settings.name.clone()),
            namespace: Some(self.settings.namespace.clone()),
            ..ObjectMeta::default()
        };
        advertise(&mut metadata.annotations, self.settings.advertise.as_deref());
        let lease = Lease {
            metadata,
            spec: Some(LeaseSpec {
                holder_identity: Some(self.settings.identity.clone()),
                acquire_time: stamp.clone(),
                renew_time: stamp,
                lease_duration_seconds: Some(self.duration_seconds()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        let sent = Instant::now();
        match self.timed(self.api.create(&PostParams::default(), &lease)).await {
            Ok(written) => {
                self.observed = Some(Observation {
                    resource_version: written.metadata.resource_version,
                    since: Instant::now(),
                });
                self.renewed(sent);
                Ok(Attempt::Leading)
            }
            // Someone created it between our read and our write.
            Err(LeaseError::Kube(kube::Error::Api(s))) if s.code == 409 => Ok(Attempt::HeldBy(String::new())),
            Err(e) => Err(e),
        }
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.settings.duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// Bounds one API call so a hung connection cannot stall a campaign (a leader's whole
    /// renewal is bounded by its deadline as well).
    async fn timed<T>(&self, call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, LeaseError> {
        match tokio::time::timeout(self.settings.renew_deadline, call).await {
            Ok(result) => result.map_err(LeaseError::from),
            Err(_) => Err(LeaseError::Timeout),
        }
    }
}

/// Outcome of one round.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Attempt {
    /// We hold the lease now.
    Leading,
    /// Someone else does (their identity; empty when unknown).
    HeldBy(String),
}

/// Our holder identity: `POD_NAME`, else the host name, else a fixed fallback.
pub fn holder_identity() -> String {
    let from_env = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    from_env("POD_NAME")
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .or_else(|| from_env("HOSTNAME"))
        .unwrap_or_else(|| "forgerunner".to_owned())
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
