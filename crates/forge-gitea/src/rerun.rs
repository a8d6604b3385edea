//! Re-running the one job a runner was running when the cluster killed its pod, through
//! Gitea's REST API with the group's API token ([`forgerunner_core::ForgeSession::rerun_job`]).
//!
//! Facts this rests on (bircni/gitea; `research-28.md` of issue 28, section A2):
//!
//! - The token API exists from 1.26.0 only: `POST /repos/{owner}/{repo}/actions/runs/{run}/
//!   jobs/{job_id}/rerun` (`routers/api/v1/api.go` at v1.26.0; absent at v1.25.4, where a
//!   re-run is the web UI's alone). Older servers are not asked: the job is not re-run.
//! - The handler, `RerunWorkflowJob` in `routers/api/v1/repo/action.go`, re-runs the job and
//!   the jobs that depend on it (`GetAllRerunJobs`), never the run's other failed jobs. It
//!   answers 201; 404 for a run not in the repository (`getCurrentRepoActionRunByID`) or a job
//!   not of the run; 400 for an `ErrInvalidArgument` of the service (`handleWorkflowRerunError`).
//! - The route sits behind `reqToken()` (401) and `reqRepoWriter(unit.TypeActions)` (403: write
//!   access to the repository's Actions), and the `/repos` group behind
//!   `tokenRequiresScopes(AccessTokenScopeCategoryRepository)`, which for a POST wants the
//!   `write:repository` scope (403). A group's API token needs neither otherwise.
//! - 400 "this workflow run is not done" (`services/actions/rerun.go` `prepareRunRerun`) while
//!   any job of the run is unfinished, the killed one included: Gitea fails a vanished runner's
//!   task only after `ZOMBIE_TASK_TIMEOUT` (10 minutes by default), checked every 5 minutes
//!   (`services/actions/clear_tasks.go` `StopZombieTasks`, `services/cron/tasks_actions.go`).
//!   So the run is read first (`GET …/actions/runs/{run}`, whose `status` is `completed` once
//!   every job of the run is done) and the re-run is asked for only then; a run still going
//!   means "ask again later". A 400 after that (1.26 also answers 400 when the workflow was
//!   disabled meanwhile, 1.27 past its attempt limit) is a refusal, reported as such.
//! - 1.26 queues the same job row again (`rerunWorkflowJob`: `task_id`, status and times
//!   reset, `Attempt` kept), so the job's id comes back as queued, its `queued` delivery at the
//!   attempt of the killed task's `completed` one; 1.27 clones the jobs into a new attempt
//!   with new ids. The request is noted before it is sent ([`AskedRerun`]) so the webhook
//!   path takes that delivery as the re-run it is (`forge_webhook/announced.rs`).

use std::time::Duration;

use forgerunner_core::ForgeError;
use forgerunner_core::forge::RerunOutcome;
use forgerunner_core::job_identity::JobIdentity;
use forgerunner_http::RequestError;

use crate::client::GiteaClient;
use crate::error::GiteaError;
use crate::forge_webhook::AskedRerun;
use crate::scope::{Scope, contains_repo};
use crate::version::GiteaVersion;

/// How long to wait before asking again while the job's run is not done. Gitea fails a
/// killed runner's task within 10–15 minutes; asking each minute adds at most a minute.
pub const NOT_DONE_RETRY: Duration = Duration::from_secs(60);

/// The rights re-running takes, in Gitea's words.
const RERUN_RIGHTS: &str = "write access to the repository's Actions (reqRepoWriter) and, for a \
                            scoped token, the write:repository scope";

/// The job to re-run, as the route names it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Target {
    owner: String,
    repo: String,
    run_id: i64,
    job_id: i64,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job {} of run {} in {}/{}",
            self.job_id, self.run_id, self.owner, self.repo
        )
    }
}

