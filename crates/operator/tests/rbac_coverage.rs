//! Issues 6 and 14, and findings H2 and M3 of the security review: the RBAC rules the Helm chart
//! grants are exactly what the operator uses, checked both ways, and the runner container hooks'
//! rights are bound, never held.
//!
//! The chart is rendered with `rbac.runnerContainerHooks: true` (the operator's largest rule set;
//! the default drops the hooks' block, which `tests/chart/test_rbac.py` checks). The real binary
//! runs a whole life cycle against the world: leader election, a GitHub group in
//! `containerMode: kubernetes` and a Gitea group, jobs on both, what the hooks of a dead runner
//! leave behind, a signed Gitea webhook (the webhook Secret read), the Gitea group's shared cache
//! made, updated and removed (`spec.cache`), `containerMode` removed again,
//! deletion of both groups through the finalizer, and a graceful stop (lease release). The fake
//! API server records every request with its User-Agent (`forgerunner/<version>`):
//! - each request the operator sent must be allowed by a Role or ClusterRole the chart binds to
//!   its ServiceAccount, or by a chart ClusterRole the operator bound to itself in that namespace
//!   (the hooks' cleanup role) with a RoleBinding the API server lets it create;
//! - each RoleBinding the operator created must pass the API server's escalation check, which the
//!   fake does not run: here it is checked as kubernetes does it (see [`binding_authorized`]);
//! - the operator holds none of the hooks' own rights (pods create, `pods/exec`, Secrets list or
//!   delete) through the chart's bindings;
//! - each verb the chart grants must be used: by a request of the run, by a binding it authorized
//!   (`bind`), or by a path the run cannot reach, listed in [`UNREACHED`] with the code using it;
//! - the chart's hooks ClusterRole holds exactly the rules GitHub's `kubernetes` mode asks for.
//!
//! The chart grants no `update` on `runnergroups/finalizers`. A real server's
//! OwnerReferencesPermissionEnforcement admission plugin (which the fake does not run) asks for it
//! only when an object names its owner with `blockOwnerDeletion: true`; the operator's owner
//! references come from kube's `controller_owner_ref`, which sets `controller` only (kube-core
//! 5.0 `src/resource.rs`). The run checks that no owner reference it sees blocks.
#![cfg(all(feature = "github", feature = "gitea"))]

#[allow(dead_code)]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::chart;
use common::e2e::{fail_with_output, start_operator_with};

use forgerunner_core::RunnerGroup;
use forgerunner_core::crd::{ContainerModeType, ForgeKind};
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::operator::{OperatorProcess, OperatorSettings};
use forgerunner_sandbox::world::{World, WorldOptions, wait_until};
use forgerunner_testkit::apiserver::{RequestRecord, Verb};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};

/// Namespace of the RunnerGroups.
const NS: &str = "rbac";
/// The operator's own namespace (`POD_NAMESPACE` of [`OperatorProcess`]); the chart's release
/// namespace stands for it.
const OPERATOR_NS: &str = "default";
const DEADLINE: Duration = Duration::from_secs(180);
const WEBHOOK_SECRET: &str = "rbac-hook-secret";
const JOBS_PER_FORGE: usize = 3;

/// Verbs the chart grants for calls this run cannot make, each with the code that needs it.
/// (group, resource, verb, why).
const UNREACHED: &[(&str, &str, &str, &str)] = &[
    (
        "batch",
        "jobs",
        "get",
        "confirming with the API server that a runner the forge lists has no Job before \
         deregistering it (crates/core/src/reconcile/apply.rs remove, RemovalReason::Orphaned); \
         every runner here has its Job (the hooks' Role used to need this verb too)",
    ),
    (
        "",
        "configmaps",
        "get",
        "reading the CA bundle a group names (crates/core/src/reconcile/pipeline.rs group_context); \
         the fakes serve plain HTTP, so no group here names one",
    ),
    (
        "",
        "events",
        "list",
        "reading the Job controller's FailedCreate Events of runners pending too long \
         (crates/core/src/reconcile/startup_check.rs failed_create_message); every runner here \
         starts at once",
    ),
    (
        "events.k8s.io",
        "events",
        "patch",
        "kube's Recorder patches an Event into a series when it repeats \
         (crates/core/src/reconcile/events.rs publish); a run may not repeat one",
    ),
];

