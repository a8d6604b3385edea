//! Wire tests against the scaleset emulator: sessions, long poll, ack, acquire, token and
//! session expiry, faults, JIT configs and runner removal.

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::*;
use forgerunner_core::Forge;
use forgerunner_core::forge::{ForgeRunnerState, RemoveOutcome, RunnerPodRequest, RunnerRef};
use forgerunner_core::plan::RunnerPhase;
use forgerunner_github::{JIT_CONFIG_KEY, RUNNER_ID_ANNOTATION};
use scaleset::testing::{Emulator, Endpoint, Fault, JobState};
use scaleset::{RunnerScaleSetSpec, ScaleSetId};

fn runner_ref(name: &str) -> RunnerRef {
    RunnerRef {
        name: name.into(),
        annotations: Default::default(),
        phase: RunnerPhase::Running,
        stored: true,
        registered_at: None,
        connected_since: None,
    }
}

#[tokio::test]
async fn long_poll_acks_acquires_and_wakes_the_reconciler() {
    let emu = emulator().await;
    let mut h = harness();
    let ctx = pat_context(&emu, "poller");
    let id = ScaleSetId(demand(&h.forge, &ctx).await.facts.scale_set_id.unwrap());
    emu.wait_until(WAIT, |s| s.sessions.len() == 1).await;
    let state = emu.state();
    assert_eq!(state.sessions[0].owner_name, "forgerunner-test");

    let jobs: Vec<_> = (0..3).map(|_| emu.queue_job(id, Vec::<String>::new())).collect();
    // Acquired means assigned in the emulator.
    emu.wait_until(WAIT, |s| s.jobs_in(id, JobState::Assigned).count() == 3)
        .await;
    let d = eventually(WAIT, "3 waiting jobs", || async {
        let d = h.forge.session(&ctx).snapshot(&ctx, &[]).await.ok()?;
        (d.waiting_jobs == 3).then_some(d)
    })
    .await;
    assert!(d.complete, "the message session reports runner activity");
    emu.wait_until(WAIT, |s| s.queues_drained()).await;
    // Woken through the trigger with our key.
    let woken = tokio::time::timeout(WAIT, h.wakes.recv()).await.unwrap().unwrap();
    assert_eq!(woken, ctx.key);
    let polls = emu.requests_to(Endpoint::GetMessage);
    assert!(
        polls.iter().all(|r| r.max_capacity == Some(10)),
        "X-ScaleSetMaxCapacity = maxRunners"
    );
    let acquires = emu.requests_to(Endpoint::AcquireJobs);
    assert!(!acquires.is_empty() && acquires.len() <= 3);
    assert!(
        emu.requests_to(Endpoint::DeleteMessage)
            .iter()
            .all(|r| r.status == 204)
    );
    assert_eq!(jobs.len(), 3);
    h.forge.shutdown_all().await;
    assert!(
        emu.state().sessions.is_empty(),
        "shutdown_all deletes the session"
    );
}

#[tokio::test]
async fn session_conflict_is_retried_until_the_old_session_goes() {
    let emu = emulator().await;
    let client = emu.client();
    let set = client
        .create_runner_scale_set(&RunnerScaleSetSpec::new("busyset"))
        .await
        .unwrap();
    let foreign = client
        .create_message_session(set.id, "someone-else")
        .await
        .unwrap();
    let h = harness();
    let ctx = pat_context(&emu, "busyset");
    // Statistics come from the scale set while the listener waits.
    assert_eq!(
        demand(&h.forge, &ctx).await.facts.scale_set_id,
        Some(set.id.get())
    );
    eventually(WAIT, "a 409 on session create", || async {
        emu.requests_to(Endpoint::Sessions)
            .iter()
            .any(|r| r.status == 409)
            .then_some(())
    })
    .await;
    foreign.close().await.unwrap();
    let state = emu
        .wait_until(WAIT, |s| {
            s.sessions.iter().any(|x| x.owner_name == "forgerunner-test")
        })
        .await;
    assert_eq!(state.sessions.len(), 1);
    h.forge.shutdown_all().await;
}

