//! Wire tests of the delivery watch: a message session that stays open but stops delivering
//! while a job waits is given up and a new one opened, which takes the job; a group at capacity,
//! where the service holds jobs back on purpose, keeps its session. The scaleset emulator serves
//! the service behind a testkit front that adds what it lacks: the `acquirablejobs` listing and
//! sessions that go silent.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::service::{SCALE_SET, Script};
use common::stub::StubReply;
use common::{WAIT, eventually, fast_options, listener};
use forgerunner_github::client::GithubClient;
use forgerunner_github::listener::Listener;
use forgerunner_testkit::github::actions_front::ActionsFront;
use scaleset::testing::{DEFAULT_PAT, Emulator, Endpoint, JobState};
use scaleset::{RunnerScaleSetSpec, ScaleSetId};

/// The watch's interval here: short, so a stuck job is noticed within a second.
const EVERY: Duration = Duration::from_millis(200);

/// A listener with the test's watch interval.
fn spawn_listener(client: Arc<GithubClient>, scale_set_id: i64, capacity: u32) -> Listener {
    listener::spawn(client, scale_set_id, capacity, EVERY)
}

/// A client of the service at `config_url` with the emulator's PAT.
fn client(config_url: &str) -> Arc<GithubClient> {
    listener::client(config_url, DEFAULT_PAT, fast_options().http)
}

struct World {
    emu: Arc<Emulator>,
    front: ActionsFront,
    set: ScaleSetId,
    listener: Listener,
}

impl World {
    /// A listener announcing `capacity` on a new scale set, its session open.
    async fn start(capacity: u32) -> World {
        let emu = Arc::new(common::emulator().await);
        let front = ActionsFront::in_front_of(emu.clone())
            .await
            .expect("front starts");
        let set = emu
            .client()
            .create_runner_scale_set(&RunnerScaleSetSpec::new("silent"))
            .await
            .expect("scale set")
            .id;
        let listener = spawn_listener(client(&front.config_url()), set.get(), capacity);
        emu.wait_until(WAIT, |s| s.sessions.len() == 1).await;
        World {
            emu,
            front,
            set,
            listener,
        }
    }

    /// Makes every session go silent, and waits until a poll was answered silently: the poll
    /// that was in flight has ended, so no message reaches the listener from now on.
    async fn silence(&self) {
        self.front.set_delivering(false);
        let before = self.front.silenced_polls();
        eventually(WAIT, "a silenced poll", || async {
            (self.front.silenced_polls() > before).then_some(())
        })
        .await;
    }

    fn session_calls(&self, method: &str) -> usize {
        self.emu
            .requests_to(Endpoint::Sessions)
            .iter()
            .filter(|r| r.method == method)
            .count()
    }

    fn reopened(&self) -> u64 {
        self.listener.state().sessions_reopened_undelivered
    }
}

/// The failure ARC users meet (actions-runner-controller #4027, #4423, #4470: jobs queued until
/// the listener is restarted): the session stays open, its polls answer empty, a job waits. Two
/// checks an interval apart list it, the session is deleted and a new one opened, and the job
/// is acquired although the new session delivers nothing either.
#[tokio::test]
async fn a_silent_session_is_reopened_and_its_waiting_job_acquired() {
    let w = World::start(10).await;
    let first = w.emu.state().sessions[0].session_id.clone();
    w.silence().await;
    let job = w.emu.queue_job(w.set, Vec::<String>::new());
    let state = w
        .emu
        .wait_until(WAIT, |s| {
            s.jobs_in(w.set, JobState::Assigned).any(|j| j.id == job)
        })
        .await;
    assert_eq!(state.sessions.len(), 1);
    assert_ne!(state.sessions[0].session_id, first, "a new session was opened");
    assert_eq!(w.session_calls("POST"), 2, "one session created anew");
    assert_eq!(w.session_calls("DELETE"), 1, "the silent one deleted");
    assert_eq!(w.reopened(), 1);
    assert!(w.front.listings() >= 2, "two checks listed the job");
    // With the job taken, further checks find nothing waiting: no more reopening.
    let listed = w.front.listings();
    eventually(WAIT, "three more checks", || async {
        (w.front.listings() >= listed + 3).then_some(())
    })
    .await;
    assert_eq!(w.reopened(), 1);
    assert_eq!(w.session_calls("POST"), 2);
    w.listener.stop().await;
}

