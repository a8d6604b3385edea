//! Keeps the Docker cache pool of a `dind` group (`spec.dockerCache`, built by
//! [`crate::docker_cache`]) in the cluster, and hands its claims to the runners being made.
//!
//! The pool's claims are made when missing and deleted once the group no longer asks for them
//! (the spec dropped, or a smaller pool) and no runner of the group names them; a claim of the
//! pool's name the group does not own is left as it is and the group reports
//! [`ReconcileError::CacheConflict`] without starting runners. Deleting the group deletes the
//! claims through their owner references. The pool is looked at when the wanted state changes
//! and otherwise once per [`CACHE_RECHECK`].
//!
//! A runner is given a claim when its Job is made ([`claims_for`]): one the cluster shows in no
//! volume of a runner Job or runner pod of the group, and a different one for each runner made
//! in the same pass. The lists are read from the API server at that moment, not from the Job
//! store, which may not show a Job made a pass ago yet.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::cache_server::CACHE_RECHECK;
use super::context::Context;
use super::error::ReconcileError;
use super::ledger::Upkeep;
use super::owned::{self, Found, delete_exact, is_status, owned_by};
use crate::crd::RunnerGroup;
use crate::docker_cache::{
    DOCKER_CACHE_OF_LABEL, choose_claims, claims_in_use, job_pod, pool_claim, pool_names, pool_selector,
};
use crate::runner_job::{GROUP_LABEL, MANAGED_BY_SELECTOR};

/// What the last settled look at a group's pool found.
#[derive(Clone, Debug)]
pub struct DockerCacheUpkeep {
    /// The wanted state it settled ([`fingerprint`]).
    fingerprint: String,
    /// When.
    at: Instant,
    /// Whether the look holds until the spec changes: a group without a pool that found none
    /// left (or removed it) has nothing to look at again; a pool is looked at every
    /// [`CACHE_RECHECK`].
    for_good: bool,
}

/// The wanted state as a fingerprint: the claims' names, size and class.
fn fingerprint(group: &RunnerGroup, names: &[String]) -> String {
    match &group.spec.docker_cache {
        Some(c) if !names.is_empty() => format!("{names:?} {} {:?}", c.size, c.storage_class_name),
        _ => "none".to_owned(),
    }
}

/// Keeps the group's Docker cache pool as its spec asks.
///
/// Fails with [`ReconcileError::CacheConflict`] when a claim's name is taken by an object the
/// group does not own, and with a Kubernetes error when a call fails; both stop the pass before
/// any runner is made.
pub async fn keep_docker_cache(
    ctx: &Context,
    group: &RunnerGroup,
    upkeep: &mut Upkeep,
) -> Result<(), ReconcileError> {
    let names = pool_names(group);
    let fingerprint = fingerprint(group, &names);
    if let Some(done) = &upkeep.docker_cache
        && done.fingerprint == fingerprint
        && (done.for_good || done.at.elapsed() < CACHE_RECHECK)
    {
        return Ok(());
    }
    let (settled, for_good) = match keep_pool(ctx, group, &names).await {
        Ok(settled) => (settled, settled && names.is_empty()),
        // A group that asks for no pool only looks for one an earlier spec left, which costs
        // storage and nothing else: no failure of that look (a 403 from an older chart's rules,
        // a 5xx) may stop its runners. It is looked for again a CACHE_RECHECK later.
        Err(e) if names.is_empty() => {
            warn!(group = %format!("{}/{}", group.namespace().unwrap_or_default(), group.name_any()),
                error = %e, "could not look for a docker cache pool an earlier spec left; looking again later");
            (true, false)
        }
        Err(e) => return Err(e),
    };
    upkeep.docker_cache = settled.then(|| DockerCacheUpkeep {
        fingerprint,
        at: Instant::now(),
        for_good,
    });
    Ok(())
}

/// Makes the missing claims of `names` and deletes the group's surplus ones no runner names;
/// returns whether that is settled (a claim still in use counts as settled: the next look, a
/// [`CACHE_RECHECK`] later, deletes it).
async fn keep_pool(ctx: &Context, group: &RunnerGroup, names: &[String]) -> Result<bool, ReconcileError> {
    let namespace = group.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    // Without a pool only the group's own claims matter; with one, any claim of a pool name.
    let params = if names.is_empty() {
        ListParams::default().labels(&pool_selector(group))
    } else {
        ListParams::default()
    };
    let listed = match claims.list(&params).await {
        Ok(list) => list.items,
        Err(e) => return Err(ReconcileError::kube("list docker cache claims")(e)),
    };
    let existing: BTreeMap<String, PersistentVolumeClaim> =
        listed.into_iter().map(|c| (c.name_any(), c)).collect();
    // Every name is looked at before anything is made, so a conflict leaves the namespace as
    // it was.
    let found: Vec<(&String, Found<PersistentVolumeClaim>)> = names
        .iter()
        .map(|n| (n, Found::of(existing.get(n).cloned(), group)))
        .collect();
    for (name, f) in &found {
        owned::refuse_foreign(f, |owners| ReconcileError::CacheConflict {
            field: "spec.dockerCache",
            kind: "PersistentVolumeClaim",
            namespace: namespace.clone(),
            name: (*name).clone(),
            owners,
        })?;
    }
    let mut settled = true;
    for (name, f) in found {
        // A claim of ours still being deleted is made again once it is gone: look again soon.
        if let Found::Ours(c) = &f
            && c.metadata.deletion_timestamp.is_some()
        {
            settled = false;
        }
        if matches!(f, Found::Missing)
            && let Some(claim) =
                pool_claim(group, name).map_err(|e| ReconcileError::InvalidSpec(e.to_string()))?
        {
            let made = owned::create(&claims, &claim, "create docker cache claim").await?;
            settled &= made.is_some();
        }
    }
    let surplus: Vec<&PersistentVolumeClaim> = existing
        .values()
        .filter(|c| owned_by(c.meta(), group))
        .filter(|c| c.labels().get(DOCKER_CACHE_OF_LABEL) == Some(&group.name_any()))
        .filter(|c| !names.contains(&c.name_any()) && c.metadata.deletion_timestamp.is_none())
        .collect();
    if surplus.is_empty() {
        return Ok(settled);
    }
    let in_use = in_use(&ctx.client, &namespace, group)
        .await
        .map_err(ReconcileError::kube("list runners of docker cache claims"))?;
    for claim in surplus.into_iter().filter(|c| !in_use.contains(&c.name_any())) {
        match delete_exact(&claims, claim).await {
            Ok(()) => {
                info!(name = %claim.name_any(), namespace, "deleted a docker cache claim the group no longer asks for");
            }
            // Missing rights do not come back by retrying; the claims go with the group.
            Err(e) if is_status(&e, 403) => {
                warn!(group = %format!("{namespace}/{}", group.name_any()), error = %e, "may not remove the docker cache claims the group no longer asks for");
            }
            Err(e) => {
                warn!(group = %format!("{namespace}/{}", group.name_any()), error = %e, "could not remove a docker cache claim; retrying next pass");
                settled = false;
            }
        }
    }
    Ok(settled)
}

