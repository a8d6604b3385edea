//! `GithubForge`: the `Forge` implementation tying clients, scale sets, listeners and runners
//! together, with per-group state kept in memory (rebuilt from the cluster after a restart).
//! What a group does at GitHub is its session's (`session.rs`, its view in `snapshot.rs`).

mod classes;
mod ensure;
mod options;
mod session;
mod snapshot;
mod transports;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::forge::{
    ClusterRefs, ForgeProfile, ForgeSession, GroupKey, OutboundUrl, ReconcileTrigger, RunnerExit,
};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::validate::SpecViolation;
use forgerunner_core::{Forge, ForgeKind};

pub use self::classes::class_scale_set_name;
pub use self::options::GithubOptions;
use crate::client::GithubClient;
use crate::listener::Listener;
use crate::pod;
use crate::runner_downloads::SharedReleases;

/// The scale set a group uses, as last confirmed at the service.
#[derive(Clone, Debug)]
struct ScaleSetInfo {
    id: i64,
    name: String,
    runner_group: Option<String>,
    /// The labels last set (or found) at the service, the name among them.
    labels: Vec<String>,
}

#[derive(Default)]
struct GroupState {
    client: Option<(u64, Arc<GithubClient>)>,
    scale_set: Option<ScaleSetInfo>,
    listener: Option<Listener>,
    /// The scale sets of the spec's classes (and of classes removed whose sets are still in
    /// use), by class name.
    classes: BTreeMap<String, classes::ClassSet>,
}

impl GroupState {
    /// Forgets the scale set `id` (gone at the service) so the next pass makes it again.
    fn forget_set(&mut self, id: i64) {
        if self.scale_set.as_ref().is_some_and(|s| s.id == id) {
            self.scale_set = None;
        }
        for set in self.classes.values_mut() {
            if set.scale_set.as_ref().is_some_and(|s| s.id == id) {
                set.scale_set = None;
            }
        }
    }

    /// The ids of every scale set of the group this process knows.
    fn set_ids(&self) -> Vec<i64> {
        let classes = self.classes.values().filter_map(|c| c.scale_set.as_ref());
        self.scale_set.iter().chain(classes).map(|s| s.id).collect()
    }

    /// Takes out every listener of the group: its own set's and its classes'.
    fn take_listeners(&mut self) -> Vec<Listener> {
        let classes = self.classes.values_mut().filter_map(|c| c.listener.take());
        self.listener.take().into_iter().chain(classes).collect()
    }
}

/// How often a group is reconciled when the listener wakes nobody (a safety net: the listener
/// wakes the group's reconcile whenever the statistics change).
pub const RESYNC: std::time::Duration = std::time::Duration::from_secs(60);

/// The GitHub runner scale set backend.
#[derive(Clone)]
pub struct GithubForge(Arc<GithubShared>);

/// What a [`GithubForge`] and the sessions it opens share.
pub struct GithubShared {
    metrics: Arc<Metrics>,
    trigger: ReconcileTrigger,
    opts: GithubOptions,
    groups: Mutex<HashMap<GroupKey, Arc<tokio::sync::Mutex<GroupState>>>>,
    /// HTTP transports by (CA bundle, proxy), shared by the groups' clients.
    transports: Mutex<transports::Transports>,
    /// The runner release GitHub serves each scope, shared by the scope's groups.
    served: SharedReleases,
}

impl std::fmt::Debug for GithubForge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubForge").finish_non_exhaustive()
    }
}

impl std::ops::Deref for GithubForge {
    type Target = GithubShared;

    fn deref(&self) -> &GithubShared {
        &self.0
    }
}

impl GithubForge {
    /// A backend with default options; `trigger` wakes a group's reconcile after each poll.
    pub fn new(metrics: Arc<Metrics>, trigger: ReconcileTrigger) -> GithubForge {
        GithubForge::with_options(metrics, trigger, GithubOptions::default())
    }

    /// A backend with explicit options (tests use short timeouts and backoffs).
    pub fn with_options(
        metrics: Arc<Metrics>,
        trigger: ReconcileTrigger,
        opts: GithubOptions,
    ) -> GithubForge {
        GithubForge(Arc::new(GithubShared {
            metrics,
            trigger,
            opts,
            groups: Mutex::default(),
            transports: Mutex::default(),
            served: SharedReleases::default(),
        }))
    }

    fn entry(&self, key: &GroupKey) -> Arc<tokio::sync::Mutex<GroupState>> {
        let mut groups = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        groups.entry(key.clone()).or_default().clone()
    }

    /// Sets the cache gauge: transports and groups with state.
    fn report_cache(&self) {
        let transports = self
            .transports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        let groups = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        self.metrics
            .set_cache_entries("github", &[("clients", transports), ("groups", groups)]);
    }
}

/// What [`Forge::describe`] is made of; tests call them directly.
impl GithubForge {
    /// What the forge refuses in `spec` (the error side of [`Forge::describe`]).
    pub fn validate(&self, spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
        let mut out: Vec<SpecViolation> = spec
            .github
            .as_ref()
            .map(crate::validate::validate_github)
            .unwrap_or_default();
        out.extend(crate::validate::validate_classes(spec));
        out.extend(crate::runner_version::check(spec));
        out
    }

