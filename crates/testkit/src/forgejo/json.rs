//! JSON shapes of Forgejo's API (`modules/structs`) rendered from the fake's model.

use serde_json::{Value, json};

use super::model::{FakeJob, FakeRunner};

/// `ActionRunJob`; `attempt` and `handle` only from v15.
pub fn job(j: &FakeJob, v15: bool) -> Value {
    let mut v = json!({
        "id": j.id,
        "repo_id": j.repo_id,
        "owner_id": j.owner_id,
        "name": j.name,
        // A Go nil slice: jobs without needs serialise `null`, as in the blog's example.
        "needs": if j.needs.is_empty() { Value::Null } else { json!(j.needs) },
        "runs_on": j.runs_on,
        "task_id": j.task_id,
        "status": j.status.as_str(),
    });
    if v15 {
        v["attempt"] = json!(j.attempt);
        v["handle"] = json!(j.handle);
    }
    v
}

/// `ActionRunner` (v15, `modules/structs/repo_actions.go@v15.0.3`): label names as strings, a
/// computed `status`, and `version`, "the self-reported version string of Forgejo Runner" (what
/// its last `Register` or `Declare` sent; empty before). The struct and its listings came with
/// Forgejo commit `ddd4cf0d28` (#10450, first in v15.0.0).
pub fn runner(r: &FakeRunner, owner_id: i64, repo_id: i64, status: &str) -> Value {
    json!({
        "id": r.id,
        "uuid": r.uuid,
        "owner_id": owner_id,
        "repo_id": repo_id,
        "name": r.name,
        "status": status,
        "version": r.version,
        "labels": r.labels,
        "description": r.description,
        "ephemeral": r.ephemeral,
    })
}