/// The claims named by a volume of any runner Job or runner pod of `group`, as the API server
/// shows them now. A Job deleted in the background is gone before its pod is; the pod still
/// counts until it is removed, which the kubelet does only after unmounting its volumes.
async fn in_use(
    client: &kube::Client,
    namespace: &str,
    group: &RunnerGroup,
) -> Result<BTreeSet<String>, kube::Error> {
    let selector = format!("{MANAGED_BY_SELECTOR},{GROUP_LABEL}={}", group.name_any());
    let params = ListParams::default().labels(&selector);
    let jobs = Api::<Job>::namespaced(client.clone(), namespace)
        .list(&params)
        .await?;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&params)
        .await?;
    let job_pods = jobs.items.iter().filter_map(job_pod);
    let pod_specs = pods.items.iter().filter_map(|p| p.spec.as_ref());
    Ok(claims_in_use(job_pods.chain(pod_specs)))
}

/// A claim of the group's pool for each of `count` runners about to be made, or `None` (the
/// `emptyDir`, a cache miss) for those beyond the free claims. Without `spec.dockerCache` no call
/// is made. When the cluster cannot be read, every runner gets `None`: a runner without a cache
/// is slower, two runners on one claim lose data.
pub async fn claims_for(client: &kube::Client, group: &RunnerGroup, count: usize) -> Vec<Option<String>> {
    let names = pool_names(group);
    if names.is_empty() || count == 0 {
        return vec![None; count];
    }
    match free_pool(client, group, &names).await {
        Ok((pool, in_use)) => choose_claims(&pool, &in_use, count),
        Err(e) => {
            warn!(group = %group.name_any(), error = %e, "cannot tell which docker cache claims are free; new runners get none");
            vec![None; count]
        }
    }
}

/// The pool's claims that exist as the group's own and are not being deleted, in pool order,
/// and the claims in use.
async fn free_pool(
    client: &kube::Client,
    group: &RunnerGroup,
    names: &[String],
) -> Result<(Vec<String>, BTreeSet<String>), kube::Error> {
    let namespace = group.namespace().unwrap_or_default();
    let params = ListParams::default().labels(&pool_selector(group));
    let existing: BTreeSet<String> = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &namespace)
        .list(&params)
        .await?
        .items
        .into_iter()
        .filter(|c| owned_by(c.meta(), group) && c.metadata.deletion_timestamp.is_none())
        .map(|c| c.name_any())
        .collect();
    let pool = names.iter().filter(|n| existing.contains(*n)).cloned().collect();
    Ok((pool, in_use(client, &namespace, group).await?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{ContainerModeType, DockerCacheSpec, ForgeKind};

    fn group(size: &str, claims: Option<u32>) -> RunnerGroup {
        let mut g = RunnerGroup::test(ForgeKind::Gitea)
            .named("ci", "web")
            .uid("uid-1")
            .max(2)
            .container_mode(ContainerModeType::Dind)
            .build();
        g.spec.docker_cache = Some(DockerCacheSpec {
            size: size.into(),
            storage_class_name: None,
            claims,
        });
        g
    }

    #[test]
    fn the_pool_is_looked_at_again_when_its_names_size_or_class_change() {
        let fp = |g: &RunnerGroup| fingerprint(g, &pool_names(g));
        let base = fp(&group("20Gi", None));
        assert_ne!(base, fp(&group("30Gi", None)), "size");
        assert_ne!(base, fp(&group("20Gi", Some(1))), "pool");
        let mut classed = group("20Gi", None);
        if let Some(c) = classed.spec.docker_cache.as_mut() {
            c.storage_class_name = Some("ssd".into());
        }
        assert_ne!(base, fp(&classed), "class");
        let mut none = group("20Gi", None);
        none.spec.docker_cache = None;
        assert_eq!(fp(&none), "none");
        assert_eq!(
            base,
            fp(&group("20Gi", Some(2))),
            "claims = maxRunners is the default"
        );
    }
}