#[tokio::test]
async fn queue_token_expiry_refreshes_and_session_expiry_reopens() {
    let emu = emulator().await;
    let h = harness();
    let ctx = pat_context(&emu, "tokens");
    let id = ScaleSetId(demand(&h.forge, &ctx).await.facts.scale_set_id.unwrap());
    emu.wait_until(WAIT, |s| s.sessions.len() == 1).await;

    emu.expire_queue_token(id);
    emu.queue_job(id, Vec::<String>::new());
    emu.wait_until(WAIT, |s| s.jobs_in(id, JobState::Assigned).count() == 1)
        .await;
    let refreshes = emu
        .requests_to(Endpoint::Sessions)
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert!(refreshes >= 1, "401 on the queue led to a session refresh");

    let before = emu.state().sessions[0].session_id.clone();
    emu.expire_session(id);
    emu.queue_job(id, Vec::<String>::new());
    let state = emu
        .wait_until(WAIT, |s| s.jobs_in(id, JobState::Assigned).count() == 2)
        .await;
    assert_eq!(state.sessions.len(), 1);
    assert_ne!(state.sessions[0].session_id, before, "a new session was opened");
    h.forge.shutdown_all().await;
}

#[tokio::test]
async fn admin_token_expiry_and_poll_faults_are_survived() {
    let emu = Emulator::builder()
        .long_poll(Duration::from_millis(200))
        .admin_token_ttl(Duration::from_secs(30))
        .start()
        .await;
    let h = harness();
    let ctx = pat_context(&emu, "faults");
    let id = ScaleSetId(demand(&h.forge, &ctx).await.facts.scale_set_id.unwrap());
    emu.wait_until(WAIT, |s| s.sessions.len() == 1).await;
    // A TTL under the refresh margin means every admin call refreshes first.
    let chains = emu.requests_to(Endpoint::AdminConnection).len();
    registered(&h.forge, &ctx, "r-ttl").await;
    assert!(
        emu.requests_to(Endpoint::AdminConnection).len() > chains,
        "token refreshed before exp"
    );

    // Revoked admin tokens: a 401 drops the cache and the call is retried once.
    emu.expire_admin_tokens();
    registered(&h.forge, &ctx, "r-revoked").await;

    emu.inject(Fault::status(Endpoint::GetMessage, 503).times(2));
    emu.inject(Fault::too_many_requests(Endpoint::GetMessage, Some(Duration::from_secs(1))).times(1));
    // The poll in flight is unaffected; the following ones hit the faults and back off.
    eventually(WAIT, "polls answered 503 and 429", || async {
        let statuses: Vec<u16> = emu
            .requests_to(Endpoint::GetMessage)
            .iter()
            .map(|r| r.status)
            .collect();
        (statuses.contains(&503) && statuses.contains(&429)).then_some(())
    })
    .await;
    emu.queue_job(id, Vec::<String>::new());
    emu.wait_until(WAIT, |s| s.jobs_in(id, JobState::Assigned).count() == 1)
        .await;
    h.forge.shutdown_all().await;
}

