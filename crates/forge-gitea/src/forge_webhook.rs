//! The webhook fast path of `GiteaForge`: which groups an event concerns, and waking them.

use std::time::Instant;

use forgerunner_core::forge::GroupKey;

use crate::forge::{GiteaForge, ListingKey, WebhookTarget, cell_for};
use crate::types::JobStatus;
use crate::webhook::WorkflowJobEvent;

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

    /// Refreshes the listings of `keys` (unless very recent) and reconciles them at once.
    ///
    /// A listing younger than `webhook_min_refresh` is kept, so a burst of deliveries costs
    /// few listings; but it may have been fetched just before the job this delivery announces.
    /// So once that minimum age has passed, listings still older than the delivery are dropped
    /// and the groups reconciled again: a delivery is never lost until the next poll.
    pub async fn wake(&self, keys: &[GroupKey]) {
        let received = Instant::now();
        let listings: Vec<ListingKey> = match self.groups.lock() {
            Ok(g) => keys
                .iter()
                .filter_map(|k| g.get(k).map(|i| i.listing.clone()))
                .collect(),
            Err(_) => Vec::new(),
        };
        let mut cells = Vec::new();
        for l in listings {
            let (jobs, runners) = (cell_for(&self.jobs, &l), cell_for(&self.runners, &l));
            jobs.expire_if_older(self.opts.webhook_min_refresh).await;
            runners.expire_if_older(self.opts.webhook_min_refresh).await;
            cells.push((jobs, runners));
        }
        for k in keys {
            self.trigger.wake(k.clone());
        }
        if cells.is_empty() {
            return;
        }
        let (trigger, keys, delay) = (self.trigger.clone(), keys.to_vec(), self.opts.webhook_min_refresh);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let mut stale = false;
            for (jobs, runners) in cells {
                stale |= jobs.expire_if_fetched_before(received).await;
                stale |= runners.expire_if_fetched_before(received).await;
            }
            if stale {
                for k in keys {
                    trigger.wake(k);
                }
            }
        });
    }
}
