//! End-to-end tests of the generic reconciler: `run_controller` in-process against the testkit's
//! fake API server, with a tiny in-test forge. No cluster simulator runs, so runner Jobs keep no
//! status unless a test writes one.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use forgerunner_core::Fence;
use forgerunner_core::budget::RateBudget;
use forgerunner_core::crd::ForgeKind;
use forgerunner_core::forge::{GroupKey, ListedRows};
use forgerunner_core::job_identity::{JOB_NAME_ANNOTATION, JOB_RUN_ID_ANNOTATION, JobIdentity};
use forgerunner_core::reconcile::FINALIZER;
use forgerunner_core::reconcile::ledger::DEFAULT_GHOST_GRACE;
use forgerunner_core::runner_job::{FORGE_LABEL, GROUP_LABEL, JOB_BINDING_ANNOTATION};
use forgerunner_core::testing::{OUTDATED_EXIT, SECRET_VALUE, bound_jobs};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demand_creates_runner_jobs_with_secrets_within_max() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(5, Ordering::SeqCst);
    h.create_group("pool", gitea_spec(0, 3, 600)).await;

    wait_for("3 runner jobs", || async {
        h.runner_jobs("pool").await.len() == 3
    })
    .await;
    // The pass that created the runners saw none yet; a later pass reports them.
    wait_for("Ready=True with 3 current runners", || async {
        let counted = h
            .groups()
            .get("pool")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.current_runners == 3);
        counted
            && h.condition("pool", "Ready")
                .await
                .is_some_and(|(s, r, _)| s == "True" && r == "Reconciled")
    })
    .await;
    let group = h.groups().get("pool").await.expect("group");
    assert!(group.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER));
    let status = group.status.expect("status");
    assert_eq!(status.current_runners, 3);
    assert_eq!(status.desired_runners, 3);
    assert!(status.last_poll_time.is_some());

    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
    for job in h.runner_jobs("pool").await {
        let name = job.metadata.name.clone().expect("name");
        assert!(
            name.starts_with("pool-") && name.len() == "pool-".len() + 5,
            "{name}"
        );
        let labels = job.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(FORGE_LABEL).map(String::as_str), Some("gitea"));
        let owner = &job.metadata.owner_references.clone().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("RunnerGroup", Some(true))
        );
        let json = serde_json::to_string(&job).expect("json");
        assert!(!json.contains(SECRET_VALUE), "secret literal in the Job");
        let secret = secrets.get(&name).await.expect("runner secret");
        let data = secret.data.expect("data");
        assert_eq!(
            data.get("token").map(|b| b.0.as_slice()),
            Some(SECRET_VALUE.as_bytes())
        );
        assert_eq!(secret.metadata.owner_references.expect("owner")[0].kind, "Job");
    }

    // More polls never exceed maxRunners.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(h.runner_jobs("pool").await.len() <= 3, "maxRunners exceeded");
    }
    h.stop().await;
}

/// The group's books remember which runners its session registered (issue 27: core keeps the
/// books, forges report facts): the forge is told so in every pass while the process lives, and
/// a restarted controller, whose session registered none of them, tells them adopted. They also
/// count how long the forge has shown each runner connected, and tell the forge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forge_is_told_which_runners_its_session_registered() {
    let mut h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(2, Ordering::SeqCst);
    h.create_group("books", gitea_spec(0, 2, 600)).await;
    wait_for("2 runner jobs", || async {
        h.runner_jobs("books").await.len() == 2
    })
    .await;
    let names: Vec<String> = h
        .runner_jobs("books")
        .await
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    let forge = h.forge.clone();
    let told = |registered_here: bool| {
        names.iter().all(|n| {
            forge
                .told(n)
                .is_some_and(|r| r.stored && r.registered_here() == registered_here)
        })
    };
    wait_for("both told stored and registered here", || async { told(true) }).await;
    // The fake forge shows every runner idle: from the pass after the first that saw them so,
    // the forge is told since when they have been connected (core's clock, not the forge's).
    let connected = || {
        names
            .iter()
            .all(|n| forge.told(n).is_some_and(|r| r.connected_since.is_some()))
    };
    wait_for("both told connected since a pass saw them idle", || async {
        connected()
    })
    .await;
    h.restart_controller().await;
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "books".into(),
    });
    wait_for("both told adopted after the restart", || async { told(false) }).await;
    h.stop().await;
}

