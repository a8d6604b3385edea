//! End-to-end (issue 29): `spec.cache`, the shared Actions cache of a Gitea or Forgejo group, run
//! by the real `forgerunner` binary against the fake API server, the cluster simulator and the
//! forge fakes.
//!
//! For a Gitea group and a Forgejo (15) group with `spec.cache`:
//! - the five objects exist under one name (Deployment, Service, PersistentVolumeClaim,
//!   NetworkPolicy, Secret), the first four owned by the group, the Secret by the Deployment;
//! - the cache pod passes the `restricted` Pod Security profile, and the cache secret is in the
//!   Secret alone (never in the Deployment);
//! - the NetworkPolicy admits the group's runner pods only, on the server's port;
//! - the runner pods mount the runner config from the Secret and pass `--config`, and a job runs;
//! - `status.cache` shows the URL and the size;
//! - removing `spec.cache` removes the five objects; setting it again brings them back; deleting
//!   the group removes them through the owner references and the fake's garbage collector.
#![cfg(all(feature = "gitea", feature = "forgejo"))]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::e2e::{fail_with_output, start_operator, start_world, wait_until_or_fail};
use forgerunner_core::RunnerGroup;
use forgerunner_core::runner_pod::restricted_violations;
use forgerunner_sandbox::world::World;
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::operator::OperatorProcess;
use forgerunner_sandbox::world::{WorldOptions, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::json;

/// Every wait of these tests; generous for a busy 2-core machine.
const DEADLINE: Duration = Duration::from_secs(180);
/// The label every runner pod of a group carries.
const GROUP_LABEL: &str = "forgerunner.dev/group";

/// One forge's case.
struct Case {
    namespace: &'static str,
    group: &'static str,
    forge: &'static str,
    /// The port the forge's cache server listens on (= the Service port).
    port: i32,
    /// The runner config key naming the secret.
    secret_key: &'static str,
    /// The URL the runner config names (Gitea keeps the trailing slash, Forgejo drops it).
    url: String,
}

impl Case {
    fn cache_name(&self) -> String {
        format!("{}-actions-cache", self.group)
    }
}

fn gitea_case() -> Case {
    let (namespace, group) = ("e2e-cache-gitea", "gt-cache");
    Case {
        namespace,
        group,
        forge: "gitea",
        port: 8088,
        secret_key: "external_secret",
        url: format!("http://{group}-actions-cache.{namespace}.svc.cluster.local:8088/"),
    }
}

fn forgejo_case() -> Case {
    let (namespace, group) = ("e2e-cache-forgejo", "fj-cache");
    Case {
        namespace,
        group,
        forge: "forgejo",
        port: 4000,
        secret_key: "secret",
        url: format!("http://{group}-actions-cache.{namespace}.svc.cluster.local:4000"),
    }
}

/// The group as stored, untyped (so the test reads `status.cache` as the API serves it).
async fn group_json(world: &World, case: &Case) -> Option<serde_json::Value> {
    let resource = ApiResource::erase::<RunnerGroup>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(world.client.clone(), case.namespace, &resource);
    let obj = api.get_opt(case.group).await.ok()??;
    serde_json::to_value(obj).ok()
}

async fn set_cache(world: &World, case: &Case, cache: serde_json::Value) {
    Api::<RunnerGroup>::namespaced(world.client.clone(), case.namespace)
        .patch(
            case.group,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cache": cache}})),
        )
        .await
        .expect("patch spec.cache");
}

/// The five cache objects, when all exist.
struct CacheObjects {
    deployment: Deployment,
    service: Service,
    claim: PersistentVolumeClaim,
    policy: NetworkPolicy,
    secret: Secret,
}

/// How many of the five objects exist (errors, e.g. a type the server does not serve, count as
/// missing), and all five when they do.
async fn cache_objects(world: &World, case: &Case) -> (usize, Option<CacheObjects>) {
    let name = case.cache_name();
    let c = || world.client.clone();
    let ns = case.namespace;
    let deployment = Api::<Deployment>::namespaced(c(), ns)
        .get_opt(&name)
        .await
        .ok()
        .flatten();
    let service = Api::<Service>::namespaced(c(), ns)
        .get_opt(&name)
        .await
        .ok()
        .flatten();
    let claim = Api::<PersistentVolumeClaim>::namespaced(c(), ns)
        .get_opt(&name)
        .await
        .ok()
        .flatten();
    let policy = Api::<NetworkPolicy>::namespaced(c(), ns)
        .get_opt(&name)
        .await
        .ok()
        .flatten();
    let secret = Api::<Secret>::namespaced(c(), ns)
        .get_opt(&name)
        .await
        .ok()
        .flatten();
    let count = usize::from(deployment.is_some())
        + usize::from(service.is_some())
        + usize::from(claim.is_some())
        + usize::from(policy.is_some())
        + usize::from(secret.is_some());
    let all = match (deployment, service, claim, policy, secret) {
        (Some(deployment), Some(service), Some(claim), Some(policy), Some(secret)) => Some(CacheObjects {
            deployment,
            service,
            claim,
            policy,
            secret,
        }),
        _ => None,
    };
    (count, all)
}

async fn wait_for_objects(world: &World, op: &OperatorProcess, case: &Case, what: &str) -> CacheObjects {
    let deadline = Instant::now() + DEADLINE;
    wait_until_or_fail(op, deadline, what, || async {
        cache_objects(world, case).await.1.is_some()
    })
    .await;
    cache_objects(world, case).await.1.expect("the five objects")
}

async fn wait_for_none(world: &World, op: &OperatorProcess, case: &Case, what: &str) {
    let gone = wait_until(DEADLINE, what, || async {
        cache_objects(world, case).await.0 == 0
    })
    .await;
    if gone.is_err() {
        let left = cache_objects(world, case).await.0;
        fail_with_output(op, &format!("{what}: {left} of the five cache objects left"));
    }
}

fn secret_text(secret: &Secret, key: &str) -> String {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .unwrap_or_else(|| panic!("Secret key {key}"));
    String::from_utf8(bytes.0.clone()).expect("UTF-8")
}

/// Checks everything about the five objects of `case`'s group, whose uid is `uid`.
fn check_objects(case: &Case, objects: &CacheObjects, uid: &str, size: &str) {
    let name = case.cache_name();
    let owned_by_group = |kind: &str, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        let owners = meta.owner_references.clone().unwrap_or_default();
        assert!(
            owners.iter().any(|o| o.kind == "RunnerGroup" && o.uid == uid),
            "{kind} {name} is owned by the group: {owners:?}"
        );
        assert!(
            owners.iter().all(|o| o.block_owner_deletion != Some(true)),
            "{kind}: no blockOwnerDeletion"
        );
    };
    owned_by_group("Deployment", &objects.deployment.metadata);
    owned_by_group("Service", &objects.service.metadata);
    owned_by_group("PersistentVolumeClaim", &objects.claim.metadata);
    owned_by_group("NetworkPolicy", &objects.policy.metadata);
    // The operator may not delete Secrets (security review H2): the Secret goes with the
    // Deployment, which goes with the group.
    let deployment_uid = objects.deployment.uid().expect("uid");
    let secret_owners = objects
        .secret
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default();
    assert!(
        secret_owners
            .iter()
            .any(|o| o.kind == "Deployment" && o.name == name && o.uid == deployment_uid),
        "the Secret is owned by the cache Deployment: {secret_owners:?}"
    );

    // The cache pod: one replica, recreated rather than rolled, restricted Pod Security.
    let spec = &objects.deployment.spec;
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(
        spec.strategy.as_ref().and_then(|s| s.type_.as_deref()),
        Some("Recreate")
    );
    let pod = spec.template.spec.as_ref().expect("pod spec");
    let violations = restricted_violations(pod);
    assert!(violations.is_empty(), "restricted: {violations:?}");
    let container = &pod.containers[0];
    let sc = container.security_context.as_ref().expect("security context");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    let ports: Vec<i32> = container
        .ports
        .iter()
        .flatten()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(ports, [case.port]);
    let args = container.args.clone().unwrap_or_default().join(" ");
    assert!(args.contains(&format!("--port {}", case.port)), "{args}");
    assert!(args.contains("--dir /cache"), "{args}");
    assert!(args.contains("cache-server"), "{args}");

    // The secret is in the Secret only: never in the Deployment (args, env, annotations).
    let secret = secret_text(&objects.secret, "secret");
    assert!(secret.len() >= 32, "a long random secret");
    let deployment_text = serde_json::to_string(&objects.deployment).expect("json");
    assert!(
        !deployment_text.contains(&secret),
        "the secret is in the Deployment"
    );
    let server = secret_text(&objects.secret, "server.yaml");
    let runner = secret_text(&objects.secret, "runner.yaml");
    assert!(
        server.contains(&format!("{}: \"{secret}\"", case.secret_key)),
        "{server}"
    );
    assert!(
        runner.contains(&format!("external_server: \"{}\"", case.url)),
        "{runner}"
    );
    assert!(
        runner.contains(&format!("{}: \"{secret}\"", case.secret_key)),
        "{runner}"
    );

    // The Service's port is the server's own; the claim is RWO of the asked size.
    let svc = objects.service.spec.as_ref().expect("service spec");
    let svc_ports: Vec<(i32, Option<String>)> = svc
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.port,
                p.target_port.as_ref().map(|t| match t {
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
                }),
            )
        })
        .collect();
    assert_eq!(svc_ports, [(case.port, Some(case.port.to_string()))]);
    let pod_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let selector = svc.selector.clone().unwrap_or_default();
    assert!(!selector.is_empty());
    assert!(
        selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "the Service selects the cache pod"
    );
    assert!(
        !pod_labels.contains_key(GROUP_LABEL),
        "the cache pod is no runner pod of the group"
    );
    let claim = objects.claim.spec.as_ref().expect("claim spec");
    assert_eq!(claim.access_modes.clone().unwrap_or_default(), ["ReadWriteOnce"]);
    let requested = claim
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone());
    assert_eq!(requested.as_deref(), Some(size));

    // Only the group's runner pods reach the cache pod, on the server's port.
    let policy = objects.policy.spec.as_ref().expect("policy spec");
    let selected = policy
        .pod_selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap_or_default();
    assert_eq!(selected, selector, "the policy covers the cache pod");
    assert_eq!(policy.policy_types.clone().unwrap_or_default(), ["Ingress"]);
    let rules = policy.ingress.clone().unwrap_or_default();
    assert_eq!(rules.len(), 1);
    let from = rules[0].from.clone().unwrap_or_default();
    assert_eq!(from.len(), 1);
    let peer = from[0]
        .pod_selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap_or_default();
    assert_eq!(peer.get(GROUP_LABEL).map(String::as_str), Some(case.group));
    assert!(from[0].namespace_selector.is_none(), "the group's namespace only");
    let ports: Vec<String> = rules[0]
        .ports
        .iter()
        .flatten()
        .filter_map(|p| p.port.as_ref())
        .map(|p| match p {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
        })
        .collect();
    assert_eq!(ports, [case.port.to_string()]);
}

