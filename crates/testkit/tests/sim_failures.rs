//! The failures real clusters show runner pods, as the simulator plays them: init containers
//! and native sidecars (shared scratch, failure, pulls) and eviction.

// Test code: a failed step should fail the test loudly.
#![allow(clippy::unwrap_used)]

mod sim_common;

use std::sync::Arc;
use std::time::Duration;

use forgerunner_testkit::sim::SimConfig;
use serde_json::json;
use sim_common::*;

#[tokio::test]
async fn init_container_runs_first_and_sidecar_runs_beside_main() {
    let env = Env::start("sim-init", SimConfig::default()).await;
    let (register, mut registering, let_register) = Gate::new(0);
    let (runner, mut running, let_runner) = Gate::new(0);
    env.sim.register_behaviour("example.org/register", register);
    env.sim.register_behaviour("example.org/runner", runner);
    env.create_job("init", runner_with_init()).await;

    // While `register` runs: Pending, not initialized, main container waiting.
    let info = tokio::time::timeout(DEADLINE, registering.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(info.init && info.container == "register", "{info:?}");
    assert_eq!(info.args, ["register"]);
    assert!(info.write_scratch("/data/.runner", "registered-uuid"));
    let pod = env
        .pod_until("init", "register running", |p| {
            state_of(p, true, "register").running.is_some()
        })
        .await;
    assert_eq!(phase(&pod), Some("Pending"));
    assert_eq!(waiting(&pod, false, "runner").as_deref(), Some("PodInitializing"));
    assert_eq!(waiting(&pod, true, "dind").as_deref(), Some("PodInitializing"));
    let (status, reason, message) = pod_condition(&pod, "Initialized").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("False", Some("ContainersNotInitialized"))
    );
    assert_eq!(
        message.as_deref(),
        Some("containers with incomplete status: [register dind]")
    );
    assert!(running.try_recv().is_err(), "main container waits for init");

    // Then the main container, reading what `register` left, beside the running sidecar.
    let_register.add_permits(1);
    let main = tokio::time::timeout(DEADLINE, running.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(!main.init && main.container == "runner");
    assert_eq!(
        main.read_scratch("/home/runner/state/.runner").as_deref(),
        Some("registered-uuid")
    );
    let pod = env
        .pod_until("init", "Running", |p| phase(p) == Some("Running"))
        .await;
    let register_done = state_of(&pod, true, "register").terminated.unwrap();
    assert_eq!(
        (register_done.exit_code, register_done.reason.as_deref()),
        (0, Some("Completed"))
    );
    let dind = statuses(&pod, true).iter().find(|c| c.name == "dind").unwrap();
    assert!(dind.state.as_ref().unwrap().running.is_some());
    assert_eq!((dind.started, dind.ready), (Some(true), true));
    assert_eq!(pod_condition(&pod, "Initialized").unwrap().0, "True");

    // The sidecar does not keep the pod alive.
    let_runner.add_permits(1);
    env.job_until("init", "Complete", |j| is_true(j, "Complete"))
        .await;
    let pod = env.job_pods("init").await.pop().unwrap();
    assert_eq!(phase(&pod), Some("Succeeded"));
    assert!(state_of(&pod, true, "dind").terminated.is_some());
    env.stop().await;
}

#[tokio::test]
async fn scratch_files_pass_from_init_to_main_container() {
    let env = Env::start("sim-scratch", SimConfig::default()).await;
    let (runner, mut running, let_runner) = Gate::new(0);
    env.sim
        .register_behaviour("example.org/register", Arc::new(Register));
    env.sim.register_behaviour("example.org/runner", runner);
    env.create_job("scratch", runner_with_init()).await;
    let main = tokio::time::timeout(DEADLINE, running.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        main.read_scratch("/home/runner/state/.runner").as_deref(),
        Some("registered-uuid")
    );
    let_runner.add_permits(1);
    env.job_until("scratch", "Complete", |j| is_true(j, "Complete"))
        .await;
    env.stop().await;
}

#[tokio::test]
async fn failing_init_container_fails_the_pod_without_running_main() {
    let env = Env::start("sim-initfail", SimConfig::default()).await;
    let (runner, mut running, _) = Gate::new(0);
    env.sim
        .register_behaviour("example.org/register", Arc::new(Exit(2)));
    env.sim.register_behaviour("example.org/runner", runner);
    env.create_job("initfail", runner_with_init()).await;
    env.job_until("initfail", "Failed", |j| is_true(j, "Failed"))
        .await;
    let pod = env.job_pods("initfail").await.pop().unwrap();
    assert_eq!(phase(&pod), Some("Failed"));
    let term = state_of(&pod, true, "register").terminated.unwrap();
    assert_eq!((term.exit_code, term.reason.as_deref()), (2, Some("Error")));
    assert_eq!(waiting(&pod, false, "runner").as_deref(), Some("PodInitializing"));
    assert_eq!(pod_condition(&pod, "Initialized").unwrap().0, "False");
    assert!(running.try_recv().is_err(), "main container never ran");
    assert_eq!(env.sim.stats().pods_started, 0);
    env.stop().await;
}

#[tokio::test]
async fn init_without_behaviour_succeeds_and_init_image_pulls_can_fail() {
    let config = SimConfig {
        image_pull_failures: vec!["bad.registry/".into()],
        ..SimConfig::default()
    };
    let env = Env::start("sim-initpull", config).await;
    env.sim
        .register_behaviour("example.org/runner", Arc::new(Exit(0)));
    // `example.org/register` has no behaviour: the init container succeeds at once.
    env.create_job("plain", runner_with_init()).await;
    env.job_until("plain", "Complete", |j| is_true(j, "Complete"))
        .await;

    let mut spec = runner_with_init();
    spec["initContainers"][0]["image"] = json!("bad.registry/register:1");
    env.create_job("pull", spec).await;
    let pod = env
        .pod_until("pull", "init ImagePullBackOff", |p| {
            waiting(p, true, "register").as_deref() == Some("ImagePullBackOff")
        })
        .await;
    assert_eq!(phase(&pod), Some("Pending"));
    assert_eq!(waiting(&pod, false, "runner").as_deref(), Some("PodInitializing"));
    env.stop().await;
}

#[tokio::test]
async fn evicted_runner_pod_with_sidecar_ends_failed_evicted() {
    let env = Env::start("sim-evict", SimConfig::default()).await;
    let (runner, mut running, _) = Gate::new(0);
    env.sim.register_behaviour("example.org/runner", runner);
    env.create_job("evict", runner_with_init()).await;
    let info = tokio::time::timeout(DEADLINE, running.recv())
        .await
        .unwrap()
        .unwrap();
    env.sim.evict(&env.ns, &info.name).await.unwrap();
    let pod = env
        .pod_until("evict", "Failed", |p| phase(p) == Some("Failed"))
        .await;
    let status = pod.status.clone().unwrap();
    assert_eq!(status.reason.as_deref(), Some("Evicted"));
    assert!(
        state_of(&pod, true, "dind").terminated.is_some(),
        "sidecar stopped too"
    );
    assert_eq!(
        pod_condition(&pod, "DisruptionTarget").unwrap().1.as_deref(),
        Some("TerminationByKubelet")
    );
    env.job_until("evict", "Failed", |j| is_true(j, "Failed")).await;
    assert!(info.cancel.is_cancelled(), "the runner saw its pod end");
    env.stop().await;
}

#[tokio::test]
async fn slow_sidecar_pull_from_config_holds_initialization() {
    const PULL: Duration = Duration::from_millis(800);
    let config = SimConfig {
        slow_pulls: vec![("docker:".to_owned(), PULL)],
        ..SimConfig::default()
    };
    let env = Env::start("sim-slowinit", config).await;
    env.sim
        .register_behaviour("example.org/runner", Arc::new(Exit(0)));
    let history = env.record_pods("slowinit");
    let before = tokio::time::Instant::now();
    env.create_job("slowinit", runner_with_init()).await;
    env.job_until("slowinit", "Complete", |j| is_true(j, "Complete"))
        .await;
    assert!(before.elapsed() >= PULL, "done after {:?}", before.elapsed());
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let seen = history.lock().unwrap().clone();
        let creating = seen.iter().any(|p| {
            waiting(p, true, "dind").as_deref() == Some("ContainerCreating")
                && waiting(p, false, "runner").as_deref() == Some("PodInitializing")
        });
        if creating {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never saw dind ContainerCreating"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.stop().await;
}