/// Whether `s` is a name Gitea allows for an owner or repository (`[-.\w]`, as
/// `validRepoNamePattern` in `models/repo/repo.go`), so it is one path segment as it stands.
fn gitea_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The job `job` names, when it names all the route needs (`owner/repo`, run and job id) and
/// its repository is in the group's `scope`: a job elsewhere is none of the group's runners'.
fn target_of(job: &JobIdentity, scope: &Scope) -> Option<Target> {
    let (owner, repo) = job.repository.as_deref()?.split_once('/')?;
    let id = |v: &Option<String>| v.as_deref()?.parse::<i64>().ok().filter(|n| *n > 0);
    let (run_id, job_id) = (id(&job.run_id)?, id(&job.job_id)?);
    let fits = gitea_name(owner) && gitea_name(repo) && contains_repo(scope, owner, repo);
    fits.then(|| Target {
        owner: owner.to_owned(),
        repo: repo.to_owned(),
        run_id,
        job_id,
    })
}

/// Whether Gitea may have queued the job again on `answer`: yes unless it refused the request
/// (a 3xx or 4xx), which changes nothing.
fn may_have_queued(answer: &Result<(), GiteaError>) -> bool {
    match answer {
        Ok(()) => true,
        Err(e) => matches!(
            e,
            GiteaError::Request(
                RequestError::Server { .. }
                    | RequestError::Transport { .. }
                    | RequestError::BadResponse { .. }
                    | RequestError::TooLarge { .. }
            )
        ),
    }
}

/// What Gitea's answer to the re-run means.
fn outcome_of(answer: Result<(), GiteaError>, target: &Target) -> Result<RerunOutcome, ForgeError> {
    match answer {
        Ok(()) => Ok(RerunOutcome::Requested),
        Err(GiteaError::Request(RequestError::Rejected { status: 400, .. })) => {
            Err(ForgeError::Config(format!(
                "Gitea refused to re-run {target} although its run is done (400): the workflow may \
             be disabled, or the run out of re-run attempts"
            )))
        }
        // The run, the job or the repository is gone (or the token may not see it).
        Err(GiteaError::Request(RequestError::NotFound(_))) => Ok(RerunOutcome::Gone),
        Err(GiteaError::Request(
            e @ (RequestError::Unauthenticated { .. } | RequestError::Forbidden { .. }),
        )) => {
            let status = if matches!(e, RequestError::Unauthenticated { .. }) {
                401
            } else {
                403
            };
            Err(ForgeError::Unauthorized(format!(
                "Gitea refused to re-run {target} ({status}): the group's API token needs \
                 {RERUN_RIGHTS}; grant it, or turn re-runs off (spec.rerun)"
            )))
        }
        Err(e) => Err(e.into()),
    }
}

