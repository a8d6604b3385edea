//! RunnerGroups (and their credential Secrets) pointed at the world's forge fakes.

use std::collections::BTreeMap;
use std::time::Duration;

use forgerunner_core::RunnerGroup;
use forgerunner_core::crd::ForgeKind;
use forgerunner_core::testing::RunnerGroupBuilder;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};

use super::workload::ForgeTarget;
use super::{GITEA_REPO, World, WorldError, wait_until};
use forgerunner_testkit::forge_common::FakeForgeServer;

/// Image prefix of the default GitHub runner image; the simulated runner plays it.
pub const GITHUB_RUNNER_IMAGE: &str = "ghcr.io/actions/";
/// Image prefixes of the Gitea runner images (Gitea Runner ≥ 1.0 and the legacy act_runner);
/// the simulated runner plays both.
pub const GITEA_RUNNER_IMAGES: [&str; 2] = forgerunner_testkit::gitea::RUNNER_IMAGE_PREFIXES;
/// Image prefix of the default Forgejo runner image; the simulated forgejo-runner plays it.
pub const FORGEJO_RUNNER_IMAGE: &str = forgerunner_testkit::forgejo::RUNNER_IMAGE_PREFIX;

/// Size and timing of a group.
#[derive(Clone, Debug)]
pub struct GroupSize {
    /// `spec.minRunners`.
    pub min: u32,
    /// `spec.maxRunners`.
    pub max: u32,
    /// `spec.idleTimeoutSeconds`.
    pub idle_timeout_seconds: Option<u32>,
    /// `spec.startupTimeoutSeconds`.
    pub startup_timeout_seconds: Option<u32>,
    /// `spec.scaleDownDelaySeconds`.
    pub scale_down_delay_seconds: Option<u32>,
}

impl GroupSize {
    /// No warm runners, at most `max`.
    pub fn up_to(max: u32) -> GroupSize {
        GroupSize {
            min: 0,
            max,
            idle_timeout_seconds: None,
            startup_timeout_seconds: None,
            scale_down_delay_seconds: None,
        }
    }
}

/// Where a Gitea group's runners register, and so which jobs they see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GiteaRunnerScope {
    /// Instance-wide runners (`scope: global`).
    Global,
    /// Runners of one organization (`scope: org`).
    Org(String),
    /// Runners of one user's repositories (`scope: user`).
    User(String),
    /// Runners of one repository, `owner/name` (`scope: repo`).
    Repo(String),
}

/// Where a Forgejo group's runners register: the same levels as Gitea's (as in the CRD,
/// where `ForgejoScope` is `GiteaScope`).
pub type ForgejoRunnerScope = GiteaRunnerScope;

impl GiteaRunnerScope {
    /// The organization owning the world's repository ([`GITEA_REPO`], also the Forgejo one).
    pub fn world_org() -> GiteaRunnerScope {
        let org = GITEA_REPO.split('/').next().unwrap_or(GITEA_REPO);
        GiteaRunnerScope::Org(org.to_owned())
    }

    /// `group` with the spec's `scope`, `org`, `user` and `repo` fields of this scope.
    fn scoped(&self, group: RunnerGroupBuilder) -> RunnerGroupBuilder {
        match self {
            GiteaRunnerScope::Global => group,
            GiteaRunnerScope::Org(org) => group.org(org),
            GiteaRunnerScope::User(user) => group.user(user),
            GiteaRunnerScope::Repo(repo) => group.repo(repo),
        }
    }
}

/// A Gitea RunnerGroup's forge side: scope, labels, polling and webhook.
#[derive(Clone, Debug)]
pub struct GiteaGroup {
    /// Where its runners register.
    pub scope: GiteaRunnerScope,
    /// `spec.gitea.labels`, in act_runner form (`linux`, `linux:host`, …).
    pub labels: Vec<String>,
    /// `spec.gitea.pollIntervalSeconds`.
    pub poll_interval_seconds: u32,
    /// Value of the webhook Secret; a Secret `<group>-webhook` is created when set.
    pub webhook_secret: Option<String>,
}