// ---------------------------------------------------------------------------------------------
// What the chart grants.

/// Where a rule applies.
#[derive(Debug, Clone, PartialEq)]
enum Scope {
    /// Through a ClusterRoleBinding: every namespace and cluster-scoped resources.
    Cluster,
    /// Through a RoleBinding: only requests in this namespace.
    Namespace(String),
}

/// One rule granted to the operator's ServiceAccount.
#[derive(Debug)]
struct Grant {
    scope: Scope,
    rule: PolicyRule,
}

fn has(list: &[String], wanted: &str) -> bool {
    list.iter().any(|v| v == "*" || v == wanted)
}

impl Grant {
    /// Whether this rule allows `record` (with RBAC's matching: group, resource including the
    /// subresource, verb, resourceNames, and the binding's namespace).
    fn allows(&self, record: &RequestRecord, verb: Verb) -> bool {
        let in_scope = match &self.scope {
            Scope::Cluster => true,
            Scope::Namespace(ns) => record.namespace.as_deref() == Some(ns.as_str()),
        };
        let groups = self.rule.api_groups.as_deref().unwrap_or_default();
        let resources = self.rule.resources.as_deref().unwrap_or_default();
        let named = match self.rule.resource_names.as_deref() {
            None | Some([]) => true,
            Some(names) => record
                .name
                .as_deref()
                .is_some_and(|n| names.iter().any(|m| m == n)),
        };
        in_scope
            && has(groups, &record.group)
            && has(resources, &record.resource)
            && has(&self.rule.verbs, verb.as_str())
            && named
    }
}

/// The API group as people write it (`core` for "").
fn group_name(group: &str) -> &str {
    if group.is_empty() { "core" } else { group }
}

fn of_kind<T: serde::de::DeserializeOwned>(objects: &[serde_json::Value], kind: &str) -> Vec<T> {
    objects
        .iter()
        .filter(|o| o["kind"] == kind)
        .map(|o| serde_json::from_value(o.clone()).unwrap_or_else(|e| panic!("rendered {kind}: {e}")))
        .collect()
}

/// The chart as the test reads it: what it binds to the operator, and what it renders.
struct Chart {
    /// The rules the chart binds to the operator's ServiceAccount, with the release namespace
    /// mapped to [`OPERATOR_NS`].
    grants: Vec<Grant>,
    /// Every ClusterRole rendered, bound by the chart or not.
    cluster_roles: Vec<ClusterRole>,
    /// The operator's ServiceAccount name.
    operator_account: String,
    /// `runnerHooks` of the rendered operator configuration.
    hooks: serde_yaml::Value,
}

impl Chart {
    /// The rules of the rendered ClusterRole `name`.
    fn cluster_role_rules(&self, name: &str) -> Vec<PolicyRule> {
        let role = self
            .cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("ClusterRole {name} is not rendered by the chart"));
        role.rules.clone().unwrap_or_default()
    }

    /// A `runnerHooks` key of the rendered configuration.
    fn hooks(&self, key: &str) -> String {
        self.hooks[key]
            .as_str()
            .unwrap_or_else(|| panic!("runnerHooks.{key} in the rendered config"))
            .to_owned()
    }

    /// Whether `subjects` name the operator's ServiceAccount in `namespace`.
    fn names_operator(&self, subjects: &Option<Vec<Subject>>, namespace: &str) -> bool {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == self.operator_account
                && s.namespace.as_deref() == Some(namespace)
        })
    }
}

