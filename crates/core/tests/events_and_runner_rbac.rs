//! The reconciler's Events and runner RBAC against the testkit's fake API server: one Event per
//! change of note, and a runner ServiceAccount removed behind the operator's back re-applied as
//! soon as a runner pod is refused for it. No cluster simulator runs: runner Jobs stay pending
//! and the Job controller's `FailedCreate` Event is written by the test.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use k8s_openapi::api::core::v1::{Event as CoreEvent, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use common::*;

fn service_accounts(h: &Harness) -> Api<ServiceAccount> {
    Api::namespaced(h.client.clone(), NS)
}

/// kube's Recorder (kube-runtime 5.0 `src/events.rs`) keys an Event series by type, action,
/// reason, reporter and object, not by note, and a repeat within its six-minute cache patches
/// the first Event's `series`, keeping the first note (which `ValidateEventUpdate`,
/// `pkg/apis/core/validation/events.go`, makes immutable anyway). A second scale-up must show
/// as its own Event with its own count, not as the first one counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_new_scale_up_note_is_its_own_event() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("notes", gitea_spec(0, 5, 600)).await;
    wait_for("the first ScaledUp Event", || async {
        !h.notes("ScaledUp").await.is_empty()
    })
    .await;
    let first = h.notes("ScaledUp").await;

    h.forge.jobs.store(3, Ordering::SeqCst);
    wait_for("3 runner jobs", || async {
        h.runner_jobs("notes").await.len() == 3
    })
    .await;
    wait_for("a second ScaledUp Event with its own note", || async {
        let notes = h.notes("ScaledUp").await;
        notes.len() >= 2 && notes.iter().collect::<BTreeSet<_>>().len() == notes.len()
    })
    .await;
    let notes = h.notes("ScaledUp").await;
    assert!(notes.contains(&first[0]), "{notes:?}");
    assert!(
        notes.iter().any(|n| n != &first[0]),
        "the second scale-up's note is shown: {notes:?}"
    );
    h.stop().await;
}

/// The Job controller's `FailedCreate` Event for a pod refused by the ServiceAccount admission
/// plugin (`plugin/pkg/admission/serviceaccount/admission.go`, `Plugin.Admit`: `error looking
/// up service account <ns>/<name>: serviceaccount "<name>" not found`, 403), as
/// `RealPodControl.createPods` (`pkg/controller/controller_utils.go`) records it on the Job.
async fn refuse_runner_pod(client: &Client, job: &str, account: &str) {
    let ev: CoreEvent = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{job}.sa-missing"), "namespace": NS},
        "involvedObject": {"kind": "Job", "apiVersion": "batch/v1", "name": job, "namespace": NS},
        "reason": "FailedCreate",
        "type": "Warning",
        "message": format!(
            "Error creating: pods \"{job}-\" is forbidden: error looking up service account \
             {NS}/{account}: serviceaccount \"{account}\" not found"
        ),
        "source": {"component": "job-controller"},
        "count": 1,
        "lastTimestamp": jiff::Timestamp::now().to_string(),
    }))
    .expect("event");
    Api::<CoreEvent>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &ev)
        .await
        .expect("create FailedCreate event");
}

/// The runner ServiceAccount removed out of band is applied again as soon as a runner pod is
/// refused for it, not only after an operator restart; the group says why its runners failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_refused_for_a_missing_service_account_brings_the_account_back() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.role_rules.lock().expect("lock") = vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["pods".into()]),
        verbs: vec!["get".into(), "create".into()],
        ..PolicyRule::default()
    }];
    // `runner_service_account_name`: the group's name and `-runner`.
    let account = "hooks-runner";
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("hooks", gitea_spec(0, 1, 600)).await;
    wait_for("the runner ServiceAccount and one runner Job", || async {
        let sa = service_accounts(&h).get_opt(account).await.ok().flatten();
        sa.is_some() && h.runner_jobs("hooks").await.len() == 1
    })
    .await;

    service_accounts(&h)
        .delete(account, &DeleteParams::default())
        .await
        .expect("delete the runner ServiceAccount");
    let job = h.runner_jobs("hooks").await[0]
        .metadata
        .name
        .clone()
        .expect("job name");
    refuse_runner_pod(&h.client, &job, account).await;

    // The runner is looked at once it has been pending for `LOOK_AFTER` (5 s).
    wait_for("the runner ServiceAccount applied again", || async {
        service_accounts(&h)
            .get_opt(account)
            .await
            .ok()
            .flatten()
            .is_some()
    })
    .await;
    wait_for("Degraded=True ServiceAccountMissing", || async {
        h.condition("hooks", "Degraded")
            .await
            .is_some_and(|(s, r, _)| s == "True" && r == "ServiceAccountMissing")
    })
    .await;
    h.stop().await;
}

