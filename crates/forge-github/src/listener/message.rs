//! Decoding of message-queue envelopes: BOM, the JSON-string body holding a JSON array, and
//! per-element dispatch on `messageType`. Pure; malformed parts are skipped, never fatal.

use serde::Deserialize;

use forgerunner_core::job_identity::{JobIdentity, sanitize};

use crate::client::bytes_helpers::strip_bom;
use crate::types::Statistics;

/// The only envelope type that carries job messages.
pub const JOB_MESSAGES: &str = "RunnerScaleSetJobMessages";

/// One job message, reduced to what the backend acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobMessage {
    /// A job can be acquired with this request id.
    Available {
        /// `runnerRequestId`.
        runner_request_id: i64,
    },
    /// A job was assigned to the scale set.
    Assigned {
        /// `runnerRequestId`.
        runner_request_id: i64,
        /// Which job it is, to follow it until it starts.
        key: JobKey,
        /// `queueTime`: when the job was queued, for the "queued → seen" stage.
        queued_at: Option<jiff::Timestamp>,
    },
    /// A job started on one of our runners.
    Started {
        /// `runnerRequestId`.
        runner_request_id: i64,
        /// Which job it is.
        key: JobKey,
        /// The runner's name (= our Job name).
        runner_name: String,
        /// Repository, workflow, run and job, as the message names them.
        identity: JobIdentity,
    },
    /// A job finished (or was cancelled before it started).
    Completed {
        /// `runnerRequestId`.
        runner_request_id: i64,
        /// Which job it is.
        key: JobKey,
        /// The runner's name, empty if it never started.
        runner_name: String,
        /// `succeeded`, `failed`, `canceled`, …
        result: String,
    },
}

/// Which job a message is about, to follow it from assigned to started or completed: the
/// service's `jobId` where the message tells it, else its `runnerRequestId`.
///
/// Every job message carries both (`actions/scaleset` `types.go`, `JobMessageBase`), but the
/// request id is not always one per job: a `JobAssigned` captured from github.com's newer
/// job-assignment backend on 2026-07-26 had `"runnerRequestId":0` beside a UUID `jobId`
/// (a third-party measurement, GitHub Actions Gateway's protocol notes; no upstream source
/// shows the server side). Keyed by request id, every such job would be one entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum JobKey {
    /// `jobId`.
    Id(String),
    /// `runnerRequestId`, where the message has no `jobId`.
    Request(i64),
}

impl JobKey {
    /// The key of a message with these fields.
    pub fn of(runner_request_id: i64, job_id: Option<&str>) -> JobKey {
        match job_id.and_then(sanitize) {
            Some(id) => JobKey::Id(id),
            None => JobKey::Request(runner_request_id),
        }
    }
}

impl std::fmt::Display for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobKey::Id(id) => f.write_str(id),
            JobKey::Request(id) => write!(f, "{id}"),
        }
    }
}

/// A decoded envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `messageId`, to ack and to resume after.
    pub id: i64,
    /// Statistics at the time of the message, when present.
    pub statistics: Option<Statistics>,
    /// Job messages in order; unknown types and malformed entries are dropped.
    pub jobs: Vec<JobMessage>,
}

impl Message {
    /// Request ids of every `JobAvailable`, for one acquire call.
    pub fn available_ids(&self) -> Vec<i64> {
        self.jobs
            .iter()
            .filter_map(|j| match j {
                JobMessage::Available { runner_request_id } => Some(*runner_request_id),
                _ => None,
            })
            .collect()
    }
}

