//! Dereference: the group's forge, what its spec names in the cluster (credentials, CA bundle,
//! webhook secret) read into the forge's group context, and the runner permissions the forge
//! asks for and the shared cache the spec asks for in place.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::Api;
use tracing::warn;

use crate::crd::RunnerGroup;
use std::sync::Arc;

use crate::forge::{
    CA_BUNDLE_KEY, ClusterRefs, Credentials, ForgeProfile, ForgeSession, GroupContext, GroupKey, SecretValue,
    WEBHOOK_SECRET_KEY,
};
use crate::reconcile::cache_server::keep_cache;
use crate::reconcile::context::Context;
use crate::reconcile::error::ReconcileError;
use crate::reconcile::ledger::{Ledger, ReadRefs, Upkeep};
use crate::reconcile::pipeline::{CheckedForge, group_key};
use crate::reconcile::runner_rbac::keep_runner_rbac;

/// What the dereference step found.
pub(super) struct Found {
    /// The group's session at its forge, kept in its books.
    pub session: Arc<dyn ForgeSession>,
    /// What the forge makes of the group's spec.
    pub profile: ForgeProfile,
    /// The group as the forge sees it.
    pub group: GroupContext,
    /// The group's shared cache as kept (`None` without `spec.cache`).
    pub cache: Option<crate::cache_server::CacheStatus>,
}

/// The group's forge and context, its runner permissions applied. What the spec names in the
/// cluster is read again only when `refs` is older than [`crate::reconcile::ledger::REFS_TTL`] or names other objects.
pub(super) async fn dereference(
    ctx: &Context,
    group: &RunnerGroup,
    checked: CheckedForge<'_>,
    ledger: &mut Ledger,
) -> Result<Found, ReconcileError> {
    let (forge, profile) = checked?;
    let session = ledger.session(forge, &group_key(group));
    let names = profile.cluster_refs.clone();
    let (upkeep, refs) = (&mut ledger.upkeep, &mut ledger.refs);
    let read = match refs.take() {
        Some(read) if read.fresh(&names, Instant::now()) => read,
        _ => read_refs(ctx, &group_key(group), names).await?,
    };
    let gctx = context_of(group, &read);
    *refs = Some(read);
    ensure_runner_permissions(ctx, &profile, group, upkeep).await?;
    // Before any runner is made: a runner pod of a group with a cache mounts its Secret.
    let cache = keep_cache(ctx, session.as_ref(), group, upkeep).await?;
    crate::reconcile::docker_cache::keep_docker_cache(ctx, group, upkeep).await?;
    Ok(Found {
        session,
        profile,
        group: gctx,
        cache,
    })
}

/// Keeps the runner ServiceAccount and RoleBindings the forge asks for, and removes the group's
/// own once it no longer asks (`runner_rbac::keep_runner_rbac`); settled once per process,
/// whenever that changes, and again when a runner is refused for a missing ServiceAccount (the
/// observe step then forgets it), not on every pass.
pub(super) async fn ensure_runner_permissions(
    ctx: &Context,
    profile: &ForgeProfile,
    group: &RunnerGroup,
    upkeep: &mut Upkeep,
) -> Result<(), ReconcileError> {
    let wanted = !profile.runner_role_rules.is_empty();
    keep_runner_rbac(ctx, group, wanted, upkeep).await
}

/// Reads what the forge's block names (credentials Secret, CA bundle, webhook Secret) into the
/// forge's group context.
pub(in crate::reconcile) async fn group_context(
    ctx: &Context,
    profile: &ForgeProfile,
    group: &RunnerGroup,
) -> Result<GroupContext, ReconcileError> {
    let read = read_refs(ctx, &group_key(group), profile.cluster_refs.clone()).await?;
    Ok(context_of(group, &read))
}

/// The forge's group context of `group` with what was read for it.
fn context_of(group: &RunnerGroup, read: &ReadRefs) -> GroupContext {
    GroupContext {
        uid: group.uid().unwrap_or_default(),
        key: group_key(group),
        group: group.clone(),
        credentials: read.credentials.clone(),
        ca_bundle: read.ca_bundle.clone(),
        webhook_secret: read.webhook_secret.clone(),
    }
}

/// Reads the objects `names` names in the group's namespace.
async fn read_refs(ctx: &Context, key: &GroupKey, names: ClusterRefs) -> Result<ReadRefs, ReconcileError> {
    let read_at = Instant::now();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let secret = secrets
        .get_opt(&names.credentials_secret)
        .await
        .map_err(ReconcileError::kube("get secret"))?
        .ok_or_else(|| ReconcileError::SecretNotFound {
            namespace: key.namespace.clone(),
            name: names.credentials_secret.clone(),
        })?;
    let credentials = Credentials {
        data: secret_values(&secret),
        secret_name: names.credentials_secret.clone(),
        version: secret.resource_version().unwrap_or_default(),
    };
    let webhook_secret = match &names.webhook_secret {
        Some(name) => webhook_secret(&secrets, key, name).await,
        None => None,
    };
    let ca_bundle = match &names.ca_bundle_config_map {
        Some(name) => Some(ca_bundle(ctx, &key.namespace, name.clone()).await?),
        None => None,
    };
    Ok(ReadRefs {
        names,
        credentials,
        ca_bundle,
        webhook_secret,
        read_at,
    })
}

/// The webhook secret, if its Secret can be read; without it the group works by polling alone.
async fn webhook_secret(secrets: &Api<Secret>, key: &GroupKey, name: &str) -> Option<SecretValue> {
    match secrets.get_opt(name).await {
        Ok(Some(s)) => secret_values(&s).remove(WEBHOOK_SECRET_KEY),
        Ok(None) => {
            warn!(group = %key, secret = %name, "webhook Secret not found; polling only");
            None
        }
        Err(e) => {
            warn!(group = %key, secret = %name, error = %e, "cannot read the webhook Secret; polling only");
            None
        }
    }
}

/// The PEM certificates of the CA bundle ConfigMap `name`.
async fn ca_bundle(ctx: &Context, namespace: &str, name: String) -> Result<String, ReconcileError> {
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let cm = cms
        .get_opt(&name)
        .await
        .map_err(ReconcileError::kube("get configmap"))?;
    let ca = cm.and_then(|c| c.data).and_then(|mut d| d.remove(CA_BUNDLE_KEY));
    ca.ok_or_else(|| ReconcileError::ConfigMapNotFound {
        namespace: namespace.to_owned(),
        name,
    })
}

/// A Secret's values by key (`stringData` over `data`); values that are not UTF-8 cannot be
/// tokens or keys and are left out (the backend then reports the missing key).
fn secret_values(secret: &Secret) -> BTreeMap<String, SecretValue> {
    let mut data: BTreeMap<String, SecretValue> = BTreeMap::new();
    for (k, v) in secret.data.iter().flatten() {
        if let Ok(s) = std::str::from_utf8(&v.0) {
            data.insert(k.clone(), SecretValue::new(s.trim_end_matches(['\n', '\r'])));
        }
    }
    for (k, v) in secret.string_data.iter().flatten() {
        data.insert(k.clone(), SecretValue::new(v.clone()));
    }
    data
}