/// Hook rules as GitHub's `containerMode: kubernetes` asks for them (any non-empty set will do).
fn hook_rules() -> Vec<PolicyRule> {
    vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["pods".into()]),
        verbs: vec!["get".into(), "create".into()],
        ..PolicyRule::default()
    }]
}

/// What a platform team made by hand, before any group was named `ci`: a ServiceAccount, a Role
/// and a RoleBinding all called `ci-runner`, with no owner.
async fn platform_rbac(client: &Client) -> (ServiceAccount, Role, RoleBinding) {
    let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ci-runner", "namespace": NS, "labels": {"team": "platform"}},
    }))
    .expect("sa");
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ci-runner", "namespace": NS, "labels": {"team": "platform"}},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    }))
    .expect("role");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ci-runner", "namespace": NS, "labels": {"team": "platform"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ci-runner"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}],
    }))
    .expect("binding");
    let pp = PostParams::default();
    (
        Api::<ServiceAccount>::namespaced(client.clone(), NS)
            .create(&pp, &sa)
            .await
            .expect("create sa"),
        Api::<Role>::namespaced(client.clone(), NS)
            .create(&pp, &role)
            .await
            .expect("create role"),
        Api::<RoleBinding>::namespaced(client.clone(), NS)
            .create(&pp, &binding)
            .await
            .expect("create binding"),
    )
}

/// Issue M3: a group whose runner objects' names are taken by objects it does not own never
/// takes them over (no patch of their rules, subjects or owners, which would grant the hooks'
/// rights to whoever the platform bound, and make deleting the group delete the platform's
/// objects). The group reports the conflict, by reason and with an Event; another group of the
/// namespace is not held up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_rbac_objects_the_group_does_not_own_are_never_taken_over() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.role_rules.lock().expect("lock") = hook_rules();
    // A job is waiting, so a group that went ahead would start a runner.
    h.forge.jobs.store(1, Ordering::SeqCst);
    let (sa, role, binding) = platform_rbac(&h.client).await;
    h.create_group("ci", gitea_spec(0, 1, 600)).await;
    h.create_group("other", gitea_spec(0, 1, 600)).await;

    let sas = service_accounts(&h);
    let roles: Api<Role> = Api::namespaced(h.client.clone(), NS);
    let bindings: Api<RoleBinding> = Api::namespaced(h.client.clone(), NS);
    let untouched = || async {
        let now = (
            sas.get("ci-runner").await.expect("sa"),
            roles.get("ci-runner").await.expect("role"),
            bindings.get("ci-runner").await.expect("binding"),
        );
        let same_meta = |a: &ObjectMeta, b: &ObjectMeta| {
            (&a.labels, &a.owner_references, &a.uid) == (&b.labels, &b.owner_references, &b.uid)
        };
        same_meta(&now.0.metadata, &sa.metadata)
            && same_meta(&now.1.metadata, &role.metadata)
            && now.1.rules == role.rules
            && same_meta(&now.2.metadata, &binding.metadata)
            && now.2.subjects == binding.subjects
            && now.2.role_ref == binding.role_ref
    };
    // Either outcome ends the wait, so a takeover fails below with what changed.
    wait_for("the conflict reported (or the objects taken over)", || async {
        let conflict = h
            .condition("ci", "Ready")
            .await
            .is_some_and(|(_, r, _)| r == "RunnerRbacConflict");
        conflict || !untouched().await
    })
    .await;
    assert!(
        untouched().await,
        "the platform's objects changed: {:?} {:?} {:?}",
        sas.get("ci-runner").await,
        roles.get("ci-runner").await,
        bindings.get("ci-runner").await
    );
    let (status, reason, message) = h.condition("ci", "Ready").await.expect("Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RunnerRbacConflict")
    );
    assert!(
        message.contains("ci-runner") && message.contains("not owned by this RunnerGroup"),
        "{message}"
    );
    wait_for("a RunnerRbacConflict Event", || async {
        !h.notes("RunnerRbacConflict").await.is_empty()
    })
    .await;
    // The conflict is the group's own: the other group of the namespace gets its objects.
    wait_for("the other group's runner ServiceAccount", || async {
        sas.get_opt("other-runner").await.ok().flatten().is_some()
    })
    .await;
    wait_for("the other group's runner", || async {
        h.runner_jobs("other").await.len() == 1
    })
    .await;
    assert!(
        h.condition("other", "Ready")
            .await
            .is_none_or(|(_, r, _)| r != "RunnerRbacConflict")
    );
    // No runner of the refused group: its pod would run as the platform's ServiceAccount.
    assert!(h.runner_jobs("ci").await.is_empty());
    assert!(untouched().await, "still untouched after more passes");
    h.stop().await;
}

