//! Keeps the shared Actions cache of a group (`spec.cache`, built by [`crate::cache_server`]) in
//! the cluster: created when missing, updated when what the operator wants of it changed,
//! removed once the group no longer asks for it.
//!
//! An object of the cache's name is the group's only when an owner reference names the group's
//! uid (the Secret: when it is owned by the group's cache Deployment, see below). Any other is
//! left exactly as it is and the group reports [`ReconcileError::CacheConflict`] without starting
//! runners: a runner pod would mount someone else's Secret as its config.
//!
//! What the operator wants of each object is stamped on it as a hash
//! ([`crate::cache_server::SPEC_HASH_ANNOTATION`]); a different hash means the spec changed. The
//! Deployment and the Secret are updated in place (the Secret is owned by the Deployment, so the
//! Deployment is never replaced); the Service and the NetworkPolicy are replaced; the claim only
//! grows (Kubernetes refuses to shrink a claim or change its class: that is told in an Event
//! and `status.cache.size` keeps showing the real size).
//!
//! The cluster is looked at when the wanted state changes and otherwise once per
//! [`CACHE_RECHECK`], not on every pass; a pass in between reports what the last look found.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::context::Context;
use super::error::ReconcileError;
use super::events;
use super::ledger::Upkeep;
use super::owned::{self, Found, delete_exact, is_status, owners};
use super::runner_rbac::runners_of_an_earlier_spec;
use crate::cache_server::{
    CACHE_OF_LABEL, CacheServer, CacheStatus, SPEC_HASH_ANNOTATION, cache_objects, cache_secret,
    cache_status, new_secret, service_host, size_bytes, stored_secret,
};
use crate::crd::{CacheSpec, RunnerGroup};
use crate::forge::{ForgeSession, SecretValue};
use crate::names::cache_name;
use crate::runner_job::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// Longest time the cache's objects go unchecked while the wanted state stays the same: an
/// object deleted by hand comes back within it.
pub const CACHE_RECHECK: Duration = Duration::from_secs(60);

/// What the last settled look at a group's cache found.
#[derive(Clone, Debug)]
pub struct CacheUpkeep {
    /// The wanted state it settled ([`fingerprint`]).
    fingerprint: String,
    /// When.
    at: Instant,
    /// What `status.cache` says.
    status: Option<CacheStatus>,
}

/// Keeps the group's cache as its spec asks, and returns what `status.cache` says.
///
/// Fails with [`ReconcileError::CacheConflict`] when a needed name is taken by an object the
/// group does not own, and with a Kubernetes error when a call fails; both stop the pass before
/// any runner is made.
pub async fn keep_cache(
    ctx: &Context,
    forge: &dyn ForgeSession,
    group: &RunnerGroup,
    upkeep: &mut Upkeep,
) -> Result<Option<CacheStatus>, ReconcileError> {
    let wanted = match &group.spec.cache {
        Some(cache) => Some((cache, server_of(forge, group, &SecretValue::new(""))?)),
        None => None,
    };
    let fingerprint = fingerprint(group, wanted.as_ref().map(|(c, s)| (*c, s)))?;
    if let Some(done) = &upkeep.cache
        && done.fingerprint == fingerprint
        && done.at.elapsed() < CACHE_RECHECK
    {
        return Ok(done.status.clone());
    }
    let (settled, status) = match wanted {
        Some((cache, _)) => ensure(ctx, forge, group, cache).await?,
        None => remove(ctx, group, upkeep.cache.as_ref()).await,
    };
    upkeep.cache = settled.then(|| CacheUpkeep {
        fingerprint,
        at: Instant::now(),
        status: status.clone(),
    });
    Ok(status)
}

