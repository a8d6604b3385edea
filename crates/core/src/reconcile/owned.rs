//! Objects a group owns beside its runners (its runner RBAC, its shared cache, its Docker cache
//! pool): found by name, told apart from someone else's, created, replaced and deleted the same
//! way everywhere.
//!
//! An object is the group's only when an owner reference names the group's uid: a name match
//! proves nothing (a platform team's object, or one of a deleted group of the same name). One
//! that is not the group's is never taken over, changed or deleted; the caller refuses the spec
//! with its own conflict error ([`refuse_foreign`]) before it makes anything, so a conflict
//! leaves the namespace as it was.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::FIELD_MANAGER;
use super::error::ReconcileError;
use crate::crd::RunnerGroup;

/// One object a group needs, as found in the cluster.
#[derive(Debug)]
pub enum Found<K> {
    /// No object of that name.
    Missing,
    /// The group's own.
    Ours(K),
    /// Someone else's: its owners, as [`owners`] writes them.
    Foreign(String),
}

impl<K: Resource> Found<K> {
    /// What `obj` (found under the name the group needs, or not) is to `group`.
    pub fn of(obj: Option<K>, group: &RunnerGroup) -> Self {
        match obj {
            None => Found::Missing,
            Some(o) if owned_by(o.meta(), group) => Found::Ours(o),
            Some(o) => Found::Foreign(owners(o.meta())),
        }
    }
}

/// Whether `meta` names `group` (by uid) among its owners: the only proof that the group's own
/// earlier pass made the object.
pub fn owned_by(meta: &ObjectMeta, group: &RunnerGroup) -> bool {
    let Some(uid) = group.metadata.uid.as_deref() else {
        return false;
    };
    meta.owner_references.iter().flatten().any(|r| r.uid == uid)
}

/// The owners of `meta` as `kind/name`, for the conflict message.
pub fn owners(meta: &ObjectMeta) -> String {
    let refs: Vec<String> = meta
        .owner_references
        .iter()
        .flatten()
        .map(|r| format!("owner {}/{}", r.kind, r.name))
        .collect();
    if refs.is_empty() {
        "no owner".to_owned()
    } else {
        refs.join(", ")
    }
}

/// The object `name` as `group` sees it; `operation` names a failed read in the error.
pub async fn find<K>(
    api: &Api<K>,
    name: &str,
    group: &RunnerGroup,
    operation: &'static str,
) -> Result<Found<K>, ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let found = api.get_opt(name).await.map_err(ReconcileError::kube(operation))?;
    Ok(Found::of(found, group))
}

/// `Ok` unless `found` is someone else's; then the error `conflict` makes of its owners.
pub fn refuse_foreign<K>(
    found: &Found<K>,
    conflict: impl FnOnce(String) -> ReconcileError,
) -> Result<(), ReconcileError> {
    match found {
        Found::Foreign(owners) => Err(conflict(owners.clone())),
        Found::Missing | Found::Ours(_) => Ok(()),
    }
}

/// The operator's write parameters (its field manager).
pub fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    }
}

/// Whether `e` is the API server answering `code`.
pub fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Creates `obj`; `None` when the name was taken meanwhile (the next pass looks again).
pub async fn create<K>(api: &Api<K>, obj: &K, operation: &'static str) -> Result<Option<K>, ReconcileError>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    match api.create(&post_params(), obj).await {
        Ok(made) => Ok(Some(made)),
        Err(e) if is_status(&e, 409) => Ok(None),
        Err(e) => Err(ReconcileError::kube(operation)(e)),
    }
}

/// Replaces `obj` (its `resourceVersion` guards the write); `None` when it changed or went
/// meanwhile (the next pass looks again).
pub async fn replace<K>(api: &Api<K>, obj: &K, operation: &'static str) -> Result<Option<K>, ReconcileError>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    match api.replace(&obj.name_any(), &post_params(), obj).await {
        Ok(made) => Ok(Some(made)),
        Err(e) if is_status(&e, 409) || is_status(&e, 404) => Ok(None),
        Err(e) => Err(ReconcileError::kube(operation)(e)),
    }
}

/// Deletes exactly `obj` (its uid as a precondition, so an object made again under the same name
/// by someone else meanwhile is not touched); gone already counts as deleted.
pub async fn delete_exact<K>(api: &Api<K>, obj: &K) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: obj.meta().uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&obj.name_any(), &params).await {
        Ok(_) => Ok(()),
        // 404: gone already; 409: the uid differs, so it is no longer ours.
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes the object `name` if `group` owns it; returns whether there was one to delete.
pub async fn remove_owned<K>(api: &Api<K>, name: &str, group: &RunnerGroup) -> Result<bool, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
{
    match api.get_opt(name).await? {
        Some(obj) if owned_by(obj.meta(), group) => {
            delete_exact(api, &obj).await?;
            Ok(true)
        }
        // Missing, or not the group's: nothing of ours to remove.
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ForgeKind;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn group() -> RunnerGroup {
        RunnerGroup::test(ForgeKind::Gitea)
            .named("ci", "web")
            .uid("uid-1")
            .build()
    }

    fn owned(uid: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Team".into(),
                    name: "infra".into(),
                    uid: uid.into(),
                    controller: None,
                    block_owner_deletion: None,
                }]),
                ..ObjectMeta::default()
            },
            ..Service::default()
        }
    }

    #[test]
    fn only_the_groups_uid_makes_a_found_object_its_own() {
        assert!(matches!(Found::<Service>::of(None, &group()), Found::Missing));
        assert!(matches!(
            Found::of(Some(owned("uid-1")), &group()),
            Found::Ours(_)
        ));
        match Found::of(Some(owned("uid-2")), &group()) {
            Found::Foreign(o) => assert_eq!(o, "owner Team/infra"),
            other => panic!("{other:?}"),
        }
        let mut no_uid = group();
        no_uid.metadata.uid = None;
        assert!(matches!(
            Found::of(Some(owned("uid-1")), &no_uid),
            Found::Foreign(_)
        ));
        assert_eq!(owners(&ObjectMeta::default()), "no owner");
    }

    #[test]
    fn only_a_foreign_object_is_refused_with_the_callers_error() {
        let conflict = |owners: String| ReconcileError::InvalidSpec(owners);
        assert!(refuse_foreign(&Found::<Service>::Missing, conflict).is_ok());
        assert!(refuse_foreign(&Found::Ours(owned("uid-1")), conflict).is_ok());
        let e = refuse_foreign(&Found::<Service>::Foreign("no owner".into()), conflict).expect_err("refused");
        assert!(e.to_string().contains("no owner"), "{e}");
    }
}