/// Where the forge binds each runner to one job (Forgejo 15's handles), the pass reserves a
/// job for each runner it makes, oldest first, one runner per job: the forge is asked to bind
/// the runner to it, its Job records the binding, and later passes tell the forge of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_new_runner_is_bound_to_its_own_job() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.waiting.lock().expect("lock") = bound_jobs(&["b0", "b1", "b2"]);
    h.forge.jobs.store(3, Ordering::SeqCst);
    h.create_group("bound", gitea_spec(0, 2, 600)).await;
    wait_for("2 runner jobs", || async {
        h.runner_jobs("bound").await.len() == 2
    })
    .await;
    let jobs = h.runner_jobs("bound").await;
    let recorded: BTreeMap<String, String> = jobs
        .iter()
        .filter_map(|j| {
            let binding = j.metadata.annotations.as_ref()?.get(JOB_BINDING_ANNOTATION)?;
            Some((j.metadata.name.clone()?, binding.clone()))
        })
        .collect();
    let bindings: BTreeSet<&str> = recorded.values().map(String::as_str).collect();
    assert_eq!(
        bindings,
        BTreeSet::from(["b0", "b1"]),
        "the two oldest, once each"
    );
    let asked: BTreeMap<String, String> = h
        .forge
        .bound
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|(name, b)| Some((name.clone(), b.clone()?)))
        .collect();
    assert_eq!(
        asked, recorded,
        "the forge bound each runner to the job its Job records"
    );
    let forge = h.forge.clone();
    wait_for("the forge told each runner's binding", || async {
        recorded
            .iter()
            .all(|(name, b)| forge.told(name).is_some_and(|r| r.binding() == Some(b.as_str())))
    })
    .await;
    h.stop().await;
}

