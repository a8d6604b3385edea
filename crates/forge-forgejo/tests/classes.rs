//! Wire tests of runner classes (`spec.classes`) at the fake Forgejo: which jobs a group with
//! classes sees, which job a Forgejo 15 runner of a class is bound to, the labels it declares,
//! and what an 11–14 runner of a class registers with.
//!
//! Upstream (Forgejo `d883bd8f`, forgejo-runner 12.8): the jobs listing keeps a job only when
//! every `runs-on` label is among the `labels` query (`routers/api/v1/shared/runners.go`
//! `fromRunJobModelToResponse` → `models/actions/run_job.go` `ItRunsOn`); a runner made over
//! REST has no labels (`RegisterRunner`, same file) until `one-job` declares its `--label`s
//! (`routers/api/actions/runner/runner.go` `Declare`); and a runner gets the job of its handle
//! only if its labels hold every `runs-on` label (`models/actions/task.go`
//! `CreateTaskForRunner`: `j.IsRequestedByRunner(handle) && j.ItRunsOn(runner.AgentLabels)`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use forgerunner_core::forge::RunnerRequest;

use common::{ctx, fake, forge, register_in_a_pass, runner_ref};
use forgerunner_core::crd::ForgejoScope;
use forgerunner_core::forge::{Forge, GroupContext, RunnerCredentials};
use forgerunner_core::plan::RunnerPhase;
use forgerunner_core::reconcile::ledger::Ledger;
use forgerunner_forgejo::pod::{ENV_JOB_HANDLE, ENV_RUNNER_LABELS, TOKEN_KEY};
use forgerunner_http::pod_checks::default_pod;
use forgerunner_testkit::forge_common::rpc::RunnerClient;
use forgerunner_testkit::forgejo::{ADMIN_TOKEN, ForgejoFakeHandle};
use serde_json::json;

/// Group `sized` at `fake` (repo `o/r`): own label `self-hosted`, classes `small` (`linux`)
/// and `large` (`linux`, `large`), in that order.
fn sized(fake: &ForgejoFakeHandle) -> GroupContext {
    let mut c = ctx(
        "sized",
        &fake.url(),
        ForgejoScope::Repo,
        Some("o/r"),
        &["self-hosted:host"],
        ADMIN_TOKEN,
    );
    c.group.spec.classes = serde_json::from_value(json!([
        {"name": "small", "labels": ["linux:host"]},
        {"name": "large", "labels": ["linux:host", "large:host"], "resources": {"requests": {"cpu": "4"}}}
    ]))
    .expect("classes");
    c
}

/// The `--label` values of the runner container's `one-job`.
fn declared_labels(pod: &k8s_openapi::api::core::v1::PodSpec) -> Vec<String> {
    let args = pod.containers[0].args.clone().unwrap_or_default();
    args.windows(2)
        .filter(|w| w[0] == "--label")
        .map(|w| w[1].clone())
        .collect()
}

/// Plays `one-job` of a runner made with `creds`: declares the label names of `labels` and
/// asks for the job of its handle; if `finish`, reports success. Whether Forgejo handed it a
/// task.
async fn take_bound_job(
    fake: &ForgejoFakeHandle,
    creds: &RunnerCredentials,
    labels: &[String],
    finish: bool,
) -> bool {
    let mut rpc = RunnerClient::new(&fake.url()).expect("runner client");
    rpc.uuid = creds.env["FORGEJO_RUNNER_UUID"].clone();
    rpc.token = creds.secret_data[TOKEN_KEY].expose().to_owned();
    let names: Vec<&str> = labels
        .iter()
        .map(|l| l.split(':').next().unwrap_or_default())
        .collect();
    let (s, _) = rpc
        .call("Declare", json!({"labels": names, "version": "12.8.2"}))
        .await
        .expect("Declare");
    assert_eq!(s, 200);
    let (_, v) = rpc
        .call("FetchSingleTask", json!({"handle": creds.env[ENV_JOB_HANDLE]}))
        .await
        .expect("FetchSingleTask");
    let Some(id) = v["task"]["id"].as_i64() else {
        return false;
    };
    if finish {
        let done = json!({"state": {"id": id, "result": "RESULT_SUCCESS"}});
        rpc.call("UpdateTask", done).await.expect("UpdateTask");
    }
    true
}