/// The runner Jobs of the group whose pod mounts the cache config and passes `--config`.
async fn runners_with_cache_config(world: &World, case: &Case) -> (usize, usize) {
    let jobs: Api<Job> = Api::namespaced(world.client.clone(), case.namespace);
    let lp = ListParams::default().labels(&format!("{GROUP_LABEL}={}", case.group));
    let Ok(list) = jobs.list(&lp).await else {
        return (0, 0);
    };
    let name = case.cache_name();
    let mut with = 0;
    for job in &list.items {
        let Some(pod) = job.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
            continue;
        };
        let volume = pod.volumes.iter().flatten().find(|v| {
            v.secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some(name.as_str()))
        });
        let Some(volume) = volume else { continue };
        let items: Vec<String> = volume
            .secret
            .as_ref()
            .and_then(|s| s.items.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|i| i.key)
            .collect();
        // The runner config only: never the server's, and never the bare secret.
        assert_eq!(items, ["runner.yaml"], "{}", job.name_any());
        let runner = pod
            .containers
            .iter()
            .find(|c| c.name == "runner")
            .expect("runner");
        let mounted = runner
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == volume.name && m.read_only == Some(true));
        let line: Vec<String> = runner
            .command
            .iter()
            .flatten()
            .chain(runner.args.iter().flatten())
            .cloned()
            .collect();
        if mounted && line.iter().any(|w| w == "--config") {
            with += 1;
        }
    }
    (list.items.len(), with)
}

