//! JSON shapes of Gitea 1.25/1.26 (`modules/structs`) rendered from the fake's model.

use serde_json::{Value, json};

use super::model::{FakeJob, FakeRunner, JobState};

/// Gitea renders unset times as the Unix epoch.
const EPOCH: &str = "1970-01-01T00:00:00Z";

/// A time as Gitea renders it: whole seconds cut down, never rounded up, as it keeps times as
/// `timeutil.TimeStamp` from `time.Now().Unix()` (`modules/timeutil/timestamp.go`).
fn time(t: Option<jiff::Timestamp>) -> String {
    t.map_or_else(
        || EPOCH.to_string(),
        |t| {
            let cut = jiff::TimestampRound::new()
                .smallest(jiff::Unit::Second)
                .mode(jiff::RoundMode::Floor);
            t.round(cut).unwrap_or(t).to_string()
        },
    )
}

/// Behaviour that differs between Gitea releases.
#[derive(Clone, Copy, Debug)]
pub struct Dialect {
    /// 1.25 sends `steps: null` for jobs without steps (fixed in 1.26).
    pub null_steps: bool,
    /// 1.26 added the runner `disabled` field.
    pub runner_disabled_field: bool,
}

/// `ActionWorkflowJob`.
pub fn job(base: &str, j: &FakeJob, d: Dialect) -> Value {
    let repo_api = format!("{base}/api/v1/repos/{}/{}", j.owner, j.repo);
    let mut v = json!({
        "id": j.id,
        "url": format!("{repo_api}/actions/jobs/{}", j.id),
        "html_url": format!("{base}/{}/{}/actions/runs/{}/jobs/0", j.owner, j.repo, j.run_id),
        "run_id": j.run_id,
        "run_url": format!("{repo_api}/actions/runs/{}", j.run_id),
        "name": j.name,
        "labels": j.labels,
        "run_attempt": j.attempt,
        "head_sha": "0000000000000000000000000000000000000000",
        "head_branch": "main",
        "status": j.state.api_status(),
        "steps": if d.null_steps { Value::Null } else { json!([]) },
        "created_at": time(Some(j.created)),
        "started_at": time(j.started),
        "completed_at": time(j.completed),
    });
    if let JobState::Done(c) = j.state {
        v["conclusion"] = json!(c.as_str());
    }
    if let Some(id) = j.runner_id {
        v["runner_id"] = json!(id);
        if !j.runner_name.is_empty() {
            v["runner_name"] = json!(j.runner_name);
        }
    }
    v
}

/// `ActionRunner`.
pub fn runner(r: &FakeRunner, online: bool, d: Dialect) -> Value {
    let labels: Vec<Value> = r
        .labels
        .iter()
        .enumerate()
        .map(|(i, n)| json!({"id": i, "name": n, "type": "custom"}))
        .collect();
    let mut v = json!({
        "id": r.id,
        "name": r.name,
        "status": if online { "online" } else { "offline" },
        "busy": r.task.is_some(),
        "ephemeral": r.ephemeral,
        "labels": labels,
    });
    if d.runner_disabled_field {
        v["disabled"] = json!(r.disabled);
    }
    v
}

/// A user or organization as webhook payloads show it.
fn account(id: i64, login: &str) -> Value {
    json!({"id": id, "login": login, "username": login, "full_name": "", "email": ""})
}

/// Gitea's `structs.Organization` (`modules/structs/org.go`): `name` and `username`, no `login`.
fn organization(id: i64, name: &str) -> Value {
    json!({"id": id, "name": name, "username": name, "full_name": "", "email": ""})
}

/// `WorkflowJobPayload` for a job change.
pub fn workflow_job_payload(base: &str, j: &FakeJob, owner_is_org: bool, d: Dialect) -> Value {
    let mut v = json!({
        "action": j.state.api_status(),
        "workflow_job": job(base, j, d),
        "repository": {
            "id": j.run_id,
            "name": j.repo,
            "full_name": format!("{}/{}", j.owner, j.repo),
            "owner": account(1, &j.owner),
            "html_url": format!("{base}/{}/{}", j.owner, j.repo),
            "private": false,
        },
        "sender": account(2, "gitea-actions"),
    });
    if owner_is_org {
        v["organization"] = organization(1, &j.owner);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_created_at(created: &str) -> FakeJob {
        FakeJob {
            id: 1,
            run_id: 1,
            owner: "o".into(),
            repo: "r".into(),
            name: "j".into(),
            labels: vec!["l".into()],
            state: JobState::Waiting,
            attempt: 0,
            runner_id: None,
            runner_name: String::new(),
            runner_labels: Vec::new(),
            created: created.parse().expect("valid timestamp"),
            started: None,
            completed: None,
            cancel_requested: false,
            cache_key: None,
        }
    }

    /// Gitea keeps `created` as a `timeutil.TimeStamp` filled from `time.Now().Unix()`
    /// (`modules/timeutil/timestamp.go`, `TimeStampNow`; `models/actions/run_job.go`,
    /// `Created timeutil.TimeStamp xorm:"created"`), and `services/convert/convert.go`,
    /// `ToActionWorkflowJob`, renders it as `job.Created.AsTime().UTC()`: whole seconds, cut
    /// down, so the time shown is never after the job was queued.
    #[test]
    fn created_at_is_cut_to_the_second_as_gitea_stores_it() {
        let d = Dialect {
            null_steps: false,
            runner_disabled_field: true,
        };
        let j = job_created_at("2026-03-04T05:06:07.9Z");
        assert_eq!(job("http://g", &j, d)["created_at"], "2026-03-04T05:06:07Z");
        let p = workflow_job_payload("http://g", &j, false, d);
        assert_eq!(p["workflow_job"]["created_at"], "2026-03-04T05:06:07Z");
        let j = job_created_at("2026-03-04T05:06:07Z");
        assert_eq!(job("http://g", &j, d)["created_at"], "2026-03-04T05:06:07Z");
    }
}
