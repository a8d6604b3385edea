//! The ServiceAccount and RoleBindings of a group whose forge asks for runner permissions
//! ([`crate::forge::ForgeProfile::runner_role_rules`], e.g. GitHub's container hooks in `kubernetes`
//! mode).
//!
//! The permissions live in two ClusterRoles the chart ships ([`RunnerHooks`]); the operator only
//! binds them, with RoleBindings in the group's namespace, and a RoleBinding that names a
//! ClusterRole grants its rules in that namespace alone. Kubernetes lets a user create a binding
//! to a role whose rules it does not hold when it may `bind` that role (kubernetes
//! `pkg/registry/rbac/escalation_check.go`, `BindingAuthorized`, called first by `Create` in
//! `pkg/registry/rbac/rolebinding/policybased/storage.go`; the RBAC docs, "Restrictions on role
//! binding creation or update"). So the operator's token holds `bind` on those two names, not the
//! hooks' pods/exec, pod creation and Secret listing.
//!
//! Objects are created, never patched or applied. One that exists already is the group's only
//! when an owner reference names the group's uid; any other is left exactly as it is, and the
//! group reports [`ReconcileError::RunnerRbacConflict`] without starting runners. When the group
//! stops asking, the objects it owns are deleted once no runner of the old spec is left.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use super::context::Context;
use super::error::ReconcileError;
use super::ledger::Upkeep;
use super::observe::{belongs_to, job_phase};
pub use super::owned::owned_by;
use super::owned::{Found, delete_exact, find, is_status, refuse_foreign};
use crate::crd::RunnerGroup;
use crate::names::{runner_cleanup_binding_name, runner_service_account_name};
use crate::plan::RunnerPhase;
use crate::runner_job::{TEMPLATE_HASH_ANNOTATION, group_owner_reference, runner_labels, template_hash};
use crate::startup::{StartupFailure, Stuck};

/// API group of RBAC objects, as a `roleRef` names it.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The ClusterRoles the chart ships for the runner container hooks (operator config
/// `runnerHooks`), and the operator's own ServiceAccount, which the cleanup role is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerHooks {
    /// ClusterRole holding the hooks' rules, bound to the group's runner ServiceAccount.
    pub cluster_role: String,
    /// ClusterRole holding what the operator's sweep of hook leftovers needs (delete pods, list
    /// and delete Secrets), bound to the operator's ServiceAccount.
    pub cleanup_cluster_role: String,
    /// Namespace of the operator's ServiceAccount (the operator pod's namespace).
    pub operator_namespace: String,
    /// Name of the operator's ServiceAccount.
    pub operator_service_account: String,
}

/// The objects a group in a hooks mode needs, all in its namespace and owned by it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunnerRbac {
    /// `<group>-runner`, the account the runner pods run as.
    pub service_account: ServiceAccount,
    /// `<group>-runner`: [`RunnerHooks::cluster_role`] for that account.
    pub binding: RoleBinding,
    /// `<group>-runner-cleanup`: [`RunnerHooks::cleanup_cluster_role`] for the operator.
    pub cleanup_binding: RoleBinding,
}

/// The objects for `group` binding `hooks`; pure, so their shape is tested without a server.
pub fn runner_rbac_objects(group: &RunnerGroup, hooks: &RunnerHooks) -> Result<RunnerRbac, ReconcileError> {
    let group_name = group.name_any();
    let account = runner_service_account_name(&group_name);
    let owner = group_owner_reference(group).map_err(|e| ReconcileError::InvalidSpec(e.to_string()))?;
    let meta = |name: &str| ObjectMeta {
        name: Some(name.to_owned()),
        namespace: group.namespace(),
        labels: Some(runner_labels(group)),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };
    let binding = |name: &str, role: &str, subject: Subject| RoleBinding {
        metadata: meta(name),
        role_ref: RoleRef {
            api_group: Some(RBAC_GROUP.to_owned()),
            kind: "ClusterRole".to_owned(),
            name: role.to_owned(),
        },
        subjects: Some(vec![subject]),
    };
    let service_account_subject = |namespace: Option<String>, name: &str| Subject {
        kind: "ServiceAccount".to_owned(),
        name: name.to_owned(),
        namespace,
        api_group: None,
    };
    Ok(RunnerRbac {
        service_account: ServiceAccount {
            metadata: meta(&account),
            ..ServiceAccount::default()
        },
        binding: binding(
            &account,
            &hooks.cluster_role,
            service_account_subject(group.namespace(), &account),
        ),
        cleanup_binding: binding(
            &runner_cleanup_binding_name(&group_name),
            &hooks.cleanup_cluster_role,
            service_account_subject(
                Some(hooks.operator_namespace.clone()),
                &hooks.operator_service_account,
            ),
        ),
    })
}

