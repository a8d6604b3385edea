//! Runner groups and runner scale sets at the Actions service (admin token).

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::client::GithubClient;
use crate::error::ApiError;
use crate::types::{ListOf, Statistics};

const SCALE_SETS: &str = "_apis/runtime/runnerscalesets";
/// Id of the `Default` runner group, used when the spec names none (as ARC does).
pub const DEFAULT_RUNNER_GROUP_ID: i64 = 1;

/// A runner group.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RunnerGroup {
    /// Group id.
    pub id: i64,
    /// Group name.
    #[serde(default)]
    pub name: String,
}

/// A runner scale set as the service returns it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSet {
    /// Scale set id.
    pub id: i64,
    /// Name (the `runs-on` label).
    #[serde(default)]
    pub name: String,
    /// Runner group id.
    #[serde(default)]
    pub runner_group_id: i64,
    /// Runner group name.
    #[serde(default)]
    pub runner_group_name: String,
    /// Current statistics, when the service includes them.
    #[serde(default)]
    pub statistics: Option<Statistics>,
    /// Labels workflows can target (the name is one of them).
    #[serde(default)]
    pub labels: Vec<ScaleSetLabel>,
}

impl ScaleSet {
    /// The label names, to compare with [`DesiredScaleSet::label_list`].
    pub fn label_names(&self) -> Vec<String> {
        self.labels.iter().map(|l| l.name.clone()).collect()
    }
}

/// One label of a scale set (its `type` is `System` for the labels we set).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct ScaleSetLabel {
    /// The label text.
    #[serde(default)]
    pub name: String,
}

/// Whether two label lists name the same labels; order carries no meaning for `runs-on`, so a
/// service that returns them in another order causes no PATCH.
pub fn same_labels(a: &[String], b: &[String]) -> bool {
    fn set(l: &[String]) -> std::collections::BTreeSet<&str> {
        l.iter().map(String::as_str).collect()
    }
    set(a) == set(b)
}

/// One entry of `acquirablejobs` (only the id is used).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AcquirableJob {
    #[serde(default)]
    runner_request_id: i64,
}

/// What the spec asks of the scale set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredScaleSet {
    /// Scale set name.
    pub name: String,
    /// Runner group name; `None` for the default group.
    pub runner_group: Option<String>,
    /// Labels (the name is always one of them).
    pub labels: Vec<String>,
}

impl DesiredScaleSet {
    /// The label list sent at creation: the name first, then each unique extra label.
    pub fn label_list(&self) -> Vec<String> {
        let mut out = vec![self.name.clone()];
        for l in &self.labels {
            let l = l.trim();
            if !l.is_empty() && !out.iter().any(|o| o == l) {
                out.push(l.to_string());
            }
        }
        out
    }
}

/// Looks up a runner group id by name; `None`/empty means the default group (id 1, no call).
pub async fn runner_group_id(client: &GithubClient, name: Option<&str>) -> Result<i64, ApiError> {
    let Some(name) = name.map(str::trim).filter(|n| !n.is_empty()) else {
        return Ok(DEFAULT_RUNNER_GROUP_ID);
    };
    let reply = client
        .actions(
            "get_runner_group",
            Method::GET,
            "_apis/runtime/runnergroups/",
            &[("groupName", name)],
            None,
        )
        .await?;
    let list: ListOf<RunnerGroup> = reply.json("get_runner_group")?;
    match list.value.as_slice() {
        [one] => Ok(one.id),
        [] => Err(not_found(
            "get_runner_group",
            format!("no runner group named {name:?}"),
        )),
        _ => Err(ApiError::Config(format!(
            "more than one runner group named {name:?}"
        ))),
    }
}

/// Finds a scale set by group and name.
pub async fn find(client: &GithubClient, group_id: i64, name: &str) -> Result<Option<ScaleSet>, ApiError> {
    let gid = group_id.to_string();
    let reply = client
        .actions(
            "find_scale_set",
            Method::GET,
            SCALE_SETS,
            &[("runnerGroupId", &gid), ("name", name)],
            None,
        )
        .await?;
    let list: ListOf<ScaleSet> = reply.json("find_scale_set")?;
    match list.value.len() {
        0 => Ok(None),
        1 => Ok(list.value.into_iter().next()),
        _ => Err(ApiError::Config(format!(
            "more than one scale set named {name:?} in the runner group"
        ))),
    }
}

