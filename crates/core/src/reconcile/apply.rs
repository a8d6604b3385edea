//! Apply: carry out a plan against the cluster and the forge.
//!
//! Every step is attempted even when an earlier one failed; the first error is reported so the
//! status can say what went wrong and the reconcile is retried with backoff.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use tracing::{debug, info, warn};

use super::FIELD_MANAGER;
use super::docker_cache;
use super::error::ReconcileError;
use super::forge_call::bounded;
use super::ledger::{ConnectedSince, Registrations};
use super::observe::find_job;
use super::runner_exit::{FailedPod, failed_runner_pod};
use crate::crd::RunnerClass;
use crate::fence::Fence;
use crate::forge::{
    ForgeProfile, ForgeSession, GroupContext, RemoveOutcome, RunnerCredentials, RunnerPodRequest, RunnerRef,
    RunnerRequest, WaitingJob,
};
use crate::plan::{Plan, Removal, RemovalReason, RunnerPhase};
use crate::runner_class::dress_job;
use crate::runner_job::{
    BUSY_ANNOTATION, ObservedJob, RunnerJobInput, build_runner_job, build_runner_secret, record_binding,
};
use crate::runner_pod::disruption::Disruption;
use crate::runner_pod::restricted_violations;
use crate::startup::StartupFailure;

/// Runner creations in flight at once for one group (forge calls and API writes overlap).
/// Each creation is three round trips (forge credentials, Job, Secret); 8 left a burst of 1000
/// runners waiting on latency, not on CPU.
const CREATE_PARALLELISM: usize = 32;
/// What the apply step did.
#[derive(Debug, Default)]
pub struct ApplyReport {
    /// Names of runner Jobs created.
    pub created: Vec<String>,
    /// Runners the forge registered in this pass; also those whose Job could not be made (the
    /// forge knows them all the same).
    pub registered: Vec<Registered>,
    /// Those of `created` that have a class, with their class.
    pub created_classes: Vec<(String, String)>,
    /// Runners planned in this pass that were not made (their job reservation is freed).
    pub unmade: Vec<String>,
    /// The jobs the forge withholds, by binding, as removals of runners bound to them told
    /// ([`RemoveOutcome::Withheld`]).
    pub withheld: Vec<String>,
    /// Names of Jobs this pass deleted (they may linger in the store for a moment).
    pub deleted: Vec<String>,
    /// Active runners removed (idle timeout, scale-down).
    pub scaled_down: u32,
    /// Finished-well runner Jobs deleted.
    pub succeeded_deleted: u32,
    /// Failed runner Jobs deleted (each failure is counted once, when its Job goes).
    pub failed_deleted: Vec<String>,
    /// Those of `failed_deleted` whose runner exited as outdated ([`crate::forge::RunnerExit`]).
    pub outdated: Vec<String>,
    /// Those of `failed_deleted` whose pod the cluster killed, and how ([`super::rerun`]).
    pub disrupted: Vec<(String, Disruption)>,
    /// Runners kept because the forge said they took a job meanwhile.
    pub kept_busy: u32,
    /// Orphaned forge registrations removed.
    pub orphans_removed: u32,
    /// Runners removed because they did not start (also in `failed_deleted`): name, cause and
    /// Kubernetes' message.
    pub stuck: Vec<(String, StartupFailure, String)>,
    /// Idle runners replaced because the spec changed.
    pub spec_replaced: u32,
    /// How the pods created in this pass break the `restricted` Pod Security profile.
    pub pod_security: Vec<String>,
    /// The first error met.
    pub first_error: Option<ReconcileError>,
}

impl ApplyReport {
    fn fail(&mut self, e: ReconcileError) {
        warn!(error = %e, "apply step failed");
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }
}