/// Why an envelope could not be used at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Not JSON, or no `messageId`.
    #[error("message envelope is not valid JSON: {0}")]
    Envelope(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    message_id: i64,
    #[serde(default)]
    message_type: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    statistics: Option<Statistics>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Element {
    #[serde(default)]
    message_type: String,
    #[serde(default)]
    runner_request_id: i64,
    #[serde(default)]
    runner_name: Option<String>,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    repository_name: Option<String>,
    #[serde(default)]
    owner_name: Option<String>,
    #[serde(default)]
    job_id: Option<String>,
    #[serde(default)]
    job_workflow_ref: Option<String>,
    #[serde(default)]
    job_display_name: Option<String>,
    #[serde(default)]
    workflow_run_id: Option<i64>,
    #[serde(default)]
    queue_time: Option<String>,
}

impl Element {
    /// `queueTime`, when it is a real time: the service sends `0001-01-01T00:00:00Z` for "none".
    fn queued_at(&self) -> Option<jiff::Timestamp> {
        let at: jiff::Timestamp = self.queue_time.as_deref()?.parse().ok()?;
        (at > jiff::Timestamp::UNIX_EPOCH).then_some(at)
    }

    /// What the message tells about the job (`JobMessageBase`); empty strings and a zero run
    /// id mean "not told".
    fn identity(&self) -> JobIdentity {
        // Bounded like every forge value kept in memory or written to an annotation: a message
        // may be 4 MiB, and a hostile service would fill the listener with it.
        let told = |v: &Option<String>| v.as_deref().and_then(sanitize);
        let repository = match (told(&self.owner_name), told(&self.repository_name)) {
            (Some(owner), Some(repo)) => Some(format!("{owner}/{repo}")),
            (None, Some(repo)) => Some(repo),
            _ => None,
        };
        JobIdentity {
            repository,
            workflow: told(&self.job_workflow_ref),
            run_id: self.workflow_run_id.filter(|id| *id > 0).map(|id| id.to_string()),
            job_name: told(&self.job_display_name),
            job_id: told(&self.job_id),
        }
    }
}

/// Decodes a 200 body. An empty body (seen in the wild) is `Ok(None)`: no message.
pub fn decode(raw: &[u8]) -> Result<Option<Message>, DecodeError> {
    let raw = strip_bom(raw);
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let env: Envelope = serde_json::from_slice(raw).map_err(|e| DecodeError::Envelope(e.to_string()))?;
    let jobs = if env.message_type == JOB_MESSAGES {
        decode_body(env.body.as_deref().unwrap_or(""))
    } else {
        Vec::new()
    };
    Ok(Some(Message {
        id: env.message_id,
        statistics: env.statistics,
        jobs,
    }))
}

/// The body is a JSON string whose content is a JSON array (decoded a second time).
fn decode_body(body: &str) -> Vec<JobMessage> {
    let body = body.trim_start_matches('\u{feff}').trim();
    if body.is_empty() {
        return Vec::new();
    }
    let Ok(items) = serde_json::from_str::<Vec<serde_json::Value>>(body) else {
        tracing::warn!("ignoring a job message body that is not a JSON array");
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|v| serde_json::from_value::<Element>(v).ok())
        .filter_map(|e| {
            let id = e.runner_request_id;
            let key = JobKey::of(id, e.job_id.as_deref());
            match e.message_type.as_str() {
                "JobAvailable" => Some(JobMessage::Available {
                    runner_request_id: id,
                }),
                "JobAssigned" => Some(JobMessage::Assigned {
                    runner_request_id: id,
                    key,
                    queued_at: e.queued_at(),
                }),
                "JobStarted" => Some(JobMessage::Started {
                    runner_request_id: id,
                    key,
                    identity: e.identity(),
                    runner_name: e.runner_name.unwrap_or_default(),
                }),
                "JobCompleted" => Some(JobMessage::Completed {
                    runner_request_id: id,
                    key,
                    runner_name: e.runner_name.unwrap_or_default(),
                    result: e.result.unwrap_or_default(),
                }),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(body: &str) -> Vec<u8> {
        serde_json::json!({
            "messageId": 42,
            "messageType": JOB_MESSAGES,
            "statistics": {"totalAssignedJobs": 3, "totalRunningJobs": 1},
            "body": body,
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn decodes_bom_and_double_encoded_body() {
        let body = r#"[{"messageType":"JobAvailable","runnerRequestId":7,"acquireJobUrl":"x"},
                       {"messageType":"JobStarted","runnerRequestId":8,"runnerName":"r-1","runnerId":3},
                       {"messageType":"JobCompleted","runnerRequestId":9,"runnerName":"r-2","result":"succeeded"},
                       {"messageType":"JobAssigned","runnerRequestId":10},
                       {"messageType":"SomethingNew","runnerRequestId":11},
                       42]"#;
        let mut raw = vec![0xEF, 0xBB, 0xBF];
        raw.extend(envelope(body));
        let m = decode(&raw).unwrap().unwrap();
        assert_eq!(m.id, 42);
        assert_eq!(m.statistics.unwrap().total_assigned_jobs, 3);
        assert_eq!(
            m.jobs,
            vec![
                JobMessage::Available { runner_request_id: 7 },
                JobMessage::Started {
                    runner_request_id: 8,
                    key: JobKey::Request(8),
                    runner_name: "r-1".into(),
                    identity: JobIdentity::default(),
                },
                JobMessage::Completed {
                    runner_request_id: 9,
                    key: JobKey::Request(9),
                    runner_name: "r-2".into(),
                    result: "succeeded".into()
                },
                JobMessage::Assigned {
                    runner_request_id: 10,
                    key: JobKey::Request(10),
                    queued_at: None,
                },
            ]
        );
        assert_eq!(m.available_ids(), vec![7]);
    }

    #[test]
    fn job_assigned_carries_its_queue_time_and_the_zero_time_is_none() {
        let body = r#"[{"messageType":"JobAssigned","runnerRequestId":1,"queueTime":"2026-03-04T05:06:07Z"},
                       {"messageType":"JobAssigned","runnerRequestId":2,"queueTime":"0001-01-01T00:00:00Z"},
                       {"messageType":"JobAssigned","runnerRequestId":3}]"#;
        let m = decode(&envelope(body)).expect("decodes").expect("a message");
        let queued: Vec<_> = m
            .jobs
            .iter()
            .map(|j| match j {
                JobMessage::Assigned { queued_at, .. } => queued_at.map(|t| t.to_string()),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(queued, [Some("2026-03-04T05:06:07Z".to_owned()), None, None]);
    }

    /// Jobs whose `JobAssigned` all carry `runnerRequestId` 0 (as captured from github.com's
    /// newer backend, see [`JobKey`]) stay apart by `jobId`, and each leaves the waiting list
    /// when its own `JobStarted` or `JobCompleted` arrives.
    #[test]
    fn jobs_are_followed_by_job_id_when_request_ids_do_not_tell_them_apart() {
        use super::super::activity::RunnerActivity;
        let body = r#"[{"messageType":"JobAssigned","runnerRequestId":0,"jobId":"bd59f43d-2e1a-567a-b5a4-c147b94d0766"},
                       {"messageType":"JobAssigned","runnerRequestId":0,"jobId":"0a1b2c3d-0000-4000-8000-000000000002"},
                       {"messageType":"JobAssigned","runnerRequestId":0,"jobId":"0a1b2c3d-0000-4000-8000-000000000003"},
                       {"messageType":"JobStarted","runnerRequestId":0,"jobId":"0a1b2c3d-0000-4000-8000-000000000002","runnerName":"r-2"},
                       {"messageType":"JobCompleted","runnerRequestId":0,"jobId":"0a1b2c3d-0000-4000-8000-000000000003","result":"canceled"}]"#;
        let m = decode(&envelope(body)).expect("decodes").expect("a message");
        let mut a = RunnerActivity::default();
        for j in &m.jobs {
            a.track_request(j);
        }
        let waiting: Vec<String> = a.waiting_requests().map(|(k, _)| k.to_string()).collect();
        assert_eq!(waiting, ["bd59f43d-2e1a-567a-b5a4-c147b94d0766"]);
    }

    #[test]
    fn tolerates_empty_and_odd_envelopes() {
        assert_eq!(decode(b"").unwrap(), None);
        assert_eq!(decode(b"\xEF\xBB\xBF  ").unwrap(), None);
        assert!(decode(b"{not json").is_err());
        let m =
            decode(br#"{"messageId":1,"messageType":"Other","body":"[{\"messageType\":\"JobAvailable\"}]"}"#)
                .unwrap()
                .unwrap();
        assert!(m.jobs.is_empty(), "only job-message envelopes carry jobs");
        let m = decode(&envelope("")).unwrap().unwrap();
        assert!(m.jobs.is_empty());
        let m = decode(&envelope("not an array")).unwrap().unwrap();
        assert!(m.jobs.is_empty());
        let m = decode(br#"{"messageId":5,"messageType":"RunnerScaleSetJobMessages","statistics":null}"#)
            .unwrap()
            .unwrap();
        assert_eq!(m.statistics, None);
    }

    #[test]
    fn job_started_carries_the_job_identity() {
        let body = r#"[{"messageType":"JobStarted","runnerRequestId":8,"runnerName":"r-1","runnerId":3,
                        "repositoryName":"hello","ownerName":"octo","jobId":"c0ffee",
                        "jobWorkflowRef":"octo/hello/.github/workflows/ci.yml@refs/heads/main",
                        "jobDisplayName":"build (linux)","workflowRunId":4242,"eventName":"push",
                        "queueTime":"2026-01-01T00:00:00Z"},
                       {"messageType":"JobStarted","runnerRequestId":9,"runnerName":"r-2",
                        "repositoryName":"","workflowRunId":0}]"#;
        let m = decode(&envelope(body)).unwrap().unwrap();
        let ids: Vec<&JobIdentity> = m
            .jobs
            .iter()
            .filter_map(|j| match j {
                JobMessage::Started { identity, .. } => Some(identity),
                _ => None,
            })
            .collect();
        assert_eq!(
            ids[0],
            &JobIdentity {
                repository: Some("octo/hello".into()),
                workflow: Some("octo/hello/.github/workflows/ci.yml@refs/heads/main".into()),
                run_id: Some("4242".into()),
                job_name: Some("build (linux)".into()),
                job_id: Some("c0ffee".into()),
            }
        );
        assert!(ids[1].is_empty(), "empty strings and a zero run id tell nothing");
    }
}
