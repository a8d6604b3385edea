//! Forgejo Actions backend for forgerunner (Forgejo 11 or newer; 15 or newer recommended).
//!
//! What each Forgejo version gets:
//! - **Forgejo 15+**: one ephemeral runner per waiting job. Each new runner is created over
//!   REST (`POST …/actions/runners {name, ephemeral: true}`) and bound to one waiting job by
//!   its `handle` (`forgejo-runner one-job --wait --handle …`), so it can take only that job.
//!   When no free job exists (a `minRunners` warm runner) the runner is unbound and takes any
//!   matching job. Runner states come from the runner list; runners that never got a job are
//!   deleted over REST.
//! - **Forgejo 11–14**: the registration-token path. Each pod registers with the scope's
//!   shared registration token (`forgejo-runner register`) and runs one job. Limits, stated
//!   plainly: there is no runner API before 15, so runners cannot be listed or deregistered
//!   (one offline runner row per job stays; Forgejo 12+ can delete them with
//!   `[cron.cleanup_offline_runners]`, off by default and, unless `GLOBAL_SCOPE_ONLY = false`,
//!   only for instance-wide runners; Forgejo 11 has no such job), their states are unknown (the oldest runners are reported busy up to the number of
//!   running jobs, so a runner at work is not idle-reaped), and a job may go to any runner
//!   with matching labels.
//! - **Forgejo 10 and older, or a server that is not Forgejo**: refused with a `Config`
//!   error that says what to do.
//!
//! Discovery polls `…/actions/runners/jobs?labels=…` at the group's scope (Forgejo has no
//! job-level webhook); one listing per (instance, scope, labels, token) and poll interval is
//! shared by every group that asks for it.
//!
//! The runner image is pinned to [`pod::RUNNER_IMAGE`] (`code.forgejo.org/forgejo/runner:12.8.2`,
//! the first runner with `one-job --handle` and `--token-url`); `spec.image` overrides it.

pub mod cache;
pub mod classes;
pub mod client;
pub mod error;
pub mod forge;
pub mod labels;
mod observe;
pub mod pod;
pub mod pod_security;
mod profile;
mod requests;
mod row_mark;
pub mod runner_id;
mod runner_versions;
pub mod scope;
mod session;
pub mod types;
pub mod validate;
pub mod version;

pub use client::{ClientOptions, DeleteOutcome, ForgejoClient};
pub use error::ForgejoError;
pub use forge::{ForgejoForge, ForgejoOptions};
pub use labels::{LabelSet, RunnerLabel, parse_labels};
pub use scope::Scope;
pub use version::{ForgejoVersion, Mode};
