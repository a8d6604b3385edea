//! End to end (issue 29): `spec.dockerCache`, the Docker layer cache of a `dind` group, run by the
//! real `forgerunner` binary against the fake API server, the cluster simulator and the Gitea
//! fake.
//!
//! A Gitea group in `containerMode: dind` with `dockerCache` and `maxRunners: 2`:
//! - gets two claims `<group>-docker-0` and `-1`, `ReadWriteOnce`, owned by the group;
//! - two jobs at once get two runners whose `dind` sidecars mount different claims at
//!   `/var/lib/docker` (checked on every look at the runner Jobs and pods: no two that exist at
//!   the same moment ever name one claim);
//! - a later runner, made once those are gone, mounts a claim a predecessor used;
//! - removing `spec.dockerCache` deletes the claims and the next runner has its `emptyDir`;
//!   setting it again brings them back, and deleting the group deletes them (owner references).
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use common::e2e::{fail_with_output, start_operator};
use common::gitea_world::{DEADLINE, gitea_world, patch_spec, wait_or_fail};
use common::group::Group;
use forgerunner_core::RunnerGroup;
use forgerunner_sandbox::world::World;
use forgerunner_sandbox::world::operator::OperatorProcess;
use forgerunner_testkit::apiserver::{Fault as ApiFault, Verb};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodSpec};
use kube::Api;
use kube::api::{DeleteParams, ListParams};

const NS: &str = "e2e-docker-cache";
const GROUP: &str = "dc";
const LABEL: &str = "dc";
/// The `dind` sidecar's data-root volume.
const STORAGE_VOLUME: &str = "dind-storage";

/// The claim `pod` mounts as the daemon's data root; `Ok(None)` for its `emptyDir`.
fn storage_claim(pod: &PodSpec) -> Result<Option<String>, String> {
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == STORAGE_VOLUME)
        .ok_or("no dind-storage volume")?;
    Ok(volume
        .persistent_volume_claim
        .as_ref()
        .map(|c| c.claim_name.clone()))
}

/// The group's claims, by name.
async fn claims(world: &World) -> BTreeSet<String> {
    Api::<PersistentVolumeClaim>::namespaced(world.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|c| c.metadata.name)
                .filter(|n| n.starts_with("dc-docker-"))
                .collect()
        })
        .unwrap_or_default()
}

