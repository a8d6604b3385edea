//! `spec.containerMode` for Gitea: `dind` or no mode; a `kubernetes` mode is an invalid spec,
//! which the reconciler reports as `Ready=False` with reason `InvalidSpec`.

use std::sync::Arc;

use forgerunner_core::forge::ReconcileTrigger;
use forgerunner_core::metrics::Metrics;

use super::tests::harness;
use crate::forge::GiteaForge;

// Docker labels need no mode (the image or the template may bring the daemon), and a kubernetes
// mode is the one violation of a group with them.
forgerunner_http::container_mode_tests!(
    harness(),
    GiteaForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0),
    no_mode: &["ubuntu-latest:docker://node:22"],
    kubernetes: &["ubuntu-latest:docker://node:22"],
);