fn read_chart(objects: &[serde_json::Value]) -> Chart {
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the chart renders the operator Deployment");
    let release_ns = deployment["metadata"]["namespace"]
        .as_str()
        .expect("the Deployment has a namespace")
        .to_owned();
    let operator_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("the Deployment names its ServiceAccount")
        .to_owned();
    let config_map = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("the chart renders the operator ConfigMap");
    let config: serde_yaml::Value =
        serde_yaml::from_str(config_map["data"]["config.yaml"].as_str().expect("config.yaml"))
            .expect("config.yaml is YAML");
    let mut chart = Chart {
        grants: Vec::new(),
        cluster_roles: of_kind(objects, "ClusterRole"),
        operator_account,
        hooks: config["runnerHooks"].clone(),
    };
    let local = |ns: &str| {
        if ns == release_ns {
            OPERATOR_NS.to_owned()
        } else {
            ns.to_owned()
        }
    };
    let roles: Vec<Role> = of_kind(objects, "Role");
    let mut grants = Vec::new();
    for binding in of_kind::<ClusterRoleBinding>(objects, "ClusterRoleBinding") {
        if chart.names_operator(&binding.subjects, &release_ns) {
            for rule in chart.cluster_role_rules(&binding.role_ref.name) {
                grants.push(Grant {
                    scope: Scope::Cluster,
                    rule,
                });
            }
        }
    }
    for binding in of_kind::<RoleBinding>(objects, "RoleBinding") {
        if !chart.names_operator(&binding.subjects, &release_ns) {
            continue;
        }
        let ns = binding
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| release_ns.clone());
        let rules = if binding.role_ref.kind == "ClusterRole" {
            chart.cluster_role_rules(&binding.role_ref.name)
        } else {
            let role = roles
                .iter()
                .find(|r| {
                    r.metadata.name.as_deref() == Some(binding.role_ref.name.as_str())
                        && r.metadata.namespace.as_deref().unwrap_or(&release_ns) == ns
                })
                .unwrap_or_else(|| panic!("RoleBinding refers to missing Role {}", binding.role_ref.name));
            role.rules.clone().unwrap_or_default()
        };
        for rule in rules {
            grants.push(Grant {
                scope: Scope::Namespace(local(&ns)),
                rule,
            });
        }
    }
    chart.grants = grants;
    chart
}

/// Whether `grants` authorize `verb` on `group`/`resource` named `name` in `namespace`, with
/// RBAC's matching (the same as [`Grant::allows`] for a request).
fn authorized(
    grants: &[Grant],
    namespace: &str,
    group: &str,
    resource: &str,
    verb: &str,
    name: &str,
) -> bool {
    grants.iter().any(|g| {
        let in_scope = match &g.scope {
            Scope::Cluster => true,
            Scope::Namespace(ns) => ns == namespace,
        };
        let named = match g.rule.resource_names.as_deref() {
            None | Some([]) => true,
            Some(names) => names.iter().any(|n| n == name),
        };
        in_scope
            && has(g.rule.api_groups.as_deref().unwrap_or_default(), group)
            && has(g.rule.resources.as_deref().unwrap_or_default(), resource)
            && has(&g.rule.verbs, verb)
            && named
    })
}

/// How the API server let the operator create `binding`: the escalation check of kubernetes
/// `pkg/registry/rbac/rolebinding/policybased/storage.go` (`Storage.Create`), which the fake API
/// server does not run.
#[derive(Debug, PartialEq)]
enum BindingCheck {
    /// `BindingAuthorized` (`pkg/registry/rbac/escalation_check.go`): the creator may `bind` the
    /// referenced role, checked with the binding's namespace and the role's name (resource
    /// `clusterroles` for a ClusterRole). The RBAC docs' "Restrictions on role binding creation
    /// or update" describe the same.
    Bind,
    /// `ConfirmNoEscalation` (`pkg/registry/rbac/validation/rule.go`): the creator already holds
    /// every rule of the role in the binding's namespace.
    HoldsEveryRule,
}

/// [`BindingCheck`] for `binding`, or `None` when a real API server refuses it (403).
fn binding_authorized(grants: &[Grant], chart: &Chart, binding: &RoleBinding) -> Option<BindingCheck> {
    let namespace = binding.metadata.namespace.as_deref().expect("namespaced");
    let role = &binding.role_ref;
    let resource = match role.kind.as_str() {
        "ClusterRole" => "clusterroles",
        "Role" => "roles",
        other => panic!("roleRef kind {other}"),
    };
    if authorized(
        grants,
        namespace,
        "rbac.authorization.k8s.io",
        resource,
        "bind",
        &role.name,
    ) {
        return Some(BindingCheck::Bind);
    }
    assert_eq!(role.kind, "ClusterRole", "the operator binds no Role");
    let holds_all = chart.cluster_role_rules(&role.name).iter().all(|rule| {
        let names = rule.resource_names.clone().unwrap_or_default();
        triples(std::slice::from_ref(rule)).iter().all(|(g, r, v)| {
            if names.is_empty() {
                // No name: only a grant without resourceNames covers it.
                authorized(grants, namespace, g, r, v, "")
            } else {
                names.iter().all(|n| authorized(grants, namespace, g, r, v, n))
            }
        })
    });
    holds_all.then_some(BindingCheck::HoldsEveryRule)
}