/// What the state of a group's runner RBAC is to be, as a fingerprint: a pass that finds the same
/// one as the last settled pass has nothing to do.
fn fingerprint(hooks: Option<&RunnerHooks>) -> String {
    match hooks {
        Some(h) => format!(
            "bound {} {} {}/{}",
            h.cluster_role, h.cleanup_cluster_role, h.operator_namespace, h.operator_service_account
        ),
        None => "none".to_owned(),
    }
}

/// Whether the runner RBAC objects must be created again now, although this process made them:
/// a runner pod was refused because its ServiceAccount does not exist
/// ([`StartupFailure::ServiceAccountMissing`]), so someone removed it. A real API server refuses
/// every runner pod until it is back (ServiceAccount admission). The RoleBindings are checked
/// with it: removed by hand or by a cleanup tool, they usually go together, and their absence
/// alone refuses no pod (it shows only as a 403 inside the runner), so the missing account is
/// the one signal there is.
pub fn must_reapply<'a>(stuck: impl IntoIterator<Item = &'a Stuck>) -> bool {
    stuck
        .into_iter()
        .any(|s| s.cause == StartupFailure::ServiceAccountMissing)
}

/// Keeps the group's runner RBAC as the forge asks (`wanted`: its runner rules are not empty):
/// created when wanted, the group's own objects deleted when not. Settles once per process and
/// whenever the wanted state changes (the observe step forgets it when a runner pod is refused
/// for a missing ServiceAccount), not on every pass.
///
/// Fails with [`ReconcileError::RunnerHooksDisabled`] when wanted and this installation grants no
/// hooks, and with [`ReconcileError::RunnerRbacConflict`] when a needed name is taken by an
/// object the group does not own: no runner must start then, as its pod would run as someone
/// else's ServiceAccount.
pub async fn keep_runner_rbac(
    ctx: &Context,
    group: &RunnerGroup,
    wanted: bool,
    upkeep: &mut Upkeep,
) -> Result<(), ReconcileError> {
    let hooks = if wanted {
        Some(
            ctx.runner_hooks
                .as_ref()
                .ok_or(ReconcileError::RunnerHooksDisabled)?,
        )
    } else {
        None
    };
    let wanted_state = fingerprint(hooks);
    if upkeep.runner_rbac.as_deref() == Some(wanted_state.as_str()) {
        return Ok(());
    }
    let settled = match hooks {
        Some(hooks) => ensure_runner_rbac(&ctx.client, group, hooks).await?,
        None => remove_runner_rbac(ctx, group).await,
    };
    if settled {
        upkeep.runner_rbac = Some(wanted_state);
    }
    Ok(())
}

/// Creates `obj`; `false` when the name was taken meanwhile (the next pass looks again).
async fn create<K>(api: &Api<K>, obj: &K) -> Result<bool, ReconcileError>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(super::owned::create(api, obj, "create runner RBAC")
        .await?
        .is_some())
}

/// The conflict error for the object `kind` `namespace/name` of someone else's.
fn conflict(kind: &'static str, namespace: &str, name: &str) -> impl FnOnce(String) -> ReconcileError {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    move |owners| ReconcileError::RunnerRbacConflict {
        kind,
        namespace,
        name,
        owners,
    }
}

/// Puts the group's `wanted` binding in place over what was `found`; `false` when it must be
/// looked at again next pass.
async fn put_binding(
    api: &Api<RoleBinding>,
    wanted: &RoleBinding,
    found: Found<RoleBinding>,
) -> Result<bool, ReconcileError> {
    match found {
        Found::Missing => create(api, wanted).await,
        Found::Ours(b) if b.role_ref == wanted.role_ref && b.subjects == wanted.subjects => Ok(true),
        Found::Ours(b) => {
            // The group's own binding, but not the one needed now: one made by an earlier
            // version (naming the per-group Role), or edited by hand. A roleRef cannot change,
            // and replacing needs no update right.
            delete_exact(api, &b)
                .await
                .map_err(ReconcileError::kube("delete runner RBAC"))?;
            create(api, wanted).await
        }
        // Refused before anything was created.
        Found::Foreign(_) => Ok(false),
    }
}

