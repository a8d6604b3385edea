//! The group as Forgejo shows it (`ForgeSession::snapshot`): the waiting and running jobs its
//! labels and classes filter (one listing per scope, labels and poll interval, shared by its
//! groups) and, on 15+, its runners' rows (11–14 list no runners: the running jobs tell how many
//! are busy). Core nets the jobs for the runners bound to them (on 15+, each waiting job's
//! handle is its binding) and for runners that took a job after the listing, and tells the ghosts
//! among the rows named like the group's runners.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use forgerunner_core::forge::{ForgeFacts, ForgeView, GroupContext, RunnerRef, WaitingJob};

use super::ForgejoSession;
use crate::error::ForgejoError;
use crate::forge::{ForgejoForge, Resolved};
use crate::observe::{self, Listing, RunnerRows};
use crate::runner_versions;
use crate::types::Runner;
use crate::version::Mode;

/// At most this many runners are looked up by id per pass when a paged runner listing did
/// not show them; the rest stay unknown until a later pass (unknown is safe: such a runner
/// still covers demand and still times out).
const MAX_LOOKUPS: usize = 16;

impl ForgejoSession {
    /// What Forgejo shows of the group and of `refs` (`ForgeSession::snapshot`).
    pub(super) async fn view(
        &self,
        ctx: &GroupContext,
        refs: &[RunnerRef],
    ) -> Result<ForgeView, ForgejoError> {
        let forge = &self.forge;
        let r = forge.resolve(ctx).await?;
        let jobs = forge.jobs(&r).await?;
        let jobs_listing = Listing {
            rows: &jobs.value,
            at: jobs.at,
        };
        let mut versions = runner_versions::of_image(&ctx.group.spec);
        let seen = match r.mode {
            Mode::Ephemeral => {
                let runners = forge.runners(&r, r.interval).await?;
                let listed = &runners.value;
                // A paged listing may have skipped live runners (its order shifts as runners
                // call in): ask for the missing ones by id before calling any of them gone.
                let (found, gone) = if listed.whole {
                    (Vec::new(), BTreeSet::new())
                } else {
                    forge
                        .look_up(&r, &observe::unlisted_ids(refs, &listed.rows))
                        .await
                };
                let mut rows: Cow<'_, [Runner]> = Cow::Borrowed(&listed.rows);
                if !found.is_empty() {
                    rows.to_mut().extend(found);
                }
                runner_versions::report_listed(&mut versions, refs, &rows);
                let mark = crate::row_mark::of_group(&ctx.uid);
                observe::view_v15(
                    observe::Group {
                        name: &ctx.key.name,
                        claim: &r.claim,
                        mark: mark.as_deref(),
                    },
                    refs,
                    jobs_listing,
                    RunnerRows {
                        rows: &rows,
                        at: runners.at,
                        whole: listed.whole,
                        gone: &gone,
                    },
                )
            }
            Mode::RegistrationToken => observe::view_token(&r.claim, refs, jobs_listing),
        };
        // This pass's listings are cached by now.
        forge.report_cache();
        // Forgejo's job listing carries no queue time: only the stages from first seen on.
        // On 15+ a runner is bound to one job by its handle (`forgejo-runner one-job --handle`).
        let binds = r.mode == Mode::Ephemeral;
        let waiting = observe::waiting(&jobs.value, &r.claim)
            .into_iter()
            .map(|j| WaitingJob {
                id: j.id.to_string(),
                queued_at: None,
                labels: j.runs_on.clone(),
                binding: binds.then(|| j.handle.clone()),
            })
            .collect();
        Ok(ForgeView {
            waiting,
            waiting_jobs: seen.waiting_jobs,
            runners: seen.runners,
            listed_rows: seen.listed_rows,
            // Runner states come from listings, not as they happen: an idle-looking runner may
            // have just taken a job, so surplus runners leave through the idle timeout.
            complete: false,
            facts: ForgeFacts {
                scale_set_id: None,
                forge_version: Some(r.raw_version),
            },
            // Bound runners carry their job from creation on; Forgejo sends no rate-limit
            // headers.
            job_identities: BTreeMap::new(),
            budget: None,
            stranded: seen.stranded,
            // Core's ledger nets runners bound to a job by its handle, and those bound to none
            // that succeeded after the jobs listing. Only a success dates a take: 11–14 guess
            // busy runners from the count of running jobs.
            listed_at: Some(jobs.at),
            accounted: BTreeSet::new(),
            takes_by_success_only: true,
            // The jobs listing is filtered by the group's and its classes' labels on the server
            // (`labels` query, `GetActionRunJobs` in `routers/api/v1/shared/runners.go`): jobs
            // no group matches are never in it. Naming them needs an unfiltered listing per scope, not made yet.
            unmatched: Vec::new(),
            // Forgejo 11–14 list no runners: the image alone tells a release.
            versions,
        })
    }
}

impl ForgejoForge {
    /// Looks up by id (at most [`MAX_LOOKUPS`] per pass) our active runners that a paged
    /// listing did not show: the rows found, and the ids Forgejo no longer knows (404). A lookup
    /// that fails proves nothing: that runner stays unknown for this pass.
    async fn look_up(&self, r: &Resolved<'_>, ids: &[i64]) -> (Vec<Runner>, BTreeSet<i64>) {
        let (mut found, mut gone) = (Vec::new(), BTreeSet::new());
        for id in ids.iter().take(MAX_LOOKUPS) {
            match r.instance.client.get_runner(r.version, &r.scope, *id).await {
                Ok(Some(row)) => found.push(row),
                Ok(None) => {
                    gone.insert(*id);
                }
                Err(e) => {
                    tracing::debug!(runner_id = id, error = %e, "could not look up a Forgejo runner");
                }
            }
        }
        (found, gone)
    }
}
