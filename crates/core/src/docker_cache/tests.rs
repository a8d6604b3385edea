use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use proptest::prelude::*;

use super::*;
use crate::crd::{ContainerMode, DockerCacheSpec, ForgeKind};
use crate::runner_pod::dind::{DindProfile, add_dind};

fn dind_group(max: u32, claims: Option<u32>) -> RunnerGroup {
    let mut g = RunnerGroup::test(ForgeKind::Gitea)
        .named("ci", "web")
        .uid("uid-1")
        .max(max)
        .container_mode(ContainerModeType::Dind)
        .build();
    g.spec.docker_cache = Some(DockerCacheSpec {
        size: "30Gi".into(),
        storage_class_name: Some("fast".into()),
        claims,
    });
    g
}

/// A runner Job whose pod has the `dind` sidecar, as the forges build it.
fn dind_job() -> Job {
    let mut pod = PodSpec {
        containers: vec![Container {
            name: "runner".into(),
            image: Some("runner:1".into()),
            ..Container::default()
        }],
        ..PodSpec::default()
    };
    let profile = DindProfile {
        work_dir: "/data",
        externals_dir: None,
        runner_env: &[],
    };
    add_dind(&mut pod, &profile, 1000);
    Job {
        spec: Some(JobSpec {
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

fn storage(job: &Job) -> &k8s_openapi::api::core::v1::Volume {
    job_pod(job)
        .and_then(|p| p.volumes.as_ref())
        .and_then(|v| v.iter().find(|v| v.name == DIND_STORAGE_VOLUME))
        .expect("dind-storage volume")
}

#[test]
fn the_pool_is_max_runners_or_the_claims_asked_for_and_only_with_dind() {
    assert_eq!(
        pool_names(&dind_group(3, None)),
        ["web-docker-0", "web-docker-1", "web-docker-2"]
    );
    assert_eq!(pool_names(&dind_group(3, Some(1))), ["web-docker-0"]);
    assert_eq!(pool_size(&dind_group(1000, None).spec), MAX_DOCKER_CACHE_CLAIMS);
    let mut no_cache = dind_group(3, None);
    no_cache.spec.docker_cache = None;
    assert_eq!(pool_size(&no_cache.spec), 0);
    let mut not_dind = dind_group(3, None);
    not_dind.spec.container_mode = Some(ContainerMode {
        type_: ContainerModeType::Kubernetes,
        kubernetes_mode_work_volume_claim: None,
    });
    assert_eq!(pool_size(&not_dind.spec), 0, "no daemon, no cache");
}

#[test]
fn a_pool_claim_is_owned_by_the_group_rwo_of_the_size_and_class_asked_for() {
    let g = dind_group(2, None);
    let claim = pool_claim(&g, "web-docker-1").expect("built").expect("asked for");
    let owner = &claim.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("RunnerGroup", "uid-1")
    );
    assert_eq!(claim.metadata.namespace.as_deref(), Some("ci"));
    assert_eq!(
        claim.labels().get(DOCKER_CACHE_OF_LABEL).map(String::as_str),
        Some("web")
    );
    let spec = claim.spec.as_ref().expect("spec");
    assert_eq!(
        spec.access_modes.as_deref(),
        Some(&["ReadWriteOnce".to_owned()][..])
    );
    assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.as_str());
    assert_eq!(size, Some("30Gi"));
    let mut no_uid = g.clone();
    no_uid.metadata.uid = None;
    assert!(pool_claim(&no_uid, "web-docker-0").is_err());
}

#[test]
fn a_mounted_claim_replaces_only_the_daemons_empty_dir() {
    let plain = dind_job();
    assert!(
        storage(&plain).empty_dir.is_some(),
        "without a cache: an emptyDir"
    );
    let mut job = plain.clone();
    assert!(mount_claim(&mut job, "web-docker-0"));
    let volume = storage(&job);
    assert_eq!(volume.empty_dir, None);
    assert_eq!(
        volume
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.as_str()),
        Some("web-docker-0")
    );
    // Nothing else of the pod changes: the same containers, mounts and security contexts.
    let (a, b) = (job_pod(&plain).expect("pod"), job_pod(&job).expect("pod"));
    assert_eq!(a.init_containers, b.init_containers);
    assert_eq!(a.containers, b.containers);
    assert_eq!(a.security_context, b.security_context);
    assert_eq!(a.volumes.as_ref().map(Vec::len), b.volumes.as_ref().map(Vec::len));
    assert_eq!(claims_in_use([b]), BTreeSet::from(["web-docker-0".to_owned()]));
    let mut no_dind = Job::default();
    assert!(
        !mount_claim(&mut no_dind, "web-docker-0"),
        "no dind, nothing to mount into"
    );
}

#[test]
fn runners_made_in_one_pass_get_distinct_free_claims_then_empty_dirs() {
    let pool: Vec<String> = (0..3).map(|i| claim_name("web", i)).collect();
    let in_use = BTreeSet::from(["web-docker-0".to_owned()]);
    assert_eq!(
        choose_claims(&pool, &in_use, 4),
        [
            Some("web-docker-1".to_owned()),
            Some("web-docker-2".to_owned()),
            None,
            None
        ]
    );
    assert_eq!(
        choose_claims(&pool, &BTreeSet::new(), 0),
        Vec::<Option<String>>::new()
    );
}

#[test]
fn a_claim_stays_in_use_while_the_pod_of_a_deleted_job_terminates() {
    let mut job = dind_job();
    mount_claim(&mut job, "web-docker-0");
    let terminating_pod = job_pod(&job).cloned().expect("pod");
    // The Job is gone (deleted in the background); its pod is still there.
    let in_use = claims_in_use([&terminating_pod]);
    let pool = vec!["web-docker-0".to_owned()];
    assert_eq!(choose_claims(&pool, &in_use, 1), [None]);
    // Once the pod is gone too, the next runner reuses the claim.
    assert_eq!(
        choose_claims(&pool, &claims_in_use([]), 1),
        [Some("web-docker-0".to_owned())]
    );
}

/// One runner in the model: its Job (its template names its claim) and its pod, each there or
/// not.
#[derive(Clone, Debug)]
struct Runner {
    job: Job,
    job_exists: bool,
    pod_exists: bool,
}

#[derive(Clone, Debug)]
enum Step {
    /// A pass makes this many runners.
    Create(usize),
    /// The Job controller makes the pod of runner `i` (modulo the runners made).
    StartPod(usize),
    /// Runner `i`'s Job is deleted in the background: its pod may still run.
    DeleteJob(usize),
    /// Runner `i`'s pod is gone (stopped and removed).
    PodGone(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0usize..5).prop_map(Step::Create),
        any::<usize>().prop_map(Step::StartPod),
        any::<usize>().prop_map(Step::DeleteJob),
        any::<usize>().prop_map(Step::PodGone),
    ]
}

