//! Jobs reserved for one runner each (pure), where the forge binds a new runner to one waiting
//! job ([`WaitingJob::binding`]: Forgejo 15's job handle; a runner bound to a job runs that job
//! or none).
//!
//! The book picks the job a new runner is bound to: the oldest waiting job of its class that no
//! live runner, no creation in flight and no recent end of a runner already accounts for. And it
//! says which waiting jobs need no new runner although the forge's listing, which is cached and
//! shared and so may be older than what the cluster shows, still lists them waiting:
//!
//! - a job whose bound runner succeeded: the runner ran it (kept while a listing shows it);
//! - a job whose bound runner failed after the listing was fetched: the runner may have taken
//!   it first, and only a newer listing can tell;
//! - a job the forge withholds: a bound runner waited connected long enough to get it and did
//!   not ([`RemoveOutcome::Withheld`](crate::forge::RemoveOutcome::Withheld)). No runner is made
//!   for it for a while, doubling with each such removal, so it does not get runner after
//!   runner that idles out;
//! - a job whose bound runner the forge shows at work or done.
//!
//! Runners bound to a job are netted here by their binding, so core's other book of takes
//! ([`super::TakenSinceListing`]) leaves them out (`ForgeView::accounted`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::crd::RunnerGroupSpec;
use crate::forge::{ForgeRunnerState, ForgeView, RunnerRef, WaitingJob};
use crate::plan::RunnerPhase;
use crate::runner_class::{ClassMatch, group_label_names, is_for};

/// A job handed to a new runner is trusted this long without the runner's Job being seen (the
/// cluster store may lag, or the Job creation failed without the pass hearing of it).
const HANDED_OUT_GRACE: Duration = Duration::from_secs(120);
/// How long the failure of a bound runner is remembered.
const FAILED_MEMORY: Duration = Duration::from_secs(3600);
/// A withheld job's backoff is forgotten this long after the last removal (a listing that no
/// longer shows the job waiting forgets it sooner).
const WITHHELD_MEMORY: Duration = Duration::from_secs(6 * 3600);
/// At most this many withheld jobs are remembered per group; the oldest go first.
const MAX_WITHHELD: usize = 256;

/// How withheld jobs back off: the first wait, and the longest one (each removal doubles it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WithheldBackoff {
    /// Wait after the first removal.
    pub first: Duration,
    /// Longest wait.
    pub max: Duration,
}

impl Default for WithheldBackoff {
    /// A minute, doubling up to half an hour.
    fn default() -> Self {
        WithheldBackoff {
            first: Duration::from_secs(60),
            max: Duration::from_secs(30 * 60),
        }
    }
}

/// A waiting job the forge did not hand to a connected runner bound to it.
#[derive(Clone, Copy, Debug)]
struct Withheld {
    /// Removals of runners bound to it so far.
    strikes: u32,
    /// No new runner is made for it before this.
    until: Instant,
    /// The last removal.
    at: Instant,
}

/// One group's reserved jobs, by binding.
#[derive(Debug, Default)]
pub struct Reservations {
    /// Jobs handed to a new runner whose Job the store does not show yet → (runner, when).
    handed_out: BTreeMap<String, (String, Instant)>,
    /// Jobs bound to live (pending or running) runners, from their Jobs.
    live: BTreeSet<String>,
    /// Jobs whose bound runner succeeded; kept while a listing still shows them waiting.
    finished: BTreeSet<String>,
    /// Jobs whose bound runner failed, with when a pass first saw it.
    failed: BTreeMap<String, Instant>,
    /// Jobs the forge withholds, with their backoff.
    withheld: BTreeMap<String, Withheld>,
    /// How withheld jobs back off.
    backoff: WithheldBackoff,
}

impl Reservations {
    /// An empty book whose withheld jobs back off by `backoff`.
    pub fn with_backoff(backoff: WithheldBackoff) -> Reservations {
        Reservations {
            backoff,
            ..Reservations::default()
        }
    }

    /// Takes in the group's runners as the cluster shows them now.
    pub fn observe(&mut self, refs: &[RunnerRef], now: Instant) {
        self.live = refs
            .iter()
            .filter(|r| r.phase.is_active())
            .filter_map(|r| r.binding().map(str::to_owned))
            .collect();
        // A Job the store shows speaks for its job from now on (alive: `live`; ended: free
        // again, or finished below). A runner created in flight is not in the store yet, so
        // its handout stands until the store shows the Job: dropping it earlier would free the
        // job for a second runner.
        let stored: BTreeSet<&str> = refs
            .iter()
            .filter(|r| r.stored)
            .map(|r| r.name.as_str())
            .collect();
        self.handed_out.retain(|_, (name, at)| {
            !stored.contains(name.as_str()) && now.duration_since(*at) < HANDED_OUT_GRACE
        });
        for r in refs {
            match (r.phase, r.binding()) {
                (RunnerPhase::Failed, Some(b)) => {
                    self.failed.entry(b.to_owned()).or_insert(now);
                }
                (RunnerPhase::Succeeded, Some(b)) => {
                    self.finished.insert(b.to_owned());
                }
                _ => {}
            }
        }
        self.failed
            .retain(|_, at| now.duration_since(*at) < FAILED_MEMORY);
    }