/// At capacity the service holds jobs back on purpose: a waiting job then says nothing about
/// the session, which is neither checked nor given up. Once the group has room again, the same
/// silent session is noticed (the watch was live; the capacity held it).
#[tokio::test]
async fn a_saturated_group_keeps_its_silent_session() {
    let w = World::start(1).await;
    let busy = w.emu.queue_job(w.set, Vec::<String>::new());
    w.emu
        .wait_until(WAIT, |s| {
            s.jobs_in(w.set, JobState::Assigned).any(|j| j.id == busy)
        })
        .await;
    eventually(WAIT, "statistics counting the assigned job", || async {
        let stats = w.listener.state().statistics?;
        (stats.total_assigned_jobs == 1).then_some(())
    })
    .await;
    let listed = w.front.listings();
    w.silence().await;
    let waiting = w.emu.queue_job(w.set, Vec::<String>::new());
    // Each silenced poll is held `SILENT_HOLD`: this many span at least four intervals.
    let polls = w.front.silenced_polls();
    let four_intervals = (4 * EVERY)
        .as_millis()
        .div_ceil(forgerunner_testkit::github::actions_front::SILENT_HOLD.as_millis());
    let four_intervals = usize::try_from(four_intervals).expect("small");
    eventually(WAIT, "polls spanning four intervals", || async {
        (w.front.silenced_polls() >= polls + four_intervals).then_some(())
    })
    .await;
    assert_eq!(w.front.listings(), listed, "no check while saturated");
    assert_eq!(w.reopened(), 0);
    assert_eq!(w.session_calls("POST"), 1, "the session was kept");
    assert!(
        w.emu
            .state()
            .jobs_in(w.set, JobState::Available)
            .any(|j| j.id == waiting)
    );

    w.listener.set_max_capacity(2);
    w.emu
        .wait_until(WAIT, |s| {
            s.jobs_in(w.set, JobState::Assigned).any(|j| j.id == waiting)
        })
        .await;
    assert_eq!(w.reopened(), 1);
    assert_eq!(w.session_calls("POST"), 2);
    w.listener.stop().await;
}

/// The next session acquires the jobs the silent one left waiting even when its statistics
/// count none available, so that listing them at session open is skipped: the ids the checks
/// listed are carried over. A scripted service: sessions report no available job, the listing
/// always names job 11, polls answer empty.
#[tokio::test]
async fn the_next_session_acquires_the_jobs_left_waiting_though_its_statistics_count_none() {
    let stub = Script {
        available: 0,
        // `AcquirableJobList` of ARC's former client (`github/actions/types.go`).
        acquirable: StubReply::json(
            200,
            r#"{"count":1,"value":[{"messageType":"JobAvailable","runnerRequestId":11,"requestLabels":["silent"]}]}"#,
        ),
        poll_hold: Duration::from_millis(50),
    }
    .start()
    .await;
    let listener = spawn_listener(client(&format!("{}/acme", stub.uri())), SCALE_SET, 10);
    let acquire = eventually(WAIT, "an acquire", || async {
        stub.requests_to("POST", "/acquirejobs").into_iter().next()
    })
    .await;
    let ids: Vec<i64> = serde_json::from_slice(&acquire.body).expect("a JSON array of ids");
    assert_eq!(ids, vec![11]);
    let order: Vec<String> = stub
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path()))
        .collect();
    let at = |what: &str, nth: usize| {
        order
            .iter()
            .enumerate()
            .filter(|(_, r)| r.ends_with(what))
            .nth(nth)
            .map(|(i, _)| i)
    };
    let (Some(deleted), Some(reopened), Some(acquired)) = (
        at("DELETE /tenant/_apis/runtime/runnerscalesets/7/sessions/s-1", 0),
        at("POST /tenant/_apis/runtime/runnerscalesets/7/sessions", 1),
        at("/acquirejobs", 0),
    ) else {
        panic!("no delete, reopen or acquire: {order:?}");
    };
    assert!(deleted < reopened && reopened < acquired, "{order:?}");
    let listings_before = order[..acquired]
        .iter()
        .filter(|r| r.ends_with("/acquirablejobs"))
        .count();
    assert_eq!(listings_before, 2, "two checks, no listing at open: {order:?}");
    assert!(listener.state().sessions_reopened_undelivered >= 1);
    listener.stop().await;
}