/// A pass describes the spec once: the fair-share turn and the pass share one profile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_describes_the_spec_once() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.create_group("once", gitea_spec(0, 2, 600)).await;
    let key = GroupKey {
        namespace: NS.into(),
        name: "once".into(),
    };
    wait_for("a first snapshot", || async {
        h.forge.snapshots.load(Ordering::SeqCst) >= 1
    })
    .await;
    let counts = || {
        (
            h.forge.describes.load(Ordering::SeqCst),
            h.forge.snapshots.load(Ordering::SeqCst),
        )
    };
    let (described, snapped) = counts();
    for _ in 0..3 {
        let before = h.forge.snapshots.load(Ordering::SeqCst);
        h.trigger.wake(key.clone());
        wait_for("another pass", || async {
            h.forge.snapshots.load(Ordering::SeqCst) > before
        })
        .await;
    }
    let (d, s) = counts();
    let passes = s - snapped;
    assert!(passes >= 3, "three more passes");
    // A pass may be between its description and its snapshot at either reading: one either way.
    assert!(
        (d - described).abs_diff(passes) <= 1,
        "one description per pass: {} for {passes} passes",
        d - described
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_runners_are_removed_after_timeout_and_cleanup_runs() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(2, Ordering::SeqCst);
    h.create_group("idle", gitea_spec(0, 4, 2)).await;
    wait_for("2 runner jobs", || async {
        h.runner_jobs("idle").await.len() == 2
    })
    .await;

    // Idle time counts from running: no kubelet runs here, so the test says the pods run.
    for job in h.runner_jobs("idle").await {
        let name = job.metadata.name.clone().expect("job name");
        h.jobs()
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&serde_json::json!({"status": {"ready": 1, "active": 1}})),
            )
            .await
            .expect("mark the runner running");
    }
    h.forge.jobs.store(0, Ordering::SeqCst);
    wait_for("idle runners removed", || async {
        h.runner_jobs("idle").await.is_empty()
    })
    .await;
    assert!(h.forge.removed().len() >= 2, "idle runners deregistered first");

    // Delete the group: the finalizer runs the forge cleanup, then lets go.
    h.groups()
        .delete("idle", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("group gone", || async {
        h.groups().get_opt("idle").await.ok().flatten().is_none()
    })
    .await;
    assert!(h.forge.shutdowns.load(Ordering::SeqCst) >= 1);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_runner_is_cleaned_up_and_counted() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("flaky", gitea_spec(0, 1, 600)).await;
    wait_for("1 runner job", || async {
        h.runner_jobs("flaky").await.len() == 1
    })
    .await;
    let first = h.runner_jobs("flaky").await[0]
        .metadata
        .name
        .clone()
        .expect("name");

    h.fail_job(&first).await;

    wait_for("failed runner replaced", || async {
        let jobs = h.runner_jobs("flaky").await;
        jobs.len() == 1 && jobs[0].metadata.name.as_deref() != Some(first.as_str())
    })
    .await;
    wait_for("failedRunners = 1", || async {
        h.groups()
            .get("flaky")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.failed_runners == 1)
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_errors_become_conditions() {
    let h = Harness::start(true).await;
    // No Secret: SecretNotFound naming it.
    h.create_group("nosecret", gitea_spec(0, 2, 600)).await;
    wait_for("SecretNotFound", || async {
        h.condition("nosecret", "Ready")
            .await
            .is_some_and(|(s, r, m)| s == "False" && r == "SecretNotFound" && m.contains("creds"))
    })
    .await;
    // The fake refuses this at admission (CEL); stored before the rule existed, it reaches the
    // reconciler, whose own validation must catch it.
    h.create_group_before_rules("broken", serde_json::json!({"forge": "gitea", "maxRunners": 2}))
        .await;
    wait_for("InvalidSpec", || async {
        h.condition("broken", "Ready")
            .await
            .is_some_and(|(s, r, m)| s == "False" && r == "InvalidSpec" && m.contains("spec.gitea"))
    })
    .await;
    // A rule of the forge's own block is reported the same way.
    let mut unlabelled = gitea_spec(0, 2, 600);
    unlabelled["gitea"]["labels"] = serde_json::json!(["reserved"]);
    h.create_group("unlabelled", unlabelled).await;
    wait_for("InvalidSpec from the forge's rules", || async {
        h.condition("unlabelled", "Ready").await.is_some_and(|(s, r, m)| {
            s == "False" && r == "InvalidSpec" && m.contains("spec.gitea.labels: must not use reserved")
        })
    })
    .await;
    h.create_secret("creds").await;
    h.forge.fail_demand.store(true, Ordering::SeqCst);
    h.create_group("down", gitea_spec(0, 2, 600)).await;
    wait_for("ForgeConnected=False", || async {
        h.condition("down", "ForgeConnected")
            .await
            .is_some_and(|(s, r, _)| s == "False" && r == "ForgeUnavailable")
    })
    .await;
    assert!(h.runner_jobs("nosecret").await.is_empty() && h.runner_jobs("broken").await.is_empty());
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_forge_is_reported() {
    let h = Harness::start(false).await;
    h.create_secret("creds").await;
    h.create_group("off", gitea_spec(1, 2, 600)).await;
    wait_for("ForgeDisabled", || async {
        h.condition("off", "Ready")
            .await
            .is_some_and(|(s, r, _)| s == "False" && r == "ForgeDisabled")
    })
    .await;
    assert!(h.runner_jobs("off").await.is_empty());
    // Deleting a group of a disabled forge is not blocked.
    h.groups()
        .delete("off", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("group gone", || async {
        h.groups().get_opt("off").await.ok().flatten().is_none()
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_wakes_a_push_style_group_before_its_resync() {
    let h = Harness::start_with(Some(ForgeKind::Github)).await;
    h.create_secret("creds").await;
    let spec = serde_json::json!({
        "forge": "github",
        "minRunners": 0,
        "maxRunners": 4,
        "github": {"configUrl": "https://github.com/acme", "credentials": "creds"}
    });
    h.create_group("gh", spec).await;
    wait_for("Ready=True", || async {
        h.condition("gh", "Ready")
            .await
            .is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    assert!(h.runner_jobs("gh").await.is_empty());
    // The 60 s safety resync is far beyond the deadline: only the trigger can do this in time.
    h.forge.jobs.store(2, Ordering::SeqCst);
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "gh".into(),
    });
    wait_for("2 runner jobs after trigger", || async {
        h.runner_jobs("gh").await.len() == 2
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outdated_runner_exit_degrades_the_group_until_a_runner_succeeds() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("old", gitea_spec(0, 1, 600)).await;
    wait_for("1 runner job", || async { h.runner_jobs("old").await.len() == 1 }).await;
    let first = h.runner_jobs("old").await[0].metadata.name.clone().expect("name");

    h.failed_runner_pod(&first, OUTDATED_EXIT).await;
    h.fail_job(&first).await;
    wait_for("Degraded=True RunnerOutdated", || async {
        h.condition("old", "Degraded")
            .await
            .is_some_and(|(s, r, m)| s == "True" && r == "RunnerOutdated" && m.contains("spec.image"))
    })
    .await;
    wait_for("a RunnerOutdated Warning Event naming the runner", || async {
        let events: Api<Event> = Api::namespaced(h.client.clone(), NS);
        events.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some("RunnerOutdated")
                    && e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| n.contains(&first))
            })
        })
    })
    .await;

    // Later passes (the replacement runner, its count in the status) keep the condition: the
    // image is still old.
    wait_for("replacement runner counted", || async {
        let jobs = h.runner_jobs("old").await;
        let replaced = jobs.len() == 1 && jobs[0].metadata.name.as_deref() != Some(first.as_str());
        let counted = h
            .groups()
            .get("old")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.failed_runners == 1 && s.current_runners == 1);
        replaced && counted
    })
    .await;
    let (status, reason, _) = h.condition("old", "Degraded").await.expect("degraded");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "RunnerOutdated"));

    // A runner that finishes well clears it.
    let second = h.runner_jobs("old").await[0].metadata.name.clone().expect("name");
    let done = serde_json::json!({"status": {"succeeded": 1, "conditions": [
        {"type": "Complete", "status": "True", "reason": "Completed", "message": "x"}
    ]}});
    h.forge.jobs.store(0, Ordering::SeqCst);
    h.jobs()
        .patch_status(&second, &PatchParams::default(), &Patch::Merge(&done))
        .await
        .expect("complete job");
    wait_for("Degraded=False Healthy", || async {
        h.condition("old", "Degraded")
            .await
            .is_some_and(|(s, r, _)| s == "False" && r == "Healthy")
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_runner_exit_codes_are_plain_failures() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("crash", gitea_spec(0, 1, 600)).await;
    wait_for("1 runner job", || async {
        h.runner_jobs("crash").await.len() == 1
    })
    .await;
    let first = h.runner_jobs("crash").await[0]
        .metadata
        .name
        .clone()
        .expect("name");
    h.failed_runner_pod(&first, 1).await;
    h.fail_job(&first).await;
    wait_for("failedRunners = 1", || async {
        h.groups()
            .get("crash")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.failed_runners == 1)
    })
    .await;
    let (status, reason, _) = h.condition("crash", "Degraded").await.expect("degraded");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Healthy"));
    h.stop().await;
}

/// A process killed between a runner's Job and its Secret leaves a Job whose pod can never
/// start. The next process retires it on its first pass (Job deleted, runner deregistered), so
/// a complete runner takes the job instead of the leftover holding its place until the startup
/// timeout; no credentials are re-issued for the leftover's pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_left_without_its_secret_by_a_crash_is_replaced() {
    let mut h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.create_group("pool", gitea_spec(0, 3, 600)).await;
    // The leftover: made by the crashed process as every runner Job is, owned by the group,
    // but without its Secret; its pod never started.
    let group = h.groups().get("pool").await.expect("group");
    let owner = forgerunner_core::runner_job::group_owner_reference(&group).expect("owner reference");
    let leftover: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pool-crash", "namespace": NS, "labels": {
            forgerunner_core::runner_job::MANAGED_BY_LABEL: forgerunner_core::runner_job::MANAGED_BY_VALUE,
            GROUP_LABEL: "pool",
        }, "ownerReferences": [owner]},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "runner", "image": "fake/runner:1"}
        ]}}},
    }))
    .expect("job");
    h.jobs()
        .create(&PostParams::default(), &leftover)
        .await
        .expect("create leftover job");
    h.forge.jobs.store(1, Ordering::SeqCst);
    // The next process.
    h.restart_controller().await;

    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
    wait_for("a complete runner instead of the leftover", || async {
        let names: Vec<String> = h
            .runner_jobs("pool")
            .await
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect();
        let mut complete = names.len() == 1 && names[0] != "pool-crash";
        for n in &names {
            complete &= secrets.get_opt(n).await.ok().flatten().is_some();
        }
        complete
    })
    .await;
    assert!(
        secrets.get_opt("pool-crash").await.expect("get").is_none(),
        "no Secret is written for the leftover"
    );
    assert!(
        h.forge.removed().contains(&"pool-crash".to_owned()),
        "the leftover is deregistered at the forge: removed {:?}",
        h.forge.removed()
    );
    h.stop().await;
}

