//! The three forge fakes through [`FakeForgeServer`]: jobs and runners land in the pool of
//! their labels (GitHub: of their scale set), phases read the same at every forge, and the
//! request counters and faults reach what the operator would call.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

use std::time::Duration;

use forgerunner_core::crd::ForgeKind;
use forgerunner_testkit::forge_common::{FakeForgeServer, JobPhase, PoolJob, PoolRunner};
use forgerunner_testkit::github::{EmulatorOptions, start_emulator};
use scaleset::{JitRunnerSetting, JobRequestId, RunnerScaleSetSpec};

const REPO: &str = "acme/app";

fn job(fake: &dyn FakeForgeServer, id: i64) -> PoolJob {
    fake.jobs().into_iter().find(|j| j.id == id).expect("job listed")
}

#[tokio::test]
async fn github_pools_are_scale_sets_by_name() {
    let github = start_emulator(EmulatorOptions {
        long_poll: Duration::from_millis(100),
        ..EmulatorOptions::default()
    })
    .await;
    let fake: &dyn FakeForgeServer = &github;
    assert_eq!(fake.kind(), ForgeKind::Github);
    assert_eq!(fake.url(), github.config_url());
    assert!(fake.credentials().contains_key("github_token"));
    assert_eq!(fake.queue_job(REPO, &["burst"]), None, "no scale set yet");

    let client = github.emu.client();
    let set = client
        .create_runner_scale_set(&RunnerScaleSetSpec::new("burst"))
        .await
        .unwrap();
    client
        .generate_jit_config(set.id, &JitRunnerSetting::new("r1"))
        .await
        .unwrap();
    let id = fake.queue_job(REPO, &["burst"]).expect("queued on the scale set");
    assert_eq!(
        job(fake, id),
        PoolJob {
            id,
            pool: vec!["burst".to_owned()],
            phase: JobPhase::Queued,
            runner: None,
        }
    );

    let session = client.create_message_session(set.id, "t").await.unwrap();
    session.acquire_jobs(&[JobRequestId(id)]).await.unwrap();
    let runner = github.emu.start_job(JobRequestId(id), Some("r1"));
    assert_eq!(job(fake, id).phase, JobPhase::Running);
    assert_eq!(job(fake, id).runner, Some(runner.get()));
    assert_eq!(
        fake.runners(),
        vec![PoolRunner {
            name: "r1".to_owned(),
            pool: vec!["burst".to_owned()],
            job: Some(id),
        }]
    );
    assert_eq!(fake.busy_runners(), vec![("r1".to_owned(), id)]);
    assert!(fake.registers_without_runner_jobs());

    github.emu.complete_job(JobRequestId(id), Some("failed"));
    assert_eq!(job(fake, id).phase, JobPhase::Failed);
    let ok = fake.queue_job(REPO, &["burst"]).unwrap();
    session.acquire_jobs(&[JobRequestId(ok)]).await.unwrap();
    client
        .generate_jit_config(set.id, &JitRunnerSetting::new("r2"))
        .await
        .unwrap();
    github.emu.start_job(JobRequestId(ok), Some("r2"));
    github.emu.complete_job(JobRequestId(ok), None);
    assert_eq!(job(fake, ok).phase, JobPhase::Succeeded);
    assert!(fake.operator_requests() > 0, "the client's calls are counted");
    assert!(fake.inject_faults("burst").is_some());
    assert_eq!(fake.inject_faults("no-such-set"), None);
}

#[tokio::test]
async fn gitea_pools_are_runs_on_labels_and_faults_hit_the_job_list() {
    use forgerunner_testkit::gitea::{FakeConfig, FakeScope, GiteaFakeHandle};
    let gitea = GiteaFakeHandle::start(FakeConfig::default()).await.unwrap();
    gitea.add_org("acme", &["gitea_admin"]);
    gitea.add_repo(REPO);
    let fake: &dyn FakeForgeServer = &gitea;
    assert_eq!(fake.kind(), ForgeKind::Gitea);
    let id = fake.queue_job(REPO, &["linux", "large"]).unwrap();
    assert_eq!(job(fake, id).pool, vec!["linux".to_owned(), "large".to_owned()]);
    assert_eq!(job(fake, id).phase, JobPhase::Queued);

    let runner = gitea.add_runner(FakeScope::Owner("acme".into()), "r1", &["linux", "large"], true);
    assert_eq!(gitea.take_job(runner), Some(id));
    assert_eq!(fake.busy_runners(), vec![("r1".to_owned(), id)]);
    assert!(gitea.complete_job(id));
    assert_eq!(job(fake, id).phase, JobPhase::Succeeded);
    assert!(!fake.unlabelled_runners_match());

    let token = &fake.credentials()["token"];
    let http = reqwest::Client::new();
    let list = format!("{}/api/v1/admin/actions/jobs", fake.url());
    let ok = http.get(&list).bearer_auth(token).send().await.unwrap();
    assert_eq!(ok.status(), 200, "the credentials are the admin's");
    assert!(fake.inject_faults("linux").is_some());
    let refused = http.get(&list).bearer_auth(token).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(fake.job_list_requests(), 2);
    assert_eq!(fake.operator_requests(), 2);
}

#[tokio::test]
async fn forgejo_counts_unlabelled_runner_rows_and_runs_by_task() {
    use forgerunner_testkit::forgejo::{FakeConfig, FakeScope, ForgejoFakeHandle};
    let forgejo = ForgejoFakeHandle::start(FakeConfig::version("15.0.3+gitea-1.22.0"))
        .await
        .unwrap();
    forgejo.add_org("acme", &[forgerunner_testkit::forgejo::ADMIN_LOGIN]);
    forgejo.add_repo(REPO);
    let fake: &dyn FakeForgeServer = &forgejo;
    assert_eq!(fake.kind(), ForgeKind::Forgejo);
    let id = fake.queue_job(REPO, &["linux"]).unwrap();
    assert_eq!(job(fake, id).pool, vec!["linux".to_owned()]);
    assert!(forgejo.cancel_job(id));
    assert_eq!(job(fake, id).phase, JobPhase::Failed);

    forgejo.add_runner(FakeScope::Owner("acme".into()), "row", &[], true);
    assert_eq!(fake.runners()[0].pool, Vec::<String>::new());
    assert!(fake.unlabelled_runners_match());
    assert_eq!(fake.ran_twice(&fake.jobs()), 0, "no task ran");

    let token = &fake.credentials()["token"];
    let http = reqwest::Client::new();
    assert!(fake.inject_faults("linux").is_some());
    let list = format!("{}/api/v1/admin/runners/jobs?labels=linux", fake.url());
    let refused = http.get(&list).bearer_auth(token).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(fake.job_list_requests(), 1);
}