/// The clients and group an apply works on.
pub struct Target<'a> {
    /// Runner Jobs of the group's namespace.
    pub jobs: Api<Job>,
    /// Secrets of the group's namespace.
    pub secrets: Api<Secret>,
    /// Pods of the group's namespace (read only, to learn why a runner failed).
    pub pods: Api<Pod>,
    /// The group's session at its forge.
    pub forge: &'a dyn ForgeSession,
    /// What the forge makes of the group's spec.
    pub profile: &'a ForgeProfile,
    /// Checked before each forge write (see [`crate::fence`]).
    pub fence: &'a Fence,
    /// Runner creations in flight at once over every group ([`super::Context::create_permits`]).
    pub create_permits: &'a tokio::sync::Semaphore,
    /// Longest one forge call may take ([`super::Context::forge_deadline`]).
    pub forge_deadline: std::time::Duration,
    /// The group as the forge sees it.
    pub group: &'a GroupContext,
    /// The group's runner Jobs as observed.
    pub observed: &'a [Arc<ObservedJob>],
    /// Runners the cluster was killing while their Jobs still ran, as observed
    /// ([`super::runner_exit::killed_runners`]): what their removal reports when the pod is
    /// gone by the time it is read again.
    pub killed: &'a BTreeMap<String, Disruption>,
    /// Check new runner pods against the `restricted` profile (once per spec generation: every
    /// runner of a generation has the same pod shape).
    pub check_pod_security: bool,
    /// Job identity annotations to record, by runner ([`super::identity`]); a runner marked
    /// busy in this pass gets them in the same patch.
    pub identities: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// Runners the group's session registered ([`Registrations`]), for what the forge is told
    /// of a runner it removes.
    pub registrations: &'a Registrations,
    /// Since when the forge has shown each runner connected ([`ConnectedSince`]), for what the
    /// forge is told of a runner it removes.
    pub connected: &'a ConnectedSince,
}

/// Whether `e` is the API server answering `code`.
pub(super) fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// A runner the plan makes in this pass: its name, its class of `spec.classes` (`None`: one of
/// the group's own; see [`crate::runner_class`]) and the job reserved for it, where the forge
/// binds runners to jobs ([`super::ledger::Reservations`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRunner {
    /// The runner's name (= Job name = forge-side name).
    pub name: String,
    /// The runner's class, by name.
    pub class: Option<String>,
    /// The job it is bound to, if any.
    pub job: Option<WaitingJob>,
}

/// Applies `plan`: busy marks, removals, then creations, one runner per entry of `new_runners`.
pub async fn apply_plan(t: &Target<'_>, plan: &Plan, new_runners: &[NewRunner]) -> ApplyReport {
    let mut report = ApplyReport::default();
    for name in &plan.mark_busy {
        mark_busy(t, name, &mut report).await;
    }
    for removal in &plan.remove {
        remove(t, removal, &mut report).await;
    }
    if !new_runners.is_empty() {
        // Distinct Docker cache claims for the runners of this pass (`spec.dockerCache`).
        let claims =
            docker_cache::claims_for(&t.jobs.clone().into_client(), &t.group.group, new_runners.len()).await;
        // Indices, not references, in the stream: its closures must work for any lifetime.
        let results: Vec<(usize, Creation)> = futures::stream::iter((0..new_runners.len()).zip(claims))
            .map(|(i, claim)| create_runner(t, &new_runners[i], claim).map(move |r| (i, r)))
            .buffer_unordered(CREATE_PARALLELISM)
            .collect()
            .await;
        for (new, creation) in results.into_iter().map(|(i, c)| (&new_runners[i], c)) {
            report.registered.extend(creation.registered);
            match creation.outcome {
                Ok(violations) => {
                    if let Some(class) = &new.class {
                        report.created_classes.push((new.name.clone(), class.clone()));
                    }
                    report.created.push(new.name.clone());
                    if report.pod_security.is_empty() {
                        report.pod_security = violations;
                    }
                }
                Err(e) => {
                    report.unmade.push(new.name.clone());
                    report.fail(e);
                }
            }
        }
    }
    report
}

async fn mark_busy(t: &Target<'_>, name: &str, report: &mut ApplyReport) {
    let mut annotations = t.identities.get(name).cloned().unwrap_or_default();
    annotations.insert(BUSY_ANNOTATION.to_owned(), "true".to_owned());
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    match t
        .jobs
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => debug!(runner = name, "marked busy"),
        Err(e) if is_status(&e, 404) => {}
        Err(e) => report.fail(ReconcileError::kube("annotate job")(e)),
    }
}

