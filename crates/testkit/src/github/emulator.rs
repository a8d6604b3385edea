//! Starting the `scaleset` emulator for end-to-end tests, with what a test needs to point a
//! RunnerGroup at it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use scaleset::testing::{DEFAULT_PAT, Emulator};

/// Settings of an e2e emulator.
#[derive(Clone, Debug)]
pub struct EmulatorOptions {
    /// How long an idle long poll is held before 202 (GitHub: ~50 s).
    pub long_poll: Duration,
    /// Extra runner groups besides `Default`.
    pub runner_groups: Vec<String>,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            long_poll: Duration::from_secs(2),
            runner_groups: Vec::new(),
        }
    }
}

/// A started emulator plus the values a RunnerGroup and its Secret need.
#[derive(Clone, Debug)]
pub struct E2eEmulator {
    /// The emulator (shared with runner behaviours).
    pub emu: Arc<Emulator>,
}

impl E2eEmulator {
    /// `spec.github.configUrl` for a group served by this emulator.
    pub fn config_url(&self) -> String {
        self.emu.config_url()
    }

    /// `stringData` of a credentials Secret the emulator accepts.
    pub fn pat_secret_data(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("github_token".to_string(), DEFAULT_PAT.to_string())])
    }
}

/// Starts an emulator on a loopback ephemeral port.
pub async fn start_emulator(opts: EmulatorOptions) -> E2eEmulator {
    let mut builder = Emulator::builder().long_poll(opts.long_poll);
    for g in opts.runner_groups {
        builder = builder.runner_group(g);
    }
    E2eEmulator {
        emu: Arc::new(builder.start().await),
    }
}
