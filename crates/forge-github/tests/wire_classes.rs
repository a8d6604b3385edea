//! Wire tests against the scaleset emulator: runner classes (`spec.classes`), each a scale set
//! of its own with its own session; its jobs reported with the class's labels, its runners'
//! JIT configs from its set, its set deleted with the group or the class.

mod common;

use forgerunner_core::forge::RunnerRequest;

use std::collections::BTreeSet;

use common::*;
use forgerunner_core::Forge;
use forgerunner_core::crd::RunnerClass;
use forgerunner_core::forge::GroupContext;
use forgerunner_github::SCALE_SET_ID_ANNOTATION;
use scaleset::ScaleSetId;
use scaleset::testing::{DEFAULT_PAT, Emulator, Endpoint, JobState};

/// Group `sized` (own label `linux`, `maxRunners` 10) with a class `large` (label `large`,
/// `maxRunners` 2).
fn sized(emu: &Emulator, classes: serde_json::Value) -> GroupContext {
    let mut group = group(
        "sized",
        &emu.config_url(),
        serde_json::json!({"labels": ["linux"]}),
        10,
    );
    group.spec.classes = serde_json::from_value(classes).expect("classes");
    context(group, pat_credentials(DEFAULT_PAT))
}

fn large() -> serde_json::Value {
    serde_json::json!([{"name": "large", "labels": ["large"], "maxRunners": 2}])
}

/// The id and labels of the emulator's scale set named `name`.
fn set_named(emu: &Emulator, name: &str) -> Option<(ScaleSetId, Vec<String>)> {
    emu.state().scale_sets.iter().find(|s| s.name == name).map(|s| {
        let labels = s.labels.iter().map(|l| l.name.clone()).collect();
        (s.id, labels)
    })
}

#[tokio::test]
async fn each_class_is_a_scale_set_whose_jobs_and_runners_are_the_classes() {
    let emu = emulator().await;
    let h = harness();
    let ctx = sized(&emu, large());
    let own = ScaleSetId(demand(&h.forge, &ctx).await.facts.scale_set_id.expect("own set"));
    let (class_set, labels) = set_named(&emu, "sized-large").expect("the class's scale set");
    assert_ne!(class_set, own);
    assert_eq!(
        labels,
        ["sized-large", "linux", "large"],
        "the class's set is labelled with its name, the group's labels and the class's"
    );
    // One session per set.
    emu.wait_until(WAIT, |s| s.sessions.len() == 2).await;

    // A job at each set: the class's one is reported with the class's labels, the group's
    // own with none (core gives it one of the group's own runners).
    emu.queue_job(own, Vec::<String>::new());
    emu.queue_job(class_set, ["large"]);
    emu.wait_until(WAIT, |s| {
        s.jobs_in(own, JobState::Assigned).count() == 1
            && s.jobs_in(class_set, JobState::Assigned).count() == 1
    })
    .await;
    let view = eventually(WAIT, "both jobs waiting", || async {
        let v = h.forge.session(&ctx).snapshot(&ctx, &[]).await.ok()?;
        (v.waiting_jobs == 2 && v.waiting.len() == 2).then_some(v)
    })
    .await;
    let labels: BTreeSet<Vec<String>> = view.waiting.iter().map(|w| w.labels.clone()).collect();
    assert_eq!(
        labels,
        BTreeSet::from([Vec::new(), vec!["large".to_owned()]]),
        "{:?}",
        view.waiting
    );
    assert!(view.complete, "both sessions report runner activity");
    // Each listener announces its own capacity: the group's, and the class's maxRunners.
    let capacities: BTreeSet<Option<u32>> = emu
        .requests_to(Endpoint::GetMessage)
        .iter()
        .map(|r| r.max_capacity)
        .collect();
    assert_eq!(capacities, BTreeSet::from([Some(2), Some(10)]));

    // A runner of the class registers in the class's set; one of the group's in its own.
    let class: RunnerClass = ctx.group.spec.classes[0].clone();
    let creds = h
        .forge
        .session(&ctx)
        .register(&ctx, &RunnerRequest::unbound("sized-large-r1", Some(&class)))
        .await
        .expect("JIT config of the class");
    assert_eq!(
        creds.annotations.get(SCALE_SET_ID_ANNOTATION),
        Some(&class_set.0.to_string())
    );
    let plain = h
        .forge
        .session(&ctx)
        .register(&ctx, &RunnerRequest::unbound("sized-r2", None))
        .await
        .expect("JIT config of the group");
    assert_eq!(
        plain.annotations.get(SCALE_SET_ID_ANNOTATION),
        Some(&own.0.to_string())
    );
    let state = emu.state();
    let set_of = |name: &str| {
        state
            .runners
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.scale_set_id)
    };
    assert_eq!(set_of("sized-large-r1"), Some(class_set));
    assert_eq!(set_of("sized-r2"), Some(own));

    // Deleting the group deletes both sets and both sessions.
    h.forge.session(&ctx).delete_group(&ctx).await.expect("shutdown");
    let state = emu.state();
    assert!(state.scale_sets.is_empty(), "{:?}", state.scale_sets);
    assert!(state.sessions.is_empty());
    h.forge.shutdown_all().await;
}

#[tokio::test]
async fn a_class_set_made_by_another_process_is_found_and_deleted_with_the_group() {
    let emu = emulator().await;
    let first = harness();
    let ctx = sized(&emu, large());
    demand(&first.forge, &ctx).await;
    first.forge.shutdown_all().await;
    let (class_set, _) = set_named(&emu, "sized-large").expect("class set");

    // A new process (after a restart) finds the class's set by name rather than making one.
    let second = harness();
    demand(&second.forge, &ctx).await;
    let sets: Vec<_> = emu.state().scale_sets.iter().map(|s| s.id).collect();
    assert_eq!(sets.len(), 2, "{sets:?}");
    assert!(sets.contains(&class_set));
    second.forge.shutdown_all().await;

    // A third one deletes it without ever observing the group.
    let third = harness();
    third
        .forge
        .session(&ctx)
        .delete_group(&ctx)
        .await
        .expect("shutdown");
    assert!(emu.state().scale_sets.is_empty());
}

#[tokio::test]
async fn a_class_removed_from_the_spec_loses_its_scale_set_and_session() {
    let emu = emulator().await;
    let h = harness();
    let ctx = sized(&emu, large());
    demand(&h.forge, &ctx).await;
    emu.wait_until(WAIT, |s| s.sessions.len() == 2).await;
    assert!(set_named(&emu, "sized-large").is_some());

    let without = sized(&emu, serde_json::json!([]));
    demand(&h.forge, &without).await;
    assert!(
        set_named(&emu, "sized-large").is_none(),
        "the removed class's set is deleted"
    );
    emu.wait_until(WAIT, |s| s.sessions.len() == 1).await;
    assert!(set_named(&emu, "sized").is_some(), "the group's own set stays");
    h.forge.shutdown_all().await;
}
