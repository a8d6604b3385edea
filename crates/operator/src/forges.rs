//! The forges enabled in this process, behind core's [`ForgeSet`].
//!
//! One field per forge, each behind its cargo feature, and a `match` in [`ForgeSet::get`].
//! `enum_dispatch` cannot implement a trait defined in another crate (core's `Forge`), and the
//! controller already takes `&dyn Forge`, so a plain match handing out trait objects is the
//! simplest dispatch that stays honest about which forges exist.

use std::sync::Arc;

use forgerunner_core::forge::{Forge, ReconcileTrigger};
use forgerunner_core::forge_hosts::addresses::AddressPolicy;
use forgerunner_core::metrics::Metrics;
use forgerunner_core::{Fence, ForgeKind};

use crate::controller::ForgeSet;

/// The backends this process serves; a forge compiled in but not enabled is `None`.
#[derive(Default)]
pub struct EnabledForges {
    #[cfg(feature = "github")]
    github: Option<forgerunner_github::GithubForge>,
    #[cfg(feature = "gitea")]
    gitea: Option<forgerunner_gitea::GiteaForge>,
    #[cfg(feature = "forgejo")]
    forgejo: Option<forgerunner_forgejo::ForgejoForge>,
}

impl EnabledForges {
    /// Builds a backend for each kind in `enabled`; config validation already refused kinds
    /// that are not compiled in, so those are skipped here.
    // `trigger` wakes groups: GitHub's listener, Gitea's webhooks, expired shared listings.
    #[cfg_attr(
        not(any(feature = "github", feature = "gitea", feature = "forgejo")),
        allow(unused_variables)
    )]
    /// `fence` keeps a deposed leader's GitHub listeners from starting or taking jobs;
    /// `addresses` is what every forge client may connect to
    /// (`forgeHosts.refusePrivateAddresses`); `listing_entries` is the one budget the Gitea and
    /// Forgejo backends' cached listings share (`listingCacheEntries`).
    #[cfg_attr(not(feature = "github"), allow(unused_variables))]
    pub fn new(
        enabled: &[ForgeKind],
        metrics: &Arc<Metrics>,
        trigger: &ReconcileTrigger,
        fence: &Fence,
        addresses: AddressPolicy,
        listing_entries: usize,
    ) -> Self {
        #[cfg_attr(
            not(any(feature = "github", feature = "gitea", feature = "forgejo")),
            allow(unused_mut)
        )]
        let mut set = EnabledForges::default();
        // One for the process, not one per backend: the budget bounds the listings of every
        // scope on every instance together.
        #[cfg_attr(not(any(feature = "gitea", feature = "forgejo")), allow(unused_variables))]
        let listing_memory = forgerunner_http::ListingMemory::new(listing_entries, metrics.clone());
        for kind in enabled {
            match kind {
                #[cfg(feature = "github")]
                ForgeKind::Github => {
                    let defaults = forgerunner_github::GithubOptions::default();
                    let opts = forgerunner_github::GithubOptions {
                        fence: fence.clone(),
                        http: forgerunner_github::client::HttpOptions {
                            addresses,
                            ..defaults.http.clone()
                        },
                        ..defaults
                    };
                    set.github = Some(forgerunner_github::GithubForge::with_options(
                        metrics.clone(),
                        trigger.clone(),
                        opts,
                    ));
                }
                #[cfg(feature = "gitea")]
                ForgeKind::Gitea => {
                    let opts = forgerunner_gitea::GiteaOptions {
                        client: forgerunner_gitea::ClientOptions {
                            addresses,
                            ..Default::default()
                        },
                        listing_memory: Some(listing_memory.clone()),
                        ..Default::default()
                    };
                    set.gitea = Some(forgerunner_gitea::GiteaForge::with_options(
                        metrics.clone(),
                        trigger.clone(),
                        opts,
                    ));
                }
                #[cfg(feature = "forgejo")]
                ForgeKind::Forgejo => {
                    // Poll-only: the trigger wakes a listing's groups when it expires.
                    let opts = forgerunner_forgejo::ForgejoOptions {
                        client: forgerunner_forgejo::ClientOptions {
                            addresses,
                            ..Default::default()
                        },
                        listing_memory: Some(listing_memory.clone()),
                        ..Default::default()
                    };
                    set.forgejo = Some(forgerunner_forgejo::ForgejoForge::with_options(
                        metrics.clone(),
                        trigger.clone(),
                        opts,
                    ));
                }
                #[allow(unreachable_patterns)]
                _ => {}
            }
        }
        set
    }

    /// Kinds that have a backend in this set.
    pub fn kinds(&self) -> Vec<ForgeKind> {
        ForgeKind::ALL
            .into_iter()
            .filter(|k| self.get(*k).is_some())
            .collect()
    }
}

impl ForgeSet for EnabledForges {
    fn enabled(&self) -> Vec<&dyn Forge> {
        ForgeKind::ALL.into_iter().filter_map(|k| self.get(k)).collect()
    }
}

impl EnabledForges {
    /// The backend of `kind`, if enabled.
    pub fn get(&self, kind: ForgeKind) -> Option<&dyn Forge> {
        match kind {
            #[cfg(feature = "github")]
            ForgeKind::Github => self.github.as_ref().map(|f| f as &dyn Forge),
            #[cfg(feature = "gitea")]
            ForgeKind::Gitea => self.gitea.as_ref().map(|f| f as &dyn Forge),
            #[cfg(feature = "forgejo")]
            ForgeKind::Forgejo => self.forgejo.as_ref().map(|f| f as &dyn Forge),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
}

/// Stops the background work of every forge in `set` (leadership lost, or process exit).
pub async fn shutdown_all(set: &dyn ForgeSet) {
    let stops = set.enabled().into_iter().map(|f| f.shutdown_all());
    futures::future::join_all(stops).await;
}

/// Every compiled forge with unregistered metrics and an open fence, for the spec-check tests.
#[cfg(test)]
pub(crate) fn all_for_tests() -> EnabledForges {
    let (trigger, _rx) = ReconcileTrigger::channel();
    EnabledForges::new(
        &forgerunner_core::ForgeKind::ALL,
        &Arc::new(Metrics::default()),
        &trigger,
        &forgerunner_core::fence::Fence::open(),
        AddressPolicy::default(),
        forgerunner_http::ListingMemory::DEFAULT_ENTRIES,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_enabled_forges_are_served() {
        let metrics = Arc::new(Metrics::default());
        let (trigger, _rx) = ReconcileTrigger::channel();
        let fence = Fence::open();
        let none = EnabledForges::new(&[], &metrics, &trigger, &fence, AddressPolicy::default(), 20_000);
        assert!(none.kinds().is_empty());
        for kind in crate::config::compiled_forges() {
            let one = EnabledForges::new(
                &[kind],
                &metrics,
                &trigger,
                &fence,
                AddressPolicy::default(),
                20_000,
            );
            assert_eq!(one.kinds(), vec![kind]);
            assert_eq!(one.get(kind).map(|f| f.kind()), Some(kind));
        }
    }
}