#[tokio::test]
async fn jit_config_busy_refusal_and_removal() {
    let emu = emulator().await;
    let h = harness();
    let ctx = pat_context(&emu, "runners");
    let id = ScaleSetId(demand(&h.forge, &ctx).await.facts.scale_set_id.unwrap());

    let creds = registered(&h.forge, &ctx, "runners-abcde").await;
    let blob = creds.secret_data.get(JIT_CONFIG_KEY).expect("jitconfig key");
    let decoded: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(blob.expose())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(decoded["runnerName"], "runners-abcde");
    let runner_id = creds
        .annotations
        .get(RUNNER_ID_ANNOTATION)
        .expect("runner id annotation")
        .clone();
    assert!(
        !format!("{creds:?}").contains(blob.expose()),
        "Debug never shows the JIT config"
    );

    // A name collision (e.g. a retry after a crash) replaces the stale registration.
    let again = registered(&h.forge, &ctx, "runners-abcde").await;
    assert_ne!(again.annotations.get(RUNNER_ID_ANNOTATION), Some(&runner_id));
    assert_eq!(
        emu.state()
            .runners
            .iter()
            .filter(|r| r.name == "runners-abcde")
            .count(),
        1
    );

    // No request per runner: a runner with a JIT registration is idle until the messages say
    // otherwise; one without is unknown.
    let ours = RunnerRef {
        name: "runners-abcde".into(),
        annotations: again.annotations.clone(),
        phase: RunnerPhase::Running,
        stored: true,
        registered_at: Some(Instant::now()),
        connected_since: None,
    };
    let states = h
        .forge
        .session(&ctx)
        .snapshot(&ctx, &[ours.clone(), runner_ref("ghost")])
        .await
        .unwrap()
        .runners;
    assert_eq!(states.get("runners-abcde"), Some(&ForgeRunnerState::Idle));
    assert_eq!(states.get("ghost"), None);

    // The runner takes a job: JobStarted marks it busy, removal is refused.
    let job = emu.queue_job(id, Vec::<String>::new());
    emu.wait_until(WAIT, |s| s.jobs_in(id, JobState::Assigned).count() == 1)
        .await;
    emu.start_job(job, Some("runners-abcde"));
    eventually(WAIT, "busy runner in the view", || async {
        let d = h
            .forge
            .session(&ctx)
            .snapshot(&ctx, &[runner_ref("runners-abcde")])
            .await
            .ok()?;
        // A running job is no longer waiting: its runner covers it.
        (d.runners.get("runners-abcde") == Some(&ForgeRunnerState::Busy) && d.waiting_jobs == 0).then_some(())
    })
    .await;
    let states = h
        .forge
        .session(&ctx)
        .snapshot(&ctx, &[runner_ref("runners-abcde")])
        .await
        .unwrap()
        .runners;
    assert_eq!(states.get("runners-abcde"), Some(&ForgeRunnerState::Busy));
    let r = ours;
    assert_eq!(removed(&h.forge, &ctx, &r).await, RemoveOutcome::Busy);
    assert_eq!(emu.state().runners.len(), 1, "never forced");

    // Done: the ephemeral runner is gone; removal is a no-op success.
    emu.complete_job(job, None);
    eventually(WAIT, "busy cleared", || async {
        let d = h
            .forge
            .session(&ctx)
            .snapshot(&ctx, &[runner_ref("runners-abcde")])
            .await
            .ok()?;
        (d.runners.get("runners-abcde") != Some(&ForgeRunnerState::Busy) && d.waiting_jobs == 0).then_some(())
    })
    .await;
    let states = h
        .forge
        .session(&ctx)
        .snapshot(&ctx, std::slice::from_ref(&r))
        .await
        .unwrap()
        .runners;
    assert_eq!(
        states.get("runners-abcde"),
        Some(&ForgeRunnerState::Finished),
        "the completion was seen with the statistics that dropped the job"
    );
    assert_eq!(removed(&h.forge, &ctx, &r).await, RemoveOutcome::Removed);

    // An idle runner is removed at the service.
    let idle = registered(&h.forge, &ctx, "runners-idle").await;
    let idle = RunnerRef {
        annotations: idle.annotations,
        registered_at: Some(Instant::now()),
        connected_since: None,
        ..runner_ref("runners-idle")
    };
    assert_eq!(removed(&h.forge, &ctx, &idle).await, RemoveOutcome::Removed);
    assert!(emu.state().runners.is_empty());
    h.forge.shutdown_all().await;
}

/// M2 of the security review: `DELETE _apis/distributedtask/pools/0/agents/{id}` removes any
/// runner the admin token reaches, and the runner id on a runner's Job is an annotation anyone
/// who may edit Jobs can rewrite. The id removed is the service's own for the runner's name:
/// the JIT config's (`runner`, a `RunnerReference`) for a runner this process registered, else
/// the runner listed under its name (`agents?agentName=`; actions/scaleset `client.go`
/// `GetRunnerByName`, `types.go` `RunnerReference {id, name, runnerScaleSetId}`; the emulator
/// answers the same, scaleset 0.1.0 `testing/state.rs` `runners_named`), and only in the
/// group's scale set. Another scale set's runner survives every attempt; ours still go.
#[tokio::test]
async fn a_runner_id_naming_another_runner_never_deletes_it() {
    let emu = emulator().await;
    let h = harness();
    let ctx = pat_context(&emu, "guard");
    demand(&h.forge, &ctx).await;
    // Another scale set's runner the same token reaches (another group, or ARC's).
    let other = harness();
    let other_ctx = pat_context(&emu, "other");
    demand(&other.forge, &other_ctx).await;
    let victim = registered(&other.forge, &other_ctx, "other-vvvvv").await;
    let victim_id = victim.annotations[RUNNER_ID_ANNOTATION].clone();
    let forged: std::collections::BTreeMap<String, String> =
        [(RUNNER_ID_ANNOTATION.to_string(), victim_id.clone())].into();
    let forged_ref = |name: &str| RunnerRef {
        name: name.into(),
        annotations: forged.clone(),
        phase: RunnerPhase::Pending,
        stored: true,
        registered_at: None,
        connected_since: None,
    };
    let victim_alive = || {
        emu.state()
            .runners
            .iter()
            .any(|r| r.id.to_string() == victim_id && r.name == "other-vvvvv")
    };

    // A stuck runner whose Job names the victim's id; nothing of its name is registered.
    for forge in [&h.forge, &harness().forge] {
        assert_eq!(
            removed(forge, &ctx, &forged_ref("guard-qqqqq")).await,
            RemoveOutcome::Removed
        );
        assert!(victim_alive(), "the victim runner was deleted");
    }
    // A Job named like the victim as well: the victim is in another scale set.
    assert_eq!(
        removed(&h.forge, &ctx, &forged_ref("other-vvvvv")).await,
        RemoveOutcome::Removed
    );
    assert!(victim_alive(), "the victim runner was deleted");

    // Ours with the annotation rewritten: registered by this process, or by the one before a
    // restart (found by its name), each is removed and the victim kept. Core tells a runner its
    // session registered with the ids the registration returned, whatever its Job says.
    let mine = registered(&h.forge, &ctx, "guard-ppppp").await;
    let told = RunnerRef {
        annotations: forged.clone().into_iter().chain(mine.annotations).collect(),
        registered_at: Some(Instant::now()),
        connected_since: None,
        ..forged_ref("guard-ppppp")
    };
    assert_eq!(removed(&h.forge, &ctx, &told).await, RemoveOutcome::Removed);
    registered(&h.forge, &ctx, "guard-rrrrr").await;
    let after = harness();
    demand(&after.forge, &ctx).await;
    assert_eq!(
        removed(&after.forge, &ctx, &forged_ref("guard-rrrrr")).await,
        RemoveOutcome::Removed
    );
    let names: Vec<String> = emu.state().runners.iter().map(|r| r.name.clone()).collect();
    assert_eq!(names, ["other-vvvvv"]);
    for f in [h, other, after] {
        f.forge.shutdown_all().await;
    }
}