/// How the forge should see the runner of the Job `name` among `observed`, given what the
/// group's session registered.
pub(super) fn runner_ref(
    observed: &[Arc<ObservedJob>],
    registrations: &Registrations,
    name: &str,
) -> RunnerRef {
    let job = find_job(observed, name);
    let phase = job.map_or(RunnerPhase::Pending, super::observe::job_phase);
    registrations.runner_ref(name, phase, job)
}

async fn remove(t: &Target<'_>, r: &Removal, report: &mut ApplyReport) {
    // The store may lag: only deregister an orphan when the API server confirms there is no Job.
    if r.reason == RemovalReason::Orphaned && !job_confirmed_gone(t, &r.name, report).await {
        return;
    }
    if r.deregister && !deregister_for_removal(t, r, report).await {
        return;
    }
    if r.delete_job {
        delete_runner_job(t, r, report).await;
    }
}

/// Whether the API server confirms the Job `name` is gone; a failed read is reported.
async fn job_confirmed_gone(t: &Target<'_>, name: &str, report: &mut ApplyReport) -> bool {
    match t.jobs.get_opt(name).await {
        Ok(None) => true,
        Ok(Some(_)) => false,
        Err(e) => {
            report.fail(ReconcileError::kube("get job")(e));
            false
        }
    }
}

/// Deregisters the runner of a removal at the forge; returns whether its Job may go.
async fn deregister_for_removal(t: &Target<'_>, r: &Removal, report: &mut ApplyReport) -> bool {
    let finished = matches!(r.reason, RemovalReason::Succeeded | RemovalReason::Failed);
    if let Err(e) = t.fence.check() {
        report.fail(e.into());
        return false;
    }
    let rr = RunnerRef {
        connected_since: t.connected.since(&r.name),
        ..runner_ref(t.observed, t.registrations, &r.name)
    };
    match bounded(
        t.forge_deadline,
        "remove_runner",
        t.group,
        t.forge.deregister(t.group, &rr),
    )
    .await
    {
        Ok(outcome @ (RemoveOutcome::Removed | RemoveOutcome::Withheld)) => {
            if r.reason == RemovalReason::Orphaned {
                report.orphans_removed += 1;
            }
            if let (RemoveOutcome::Withheld, Some(binding)) = (outcome, rr.binding()) {
                report.withheld.push(binding.to_owned());
            }
            true
        }
        Ok(RemoveOutcome::Busy) => {
            info!(runner = %r.name, reason = r.reason.as_str(), "runner took a job meanwhile; kept");
            report.kept_busy += 1;
            false
        }
        Err(e) => {
            report.fail(e);
            // A finished runner is gone from the forge's point of view anyway; an active one
            // might be about to take a job, so it is only deleted once the forge agrees.
            finished
        }
    }
}

/// Deletes the runner Job of a removal and counts it by its reason.
async fn delete_runner_job(t: &Target<'_>, r: &Removal, report: &mut ApplyReport) {
    // Read the pod before the Job (and with it the pod) goes; only failures pay for this.
    let pod = if r.reason == RemovalReason::Failed {
        // The Job as observed: its conditions tell a disruption whose pod is already gone.
        let job = find_job(t.observed, &r.name);
        let mut pod = failed_runner_pod(&t.pods, t.profile, &r.name, job).await;
        pod.disruption = pod.disruption.or_else(|| t.killed.get(&r.name).copied());
        pod
    } else {
        FailedPod::default()
    };
    match t.jobs.delete(&r.name, &DeleteParams::background()).await {
        Ok(_) => count_removal(r, &pod, report),
        // Already gone (someone else, or the TTL controller): not ours to count.
        Err(e) if is_status(&e, 404) => {}
        Err(e) => report.fail(ReconcileError::kube("delete job")(e)),
    }
}

