//! act_runner labels (`name[:docker://image|:host]`) and Gitea's job/runner matching rule.
//!
//! Gitea stores only label *names* for a runner (act_runner strips the `:schema…` part before
//! registering) and hands a job to a runner when every `runs-on` label of the job is among those
//! names, compared exactly and case-sensitively. No default labels are ever added here: a group
//! claims only the jobs its own labels name.

use std::collections::BTreeSet;
use std::fmt;

/// How a runner executes a job for a label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelSchema {
    /// Steps run in a container of this image (`name:docker://image`).
    Docker {
        /// Image reference, without the `//` prefix.
        image: String,
    },
    /// Steps run directly in the runner's own container (`name:host`, or no schema at all,
    /// which act_runner treats as host).
    Host,
}

/// One parsed runner label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerLabel {
    /// The name jobs refer to in `runs-on`.
    pub name: String,
    /// The execution schema.
    pub schema: LabelSchema,
}

/// Why a label string is not a valid act_runner label.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// The name part is empty (`""`, `":host"`).
    #[error("label {0:?} has an empty name")]
    EmptyName(String),
    /// The name has leading/trailing whitespace or contains a comma (the env list separator).
    #[error("label {0:?} has whitespace around its name or contains a comma")]
    BadName(String),
    /// The schema is neither `docker` nor `host`.
    #[error("label {0:?} has an unknown schema (expected docker://image or host)")]
    UnknownSchema(String),
    /// `docker` without `//image`, or `host` with an argument.
    #[error("label {0:?} has a malformed schema argument (expected name:docker://image or name:host)")]
    BadArgument(String),
    /// The same name appears twice in one group.
    #[error("label name {0:?} appears more than once")]
    Duplicate(String),
}

impl fmt::Display for RunnerLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            LabelSchema::Docker { image } => write!(f, "{}:docker://{}", self.name, image),
            LabelSchema::Host => write!(f, "{}:host", self.name),
        }
    }
}

/// Parses one act_runner label: split on the first two `:`; schema `docker` needs `//image`,
/// `host` takes no argument, no schema means host.
pub fn parse_label(raw: &str) -> Result<RunnerLabel, LabelError> {
    let mut parts = raw.splitn(3, ':');
    let name = parts.next().unwrap_or_default();
    let schema = parts.next();
    let arg = parts.next();
    if name.is_empty() {
        return Err(LabelError::EmptyName(raw.to_string()));
    }
    if name.trim() != name || name.contains(',') || name.chars().any(char::is_whitespace) {
        return Err(LabelError::BadName(raw.to_string()));
    }
    let schema = match (schema, arg) {
        (None, _) => LabelSchema::Host,
        (Some("host"), None) => LabelSchema::Host,
        (Some("host"), Some(_)) => return Err(LabelError::BadArgument(raw.to_string())),
        (Some("docker"), Some(arg)) => match arg.strip_prefix("//") {
            Some(image) if !image.is_empty() && !image.contains(',') => LabelSchema::Docker {
                image: image.to_string(),
            },
            _ => return Err(LabelError::BadArgument(raw.to_string())),
        },
        (Some("docker"), None) => return Err(LabelError::BadArgument(raw.to_string())),
        (Some(_), _) => return Err(LabelError::UnknownSchema(raw.to_string())),
    };
    Ok(RunnerLabel {
        name: name.to_string(),
        schema,
    })
}

/// The label names of a group, parsed and checked once; used to match jobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSet {
    labels: Vec<RunnerLabel>,
    names: BTreeSet<String>,
}

impl LabelSet {
    /// Parses every label of a group; a malformed label or a repeated name is an error.
    pub fn parse<S: AsRef<str>>(raw: &[S]) -> Result<LabelSet, LabelError> {
        let mut labels = Vec::with_capacity(raw.len());
        let mut names = BTreeSet::new();
        for r in raw {
            let label = parse_label(r.as_ref())?;
            if !names.insert(label.name.clone()) {
                return Err(LabelError::Duplicate(label.name));
            }
            labels.push(label);
        }
        Ok(LabelSet { labels, names })
    }

    /// The parsed labels, in spec order.
    pub fn labels(&self) -> &[RunnerLabel] {
        &self.labels
    }

    /// The label names a runner of this group registers with.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// Gitea's rule: a runner with these labels can take a job when every `runs-on` label of
    /// the job is one of its names (exact, case-sensitive). An empty `runs-on` matches.
    pub fn matches<S: AsRef<str>>(&self, runs_on: &[S]) -> bool {
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

    fn docker(name: &str, image: &str) -> RunnerLabel {
        RunnerLabel {
            name: name.into(),
            schema: LabelSchema::Docker { image: image.into() },
        }
    }

    fn host(name: &str) -> RunnerLabel {
        RunnerLabel {
            name: name.into(),
            schema: LabelSchema::Host,
        }
    }

    #[test]
    fn parse_table() {
        let ok: &[(&str, RunnerLabel)] = &[
            ("ubuntu-latest", host("ubuntu-latest")),
            ("linux:host", host("linux")),
            (
                "ubuntu-latest:docker://node:20-bookworm",
                docker("ubuntu-latest", "node:20-bookworm"),
            ),
            (
                "gpu:docker://registry.local:5000/cuda:12",
                docker("gpu", "registry.local:5000/cuda:12"),
            ),
            ("Ubuntu", host("Ubuntu")),
            ("ünïcødé-runner:host", host("ünïcødé-runner")),
            ("a.b_c-d", host("a.b_c-d")),
        ];
        for (raw, want) in ok {
            assert_eq!(parse_label(raw).as_ref(), Ok(want), "{raw}");
        }
        type MakeError = fn(String) -> LabelError;
        let bad: &[(&str, MakeError)] = &[
            ("", LabelError::EmptyName),
            (":host", LabelError::EmptyName),
            (" linux", LabelError::BadName),
            ("linux ", LabelError::BadName),
            ("a,b", LabelError::BadName),
            ("my label", LabelError::BadName),
            ("linux:lxc://debian", LabelError::UnknownSchema),
            ("linux:Docker://x", LabelError::UnknownSchema),
            ("linux:", LabelError::UnknownSchema),
            ("linux:docker", LabelError::BadArgument),
            ("linux:docker:node", LabelError::BadArgument),
            ("linux:docker://", LabelError::BadArgument),
            ("linux:host:extra", LabelError::BadArgument),
        ];
        for (raw, want) in bad {
            assert_eq!(parse_label(raw), Err(want(raw.to_string())), "{raw:?}");
        }
    }

    #[test]
    fn display_round_trips() {
        for raw in ["x:host", "ubuntu:docker://node:20"] {
            let l = parse_label(raw).unwrap();
            assert_eq!(l.to_string(), raw);
            assert_eq!(parse_label(&l.to_string()).unwrap(), l);
        }
    }

    #[test]
    fn set_rejects_duplicate_names_even_with_different_schemas() {
        let err = LabelSet::parse(&["linux:host", "linux:docker://alpine"]).unwrap_err();
        assert_eq!(err, LabelError::Duplicate("linux".into()));
        assert!(LabelSet::parse(&["a", "bad label"]).is_err());
    }

    #[test]
    fn matching_table() {
        let set = LabelSet::parse(&["ubuntu-latest:docker://node:20", "linux:host", "gpü"]).unwrap();
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
        let set = LabelSet::parse(&["self-hosted"]).unwrap();
        assert_eq!(set.names().collect::<Vec<_>>(), vec!["self-hosted"]);
        assert!(!set.matches(&["ubuntu-latest"]));
    }
}
