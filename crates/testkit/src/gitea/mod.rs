//! A fake Gitea (1.25/1.26 routes and JSON shapes) with simulated act_runner behaviour.
//!
//! - REST under `/api/v1`: `version`, `user`, and at the four scopes (`admin`, `orgs/{org}`,
//!   `user`, `repos/{owner}/{repo}`) the `actions/jobs` lists (status filters, `page`/`limit`,
//!   `total_count`, `X-Total-Count`, `Link`), `actions/runners` (list, get, delete) and
//!   `actions/runners/registration-token` (POST; GET too when the fake plays 1.25).
//! - The runner protocol under `/api/actions` (see [`runner_api`]); jobs are handed out by
//!   Gitea's rule: the oldest queued job in scope whose `runs-on` the runner's labels cover.
//! - Re-running one job (`POST /api/v1/repos/{owner}/{repo}/actions/runs/{run}/jobs/{job_id}/rerun`,
//!   Gitea 1.26+, see [`rerun`]) and failing a vanished runner's task as Gitea's
//!   `StopZombieTasks` does ([`GiteaFakeHandle::stop_zombie_task`]).
//! - `workflow_job` webhooks with Gitea's headers and HMAC signature.
//! - Gitea's fixed instance-wide registration token (`GITEA_RUNNER_REGISTRATION_TOKEN`,
//!   [`FakeConfig::runner_registration_token`]): the global token, so runners registered with
//!   it are global (owner 0, repo 0) whichever scope was meant, appear in no org/user/repo
//!   runner listing, and answer 404 to a scoped `DELETE`, as in Gitea 1.25/1.26.
//! - Runner listings in Gitea's order, `last_online DESC`, where every runner call but
//!   `Register` stamps `last_online`: a registered runner is offline until its daemon calls in,
//!   and pages shift under polling runners ([`GiteaFakeHandle::poll_after_runner_page`] puts a
//!   poll between two pages on cue).
//! - Fault injection and a request log ([`Fault`], [`LoggedRequest`]).
//! - [`runner_behaviour`]: a `ContainerBehaviour` playing an ephemeral Gitea Runner (register
//!   init container, then daemon).

pub mod control;
mod fake_server;
pub mod faults;
#[cfg(test)]
mod global_token_tests;
pub mod json;
pub mod model;
pub mod rerun;
pub mod runner;
pub mod runner_api;
mod server;
mod webhook;

pub use control::{ADMIN_TOKEN, Delivery, FakeConfig, GiteaFakeHandle};
pub use faults::{Fault, LoggedRequest, Repeated};
pub use model::{Conclusion, FakeJob, FakeRunner, FakeScope, JobState};
pub use rerun::{RerunRefusal, RerunRequest};
pub use runner::{
    REGISTRATION_TOKEN_FILE, RUNNER_IMAGE_PREFIXES, RunnerOptions, STATE_FILE, runner_behaviour,
};
