//! The `workflow_job` webhook fast path: signature check and payload parsing (pure).
//!
//! Webhooks are a latency path, not the truth: a verified delivery is accounted against the
//! cached listing until the next one and the matching groups reconcile at once; polling stays
//! the source of truth (deliveries can be lost, late or out of order).

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use forgerunner_core::job_identity::JobIdentity;

use crate::scope::Scope;
use crate::types::{JobStatus, job_identity};

/// Header carrying the hex HMAC-SHA256 of the raw body.
pub const SIGNATURE_HEADER: &str = "X-Gitea-Signature";
/// Header naming the event (`workflow_job`).
pub const EVENT_HEADER: &str = "X-Gitea-Event";
/// The event name this module understands.
pub const WORKFLOW_JOB_EVENT: &str = "workflow_job";

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    s.chunks(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

/// Whether `header` (the `X-Gitea-Signature` value, hex; a `sha256=` prefix as in
/// `X-Hub-Signature-256` is accepted too) is the HMAC-SHA256 of `body` keyed by `secret`.
/// The comparison is constant-time; an empty secret never verifies.
pub fn verify_signature(secret: &[u8], body: &[u8], header: &str) -> bool {
    if secret.is_empty() {
        return false;
    }
    let hex = header.trim();
    let hex = hex.strip_prefix("sha256=").unwrap_or(hex);
    let Some(expected) = decode_hex(hex) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// Hex HMAC-SHA256 of `body` (what Gitea puts in `X-Gitea-Signature`); for senders and tests.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut out = String::with_capacity(64);
    if let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) {
        mac.update(body);
        for b in mac.finalize().into_bytes() {
            out.push_str(&format!("{b:02x}"));
        }
    }
    out
}

/// The parts of a `workflow_job` delivery the operator needs to pick groups and to account
/// the job until the next listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkflowJobEvent {
    /// The job's status at the change (`queued` is new demand).
    pub action: JobStatus,
    /// Job id.
    pub job_id: i64,
    /// Attempt of the job (a re-run keeps the id and raises the attempt); 0 when absent.
    pub run_attempt: i64,
    /// The job's `runs-on` names.
    pub labels: Vec<String>,
    /// Runner that took the job (`in_progress`, `completed`); empty when none (or deleted).
    pub runner_name: String,
    /// When the forge queued the job, when the payload says (the latency from the queue on).
    pub created_at: Option<jiff::Timestamp>,
    /// Workflow run id; 0 when absent.
    pub run_id: i64,
    /// Job name; empty when absent.
    pub job_name: String,
    /// Repository owner login.
    pub owner: String,
    /// Repository name.
    pub repo: String,
    /// Organization login, when the repository belongs to one.
    pub organization: Option<String>,
}

impl WorkflowJobEvent {
    /// Whether a group at `scope` can see this job (same owner/repo rules as runners).
    pub fn in_scope(&self, scope: &Scope) -> bool {
        scope.contains_repo(&self.owner, &self.repo)
    }

    /// The job's identity for the annotations of the runner that took it.
    pub fn identity(&self) -> JobIdentity {
        job_identity(
            Some(format!("{}/{}", self.owner, self.repo)),
            self.run_id,
            &self.job_name,
            self.job_id,
        )
    }
}

/// Why a payload could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Not JSON of the `workflow_job` shape.
    #[error("not a workflow_job payload: {0}")]
    Malformed(String),
}

#[derive(Deserialize)]
struct Login {
    #[serde(default)]
    login: String,
}

/// A payload's `organization`: Gitea's `structs.Organization` (`modules/structs/org.go`) names
/// it `username` (and `name`); it has no `login`.
#[derive(Deserialize)]
struct Org {
    #[serde(default)]
    username: String,
    #[serde(default)]
    name: String,
}

impl Org {
    /// The organization's name, `None` when the payload gives none.
    fn into_name(self) -> Option<String> {
        [self.username, self.name].into_iter().find(|n| !n.is_empty())
    }
}

#[derive(Deserialize)]
struct Repository {
    #[serde(default)]
    name: String,
    #[serde(default)]
    full_name: String,
    owner: Option<Login>,
}

