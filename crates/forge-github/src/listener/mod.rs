//! The in-process listener: one tokio task per GitHub RunnerGroup that holds the scale set's
//! message session, long-polls it, acks every message, acquires available jobs and publishes
//! the latest statistics for `Forge::demand`, waking the reconciler after every poll.

pub mod activity;
pub mod delivery;
pub mod message;
pub mod poll;
pub mod session;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use forgerunner_core::Fence;
use forgerunner_core::forge::{GroupKey, ReconcileTrigger};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::activity::RunnerActivity;
use self::delivery::DeliveryWatch;
use self::message::{JobMessage, Message};
use self::session::Session;
use crate::backoff::Backoff;
use crate::client::GithubClient;
use crate::error::ApiError;
use crate::scale_set;
use crate::types::Statistics;

/// Settings of one listener.
#[derive(Clone, Debug)]
pub struct ListenerConfig {
    /// The group whose reconcile is woken.
    pub key: GroupKey,
    /// The scale set to listen on.
    pub scale_set_id: i64,
    /// Session owner name (pod name or hostname).
    pub owner: String,
    /// Backoff after errors.
    pub backoff: Backoff,
    /// Backoff while another session holds the scale set (409).
    pub conflict_backoff: Backoff,
    /// How long shutdown waits for the session delete.
    pub shutdown_timeout: Duration,
    /// The leader's fence: once it lapses the listener takes no more jobs, deletes its session
    /// (releasing our own claim is always allowed) and ends.
    pub fence: Fence,
    /// How long a session may deliver nothing before the listener checks whether jobs wait
    /// for it all the same ([`delivery::DEFAULT_EVERY`] in production).
    pub delivery_check: Duration,
}

/// What the listener has learned, read by `Forge::demand`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListenerState {
    /// Latest statistics (from the session or the last message).
    pub statistics: Option<Statistics>,
    /// Runner activity as of the same message as `statistics`, so the two always agree (a
    /// runner seen finished whose job the statistics still count would be made twice).
    /// Shared: a reader's copy costs nothing, a message copies it only while one is held.
    pub runners: Arc<RunnerActivity>,
    /// The scale set no longer exists at the service; it must be recreated.
    pub scale_set_gone: bool,
    /// The last error, cleared by the next successful poll.
    pub last_error: Option<String>,
    /// Polls answered (messages or empty); for tests and diagnostics.
    pub polls: u64,
    /// Sessions given up and opened anew because jobs waited while they delivered nothing.
    pub sessions_reopened_undelivered: u64,
}