/// The owner references of `meta` that block their owner's deletion (`blockOwnerDeletion: true`),
/// as `kind/name → owner kind/name`. Under OwnerReferencesPermissionEnforcement each one needs
/// `update` on the owner's `finalizers` subresource, which the chart does not grant.
fn blocking_owner_refs(kind: &str, meta: &ObjectMeta) -> Vec<String> {
    meta.owner_references
        .iter()
        .flatten()
        .filter(|r| r.block_owner_deletion == Some(true))
        .map(|r| {
            format!(
                "{kind}/{} → {}/{}",
                meta.name.as_deref().unwrap_or_default(),
                r.kind,
                r.name
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The operator's life cycle.

/// What the run left to look at after the operator stopped.
struct Run {
    /// The RoleBindings the operator made for the GitHub group, as they were in the cluster.
    bindings: Vec<RoleBinding>,
}

/// Writes what the hooks of runner pod `runner_pod` would leave if it died mid-job: a job pod and
/// a Secret labelled `runner-pod=<runner pod>`, no owner (crates/core/src/reconcile/hook_leftovers.rs).
async fn leave_hook_leftovers(world: &World, runner_pod: &str) {
    let labels = serde_json::json!({"runner-pod": runner_pod});
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hook-leftover", "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "job", "image": "busybox", "command": ["tail", "-f", "/dev/null"]}]},
    }))
    .expect("pod");
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hook-leftover", "namespace": NS, "labels": labels},
    }))
    .expect("secret");
    Api::<Pod>::namespaced(world.client.clone(), NS)
        .create(&PostParams::default(), &pod)
        .await
        .expect("leftover pod");
    Api::<Secret>::namespaced(world.client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("leftover Secret");
}

