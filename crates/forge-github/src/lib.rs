//! GitHub runner scale set backend: PAT or GitHub App auth, the runner-registration token chain,
//! scale sets, an in-process long-poll listener per group and JIT-configured ephemeral runners.
//!
//! Entry point: [`GithubForge`], an implementation of [`forgerunner_core::Forge`].

pub mod auth;
pub mod backoff;
pub mod client;
pub mod config_url;
pub mod container_mode;
pub mod error;
pub mod forge;
pub mod listener;
pub mod pod;
pub mod rerun;
pub mod runner_downloads;
pub mod runner_version;
pub mod runners;
pub mod scale_set;
pub mod types;
pub mod validate;

pub use forge::{GithubForge, GithubOptions};
pub use pod::{DEFAULT_RUNNER_IMAGE, JIT_CONFIG_KEY, RUNNER_EXIT_OUTDATED};

/// Runner Job annotation holding the service-side runner id (set from the JIT config reply).
pub const RUNNER_ID_ANNOTATION: &str = "forgerunner.dev/runner-id";
/// Runner Job annotation holding the scale set id the runner registered in.
pub const SCALE_SET_ID_ANNOTATION: &str = "forgerunner.dev/scale-set-id";
