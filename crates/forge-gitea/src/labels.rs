//! act_runner labels (`name[:docker://image|:host]`): Gitea's reading of the scheme part. The
//! label form and the job/runner matching rule are shared with Forgejo
//! ([`forgerunner_core::labels`]); no default labels are ever added here: a group claims only
//! the jobs its own labels name.

use std::collections::BTreeSet;
use std::fmt;

use forgerunner_core::crd::RunnerClass;
pub use forgerunner_core::labels::LabelError;
use forgerunner_core::labels::{LabelParts, split_label};
use forgerunner_core::runner_class::runner_labels;

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

/// A Gitea group's labels.
pub type LabelSet = forgerunner_core::labels::LabelSet<LabelSchema>;

impl fmt::Display for RunnerLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            LabelSchema::Docker { image } => write!(f, "{}:docker://{}", self.name, image),
            LabelSchema::Host => write!(f, "{}:host", self.name),
        }
    }
}

/// act_runner's reading of a label's scheme: `docker` needs `//image`, `host` takes no
/// argument, no scheme means host.
pub fn schema(parts: &LabelParts<'_>, raw: &str) -> Result<LabelSchema, LabelError> {
    match (parts.scheme, parts.argument) {
        (None, _) | (Some("host"), None) => Ok(LabelSchema::Host),
        (Some("host"), Some(_)) | (Some("docker"), None) => Err(LabelError::BadArgument(raw.to_string())),
        (Some("docker"), Some(arg)) => match arg.strip_prefix("//") {
            Some(image) if !image.is_empty() && !image.contains(',') => Ok(LabelSchema::Docker {
                image: image.to_string(),
            }),
            _ => Err(LabelError::BadArgument(raw.to_string())),
        },
        (Some(_), _) => Err(LabelError::UnknownSchema(raw.to_string())),
    }
}

/// Parses one act_runner label.
pub fn parse_label(raw: &str) -> Result<RunnerLabel, LabelError> {
    let parts = split_label(raw)?;
    Ok(RunnerLabel {
        name: parts.name.to_string(),
        schema: schema(&parts, raw)?,
    })
}

/// Parses a Gitea group's labels.
pub fn parse_labels<S: AsRef<str>>(raw: &[S]) -> Result<LabelSet, LabelError> {
    LabelSet::parse(raw, schema)
}

/// The label sets a group's runners register with: the group's own, and for each class of
/// `spec.classes` the group's with the class's ([`forgerunner_core::runner_class::runner_labels`]).
/// A job is the group's when one of them takes it: Gitea hands a job to any runner whose labels
/// hold every `runs-on` name, so the class runners' jobs are the group's demand too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedLabels {
    sets: Vec<LabelSet>,
}

impl ServedLabels {
    /// Parses the group's labels and each class's runner labels.
    pub fn parse(group: &[String], classes: &[RunnerClass]) -> Result<ServedLabels, LabelError> {
        let mut sets = vec![parse_labels(group)?];
        for class in classes {
            sets.push(parse_labels(&runner_labels(group, class))?);
        }
        Ok(ServedLabels { sets })
    }

    /// Whether a runner of the group (of one of its classes, or one of its own) can take a job
    /// asking for `runs_on`.
    pub fn matches<R: AsRef<str>>(&self, runs_on: &[R]) -> bool {
        self.sets.iter().any(|s| s.matches(runs_on))
    }

    /// Every label name one of the group's runners registers with, once each.
    pub fn names(&self) -> BTreeSet<&str> {
        self.sets.iter().flat_map(LabelSet::names).collect()
    }
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
            let l = parse_label(raw).expect("valid");
            assert_eq!(l.to_string(), raw);
            assert_eq!(parse_label(&l.to_string()).expect("valid"), l);
        }
    }

    #[test]
    fn a_group_with_classes_serves_what_any_of_its_runners_takes() {
        let classes: Vec<RunnerClass> = serde_json::from_value(serde_json::json!([
            {"name": "small", "labels": ["linux"]},
            {"name": "large", "labels": ["linux", "large"]}
        ]))
        .expect("classes");
        let served = ServedLabels::parse(&["self-hosted:host".to_owned()], &classes).expect("valid");
        assert!(served.matches(&["self-hosted"]));
        assert!(served.matches(&["linux", "large"]));
        assert!(served.matches(&["linux", "self-hosted"]));
        assert!(!served.matches(&["large", "gpu"]));
        assert_eq!(
            served.names().into_iter().collect::<Vec<_>>(),
            ["large", "linux", "self-hosted"]
        );
        let plain = ServedLabels::parse(&["self-hosted:host".to_owned()], &[]).expect("valid");
        assert!(
            !plain.matches(&["linux"]),
            "without classes only the group's labels serve"
        );
    }

    #[test]
    fn a_group_set_reads_schemes_and_matches_names() {
        let set = parse_labels(&["ubuntu:docker://node:20", "linux"]).expect("valid");
        assert_eq!(set.labels()[1], ("linux".to_owned(), LabelSchema::Host));
        assert!(set.matches(&["ubuntu", "linux"]));
        assert!(parse_labels(&["a:lxc://x"]).is_err());
    }
}