/// Reads a scale set by id (`None` when it no longer exists).
pub async fn get(client: &GithubClient, id: i64) -> Result<Option<ScaleSet>, ApiError> {
    match client
        .actions(
            "get_scale_set",
            Method::GET,
            &format!("{SCALE_SETS}/{id}"),
            &[],
            None,
        )
        .await
    {
        Ok(reply) => Ok(Some(reply.json("get_scale_set")?)),
        Err(e) if e.status() == Some(404) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The labels of `desired` as the service takes them: each of type `System`, the type
/// scaleset fills in for labels without one (`client.go`, `applyDefaultLabelTypes`).
fn label_body(labels: &[String]) -> serde_json::Value {
    labels
        .iter()
        .map(|l| json!({"type": "System", "name": l}))
        .collect()
}

/// Creates a scale set (ephemeral runners, updates disabled, labels of type `System`).
pub async fn create(
    client: &GithubClient,
    group_id: i64,
    desired: &DesiredScaleSet,
) -> Result<ScaleSet, ApiError> {
    let labels = label_body(&desired.label_list());
    let body = json!({
        "name": desired.name,
        "runnerGroupId": group_id,
        "labels": labels,
        "RunnerSetting": {"ephemeral": true, "disableUpdate": true},
    });
    let reply = client
        .actions("create_scale_set", Method::POST, SCALE_SETS, &[], Some(&body))
        .await?;
    reply.json("create_scale_set")
}

/// Patches the name and/or runner group of a scale set.
pub async fn update(
    client: &GithubClient,
    id: i64,
    name: Option<&str>,
    group_id: Option<i64>,
) -> Result<ScaleSet, ApiError> {
    let mut body = serde_json::Map::new();
    if let Some(n) = name {
        body.insert("name".into(), json!(n));
    }
    if let Some(g) = group_id {
        body.insert("runnerGroupId".into(), json!(g));
    }
    let body = serde_json::Value::Object(body);
    let reply = client
        .actions(
            "update_scale_set",
            Method::PATCH,
            &format!("{SCALE_SETS}/{id}"),
            &[],
            Some(&body),
        )
        .await?;
    reply.json("update_scale_set")
}

/// Replaces the labels of a scale set (actions/scaleset `client.go`, `UpdateRunnerScaleSet`:
/// a PATCH of the scale set whose body carries only what changes).
pub async fn update_labels(client: &GithubClient, id: i64, labels: &[String]) -> Result<ScaleSet, ApiError> {
    let body = json!({ "labels": label_body(labels) });
    let reply = client
        .actions(
            "update_scale_set_labels",
            Method::PATCH,
            &format!("{SCALE_SETS}/{id}"),
            &[],
            Some(&body),
        )
        .await?;
    reply.json("update_scale_set_labels")
}

/// The request ids of the jobs the scale set could acquire now (admin token). The old ARC client
/// called it (`github/actions/client.go`, `GetAcquirableJobs`: 204 means none, else
/// `{count, value:[{runnerRequestId, …}]}`); an empty 200 is read as none too.
pub async fn acquirable_jobs(client: &GithubClient, id: i64) -> Result<Vec<i64>, ApiError> {
    let reply = client
        .actions(
            "get_acquirable_jobs",
            Method::GET,
            &path(id, "acquirablejobs"),
            &[],
            None,
        )
        .await?;
    if reply.status == 204 || reply.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let list: ListOf<AcquirableJob> = reply.json("get_acquirable_jobs")?;
    let mut seen = std::collections::HashSet::new();
    Ok(list
        .value
        .into_iter()
        .map(|j| j.runner_request_id)
        .filter(|id| *id > 0 && seen.insert(*id))
        .collect())
}

/// Deletes a scale set; one already gone counts as deleted.
pub async fn delete(client: &GithubClient, id: i64) -> Result<(), ApiError> {
    match client
        .actions(
            "delete_scale_set",
            Method::DELETE,
            &format!("{SCALE_SETS}/{id}"),
            &[],
            None,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.status() == Some(404) => Ok(()),
        Err(e) => Err(e),
    }
}

fn not_found(operation: &'static str, message: String) -> ApiError {
    ApiError::Status {
        operation,
        status: 404,
        type_name: None,
        message,
        retry_after: None,
        rate_limited: false,
        request_ids: None,
    }
}

/// Path of a scale set's sub-resource, for the listener and runners.
pub fn path(id: i64, sub: &str) -> String {
    if sub.is_empty() {
        format!("{SCALE_SETS}/{id}")
    } else {
        format!("{SCALE_SETS}/{id}/{sub}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_start_with_the_name_and_are_unique() {
        let d = DesiredScaleSet {
            name: "linux".into(),
            runner_group: None,
            labels: vec!["gpu".into(), "linux".into(), " ".into(), "gpu".into()],
        };
        assert_eq!(d.label_list(), vec!["linux", "gpu"]);
        assert_eq!(path(5, "sessions"), "_apis/runtime/runnerscalesets/5/sessions");
    }

    #[test]
    fn label_order_does_not_matter() {
        let l = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(same_labels(&l(&["linux", "gpu"]), &l(&["gpu", "linux"])));
        assert!(!same_labels(&l(&["linux", "gpu"]), &l(&["linux"])));
        assert!(!same_labels(&l(&["linux"]), &l(&["renamed"])));
    }
}
