//! GitHub side of the testkit: simulated ephemeral runners that take jobs from the `scaleset`
//! crate's emulator, and helpers to start that emulator for end-to-end tests.

mod emulator;
mod runner;

pub use emulator::{E2eEmulator, EmulatorOptions, start_emulator};
pub use runner::{GithubRunner, JitInfo, RunnerOptions, parse_jit_config, runner_behaviour};