proptest! {
    /// Whatever order runners are made, started, deleted and stopped in, no two runners whose
    /// Job or pod exists ever name the same claim, and a runner only goes without one when every
    /// claim is taken.
    #[test]
    fn two_live_runners_never_share_a_claim(
        pool_len in 0u32..5,
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let pool: Vec<String> = (0..pool_len).map(|i| claim_name("web", i)).collect();
        let mut runners: Vec<Runner> = Vec::new();
        for s in steps {
            match s {
                Step::Create(n) => {
                    // What the cluster shows: the Jobs' templates and the pods.
                    let pods: Vec<PodSpec> = runners
                        .iter()
                        .filter(|r| r.pod_exists)
                        .filter_map(|r| job_pod(&r.job).cloned())
                        .collect();
                    let jobs = runners.iter().filter(|r| r.job_exists).filter_map(|r| job_pod(&r.job));
                    let in_use = claims_in_use(jobs.chain(pods.iter()));
                    let chosen = choose_claims(&pool, &in_use, n);
                    prop_assert_eq!(chosen.len(), n);
                    let free = pool.iter().filter(|c| !in_use.contains(*c)).count();
                    prop_assert_eq!(chosen.iter().flatten().count(), n.min(free));
                    for claim in chosen {
                        let mut job = dind_job();
                        if let Some(c) = &claim {
                            prop_assert!(mount_claim(&mut job, c));
                        }
                        runners.push(Runner { job, job_exists: true, pod_exists: false });
                    }
                }
                Step::StartPod(i) if !runners.is_empty() => {
                    let n = runners.len();
                    let r = &mut runners[i % n];
                    r.pod_exists |= r.job_exists;
                }
                Step::DeleteJob(i) if !runners.is_empty() => {
                    let n = runners.len();
                    runners[i % n].job_exists = false;
                }
                Step::PodGone(i) if !runners.is_empty() => {
                    let n = runners.len();
                    runners[i % n].pod_exists = false;
                }
                _ => {}
            }
            let mut held = BTreeSet::new();
            for r in runners.iter().filter(|r| r.job_exists || r.pod_exists) {
                for claim in claims_in_use(job_pod(&r.job)) {
                    prop_assert!(held.insert(claim.clone()), "{} is mounted twice", claim);
                }
            }
        }
    }
}
