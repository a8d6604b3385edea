//! Issues 6 and 14: the RBAC rules the Helm chart grants with default values are exactly what
//! the operator uses, checked both ways.
//!
//! The real binary runs a whole life cycle against the world: leader election, a GitHub group in
//! `containerMode: kubernetes` and a Gitea group, jobs on both, a signed Gitea webhook (the
//! webhook Secret read), deletion of both groups through the finalizer, and a graceful stop
//! (lease release). The fake API server records every request with its User-Agent
//! (`forgerunner/<version>`):
//! - each request the operator sent must be allowed by a Role or ClusterRole the chart binds to
//!   its ServiceAccount;
//! - each verb the chart grants must be used: by a request of the run, by the rules of the Role
//!   the operator created for the runner container hooks (Kubernetes only lets it grant what it
//!   holds), or by a path the run cannot reach, listed in [`UNREACHED`] with the code using it.
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
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::operator::OperatorSettings;
use forgerunner_sandbox::world::{World, WorldOptions, wait_until};
use forgerunner_testkit::apiserver::{RequestRecord, Verb};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::DeleteParams;

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
         (crates/core/src/reconcile/startup_check.rs failed_create_messages); every runner here \
         starts at once",
    ),
    (
        "events.k8s.io",
        "events",
        "patch",
        "kube's Recorder patches an Event into a series when it repeats \
         (crates/core/src/reconcile/events.rs publish); a run may not repeat one",
    ),
    (
        "",
        "serviceaccounts",
        "create",
        "server-side apply of the hooks' ServiceAccount (crates/core/src/reconcile/runner_rbac.rs) \
         is authorized as create when the object is new; the fake checks no verbs",
    ),
    (
        "rbac.authorization.k8s.io",
        "roles",
        "create",
        "as for serviceaccounts: the hooks' Role applied server-side (runner_rbac.rs)",
    ),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        "create",
        "as for serviceaccounts: the hooks' RoleBinding applied server-side (runner_rbac.rs)",
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

/// The rules the chart binds to the operator's ServiceAccount, with the release namespace
/// mapped to [`OPERATOR_NS`].
fn chart_grants(objects: &[serde_json::Value]) -> Vec<Grant> {
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the chart renders the operator Deployment");
    let release_ns = deployment["metadata"]["namespace"]
        .as_str()
        .expect("the Deployment has a namespace")
        .to_owned();
    let sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("the Deployment names its ServiceAccount")
        .to_owned();
    let is_operator = |subjects: &Option<Vec<Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount" && s.name == sa && s.namespace.as_deref() == Some(release_ns.as_str())
        })
    };
    let local = |ns: &str| {
        if ns == release_ns {
            OPERATOR_NS.to_owned()
        } else {
            ns.to_owned()
        }
    };
    let cluster_roles: Vec<ClusterRole> = of_kind(objects, "ClusterRole");
    let roles: Vec<Role> = of_kind(objects, "Role");
    let cluster_role_rules = |name: &str| -> Vec<PolicyRule> {
        let role = cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| {
                panic!("a binding refers to ClusterRole {name}, which the chart does not render")
            });
        role.rules.clone().unwrap_or_default()
    };

    let mut grants = Vec::new();
    for binding in of_kind::<ClusterRoleBinding>(objects, "ClusterRoleBinding") {
        if is_operator(&binding.subjects) {
            for rule in cluster_role_rules(&binding.role_ref.name) {
                grants.push(Grant {
                    scope: Scope::Cluster,
                    rule,
                });
            }
        }
    }
    for binding in of_kind::<RoleBinding>(objects, "RoleBinding") {
        if !is_operator(&binding.subjects) {
            continue;
        }
        let ns = binding
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| release_ns.clone());
        let rules = if binding.role_ref.kind == "ClusterRole" {
            cluster_role_rules(&binding.role_ref.name)
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
    grants
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

/// Runs groups, jobs, a webhook and group deletion, then stops the operator gracefully; returns
/// the rules of the Role the operator created for the runner container hooks.
async fn exercise_operator(world: &World) -> Vec<PolicyRule> {
    let settings = OperatorSettings {
        leader_election: true,
        ..OperatorSettings::default()
    };
    let mut op = start_operator_with(world, &settings);

    let gitea = world.gitea.as_ref().expect("gitea fake").clone();
    gitea.set_webhook(
        &format!("http://{}/webhooks/gitea", op.http_addr()),
        WEBHOOK_SECRET,
    );
    world
        .add_github_group(NS, "gh", &GroupSize::up_to(3))
        .await
        .expect("github group");
    // Kubernetes mode: the operator keeps the hooks' ServiceAccount, Role and RoleBinding.
    let groups: Api<RunnerGroup> = Api::namespaced(world.client.clone(), NS);
    groups
        .patch(
            "gh",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"containerMode": {"type": "kubernetes"}}})),
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
    let Ok(scale_set) = world.github_scale_set("gh", Duration::from_secs(60)).await else {
        fail_with_output(&op, "the operator created no scale set (not leading?)");
    };
    for _ in 0..JOBS_PER_FORGE {
        world.queue_github_job(scale_set, "gh").expect("queue github job");
        world.queue_gitea_job(&["linux"]).expect("queue gitea job");
    }

    // Runner Jobs come and go while the jobs run: look at the owner references of every one seen.
    let blocking = std::sync::Mutex::new(BTreeSet::new());
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
    let role = roles.get("gh-runner").await.expect("the hooks' Role");
    assert!(
        role.rules
            .iter()
            .flatten()
            .any(|r| r.resources.iter().flatten().any(|x| x == "pods/exec")),
        "{role:?}"
    );
    assert_eq!(
        role.metadata.owner_references.as_ref().expect("owned")[0].kind,
        "RunnerGroup",
        "owned by the group, so it goes with it"
    );
    let bindings: Api<RoleBinding> = Api::namespaced(world.client.clone(), NS);
    let binding = bindings.get("gh-runner").await.expect("the hooks' RoleBinding");
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(world.client.clone(), NS);
    let account = accounts
        .get("gh-runner")
        .await
        .expect("the hooks' ServiceAccount");
    let mut blocking = blocking.into_inner().expect("not poisoned");
    blocking.extend(blocking_owner_refs("Role", &role.metadata));
    blocking.extend(blocking_owner_refs("RoleBinding", &binding.metadata));
    blocking.extend(blocking_owner_refs("ServiceAccount", &account.metadata));
    assert!(
        blocking.is_empty(),
        "owner references with blockOwnerDeletion: an API server running the \
         OwnerReferencesPermissionEnforcement admission plugin would refuse these objects, as the \
         chart grants no update on runnergroups/finalizers: {blocking:?}"
    );

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
    role.rules.unwrap_or_default()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chart_rbac_covers_every_call_the_operator_makes() {
    let grants = chart_grants(&chart::render(&[]));
    assert!(!grants.is_empty(), "the chart binds no rules to the operator");

    let world = World::start(WorldOptions::default()).await.expect("world starts");
    world.create_namespace(NS).await.expect("namespace");
    let hooks_rules = exercise_operator(&world).await;

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
        "the chart's default RBAC does not allow these operator requests (count):\n{}",
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
    // Creating the hooks' Role needs every permission in it (RBAC escalation prevention).
    needed.extend(triples(&hooks_rules));
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