/// Runs groups, jobs, hook leftovers, a webhook, the hooks turned off and group deletion, then
/// stops the operator gracefully.
async fn exercise_operator(world: &World, chart: &Chart) -> Run {
    // The chart's config names the ClusterRoles and the operator's account; the world runs the
    // operator with environment only, in OPERATOR_NS (its POD_NAMESPACE).
    let settings = OperatorSettings {
        leader_election: true,
        env: vec![
            (
                "FORGERUNNER_RUNNER_HOOKS_CLUSTER_ROLE".into(),
                chart.hooks("clusterRole"),
            ),
            (
                "FORGERUNNER_RUNNER_HOOKS_CLEANUP_CLUSTER_ROLE".into(),
                chart.hooks("cleanupClusterRole"),
            ),
            (
                "FORGERUNNER_RUNNER_HOOKS_OPERATOR_SERVICE_ACCOUNT".into(),
                chart.hooks("operatorServiceAccount"),
            ),
            (
                "FORGERUNNER_RUNNER_HOOKS_OPERATOR_NAMESPACE".into(),
                OPERATOR_NS.into(),
            ),
        ],
        ..OperatorSettings::default()
    };
    let mut op = start_operator_with(world, &settings);

    let gitea = world.gitea.as_ref().expect("gitea fake").clone();
    gitea.set_webhook(
        &format!(
            "http://{}/webhooks/gitea",
            op.http_addr().await.expect("operator listening")
        ),
        WEBHOOK_SECRET,
    );
    world
        .add_github_group(NS, "gh", &GroupSize::up_to(3))
        .await
        .expect("github group");
    // Kubernetes mode: the operator keeps the hooks' ServiceAccount and RoleBindings.
    let groups: Api<RunnerGroup> = Api::namespaced(world.client.clone(), NS);
    groups
        .patch(
            "gh",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"containerMode": {"type": "kubernetes"}}})),
        )
        .await
        .expect("kubernetes mode");
    let gitea_size = GroupSize {
        min: 0,
        max: 3,
        idle_timeout_seconds: Some(5),
        startup_timeout_seconds: None,
        scale_down_delay_seconds: None,
    };
    world
        .add_gitea_group(NS, "gt", &["linux"], &gitea_size, 1, Some(WEBHOOK_SECRET))
        .await
        .expect("gitea group");
    // spec.cache: the operator keeps the group's cache server and its objects.
    groups
        .patch(
            "gt",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"cache": {"size": "1Gi"}}})),
        )
        .await
        .expect("gitea cache");
    let Ok(scale_set) = world.github_scale_set("gh", Duration::from_secs(60)).await else {
        fail_with_output(&op, "the operator created no scale set (not leading?)");
    };
    for _ in 0..JOBS_PER_FORGE {
        world.queue_github_job(scale_set, "gh").expect("queue github job");
        world.queue_gitea_job(&["linux"]).expect("queue gitea job");
    }

    // Runner Jobs come and go while the jobs run: look at the owner references of every one seen,
    // and leave hook leftovers for the first GitHub runner pod seen.
    let blocking = std::sync::Mutex::new(BTreeSet::new());
    let left_for = tokio::sync::Mutex::new(None::<String>);
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), NS);
    let drained = wait_until(
        DEADLINE,
        "every job done, no runner or runner Job left",
        || async {
            let gh = world.github_progress(scale_set);
            let gt = world.gitea_progress(&["linux"]);
            let jobs = world.runner_jobs(NS, None).await;
            for job in jobs.iter().flatten() {
                blocking
                    .lock()
                    .expect("not poisoned")
                    .extend(blocking_owner_refs("Job", &job.metadata));
            }
            let mut left = left_for.lock().await;
            if left.is_none()
                && let Ok(list) = pods
                    .list(&ListParams::default().labels("forgerunner.dev/group=gh"))
                    .await
                && let Some(name) = list.items.first().and_then(|p| p.metadata.name.clone())
            {
                leave_hook_leftovers(world, &name).await;
                *left = Some(name);
            }
            gh.done == JOBS_PER_FORGE
                && gh.registered_runners == 0
                && gt.done == JOBS_PER_FORGE
                && gt.registered_runners == 0
                && jobs.is_ok_and(|j| j.is_empty())
        },
    )
    .await;
    if drained.is_err() {
        fail_with_output(&op, "the jobs did not drain");
    }
    exercise_cache(world, &op, &groups).await;
    assert!(left_for.lock().await.is_some(), "no GitHub runner pod was seen");
    // The runner pod is gone: the operator deletes what its hooks left, with the rights of its
    // cleanup binding in this namespace.
    let swept = wait_until(Duration::from_secs(60), "the hook leftovers deleted", || async {
        let pod = pods.get_opt("hook-leftover").await;
        let secret = Api::<Secret>::namespaced(world.client.clone(), NS)
            .get_opt("hook-leftover")
            .await;
        matches!((pod, secret), (Ok(None), Ok(None)))
    })
    .await;
    if swept.is_err() {
        fail_with_output(&op, "the hook leftovers were not deleted");
    }
    // The webhook path reads the group's webhook Secret; make sure it ran at least once.
    let verified = wait_until(Duration::from_secs(30), "a verified webhook delivery", || async {
        gitea.deliveries().iter().any(|d| (200..300).contains(&d.status))
    })
    .await;
    if verified.is_err() {
        fail_with_output(
            &op,
            &format!("no webhook delivery was accepted: {:?}", gitea.deliveries()),
        );
    }

    let roles: Api<Role> = Api::namespaced(world.client.clone(), NS);
    assert!(
        roles.get_opt("gh-runner").await.expect("get role").is_none(),
        "the operator creates no Role: the hooks' rules are the chart's ClusterRole"
    );
    let bindings: Api<RoleBinding> = Api::namespaced(world.client.clone(), NS);
    let made: Vec<RoleBinding> = bindings
        .list(&ListParams::default())
        .await
        .expect("list bindings")
        .items;
    let accounts: Api<ServiceAccount> = Api::namespaced(world.client.clone(), NS);
    let account = accounts
        .get("gh-runner")
        .await
        .expect("the hooks' ServiceAccount");
    let mut blocking = blocking.into_inner().expect("not poisoned");
    for binding in &made {
        assert_eq!(
            binding.metadata.owner_references.as_ref().expect("owned")[0].kind,
            "RunnerGroup",
            "owned by the group, so it goes with it"
        );
        blocking.extend(blocking_owner_refs("RoleBinding", &binding.metadata));
    }
    blocking.extend(blocking_owner_refs("ServiceAccount", &account.metadata));
    assert!(
        blocking.is_empty(),
        "owner references with blockOwnerDeletion: an API server running the \
         OwnerReferencesPermissionEnforcement admission plugin would refuse these objects, as the \
         chart grants no update on runnergroups/finalizers: {blocking:?}"
    );

    // containerMode removed: the group's account and bindings go (no runner of the old spec
    // is left).
    groups
        .patch(
            "gh",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"containerMode": null}})),
        )
        .await
        .expect("no container mode");
    let removed = wait_until(Duration::from_secs(60), "the hooks' RBAC removed", || async {
        let account = accounts.get_opt("gh-runner").await;
        let left = bindings.list(&ListParams::default()).await;
        matches!(account, Ok(None)) && left.is_ok_and(|l| l.items.is_empty())
    })
    .await;
    if removed.is_err() {
        fail_with_output(&op, "the hooks' ServiceAccount and RoleBindings stayed");
    }

    // Deleting the groups runs the finalizer's cleanup (forge side, then the finalizer patch).
    for name in ["gh", "gt"] {
        groups
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete group");
    }
    let gone = wait_until(DEADLINE, "both RunnerGroups gone", || async {
        let mut left = 0;
        for name in ["gh", "gt"] {
            if !matches!(groups.get_opt(name).await, Ok(None)) {
                left += 1;
            }
        }
        left == 0
    })
    .await;
    if gone.is_err() {
        fail_with_output(&op, "the RunnerGroups were not finalized");
    }
    // A graceful stop releases the lease: that call must be allowed too.
    op.stop(Duration::from_secs(20));
    Run { bindings: made }
}

