//! RunnerGroups of the world's forge fakes, stated the way a test reads:
//! `Group::gitea("sized").host_label("self-hosted").max(4).idle_timeout(60).classes(…)
//! .create(&world, NS)`. What the sandbox's group has no setting for (classes, image, template,
//! …) is merge-patched onto the spec right after the group is created, in one patch; a suite
//! that needs the spec complete before the operator reads it starts the operator afterwards.

use forgerunner_core::crd::ForgeKind;
use forgerunner_sandbox::world::World;
use forgerunner_sandbox::world::groups::{ForgejoGroup, GiteaGroup, GiteaRunnerScope, GroupSize};
use serde_json::{Map, Value};

use super::gitea_world::{condition, patch_spec};

/// A RunnerGroup to create in a test's world: its forge, scope, labels, size and extra spec.
#[derive(Clone, Debug)]
pub struct Group {
    name: String,
    forge: ForgeKind,
    scope: GiteaRunnerScope,
    labels: Vec<String>,
    poll_interval_seconds: u32,
    webhook_secret: Option<String>,
    size: GroupSize,
    spec: Map<String, Value>,
}

impl Group {
    fn new(forge: ForgeKind, name: &str) -> Group {
        Group {
            name: name.to_owned(),
            forge,
            scope: GiteaRunnerScope::Global,
            labels: Vec::new(),
            poll_interval_seconds: 1,
            webhook_secret: None,
            size: GroupSize::up_to(2),
            spec: Map::new(),
        }
    }

    /// A GitHub group served by the emulator; its scale set is named after it. Up to 2 runners
    /// unless sized otherwise.
    pub fn github(name: &str) -> Group {
        Group::new(ForgeKind::Github, name)
    }

    /// A Gitea group of instance-wide runners polling every second, with no label yet. Up to 2
    /// runners unless sized otherwise.
    pub fn gitea(name: &str) -> Group {
        Group::new(ForgeKind::Gitea, name)
    }

    /// A Forgejo group of instance-wide runners polling every second, with no label yet. Up to
    /// 2 runners unless sized otherwise.
    pub fn forgejo(name: &str) -> Group {
        Group::new(ForgeKind::Forgejo, name)
    }

    /// Runners of the organization owning the world's repository instead of instance-wide ones.
    pub fn in_world_org(mut self) -> Group {
        self.scope = GiteaRunnerScope::world_org();
        self
    }

    /// Adds `label` as written (`linux`, `linux:host`, `ubuntu:docker://…`).
    pub fn label(mut self, label: &str) -> Group {
        self.labels.push(label.to_owned());
        self
    }

    /// Adds each of `labels` as written.
    pub fn labels(self, labels: &[&str]) -> Group {
        labels.iter().fold(self, |group, l| group.label(l))
    }

    /// Adds `name` as a host label (`name:host`): the simulated runners run jobs in their own
    /// container.
    pub fn host_label(self, name: &str) -> Group {
        self.label(&format!("{name}:host"))
    }

    /// Polls the forge every `seconds`.
    pub fn poll_every(mut self, seconds: u32) -> Group {
        self.poll_interval_seconds = seconds;
        self
    }

    /// Takes Gitea webhooks signed with `secret` (a Secret `<group>-webhook` holds it).
    pub fn webhook_secret(mut self, secret: &str) -> Group {
        self.webhook_secret = Some(secret.to_owned());
        self
    }

    /// `spec.minRunners`.
    pub fn min(mut self, min: u32) -> Group {
        self.size.min = min;
        self
    }

    /// `spec.maxRunners`.
    pub fn max(mut self, max: u32) -> Group {
        self.size.max = max;
        self
    }

    /// `spec.idleTimeoutSeconds`.
    pub fn idle_timeout(mut self, seconds: u32) -> Group {
        self.size.idle_timeout_seconds = Some(seconds);
        self
    }

    /// `spec.startupTimeoutSeconds`.
    pub fn startup_timeout(mut self, seconds: u32) -> Group {
        self.size.startup_timeout_seconds = Some(seconds);
        self
    }

    /// `spec.scaleDownDelaySeconds`.
    pub fn scale_down_delay(mut self, seconds: u32) -> Group {
        self.size.scale_down_delay_seconds = Some(seconds);
        self
    }

    /// The whole size and timing at once, for suites that share one.
    pub fn size(mut self, size: &GroupSize) -> Group {
        self.size = size.clone();
        self
    }

    /// `spec.classes`, as the CRD spells them.
    pub fn classes(self, classes: Value) -> Group {
        self.spec(serde_json::json!({ "classes": classes }))
    }

    /// `spec.rerun.maxPerHour`: jobs of lost runners re-run, at most that many an hour; `None`
    /// leaves `spec.rerun` out (no re-run).
    pub fn rerun(self, max_per_hour: Option<u32>) -> Group {
        match max_per_hour {
            Some(n) => self.spec(serde_json::json!({ "rerun": { "maxPerHour": n } })),
            None => self,
        }
    }

    /// More spec fields (camelCase, as the CRD spells them), merge-patched on once the group
    /// exists; a later call's field replaces an earlier one's.
    pub fn spec(mut self, fields: Value) -> Group {
        if let Value::Object(fields) = fields {
            self.spec.extend(fields);
        } else {
            panic!("spec fields are an object, not {fields}");
        }
        self
    }

    /// Creates the group (and its Secrets) in `namespace`, then patches on the extra spec;
    /// fails the test when the API refuses.
    pub async fn create(self, world: &World, namespace: &str) {
        let name = self.name.as_str();
        let created = match self.forge {
            ForgeKind::Github => world.add_github_group(namespace, name, &self.size).await,
            ForgeKind::Gitea => {
                let group = GiteaGroup {
                    scope: self.scope.clone(),
                    labels: self.labels.clone(),
                    poll_interval_seconds: self.poll_interval_seconds,
                    webhook_secret: self.webhook_secret.clone(),
                };
                world
                    .add_gitea_group_with(namespace, name, &group, &self.size)
                    .await
            }
            ForgeKind::Forgejo => {
                let group = ForgejoGroup {
                    scope: self.scope.clone(),
                    labels: self.labels.clone(),
                    poll_interval_seconds: self.poll_interval_seconds,
                };
                world
                    .add_forgejo_group_with(namespace, name, &group, &self.size)
                    .await
            }
        };
        created.expect("group");
        if !self.spec.is_empty() {
            patch_spec(world, namespace, name, Value::Object(self.spec)).await;
        }
    }
}

/// Whether the group's `Ready` condition is `True`.
pub async fn is_ready(world: &World, namespace: &str, name: &str) -> bool {
    condition(world, namespace, name, "Ready")
        .await
        .is_some_and(|(status, _, _)| status == "True")
}
