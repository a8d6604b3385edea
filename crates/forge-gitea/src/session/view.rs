//! The group as Gitea shows it (`ForgeSession::snapshot`): its scope's queued and running jobs
//! (one listing per scope and poll interval, shared by its groups) with what webhook deliveries
//! told since, its runners' rows, the rows named like its runners (core tells the ghosts among
//! them) and the queued jobs no group can take.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use forgerunner_core::forge::{
    ForgeFacts, ForgeRunnerState, ForgeView, GroupContext, ListedRows, RunnerRef, UnmatchedJob, WaitingJob,
};
use forgerunner_core::names::is_runner_name_of;
use forgerunner_http::Fetched;

use super::GiteaSession;
use crate::client::RunnerListing;
use crate::error::GiteaError;
use crate::forge::{GiteaForge, GroupInfo, Resolved};
use crate::pod;
use crate::runner_names::strongest;
use crate::types::{JobStatus, WorkflowJob};
use crate::unmatched::{Taker, unmatched_jobs};

impl GiteaSession {
    /// What Gitea shows of the group and of `refs` (`ForgeSession::snapshot`).
    pub(super) async fn view(&self, ctx: &GroupContext, refs: &[RunnerRef]) -> Result<ForgeView, GiteaError> {
        let forge = &self.forge;
        let r = forge.resolve(ctx)?;
        // Before any request: deliveries for the group verify even while the forge is down.
        forge.remember(ctx, &r);
        // Every pass, not only when a runner is made: the group reports the bad key at once.
        GiteaForge::check_fixed_token(ctx, &r)?;
        let (version, raw_version) = forge.ensure_ready(&r).await?;
        let (jobs, fetched_at) = forge.jobs(&r).await?;
        let group = &ctx.key.name;
        let serves = |labels: &[String]| {
            r.labels.matches(labels) && (!labels.is_empty() || version.empty_runs_on_is_demand())
        };
        // What webhooks told since the listing was fetched (nothing without webhooks).
        let announced = forge.announced_view(&r.listing, &ctx.key.name, fetched_at, &jobs, serves);
        let mut queued = announced.unlisted_queued;
        // Runners the listing shows working: their jobs are not counted as queued.
        let mut working: BTreeSet<&str> = BTreeSet::new();
        let mut waiting: Vec<WaitingJob> = announced
            .unlisted
            .iter()
            .map(|(id, queued_at, labels)| WaitingJob {
                id: id.to_string(),
                queued_at: *queued_at,
                labels: labels.clone(),
                binding: None,
            })
            .collect();
        let mut identities = BTreeMap::new();
        for job in jobs.iter() {
            match job.status {
                JobStatus::Queued if serves(&job.labels) && !announced.taken.contains(&job.id) => {
                    queued = queued.saturating_add(1);
                    waiting.push(WaitingJob {
                        id: job.id.to_string(),
                        queued_at: job.created_at,
                        labels: job.labels.clone(),
                        binding: None,
                    });
                }
                JobStatus::InProgress => {
                    working.insert(job.runner_name.as_str());
                    if refs.iter().any(|r| r.name == job.runner_name) {
                        identities.insert(job.runner_name.clone(), job.identity());
                    }
                }
                _ => {}
            }
        }
        // Deliveries name a runner's job before a listing shows it in progress.
        for (runner, identity) in &announced.identities {
            if refs.iter().any(|r| &r.name == runner) {
                identities
                    .entry(runner.clone())
                    .or_insert_with(|| identity.clone());
            }
        }
        let unmatched = forge.unmatched_of(ctx, &r, &jobs, fetched_at);
        let listing = forge.runners(&r, r.interval).await?;
        let runners = &listing.value.runners;
        let mut states = BTreeMap::new();
        for rr in refs {
            let mut state = ForgeRunnerState::Unknown;
            for x in runners.iter().filter(|x| x.name == rr.name) {
                let s = if x.busy {
                    ForgeRunnerState::Busy
                } else if x.is_online() {
                    ForgeRunnerState::Idle
                } else {
                    ForgeRunnerState::Offline
                };
                state = strongest(state, s);
            }
            if working.contains(rr.name.as_str()) {
                state = ForgeRunnerState::Busy;
            }
            if let Some(s) = announced.runners.get(&rr.name) {
                state = strongest(state, *s);
            }
            if state != ForgeRunnerState::Unknown {
                states.insert(rr.name.clone(), state);
            }
        }
        // Runners the listing shows working, or a delivery named: their jobs are not counted.
        let accounted: BTreeSet<String> = working
            .iter()
            .map(|n| (*n).to_owned())
            .chain(announced.runners.keys().cloned())
            .collect();
        let listed_rows = listed_rows(group, &listing);
        // This pass's listings are cached by now.
        forge.report_cache();
        Ok(ForgeView {
            waiting,
            // A listing older than a runner's take may still show its job queued: core's ledger
            // nets that out, knowing when the listing was fetched.
            waiting_jobs: queued,
            runners: states,
            listed_rows: Some(listed_rows),
            // Runner states come from a listing, not as they happen: an idle-looking runner may
            // have just taken a job, so surplus runners leave through the idle timeout.
            complete: false,
            facts: ForgeFacts {
                scale_set_id: None,
                forge_version: Some(raw_version),
            },
            job_identities: identities,
            // Gitea sends no rate-limit headers.
            budget: None,
            stranded: Default::default(),
            listed_at: Some(fetched_at),
            accounted,
            // A runner seen busy took its job by then (its own runner row, or a delivery).
            takes_by_success_only: false,
            unmatched,
            versions: pod::runner_versions(&ctx.group.spec),
        })
    }
}