/// M2 of the security review: anyone who may create Jobs in the namespace can label one as the
/// group's runner and annotate it with a forge runner id. Without the group's ownerReference it
/// is not the group's: it covers no runner place, and it is never retired, deregistered at the
/// forge or deleted. Counted as the group's, the one without any owner would be retired on the
/// group's first pass (a pending runner without its Secret, `repair.rs`), its forge runner
/// deregistered. The control, for the passes to have run: the group's own runner, made for a
/// job and idle past its timeout once the job is gone, is deregistered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_job_the_group_does_not_own_is_never_acted_on() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    let secret_uid = Api::<Secret>::namespaced(h.client.clone(), NS)
        .get("creds")
        .await
        .expect("secret")
        .metadata
        .uid;
    let stray = |name: &str, owners: Option<serde_json::Value>| -> Job {
        let mut job = serde_json::json!({
            "metadata": {"name": name, "namespace": NS, "labels": {
                forgerunner_core::runner_job::MANAGED_BY_LABEL: forgerunner_core::runner_job::MANAGED_BY_VALUE,
                GROUP_LABEL: "pool",
                FORGE_LABEL: "gitea",
            }, "annotations": {"forgerunner.dev/forgejo-runner-id": "1", "forgerunner.dev/runner-id": "1"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "runner", "image": "fake/runner:1"}
            ]}}},
        });
        if let Some(o) = owners {
            job["metadata"]["ownerReferences"] = o;
        }
        serde_json::from_value(job).expect("job")
    };
    let strays = [
        stray("pool-nobdy", None),
        // Owned by something else that exists (an owner that does not is garbage-collected).
        stray(
            "pool-other",
            Some(
                serde_json::json!([{"apiVersion": "v1", "kind": "Secret", "name": "creds",
                "uid": secret_uid, "controller": true}]),
            ),
        ),
    ];
    for job in &strays {
        h.jobs()
            .create(&PostParams::default(), job)
            .await
            .expect("create stray job");
    }
    let is_stray = |n: &str| n == "pool-nobdy" || n == "pool-other";
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("pool", gitea_spec(0, 3, 2)).await;
    let own = || async {
        h.runner_jobs("pool")
            .await
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .find(|n| !is_stray(n))
    };
    wait_for("the group's own runner for the job", || async {
        own().await.is_some()
    })
    .await;
    // Idle time counts from running: no kubelet runs here, so the test says the pod runs.
    h.jobs()
        .patch_status(
            &own().await.expect("own runner"),
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"status": {"ready": 1, "active": 1}})),
        )
        .await
        .expect("mark the runner running");
    h.forge.jobs.store(0, Ordering::SeqCst);
    wait_for("the group's own runner removed at its idle timeout", || async {
        h.forge.removed().iter().any(|n| !is_stray(n))
    })
    .await;
    let removed = h.forge.removed();
    assert!(
        !removed.iter().any(|n| is_stray(n)),
        "a stray Job reached the forge: removed {removed:?}"
    );
    for job in &strays {
        let name = job.metadata.name.as_deref().expect("name");
        assert!(
            h.jobs().get_opt(name).await.expect("get").is_some(),
            "{name} was deleted"
        );
    }
    h.stop().await;
}