/// A Forgejo RunnerGroup's forge side: scope, labels and polling (Forgejo has no job webhook).
#[derive(Clone, Debug)]
pub struct ForgejoGroup {
    /// Where its runners register.
    pub scope: ForgejoRunnerScope,
    /// `spec.forgejo.labels`, in forgejo-runner form (`linux`, `linux:host`, …).
    pub labels: Vec<String>,
    /// `spec.forgejo.pollIntervalSeconds`.
    pub poll_interval_seconds: u32,
}

/// What a group of any forge asks its forge for: see [`World::add_group`].
#[derive(Clone, Copy, Debug)]
pub struct PoolOptions<'a> {
    /// The label its jobs ask for and its runners carry (GitHub: the group's name instead).
    pub label: &'a str,
    /// `pollIntervalSeconds` where the forge is polled (Gitea, Forgejo).
    pub poll_interval_seconds: u32,
    /// The value of a webhook Secret `<group>-webhook` (Gitea only: GitHub's scale sets and
    /// Forgejo have no job webhook, and ignore it).
    pub webhook_secret: Option<&'a str>,
}

/// Group `namespace/name` of `forge`, sized by `size`; the forge block's fields are the caller's.
fn group(forge: ForgeKind, namespace: &str, name: &str, size: &GroupSize) -> RunnerGroupBuilder {
    RunnerGroup::test(forge)
        .named(namespace, name)
        .min(size.min)
        .max(size.max)
        .idle_timeout(size.idle_timeout_seconds)
        .startup_timeout(size.startup_timeout_seconds)
        .scale_down_delay(size.scale_down_delay_seconds)
}

impl World {
    async fn create_secret(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<(), WorldError> {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            string_data: Some(data),
            ..Default::default()
        };
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .create(&PostParams::default(), &secret)
            .await?;
        Ok(())
    }

    /// The credentials Secret `<group>-<forge>` of group `group`, holding what `fake` accepts;
    /// its name.
    async fn create_credentials(
        &self,
        namespace: &str,
        group: &str,
        fake: &dyn FakeForgeServer,
    ) -> Result<String, WorldError> {
        let secret = format!("{group}-{}", fake.kind());
        self.create_secret(namespace, &secret, fake.credentials()).await?;
        Ok(secret)
    }

    /// Creates a group of `forge` served by the world's fake, sized by `size`, whose jobs and
    /// their news reach it as `pool` says; where it is queued and counted. GitHub names the
    /// scale set after the group, and its jobs ask for that name rather than `pool.label`;
    /// Gitea and Forgejo groups register at the org scope of the world's repository.
    pub async fn add_group(
        &self,
        forge: ForgeKind,
        namespace: &str,
        name: &str,
        size: &GroupSize,
        pool: &PoolOptions<'_>,
    ) -> Result<ForgeTarget, WorldError> {
        let PoolOptions {
            label,
            poll_interval_seconds,
            webhook_secret,
        } = *pool;
        let label = match forge {
            ForgeKind::Github => {
                self.add_github_group(namespace, name, size).await?;
                name
            }
            ForgeKind::Gitea => {
                self.add_gitea_group(
                    namespace,
                    name,
                    &[label],
                    size,
                    poll_interval_seconds,
                    webhook_secret,
                )
                .await?;
                label
            }
            ForgeKind::Forgejo => {
                self.add_forgejo_group(namespace, name, &[label], size, poll_interval_seconds)
                    .await?;
                label
            }
        };
        Ok(ForgeTarget {
            forge,
            label: label.to_owned(),
        })
    }

    async fn create_group(&self, group: RunnerGroupBuilder) -> Result<(), WorldError> {
        let group = group.build();
        let namespace = group.metadata.namespace.as_deref().unwrap_or_default();
        Api::<RunnerGroup>::namespaced(self.client.clone(), namespace)
            .create(&PostParams::default(), &group)
            .await?;
        Ok(())
    }

