//! Runner labels as Gitea's and Forgejo's runners both write them, `name[:scheme[:argument]]`,
//! and the rule both forges use to hand a job to a runner.
//!
//! What is the same for both lives here: a label is split on its first two `:`, its name must
//! be a clean token (no surrounding space, no comma: runners receive the list comma-separated),
//! names are unique within a group, and a runner can take a job when every `runs-on` entry of
//! the job is one of its label *names*, compared exactly (runners register names only). What a
//! scheme means (`host`, `docker://image`, `lxc://…`, and the default when none is given)
//! differs per forge, so each backend interprets the scheme part itself.

use std::collections::BTreeSet;

/// The parts of one label: `name[:scheme[:argument]]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabelParts<'a> {
    /// The name jobs refer to in `runs-on`.
    pub name: &'a str,
    /// The text after the first `:`, if any.
    pub scheme: Option<&'a str>,
    /// The text after the second `:`, if any.
    pub argument: Option<&'a str>,
}

/// Why a label string is not a valid runner label.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// The name part is empty (`""`, `":host"`).
    #[error("label {0:?} has an empty name")]
    EmptyName(String),
    /// The name has leading/trailing whitespace or contains a comma (the env list separator).
    #[error("label {0:?} has whitespace around its name or contains a comma")]
    BadName(String),
    /// The scheme is not one this forge's runner knows.
    #[error("label {0:?} has an unknown scheme")]
    UnknownSchema(String),
    /// The scheme's argument is missing or malformed.
    #[error("label {0:?} has a malformed scheme argument")]
    BadArgument(String),
    /// The same name appears twice in one group.
    #[error("label name {0:?} appears more than once")]
    Duplicate(String),
}

/// Splits a label on its first two `:` and checks its name.
pub fn split_label(raw: &str) -> Result<LabelParts<'_>, LabelError> {
    let mut parts = raw.splitn(3, ':');
    let name = parts.next().unwrap_or_default();
    if name.is_empty() {
        return Err(LabelError::EmptyName(raw.to_string()));
    }
    if name.contains(',') || name.chars().any(char::is_whitespace) {
        return Err(LabelError::BadName(raw.to_string()));
    }
    Ok(LabelParts {
        name,
        scheme: parts.next(),
        argument: parts.next(),
    })
}

/// A group's labels, parsed once: each name with what the forge made of its scheme (`S`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSet<S> {
    labels: Vec<(String, S)>,
    names: BTreeSet<String>,
}

impl<S> LabelSet<S> {
    /// Parses every label of a group with the forge's `scheme` reading; a malformed label or a
    /// repeated name is an error.
    pub fn parse<R: AsRef<str>>(
        raw: &[R],
        scheme: impl Fn(&LabelParts<'_>, &str) -> Result<S, LabelError>,
    ) -> Result<LabelSet<S>, LabelError> {
        let mut labels = Vec::with_capacity(raw.len());
        let mut names = BTreeSet::new();
        for r in raw {
            let r = r.as_ref();
            let parts = split_label(r)?;
            let s = scheme(&parts, r)?;
            if !names.insert(parts.name.to_owned()) {
                return Err(LabelError::Duplicate(parts.name.to_owned()));
            }
            labels.push((parts.name.to_owned(), s));
        }
        Ok(LabelSet { labels, names })
    }

    /// The labels in spec order: name and the forge's reading of its scheme.
    pub fn labels(&self) -> &[(String, S)] {
        &self.labels
    }

    /// The label names a runner of this group registers with.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// A runner with these labels can take a job when every `runs-on` entry of the job is one
    /// of its names (exact, case-sensitive). An empty `runs-on` matches.
    pub fn matches<R: AsRef<str>>(&self, runs_on: &[R]) -> bool {
        runs_on.iter().all(|l| self.names.contains(l.as_ref()))
    }
}

/// Whether a runner whose label *names* are `runner_names` can take a job with `runs_on`.
pub fn runner_can_take<S: AsRef<str>, T: AsRef<str>>(runner_names: &[S], runs_on: &[T]) -> bool {
    runs_on
        .iter()
        .all(|l| runner_names.iter().any(|n| n.as_ref() == l.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_only(raw: &[&str]) -> Result<LabelSet<()>, LabelError> {
        LabelSet::parse(raw, |_, _| Ok(()))
    }

    #[test]
    fn split_on_the_first_two_colons() {
        let p = split_label("gpu:docker://registry.local:5000/cuda:12").expect("valid");
        assert_eq!(p.name, "gpu");
        assert_eq!(p.scheme, Some("docker"));
        assert_eq!(p.argument, Some("//registry.local:5000/cuda:12"));
        let p = split_label("linux").expect("valid");
        assert_eq!((p.scheme, p.argument), (None, None));
        for (raw, want) in [
            ("", LabelError::EmptyName(String::new())),
            (":host", LabelError::EmptyName(":host".into())),
            (" linux", LabelError::BadName(" linux".into())),
            ("a,b", LabelError::BadName("a,b".into())),
            ("my label", LabelError::BadName("my label".into())),
        ] {
            assert_eq!(split_label(raw), Err(want), "{raw:?}");
        }
    }

    #[test]
    fn set_rejects_duplicate_names_even_with_different_schemes() {
        let err = names_only(&["linux:host", "linux:docker://alpine"]).expect_err("duplicate");
        assert_eq!(err, LabelError::Duplicate("linux".into()));
        assert!(names_only(&["a", "bad label"]).is_err());
    }

    #[test]
    fn matching_table() {
        let set = names_only(&["ubuntu-latest:docker://node:20", "linux:host", "gpü"]).expect("valid");
        let cases: &[(&[&str], bool)] = &[
            (&[], true),
            (&["ubuntu-latest"], true),
            (&["ubuntu-latest", "linux"], true),
            (&["ubuntu-latest", "ubuntu-latest"], true),
            (&["gpü"], true),
            (&["Ubuntu-latest"], false),
            (&["ubuntu-latest:docker://node:20"], false),
            (&["ubuntu"], false),
            (&["ubuntu-latest", "windows"], false),
            (&["gpu"], false),
            (&[""], false),
            (&[" linux"], false),
        ];
        for (runs_on, want) in cases {
            assert_eq!(set.matches(runs_on), *want, "{runs_on:?}");
            let names: Vec<&str> = set.names().collect();
            assert_eq!(runner_can_take(&names, runs_on), *want, "{runs_on:?}");
        }
    }

    #[test]
    fn no_default_labels_are_added() {
        let set = names_only(&["self-hosted"]).expect("valid");
        assert_eq!(set.names().collect::<Vec<_>>(), vec!["self-hosted"]);
        assert!(!set.matches(&["ubuntu-latest"]));
    }
}
