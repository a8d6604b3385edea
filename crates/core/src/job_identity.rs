//! Which forge job a runner runs: repository, workflow, run, job name and id, as annotations
//! on the runner's Job and pod and as fields of the operator's log lines about that runner.
//!
//! The values come from the forge (job messages, job listings), so they are sanitised before
//! they reach an annotation or a log line: control characters dropped, length bounded, and
//! anything that looks like a credential in a URL removed.

use std::collections::BTreeMap;

/// Annotation holding the job's repository (`owner/repo`).
pub const JOB_REPOSITORY_ANNOTATION: &str = "forgerunner.dev/job-repository";
/// Annotation holding the job's workflow (GitHub: the workflow ref; Gitea: the run URL).
pub const JOB_WORKFLOW_ANNOTATION: &str = "forgerunner.dev/job-workflow";
/// Annotation holding the forge's workflow run id.
pub const JOB_RUN_ID_ANNOTATION: &str = "forgerunner.dev/job-run-id";
/// Annotation holding the job's display name.
pub const JOB_NAME_ANNOTATION: &str = "forgerunner.dev/job-name";
/// Annotation holding the forge's job id.
pub const JOB_ID_ANNOTATION: &str = "forgerunner.dev/job-id";

/// Longest annotation value we write; forge names are short, a bound keeps a hostile or broken
/// forge from bloating every runner object (the API server limits all annotations to 256 KiB).
pub const MAX_VALUE_CHARS: usize = 256;

/// What the forge tells about the job a runner runs (or was created for). Every field is
/// optional: each forge fills what it knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobIdentity {
    /// Repository, `owner/repo`.
    pub repository: Option<String>,
    /// Workflow (GitHub: `owner/repo/.github/workflows/file.yml@ref`).
    pub workflow: Option<String>,
    /// Workflow run id.
    pub run_id: Option<String>,
    /// Job display name.
    pub job_name: Option<String>,
    /// Forge job id.
    pub job_id: Option<String>,
}

impl JobIdentity {
    /// Whether the forge told nothing at all.
    pub fn is_empty(&self) -> bool {
        self.fields().iter().all(|(_, v)| v.is_none())
    }

    fn fields(&self) -> [(&'static str, &Option<String>); 5] {
        [
            (JOB_REPOSITORY_ANNOTATION, &self.repository),
            (JOB_WORKFLOW_ANNOTATION, &self.workflow),
            (JOB_RUN_ID_ANNOTATION, &self.run_id),
            (JOB_NAME_ANNOTATION, &self.job_name),
            (JOB_ID_ANNOTATION, &self.job_id),
        ]
    }

    /// The identity with every value sanitised ([`sanitize`]); values that end up empty are
    /// dropped.
    pub fn sanitized(&self) -> JobIdentity {
        let clean = |v: &Option<String>| v.as_deref().and_then(sanitize);
        JobIdentity {
            repository: clean(&self.repository),
            workflow: clean(&self.workflow),
            run_id: clean(&self.run_id),
            job_name: clean(&self.job_name),
            job_id: clean(&self.job_id),
        }
    }

    /// The annotations for this identity, values sanitised.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.sanitized()
            .fields()
            .into_iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.to_owned(), v)))
            .collect()
    }

    /// Reads the identity back from a runner's annotations (for log lines about the runner).
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> JobIdentity {
        let get = |k: &str| annotations.get(k).cloned();
        JobIdentity {
            repository: get(JOB_REPOSITORY_ANNOTATION),
            workflow: get(JOB_WORKFLOW_ANNOTATION),
            run_id: get(JOB_RUN_ID_ANNOTATION),
            job_name: get(JOB_NAME_ANNOTATION),
            job_id: get(JOB_ID_ANNOTATION),
        }
    }

    /// Whether `annotations` already carry every value of this identity (nothing to patch).
    pub fn recorded_in(&self, annotations: &BTreeMap<String, String>) -> bool {
        self.annotations()
            .iter()
            .all(|(k, v)| annotations.get(k) == Some(v))
    }
}

/// A forge value made fit for an annotation and a log line: control characters removed,
/// whitespace trimmed, `user:password@` stripped from URLs, at most [`MAX_VALUE_CHARS`]
/// characters. `None` when nothing is left.
pub fn sanitize(raw: &str) -> Option<String> {
    let no_control: String = raw.chars().filter(|c| !c.is_control()).collect();
    let cleaned = strip_url_userinfo(no_control.trim());
    let bounded: String = cleaned.chars().take(MAX_VALUE_CHARS).collect();
    let bounded = bounded.trim().to_owned();
    (!bounded.is_empty()).then_some(bounded)
}

/// Removes the `userinfo@` part of a URL, which may hold a token (`https://x:TOKEN@host/…`).
fn strip_url_userinfo(s: &str) -> String {
    let Some(scheme_end) = s.find("://") else {
        return s.to_owned();
    };
    let rest = &s[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &s[..scheme_end + 3], &rest[at + 1..]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> JobIdentity {
        JobIdentity {
            repository: Some("octo/hello".into()),
            workflow: Some("octo/hello/.github/workflows/ci.yml@refs/heads/main".into()),
            run_id: Some("77".into()),
            job_name: Some("build (linux)".into()),
            job_id: Some("9f2c".into()),
        }
    }

    #[test]
    fn maps_each_field_to_its_annotation() {
        let a = full().annotations();
        assert_eq!(a[JOB_REPOSITORY_ANNOTATION], "octo/hello");
        assert_eq!(
            a[JOB_WORKFLOW_ANNOTATION],
            "octo/hello/.github/workflows/ci.yml@refs/heads/main"
        );
        assert_eq!(a[JOB_RUN_ID_ANNOTATION], "77");
        assert_eq!(a[JOB_NAME_ANNOTATION], "build (linux)");
        assert_eq!(a[JOB_ID_ANNOTATION], "9f2c");
        assert_eq!(JobIdentity::from_annotations(&a), full());
        assert!(full().recorded_in(&a));
    }

    #[test]
    fn unknown_fields_are_left_out() {
        let id = JobIdentity {
            job_name: Some("test".into()),
            ..JobIdentity::default()
        };
        let a = id.annotations();
        assert_eq!(a.len(), 1);
        assert!(!id.is_empty());
        assert!(JobIdentity::default().is_empty());
        assert!(JobIdentity::default().annotations().is_empty());
    }

    #[test]
    fn values_are_sanitised() {
        assert_eq!(sanitize("  build\n\u{7}x\t "), Some("buildx".into()));
        assert_eq!(sanitize(" \n "), None);
        let long = "é".repeat(MAX_VALUE_CHARS + 50);
        assert_eq!(sanitize(&long).map(|s| s.chars().count()), Some(MAX_VALUE_CHARS));
        assert_eq!(
            sanitize("https://x-access-token:ghs_SECRET@example.com/o/r/actions/runs/1"),
            Some("https://example.com/o/r/actions/runs/1".into())
        );
        assert_eq!(
            sanitize("https://example.com/o/r@main"),
            Some("https://example.com/o/r@main".into())
        );
        assert_eq!(
            sanitize("o/r/.github/w.yml@refs/heads/x"),
            Some("o/r/.github/w.yml@refs/heads/x".into())
        );
    }

    #[test]
    fn a_changed_value_is_not_recorded() {
        let mut a = full().annotations();
        a.insert(JOB_RUN_ID_ANNOTATION.into(), "76".into());
        assert!(!full().recorded_in(&a));
        assert!(JobIdentity::default().recorded_in(&BTreeMap::new()));
    }
}