#[tokio::test]
async fn default_pod_references_the_secret() {
    let emu = emulator().await;
    let h = harness();
    let ctx = pat_context(&emu, "pod");
    let creds = forgerunner_core::forge::RunnerCredentials {
        secret_data: Default::default(),
        env: Default::default(),
        annotations: Default::default(),
    };
    let spec = h.forge.session(&ctx).runner_pod(&RunnerPodRequest {
        group: &ctx.group,
        runner_name: "pod-abcde",
        secret_name: "pod-abcde",
        credentials: &creds,
        class: None,
    });
    let c = &spec.containers[0];
    assert_eq!(c.name, "runner");
    assert_eq!(c.image.as_deref(), Some(forgerunner_github::DEFAULT_RUNNER_IMAGE));
    assert_eq!(
        c.command.as_deref(),
        Some(&["/home/runner/run.sh".to_string()][..])
    );
    let env = c.env.as_ref().unwrap();
    let jit = env
        .iter()
        .find(|e| e.name == "ACTIONS_RUNNER_INPUT_JITCONFIG")
        .unwrap();
    assert!(jit.value.is_none(), "never inlined");
    let sel = jit.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
    assert_eq!(
        (sel.name.as_str(), sel.key.as_str()),
        ("pod-abcde", JIT_CONFIG_KEY)
    );
}