/// Re-runs the job `runner` was running, on a server of `version`
/// ([`forgerunner_core::ForgeSession::rerun_job`]). `ask` is told the job's id just before the
/// request goes out, and its note the answer.
pub(crate) async fn rerun_job<'a>(
    client: &GiteaClient,
    scope: &Scope,
    version: GiteaVersion,
    runner: &str,
    job: &JobIdentity,
    ask: impl FnOnce(i64) -> AskedRerun<'a>,
) -> Result<RerunOutcome, ForgeError> {
    if !version.has_job_rerun_api() {
        return Ok(RerunOutcome::Unsupported);
    }
    let Some(target) = target_of(job, scope) else {
        tracing::debug!(
            runner,
            "the runner's job names no repository of the group's scope, run and job id; nothing to re-run"
        );
        return Ok(RerunOutcome::Gone);
    };
    match client.run_done(&target.owner, &target.repo, target.run_id).await {
        Ok(true) => {}
        Ok(false) => {
            return Ok(RerunOutcome::NotYet {
                retry_after: NOT_DONE_RETRY,
            });
        }
        Err(e) => return outcome_of(Err(e), &target),
    }
    let asked = ask(target.job_id);
    let answer = client
        .rerun_job(&target.owner, &target.repo, target.run_id, target.job_id)
        .await;
    asked.answered(may_have_queued(&answer));
    outcome_of(answer, &target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::GITEA;

    fn server(status: u16) -> RequestError {
        RequestError::Server {
            api: GITEA,
            status,
            operation: "rerun_job",
        }
    }

    fn rejected(status: u16) -> RequestError {
        RequestError::Rejected {
            api: GITEA,
            status,
            operation: "rerun_job",
        }
    }

    fn unauthenticated() -> RequestError {
        RequestError::Unauthenticated {
            api: GITEA,
            scope: "x".into(),
        }
    }

    fn identity(repository: &str, run: &str, job: &str) -> JobIdentity {
        JobIdentity {
            repository: Some(repository.into()),
            run_id: Some(run.into()),
            job_id: Some(job.into()),
            ..JobIdentity::default()
        }
    }

    #[test]
    fn the_target_needs_a_repository_in_scope_and_both_ids() {
        let org = Scope::Org("Acme".into());
        assert_eq!(
            target_of(&identity("acme/app.web", "7", "9"), &org),
            Some(Target {
                owner: "acme".into(),
                repo: "app.web".into(),
                run_id: 7,
                job_id: 9,
            }),
            "owners compare as Gitea compares them"
        );
        for (repo, run, job) in [
            ("app", "7", "9"),
            ("other/app", "7", "9"),
            ("acme/..", "7", "9"),
            ("acme/a/b", "7", "9"),
            ("acme/a b", "7", "9"),
            ("acme/app", "x", "9"),
            ("acme/app", "7", "0"),
            ("acme/app", "7", "-3"),
        ] {
            assert_eq!(
                target_of(&identity(repo, run, job), &org),
                None,
                "{repo} {run} {job}"
            );
        }
        assert_eq!(target_of(&JobIdentity::default(), &Scope::Global), None);
        assert!(target_of(&identity("x/y", "1", "2"), &Scope::Global).is_some());
    }

    /// Only a refusal is known to have queued nothing; after a server error or a lost answer
    /// the re-run's delivery may still come.
    #[test]
    fn only_a_refusal_queues_nothing() {
        assert!(may_have_queued(&Ok(())));
        for maybe in [
            server(502),
            RequestError::Transport {
                api: GITEA,
                operation: "rerun_job",
                detail: "timeout".into(),
            },
            RequestError::BadResponse {
                api: GITEA,
                operation: "rerun_job",
            },
        ] {
            assert!(may_have_queued(&Err(maybe.clone().into())), "{maybe:?}");
        }
        for refused in [
            rejected(400),
            RequestError::NotFound("job".into()),
            unauthenticated(),
            RequestError::RateLimited {
                api: GITEA,
                seconds: 5,
            },
        ] {
            assert!(!may_have_queued(&Err(refused.clone().into())), "{refused:?}");
        }
    }

    #[test]
    fn answers_map_onto_outcomes() {
        let t = Target {
            owner: "o".into(),
            repo: "r".into(),
            run_id: 1,
            job_id: 2,
        };
        assert_eq!(outcome_of(Ok(()), &t).unwrap(), RerunOutcome::Requested);
        assert_eq!(
            outcome_of(Err(rejected(400).into()), &t).map_err(|e| e.category()),
            Err(forgerunner_core::error::ErrorCategory::ForgeConfig),
            "a 400 once the run is done is a refusal, not a wait"
        );
        assert_eq!(
            outcome_of(Err(RequestError::NotFound("repository o/r".into()).into()), &t).unwrap(),
            RerunOutcome::Gone
        );
        let refused = outcome_of(Err(unauthenticated().into()), &t);
        assert!(
            matches!(&refused, Err(ForgeError::Unauthorized(m)) if m.contains("(401)") && m.contains("job 2 of run 1 in o/r")),
            "{refused:?}"
        );
        assert!(matches!(
            outcome_of(Err(server(502).into()), &t),
            Err(ForgeError::Unavailable(_))
        ));
        assert!(matches!(
            outcome_of(Err(rejected(409).into()), &t),
            Err(ForgeError::Config(_))
        ));
    }
}