/// The whole life cycle for one forge; `queue` queues a job the group serves and `done` counts
/// finished ones.
async fn life_cycle(
    world: &World,
    op: &OperatorProcess,
    case: &Case,
    queue: impl Fn(),
    done: impl Fn() -> usize,
) {
    let groups: Api<RunnerGroup> = Api::namespaced(world.client.clone(), case.namespace);
    let uid = groups.get(case.group).await.expect("group").uid().expect("uid");

    let objects = wait_for_objects(world, op, case, "the cache objects").await;
    check_objects(case, &objects, &uid, "2Gi");
    let deadline = Instant::now() + DEADLINE;
    wait_until_or_fail(op, deadline, "status.cache", || async {
        group_json(world, case).await.is_some_and(|g| {
            g["status"]["cache"]["url"] == case.url.as_str() && g["status"]["cache"]["size"] == "2Gi"
        })
    })
    .await;
    let status = group_json(world, case).await.expect("group");
    let secret = secret_text(&objects.secret, "secret");
    assert!(
        !status.to_string().contains(&secret),
        "the secret is not in the group"
    );

    // The idle runner (minRunners 1) and a runner for a job mount the runner config.
    wait_until_or_fail(op, deadline, "a runner mounting the cache config", || async {
        runners_with_cache_config(world, case).await.1 >= 1
    })
    .await;
    queue();
    wait_until_or_fail(op, deadline, "the job to run", || std::future::ready(done() >= 1)).await;

    // spec.cache removed: the five objects go (the idle runner of the old spec is replaced
    // first), and no runner mounts the config any longer.
    set_cache(world, case, serde_json::Value::Null).await;
    wait_for_none(world, op, case, "the cache objects removed with spec.cache").await;
    wait_until_or_fail(op, deadline, "no runner mounting the cache config", || async {
        let (all, with) = runners_with_cache_config(world, case).await;
        all >= 1 && with == 0
    })
    .await;
    let cleared = wait_until(DEADLINE, "status.cache cleared", || async {
        group_json(world, case)
            .await
            .is_some_and(|g| g["status"]["cache"].is_null())
    })
    .await;
    if cleared.is_err() {
        fail_with_output(op, "status.cache stayed after spec.cache was removed");
    }

    // Back again, then the group deleted: the owner references take everything with it.
    set_cache(world, case, json!({"size": "3Gi"})).await;
    let again = wait_for_objects(world, op, case, "the cache objects back").await;
    check_objects(case, &again, &uid, "3Gi");
    groups
        .delete(case.group, &DeleteParams::default())
        .await
        .expect("delete group");
    wait_for_none(world, op, case, "the cache objects removed with the group").await;
}

