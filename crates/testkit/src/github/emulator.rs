//! Starting the `scaleset` emulator for end-to-end tests, with what a test needs to point a
//! RunnerGroup at it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scaleset::ScaleSetId;
use scaleset::testing::{DEFAULT_PAT, Emulator};

use crate::forge_common::http::lock;

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
    /// Scale sets by name, as far as looked up: a name is resolved once rather than on every
    /// job queued (a snapshot of the emulator costs tens of milliseconds at 1,000 scale sets),
    /// and is still known after its scale set is deleted.
    scale_sets: Arc<Mutex<HashMap<String, ScaleSetId>>>,
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

    /// The scale set named `name`, if the emulator has (or had) one.
    pub fn scale_set_named(&self, name: &str) -> Option<ScaleSetId> {
        if let Some(id) = lock(&self.scale_sets).get(name) {
            return Some(*id);
        }
        let state = self.emu.state();
        let mut known = lock(&self.scale_sets);
        for s in &state.scale_sets {
            known.insert(s.name.clone(), s.id);
        }
        known.get(name).copied()
    }

    /// Scale set names by id: those of `current` and every one looked up before.
    pub(crate) fn scale_set_names<'a>(
        &self,
        current: impl IntoIterator<Item = &'a scaleset::RunnerScaleSet>,
    ) -> HashMap<ScaleSetId, String> {
        let mut names: HashMap<ScaleSetId, String> = lock(&self.scale_sets)
            .iter()
            .map(|(name, id)| (*id, name.clone()))
            .collect();
        names.extend(current.into_iter().map(|s| (s.id, s.name.clone())));
        names
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
        scale_sets: Arc::default(),
    }
}