/// Waits `within` for `cond` and says whether it ever held: for things that must not happen.
async fn happens_within<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_the_controller_stops_every_reconcile() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.create_group("pool", gitea_spec(0, 3, 600)).await;
    wait_for("the first pass", || async {
        h.condition("pool", "Ready").await.is_some()
    })
    .await;
    // A deposed leader aborts its controller: nothing of it may go on reconciling.
    h.task.abort();
    wait_for("the controller task to end", || async { h.task.is_finished() }).await;
    h.forge.jobs.store(2, Ordering::SeqCst);
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "pool".into(),
    });
    h.groups()
        .patch(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"maxRunners": 4}})),
        )
        .await
        .expect("patch");
    let created = happens_within(Duration::from_secs(3), || async {
        !h.runner_jobs("pool").await.is_empty()
    })
    .await;
    assert!(!created, "an aborted controller created runners");
    assert!(h.forge.issued.lock().expect("lock").is_empty());
    h.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_no_runner_is_registered_at_the_forge() {
    let fence = Fence::closed();
    let h = Harness::start_fenced(Some(ForgeKind::Gitea), fence.clone()).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(2, Ordering::SeqCst);
    h.create_group("pool", gitea_spec(0, 3, 600)).await;
    wait_for("a fenced pass", || async {
        h.condition("pool", "Ready")
            .await
            .is_some_and(|(s, _, m)| s == "False" && m.contains("does not hold the leader lease"))
    })
    .await;
    assert!(
        h.forge.issued.lock().expect("lock").is_empty(),
        "credentials issued while fenced"
    );
    assert!(h.runner_jobs("pool").await.is_empty());
    // Holding the fence again lets the same controller work.
    fence.hold_until(tokio::time::Instant::now() + Duration::from_secs(3600));
    wait_for("2 runner jobs", || async {
        h.runner_jobs("pool").await.len() == 2
    })
    .await;
    h.stop().await;
}