/// The forge's cache server for `group` with `secret`; a forge without one refuses the spec
/// (validation refuses it first).
fn server_of(
    forge: &dyn ForgeSession,
    group: &RunnerGroup,
    secret: &SecretValue,
) -> Result<CacheServer, ReconcileError> {
    forge
        .cache_server(group, &service_host(group), secret)
        .ok_or_else(|| {
            ReconcileError::InvalidSpec(format!(
                "spec.cache: {} runners have no cache server forgerunner can run (see docs/caches.md)",
                group.spec.forge
            ))
        })
}

/// The wanted state as a fingerprint: the objects as built without the secret, or `none`.
fn fingerprint(
    group: &RunnerGroup,
    wanted: Option<(&CacheSpec, &CacheServer)>,
) -> Result<String, ReconcileError> {
    let Some((cache, server)) = wanted else {
        return Ok("none".to_owned());
    };
    let objects = cache_objects(group, cache, server)?;
    let hashes: Vec<Option<&String>> = [
        &objects.deployment.metadata,
        &objects.claim.metadata,
        &objects.service.metadata,
        &objects.policy.metadata,
    ]
    .into_iter()
    .map(|m| m.annotations.as_ref().and_then(|a| a.get(SPEC_HASH_ANNOTATION)))
    .collect();
    Ok(format!("{hashes:?} {}", server.url))
}

/// The cache Secret, which is the group's when it carries the group's cache labels and is owned
/// by Deployments of the cache's name only (the current one, or one deleted a moment ago whose
/// Secret the garbage collector has not taken yet: it is handed to the new one).
async fn find_secret(
    api: &Api<Secret>,
    name: &str,
    group: &RunnerGroup,
) -> Result<Found<Secret>, ReconcileError> {
    let found = api
        .get_opt(name)
        .await
        .map_err(ReconcileError::kube("get cache object"))?;
    let Some(secret) = found else {
        return Ok(Found::Missing);
    };
    let labels = secret.labels();
    let refs = secret.metadata.owner_references.as_deref().unwrap_or_default();
    let ours = labels.get(CACHE_OF_LABEL) == Some(&group.name_any())
        && labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && !refs.is_empty()
        && refs.iter().all(|r| r.kind == "Deployment" && r.name == name);
    Ok(if ours {
        Found::Ours(secret)
    } else {
        Found::Foreign(owners(&secret.metadata))
    })
}

/// `Ok` unless `found` is someone else's: then [`ReconcileError::CacheConflict`] naming it.
fn refuse_foreign<K>(
    found: &Found<K>,
    kind: &'static str,
    group: &RunnerGroup,
    name: &str,
) -> Result<(), ReconcileError> {
    owned::refuse_foreign(found, |owners| ReconcileError::CacheConflict {
        kind,
        namespace: group.namespace().unwrap_or_default(),
        name: name.to_owned(),
        owners,
        field: "spec.cache",
    })
}

/// The object `name` as `group` sees it.
async fn find<K>(api: &Api<K>, name: &str, group: &RunnerGroup) -> Result<Found<K>, ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    owned::find(api, name, group, "get cache object").await
}

/// Creates `obj`; `None` when the name was taken meanwhile.
async fn create<K>(api: &Api<K>, obj: &K) -> Result<Option<K>, ReconcileError>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    owned::create(api, obj, "create cache object").await
}

/// Replaces `obj`; `None` when it changed or went meanwhile.
async fn replace<K>(api: &Api<K>, obj: &K) -> Result<Option<K>, ReconcileError>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    owned::replace(api, obj, "update cache object").await
}

/// Deletes the object `name` of kind `K` if the group owns it.
async fn remove_owned<K>(ctx: &Context, group: &RunnerGroup, name: &str) -> Result<(), kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &group.namespace().unwrap_or_default());
    if owned::remove_owned(&api, name, group).await? {
        info!(name, kind = %K::kind(&()), namespace = ?group.namespace(), "deleted a cache object the group no longer asks for");
    }
    Ok(())
}

/// The hash the operator stamped on `meta`.
fn spec_hash(meta: &ObjectMeta) -> Option<&String> {
    meta.annotations.as_ref()?.get(SPEC_HASH_ANNOTATION)
}

