//! Gitea Actions backend for forgerunner (Gitea 1.25 or newer).
//!
//! - [`GiteaForge`] implements `forgerunner_core::Forge`: queued-job polling at the group's
//!   scope (shared between groups), label matching, registration tokens, runner state and
//!   removal, the runner rows core tells ghosts from, re-running a killed runner's job (Gitea 1.26+).
//! - [`GiteaClient`] is the REST client underneath.
//! - [`verify_signature`] and [`parse_workflow_job`] serve the `workflow_job` webhook route.

pub mod cache;
pub mod client;
pub mod error;
pub mod forge;
mod forge_webhook;
pub mod labels;
pub mod pod;
pub mod pod_security;
mod profile;
mod release;
mod rerun;
mod runner_names;
pub mod scope;
mod session;
pub mod types;
mod unmatched;
pub mod validate;
pub mod version;
pub mod webhook;

pub use client::{ClientOptions, DeleteOutcome, GiteaClient, RunnerListing};
pub use error::GiteaError;
pub use forge::{GiteaForge, GiteaOptions};
pub use forge_webhook::MAX_SECRETS_PER_DELIVERY;
pub use labels::{LabelError, LabelSet, RunnerLabel, parse_label, parse_labels};
pub use scope::Scope;
pub use version::GiteaVersion;
pub use webhook::{WebhookError, WorkflowJobEvent, parse_workflow_job, sign, verify_signature};