/// Makes the first runner Secret create answer `code` and checks that the runner whose Secret
/// it was lost its Job and its registration at the forge, and that a later runner got a Secret
/// of its own.
async fn first_secret_create_answered(code: u16) {
    use forgerunner_testkit::apiserver::{Fault, Verb};
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.server
        .inject(Fault::error(code).verb(Verb::Create).resource("secrets").times(1));
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("pool", gitea_spec(0, 1, 600)).await;

    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
    wait_for("a runner with its own Secret", || async {
        let mut with_secret = false;
        for j in &h.runner_jobs("pool").await {
            let name = j.metadata.name.clone().unwrap_or_default();
            with_secret |= secrets.get_opt(&name).await.ok().flatten().is_some();
        }
        with_secret
    })
    .await;
    let first = h
        .forge
        .issued
        .lock()
        .expect("lock")
        .first()
        .cloned()
        .expect("a runner issued");
    let live: Vec<String> = h
        .runner_jobs("pool")
        .await
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    assert!(
        !live.contains(&first),
        "the runner without its Secret lost its Job"
    );
    assert!(
        h.forge.removed().contains(&first),
        "the runner without its Secret is deregistered at the forge: removed {:?}",
        h.forge.removed()
    );
    h.stop().await;
}

/// A runner whose Secret cannot be written never starts: its Job is deleted and the runner the
/// forge registered for it is deregistered too, instead of staying behind as a ghost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_whose_secret_fails_is_deregistered_with_its_job() {
    first_secret_create_answered(500).await;
}

/// A 409 on a runner's Secret means a Secret of that name exists (the API server's create
/// answers `AlreadyExists` only then: apiserver `pkg/registry/generic/registry/store.go`,
/// `Store.Create`). It is used only when the runner's Job owns it; here the one that "exists"
/// is nobody's (the GET finds none of ours), so the runner goes, Job and registration, and the
/// next one gets its own Secret (security review L8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_secret_someone_else_holds_is_never_used() {
    first_secret_create_answered(409).await;
}