/// State shared between the task and the backend.
#[derive(Debug, Default)]
struct Shared {
    max_capacity: AtomicU32,
    state: Mutex<ListenerState>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ListenerState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A running listener task.
#[derive(Debug)]
pub struct Listener {
    scale_set_id: i64,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Listener {
    /// Starts listening; `max_capacity` is sent as `X-ScaleSetMaxCapacity`.
    pub fn spawn(
        client: Arc<GithubClient>,
        trigger: ReconcileTrigger,
        config: ListenerConfig,
        max_capacity: u32,
    ) -> Listener {
        let shared = Arc::new(Shared {
            max_capacity: AtomicU32::new(max_capacity),
            state: Mutex::default(),
        });
        let cancel = CancellationToken::new();
        let scale_set_id = config.scale_set_id;
        // The listener outlives any one reconcile: its own span names the group and forge.
        let span = tracing::info_span!(
            "listener",
            group = %config.key,
            forge = "github",
            scale_set_id
        );
        let task = Task {
            client,
            trigger,
            config,
            shared: shared.clone(),
            cancel: cancel.clone(),
        };
        // `run` borrows the task, so the spawned future holds it once rather than twice.
        let task = tokio::spawn(tracing::Instrument::instrument(
            async move { task.run().await },
            span,
        ));
        Listener {
            scale_set_id,
            shared,
            cancel,
            task,
        }
    }

    /// The scale set this listener serves.
    pub fn scale_set_id(&self) -> i64 {
        self.scale_set_id
    }

    /// A copy of what the listener knows.
    pub fn state(&self) -> ListenerState {
        self.shared.lock().clone()
    }

    /// Whether the task has ended (scale set gone, or it was stopped).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Updates the capacity announced on the next poll.
    pub fn set_max_capacity(&self, n: u32) {
        self.shared.max_capacity.store(n, Ordering::Relaxed);
    }

    /// Stops the task and waits for it to delete its session (bounded by the shutdown timeout).
    pub async fn stop(self) {
        self.cancel.cancel();
        let _ = self.task.await;
    }

    /// Like [`Listener::stop`], but waits at most `limit` and then aborts the task: a message
    /// being handled is not cancellable, and against a forge that drops traffic it could hold
    /// up the release of a deleted group for minutes.
    pub async fn stop_within(mut self, limit: Duration) {
        self.cancel.cancel();
        if tokio::time::timeout(limit, &mut self.task).await.is_err() {
            self.task.abort();
            tracing::warn!(
                scale_set_id = self.scale_set_id,
                "GitHub listener did not stop in time; aborted"
            );
        }
    }
}

struct Task {
    client: Arc<GithubClient>,
    trigger: ReconcileTrigger,
    config: ListenerConfig,
    shared: Arc<Shared>,
    cancel: CancellationToken,
}

/// Why the poll loop of one session ended.
enum SessionEnd {
    /// Shutdown requested.
    Cancelled,
    /// The service dropped the session; open a new one.
    Lost,
    /// The session delivered nothing while these jobs waited for the scale set: open a new one
    /// and acquire them there.
    Undelivered(Vec<i64>),
}

/// What handling one message did: whether it was acked, and the first error.
struct Handled {
    acked: bool,
    result: Result<(), ApiError>,
}

impl Task {
    fn wake(&self) {
        self.trigger.wake(self.config.key.clone());
    }

    /// True once the leader's fence lapsed: from then on this listener only winds down.
    fn fenced(&self) -> bool {
        let fenced = !self.config.fence.is_held();
        if fenced {
            tracing::info!(group = %self.config.key, "not leading any more; the GitHub listener stops");
        }
        fenced
    }

    fn record_error(&self, e: &ApiError) {
        tracing::warn!(group = %self.config.key, error = %e, "GitHub listener error");
        self.shared.lock().last_error = Some(e.to_string());
    }

    /// Sleeps `d` unless cancelled first; returns false when cancelled.
    async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            () = self.cancel.cancelled() => false,
            () = tokio::time::sleep(d) => true,
        }
    }

