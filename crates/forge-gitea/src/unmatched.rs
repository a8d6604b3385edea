//! Queued jobs of a group's scope that no group of this process can take: the classic typo in
//! `runs-on`. Counted per namespace (`forgerunner_core::metrics::UnmatchedBook`) and named in
//! the group's view, so the reconciler can tell a person which job asks for which labels.
//!
//! A Gitea runner takes a job of its scope when every `runs-on` label of the job is one of its
//! labels; the jobs listing gives each job's `runs-on` as `labels` and its repository in `url`
//! (`ToActionWorkflowJob` in `services/convert/convert.go`: `Labels: job.RunsOn`, `URL:
//! repo.APIURL()/actions/jobs/{id}`). A job counts as unmatched when no group on the same
//! instance whose scope holds the job's repository has labels that match it.

#[cfg(test)]
mod forge_tests;
mod scans;

use std::collections::HashMap;

use forgerunner_core::forge::UnmatchedJob;

pub(crate) use self::scans::Scans;

use crate::labels::ServedLabels;
use crate::scope::{Scope, contains_repo};
use crate::types::{JobStatus, WorkflowJob};

/// A group that could take jobs: where it is, which repositories it serves, with which labels.
#[derive(Clone, Copy)]
pub(crate) struct Taker<'a> {
    /// The group's instance URL (as the connection pool keys it).
    pub(crate) url: &'a str,
    /// The group's scope.
    pub(crate) scope: &'a Scope,
    /// The group's labels, its classes' with them.
    pub(crate) labels: &'a ServedLabels,
}

/// The queued jobs of `jobs`, listed on the instance at `url`, that none of `takers` can take.
///
/// Jobs with an empty `runs-on` are left out: which runner takes them depends on the Gitea
/// version, not on labels a person could have mistyped.
///
/// A scope's listing (thousands of jobs) is scanned against every group of the process, so the
/// groups are indexed by label name first: a job is checked only against the groups that have
/// its first `runs-on` label, and its repository is read once. The groups of one scope share
/// the scan of their listing ([`Scans`]).
pub(crate) fn unmatched_jobs<'a>(
    jobs: &[WorkflowJob],
    url: &str,
    takers: impl Iterator<Item = Taker<'a>>,
) -> Vec<UnmatchedJob> {
    let local: Vec<Taker<'a>> = takers.filter(|t| t.url == url).collect();
    let mut by_label: HashMap<&'a str, Vec<usize>> = HashMap::new();
    for (i, t) in local.iter().enumerate() {
        let labels: &'a ServedLabels = t.labels;
        for name in labels.names() {
            by_label.entry(name).or_default().push(i);
        }
    }
    jobs.iter()
        .filter(|j| j.status == JobStatus::Queued)
        .filter(|j| {
            let Some(first) = j.labels.first() else {
                return false;
            };
            let candidates = by_label.get(first.as_str()).map_or(&[][..], Vec::as_slice);
            let mut takers = candidates
                .iter()
                .map(|&i| local[i])
                .filter(|t| t.labels.matches(&j.labels))
                .peekable();
            if takers.peek().is_none() {
                return true;
            }
            let repository = j.identity().repository;
            !takers.any(|t| in_scope(t, repository.as_deref()))
        })
        .map(|j| UnmatchedJob {
            id: j.id.to_string(),
            labels: j.labels.clone(),
            queued_at: j.created_at,
        })
        .collect()
}

/// Whether the job's repository is in `t`'s scope (a job whose repository the listing does not
/// name counts as in every scope, so it is never reported falsely).
fn in_scope(t: Taker<'_>, repository: Option<&str>) -> bool {
    match repository.and_then(|r| r.split_once('/')) {
        Some((owner, repo)) => contains_repo(t.scope, owner, repo),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::ServedLabels;

    fn parse_labels(raw: &[&str]) -> Result<ServedLabels, crate::labels::LabelError> {
        let raw: Vec<String> = raw.iter().map(|l| (*l).to_owned()).collect();
        ServedLabels::parse(&raw, &[])
    }

    const URL: &str = "https://gitea.example";

    fn job(id: i64, repo: &str, labels: &[&str], status: JobStatus) -> WorkflowJob {
        WorkflowJob {
            id,
            run_id: 1,
            name: "build".into(),
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
            status,
            runner_name: String::new(),
            runner_id: 0,
            url: format!("{URL}/api/v1/repos/{repo}/actions/jobs/{id}"),
            created_at: None,
        }
    }

    fn ids(found: &[UnmatchedJob]) -> Vec<&str> {
        found.iter().map(|j| j.id.as_str()).collect()
    }

    #[test]
    fn a_job_no_group_of_its_scope_matches_is_unmatched_once() {
        let linux = parse_labels(&["linux:host"]).expect("labels");
        let gpu = parse_labels(&["gpu:host"]).expect("labels");
        let global = Scope::Global;
        let acme = Scope::Org("acme".into());
        let takers = [
            Taker {
                url: URL,
                scope: &global,
                labels: &linux,
            },
            Taker {
                url: URL,
                scope: &acme,
                labels: &gpu,
            },
        ];
        let jobs = [
            job(1, "acme/app", &["linux"], JobStatus::Queued),
            job(2, "acme/app", &["linx"], JobStatus::Queued),
            job(3, "acme/app", &["gpu"], JobStatus::Queued),
            job(4, "other/app", &["gpu"], JobStatus::Queued),
            job(5, "acme/app", &["linx"], JobStatus::InProgress),
            job(6, "acme/app", &[], JobStatus::Queued),
        ];
        let found = unmatched_jobs(&jobs, URL, takers.iter().copied());
        assert_eq!(
            ids(&found),
            ["2", "4"],
            "the typo, and a gpu job outside acme's scope"
        );
        assert_eq!(found[0].labels, ["linx"]);
        let elsewhere = unmatched_jobs(&jobs[..1], "https://other.example", takers.iter().copied());
        assert_eq!(
            ids(&elsewhere),
            ["1"],
            "groups of another instance take nothing here"
        );
    }
}
