//! The webhook fast path of `GiteaForge`: which groups an event concerns, and waking them.

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
    pub async fn wake(&self, keys: &[GroupKey]) {
        let listings: Vec<ListingKey> = match self.groups.lock() {
            Ok(g) => keys
                .iter()
                .filter_map(|k| g.get(k).map(|i| i.listing.clone()))
                .collect(),
            Err(_) => Vec::new(),
        };
        for l in listings {
            cell_for(&self.jobs, &l)
                .expire_if_older(self.opts.webhook_min_refresh)
                .await;
            cell_for(&self.runners, &l)
                .expire_if_older(self.opts.webhook_min_refresh)
                .await;
        }
        for k in keys {
            self.trigger.wake(k.clone());
        }
    }
}