    /// What `spec` names in the cluster ([`ForgeProfile::cluster_refs`]).
    pub fn cluster_refs(&self, spec: &RunnerGroupSpec) -> ClusterRefs {
        ClusterRefs {
            credentials_secret: spec
                .github
                .as_ref()
                .map(|g| g.credentials.clone())
                .unwrap_or_default(),
            ca_bundle_config_map: spec.github.as_ref().and_then(|g| g.ca_bundle_config_map.clone()),
            webhook_secret: None,
        }
    }

    /// The URLs of `spec` the operator connects to ([`ForgeProfile::outbound_urls`]).
    pub fn outbound_urls(&self, spec: &RunnerGroupSpec) -> Vec<OutboundUrl> {
        let Some(gh) = spec.github.as_ref() else {
            return Vec::new();
        };
        // The API host (api.github.com for github.com, the same host for GHES) follows from
        // configUrl; the Actions service URL comes from GitHub's own answer.
        let mut urls = vec![OutboundUrl {
            field: "spec.github.configUrl",
            url: gh.config_url.clone(),
        }];
        urls.extend(gh.proxy_url.iter().map(|p| OutboundUrl {
            field: "spec.github.proxyUrl",
            url: p.clone(),
        }));
        urls
    }

    /// How long a group may go without a pass ([`ForgeProfile::resync_interval`]).
    pub fn resync_interval(&self, _spec: &RunnerGroupSpec) -> std::time::Duration {
        RESYNC
    }

    /// What the runner pods may do ([`ForgeProfile::runner_role_rules`]).
    pub fn runner_role_rules(&self, spec: &RunnerGroupSpec) -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
        crate::container_mode::runner_role_rules(spec)
    }

    /// What a failed runner's exit code means ([`ForgeProfile::runner_exits`]).
    pub fn runner_exit_meaning(&self, exit_code: i32) -> Option<RunnerExit> {
        // The default pod asks the runner to exit with this code when its version is deprecated.
        (exit_code == pod::RUNNER_EXIT_OUTDATED).then_some(RunnerExit::Outdated)
    }

    /// What a failed cleanup may leave ([`ForgeProfile::cleanup_hint`]).
    pub fn cleanup_hint(&self, spec: &RunnerGroupSpec) -> String {
        let name = spec
            .github
            .as_ref()
            .and_then(|g| g.scale_set_name.as_deref())
            .filter(|n| !n.trim().is_empty())
            .map_or_else(|| "named after the group".to_owned(), |n| format!("'{n}'"));
        let classes = if spec.classes.is_empty() {
            String::new()
        } else {
            " (and one per class, named after it with '-<class>')".to_owned()
        };
        format!(
            "the runner scale set {name}{classes} and its runners may remain at GitHub: delete them under \
             Settings → Actions → Runners of the configUrl's repository, organization or \
             enterprise (GitHub also drops ephemeral runners that never connect)"
        )
    }
}

#[async_trait]
impl Forge for GithubForge {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Github
    }

    fn describe(&self, spec: &RunnerGroupSpec) -> Result<ForgeProfile, Vec<SpecViolation>> {
        let violations = self.validate(spec);
        if !violations.is_empty() {
            return Err(violations);
        }
        Ok(ForgeProfile {
            cluster_refs: self.cluster_refs(spec),
            outbound_urls: self.outbound_urls(spec),
            resync_interval: self.resync_interval(spec),
            cleanup_hint: self.cleanup_hint(spec),
            runner_role_rules: self.runner_role_rules(spec),
            // The default pod asks the runner to exit with this code when its version is
            // deprecated.
            runner_exits: BTreeMap::from([(pod::RUNNER_EXIT_OUTDATED, RunnerExit::Outdated)]),
        })
    }

    fn open(&self, key: &GroupKey) -> Box<dyn ForgeSession> {
        Box::new(session::GithubSession::new(self.clone(), key.clone()))
    }

    async fn shutdown_all(&self) {
        let entries: Vec<_> = {
            let mut groups = self
                .groups
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            groups.drain().map(|(_, v)| v).collect()
        };
        let stops = entries.into_iter().map(|entry| async move {
            let listeners = entry.lock().await.take_listeners();
            futures::future::join_all(listeners.into_iter().map(Listener::stop)).await;
        });
        futures::future::join_all(stops).await;
        self.transports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        self.served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        self.report_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_deprecated_version_exit_code_means_outdated() {
        let (trigger, _rx) = ReconcileTrigger::channel();
        let forge = GithubForge::new(Arc::new(Metrics::default()), trigger);
        assert_eq!(
            forge.runner_exit_meaning(crate::RUNNER_EXIT_OUTDATED),
            Some(RunnerExit::Outdated)
        );
        for code in [0, 1, 2, 137, -1] {
            assert_eq!(forge.runner_exit_meaning(code), None, "exit code {code}");
        }
    }
}
