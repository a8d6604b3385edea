//! The `workflow_job` webhook fast path: signature check and payload parsing (pure).
//!
//! Webhooks are a latency path, not the truth: a verified delivery is accounted against the
//! cached listing until the next one and the matching groups reconcile at once; polling stays
//! the source of truth (deliveries can be lost, late or out of order).

use std::fmt;

use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use sha2::Sha256;

use forgerunner_core::job_identity::JobIdentity;
use forgerunner_core::validate::{MAX_LABEL_LEN, MAX_LABELS};

use crate::scope::{Scope, contains_repo, same_name};
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

/// A job's `runs-on` names as a delivery tells them, kept only while some group could serve
/// them.
///
/// A group has at most [`MAX_LABELS`] labels of at most [`MAX_LABEL_LEN`] characters (the
/// bounds of the RunnerGroup schema), and it serves a job only when it has every name the job
/// asks for. So a job asking for more distinct names, or for a longer one, is no group's demand:
/// its names are not kept at all, and a verified body of up to 1 MiB cannot make the operator
/// hold (or decode into) more than the schema's bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunsOn(Option<Vec<String>>);

impl Default for RunsOn {
    /// No names: a job that asks for none.
    fn default() -> RunsOn {
        RunsOn(Some(Vec::new()))
    }
}

impl RunsOn {
    /// The names, deduplicated in order, or no group's demand if they exceed the bounds.
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> RunsOn {
        let mut kept = RunsOn(Some(Vec::new()));
        for n in names {
            if !kept.push(n.as_ref()) {
                break;
            }
        }
        kept
    }

    /// Adds `name`; `false` once the names exceed what a group can have (then none are kept).
    fn push(&mut self, name: &str) -> bool {
        let Some(names) = &mut self.0 else {
            return false;
        };
        if names.iter().any(|n| n == name) {
            return true;
        }
        if too_long(name) || names.len() >= MAX_LABELS {
            self.0 = None;
            return false;
        }
        names.push(name.to_owned());
        true
    }

    /// The names, `None` when they exceed what any group can have.
    pub fn names(&self) -> Option<&[String]> {
        self.0.as_deref()
    }

    /// Whether a group whose labels accept names when `serves` says so can serve the job.
    pub fn served_by(&self, serves: impl FnOnce(&[String]) -> bool) -> bool {
        self.names().is_some_and(serves)
    }

    /// Whether the job asks for no name at all (not: for too many).
    pub fn is_empty(&self) -> bool {
        self.names().is_some_and(<[String]>::is_empty)
    }

    /// Heap bytes held, for the memory bounds of the announced jobs.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |names| {
            names.capacity() * std::mem::size_of::<String>()
                + names.iter().map(String::capacity).sum::<usize>()
        })
    }
}

impl<'de> Deserialize<'de> for RunsOn {
    /// Reads `null` (Go's nil slice) or an array of strings, copying at most the names a group
    /// could serve: past the bounds the rest of the array is read but not kept.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RunsOn, D::Error> {
        d.deserialize_option(RunsOnVisitor)
    }
}

struct RunsOnVisitor;