    /// Nets `view` for the group's bound runners `refs` (taken in by [`Reservations::observe`]
    /// first): takes out of `view.waiting_jobs` and `view.waiting` the jobs that need no new
    /// runner (the module docs say which), and adds every bound runner to `view.accounted`.
    /// Forgets finished and withheld jobs that a listing fetched since no longer shows waiting.
    pub fn net(&mut self, view: &mut ForgeView, refs: &[RunnerRef], now: Instant) {
        let listed_at = view.listed_at.unwrap_or(now);
        let waiting: BTreeSet<&str> = view.waiting.iter().filter_map(|j| j.binding.as_deref()).collect();
        self.finished.retain(|b| waiting.contains(b.as_str()));
        self.withheld.retain(|b, w| {
            (waiting.contains(b.as_str()) || listed_at <= w.at) && now.duration_since(w.at) < WITHHELD_MEMORY
        });
        let discounted = waiting
            .iter()
            .filter(|b| self.discounted(b, listed_at, now))
            .count();
        // The listing may be older than the runners' states: a job still listed waiting whose
        // bound runner is at work (or done) waits for no new runner.
        let at_work = refs
            .iter()
            .filter(|r| {
                matches!(
                    view.runners.get(&r.name),
                    Some(ForgeRunnerState::Busy | ForgeRunnerState::Finished)
                )
            })
            .filter_map(RunnerRef::binding)
            .filter(|b| waiting.contains(b) && !self.finished.contains(*b))
            .collect::<BTreeSet<&str>>()
            .len();
        let netted = u32::try_from(discounted.saturating_add(at_work)).unwrap_or(u32::MAX);
        view.waiting_jobs = view.waiting_jobs.saturating_sub(netted);
        // The listed jobs leave the discounted ones out, so that the class each listed job
        // wants is the class of a runner to make.
        view.waiting.retain(|j| {
            j.binding
                .as_deref()
                .is_none_or(|b| !self.discounted(b, listed_at, now))
        });
        view.accounted.extend(
            refs.iter()
                .filter(|r| r.binding().is_some())
                .map(|r| r.name.clone()),
        );
    }

    /// Reserves for the new runner `runner` of `class` (`None`: one of the group's own) the
    /// oldest waiting job of `view` (netted by [`Reservations::net`]) that such a runner can
    /// take and that is free; `None` when the forge binds no runner to a job, or no such job is
    /// free (the runner then takes any job its labels match). Only a job of the runner's class:
    /// a forge hands a bound runner its job only if the runner's labels hold every label the
    /// job asks for (Forgejo: `models/actions/task.go` `CreateTaskForRunner`), so a runner
    /// bound to another class's job could wait forever.
    pub fn reserve(
        &mut self,
        spec: &RunnerGroupSpec,
        view: &ForgeView,
        class: Option<&str>,
        runner: &str,
        now: Instant,
    ) -> Option<WaitingJob> {
        if view.waiting.iter().all(|j| j.binding.is_none()) {
            return None;
        }
        let (classes, group) = (ClassMatch::of(spec), group_label_names(spec));
        let listed_at = view.listed_at.unwrap_or(now);
        let job = view.waiting.iter().find(|j| {
            j.binding
                .as_deref()
                .is_some_and(|b| !b.is_empty() && !self.taken(b, listed_at, now))
                && is_for(&classes, &group, &j.labels, class)
        })?;
        let binding = job.binding.clone()?;
        self.handed_out.insert(binding, (runner.to_owned(), now));
        Some(job.clone())
    }

    /// Frees the job `binding` reserved for a runner that was not made.
    pub fn release(&mut self, binding: &str) {
        self.handed_out.remove(binding);
    }

    /// Records that the forge withheld the job `binding` from a runner bound to it that waited
    /// connected long enough to get it ([`crate::forge::RemoveOutcome::Withheld`]): no runner is
    /// made for it for a while, doubling with each such removal.
    pub fn withhold(&mut self, binding: &str, now: Instant) {
        let strikes = self
            .withheld
            .get(binding)
            .map_or(1, |w| w.strikes.saturating_add(1));
        let factor = 1u32
            .checked_shl(strikes.saturating_sub(1).min(16))
            .unwrap_or(u32::MAX);
        let wait = self.backoff.first.saturating_mul(factor).min(self.backoff.max);
        self.withheld.insert(
            binding.to_owned(),
            Withheld {
                strikes,
                until: now + wait,
                at: now,
            },
        );
        while self.withheld.len() > MAX_WITHHELD {
            let oldest = self
                .withheld
                .iter()
                .min_by_key(|(_, w)| w.at)
                .map(|(b, _)| b.clone());
            match oldest {
                Some(b) => self.withheld.remove(&b),
                None => break,
            };
        }
    }

    /// Whether the forge withholds the job `binding` now ([`Reservations::withhold`]).
    pub fn is_withheld(&self, binding: &str, now: Instant) -> bool {
        self.withheld.get(binding).is_some_and(|w| now < w.until)
    }

    /// Whether the listed waiting job `binding` (in a listing fetched at `listed_at`) needs no
    /// new runner now: its bound runner finished, or failed after the listing was fetched, or
    /// the forge withholds it.
    fn discounted(&self, binding: &str, listed_at: Instant, now: Instant) -> bool {
        self.finished.contains(binding)
            || self.failed.get(binding).is_some_and(|at| listed_at < *at)
            || self.is_withheld(binding, now)
    }

    /// Whether `binding` may not be handed to a new runner: discounted, or bound to a live
    /// runner or a creation in flight.
    fn taken(&self, binding: &str, listed_at: Instant, now: Instant) -> bool {
        self.discounted(binding, listed_at, now)
            || self.live.contains(binding)
            || self.handed_out.contains_key(binding)
    }
}

#[cfg(test)]
mod tests;