#[tokio::test]
async fn runners_adopted_after_a_restart_keep_scale_down_off_until_known() {
    let emu = emulator().await;
    // The process before the restart registered a runner and stopped.
    let before = harness();
    let ctx = pat_context(&emu, "adopt");
    let creds = registered(&before.forge, &ctx, "adopt-abcde").await;
    before.forge.shutdown_all().await;
    let adopted = |annotations: &[(&str, &str)], phase: RunnerPhase| RunnerRef {
        name: "adopt-abcde".into(),
        annotations: creds
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .chain(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .collect(),
        phase,
        stored: true,
        registered_at: None,
        connected_since: None,
    };

    let after = harness();
    let complete = |refs: Vec<RunnerRef>| {
        let forge = &after.forge;
        let ctx = &ctx;
        async move {
            eventually(WAIT, "a view from the message session", || async {
                let d = forge.session(ctx).snapshot(ctx, &refs).await.ok()?;
                // The session's statistics arrive with its first message batch.
                d.runners.contains_key("adopt-abcde").then_some(d.complete)
            })
            .await
        }
    };
    demand(&after.forge, &ctx).await;
    emu.wait_until(WAIT, |s| s.sessions.len() == 1).await;
    // Wait for the session's statistics: a view of no runners is complete then.
    eventually(WAIT, "the session's statistics", || async {
        after
            .forge
            .session(&ctx)
            .snapshot(&ctx, &[])
            .await
            .ok()?
            .complete
            .then_some(())
    })
    .await;
    assert!(
        !complete(vec![adopted(&[], RunnerPhase::Running)]).await,
        "shown idle, maybe working: no scale-down"
    );
    assert!(
        complete(vec![adopted(
            &[("forgerunner.dev/busy", "true")],
            RunnerPhase::Running
        )])
        .await,
        "marked busy: the planner never removes it"
    );
    assert!(
        complete(vec![adopted(&[], RunnerPhase::Succeeded)]).await,
        "finished: nothing to remove"
    );
    // A runner this process registered is tracked from its start.
    let mine = registered(&after.forge, &ctx, "adopt-fghij").await;
    let own = RunnerRef {
        name: "adopt-fghij".into(),
        annotations: mine.annotations.clone(),
        phase: RunnerPhase::Running,
        stored: true,
        registered_at: Some(Instant::now()),
        connected_since: None,
    };
    let d = after.forge.session(&ctx).snapshot(&ctx, &[own]).await.unwrap();
    assert!(d.complete, "its own runners keep the view complete");
}

/// An ack that fails (after the client's retries) must not skip the message: the legacy ARC
/// listener advanced `lastMessageId` only after the message was handled (seed
/// `001_*.txt`, `GetRunnerScaleSetMessage`), and scaleset's listener ends the session on any
/// handling error so a new one starts from 0 (`listener/listener.go`, `Run`). Ours keeps the
/// session, so it must ask again for the same message, and acquire the job it offers.
#[tokio::test]
async fn a_message_whose_ack_failed_is_handled_again() {
    let emu = emulator().await;
    let h = harness();
    let ctx = pat_context(&emu, "ack-fails");
    let id = ScaleSetId(demand(&h.forge, &ctx).await.facts.scale_set_id.unwrap());
    emu.wait_until(WAIT, |s| s.sessions.len() == 1).await;
    emu.inject(Fault::status(Endpoint::DeleteMessage, 500).times(8));
    emu.queue_job(id, Vec::<String>::new());
    eventually(WAIT, "the ack to fail for good", || async {
        let acks = emu.requests_to(Endpoint::DeleteMessage);
        (acks.len() >= 8).then_some(())
    })
    .await;
    emu.wait_until(WAIT, |s| s.jobs_in(id, JobState::Assigned).count() == 1)
        .await;
    h.forge.shutdown_all().await;
}

/// Jobs offered by a message that was acked but whose acquire failed are acquired on a later
/// poll: the message is gone, and nothing else would offer them in this session.
#[tokio::test]
async fn jobs_whose_acquire_failed_are_acquired_later() {
    let emu = emulator().await;
    let h = harness();
    let ctx = pat_context(&emu, "acquire-fails");
    let id = ScaleSetId(demand(&h.forge, &ctx).await.facts.scale_set_id.unwrap());
    emu.wait_until(WAIT, |s| s.sessions.len() == 1).await;
    emu.inject(Fault::status(Endpoint::AcquireJobs, 500).times(8));
    emu.queue_job(id, Vec::<String>::new());
    eventually(WAIT, "the acquire to fail for good", || async {
        (emu.requests_to(Endpoint::AcquireJobs).len() >= 8).then_some(())
    })
    .await;
    emu.wait_until(WAIT, |s| s.jobs_in(id, JobState::Assigned).count() == 1)
        .await;
    h.forge.shutdown_all().await;
}

/// A runner created in the last pass that the store does not list yet: core tells it with
/// what its registration returned and as registered here, so its removal deletes the JIT
/// config's runner id with no lookup by name; a runner registered before (adopted) is looked
/// up by its name first.
#[tokio::test]
async fn a_runner_registered_here_is_removed_without_a_lookup() {
    let emu = emulator().await;
    let h = harness();
    let ctx = pat_context(&emu, "fresh");
    demand(&h.forge, &ctx).await;
    let lookups = || {
        emu.requests_to(Endpoint::Runners)
            .iter()
            .filter(|r| r.method == "GET" && r.query.as_deref().is_some_and(|q| q.contains("agentName")))
            .count()
    };
    let creds = registered(&h.forge, &ctx, "fresh-aaaaa").await;
    let before = lookups();
    let fresh = RunnerRef {
        name: "fresh-aaaaa".into(),
        annotations: creds.annotations,
        phase: RunnerPhase::Pending,
        stored: false,
        registered_at: Some(Instant::now()),
        connected_since: None,
    };
    assert_eq!(removed(&h.forge, &ctx, &fresh).await, RemoveOutcome::Removed);
    assert_eq!(lookups(), before, "no lookup by name");
    assert!(emu.state().runners.is_empty(), "removed at the service");

    registered(&h.forge, &ctx, "fresh-bbbbb").await;
    assert_eq!(
        removed(&h.forge, &ctx, &runner_ref("fresh-bbbbb")).await,
        RemoveOutcome::Removed
    );
    assert_eq!(lookups(), before + 1, "an adopted runner is looked up by name");
    assert!(emu.state().runners.is_empty(), "removed at the service");
    h.forge.shutdown_all().await;
}