/// Creates what the group lacks of its runner ServiceAccount and RoleBindings; returns whether
/// everything is in place. Every name is looked at before anything is made, so a conflict leaves
/// the namespace as it was: a binding made before the account was refused would grant the hooks'
/// rights to someone else's account.
pub async fn ensure_runner_rbac(
    client: &Client,
    group: &RunnerGroup,
    hooks: &RunnerHooks,
) -> Result<bool, ReconcileError> {
    let namespace = group.namespace().unwrap_or_default();
    let wanted = runner_rbac_objects(group, hooks)?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &namespace);
    let account_name = wanted.service_account.name_any();
    let binding_name = wanted.binding.name_any();
    let cleanup_name = wanted.cleanup_binding.name_any();
    let account = find(&accounts, &account_name, group, "get runner RBAC").await?;
    let binding = find(&bindings, &binding_name, group, "get runner RBAC").await?;
    let cleanup = find(&bindings, &cleanup_name, group, "get runner RBAC").await?;
    refuse_foreign(&account, conflict("ServiceAccount", &namespace, &account_name))?;
    refuse_foreign(&binding, conflict("RoleBinding", &namespace, &binding_name))?;
    refuse_foreign(&cleanup, conflict("RoleBinding", &namespace, &cleanup_name))?;
    let account_ready = match account {
        Found::Missing => create(&accounts, &wanted.service_account).await?,
        Found::Ours(_) | Found::Foreign(_) => true,
    };
    let binding_ready = put_binding(&bindings, &wanted.binding, binding).await?;
    let cleanup_ready = put_binding(&bindings, &wanted.cleanup_binding, cleanup).await?;
    Ok(account_ready && binding_ready && cleanup_ready)
}

/// Whether a runner of `group` built from another spec than the current one may still run: its
/// pod runs as the runner ServiceAccount of the old spec, and its hooks need their rights until
/// it ends.
pub(super) fn runners_of_an_earlier_spec(ctx: &Context, group: &RunnerGroup) -> bool {
    let current = template_hash(&group.spec);
    ctx.jobs.state().iter().any(|job| {
        let hash = job
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TEMPLATE_HASH_ANNOTATION));
        belongs_to(job, group)
            && hash != Some(&current)
            && !matches!(job_phase(job), RunnerPhase::Succeeded | RunnerPhase::Failed)
    })
}

/// Deletes the group's own runner ServiceAccount and RoleBindings, if any; returns whether that
/// is settled. Objects of the same names that the group does not own are left alone.
async fn remove_runner_rbac(ctx: &Context, group: &RunnerGroup) -> bool {
    if ctx.runner_hooks.is_none() {
        // This installation grants no rights on these objects; any left by an earlier
        // configuration go with the group (owner reference).
        return true;
    }
    if runners_of_an_earlier_spec(ctx, group) {
        return false;
    }
    let namespace = group.namespace().unwrap_or_default();
    let group_name = group.name_any();
    let accounts: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &namespace);
    let bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), &namespace);
    let account = runner_service_account_name(&group_name);
    let results = [
        remove_owned(&bindings, &account, group).await,
        remove_owned(&bindings, &runner_cleanup_binding_name(&group_name), group).await,
        remove_owned(&accounts, &account, group).await,
    ];
    let mut settled = true;
    for result in results {
        match result {
            Ok(()) => {}
            // Missing rights do not come back by retrying; the objects go with the group.
            Err(e) if is_status(&e, 403) => {
                warn!(group = %format!("{namespace}/{group_name}"), error = %e, "may not remove the runner RBAC the group no longer needs");
            }
            Err(e) => {
                warn!(group = %format!("{namespace}/{group_name}"), error = %e, "could not remove the runner RBAC the group no longer needs; retrying next pass");
                settled = false;
            }
        }
    }
    settled
}