/// Books a deleted runner Job in the report, by why it went.
fn count_removal(r: &Removal, pod: &FailedPod, report: &mut ApplyReport) {
    report.deleted.push(r.name.clone());
    match r.reason {
        RemovalReason::Succeeded => report.succeeded_deleted += 1,
        RemovalReason::Failed => {
            report.failed_deleted.push(r.name.clone());
            if pod.outdated {
                warn!(runner = %r.name, "runner exited as outdated; the runner image needs updating");
                report.outdated.push(r.name.clone());
            }
            if let Some(how) = pod.disruption {
                warn!(runner = %r.name, reason = how.as_str(), "runner pod killed by the cluster");
                report.disrupted.push((r.name.clone(), how));
            }
        }
        RemovalReason::IdleTimeout | RemovalReason::ScaleDown | RemovalReason::JobGone => {
            info!(runner = %r.name, reason = r.reason.as_str(), "idle runner removed");
            report.scaled_down += 1;
        }
        RemovalReason::StartupFailed(cause) => {
            warn!(runner = %r.name, reason = cause.as_str(), "runner did not start; removed");
            report.failed_deleted.push(r.name.clone());
            let message = r.message.clone().unwrap_or_default();
            report.stuck.push((r.name.clone(), cause, message));
        }
        RemovalReason::SpecChanged => report.spec_replaced += 1,
        RemovalReason::Orphaned => {}
    }
}

/// Whether the Secret `name` that exists already belongs to the runner Job `job` (its owner
/// reference carries the Job's uid); an error naming the conflict when it does not.
async fn secret_of_job(t: &Target<'_>, name: &str, job: &Job) -> Result<(), ReconcileError> {
    let existing = t
        .secrets
        .get(name)
        .await
        .map_err(ReconcileError::kube("get secret"))?;
    let job_uid = job.metadata.uid.as_deref();
    let ours = existing
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| Some(o.uid.as_str()) == job_uid);
    if ours {
        Ok(())
    } else {
        Err(ReconcileError::ForeignSecret {
            name: name.to_owned(),
        })
    }
}

pub(super) fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    }
}

/// How a runner's pod breaks the `restricted` Pod Security profile (empty when it passes).
type Violations = Vec<String>;

/// A runner the forge registered in a pass ([`ApplyReport::registered`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    /// The runner's name.
    pub runner: String,
    /// The annotations its Job got from the forge and from core.
    pub annotations: BTreeMap<String, String>,
    /// When `register` returned.
    pub at: Instant,
}

/// One attempt to create a runner: what the forge registered, and how the attempt ended.
struct Creation {
    registered: Option<Registered>,
    outcome: Result<Violations, ReconcileError>,
}

/// Creates the runner `new`: credentials at the forge, then the Job, then its Secret. The
/// outcome is how its pod breaks the `restricted` Pod Security profile. `claim` is the runner's
/// Docker cache claim, if it gets one ([`docker_cache::claims_for`]).
async fn create_runner(t: &Target<'_>, new: &NewRunner, claim: Option<String>) -> Creation {
    let group = &t.group.group;
    // Chosen from this very spec, so a class is found.
    let class: Option<&RunnerClass> = new
        .class
        .as_ref()
        .and_then(|n| group.spec.classes.iter().find(|c| &c.name == n));
    let request = RunnerRequest {
        name: &new.name,
        class,
        job: new.job.as_ref(),
    };
    let registered = register(t, &request).await;
    // Right after the forge answered: a listing fetched before this may not show the runner.
    let at = Instant::now();
    let mut creds = match registered {
        Ok(creds) => creds,
        Err(e) => {
            return Creation {
                registered: None,
                outcome: Err(e),
            };
        }
    };
    record_binding(&mut creds.annotations, new.job.as_ref());
    let outcome = start_runner(t, &new.name, &creds, at, class, claim).await;
    Creation {
        registered: Some(Registered {
            runner: new.name.clone(),
            annotations: creds.annotations,
            at,
        }),
        outcome,
    }
}

/// Registers the new runner of `request` at the forge.
async fn register(t: &Target<'_>, request: &RunnerRequest<'_>) -> Result<RunnerCredentials, ReconcileError> {
    t.fence.check()?;
    bounded(
        t.forge_deadline,
        "runner_credentials",
        t.group,
        t.forge.register(t.group, request),
    )
    .await
}