    async fn run(&self) {
        let mut attempt = 0u32;
        // Jobs a silent session left waiting, acquired by the next session even when its
        // statistics do not count them (in ARC #4027 jobs stayed queued for hours while the
        // scale set's statistics showed none available).
        let mut carried: Vec<i64> = Vec::new();
        loop {
            if self.cancel.is_cancelled() || self.fenced() {
                return;
            }
            // A block, so that the answer is gone before the session is polled: a listener
            // task is as large as what it holds at its largest await, and one runs per group.
            let mut session = {
                let created = tokio::select! {
                    () = self.cancel.cancelled() => return,
                    () = self.config.fence.lapsed() => return,
                    // Boxed here and below; only the long poll's await is kept inline.
                    r = Box::pin(session::create(
                        &self.client,
                        self.config.scale_set_id,
                        &self.config.owner,
                    )) => r,
                };
                match created {
                    Ok(s) => s,
                    Err(e) if e.status() == Some(404) => {
                        tracing::warn!(group = %self.config.key, scale_set_id = self.config.scale_set_id, "scale set is gone at the service");
                        self.shared.lock().scale_set_gone = true;
                        self.wake();
                        return;
                    }
                    Err(e) => {
                        self.record_error(&e);
                        let wait = if e.status() == Some(409) {
                            self.config.conflict_backoff.delay(attempt)
                        } else {
                            self.config
                                .backoff
                                .delay_with_retry_after(attempt, e.retry_after())
                        };
                        attempt = attempt.saturating_add(1);
                        if !self.pause(wait).await {
                            return;
                        }
                        continue;
                    }
                }
            };
            attempt = 0;
            tracing::info!(group = %self.config.key, scale_set_id = self.config.scale_set_id, "GitHub message session open");
            {
                let mut st = self.shared.lock();
                if session.statistics.is_some() {
                    st.statistics = session.statistics;
                }
                st.last_error = None;
            }
            self.wake();
            match self
                .poll_session(&mut session, std::mem::take(&mut carried))
                .await
            {
                SessionEnd::Cancelled => {
                    if !self.delete_session(&session).await {
                        tracing::warn!(group = %self.config.key, "could not delete the GitHub message session on shutdown");
                    }
                    return;
                }
                end @ (SessionEnd::Lost | SessionEnd::Undelivered(_)) => {
                    if let SessionEnd::Undelivered(ids) = end {
                        carried = ids;
                    } else {
                        tracing::info!(group = %self.config.key, "GitHub message session lost; opening a new one");
                    }
                    // Its statistics say nothing about what happens from now on, and the jobs it
                    // showed waiting may start or end unseen.
                    {
                        let mut st = self.shared.lock();
                        st.statistics = None;
                        Arc::make_mut(&mut st.runners).forget_waiting();
                    }
                    // The 404 may come from the broker while the service still holds the
                    // session; a new one would then meet our own 409 until it expires.
                    if !self.delete_session(&session).await {
                        tracing::debug!(group = %self.config.key, "the lost GitHub session could not be deleted (likely gone already)");
                    }
                }
            }
        }
    }

    /// Deletes `session` at the service, waiting at most the shutdown timeout; whether it went.
    async fn delete_session(&self, session: &Session) -> bool {
        let deleted = tokio::time::timeout(
            self.config.shutdown_timeout,
            Box::pin(session::delete(&self.client, session)),
        )
        .await;
        matches!(deleted, Ok(Ok(())))
    }

    /// Polls `session` until it ends; `carried` are jobs the previous session left waiting.
    async fn poll_session(&self, session: &mut Session, carried: Vec<i64>) -> SessionEnd {
        let mut last_id = 0i64;
        let mut attempt = 0u32;
        // Jobs offered by an acked message whose acquire failed: retried after every poll
        // until the service takes them (the message that offered them is gone). Seeded with
        // the jobs that were available before this session opened.
        let mut unacquired = tokio::select! {
            () = self.cancel.cancelled() => return SessionEnd::Cancelled,
            () = self.config.fence.lapsed() => return SessionEnd::Cancelled,
            ids = Box::pin(self.acquirable(session)) => ids,
        };
        for id in carried {
            if !unacquired.contains(&id) {
                unacquired.push(id);
            }
        }
        let mut watch = DeliveryWatch::new(self.config.delivery_check, Instant::now());
        if let Err(e) = Box::pin(self.acquire(session, &mut unacquired)).await {
            // Kept in `unacquired`: tried again after the first poll.
            tracing::warn!(group = %self.config.key, error = %e, "could not acquire the jobs available before the session opened");
        }
        loop {
            let capacity = self.shared.max_capacity.load(Ordering::Relaxed);
            let polled = tokio::select! {
                () = self.cancel.cancelled() => return SessionEnd::Cancelled,
                () = self.config.fence.lapsed() => return SessionEnd::Cancelled,
                r = poll::get_message(&self.client, session, last_id, capacity) => r,
            };
            let delivered = matches!(polled, Ok(Some(_)));
            if delivered {
                watch.delivered(Instant::now());
            }
            let result = match polled {
                Ok(None) => {
                    let mut st = self.shared.lock();
                    st.polls += 1;
                    st.last_error = None;
                    Ok(())
                }
                // Unacked, the message goes to the next session: the new leader's.
                Ok(Some(_)) if self.fenced() => return SessionEnd::Cancelled,
                Ok(Some(msg)) => {
                    let id = msg.id;
                    // Not cancellable: a shutdown must not leave a message half handled.
                    let handled = Box::pin(self.handle(session, msg, &mut unacquired)).await;
                    // Past a message only once it is acked: an ack that failed leaves it with
                    // the service, and the next poll (same `lastMessageId`) gets it again.
                    if handled.acked {
                        last_id = id;
                    }
                    handled.result
                }
                Err(e) => Err(e),
            };
            let result = match result {
                Ok(()) => Box::pin(self.acquire(session, &mut unacquired)).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => {
                    attempt = 0;
                    self.wake();
                    if !delivered
                        && let Some(waiting) = Box::pin(self.undelivered(&mut watch, capacity)).await
                    {
                        return SessionEnd::Undelivered(waiting);
                    }
                }
                Err(e) if e.status() == Some(401) => {
                    match Box::pin(session::refresh(&self.client, session)).await {
                        Ok(s) => *session = s,
                        Err(e) if e.status() == Some(404) => return SessionEnd::Lost,
                        Err(e) => {
                            if !self.back_off(&e, &mut attempt).await {
                                return SessionEnd::Cancelled;
                            }
                        }
                    }
                }
                Err(e) if e.status() == Some(404) => return SessionEnd::Lost,
                Err(e) => {
                    if !self.back_off(&e, &mut attempt).await {
                        return SessionEnd::Cancelled;
                    }
                }
            }
        }
    }

