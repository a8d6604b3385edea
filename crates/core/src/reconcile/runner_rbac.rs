//! The ServiceAccount, Role and RoleBinding a group's runner pods run as, when the forge asks for
//! runner permissions ([`crate::forge::Forge::runner_role_rules`], e.g. GitHub's container hooks
//! in `kubernetes` mode). Owned by the group, so they go when it goes.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};

use super::FIELD_MANAGER;
use super::error::ReconcileError;
use crate::crd::RunnerGroup;
use crate::names::runner_service_account_name;
use crate::runner_job::{group_owner_reference, runner_labels};
use crate::startup::{StartupFailure, Stuck};

/// The three objects for `group` granting `rules`; pure, so their shape is tested without a
/// server.
pub fn runner_rbac_objects(
    group: &RunnerGroup,
    rules: Vec<PolicyRule>,
) -> Result<(ServiceAccount, Role, RoleBinding), ReconcileError> {
    let name = runner_service_account_name(&group.name_any());
    let owner = group_owner_reference(group).map_err(|e| ReconcileError::InvalidSpec(e.to_string()))?;
    let meta = ObjectMeta {
        name: Some(name.clone()),
        namespace: group.namespace(),
        labels: Some(runner_labels(group)),
        owner_references: Some(vec![owner]),
        ..ObjectMeta::default()
    };
    let sa = ServiceAccount {
        metadata: meta.clone(),
        ..ServiceAccount::default()
    };
    let role = Role {
        metadata: meta.clone(),
        rules: Some(rules),
    };
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "Role".to_owned(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name,
            namespace: group.namespace(),
            api_group: None,
        }]),
    };
    Ok((sa, role, binding))
}

/// A stable fingerprint of `rules`, so an unchanged set is not applied again every pass.
pub fn rules_fingerprint(rules: &[PolicyRule]) -> String {
    serde_json::to_string(rules).unwrap_or_default()
}

/// Whether the runner RBAC objects must be applied again now, although this process applied
/// them: a runner pod was refused because its ServiceAccount does not exist
/// ([`StartupFailure::ServiceAccountMissing`]), so someone removed it. A real API server refuses
/// every runner pod until it is back (ServiceAccount admission). The Role and RoleBinding go
/// with it: removed by hand or by a cleanup tool, they are usually removed together, and their
/// absence alone refuses no pod (it shows only as a 403 inside the runner), so the missing
/// account is the one signal there is.
pub fn must_reapply<'a>(stuck: impl IntoIterator<Item = &'a Stuck>) -> bool {
    stuck
        .into_iter()
        .any(|s| s.cause == StartupFailure::ServiceAccountMissing)
}

async fn apply<K>(client: &Client, namespace: &str, obj: &K) -> Result<(), ReconcileError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let mut body = serde_json::to_value(obj).map_err(|e| ReconcileError::InvalidSpec(e.to_string()))?;
    body["apiVersion"] = serde_json::Value::String(K::api_version(&K::DynamicType::default()).into_owned());
    body["kind"] = serde_json::Value::String(K::kind(&K::DynamicType::default()).into_owned());
    api.patch(
        &obj.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(ReconcileError::kube("apply runner RBAC"))?;
    Ok(())
}

/// Applies the runner ServiceAccount, Role and RoleBinding of `group` (server-side apply, so
/// repeating it is harmless).
pub async fn ensure_runner_rbac(
    client: &Client,
    group: &RunnerGroup,
    rules: Vec<PolicyRule>,
) -> Result<(), ReconcileError> {
    let namespace = group.namespace().unwrap_or_default();
    let (sa, role, binding) = runner_rbac_objects(group, rules)?;
    apply(client, &namespace, &sa).await?;
    apply(client, &namespace, &role).await?;
    apply(client, &namespace, &binding).await
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

    #[test]
    fn objects_are_named_owned_and_bound_together() {
        let rules = vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["pods".into()]),
            verbs: vec!["get".into(), "create".into()],
            ..PolicyRule::default()
        }];
        let (sa, role, binding) = runner_rbac_objects(&group(), rules.clone()).expect("objects");
        for meta in [&sa.metadata, &role.metadata, &binding.metadata] {
            assert_eq!(meta.name.as_deref(), Some("hooks-runner"));
            assert_eq!(meta.namespace.as_deref(), Some("ci"));
            let owner = &meta.owner_references.as_ref().expect("owner")[0];
            assert_eq!(
                (owner.kind.as_str(), owner.uid.as_str()),
                ("RunnerGroup", "uid-1")
            );
        }
        assert_eq!(role.rules, Some(rules));
        assert_eq!(binding.role_ref.name, "hooks-runner");
        let subject = &binding.subjects.expect("subjects")[0];
        assert_eq!(
            (
                subject.kind.as_str(),
                subject.name.as_str(),
                subject.namespace.as_deref()
            ),
            ("ServiceAccount", "hooks-runner", Some("ci"))
        );
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
        assert!(runner_rbac_objects(&g, vec![]).is_err());
    }
}