/// The rows of `listing` named like the runners of `group`, offline (and not busy) or not, for
/// core's ghost rule. Gitea lists a runner offline from `Register` until its daemon's first
/// call (`Register` stamps no `last_online`), and at `scope: global` the listing holds every
/// runner of the instance, a same-named group's elsewhere too: an offline row alone is no ghost.
fn listed_rows(group: &str, listing: &Fetched<RunnerListing>) -> ListedRows {
    let (offline, online) = listing
        .value
        .runners
        .iter()
        .filter(|x| is_runner_name_of(group, &x.name))
        .partition::<Vec<_>, _>(|x| !x.is_online() && !x.busy);
    let names = |rows: Vec<&crate::types::Runner>| rows.into_iter().map(|x| x.name.clone()).collect();
    ListedRows {
        offline: names(offline),
        online: names(online),
        // The runner's own `Register` call makes a Gitea row: it carries no mark of ours.
        own: BTreeSet::new(),
        whole: listing.value.complete,
        listed_at: listing.at,
    }
}

impl GiteaForge {
    /// The queued jobs of the group's listing (fetched at `fetched_at`) no known group can
    /// take, counted for the group's namespace. The listing is scanned once for all its groups
    /// ([`Scans`]).
    fn unmatched_of(
        &self,
        ctx: &GroupContext,
        r: &Resolved<'_>,
        jobs: &[WorkflowJob],
        fetched_at: Instant,
    ) -> Vec<UnmatchedJob> {
        let scan = || match self.groups.lock() {
            Ok(groups) => {
                let takers = groups.values().map(|g| Taker {
                    url: g.listing.instance().url(),
                    scope: &g.scope,
                    labels: &g.labels,
                });
                unmatched_jobs(jobs, r.listing.instance().url(), takers)
            }
            // A poisoned map: report none rather than every job.
            Err(_) => Vec::new(),
        };
        let found = self.unmatched_scans.get_or_scan(&r.listing, fetched_at, scan);
        let ids = found.iter().map(|j| j.id.clone()).collect();
        self.unmatched.record(&self.metrics, &ctx.key, ids);
        found.as_ref().clone()
    }

    /// Notes the group's scope, labels, webhook Secret and listing for the webhook path and the
    /// unmatched-jobs scans; drops what only its previous listing used.
    fn remember(&self, ctx: &GroupContext, r: &Resolved<'_>) {
        let before = match self.groups.lock() {
            Ok(mut g) => g.insert(
                ctx.key.clone(),
                GroupInfo {
                    scope: r.scope.clone(),
                    labels: r.labels.clone(),
                    webhook_secret: ctx.webhook_secret.clone(),
                    listing: r.listing.clone(),
                },
            ),
            Err(_) => return,
        };
        let same_taker = before
            .as_ref()
            .is_some_and(|old| old.listing == r.listing && old.scope == r.scope && old.labels == r.labels);
        if !same_taker {
            // Which jobs no group can take may have changed.
            self.unmatched_scans.takers_changed();
        }
        if before.is_some_and(|old| old.listing != r.listing) {
            // New token, CA bundle, proxy or scope: what only the old one used goes.
            self.prune();
        }
    }
}