/// Issue M3: when the group stops asking for runner permissions (its `containerMode` removed),
/// the ServiceAccount and RoleBinding it owns go at once, not only with the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_rbac_goes_when_the_group_no_longer_needs_it() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.role_rules.lock().expect("lock") = hook_rules();
    h.create_group("hooks", gitea_spec(0, 1, 600)).await;
    let sas = service_accounts(&h);
    let bindings: Api<RoleBinding> = Api::namespaced(h.client.clone(), NS);
    wait_for("the runner ServiceAccount and RoleBinding", || async {
        sas.get_opt("hooks-runner").await.ok().flatten().is_some()
            && bindings.get_opt("hooks-runner").await.ok().flatten().is_some()
    })
    .await;

    // The forge no longer asks (as GitHub once containerMode is gone), and the spec changed.
    h.forge.role_rules.lock().expect("lock").clear();
    h.groups()
        .patch(
            "hooks",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"maxRunners": 2}})),
        )
        .await
        .expect("patch group");
    wait_for("the runner ServiceAccount and RoleBinding deleted", || async {
        sas.get_opt("hooks-runner").await.ok().flatten().is_none()
            && bindings.get_opt("hooks-runner").await.ok().flatten().is_none()
    })
    .await;
    h.stop().await;
}

/// Upgrade: a group's own RoleBinding made by an earlier version (naming the per-group Role,
/// whose rules the operator had to hold itself) is replaced by one naming the hooks'
/// ClusterRole; the group's cleanup binding is added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_of_an_earlier_version_is_replaced_by_the_cluster_role_binding() {
    let mut h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.role_rules.lock().expect("lock") = hook_rules();
    let bindings: Api<RoleBinding> = Api::namespaced(h.client.clone(), NS);
    h.create_group("hooks", gitea_spec(0, 1, 600)).await;
    wait_for("the runner RoleBinding", || async {
        bindings.get_opt("hooks-runner").await.ok().flatten().is_some()
    })
    .await;
    let owner = bindings
        .get("hooks-runner")
        .await
        .expect("binding")
        .metadata
        .owner_references;
    // What an earlier version left: the same name and owner, a per-group Role as roleRef. The
    // restart makes the new process look at the objects again (once per process).
    bindings
        .delete("hooks-runner", &DeleteParams::default())
        .await
        .expect("delete");
    let old: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hooks-runner", "namespace": NS, "ownerReferences": owner},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hooks-runner"},
        "subjects": [{"kind": "ServiceAccount", "name": "hooks-runner", "namespace": NS}],
    }))
    .expect("old binding");
    bindings
        .create(&PostParams::default(), &old)
        .await
        .expect("create old binding");
    h.restart_controller().await;
    let hooks = h.runner_hooks.clone().expect("hooks");
    wait_for("the binding naming the hooks' ClusterRole", || async {
        bindings
            .get_opt("hooks-runner")
            .await
            .ok()
            .flatten()
            .is_some_and(|b| b.role_ref.kind == "ClusterRole" && b.role_ref.name == hooks.cluster_role)
    })
    .await;
    let cleanup = bindings
        .get("hooks-runner-cleanup")
        .await
        .expect("the cleanup binding");
    assert_eq!(cleanup.role_ref.name, hooks.cleanup_cluster_role);
    let subject = &cleanup.subjects.expect("subjects")[0];
    assert_eq!(
        (subject.name.as_str(), subject.namespace.as_deref()),
        (
            hooks.operator_service_account.as_str(),
            Some(hooks.operator_namespace.as_str())
        )
    );
    h.stop().await;
}

/// An installation without the runner container hooks (chart `rbac.runnerContainerHooks:
/// false`, the default) refuses a group that needs them, by reason, and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_needing_hooks_is_refused_when_the_installation_grants_none() {
    let mut h = Harness::start(true).await;
    h.runner_hooks = None;
    h.restart_controller().await;
    h.create_secret("creds").await;
    *h.forge.role_rules.lock().expect("lock") = hook_rules();
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("hooks", gitea_spec(0, 1, 600)).await;
    wait_for("Ready=False RunnerHooksDisabled", || async {
        h.condition("hooks", "Ready").await.is_some_and(|(s, r, m)| {
            s == "False" && r == "RunnerHooksDisabled" && m.contains("rbac.runnerContainerHooks")
        })
    })
    .await;
    assert!(
        service_accounts(&h)
            .get_opt("hooks-runner")
            .await
            .expect("get")
            .is_none()
    );
    assert!(h.runner_jobs("hooks").await.is_empty());
    h.stop().await;
}