/// Forgejo 15: the older `[linux, large]` job and the `[linux]` job are both the group's; a
/// `small` runner is bound to the `[linux]` job (the one the class was chosen for), not to the
/// older one it could never take, and a `large` runner to the `[linux, large]` job. Each
/// declares the group's labels and its class's, and gets its job.
#[tokio::test]
async fn v15_binds_each_class_runner_to_a_job_of_its_class() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let large = fake.queue_job("o/r", "big", &["linux", "large"]);
    let small = fake.queue_job("o/r", "tiny", &["linux"]);
    // No runner of the group has `gpu`: not the group's job.
    fake.queue_job("o/r", "gpu", &["linux", "gpu"]);
    let f = forge();
    let c = sized(&fake);
    let mut books = Ledger::default();
    let view = f.open(&c.key).snapshot(&c, &[]).await.unwrap();
    assert_eq!(view.waiting_jobs, 2, "both sized jobs wait for the group");
    let mut labels: Vec<Vec<String>> = view.waiting.iter().map(|j| j.labels.clone()).collect();
    labels.sort();
    assert_eq!(labels, [vec!["linux"], vec!["linux", "large"]]);

    let (small_class, large_class) = (&c.group.spec.classes[0], &c.group.spec.classes[1]);
    let small_creds = register_in_a_pass(&f, &c, &mut books, &[], "sized-aaaaa", Some(small_class)).await;
    assert_eq!(
        small_creds.env.get(ENV_JOB_HANDLE),
        Some(&fake.job(small).unwrap().handle),
        "the small runner is bound to the [linux] job, not the older [linux, large] one"
    );
    let small_pod = default_pod(
        &f,
        &c.group,
        "sized-aaaaa",
        "sized-aaaaa",
        &small_creds,
        Some(small_class),
    );
    let small_labels = declared_labels(&small_pod);
    assert_eq!(small_labels, ["self-hosted:host", "linux:host"]);

    let large_creds = register_in_a_pass(&f, &c, &mut books, &[], "sized-bbbbb", Some(large_class)).await;
    assert_eq!(
        large_creds.env.get(ENV_JOB_HANDLE),
        Some(&fake.job(large).unwrap().handle)
    );
    let large_pod = default_pod(
        &f,
        &c.group,
        "sized-bbbbb",
        "sized-bbbbb",
        &large_creds,
        Some(large_class),
    );
    let large_labels = declared_labels(&large_pod);
    assert_eq!(large_labels, ["self-hosted:host", "linux:host", "large:host"]);

    // Forgejo hands the job of the handle over only to a runner whose labels hold its runs-on.
    assert!(take_bound_job(&fake, &small_creds, &small_labels, false).await);
    assert!(take_bound_job(&fake, &large_creds, &large_labels, false).await);
    assert_eq!(fake.tasks_for_job(small)[0].runner_name, "sized-aaaaa");
    assert_eq!(fake.tasks_for_job(large)[0].runner_name, "sized-bbbbb");
}

/// Forgejo 15: a runner of a class with no free job of its class is left unbound (it takes
/// any job its labels hold), never bound to another class's job; so is one of the group's own
/// when every waiting job wants a class.
#[tokio::test]
async fn v15_never_binds_a_runner_to_another_class_s_job() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    fake.queue_job("o/r", "big", &["linux", "large"]);
    let f = forge();
    let c = sized(&fake);
    let mut books = Ledger::default();
    assert_eq!(f.open(&c.key).snapshot(&c, &[]).await.unwrap().waiting_jobs, 1);
    let small_class = &c.group.spec.classes[0];
    let small = register_in_a_pass(&f, &c, &mut books, &[], "sized-aaaaa", Some(small_class)).await;
    assert_eq!(small.env.get(ENV_JOB_HANDLE), None, "no [linux] job waits");
    let own = register_in_a_pass(&f, &c, &mut books, &[], "sized-bbbbb", None).await;
    assert_eq!(
        own.env.get(ENV_JOB_HANDLE),
        None,
        "no job wants the group's own runners"
    );
}

/// Forgejo 11–14: the group sees the jobs of its classes, and a runner of a class registers
/// with the group's labels and its class's (`register --labels`).
#[tokio::test]
async fn v14_a_class_runner_registers_with_its_class_labels() {
    let fake = fake("14.0.5+gitea-1.22.0").await;
    fake.queue_job("o/r", "big", &["linux", "large"]);
    fake.queue_job("o/r", "tiny", &["linux"]);
    let f = forge();
    let c = sized(&fake);
    assert_eq!(f.open(&c.key).snapshot(&c, &[]).await.unwrap().waiting_jobs, 2);
    let large_class = &c.group.spec.classes[1];
    let creds = f
        .open(&c.key)
        .register(&c, &RunnerRequest::unbound("sized-aaaaa", Some(large_class)))
        .await
        .unwrap();
    let want = "self-hosted:host,linux:host,large:host";
    assert_eq!(creds.env.get(ENV_RUNNER_LABELS).map(String::as_str), Some(want));
    let pod = default_pod(
        &f,
        &c.group,
        "sized-aaaaa",
        "sized-aaaaa",
        &creds,
        Some(large_class),
    );
    let register = &pod.init_containers.as_ref().expect("register step")[0];
    let env = register.env.as_ref().expect("env");
    let labels = env
        .iter()
        .find(|e| e.name == ENV_RUNNER_LABELS)
        .and_then(|e| e.value.as_deref());
    assert_eq!(labels, Some(want));
}

/// Forgejo 15: a job whose bound runner finished after the cached listing was fetched is
/// neither counted nor listed as waiting, so the planner makes no runner of its class for it
/// (a runner of that class would find no free job of its class to be bound to).
#[tokio::test]
async fn v15_a_job_done_since_the_listing_is_not_listed_as_waiting() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let small = fake.queue_job("o/r", "tiny", &["linux"]);
    fake.queue_job("o/r", "big", &["linux", "large"]);
    let f = forge();
    let c = sized(&fake);
    let mut books = Ledger::default();
    assert_eq!(f.open(&c.key).snapshot(&c, &[]).await.unwrap().waiting.len(), 2);
    let small_class = &c.group.spec.classes[0];
    let creds = register_in_a_pass(&f, &c, &mut books, &[], "sized-aaaaa", Some(small_class)).await;
    let labels = vec!["self-hosted:host".to_owned(), "linux:host".to_owned()];
    assert!(take_bound_job(&fake, &creds, &labels, true).await);
    assert!(fake.job(small).is_some_and(|j| j.task_id != 0));
    // The listing is cached for the poll interval: it still shows the small job waiting.
    let refs = [runner_ref(
        "sized-aaaaa",
        RunnerPhase::Succeeded,
        &creds.annotations,
    )];
    let view = common::netted_view(&f, &c, &refs, &mut books).await;
    assert_eq!(view.waiting_jobs, 1);
    let listed: Vec<Vec<String>> = view.waiting.iter().map(|j| j.labels.clone()).collect();
    assert_eq!(listed, [vec!["linux", "large"]], "only the large job waits");
}
