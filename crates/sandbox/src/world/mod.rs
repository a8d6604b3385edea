//! A whole fake world for end-to-end runs: the fake API server, the cluster simulator, the
//! GitHub emulator, the Gitea fake and the Forgejo fake, wired so runner pods really take jobs
//! from the forges.
//!
//! The sandbox, the benchmark and end-to-end tests build on it; the operator itself runs apart
//! (see [`operator`]) and only sees a kubeconfig, exactly as it would on a real cluster.

pub mod cache_classes;
pub mod github_rest;
pub mod github_work;
pub mod groups;
pub mod node_loss;
pub mod operator;
mod progress;
pub mod watch;
pub mod workload;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use forgerunner_core::RunnerGroup;
use forgerunner_core::crd::ForgeKind;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, CustomResourceExt};

use forgerunner_testkit::apiserver::{FakeApiServer, ServerConfig, install_crypto_provider};
use forgerunner_testkit::forge_common::FakeForgeServer;
use forgerunner_testkit::forgejo::ForgejoFakeHandle;
use forgerunner_testkit::gitea::{FakeConfig, GiteaFakeHandle};
use forgerunner_testkit::github::{E2eEmulator, EmulatorOptions, start_emulator};
use forgerunner_testkit::sim::{SimConfig, SimError, SimHandle, Simulator};
use github_rest::GithubRest;
use github_work::GithubWork;

/// Label every runner Job of forgerunner carries.
pub const MANAGED_BY_SELECTOR: &str = "app.kubernetes.io/managed-by=forgerunner";
/// Label naming a runner Job's group.
pub const GROUP_LABEL: &str = "forgerunner.dev/group";
/// The repository the world creates for jobs at each forge that has repositories.
pub const WORLD_REPO: &str = "acme/app";
/// The Gitea repository the world creates for jobs.
pub const GITEA_REPO: &str = WORLD_REPO;
/// The Forgejo repository the world creates for jobs.
pub const FORGEJO_REPO: &str = WORLD_REPO;
/// The Forgejo version the world's fake plays unless told otherwise (a v15 instance: ephemeral
/// runners bound to a job handle).
pub const DEFAULT_FORGEJO_VERSION: &str = "15.0.3+gitea-1.22.0";

/// How the world is built.
#[derive(Clone, Debug)]
pub struct WorldOptions {
    /// Start the GitHub emulator.
    pub github: bool,
    /// Start the Gitea fake.
    pub gitea: bool,
    /// Start the Forgejo fake.
    pub forgejo: bool,
    /// What the Forgejo fake reports as its version (its major picks the routes it serves).
    pub forgejo_version: String,
    /// How long a simulated runner works on a job.
    pub work_time: Duration,
    /// Delay between a runner pod's creation and its container running.
    pub pod_start_delay: Duration,
    /// Long-poll hold of the GitHub emulator when idle.
    pub github_long_poll: Duration,
    /// Cancel and re-queue GitHub assignments no runner takes in time, as the real service
    /// does; `None` leaves assignments standing.
    pub github_reassign: Option<forgerunner_testkit::github::ReassignPolicy>,
    /// Serve GitHub's REST job re-run beside the emulator ([`github_rest`]): GitHub groups
    /// point at its front, and a job the operator re-runs is queued again.
    pub github_rest: bool,
}

impl Default for WorldOptions {
    fn default() -> Self {
        WorldOptions {
            github: true,
            gitea: true,
            forgejo: true,
            forgejo_version: DEFAULT_FORGEJO_VERSION.to_owned(),
            work_time: Duration::from_millis(300),
            pod_start_delay: Duration::from_millis(50),
            github_long_poll: Duration::from_secs(2),
            github_reassign: None,
            github_rest: false,
        }
    }
}

impl WorldOptions {
    /// The default world with only `forge`'s fake started.
    pub fn only(forge: ForgeKind) -> WorldOptions {
        WorldOptions {
            github: forge == ForgeKind::Github,
            gitea: forge == ForgeKind::Gitea,
            forgejo: forge == ForgeKind::Forgejo,
            ..WorldOptions::default()
        }
    }
}