#[derive(Deserialize)]
struct Job {
    id: i64,
    #[serde(default)]
    labels: Option<Vec<String>>,
    #[serde(default)]
    run_attempt: Option<i64>,
    #[serde(default)]
    runner_name: Option<String>,
    #[serde(default, deserialize_with = "crate::types::timestamp")]
    created_at: Option<jiff::Timestamp>,
    #[serde(default)]
    run_id: Option<i64>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct Payload {
    action: String,
    workflow_job: Job,
    repository: Repository,
    #[serde(default)]
    organization: Option<Org>,
}

/// Owner and name of a payload's repository: `owner.login` and `name`, else `full_name`.
fn owner_and_name(r: Repository) -> Result<(String, String), WebhookError> {
    let (owner, repo) = match (r.owner, r.full_name.split_once('/')) {
        (Some(o), _) if !o.login.is_empty() => (o.login, r.name),
        (_, Some((o, n))) => (o.to_string(), n.to_string()),
        _ => return Err(WebhookError::Malformed("repository has no owner".into())),
    };
    if repo.is_empty() {
        return Err(WebhookError::Malformed("repository has no name".into()));
    }
    Ok((owner, repo))
}

/// Where a delivery comes from, read before its signature is checked so that only the secrets
/// of groups that can see it are tried. Untrusted until the signature verifies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryOrigin {
    /// Repository owner (or the organization of an organization-level event).
    pub owner: String,
    /// Repository name; `None` for events about an organization only.
    pub repo: Option<String>,
}

impl DeliveryOrigin {
    /// Whether a group at `scope` may own the webhook this delivery came from.
    pub fn in_scope(&self, scope: &Scope) -> bool {
        match (&self.repo, scope) {
            (Some(repo), _) => scope.contains_repo(&self.owner, repo),
            (None, Scope::Global) => true,
            (None, Scope::Org(o) | Scope::User(o)) => *o == self.owner,
            (None, Scope::Repo { .. }) => false,
        }
    }
}

#[derive(Deserialize)]
struct OriginPayload {
    #[serde(default)]
    repository: Option<Repository>,
    #[serde(default)]
    organization: Option<Org>,
}

/// Reads the origin of any event payload (`repository`, else `organization`); `None` when it
/// names neither. Costs one JSON parse of a body already capped in size; never panics.
pub fn delivery_origin(body: &[u8]) -> Option<DeliveryOrigin> {
    let p: OriginPayload = serde_json::from_slice(body).ok()?;
    match (p.repository, p.organization) {
        (Some(r), _) => owner_and_name(r).ok().map(|(owner, repo)| DeliveryOrigin {
            owner,
            repo: Some(repo),
        }),
        (None, Some(o)) => o.into_name().map(|owner| DeliveryOrigin { owner, repo: None }),
        _ => None,
    }
}

