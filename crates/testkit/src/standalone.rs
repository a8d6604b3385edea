//! A standalone fake cluster for the `fake-cluster` binary: the fake API server, optionally the
//! cluster simulator beside it (`--simulate`), and optionally forge fakes whose runner images
//! the simulator plays (`--forges`), so the real `forgerunner` run against it gets runner pods
//! that register and take jobs.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::apiserver::{FakeApiError, FakeApiServer};
use crate::sim::{SimConfig, SimHandle, Simulator};

/// Image prefix the GitHub runner behaviour plays (`ghcr.io/actions/actions-runner:…`).
pub const GITHUB_RUNNER_IMAGE_PREFIX: &str = "ghcr.io/actions/";
/// Organisation the Gitea and Forgejo fakes are started with (the admin is a member).
pub const FAKE_ORG: &str = "acme";
/// Repository the Gitea and Forgejo fakes are started with.
pub const FAKE_REPO: &str = "acme/app";

/// A forge fake `fake-cluster --forges` can start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForgeFake {
    /// The GitHub scale-set emulator.
    Github,
    /// The Gitea fake.
    Gitea,
    /// The Forgejo fake.
    Forgejo,
}

/// A `--forges` entry that names no forge fake.
#[derive(Debug, thiserror::Error)]
#[error("unknown forge {0:?} (expected github, gitea or forgejo)")]
pub struct UnknownForge(String);

impl FromStr for ForgeFake {
    type Err = UnknownForge;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "github" => Ok(ForgeFake::Github),
            "gitea" => Ok(ForgeFake::Gitea),
            "forgejo" => Ok(ForgeFake::Forgejo),
            other => Err(UnknownForge(other.to_owned())),
        }
    }
}

/// What a RunnerGroup needs to reach one started forge fake.
#[derive(Clone, Debug)]
pub struct ForgeEndpoint {
    /// Which fake.
    pub forge: ForgeFake,
    /// `spec.github.configUrl`, or `spec.gitea.url` / `spec.forgejo.url`.
    pub url: String,
    /// The key of the credentials Secret the token goes under.
    pub secret_key: &'static str,
    /// The fake's admin token (a constant of the testkit, never a real credential).
    pub token: String,
}

impl fmt::Display for ForgeEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.forge {
            ForgeFake::Github => "github",
            ForgeFake::Gitea => "gitea",
            ForgeFake::Forgejo => "forgejo",
        };
        write!(
            f,
            "forge {name} url={} {}={}",
            self.url, self.secret_key, self.token
        )?;
        if self.forge != ForgeFake::Github {
            write!(f, " repo={FAKE_REPO}")?;
        }
        Ok(())
    }
}

/// Running forge fakes; they stop when this is dropped.
#[derive(Default)]
pub struct Forges {
    /// Where each fake listens.
    pub endpoints: Vec<ForgeEndpoint>,
    _github: Option<crate::github::E2eEmulator>,
    _gitea: Option<crate::gitea::GiteaFakeHandle>,
    _forgejo: Option<crate::forgejo::ForgejoFakeHandle>,
}

/// Starts the cluster simulator against `server`: a Job controller and a kubelet stand-in.
pub async fn simulate(server: &FakeApiServer, start_delay: Duration) -> Result<SimHandle, FakeApiError> {
    let client = server.client_as("fake-cluster-simulator")?;
    let sim = Simulator::start(
        client,
        SimConfig {
            start_delay,
            ..SimConfig::default()
        },
    );
    sim.wait_ready().await;
    Ok(sim)
}

/// Starts the asked forge fakes and lets `sim` play their runner images, each runner working
/// `work` per job.
pub async fn start_forges(sim: &SimHandle, which: &[ForgeFake], work: Duration) -> std::io::Result<Forges> {
    let mut forges = Forges::default();
    if which.contains(&ForgeFake::Github) {
        let emu = crate::github::start_emulator(crate::github::EmulatorOptions::default()).await;
        let opts = crate::github::RunnerOptions {
            work_time: work,
            ..Default::default()
        };
        sim.register_behaviour(
            GITHUB_RUNNER_IMAGE_PREFIX,
            crate::github::runner_behaviour(emu.emu.clone(), opts),
        );
        let token = emu.pat_secret_data().remove("github_token").unwrap_or_default();
        forges.endpoints.push(ForgeEndpoint {
            forge: ForgeFake::Github,
            url: emu.config_url(),
            secret_key: "github_token",
            token,
        });
        forges._github = Some(emu);
    }
    if which.contains(&ForgeFake::Gitea) {
        use crate::gitea::{ADMIN_TOKEN, FakeConfig, GiteaFakeHandle, RUNNER_IMAGE_PREFIXES, RunnerOptions};
        let fake = GiteaFakeHandle::start(FakeConfig::default()).await?;
        fake.add_org(FAKE_ORG, &["gitea_admin"]);
        fake.add_repo(FAKE_REPO);
        let behaviour = crate::gitea::runner_behaviour(
            fake.clone(),
            RunnerOptions {
                work,
                ..Default::default()
            },
        );
        for prefix in RUNNER_IMAGE_PREFIXES {
            sim.register_behaviour(prefix, behaviour.clone());
        }
        forges.endpoints.push(ForgeEndpoint {
            forge: ForgeFake::Gitea,
            url: fake.url(),
            secret_key: "token",
            token: ADMIN_TOKEN.to_owned(),
        });
        forges._gitea = Some(fake);
    }
    if which.contains(&ForgeFake::Forgejo) {
        use crate::forgejo::{
            ADMIN_LOGIN, ADMIN_TOKEN, FakeConfig, ForgejoFakeHandle, RUNNER_IMAGE_PREFIX, RunnerOptions,
        };
        let fake = ForgejoFakeHandle::start(FakeConfig::default()).await?;
        fake.add_org(FAKE_ORG, &[ADMIN_LOGIN]);
        fake.add_repo(FAKE_REPO);
        let opts = RunnerOptions {
            work,
            ..RunnerOptions::default()
        };
        sim.register_behaviour(
            RUNNER_IMAGE_PREFIX,
            crate::forgejo::runner_behaviour(fake.clone(), opts),
        );
        forges.endpoints.push(ForgeEndpoint {
            forge: ForgeFake::Forgejo,
            url: fake.url(),
            secret_key: "token",
            token: ADMIN_TOKEN.to_owned(),
        });
        forges._forgejo = Some(fake);
    }
    Ok(forges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forge_names_parse() {
        assert_eq!("gitea".parse::<ForgeFake>().ok(), Some(ForgeFake::Gitea));
        assert_eq!(" forgejo".parse::<ForgeFake>().ok(), Some(ForgeFake::Forgejo));
        assert!("gitlab".parse::<ForgeFake>().is_err());
    }
}