    /// Records a failed poll and waits out the backoff (honouring Retry-After); false when
    /// the listener was cancelled meanwhile.
    async fn back_off(&self, e: &ApiError, attempt: &mut u32) -> bool {
        self.record_error(e);
        let delay = self
            .config
            .backoff
            .delay_with_retry_after(*attempt, e.retry_after());
        *attempt = attempt.saturating_add(1);
        self.pause(delay).await
    }

    /// Records statistics and busy runners, acks, and adds the jobs the message offers to
    /// `unacquired` once it is acked (the caller acquires them).
    async fn handle(&self, session: &mut Session, msg: Message, unacquired: &mut Vec<i64>) -> Handled {
        {
            let mut st = self.shared.lock();
            st.polls += 1;
            st.last_error = None;
            if msg.statistics.is_some() {
                st.statistics = msg.statistics;
            }
            let runners = Arc::make_mut(&mut st.runners);
            let now = Instant::now();
            for job in &msg.jobs {
                runners.track_request(job);
                match job {
                    JobMessage::Started {
                        runner_name,
                        identity,
                        ..
                    } if !runner_name.is_empty() => {
                        // Counted by the reconciler, like on every forge, once it sees the runner busy.
                        runners.started(runner_name, identity.clone());
                    }
                    JobMessage::Completed { runner_name, .. } if !runner_name.is_empty() => {
                        runners.completed(runner_name, now);
                    }
                    _ => {}
                }
            }
        }
        let acked = self
            .with_queue_token(session, |s| {
                let client = self.client.clone();
                let s = s.clone();
                async move { poll::delete_message(&client, &s, msg.id).await }
            })
            .await;
        match acked {
            Ok(()) => {
                for id in msg.available_ids() {
                    if !unacquired.contains(&id) {
                        unacquired.push(id);
                    }
                }
                Handled {
                    acked: true,
                    result: Ok(()),
                }
            }
            Err(e) => Handled {
                acked: false,
                result: Err(e),
            },
        }
    }