/// Parses a `workflow_job` payload. Never panics on bad input.
pub fn parse_workflow_job(body: &[u8]) -> Result<WorkflowJobEvent, WebhookError> {
    let p: Payload = serde_json::from_slice(body).map_err(|e| WebhookError::Malformed(e.to_string()))?;
    let (owner, repo) = owner_and_name(p.repository)?;
    Ok(WorkflowJobEvent {
        action: JobStatus::from_api(&p.action),
        job_id: p.workflow_job.id,
        run_attempt: p.workflow_job.run_attempt.unwrap_or_default(),
        labels: p.workflow_job.labels.unwrap_or_default(),
        runner_name: p.workflow_job.runner_name.unwrap_or_default(),
        created_at: p.workflow_job.created_at,
        run_id: p.workflow_job.run_id.unwrap_or_default(),
        job_name: p.workflow_job.name.unwrap_or_default(),
        owner,
        repo,
        organization: p.organization.and_then(Org::into_name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_round_trip_and_rejections() {
        let body = br#"{"action":"queued"}"#;
        let sig = sign(b"s3cret", body);
        assert_eq!(sig.len(), 64);
        assert!(verify_signature(b"s3cret", body, &sig));
        assert!(verify_signature(b"s3cret", body, &sig.to_uppercase()));
        assert!(verify_signature(b"s3cret", body, &format!("sha256={sig}")));
        assert!(!verify_signature(b"other", body, &sig));
        assert!(!verify_signature(b"s3cret", b"{}", &sig));
        assert!(!verify_signature(b"", body, &sign(b"", body)));
        for bad in ["", "zz", "abc", &sig[..62], "ü", "sha256="] {
            assert!(!verify_signature(b"s3cret", body, bad), "{bad:?}");
        }
    }

    #[test]
    fn known_vector() {
        // RFC 4231 test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn parses_payloads() {
        let body = br#"{"action":"queued","workflow_job":{"id":42,"labels":["linux","gpu"],"steps":null,
            "status":"queued","run_attempt":2,"created_at":"2026-11-24T10:00:00Z","run_id":7,
            "name":"build (linux)"},"repository":{"id":1,"name":"app","full_name":"acme/app",
            "owner":{"login":"acme"}},"organization":{"username":"acme"},"sender":{"login":"bob"}}"#;
        let e = parse_workflow_job(body).unwrap();
        assert_eq!(e.action, JobStatus::Queued);
        assert_eq!(e.job_id, 42);
        assert_eq!(e.labels, ["linux", "gpu"]);
        assert_eq!(e.run_attempt, 2);
        assert_eq!(e.runner_name, "");
        assert_eq!(
            e.created_at.map(|t| t.to_string()).as_deref(),
            Some("2026-11-24T10:00:00Z")
        );
        assert_eq!((e.owner.as_str(), e.repo.as_str()), ("acme", "app"));
        let id = e.identity();
        assert_eq!(id.repository.as_deref(), Some("acme/app"));
        assert_eq!(id.run_id.as_deref(), Some("7"));
        assert_eq!(id.job_name.as_deref(), Some("build (linux)"));
        assert_eq!(id.job_id.as_deref(), Some("42"));
        assert_eq!(e.organization.as_deref(), Some("acme"));
        assert!(e.in_scope(&Scope::Org("acme".into())));
        assert!(!e.in_scope(&Scope::Org("other".into())));

        let no_owner =
            br#"{"action":"completed","workflow_job":{"id":1,"labels":null,"runner_name":"g-ab12c",
            "created_at":"1970-01-01T00:00:00Z"},
            "repository":{"name":"r","full_name":"u/r"}}"#;
        let e = parse_workflow_job(no_owner).unwrap();
        assert_eq!(e.action, JobStatus::Completed);
        assert!(e.labels.is_empty());
        assert_eq!(e.runner_name, "g-ab12c");
        assert_eq!(e.run_attempt, 0);
        assert_eq!(e.created_at, None, "Gitea's unset time is no queue time");
        assert_eq!((e.identity().run_id, e.identity().job_name), (None, None));
        assert_eq!(e.owner, "u");
        assert_eq!(e.organization, None);
    }

    #[test]
    fn origin_of_repository_and_organization_events() {
        let repo_event = br#"{"repository":{"name":"app","full_name":"acme/app","owner":{"login":"acme"}},
            "organization":{"username":"acme"}}"#;
        let o = delivery_origin(repo_event).unwrap();
        assert_eq!((o.owner.as_str(), o.repo.as_deref()), ("acme", Some("app")));
        assert!(o.in_scope(&Scope::Global));
        assert!(o.in_scope(&Scope::Org("acme".into())));
        assert!(!o.in_scope(&Scope::Org("other".into())));
        let repo = |owner: &str, name: &str| Scope::Repo {
            owner: owner.into(),
            name: name.into(),
        };
        assert!(o.in_scope(&repo("acme", "app")));
        assert!(!o.in_scope(&repo("acme", "web")));

        let org_event = br#"{"organization":{"username":"acme"}}"#;
        let o = delivery_origin(org_event).unwrap();
        assert_eq!(o.repo, None);
        assert!(o.in_scope(&Scope::Org("acme".into())));
        assert!(o.in_scope(&Scope::Global));
        assert!(!o.in_scope(&repo("acme", "app")));

        for bad in [
            &b""[..],
            b"[]",
            b"{}",
            b"{\"repository\":{\"name\":\"x\"}}",
            b"\xff",
        ] {
            assert_eq!(delivery_origin(bad), None);
        }
    }

    #[test]
    fn bad_payloads_are_errors_not_panics() {
        for bad in [
            &b""[..],
            b"null",
            b"[]",
            b"{\"action\":\"queued\"}",
            b"{\"action\":1,\"workflow_job\":{\"id\":1},\"repository\":{}}",
            b"{\"action\":\"queued\",\"workflow_job\":{\"id\":1},\"repository\":{\"name\":\"x\"}}",
            b"\xff\xfe",
        ] {
            assert!(parse_workflow_job(bad).is_err());
        }
    }
}