/// Whether `found` is what `wanted` asks for: the same stamped hash and labels.
fn current(found: &ObjectMeta, wanted: &ObjectMeta) -> bool {
    spec_hash(found).is_some() && spec_hash(found) == spec_hash(wanted) && found.labels == wanted.labels
}

/// `found` with the labels and the stamp of `wanted`, for an update.
fn restamped(found: &ObjectMeta, wanted: &ObjectMeta) -> ObjectMeta {
    let mut meta = found.clone();
    meta.labels.clone_from(&wanted.labels);
    let stamp = spec_hash(wanted).cloned().unwrap_or_default();
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(SPEC_HASH_ANNOTATION.to_owned(), stamp);
    meta
}

/// Puts a Service or NetworkPolicy in place: created when missing, replaced (deleted, then
/// created) when it is not what is wanted. Returns whether it is in place.
async fn put_replaceable<K>(api: &Api<K>, wanted: &K, found: Found<K>) -> Result<bool, ReconcileError>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    match found {
        Found::Missing => Ok(create(api, wanted).await?.is_some()),
        Found::Ours(o) if current(o.meta(), wanted.meta()) => Ok(true),
        Found::Ours(o) => {
            delete_exact(api, &o)
                .await
                .map_err(ReconcileError::kube("delete cache object"))?;
            Ok(create(api, wanted).await?.is_some())
        }
        // Refused before anything was made.
        Found::Foreign(_) => Ok(false),
    }
}

/// Puts the Deployment in place, updated in place when not what is wanted; returns it as
/// stored, or `None` when it must be looked at again next pass.
async fn put_deployment(
    api: &Api<Deployment>,
    wanted: &Deployment,
    found: Found<Deployment>,
) -> Result<Option<Deployment>, ReconcileError> {
    match found {
        Found::Missing => create(api, wanted).await,
        Found::Ours(d) if current(&d.metadata, &wanted.metadata) => Ok(Some(d)),
        Found::Ours(d) => {
            let next = Deployment {
                metadata: restamped(&d.metadata, &wanted.metadata),
                spec: wanted.spec.clone(),
                status: None,
            };
            replace(api, &next).await
        }
        Found::Foreign(_) => Ok(None),
    }
}

/// The storage a claim asks for.
fn requested(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|q| q.0.as_str())
}

/// Puts the claim in place; a larger size is asked of the existing claim (Kubernetes expands it
/// where its class allows), a smaller one or another class is reported, not applied. Returns
/// the claim as stored, or `None` when it must be looked at again next pass.
async fn put_claim(
    ctx: &Context,
    group: &RunnerGroup,
    api: &Api<PersistentVolumeClaim>,
    wanted: &PersistentVolumeClaim,
    found: Found<PersistentVolumeClaim>,
) -> Result<Option<PersistentVolumeClaim>, ReconcileError> {
    let c = match found {
        Found::Missing => return create(api, wanted).await,
        Found::Foreign(_) => return Ok(None),
        Found::Ours(c) if current(&c.metadata, &wanted.metadata) => return Ok(Some(c)),
        Found::Ours(c) => c,
    };
    let have = requested(&c).unwrap_or_default().to_owned();
    let want = requested(wanted).unwrap_or_default().to_owned();
    let wanted_class = wanted.spec.as_ref().and_then(|s| s.storage_class_name.as_ref());
    let have_class = c.spec.as_ref().and_then(|s| s.storage_class_name.as_ref());
    let class_changed = wanted_class.is_some() && wanted_class != have_class;
    let grows = size_bytes(&want) > size_bytes(&have);
    let mut next = c.clone();
    next.metadata = restamped(&c.metadata, &wanted.metadata);
    next.status = None;
    if grows && !class_changed {
        if let Some(requests) = next
            .spec
            .as_mut()
            .and_then(|s| s.resources.as_mut())
            .and_then(|r| r.requests.as_mut())
        {
            requests.insert(
                "storage".to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(want.clone()),
            );
        }
    } else if want != have || class_changed {
        let note = format!(
            "the cache volume keeps {have}{}: Kubernetes cannot shrink a PersistentVolumeClaim or \
             change its storage class; remove spec.cache and set it again to start over with an \
             empty cache of {want}",
            have_class.map(|c| format!(" of class {c}")).unwrap_or_default()
        );
        warn!(group = %format!("{}/{}", group.namespace().unwrap_or_default(), group.name_any()), "{note}");
        events::publish(
            ctx,
            group,
            EventType::Warning,
            "CacheVolumeUnchanged",
            "KeepCache",
            note,
        )
        .await;
    }
    // Stamped either way, so an unchangeable wish is told once, not on every look.
    replace(api, &next).await
}

