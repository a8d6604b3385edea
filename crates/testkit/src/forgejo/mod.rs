//! A fake Forgejo (v7–v15 routes and JSON shapes, per `shared/reference/forgejo-actions.md`)
//! with a simulated forgejo-runner.
//!
//! - `/api/v1/version` and `/api/forgejo/v1/version`.
//! - Waiting-job lists `…/runners/jobs` at admin (old and v15 path), org, user and repo scope
//!   (v11+), with Forgejo's `labels` subset filter ([`labels`]), bare array or `null`.
//! - Registration tokens (GET only), and from v15 runner REST: create (`201 {id, uuid, token}`),
//!   list with paging headers in Forgejo's `last_online DESC` order (pages shift as runners
//!   call in; [`ForgejoFakeHandle::before_runner_page`] makes that deterministic), get, delete;
//!   runner `status` from last-online/last-active.
//! - `GET /api/v1/user`: the token's own user.
//! - Forgejo 14+'s concurrency-group queue: such jobs are listed `waiting` but handed to no
//!   runner ([`Model::held_by_concurrency`]).
//! - The runner RPC ([`runner_api`]), with `FetchSingleTask` by job handle (v15) and
//!   ephemeral runners deleted after their one task's final result.
//! - API tokens with scopes and owner rights ([`ADMIN_TOKEN`]); fault injection and a request
//!   log ([`Fault`], [`LoggedRequest`]).
//! - [`runner_behaviour`]: a `ContainerBehaviour` playing forgejo-runner for the two pod shapes
//!   the operator makes (see [`runner`]), with its start-up Docker check ([`config_check`]).

mod assign;
mod auth;
pub mod config_check;
pub mod control;
mod fake_server;
pub mod json;
pub mod labels;
pub mod model;
mod rest;
pub mod runner;
pub mod runner_api;
pub mod runner_args;
pub mod version;

pub use crate::forge_common::faults::{Fault, LoggedRequest};
pub use assign::{TaskUpdate, runner_status};
pub use config_check::SOCKET_NOT_FOUND;
pub use control::{ADMIN_LOGIN, ADMIN_TOKEN, FakeConfig, ForgejoFakeHandle, RunnerPageHook};
pub use model::{Conclusion, FakeJob, FakeRunner, FakeScope, FakeTask, JobSpec, JobStatus, Model};
pub use runner::{RUNNER_IMAGE_PREFIX, RunnerOptions, SIM_VERSION, runner_behaviour};
pub use runner_args::{PodShape, REGISTRATION_TOKEN_FILE, STATE_FILE, TOKEN_FILE, parse_pod};
pub use version::ForgejoVersion;