/// A runner row the forge lists offline, with no runner Job behind it, is deregistered once
/// listings at least the ghost grace apart have shown it offline: core's ledger tells the
/// ghost and hands it to the plan (`PlanInput::ghosts`), and the forge is told to remove it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_offline_for_the_ghost_grace_is_deregistered() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    let listed = |at: std::time::Instant| ListedRows {
        offline: BTreeSet::from(["haunted-gh0st".to_owned()]),
        online: BTreeSet::new(),
        own: std::collections::BTreeSet::new(),
        whole: true,
        listed_at: at,
    };
    let first_sighting = std::time::Instant::now()
        .checked_sub(DEFAULT_GHOST_GRACE + Duration::from_secs(1))
        .expect("the machine has been up longer than the ghost grace");
    *h.forge.listed_rows.lock().expect("lock") = Some(listed(first_sighting));
    h.create_group("haunted", gitea_spec(0, 2, 600)).await;
    wait_for("two passes that saw the row", || async {
        h.forge.snapshots.load(Ordering::SeqCst) >= 2
    })
    .await;
    assert!(
        !h.forge.removed().contains(&"haunted-gh0st".to_owned()),
        "a ghost at first sight"
    );
    // A listing fetched a grace after the first sighting still shows it offline.
    *h.forge.listed_rows.lock().expect("lock") = Some(listed(std::time::Instant::now()));
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "haunted".into(),
    });
    wait_for("the ghost deregistered", || async {
        h.forge.removed().contains(&"haunted-gh0st".to_owned())
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_api_budget_holds_creation_back_before_the_forge_refuses() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    // 40 of 5000 requests left: inside the reserve, so nothing is created.
    *h.forge.budget.lock().expect("lock") = Some(RateBudget {
        limit: 5000,
        remaining: 40,
        reset: Some(jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600)),
    });
    h.forge.jobs.store(6, Ordering::SeqCst);
    h.create_group("thrifty", gitea_spec(0, 6, 600)).await;
    wait_for("an ApiBudgetLow Warning Event", || async {
        let events: Api<Event> = Api::namespaced(h.client.clone(), NS);
        events.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some("ApiBudgetLow")
                    && e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| {
                        n.contains("40 of 5000") && n.contains("): creating 0 of 6 runners this pass")
                    })
            })
        })
    })
    .await;
    assert!(
        h.runner_jobs("thrifty").await.is_empty(),
        "created on an exhausted budget"
    );

    // 250 of the 500-request low band left: half the demand per pass, never more.
    *h.forge.budget.lock().expect("lock") = Some(RateBudget {
        limit: 5000,
        remaining: 250,
        reset: None,
    });
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "thrifty".into(),
    });
    wait_for("runners created at the slower pace", || async {
        !h.runner_jobs("thrifty").await.is_empty()
    })
    .await;
    assert!(h.forge.issued.lock().expect("lock").len() <= 6);

    // A full budget again: the rest follows.
    *h.forge.budget.lock().expect("lock") = None;
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "thrifty".into(),
    });
    wait_for("all 6 runners", || async {
        h.runner_jobs("thrifty").await.len() == 6
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_a_runner_runs_is_recorded_on_its_job() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("named", gitea_spec(0, 1, 600)).await;
    wait_for("a runner", || async { h.runner_jobs("named").await.len() == 1 }).await;
    let name = h.runner_jobs("named").await[0]
        .metadata
        .name
        .clone()
        .expect("name");
    h.forge.identities.lock().expect("lock").insert(
        name.clone(),
        JobIdentity {
            run_id: Some("41".into()),
            job_name: Some("lint\n".into()),
            ..JobIdentity::default()
        },
    );
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "named".into(),
    });
    wait_for("the runner Job annotated with its job", || async {
        h.jobs().get(&name).await.is_ok_and(|j| {
            let a = j.metadata.annotations.unwrap_or_default();
            a.get(JOB_RUN_ID_ANNOTATION).map(String::as_str) == Some("41")
                && a.get(JOB_NAME_ANNOTATION).map(String::as_str) == Some("lint")
        })
    })
    .await;
    h.stop().await;
}

/// Passes in a row read the credentials Secret once, not once each: with a thousand groups
/// polling every few seconds those GETs were hundreds a second against the API server
/// (security review M7). A failed pass forgets them, so a fixed Secret is read at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_in_a_row_read_the_credentials_secret_once() {
    use forgerunner_testkit::apiserver::Verb;
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.create_group("steady", gitea_spec(0, 4, 600)).await;
    let key = GroupKey {
        namespace: NS.into(),
        name: "steady".into(),
    };
    for want in 1..=3 {
        h.forge.jobs.store(want, Ordering::SeqCst);
        h.trigger.wake(key.clone());
        wait_for("a runner per job", || async {
            h.runner_jobs("steady").await.len() == want as usize
        })
        .await;
    }
    let gets = h.server.requests().count_in(Verb::Get, "secrets", NS);
    assert_eq!(
        gets, 1,
        "the credentials Secret was read {gets} times in three passes or more"
    );

    // A failed pass forgets what it read: the next one reads the Secret again.
    h.forge.fail_demand.store(true, Ordering::SeqCst);
    h.trigger.wake(key.clone());
    wait_for("the failed pass", || async {
        h.condition("steady", "Ready")
            .await
            .is_some_and(|(status, _, _)| status == "False")
    })
    .await;
    h.forge.fail_demand.store(false, Ordering::SeqCst);
    wait_for("the Secret read again after the failure", || async {
        h.server.requests().count_in(Verb::Get, "secrets", NS) > 1
    })
    .await;
    h.stop().await;
}