/// Puts the Secret in place, owned by the cache Deployment `owner`; returns whether it is.
async fn put_secret(
    api: &Api<Secret>,
    group: &RunnerGroup,
    server: &CacheServer,
    secret: &SecretValue,
    owner: &Deployment,
    found: Found<Secret>,
) -> Result<bool, ReconcileError> {
    let Some(owner_ref) = owner.controller_owner_ref(&()) else {
        return Ok(false);
    };
    let wanted = cache_secret(group, server, secret, owner_ref);
    match found {
        Found::Missing => Ok(create(api, &wanted).await?.is_some()),
        Found::Ours(s)
            if s.data == wanted.data
                && s.metadata.owner_references == wanted.metadata.owner_references
                && s.metadata.labels == wanted.metadata.labels =>
        {
            Ok(true)
        }
        Found::Ours(s) => {
            let mut next = s.clone();
            next.data.clone_from(&wanted.data);
            next.string_data = None;
            next.metadata.labels.clone_from(&wanted.metadata.labels);
            next.metadata
                .owner_references
                .clone_from(&wanted.metadata.owner_references);
            Ok(replace(api, &next).await?.is_some())
        }
        Found::Foreign(_) => Ok(false),
    }
}

/// Creates or updates the cache's objects; returns whether all are in place, and the status.
async fn ensure(
    ctx: &Context,
    forge: &dyn ForgeSession,
    group: &RunnerGroup,
    cache: &CacheSpec,
) -> Result<(bool, Option<CacheStatus>), ReconcileError> {
    let namespace = group.namespace().unwrap_or_default();
    let name = cache_name(&group.name_any());
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    // Every name is looked at before anything is made, so a conflict leaves the namespace as
    // it was.
    let deployment = find(&deployments, &name, group).await?;
    let claim = find(&claims, &name, group).await?;
    let service = find(&services, &name, group).await?;
    let policy = find(&policies, &name, group).await?;
    let secret = find_secret(&secrets, &name, group).await?;
    refuse_foreign(&deployment, "Deployment", group, &name)?;
    refuse_foreign(&claim, "PersistentVolumeClaim", group, &name)?;
    refuse_foreign(&service, "Service", group, &name)?;
    refuse_foreign(&policy, "NetworkPolicy", group, &name)?;
    refuse_foreign(&secret, "Secret", group, &name)?;
    let shared = match &secret {
        Found::Ours(s) => stored_secret(s),
        Found::Missing | Found::Foreign(_) => None,
    }
    .unwrap_or_else(new_secret);
    let server = server_of(forge, group, &shared)?;
    let wanted = cache_objects(group, cache, &server)?;
    let claim = put_claim(ctx, group, &claims, &wanted.claim, claim).await?;
    let service_ready = put_replaceable(&services, &wanted.service, service).await?;
    let policy_ready = put_replaceable(&policies, &wanted.policy, policy).await?;
    let deployment = put_deployment(&deployments, &wanted.deployment, deployment).await?;
    let secret_ready = match &deployment {
        Some(d) => put_secret(&secrets, group, &server, &shared, d, secret).await?,
        None => false,
    };
    let status = claim.as_ref().map(|c| cache_status(&server.url, c));
    let settled = status.is_some() && service_ready && policy_ready && deployment.is_some() && secret_ready;
    Ok((settled, status))
}

