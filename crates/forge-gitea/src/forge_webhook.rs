//! The webhook fast path of `GiteaForge`: which groups an event concerns, accounting the event
//! until the next listing, and waking the groups.
//!
//! A delivery never causes a listing. It is recorded against the cached listing of each
//! concerned scope ([`announced::Announced`]) and the groups reconcile at once on that listing
//! plus the announced jobs. So a scope costs one jobs listing per poll interval however many
//! deliveries arrive, and a new job still gets its runner within one reconcile.

mod announced;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use forgerunner_core::forge::{ForgeRunnerState, GroupKey};

use self::announced::{Announced, GroupView};
use crate::forge::{GiteaForge, ListingKey, WebhookTarget};
use crate::types::{JobStatus, WorkflowJob};
use crate::webhook::WorkflowJobEvent;

/// What the deliveries told, for the backend's `demand` and `runner_state`.
#[derive(Default)]
pub(crate) struct AnnouncedState {
    /// Per listing scope, the jobs announced since its cached listing.
    listings: HashMap<ListingKey, Announced>,
    /// Per group, the runner states of the view its last `demand` used, so that the
    /// `runner_state` of the same reconcile agrees with that demand even if a delivery arrives
    /// in between (a runner reported busy for a job still counted queued would be a duplicate).
    runners: HashMap<GroupKey, BTreeMap<String, ForgeRunnerState>>,
}

impl GiteaForge {
    /// Groups (seen by `demand`) that a `workflow_job` event concerns: in scope and, for a
    /// queued job, able to serve its labels. Verify the delivery with one of their
    /// `webhook_secret`s, then call [`GiteaForge::wake`].
    pub fn webhook_targets(&self, event: &WorkflowJobEvent) -> Vec<WebhookTarget> {
        let Ok(groups) = self.groups.lock() else {
            return Vec::new();
        };
        let mut out: Vec<WebhookTarget> = groups
            .iter()
            .filter(|(_, g)| event.in_scope(&g.scope))
            .filter(|(_, g)| event.action != JobStatus::Queued || g.labels.matches(&event.labels))
            .map(|(k, g)| WebhookTarget {
                key: k.clone(),
                webhook_secret: g.webhook_secret.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// Accounts a verified `event` for the listings of `keys` (the targets whose secret
    /// verified it) and, for a queued job, reconciles those groups at once.
    ///
    /// No listing is expired or fetched: the groups plan on the cached listing plus the jobs
    /// announced since it was fetched (see [`announced`] for the counting rules). Other
    /// actions only tell which runner took an announced job, so they wake nobody.
    pub fn wake(&self, event: &WorkflowJobEvent, keys: &[GroupKey]) {
        let received = Instant::now();
        let listings: HashSet<ListingKey> = match self.groups.lock() {
            Ok(g) => keys
                .iter()
                .filter_map(|k| g.get(k).map(|i| i.listing.clone()))
                .collect(),
            Err(_) => HashSet::new(),
        };
        if let Ok(mut state) = self.announced.lock() {
            for l in listings {
                state.listings.entry(l).or_default().record(event, received);
            }
        }
        if event.action == JobStatus::Queued {
            for k in keys {
                self.trigger.wake(k.clone());
            }
        }
    }

    /// Reconciles the groups on `listing` when it expires at `due` (one poll interval after
    /// its fetch started), so the next listing is one interval after the latest one.
    ///
    /// The reconciler requeues a group one interval after each pass, and a pass woken by a
    /// delivery (or a runner Job change) reuses the cached listing: without this, a job whose
    /// delivery was lost could wait almost two intervals.
    pub(crate) fn poll_again_at(&self, listing: &ListingKey, due: Instant) {
        let keys: Vec<GroupKey> = match self.groups.lock() {
            Ok(g) => g
                .iter()
                .filter(|(_, i)| &i.listing == listing)
                .map(|(k, _)| k.clone())
                .collect(),
            Err(_) => return,
        };
        if keys.is_empty() {
            return;
        }
        let trigger = self.trigger.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
            for k in keys {
                trigger.wake(k);
            }
        });
    }

    /// The deliveries' view for group `key` (named `group`, serving jobs when `serves` says
    /// so) on `jobs`, the listing of `listing` fetched at `fetched_at`; also forgets what that
    /// listing covers and keeps the view's runner states for [`GiteaForge::announced_runners`].
    pub(crate) fn announced_view(
        &self,
        key: &GroupKey,
        listing: &ListingKey,
        fetched_at: Instant,
        jobs: &[WorkflowJob],
        serves: impl Fn(&[String]) -> bool,
    ) -> GroupView {
        let Ok(mut state) = self.announced.lock() else {
            return GroupView::default();
        };
        let view = match state.listings.get_mut(listing) {
            Some(a) => {
                a.covered_by(fetched_at);
                if a.is_empty() {
                    GroupView::default()
                } else {
                    a.view(&key.name, fetched_at, jobs, serves)
                }
            }
            None => GroupView::default(),
        };
        if view.runners.is_empty() {
            state.runners.remove(key);
        } else {
            state.runners.insert(key.clone(), view.runners.clone());
        }
        view
    }

    /// Runner states of group `key` from the view its last `demand` used.
    pub(crate) fn announced_runners(&self, key: &GroupKey) -> BTreeMap<String, ForgeRunnerState> {
        self.announced
            .lock()
            .ok()
            .and_then(|s| s.runners.get(key).cloned())
            .unwrap_or_default()
    }

    /// Forgets every delivery (a new leader starts from nothing).
    pub(crate) fn forget_announced(&self) {
        if let Ok(mut s) = self.announced.lock() {
            *s = AnnouncedState::default();
        }
    }
}