    /// The jobs that were available before this session opened, when its statistics count any.
    /// The message stream offers a job (`JobAvailable`) to the session open at the time, and
    /// nothing public shows it offered again to a later one: a job queued while no session was
    /// open (operator down, leader change, a 409 window), or offered to a session that ended
    /// before acquiring it, could otherwise wait for good. ARC's
    /// former listener asked for them on session open (`cmd/githubrunnerscalesetlistener/
    /// autoScalerMessageListener.go`, `CreateSession`, calling `GetAcquirableJobs` of
    /// `github/actions/client.go`); today's ARC and scaleset do not (ARC issue #4027). A failure
    /// is logged and costs only those jobs: the session goes on.
    async fn acquirable(&self, session: &Session) -> Vec<i64> {
        let available = session.statistics.map_or(0, |s| s.total_available_jobs);
        if available == 0 {
            return Vec::new();
        }
        match scale_set::acquirable_jobs(&self.client, self.config.scale_set_id).await {
            Ok(ids) => {
                tracing::info!(group = %self.config.key, available, acquirable = ids.len(), "jobs available before the session opened");
                ids
            }
            Err(e) => {
                tracing::warn!(group = %self.config.key, error = %e, "could not list the jobs available before the session opened");
                Vec::new()
            }
        }
    }

    /// When the watch is due and the group has room, lists the jobs the scale set could acquire;
    /// `Some` of them when one of them already waited at the previous check, i.e. the session
    /// let it wait a whole interval without a message. At most one listing per interval, and
    /// none while messages arrive or the group is at capacity. A failed listing only skips the
    /// check: the session may be fine, and the next check comes an interval later.
    async fn undelivered(&self, watch: &mut DeliveryWatch, capacity: u32) -> Option<Vec<i64>> {
        let now = Instant::now();
        if !watch.due(now) {
            return None;
        }
        let statistics = self.shared.lock().statistics;
        if !delivery::has_room(capacity, statistics.as_ref()) || !self.config.fence.is_held() {
            watch.skip(now);
            return None;
        }
        let listed = tokio::select! {
            () = self.cancel.cancelled() => return None,
            r = scale_set::acquirable_jobs(&self.client, self.config.scale_set_id) => r,
        };
        let ids = match listed {
            Ok(ids) => ids,
            Err(e) => {
                tracing::debug!(group = %self.config.key, error = %e, "could not list the acquirable jobs; delivery check skipped");
                watch.skip(Instant::now());
                return None;
            }
        };
        if !watch.check(&ids, Instant::now()) {
            return None;
        }
        tracing::warn!(
            group = %self.config.key,
            scale_set_id = self.config.scale_set_id,
            waiting = ids.len(),
            jobs = ?&ids[..ids.len().min(20)],
            every = ?self.config.delivery_check,
            "GitHub message session delivers nothing while jobs wait; opening a new one"
        );
        self.shared.lock().sessions_reopened_undelivered += 1;
        Some(ids)
    }

    /// Acquires the offered jobs not acquired yet; on failure they stay in `unacquired` for
    /// the next poll. A fenced (former) leader acquires nothing: the jobs stay available for
    /// the new leader's session.
    async fn acquire(&self, session: &mut Session, unacquired: &mut Vec<i64>) -> Result<(), ApiError> {
        if unacquired.is_empty() || self.fenced() {
            return Ok(());
        }
        let ids = unacquired.clone();
        let acquired = self
            .with_queue_token(session, |s| {
                let client = self.client.clone();
                let s = s.clone();
                let ids = ids.clone();
                async move { poll::acquire_jobs(&client, &s, &ids).await }
            })
            .await?;
        tracing::debug!(group = %self.config.key, offered = ids.len(), acquired = acquired.len(), "acquired jobs");
        // What the service did not acquire is no longer available (taken, cancelled): done.
        unacquired.clear();
        Ok(())
    }

    /// Runs a queue call; on 401 refreshes the session and retries once.
    async fn with_queue_token<T, F, Fut>(&self, session: &mut Session, call: F) -> Result<T, ApiError>
    where
        F: Fn(&Session) -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        match call(session).await {
            Err(e) if e.status() == Some(401) => {
                *session = session::refresh(&self.client, session).await?;
                call(session).await
            }
            other => other,
        }
    }
}