fn size() -> GroupSize {
    GroupSize {
        min: 1,
        max: 2,
        idle_timeout_seconds: None,
        startup_timeout_seconds: None,
        scale_down_delay_seconds: Some(0),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitea_group_keeps_its_shared_cache() {
    let case = gitea_case();
    let opts = WorldOptions {
        github: false,
        gitea: true,
        work_time: Duration::from_millis(300),
        ..WorldOptions::default()
    };
    let world = start_world(opts, case.namespace).await;
    world
        .add_gitea_group(case.namespace, case.group, &["linux"], &size(), 1, None)
        .await
        .expect("group");
    set_cache(&world, &case, json!({"size": "2Gi"})).await;
    let op = start_operator(&world, case.forge, "forgerunner-e2e-cache-gitea");
    let queue = || {
        world.queue_gitea_job(&["linux"]).expect("queue");
    };
    let done = || world.gitea_progress(&["linux"]).done;
    life_cycle(&world, &op, &case, queue, done).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgejo_group_keeps_its_shared_cache() {
    let case = forgejo_case();
    let opts = WorldOptions {
        github: false,
        gitea: false,
        forgejo: true,
        forgejo_version: "15.0.3+gitea-1.22.0".to_owned(),
        work_time: Duration::from_millis(300),
        ..WorldOptions::default()
    };
    let world = start_world(opts, case.namespace).await;
    world
        .add_forgejo_group(case.namespace, case.group, &["linux"], &size(), 1)
        .await
        .expect("group");
    set_cache(&world, &case, json!({"size": "2Gi"})).await;
    let op = start_operator(&world, case.forge, "forgerunner-e2e-cache-forgejo");
    let queue = || {
        world.queue_forgejo_job(&["linux"]).expect("queue");
    };
    let done = || world.forgejo_progress(&["linux"]).done;
    life_cycle(&world, &op, &case, queue, done).await;
}

/// Issue 29: the cache is really shared. The simulator plays the group's `cache-server`
/// Deployment behind its Service, and each runner plays its job's `actions/cache` step with the
/// config the operator mounted: the first job of the group misses and saves the key, the second
/// (on another, new runner pod) finds what the first saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_gitea_job_hits_the_key_the_first_saved() {
    use forgerunner_sandbox::world::GITEA_REPO;
    use forgerunner_testkit::gitea::{Conclusion, JobState};
    use forgerunner_testkit::sim::CacheResult;

    let (namespace, group) = ("e2e-cache-hit", "gt-hit");
    let opts = WorldOptions {
        github: false,
        gitea: true,
        forgejo: false,
        work_time: Duration::from_millis(200),
        ..WorldOptions::default()
    };
    let world = start_world(opts, namespace).await;
    world
        .add_gitea_group(namespace, group, &["linux"], &GroupSize::up_to(2), 1, None)
        .await
        .expect("group");
    Api::<RunnerGroup>::namespaced(world.client.clone(), namespace)
        .patch(
            group,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cache": {"size": "1Gi"}}})),
        )
        .await
        .expect("patch spec.cache");
    let op = start_operator(&world, "gitea", "forgerunner-e2e-cache-hit");
    let deadline = Instant::now() + DEADLINE;
    let network = world.sim.runner_cache().network;
    let host = format!("{group}-actions-cache.{namespace}.svc.cluster.local");
    wait_until_or_fail(&op, deadline, "the cache Service to lead to a server", || {
        std::future::ready(network.resolve(&host, 8088).is_some())
    })
    .await;

    let fake = world.gitea.clone().expect("Gitea fake");
    let journal = world.sim.runner_cache().journal;
    let mut results = Vec::new();
    for n in 1..=2 {
        let job = fake.queue_cached_job(GITEA_REPO, &["linux"], "deps-v1");
        wait_until_or_fail(&op, deadline, &format!("cached job {n} to finish"), || {
            let done = fake
                .job(job)
                .is_some_and(|j| j.state == JobState::Done(Conclusion::Success));
            std::future::ready(done && journal.of_job(job).is_some())
        })
        .await;
        let outcome = journal.of_job(job).expect("a cache step");
        results.push((job, outcome));
    }
    let (first, one) = &results[0];
    let (_, two) = &results[1];
    assert_eq!(one.result, CacheResult::Saved, "job 1 misses and saves: {one:?}");
    assert_eq!(
        two.result,
        CacheResult::Hit {
            saved_by: Some(*first)
        },
        "job 2 hits what job 1 saved: {two:?}"
    );
    assert_ne!(one.pod, two.pod, "two runner pods, one cache");
    let stats = world
        .sim
        .cache_server_stats(namespace, &format!("{group}-actions-cache"))
        .expect("the cache server ran");
    assert_eq!(
        (stats.misses, stats.hits, stats.commits, stats.unauthorized),
        (1, 1, 1, 0)
    );
}