/// The Gitea group's cache through every call the operator makes for one: created with the group
/// (before this runs), updated (a new image updates the Deployment, a larger size the claim, and
/// a Secret edited by hand is written back), then removed with `spec.cache`.
async fn exercise_cache(world: &World, op: &OperatorProcess, groups: &Api<RunnerGroup>) {
    const CACHE: &str = "gt-actions-cache";
    let deployments: Api<Deployment> = Api::namespaced(world.client.clone(), NS);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(world.client.clone(), NS);
    let services: Api<Service> = Api::namespaced(world.client.clone(), NS);
    let policies: Api<NetworkPolicy> = Api::namespaced(world.client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(world.client.clone(), NS);
    let made = wait_until(DEADLINE, "the cache objects", || async {
        matches!(secrets.get_opt(CACHE).await, Ok(Some(_)))
            && matches!(policies.get_opt(CACHE).await, Ok(Some(_)))
            && matches!(services.get_opt(CACHE).await, Ok(Some(_)))
    })
    .await;
    if made.is_err() {
        fail_with_output(op, "the operator made no cache for the Gitea group");
    }
    let tampered = serde_json::json!({"data": {"runner.yaml": "eA=="}});
    secrets
        .patch(CACHE, &PatchParams::default(), &Patch::Merge(&tampered))
        .await
        .expect("edit the cache Secret by hand");
    groups
        .patch(
            "gt",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"image": "gitea/runner:1.0.9",
                "cache": {"size": "2Gi"}}})),
        )
        .await
        .expect("new image and size");
    let updated = wait_until(DEADLINE, "the cache objects updated", || async {
        let image = deployments.get_opt(CACHE).await.ok().flatten().and_then(|d| {
            d.spec
                .template
                .spec
                .and_then(|p| p.containers.first().and_then(|c| c.image.clone()))
        });
        let size = claims.get_opt(CACHE).await.ok().flatten().and_then(|c| {
            c.spec
                .and_then(|s| s.resources)
                .and_then(|r| r.requests)
                .and_then(|r| r.get("storage").map(|q| q.0.clone()))
        });
        let config = secrets
            .get_opt(CACHE)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.data)
            .and_then(|d| d.get("runner.yaml").map(|v| v.0.clone()));
        image.as_deref() == Some("gitea/runner:1.0.9")
            && size.as_deref() == Some("2Gi")
            && config.is_some_and(|c| c != b"x")
    })
    .await;
    if updated.is_err() {
        fail_with_output(op, "the cache objects were not updated");
    }
    groups
        .patch(
            "gt",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"cache": null}})),
        )
        .await
        .expect("no cache");
    let removed = wait_until(DEADLINE, "the cache objects removed", || async {
        matches!(deployments.get_opt(CACHE).await, Ok(None))
            && matches!(claims.get_opt(CACHE).await, Ok(None))
            && matches!(services.get_opt(CACHE).await, Ok(None))
            && matches!(policies.get_opt(CACHE).await, Ok(None))
            && matches!(secrets.get_opt(CACHE).await, Ok(None))
    })
    .await;
    if removed.is_err() {
        fail_with_output(op, "the cache objects stayed after spec.cache was removed");
    }
}

