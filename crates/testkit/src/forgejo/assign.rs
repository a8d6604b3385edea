//! The runner side of the model: registration, `Declare`, Forgejo's task assignment
//! (`FetchTask`, and `FetchSingleTask` by job handle), task updates with ephemeral-runner
//! deletion (reference §2 "Ephemeral semantics") and the runner `status` rule (§3).

use std::time::{Duration, Instant};

use super::labels::LabelFilter;
use super::model::{Conclusion, FakeRunner, FakeScope, FakeTask, JobStatus, Model};

/// What `UpdateTask` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskUpdate {
    /// The task is not this runner's (or unknown).
    NotFound,
    /// Accepted; the task's final result so far (`Cancelled` tells the runner to stop).
    Ok(Option<Conclusion>),
}

impl Model {
    /// The runner with these credentials; records the contact (`last_online`).
    pub fn runner_by_auth(&mut self, uuid: &str, token: &str) -> Option<i64> {
        let r = self
            .runners
            .values_mut()
            .find(|r| !uuid.is_empty() && r.uuid == uuid && r.token == token)?;
        r.last_online = Some(Instant::now());
        Some(r.id)
    }

    /// `Register` with a registration token; `None` if the token is unknown.
    pub fn register(
        &mut self,
        token: &str,
        name: &str,
        labels: Vec<String>,
        ephemeral: bool,
    ) -> Option<FakeRunner> {
        let scope = self
            .registration_tokens
            .iter()
            .find(|(_, t)| !token.is_empty() && t.as_str() == token)
            .map(|(s, _)| s.clone())?;
        let mut r = self.new_runner(scope, name, labels, ephemeral);
        r.last_online = Some(Instant::now());
        self.runners.insert(r.id, r.clone());
        Some(r)
    }

    /// `Declare`: the runner's label names and version, as it sends them.
    pub fn declare(&mut self, id: i64, labels: Vec<String>, version: &str) -> Option<FakeRunner> {
        let r = self.runners.get_mut(&id)?;
        r.labels = labels;
        r.version = version.to_string();
        Some(r.clone())
    }

    /// Forgejo's `PickTask`: the oldest waiting job in the runner's scope whose `runs_on` its
    /// labels cover; with `handle`, only that job attempt, and only if the labels cover it too
    /// (`models/actions/task.go` `CreateTaskForRunner`: `j.IsRequestedByRunner(handle) &&
    /// j.ItRunsOn(runner.AgentLabels)`; a runner bound to a job its labels do not hold waits). An ephemeral runner gets at most one
    /// task in its life. A job queued behind its concurrency group is not available
    /// ([`Model::held_by_concurrency`]).
    pub fn fetch(&mut self, runner_id: i64, handle: Option<&str>) -> Option<FakeTask> {
        let r = self.runners.get(&runner_id)?;
        if r.ephemeral && r.had_task {
            return None;
        }
        let covers = LabelFilter::Subset(r.labels.clone());
        let job_id = self
            .jobs
            .values()
            .filter(|j| j.status == JobStatus::Waiting && j.task_id == 0)
            .filter(|j| !self.held_by_concurrency(j))
            .filter(|j| handle.is_none_or(|h| j.handle == h))
            .filter(|j| Self::in_scope(&r.scope, j))
            .find(|j| covers.matches(&j.runs_on))
            .map(|j| j.id)?;
        let (name, labels) = (r.name.clone(), r.labels.clone());
        let id = self.next_id();
        let job = self.jobs.get_mut(&job_id)?;
        job.status = JobStatus::Running;
        job.task_id = id;
        job.runner_id = Some(runner_id);
        let task = FakeTask {
            id,
            job_id,
            attempt: job.attempt,
            handle: job.handle.clone(),
            runner_id,
            runner_name: name,
            runner_labels: labels,
            result: None,
        };
        self.tasks.insert(id, task.clone());
        if let Some(r) = self.runners.get_mut(&runner_id) {
            r.task = Some(id);
            r.had_task = true;
        }
        Some(task)
    }

    fn mark_active(&mut self, runner_id: i64) {
        if let Some(r) = self.runners.get_mut(&runner_id) {
            r.last_active = Some(Instant::now());
        }
    }

    /// `UpdateTask`: a heartbeat (`None`) or a final result. A final result ends the job (if
    /// still this attempt's and not cancelled meanwhile) and deletes an ephemeral runner.
    pub fn update_task(&mut self, runner_id: i64, task_id: i64, result: Option<Conclusion>) -> TaskUpdate {
        let Some(task) = self.tasks.get_mut(&task_id).filter(|t| t.runner_id == runner_id) else {
            return TaskUpdate::NotFound;
        };
        if let Some(res) = result
            && task.result.is_none()
        {
            task.result = Some(res);
            let job_id = task.job_id;
            if let Some(job) = self.jobs.get_mut(&job_id).filter(|j| j.task_id == task_id) {
                job.status = JobStatus::Done(res);
            }
        }
        let now = self.tasks.get(&task_id).and_then(|t| t.result);
        self.mark_active(runner_id);
        if result.is_some() {
            if let Some(r) = self.runners.get_mut(&runner_id) {
                r.task = None;
            }
            if self.runners.get(&runner_id).is_some_and(|r| r.ephemeral) {
                self.delete_runner(runner_id);
            }
        }
        TaskUpdate::Ok(now)
    }

    /// `UpdateLog`: only marks the runner active (the fake keeps no logs); false if the task
    /// is not this runner's.
    pub fn update_log(&mut self, runner_id: i64, task_id: i64) -> bool {
        let mine = self.tasks.get(&task_id).is_some_and(|t| t.runner_id == runner_id);
        if mine {
            self.mark_active(runner_id);
        }
        mine
    }