/// Deletes the object `name` if `group` owns it.
async fn remove_owned<K>(api: &Api<K>, name: &str, group: &RunnerGroup) -> Result<(), kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    if super::owned::remove_owned(api, name, group).await? {
        info!(name, namespace = ?group.namespace(), "deleted runner RBAC the group no longer needs");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ForgeKind;

    fn group() -> RunnerGroup {
        RunnerGroup::test(ForgeKind::Github)
            .named("ci", "hooks")
            .max(1)
            .uid("uid-1")
            .build()
    }

    fn hooks() -> RunnerHooks {
        RunnerHooks {
            cluster_role: "fr-runner-hooks".into(),
            cleanup_cluster_role: "fr-runner-hooks-cleanup".into(),
            operator_namespace: "ops".into(),
            operator_service_account: "fr".into(),
        }
    }

    #[test]
    fn objects_are_named_owned_and_bind_the_cluster_roles_in_the_group_namespace() {
        let o = runner_rbac_objects(&group(), &hooks()).expect("objects");
        for (meta, name) in [
            (&o.service_account.metadata, "hooks-runner"),
            (&o.binding.metadata, "hooks-runner"),
            (&o.cleanup_binding.metadata, "hooks-runner-cleanup"),
        ] {
            assert_eq!(meta.name.as_deref(), Some(name));
            assert_eq!(meta.namespace.as_deref(), Some("ci"));
            let owner = &meta.owner_references.as_ref().expect("owner")[0];
            assert_eq!(
                (owner.kind.as_str(), owner.uid.as_str()),
                ("RunnerGroup", "uid-1")
            );
            // No blockOwnerDeletion: it would need update on runnergroups/finalizers.
            assert_eq!(owner.block_owner_deletion, None);
            assert!(owned_by(meta, &group()));
        }
        let role_ref = |b: &RoleBinding| (b.role_ref.kind.clone(), b.role_ref.name.clone());
        assert_eq!(
            role_ref(&o.binding),
            ("ClusterRole".into(), "fr-runner-hooks".into())
        );
        assert_eq!(
            role_ref(&o.cleanup_binding),
            ("ClusterRole".into(), "fr-runner-hooks-cleanup".into())
        );
        let subject = |b: &RoleBinding| {
            let s = &b.subjects.as_ref().expect("subjects")[0];
            (s.kind.clone(), s.name.clone(), s.namespace.clone())
        };
        assert_eq!(
            subject(&o.binding),
            ("ServiceAccount".into(), "hooks-runner".into(), Some("ci".into()))
        );
        assert_eq!(
            subject(&o.cleanup_binding),
            ("ServiceAccount".into(), "fr".into(), Some("ops".into()))
        );
    }

    #[test]
    fn only_the_groups_uid_makes_an_object_its_own() {
        let mut meta = runner_rbac_objects(&group(), &hooks())
            .expect("objects")
            .service_account
            .metadata;
        let mut other = group();
        other.metadata.uid = Some("uid-2".into());
        assert!(!owned_by(&meta, &other), "same name, another group");
        meta.owner_references = None;
        assert!(!owned_by(&meta, &group()));
        assert_eq!(super::super::owned::owners(&meta), "no owner");
        let mut no_uid = group();
        no_uid.metadata.uid = None;
        assert!(!owned_by(&meta, &no_uid));
    }

    #[test]
    fn the_fingerprint_changes_with_what_is_bound() {
        let mut other = hooks();
        other.operator_service_account = "other".into();
        assert_ne!(fingerprint(Some(&hooks())), fingerprint(Some(&other)));
        assert_ne!(fingerprint(Some(&hooks())), fingerprint(None));
    }

    #[test]
    fn only_a_missing_service_account_calls_for_a_new_apply() {
        let stuck = |cause| Stuck {
            cause,
            message: String::new(),
        };
        assert!(must_reapply(&[
            stuck(StartupFailure::ImagePullFailed),
            stuck(StartupFailure::ServiceAccountMissing),
        ]));
        assert!(!must_reapply(&[stuck(StartupFailure::PodRejected)]));
        assert!(!must_reapply(&[]));
    }

    #[test]
    fn a_group_without_uid_is_refused() {
        let mut g = group();
        g.metadata.uid = None;
        assert!(runner_rbac_objects(&g, &hooks()).is_err());
    }
}