    /// Creates a group of `forge` whose forge is at `url`, which is no fake of this world (a
    /// server that never answers, say), with a credentials Secret of the shape that forge reads
    /// and one label, so the spec itself is valid.
    pub async fn add_group_at(
        &self,
        namespace: &str,
        name: &str,
        forge: ForgeKind,
        url: &str,
    ) -> Result<(), WorldError> {
        let secret = format!("{name}-creds");
        let key = match forge {
            ForgeKind::Github => "github_token",
            ForgeKind::Gitea | ForgeKind::Forgejo => "token",
        };
        let data = BTreeMap::from([(key.to_owned(), "not-a-real-token".to_owned())]);
        self.create_secret(namespace, &secret, data).await?;
        let size = GroupSize {
            min: 0,
            max: 2,
            idle_timeout_seconds: None,
            startup_timeout_seconds: None,
            scale_down_delay_seconds: None,
        };
        let group = self::group(forge, namespace, name, &size)
            .url(url)
            .credentials(secret);
        let group = match forge {
            ForgeKind::Github => group.scale_set_name(name),
            ForgeKind::Gitea | ForgeKind::Forgejo => group.labels(vec![format!("{name}:host")]),
        };
        self.create_group(group).await
    }

    /// Creates a GitHub RunnerGroup (and its PAT Secret) served by the emulator; the scale set
    /// is named after the group.
    pub async fn add_github_group(
        &self,
        namespace: &str,
        name: &str,
        size: &GroupSize,
    ) -> Result<(), WorldError> {
        let fake = self.started(ForgeKind::Github)?;
        let secret = self.create_credentials(namespace, name, fake).await?;
        let url = self
            .github_rest
            .as_ref()
            .map_or_else(|| fake.url(), |rest| rest.config_url());
        let group = group(ForgeKind::Github, namespace, name, size)
            .url(url)
            .credentials(secret)
            .scale_set_name(name);
        self.create_group(group).await
    }