/// Why building or driving the world failed.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    /// The fake API server failed.
    #[error("fake API server: {0}")]
    Api(#[from] forgerunner_testkit::apiserver::FakeApiError),
    /// A Kubernetes call failed.
    #[error("kubernetes call: {0}")]
    Kube(#[from] kube::Error),
    /// Local I/O (temp dir, kubeconfig) failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A wait ran past its deadline.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// The cluster simulator refused a control call.
    #[error("cluster simulator: {0}")]
    Sim(#[from] SimError),
    /// The operator did not report where it listens.
    #[error(transparent)]
    NotListening(#[from] operator::NotListening),
}

/// The running world; dropping it stops everything.
pub struct World {
    /// The fake Kubernetes API server.
    pub api: FakeApiServer,
    /// The cluster simulator.
    pub sim: SimHandle,
    /// A client of the fake API server (user agent `forgerunner-testkit`).
    pub client: kube::Client,
    /// The GitHub emulator, when started.
    pub github: Option<E2eEmulator>,
    /// GitHub's REST job re-run beside the emulator, when asked for.
    pub github_rest: Option<GithubRest>,
    /// How the simulated GitHub runners work, when the emulator is started.
    pub github_work: Option<Arc<GithubWork>>,
    /// The Gitea fake, when started.
    pub gitea: Option<GiteaFakeHandle>,
    /// The Forgejo fake, when started.
    pub forgejo: Option<ForgejoFakeHandle>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
    /// Stops the world's background tasks when the world is dropped.
    _stop: tokio_util::sync::DropGuard,
}

impl World {
    /// Starts the fakes, installs the RunnerGroup CRD and registers the runner behaviours.
    pub async fn start(opts: WorldOptions) -> Result<World, WorldError> {
        install_crypto_provider();
        let api = FakeApiServer::start_with(ServerConfig::default()).await?;
        let client = api.client()?;
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig)?;

        let sim = Simulator::start(
            client.clone(),
            SimConfig {
                start_delay: opts.pod_start_delay,
                ..SimConfig::default()
            },
        );
        let stop = tokio_util::sync::CancellationToken::new();
        let github = if opts.github {
            let emu = start_emulator(EmulatorOptions {
                long_poll: opts.github_long_poll,
                ..EmulatorOptions::default()
            })
            .await;
            let runner_opts = forgerunner_testkit::github::RunnerOptions {
                work_time: opts.work_time,
                ..Default::default()
            };
            let runners = Arc::new(forgerunner_testkit::github::GithubRunner::new(
                emu.emu.clone(),
                runner_opts,
            ));
            if let Some(policy) = opts.github_reassign {
                forgerunner_testkit::github::spawn_reassignment(runners.clone(), policy, stop.child_token());
            }
            let work = Arc::new(GithubWork::new(emu.emu.clone(), runners));
            sim.register_behaviour(groups::GITHUB_RUNNER_IMAGE, work.clone());
            Some((emu, work))
        } else {
            None
        };
        let github_rest = match &github {
            Some((emu, _)) if opts.github_rest => {
                Some(GithubRest::start(emu.emu.clone(), scaleset::testing::DEFAULT_PAT).await?)
            }
            _ => None,
        };
        let (github, github_work) = github.map_or((None, None), |(emu, work)| (Some(emu), Some(work)));
        let gitea = if opts.gitea {
            let fake = GiteaFakeHandle::start(FakeConfig::default()).await?;
            fake.add_org("acme", &["gitea_admin"]);
            fake.add_repo(GITEA_REPO);
            let runner_opts = forgerunner_testkit::gitea::RunnerOptions {
                work: opts.work_time,
                // Jobs' cache steps reach the cache servers the simulator plays.
                cache: sim.runner_cache(),
                ..Default::default()
            };
            let behaviour = forgerunner_testkit::gitea::runner_behaviour(fake.clone(), runner_opts);
            for prefix in groups::GITEA_RUNNER_IMAGES {
                sim.register_behaviour(prefix, behaviour.clone());
            }
            Some(fake)
        } else {
            None
        };
        let forgejo = if opts.forgejo {
            Some(start_forgejo(&sim, &opts).await?)
        } else {
            None
        };

        let world = World {
            api,
            sim,
            client,
            github,
            github_rest,
            github_work,
            gitea,
            forgejo,
            kubeconfig,
            _dir: dir,
            _stop: stop.drop_guard(),
        };
        world.install_crd().await?;
        world.sim.wait_ready().await;
        Ok(world)
    }

    /// The fake playing `forge`, when the world started it.
    pub fn forge(&self, forge: ForgeKind) -> Option<&dyn FakeForgeServer> {
        match forge {
            ForgeKind::Github => self.github.as_ref().map(|f| f as &dyn FakeForgeServer),
            ForgeKind::Gitea => self.gitea.as_ref().map(|f| f as &dyn FakeForgeServer),
            ForgeKind::Forgejo => self.forgejo.as_ref().map(|f| f as &dyn FakeForgeServer),
        }
    }

    /// The fake playing `forge`, or why there is none (the world started without it).
    pub(crate) fn started(&self, forge: ForgeKind) -> Result<&dyn FakeForgeServer, WorldError> {
        self.forge(forge)
            .ok_or_else(|| WorldError::Timeout(format!("a {} (world started without one)", fake_name(forge))))
    }

    /// Path of a kubeconfig pointing at the fake API server.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    async fn install_crd(&self) -> Result<(), WorldError> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        crds.create(&PostParams::default(), &RunnerGroup::crd()).await?;
        let groups: Api<RunnerGroup> = Api::all(self.client.clone());
        wait_until(
            Duration::from_secs(10),
            "the RunnerGroup CRD to be served",
            || async { groups.list(&ListParams::default().limit(1)).await.is_ok() },
        )
        .await
    }

    /// Creates a namespace.
    pub async fn create_namespace(&self, name: &str) -> Result<(), WorldError> {
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(())
    }

    /// Runner Jobs of forgerunner in `namespace`, optionally of one group.
    pub async fn runner_jobs(&self, namespace: &str, group: Option<&str>) -> Result<Vec<Job>, WorldError> {
        let selector = match group {
            Some(g) => format!("{MANAGED_BY_SELECTOR},{GROUP_LABEL}={g}"),
            None => MANAGED_BY_SELECTOR.to_owned(),
        };
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        Ok(jobs.list(&ListParams::default().labels(&selector)).await?.items)
    }

    /// A RunnerGroup as stored.
    pub async fn group(&self, namespace: &str, name: &str) -> Result<RunnerGroup, WorldError> {
        Ok(Api::<RunnerGroup>::namespaced(self.client.clone(), namespace)
            .get(name)
            .await?)
    }

    /// Waits until the operator has polled the group's forge once, so jobs queued next are new
    /// to it (a job already waiting at a process's first pass may have been seen by a
    /// predecessor, so its queue time is not measured).
    pub async fn wait_first_pass(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<(), WorldError> {
        wait_until(
            timeout,
            &format!("the first pass of {namespace}/{name}"),
            || async {
                self.group(namespace, name)
                    .await
                    .is_ok_and(|g| g.status.is_some_and(|s| s.last_poll_time.is_some()))
            },
        )
        .await
    }
}

/// What the world calls the fake playing `forge`, in its errors.
pub(crate) fn fake_name(forge: ForgeKind) -> &'static str {
    match forge {
        ForgeKind::Github => "GitHub emulator",
        ForgeKind::Gitea => "Gitea fake",
        ForgeKind::Forgejo => "Forgejo fake",
    }
}

/// Starts the Forgejo fake playing `opts.forgejo_version`, with the org and repository of
/// [`FORGEJO_REPO`], and lets the simulator play forgejo-runner for its runner pods.
async fn start_forgejo(sim: &SimHandle, opts: &WorldOptions) -> Result<ForgejoFakeHandle, WorldError> {
    use forgerunner_testkit::forgejo::{ADMIN_LOGIN, FakeConfig, RunnerOptions, runner_behaviour};
    let fake = ForgejoFakeHandle::start(FakeConfig::version(&opts.forgejo_version)).await?;
    let org = FORGEJO_REPO.split('/').next().unwrap_or(FORGEJO_REPO);
    fake.add_org(org, &[ADMIN_LOGIN]);
    fake.add_repo(FORGEJO_REPO);
    let runner_opts = RunnerOptions {
        work: opts.work_time,
        ..RunnerOptions::default()
    };
    sim.register_behaviour(
        groups::FORGEJO_RUNNER_IMAGE,
        runner_behaviour(fake.clone(), runner_opts),
    );
    Ok(fake)
}

/// Runs `main` to completion on a multi-threaded runtime: the body of a testkit executable's
/// `main`. A runtime that cannot start is reported on stderr and fails the process.
pub fn block_on_main(main: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(main),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Polls `check` every 20 ms until it returns true or `timeout` passes. A check that takes
/// longer (a read of a fake holding thousands of objects) is spaced out to four times its
/// duration, so the waiting harness does not crowd out the system it measures.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F) -> Result<(), WorldError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let started = Instant::now();
        if check().await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(WorldError::Timeout(what.to_owned()));
        }
        tokio::time::sleep(poll_pause(started.elapsed())).await;
    }
}

/// The pause after a check that took `cost`: 20 ms, or four times the cost when larger.
fn poll_pause(cost: Duration) -> Duration {
    (cost * 4).max(Duration::from_millis(20))
}