    /// Forgejo's `CleanupEphemeralRunners` cron: deletes ephemeral runners whose task is done
    /// (never one that never got a task). The deleted ids.
    pub fn cleanup_ephemeral_runners(&mut self) -> Vec<i64> {
        let done: Vec<i64> = self
            .runners
            .values()
            .filter(|r| r.ephemeral && r.had_task)
            .filter(|r| {
                r.task
                    .is_none_or(|t| self.tasks.get(&t).is_none_or(|t| t.result.is_some()))
            })
            .map(|r| r.id)
            .collect();
        for id in &done {
            self.delete_runner(*id);
        }
        done
    }

    /// Runners listed at `scope`, in the list's order: admin sees all; others their own rows,
    /// and with `visible` also those inherited from higher scopes.
    ///
    /// Forgejo sorts the list by `last_online DESC` (`models/actions/runner.go`
    /// `FindRunnerOptions.ToOrders`; `shared.ListRunners` sets no `Sort` and takes no sort
    /// parameter), and every runner call rewrites `last_online` ([`Model::touch_runner`]): the
    /// order, and so what each page holds, changes between requests. Runners never online
    /// (`last_online` 0) come last. Forgejo leaves the order of equal timestamps to the
    /// database; the fake breaks ties by id so that tests are repeatable.
    pub fn runners_at(&self, scope: &FakeScope, visible: bool) -> Vec<&FakeRunner> {
        let mut rows: Vec<&FakeRunner> = self
            .runners
            .values()
            .filter(|r| match scope {
                FakeScope::Global => true,
                _ if r.scope == *scope => true,
                FakeScope::Repo(o, _) if visible => {
                    r.scope == FakeScope::Global || r.scope == FakeScope::Owner(o.clone())
                }
                FakeScope::Owner(_) if visible => r.scope == FakeScope::Global,
                _ => false,
            })
            .collect();
        rows.sort_by(|a, b| b.last_online.cmp(&a.last_online).then(a.id.cmp(&b.id)));
        rows
    }
}

/// Forgejo's runner status: `offline` if not seen for `offline_after` (or never), else `idle`
/// if not active for `idle_after`, else `active`.
pub fn runner_status(r: &FakeRunner, offline_after: Duration, idle_after: Duration) -> &'static str {
    match r.last_online {
        Some(t) if t.elapsed() <= offline_after => {
            if r.last_active.is_some_and(|t| t.elapsed() <= idle_after) {
                "active"
            } else {
                "idle"
            }
        }
        _ => "offline",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forgejo::model::JobSpec;

    fn runner(m: &mut Model, labels: &[&str], ephemeral: bool) -> i64 {
        let t = m.registration_token(&FakeScope::Global);
        let labels = labels.iter().map(|s| s.to_string()).collect();
        m.register(&t, "r", labels, ephemeral).map(|r| r.id).unwrap_or(0)
    }

    #[test]
    fn oldest_covered_job_and_handle_binding() {
        let mut m = Model::default();
        let rid = runner(&mut m, &["a", "b"], false);
        let gpu = m.add_job(&JobSpec::new("o/r", "gpu", &["gpu"]));
        let blocked = m.add_job(&JobSpec::new("o/r", "held", &["a"]).blocked());
        let first = m.add_job(&JobSpec::new("o/r", "one", &["a"]));
        let second = m.add_job(&JobSpec::new("o/r", "two", &["a", "b"]));
        assert!(m.fetch(rid, Some(&gpu.handle)).is_none(), "labels must cover");
        assert!(
            m.fetch(rid, Some(&blocked.handle)).is_none(),
            "blocked is not waiting"
        );
        let t = m.fetch(rid, Some(&second.handle)).expect("bound task");
        assert_eq!((t.job_id, t.handle.as_str()), (second.id, second.handle.as_str()));
        assert_eq!(m.fetch(rid, None).map(|t| t.job_id), Some(first.id));
        assert!(m.fetch(rid, None).is_none());
    }

    #[test]
    fn ephemeral_gets_one_task_and_is_deleted_on_final_result() {
        let mut m = Model::default();
        let rid = runner(&mut m, &["a"], true);
        let j = m.add_job(&JobSpec::new("o/r", "x", &["a"]));
        m.add_job(&JobSpec::new("o/r", "y", &["a"]));
        let t = m.fetch(rid, None).expect("task");
        assert!(m.fetch(rid, None).is_none(), "one task only");
        assert_eq!(m.update_task(rid, t.id, None), TaskUpdate::Ok(None));
        assert!(m.cancel(j.id));
        assert_eq!(
            m.update_task(rid, t.id, None),
            TaskUpdate::Ok(Some(Conclusion::Cancelled))
        );
        m.update_task(rid, t.id, Some(Conclusion::Cancelled));
        assert!(m.runners.is_empty());
        assert_eq!(m.jobs[&j.id].status, JobStatus::Done(Conclusion::Cancelled));
    }

    #[test]
    fn cleanup_spares_runners_that_never_had_a_task() {
        let mut m = Model::default();
        let idle = runner(&mut m, &["a"], true);
        let done = runner(&mut m, &["a"], true);
        let j = m.add_job(&JobSpec::new("o/r", "x", &["a"]));
        let t = m.fetch(done, None).expect("task");
        assert!(m.cleanup_ephemeral_runners().is_empty(), "task still running");
        m.cancel(j.id);
        assert_eq!(m.tasks[&t.id].result, Some(Conclusion::Cancelled));
        assert_eq!(m.cleanup_ephemeral_runners(), vec![done]);
        assert!(m.runners.contains_key(&idle));
    }
}