    /// Sets the group's `spec.rerun.maxPerHour` (`None` removes `spec.rerun`), as
    /// `kubectl patch --type merge` would.
    pub async fn set_rerun(
        &self,
        namespace: &str,
        name: &str,
        max_per_hour: Option<u32>,
    ) -> Result<(), WorldError> {
        let rerun = max_per_hour.map(|n| serde_json::json!({ "maxPerHour": n }));
        let patch = serde_json::json!({ "spec": { "rerun": rerun } });
        Api::<RunnerGroup>::namespaced(self.client.clone(), namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Waits until the operator has created the scale set of a GitHub group; returns its id.
    pub async fn github_scale_set(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<scaleset::ScaleSetId, WorldError> {
        let mut ids = self.github_scale_sets(&[name], timeout).await?;
        ids.pop()
            .ok_or_else(|| WorldError::Timeout(format!("scale set {name}")))
    }

    /// The emulator scale sets of several groups, index-aligned with `names`, once all exist.
    /// One emulator snapshot per check, however many names.
    pub async fn github_scale_sets(
        &self,
        names: &[&str],
        timeout: Duration,
    ) -> Result<Vec<scaleset::ScaleSetId>, WorldError> {
        let Some(emu) = &self.github else {
            return Err(WorldError::Timeout(
                "a GitHub emulator (world started without one)".into(),
            ));
        };
        let find = || -> Result<Vec<scaleset::ScaleSetId>, String> {
            let state = emu.emu.state();
            let by_name: std::collections::HashMap<&str, scaleset::ScaleSetId> =
                state.scale_sets.iter().map(|s| (s.name.as_str(), s.id)).collect();
            names
                .iter()
                .map(|n| by_name.get(n).copied().ok_or_else(|| (*n).to_owned()))
                .collect()
        };
        let mut missing = String::new();
        let found = wait_until(timeout, "scale sets", || {
            let ready = match find() {
                Ok(_) => true,
                Err(name) => {
                    missing = name;
                    false
                }
            };
            async move { ready }
        })
        .await;
        match found {
            Ok(()) => find().map_err(|name| WorldError::Timeout(format!("scale set {name}"))),
            Err(_) => Err(WorldError::Timeout(format!("scale set {missing}"))),
        }
    }

    /// Creates a Gitea RunnerGroup at the org scope of the world's repository (admin token),
    /// with `labels`, polling every `poll_interval_seconds`.
    pub async fn add_gitea_group(
        &self,
        namespace: &str,
        name: &str,
        labels: &[&str],
        size: &GroupSize,
        poll_interval_seconds: u32,
        webhook_secret: Option<&str>,
    ) -> Result<(), WorldError> {
        let group = GiteaGroup {
            scope: GiteaRunnerScope::world_org(),
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
            poll_interval_seconds,
            webhook_secret: webhook_secret.map(str::to_owned),
        };
        self.add_gitea_group_with(namespace, name, &group, size).await
    }

    /// Creates a Gitea RunnerGroup shaped by `group` (admin token), with its credential and,
    /// when asked, webhook Secrets.
    pub async fn add_gitea_group_with(
        &self,
        namespace: &str,
        name: &str,
        group: &GiteaGroup,
        size: &GroupSize,
    ) -> Result<(), WorldError> {
        let fake = self.started(ForgeKind::Gitea)?;
        let secret = self.create_credentials(namespace, name, fake).await?;
        let webhook = match &group.webhook_secret {
            Some(value) => {
                let hook = format!("{name}-webhook");
                self.create_secret(
                    namespace,
                    &hook,
                    BTreeMap::from([("secret".to_owned(), value.clone())]),
                )
                .await?;
                Some(hook)
            }
            None => None,
        };
        let mut runner_group = group.scope.scoped(
            self::group(ForgeKind::Gitea, namespace, name, size)
                .url(fake.url())
                .credentials(secret)
                .labels(group.labels.clone())
                .poll_interval(group.poll_interval_seconds),
        );
        if let Some(hook) = webhook {
            runner_group = runner_group.webhook_secret(hook);
        }
        self.create_group(runner_group).await
    }

    /// Creates a Forgejo RunnerGroup at the org scope of the world's repository (admin token),
    /// with `labels`, polling every `poll_interval_seconds`. A label without a scheme gets
    /// `:host` (jobs still ask for its bare name): the simulated runners run jobs in their own
    /// container, and forgejo-runner refuses to start with a docker label and no Docker daemon.
    pub async fn add_forgejo_group(
        &self,
        namespace: &str,
        name: &str,
        labels: &[&str],
        size: &GroupSize,
        poll_interval_seconds: u32,
    ) -> Result<(), WorldError> {
        let group = ForgejoGroup {
            scope: ForgejoRunnerScope::world_org(),
            labels: labels
                .iter()
                .map(|l| {
                    if l.contains(':') {
                        (*l).to_owned()
                    } else {
                        format!("{l}:host")
                    }
                })
                .collect(),
            poll_interval_seconds,
        };
        self.add_forgejo_group_with(namespace, name, &group, size).await
    }

    /// Creates a Forgejo RunnerGroup shaped by `group`, with its credentials Secret (key
    /// `token`: the fake's admin token).
    pub async fn add_forgejo_group_with(
        &self,
        namespace: &str,
        name: &str,
        group: &ForgejoGroup,
        size: &GroupSize,
    ) -> Result<(), WorldError> {
        let fake = self.started(ForgeKind::Forgejo)?;
        let secret = self.create_credentials(namespace, name, fake).await?;
        let runner_group = group.scope.scoped(
            self::group(ForgeKind::Forgejo, namespace, name, size)
                .url(fake.url())
                .credentials(secret)
                .labels(group.labels.clone())
                .poll_interval(group.poll_interval_seconds),
        );
        self.create_group(runner_group).await
    }
}