/// Deletes the group's own cache objects once no runner that may use them is left; returns
/// whether that is settled, and what `status.cache` says meanwhile. The Secret goes with the
/// Deployment (garbage collector). Looks only when the status or this process's books say a
/// cache was there, so the groups that never had one cost no calls.
async fn remove(
    ctx: &Context,
    group: &RunnerGroup,
    last: Option<&CacheUpkeep>,
) -> (bool, Option<CacheStatus>) {
    let had = group
        .status
        .as_ref()
        .and_then(|s| s.cache.clone())
        .or_else(|| last.and_then(|l| l.status.clone()));
    let Some(had) = had else {
        return (true, None);
    };
    if runners_of_an_earlier_spec(ctx, group) {
        return (false, Some(had));
    }
    let namespace = group.namespace().unwrap_or_default();
    let name = cache_name(&group.name_any());
    let results = [
        remove_owned::<Deployment>(ctx, group, &name).await,
        remove_owned::<Service>(ctx, group, &name).await,
        remove_owned::<NetworkPolicy>(ctx, group, &name).await,
        remove_owned::<PersistentVolumeClaim>(ctx, group, &name).await,
    ];
    let mut settled = true;
    for result in results {
        match result {
            Ok(()) => {}
            // Missing rights do not come back by retrying; the objects go with the group.
            Err(e) if is_status(&e, 403) => {
                warn!(group = %format!("{namespace}/{}", group.name_any()), error = %e, "may not remove the cache the group no longer asks for");
            }
            Err(e) => {
                warn!(group = %format!("{namespace}/{}", group.name_any()), error = %e, "could not remove the cache the group no longer asks for; retrying next pass");
                settled = false;
            }
        }
    }
    (settled, (!settled).then_some(had))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ForgeKind;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn owner(kind: &str, name: &str) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: None,
            block_owner_deletion: None,
        }
    }

    #[test]
    fn a_conflict_names_the_object_and_its_owners() {
        let group = RunnerGroup::test(ForgeKind::Gitea)
            .named("ci", "web")
            .uid("uid-1")
            .build();
        let mut meta = ObjectMeta::default();
        let found: Found<Service> = Found::Foreign(owners(&meta));
        let e = refuse_foreign(&found, "Service", &group, "web-actions-cache").expect_err("refused");
        let text = e.to_string();
        assert!(text.contains("Service ci/web-actions-cache"), "{text}");
        assert!(text.contains("no owner"), "{text}");
        assert_eq!(e.category(), crate::error::ErrorCategory::CacheConflict);
        meta.owner_references = Some(vec![owner("Team", "infra")]);
        assert_eq!(owners(&meta), "owner Team/infra");
        assert!(refuse_foreign(&Found::<Service>::Missing, "Service", &group, "x").is_ok());
    }

    #[test]
    fn only_a_stamp_and_labels_like_the_wanted_ones_are_current() {
        let wanted = ObjectMeta {
            annotations: Some([(SPEC_HASH_ANNOTATION.to_owned(), "a".to_owned())].into()),
            labels: Some([("l".to_owned(), "v".to_owned())].into()),
            ..ObjectMeta::default()
        };
        let mut found = wanted.clone();
        // What the server adds does not count.
        found.resource_version = Some("7".into());
        assert!(current(&found, &wanted));
        found.annotations = Some([(SPEC_HASH_ANNOTATION.to_owned(), "b".to_owned())].into());
        assert!(!current(&found, &wanted));
        let next = restamped(&found, &wanted);
        assert!(current(&next, &wanted));
        assert_eq!(
            next.resource_version.as_deref(),
            Some("7"),
            "the write is guarded"
        );
        found.annotations = None;
        assert!(!current(&found, &wanted), "an object without a stamp is updated");
    }
}
