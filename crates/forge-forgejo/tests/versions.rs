//! Runner versions at the fake Forgejo: from 15 on the runner listing tells the version each of
//! the group's runners reported (`ActionRunner.version`, `modules/structs/repo_actions.go`);
//! before 15 there is no listing, so only the image tells a release.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use forgerunner_core::forge::RunnerRequest;

use std::collections::BTreeMap;

use common::{declared, fake, forge, runner_ref, web};
use forgerunner_core::crd::ForgejoScope;
use forgerunner_core::forge::{Forge, GroupContext, RunnerRef};
use forgerunner_core::plan::RunnerPhase;
use forgerunner_core::runner_version::RunnerRelease;
use forgerunner_forgejo::ForgejoForge;
use forgerunner_forgejo::runner_id::RUNNER_ID_ANNOTATION;
use forgerunner_testkit::forgejo::{FakeScope, ForgejoFakeHandle};

/// Creates our runner `name` at Forgejo and, with `version`, has it declare that version over
/// the runner RPC as forgejo-runner does on start. Our reference to it.
async fn runner(
    f: &ForgejoForge,
    fake: &ForgejoFakeHandle,
    c: &GroupContext,
    name: &str,
    version: Option<&str>,
) -> RunnerRef {
    let creds = f
        .open(&c.key)
        .register(c, &RunnerRequest::unbound(name, None))
        .await
        .unwrap();
    let id: i64 = creds.annotations[RUNNER_ID_ANNOTATION].parse().unwrap();
    if let Some(version) = version {
        let row = fake.runner(id).unwrap();
        declared(fake, &row.uuid, &row.token, version).await;
    }
    runner_ref(name, RunnerPhase::Running, &creds.annotations)
}

#[tokio::test]
async fn forgejo_15_reports_the_versions_of_the_groups_runners() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    for name in ["a", "b", "c", "d"] {
        fake.queue_job("o/r", name, &["debian"]);
    }
    let f = forge();
    let mut c = web(&fake, ForgejoScope::Repo, Some("o/r"));
    let refs = [
        runner(&f, &fake, &c, "web-aaaaa", Some("12.8.2")).await,
        runner(&f, &fake, &c, "web-bbbbb", Some("12.8.2")).await,
        runner(&f, &fake, &c, "web-ccccc", Some("v12.9.0")).await,
        // Not started yet: a row made by `POST` has reported no version.
        runner(&f, &fake, &c, "web-ddddd", None).await,
    ];
    // In the same scope but not ours: another group's runner, and a leftover of this group's
    // that the cluster no longer holds.
    let scope = FakeScope::Repo("o".into(), "r".into());
    for (name, version) in [("api-zzzzz", "11.0.0"), ("web-qqqqq", "10.0.0")] {
        let row = fake.add_runner(scope.clone(), name, &["debian"], true);
        assert!(fake.set_runner_version(row.id, version));
    }

    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert_eq!(
        view.versions.reported,
        BTreeMap::from([("12.8.2".to_owned(), 2), ("v12.9.0".to_owned(), 1)])
    );
    assert_eq!(
        view.versions.image,
        Some((
            "code.forgejo.org/forgejo/runner:12.8.2".to_owned(),
            Some(RunnerRelease(12, 8, 2))
        )),
        "the default image"
    );
    assert_eq!(view.versions.served, None, "Forgejo serves no runner release");

    c.group.spec.image = Some("data.forgejo.org/forgejo/runner:11.3.1".into());
    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert_eq!(
        view.versions.image,
        Some((
            "data.forgejo.org/forgejo/runner:11.3.1".to_owned(),
            Some(RunnerRelease(11, 3, 1))
        ))
    );
    assert_eq!(view.versions.reported.values().sum::<u32>(), 3);
}

#[tokio::test]
async fn forgejo_14_reports_no_versions_only_the_image() {
    let fake = fake("14.0.5+gitea-1.22.0").await;
    fake.queue_job("o/r", "a", &["debian"]);
    let f = forge();
    let c = web(&fake, ForgejoScope::Global, None);
    // The runner registered and declared its version, but no API before 15 lists it.
    let row = fake.add_runner(FakeScope::Global, "web-aaaaa", &["debian"], false);
    assert!(fake.set_runner_version(row.id, "12.8.2"));
    let refs = [runner_ref("web-aaaaa", RunnerPhase::Running, &BTreeMap::new())];
    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert!(view.versions.reported.is_empty(), "{:?}", view.versions.reported);
    assert_eq!(
        view.versions.image,
        Some((
            "code.forgejo.org/forgejo/runner:12.8.2".to_owned(),
            Some(RunnerRelease(12, 8, 2))
        ))
    );
    assert_eq!(view.versions.served, None);
}