/// Every (group, resource, verb) a rule names.
fn triples(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in rules {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------

/// The hooks' ClusterRole the chart ships holds exactly what GitHub's `kubernetes` mode asks for
/// (`forgerunner_github::container_mode::runner_role_rules`), and what `kubernetes-novolume`
/// asks for is part of it: the operator binds the same role for both.
#[test]
fn the_hooks_cluster_role_is_what_the_github_modes_ask_for() {
    let chart = read_chart(&chart::render(&["--set", "rbac.runnerContainerHooks=true"]));
    let shipped = triples(&chart.cluster_role_rules(&chart.hooks("clusterRole")));
    let asked = |mode| {
        let group = RunnerGroup::test(ForgeKind::Github).container_mode(mode).build();
        triples(&forgerunner_github::container_mode::runner_role_rules(
            &group.spec,
        ))
    };
    assert_eq!(shipped, asked(ContainerModeType::Kubernetes));
    assert!(asked(ContainerModeType::KubernetesNoVolume).is_subset(&shipped));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chart_rbac_covers_every_call_the_operator_makes() {
    let chart = read_chart(&chart::render(&["--set", "rbac.runnerContainerHooks=true"]));
    assert!(
        !chart.grants.is_empty(),
        "the chart binds no rules to the operator"
    );

    // H2: the operator holds none of the hooks' own rights, anywhere.
    for (group, resource, verb) in [
        ("", "pods", "create"),
        ("", "pods", "delete"),
        ("", "pods/exec", "create"),
        ("", "pods/log", "get"),
        ("", "secrets", "list"),
        ("", "secrets", "delete"),
        ("rbac.authorization.k8s.io", "roles", "create"),
        ("rbac.authorization.k8s.io", "rolebindings", "patch"),
    ] {
        assert!(
            !authorized(&chart.grants, NS, group, resource, verb, "any"),
            "the chart grants the operator {verb} {}/{resource}",
            group_name(group)
        );
    }

    let world = World::start(WorldOptions::default()).await.expect("world starts");
    world.create_namespace(NS).await.expect("namespace");
    let run = exercise_operator(&world, &chart).await;

    // The bindings the operator made: the hooks' role for the runner account, the cleanup role
    // for itself, each in the group's namespace, and each one a real API server lets it create.
    let mut bound = BTreeSet::new();
    let mut grants = chart.grants;
    let chart = Chart {
        grants: Vec::new(),
        ..chart
    };
    for binding in &run.bindings {
        let check = binding_authorized(&grants, &chart, binding);
        assert_eq!(
            check,
            Some(BindingCheck::Bind),
            "RoleBinding {:?} → {:?}: allowed only through bind",
            binding.metadata.name,
            binding.role_ref
        );
        bound.insert(binding.role_ref.name.clone());
    }
    assert_eq!(
        bound,
        BTreeSet::from([chart.hooks("clusterRole"), chart.hooks("cleanupClusterRole")]),
        "both hooks ClusterRoles bound"
    );
    // What the operator bound to itself is granted to it in that namespace, and only there.
    for binding in &run.bindings {
        let namespace = binding.metadata.namespace.clone().expect("namespaced");
        if chart.names_operator(&binding.subjects, OPERATOR_NS) {
            assert_eq!(binding.role_ref.name, chart.hooks("cleanupClusterRole"));
            for rule in chart.cluster_role_rules(&binding.role_ref.name) {
                grants.push(Grant {
                    scope: Scope::Namespace(namespace.clone()),
                    rule,
                });
            }
        }
    }

    let log = world.api.requests();
    let footprint = log.rbac_footprint("forgerunner/");
    let lines: Vec<String> = footprint
        .iter()
        .map(|(g, r, v)| format!("{} {}/{r}", v.as_str(), group_name(g)))
        .collect();
    println!(
        "operator RBAC footprint ({} triples):\n  {}",
        lines.len(),
        lines.join("\n  ")
    );

    // Non-trivial: the life cycle really ran under the operator's User-Agent.
    for (group, resource, verb) in [
        ("batch", "jobs", Verb::Create),
        ("forgerunner.dev", "runnergroups/status", Verb::Patch),
        ("forgerunner.dev", "runnergroups", Verb::Watch),
        ("coordination.k8s.io", "leases", Verb::Get),
        ("", "secrets", Verb::Get),
        ("rbac.authorization.k8s.io", "rolebindings", Verb::Create),
        ("", "serviceaccounts", Verb::Delete),
    ] {
        assert!(
            footprint.contains(&(group.to_owned(), resource.to_owned(), verb)),
            "expected {} {group}/{resource} in the footprint: {lines:#?}",
            verb.as_str()
        );
    }

    let webhook_secret_read = log.records.iter().any(|r| {
        r.user_agent.starts_with("forgerunner/")
            && r.verb == Some(Verb::Get)
            && r.resource == "secrets"
            && r.name.as_deref() == Some("gt-webhook")
    });
    assert!(
        webhook_secret_read,
        "the operator never read the webhook Secret gt-webhook"
    );

    // Every request (not just every triple: namespace and resourceNames matter) is allowed.
    let mut uncovered: BTreeMap<String, usize> = BTreeMap::new();
    for record in log
        .records
        .iter()
        .filter(|r| r.user_agent.starts_with("forgerunner/"))
    {
        let Some(verb) = record.verb else {
            // Discovery and /version: granted to every authenticated user (system:discovery).
            continue;
        };
        if !grants.iter().any(|g| g.allows(record, verb)) {
            let key = format!(
                "{} {}/{} namespace={} name={}",
                verb.as_str(),
                group_name(&record.group),
                record.resource,
                record.namespace.as_deref().unwrap_or("<cluster>"),
                record.name.as_deref().unwrap_or("<none>")
            );
            *uncovered.entry(key).or_insert(0) += 1;
        }
    }
    assert!(
        uncovered.is_empty(),
        "the chart's RBAC does not allow these operator requests (count):\n{}",
        uncovered
            .iter()
            .map(|(k, n)| format!("  {k} ×{n}"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // The other way: every verb the chart grants is used, or reached only off this run's paths.
    let mut needed: BTreeSet<(String, String, String)> = footprint
        .iter()
        .map(|(g, r, v)| (g.clone(), r.clone(), v.as_str().to_owned()))
        .collect();
    // `bind` is no request of its own: the API server checks it on each binding created.
    needed.insert((
        "rbac.authorization.k8s.io".to_owned(),
        "clusterroles".to_owned(),
        "bind".to_owned(),
    ));
    let granted = triples(&grants.iter().map(|g| g.rule.clone()).collect::<Vec<_>>());
    for (g, r, v, why) in UNREACHED {
        let entry = ((*g).to_owned(), (*r).to_owned(), (*v).to_owned());
        assert!(
            granted.contains(&entry),
            "UNREACHED lists {v} {}/{r}, which the chart no longer grants: drop it ({why})",
            group_name(g)
        );
        needed.insert(entry);
    }
    let unused: Vec<String> = granted
        .difference(&needed)
        .map(|(g, r, v)| format!("  {v} {}/{r}", group_name(g)))
        .collect();
    assert!(
        unused.is_empty(),
        "the chart grants verbs the operator never used (remove them, or list the code path \
         in UNREACHED):\n{}",
        unused.join("\n")
    );
}