/// Makes the Job and the Secret of the runner `name` the forge registered with `creds` at
/// `registered_at`; undoes what it can when either fails.
async fn start_runner(
    t: &Target<'_>,
    name: &str,
    creds: &RunnerCredentials,
    registered_at: Instant,
    class: Option<&RunnerClass>,
    claim: Option<String>,
) -> Result<Violations, ReconcileError> {
    // Taken after the forge call, so a forge that is slow to register runners holds none of
    // the permits every other group's creations need. The semaphore is never closed; if it
    // were, creating without a permit is still correct.
    let _permit = t.create_permits.acquire().await.ok();
    // Checked again after the permit: the wait for it may outlast the lease.
    t.fence.check()?;
    let job = runner_job(t, name, creds, class, claim.as_deref())?;
    let created = match t.jobs.create(&post_params(), &job).await {
        Ok(j) => j,
        Err(e) => {
            deregister_unstarted(t, name, creds, registered_at).await;
            return Err(ReconcileError::kube("create job")(e));
        }
    };
    if let Err(e) = store_runner_secret(t, name, &created, creds).await {
        // A pod without its Secret never starts; remove the Job rather than leak it, and its
        // registration with it.
        let _ = t.jobs.delete(name, &DeleteParams::background()).await;
        deregister_unstarted(t, name, creds, registered_at).await;
        return Err(e);
    }
    info!(runner = %name, group = %t.group.key, "runner created");
    Ok(pod_security_violations(t, &job))
}

/// The runner Job of a new runner: the forge's default pod with the user's template, its class
/// and its Docker cache claim laid on it.
fn runner_job(
    t: &Target<'_>,
    name: &str,
    creds: &RunnerCredentials,
    class: Option<&RunnerClass>,
    claim: Option<&str>,
) -> Result<Job, ReconcileError> {
    let group = &t.group.group;
    let default_pod = t.forge.runner_pod(&RunnerPodRequest {
        group,
        runner_name: name,
        secret_name: name,
        credentials: creds,
        class,
    });
    let mut job = build_runner_job(RunnerJobInput {
        group,
        runner_name: name,
        default_pod,
        credentials: creds,
    })?;
    if let Some(class) = class {
        dress_job(&mut job, class)?;
    }
    if let Some(claim) = claim {
        crate::docker_cache::mount_claim(&mut job, claim);
    }
    Ok(job)
}

/// Stores the new runner's Secret, owned by its Job `created`.
async fn store_runner_secret(
    t: &Target<'_>,
    name: &str,
    created: &Job,
    creds: &RunnerCredentials,
) -> Result<(), ReconcileError> {
    let secret = build_runner_secret(created, creds)?;
    match t.secrets.create(&post_params(), &secret).await {
        // A Secret of that name may exist already: ours, from a create whose answer was lost,
        // or someone else's, whose values must never reach a runner pod.
        Err(e) if is_status(&e, 409) => secret_of_job(t, name, created).await,
        other => other.map(drop).map_err(ReconcileError::kube("create secret")),
    }
}

/// Deregisters a new runner, registered at `registered_at`, that will never start. The forge
/// may have registered the name already (JIT, a runner row); it must not stay behind as a ghost.
async fn deregister_unstarted(t: &Target<'_>, name: &str, creds: &RunnerCredentials, registered_at: Instant) {
    let rr = RunnerRef {
        name: name.to_owned(),
        annotations: creds.annotations.clone(),
        phase: RunnerPhase::Pending,
        stored: false,
        registered_at: Some(registered_at),
        connected_since: None,
    };
    // A deposed leader leaves the ghost to the new leader's sweep.
    if t.fence.is_held()
        && let Err(fe) = t.forge.deregister(t.group, &rr).await
    {
        debug!(runner = %name, error = %fe, "could not deregister a runner that will never start");
    }
}

/// How the pod of the runner Job `job` breaks the `restricted` Pod Security profile, when this
/// pass checks it.
fn pod_security_violations(t: &Target<'_>, job: &Job) -> Vec<String> {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .filter(|_| t.check_pod_security)
        .map(|pod| {
            restricted_violations(pod)
                .iter()
                .map(ToString::to_string)
                .collect()
        })
        .unwrap_or_default()
}
