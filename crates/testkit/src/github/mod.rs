//! GitHub side of the testkit: simulated ephemeral runners that take jobs from the `scaleset`
//! crate's emulator, and helpers to start that emulator for end-to-end tests.

pub mod actions_front;
mod emulator;
mod fake_server;
mod rest_error;
pub mod rest_jobs;
pub mod routing;
mod runner;
pub mod runner_downloads;
mod view;

pub use emulator::{E2eEmulator, EmulatorOptions, start_emulator};
pub use runner::{
    GithubRunner, JitInfo, ReassignPolicy, Reassignments, RunnerOptions, parse_jit_config, runner_behaviour,
    spawn_reassignment,
};

/// The emulator types e2e tests inspect, re-exported so that test crates need no direct
/// `scaleset` dependency.
pub use scaleset::ScaleSetId;
pub use scaleset::testing::{Emulator, EmulatorState, Endpoint, Fault, JobState};