/// What the runners that exist now mount: `(runner Job or pod, claim)` for each. Fails the test
/// when two Jobs, or two pods, name one claim at the same moment.
async fn mounted_now(world: &World, op: &OperatorProcess) -> Vec<(String, Option<String>)> {
    let jobs = world.runner_jobs(NS, Some(GROUP)).await.unwrap_or_default();
    let pods = Api::<Pod>::namespaced(world.client.clone(), NS)
        .list(&ListParams::default().labels(&format!("forgerunner.dev/group={GROUP}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut out = Vec::new();
    for (kind, name, spec) in jobs
        .iter()
        .map(|j| {
            (
                "Job",
                j.metadata.name.clone(),
                j.spec.as_ref().and_then(|s| s.template.spec.as_ref()),
            )
        })
        .chain(
            pods.iter()
                .map(|p| ("Pod", p.metadata.name.clone(), p.spec.as_ref())),
        )
    {
        let (Some(name), Some(spec)) = (name, spec) else {
            continue;
        };
        match storage_claim(spec) {
            Ok(claim) => out.push((format!("{kind}/{name}"), claim)),
            Err(e) => fail_with_output(op, &format!("{kind} {name}: {e}")),
        }
    }
    for kind in ["Job/", "Pod/"] {
        let mut held = BTreeSet::new();
        for (who, claim) in out.iter().filter(|(w, _)| w.starts_with(kind)) {
            if let Some(c) = claim
                && !held.insert(c.clone())
            {
                fail_with_output(
                    op,
                    &format!("{who} mounts {c}, which another runner mounts too: {out:?}"),
                );
            }
        }
    }
    out
}

/// Runs `count` jobs at once and waits until they are done and no runner is left; returns the
/// claims the runners' Jobs mounted (`None`: the `emptyDir`).
async fn run_jobs(
    world: &World,
    op: &OperatorProcess,
    count: usize,
    done_before: usize,
) -> Vec<Option<String>> {
    for _ in 0..count {
        world.queue_gitea_job(&[LABEL]).expect("queue");
    }
    let seen: Mutex<std::collections::BTreeMap<String, Option<String>>> = Mutex::default();
    wait_or_fail(op, "the jobs done and no runner left", || async {
        let now = mounted_now(world, op).await;
        let mut seen = seen.lock().expect("lock");
        for (who, claim) in &now {
            if who.starts_with("Job/") {
                seen.insert(who.clone(), claim.clone());
            }
        }
        world.gitea_progress(&[LABEL]).done == done_before + count && now.is_empty()
    })
    .await;
    seen.into_inner().expect("lock").into_values().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_of_a_dind_group_lease_distinct_docker_cache_claims_and_reuse_them() {
    let world = gitea_world(NS, Duration::from_secs(3)).await;
    Group::gitea(GROUP)
        .host_label(LABEL)
        .max(2)
        .idle_timeout(60)
        .spec(serde_json::json!({"containerMode": {"type": "dind"}, "dockerCache": {"size": "1Gi"}}))
        .create(&world, NS)
        .await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-docker-cache");
    let pool = BTreeSet::from(["dc-docker-0".to_owned(), "dc-docker-1".to_owned()]);

    wait_or_fail(&op, "the two claims", || async { claims(&world).await == pool }).await;
    let uid = world
        .group(NS, GROUP)
        .await
        .expect("group")
        .metadata
        .uid
        .expect("uid");
    for name in &pool {
        let claim = Api::<PersistentVolumeClaim>::namespaced(world.client.clone(), NS)
            .get(name)
            .await
            .expect("claim");
        let owners = claim.metadata.owner_references.clone().unwrap_or_default();
        assert!(
            owners.iter().any(|o| o.kind == "RunnerGroup" && o.uid == uid),
            "{name} is owned by the group: {owners:?}"
        );
        let spec = claim.spec.expect("spec");
        assert_eq!(
            spec.access_modes,
            Some(vec!["ReadWriteOnce".to_owned()]),
            "{name}"
        );
    }

    // Two jobs at once: two runners, two different claims.
    let first = run_jobs(&world, &op, 2, 0).await;
    let used: BTreeSet<String> = first.iter().flatten().cloned().collect();
    if first.len() != 2 || used != pool {
        fail_with_output(&op, &format!("two runners on the two claims, not {first:?}"));
    }

    // A later runner takes over a claim its predecessors used.
    let later = run_jobs(&world, &op, 1, 2).await;
    if later.len() != 1 || !later[0].as_ref().is_some_and(|c| used.contains(c)) {
        fail_with_output(
            &op,
            &format!("a later runner reuses a claim of {used:?}, not {later:?}"),
        );
    }

    // Without spec.dockerCache the claims go and a runner has its emptyDir again.
    patch_spec(&world, NS, GROUP, serde_json::json!({"dockerCache": null})).await;
    wait_or_fail(&op, "the claims deleted", || async {
        claims(&world).await.is_empty()
    })
    .await;
    let without = run_jobs(&world, &op, 1, 3).await;
    if without != [None] {
        fail_with_output(&op, &format!("a runner without a claim, not {without:?}"));
    }

    // Set again, the claims come back; deleting the group deletes them.
    patch_spec(
        &world,
        NS,
        GROUP,
        serde_json::json!({"dockerCache": {"claims": 1}}),
    )
    .await;
    wait_or_fail(&op, "the one claim back", || async {
        claims(&world).await == BTreeSet::from(["dc-docker-0".to_owned()])
    })
    .await;
    Api::<RunnerGroup>::namespaced(world.client.clone(), NS)
        .delete(GROUP, &DeleteParams::default())
        .await
        .expect("delete group");
    let gone = forgerunner_sandbox::world::wait_until(DEADLINE, "the claims gone with the group", || async {
        claims(&world).await.is_empty()
    })
    .await;
    if gone.is_err() {
        fail_with_output(&op, "the claims stayed after the group was deleted");
    }
}

/// A group without `spec.dockerCache` only looks for a pool an earlier spec left; that look
/// failing (every claim list answered 500 here, or a 403 from an older chart's rules) never stops
/// its runners. Before this rule the pass failed on the list and the group made no runner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_claim_list_never_stops_a_group_without_a_docker_cache() {
    let ns = "e2e-docker-cache-none";
    let world = gitea_world(ns, Duration::from_secs(1)).await;
    world.api.inject(
        ApiFault::error(500)
            .verb(Verb::List)
            .resource("persistentvolumeclaims"),
    );
    Group::gitea(GROUP)
        .host_label(LABEL)
        .max(2)
        .idle_timeout(60)
        .create(&world, ns)
        .await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-docker-cache-none");
    for _ in 0..2 {
        world.queue_gitea_job(&[LABEL]).expect("queue");
    }
    wait_or_fail(&op, "both jobs done", || async {
        world.gitea_progress(&[LABEL]).done == 2
    })
    .await;
}