impl<'de> Visitor<'de> for RunsOnVisitor {
    type Value = RunsOn;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null or an array of label names")
    }

    fn visit_none<E: de::Error>(self) -> Result<RunsOn, E> {
        Ok(RunsOn::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<RunsOn, E> {
        Ok(RunsOn::default())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<RunsOn, D::Error> {
        d.deserialize_seq(RunsOnVisitor)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RunsOn, A::Error> {
        let mut kept = RunsOn::default();
        while let Some(LabelName(name)) = seq.next_element()? {
            let fits = match name {
                Some(n) => kept.push(&n),
                None => {
                    kept.0 = None;
                    false
                }
            };
            if !fits {
                break;
            }
        }
        // Past the bounds: read the rest without keeping it (the array must still be valid).
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(kept)
    }
}

/// One `runs-on` name; `None` for one longer than any label can be, which is never copied.
struct LabelName(Option<String>);

impl<'de> Deserialize<'de> for LabelName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LabelName, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = LabelName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a label name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LabelName, E> {
                Ok(LabelName((!too_long(v)).then(|| v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// Whether `name` is longer than [`MAX_LABEL_LEN`] characters (bytes first: a cheap bound, as a
/// character takes at most 4 bytes).
fn too_long(name: &str) -> bool {
    name.len() > 4 * MAX_LABEL_LEN || name.chars().count() > MAX_LABEL_LEN
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
    /// The job's `runs-on` names, bounded ([`RunsOn`]).
    pub labels: RunsOn,
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
    /// Whether a group at `scope` can see this job, names compared as Gitea compares them
    /// ([`contains_repo`]).
    pub fn in_scope(&self, scope: &Scope) -> bool {
        contains_repo(scope, &self.owner, &self.repo)
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

/// A payload's `repository`: Gitea's `structs.Repository` (`modules/structs/repo.go`).
#[derive(Deserialize)]
struct Repository {
    #[serde(default)]
    name: String,
    #[serde(default)]
    full_name: String,
    owner: Option<Login>,
    /// The repository's page: the instance's URL, then `owner/name`.
    #[serde(default)]
    html_url: String,
}

#[derive(Deserialize)]
struct Job {
    id: i64,
    #[serde(default)]
    labels: RunsOn,
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
    /// The repository's `html_url`, which names the instance; empty when the payload has none.
    pub html_url: String,
}

impl DeliveryOrigin {
    /// Whether a group at `scope` may own the webhook this delivery came from, names compared
    /// as Gitea compares them. Says nothing about the instance ([`DeliveryOrigin::on_instance`]).
    pub fn in_scope(&self, scope: &Scope) -> bool {
        match (&self.repo, scope) {
            (Some(repo), _) => contains_repo(scope, &self.owner, repo),
            (None, Scope::Global) => true,
            (None, Scope::Org(o) | Scope::User(o)) => same_name(o, &self.owner),
            (None, Scope::Repo { .. }) => false,
        }
    }

    /// Whether this delivery comes from the instance a group reaches at `group_url`.
    ///
    /// A repository event must name it, by its repository's `html_url`: the group URL's
    /// scheme, host, port and sub-path, then `/owner/name`. An organization-only event cannot
    /// (Gitea's `structs.Organization`, `modules/structs/org.go`, carries no URL of its
    /// instance), so it is judged by its scope alone: it wakes nobody.
    pub fn on_instance(&self, group_url: &str) -> bool {
        match &self.repo {
            Some(repo) => crate::forge_webhook::on_instance(group_url, &self.html_url, &self.owner, repo),
            None => true,
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
        (Some(mut r), _) => {
            let html_url = std::mem::take(&mut r.html_url);
            owner_and_name(r).ok().map(|(owner, repo)| DeliveryOrigin {
                owner,
                repo: Some(repo),
                html_url,
            })
        }
        (None, Some(o)) => o.into_name().map(|owner| DeliveryOrigin {
            owner,
            repo: None,
            html_url: String::new(),
        }),
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
        labels: p.workflow_job.labels,
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
        assert_eq!(
            e.labels.names(),
            Some(&["linux".to_owned(), "gpu".to_owned()][..])
        );
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
        let repo_event = br#"{"repository":{"name":"app","full_name":"acme/app","owner":{"login":"acme"},
            "html_url":"https://git.example.com/acme/app"},"organization":{"username":"acme"}}"#;
        let o = delivery_origin(repo_event).unwrap();
        assert_eq!((o.owner.as_str(), o.repo.as_deref()), ("acme", Some("app")));
        assert_eq!(o.html_url, "https://git.example.com/acme/app");
        assert!(o.on_instance("https://git.example.com"));
        assert!(!o.on_instance("https://other.example.com"));
        assert!(o.in_scope(&Scope::Global));
        assert!(o.in_scope(&Scope::Org("acme".into())));
        assert!(
            o.in_scope(&Scope::Org("ACME".into())),
            "Gitea compares lower names"
        );
        assert!(!o.in_scope(&Scope::Org("other".into())));
        let repo = |owner: &str, name: &str| Scope::Repo {
            owner: owner.into(),
            name: name.into(),
        };
        assert!(o.in_scope(&repo("acme", "app")));
        assert!(!o.in_scope(&repo("acme", "web")));

        let no_url = br#"{"repository":{"name":"app","full_name":"acme/app"}}"#;
        let o = delivery_origin(no_url).unwrap();
        assert!(
            !o.on_instance("https://git.example.com"),
            "a repository event that names no instance is on none"
        );

        let org_event = br#"{"organization":{"username":"acme"}}"#;
        let o = delivery_origin(org_event).unwrap();
        assert_eq!(o.repo, None);
        assert!(o.in_scope(&Scope::Org("acme".into())));
        assert!(o.in_scope(&Scope::User("Acme".into())));
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

    fn labels_of(labels: &str) -> RunsOn {
        let body = format!(
            r#"{{"action":"queued","workflow_job":{{"id":1,"labels":{labels}}},
            "repository":{{"name":"app","full_name":"acme/app"}}}}"#
        );
        parse_workflow_job(body.as_bytes())
            .expect("a valid payload")
            .labels
    }

    /// Gitea copies a job's `runs-on` as written (`services/convert/convert.go`
    /// `ToActionWorkflowJob`: `Labels: job.RunsOn`), so a verified delivery can name any number
    /// of names of any length. Only what a group could serve is decoded and kept.
    #[test]
    fn labels_are_kept_within_the_schemas_bounds() {
        let names = |n: usize, len: usize| -> Vec<String> { (0..n).map(|i| format!("{i:0>len$}")).collect() };
        let json = |v: &[String]| serde_json::to_string(v).expect("json");
        let most = names(MAX_LABELS, MAX_LABEL_LEN);
        assert_eq!(labels_of(&json(&most)).names(), Some(&most[..]));
        assert_eq!(labels_of("null"), RunsOn::default());
        assert!(labels_of("[]").is_empty() && labels_of("null").is_empty());
        assert_eq!(
            labels_of(r#"["linux","linux","gpu"]"#).names(),
            Some(&["linux".to_owned(), "gpu".to_owned()][..]),
            "a name asked for twice is one name"
        );
        let mut many = most.clone();
        many.push("one-more".into());
        let long = names(1, MAX_LABEL_LEN + 1);
        let wide = vec!["é".repeat(MAX_LABEL_LEN + 1)];
        for over in [many, long, wide] {
            let l = labels_of(&json(&over));
            assert_eq!(l.names(), None, "{} names", over.len());
            assert!(!l.served_by(|_| true) && !l.is_empty() && l.heap_bytes() == 0);
        }
        // About 1 MiB of empty names: read through, nothing of it kept.
        let flood = format!("[{}\"\"]", "\"\",".repeat(350_000));
        assert_eq!(labels_of(&flood).names(), Some(&[String::new()][..]));
        let flood = format!(
            "[{}\"z\"]",
            (0..100_000).map(|i| format!("\"{i}\",")).collect::<String>()
        );
        assert_eq!(labels_of(&flood).names(), None);
        assert!(
            parse_workflow_job(
                br#"{"action":"queued","workflow_job":{"id":1,"labels":[1]},
            "repository":{"name":"app","full_name":"acme/app"}}"#
            )
            .is_err(),
            "names are strings"
        );
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
