//! forgejo-runner labels (`name[:scheme[:arg]]`, reference §7): Forgejo's reading of the
//! scheme part. The label form and the matching rule are shared ([`forgerunner_core::labels`]).
//! No default labels are ever added: a group claims only the jobs its own labels name.

use forgerunner_core::labels::{LabelError, LabelParts};

/// The image of a docker label without an argument (`ArgDocker` of forgejo-runner's
/// `internal/pkg/labels/labels.go`).
pub const DEFAULT_DOCKER_IMAGE: &str = "node:22-bookworm";

/// How forgejo-runner executes a job for a label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunnerLabel {
    /// In a container (`name`, `name:docker`, `name:docker://image`); `None` is the runner's
    /// default image ([`DEFAULT_DOCKER_IMAGE`]).
    Docker {
        /// Image reference without the `//` prefix.
        image: Option<String>,
    },
    /// In an LXC container (`name:lxc`, `name:lxc://template[:release]`). Parsed as
    /// forgejo-runner does, but refused by validation: a runner pod cannot run LXC.
    Lxc {
        /// Template (and release) without the `//` prefix; `None` is `debian:bookworm`.
        template: Option<String>,
    },
    /// Directly on the runner's host (`name:host`; no argument allowed).
    Host,
}

/// A Forgejo group's labels.
pub type LabelSet = forgerunner_core::labels::LabelSet<RunnerLabel>;

/// The `//argument` of a scheme; `None` when absent, an error when malformed or empty.
fn argument(arg: Option<&str>, raw: &str) -> Result<Option<String>, LabelError> {
    match arg {
        None => Ok(None),
        Some(a) => match a.strip_prefix("//") {
            Some(rest) if !rest.is_empty() && !rest.contains([',', ' ']) => Ok(Some(rest.to_string())),
            _ => Err(LabelError::BadArgument(raw.to_string())),
        },
    }
}

/// forgejo-runner's reading of a label's scheme: docker when none is given.
pub fn scheme(parts: &LabelParts<'_>, raw: &str) -> Result<RunnerLabel, LabelError> {
    match parts.scheme {
        None => Ok(RunnerLabel::Docker { image: None }),
        Some("docker") => Ok(RunnerLabel::Docker {
            image: argument(parts.argument, raw)?,
        }),
        Some("lxc") => Ok(RunnerLabel::Lxc {
            template: argument(parts.argument, raw)?,
        }),
        Some("host") if parts.argument.is_none() => Ok(RunnerLabel::Host),
        Some("host") => Err(LabelError::BadArgument(raw.to_string())),
        Some(_) => Err(LabelError::UnknownSchema(raw.to_string())),
    }
}

/// Parses a Forgejo group's labels.
pub fn parse_labels<S: AsRef<str>>(raw: &[S]) -> Result<LabelSet, LabelError> {
    LabelSet::parse(raw, scheme)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(raw: &str) -> Result<RunnerLabel, LabelError> {
        parse_labels(&[raw]).map(|s| s.labels()[0].1.clone())
    }

    #[test]
    fn schemes() {
        let docker = |i: Option<&str>| RunnerLabel::Docker {
            image: i.map(Into::into),
        };
        let ok = [
            ("debian", docker(None)),
            ("debian:docker", docker(None)),
            (
                "debian:docker://docker.io/library/node:lts",
                docker(Some("docker.io/library/node:lts")),
            ),
            (
                "bookworm:lxc://debian:bookworm",
                RunnerLabel::Lxc {
                    template: Some("debian:bookworm".into()),
                },
            ),
            ("bookworm:lxc", RunnerLabel::Lxc { template: None }),
            ("self-hosted:host", RunnerLabel::Host),
        ];
        for (raw, want) in ok {
            assert_eq!(one(raw), Ok(want), "{raw}");
        }
        type Make = fn(String) -> LabelError;
        let bad: [(&str, Make); 6] = [
            ("x:host://y", LabelError::BadArgument),
            ("x:host:y", LabelError::BadArgument),
            ("x:docker:image", LabelError::BadArgument),
            ("x:docker://", LabelError::BadArgument),
            ("x:vm", LabelError::UnknownSchema),
            (" x", LabelError::BadName),
        ];
        for (raw, want) in bad {
            assert_eq!(one(raw), Err(want(raw.to_string())), "{raw:?}");
        }
    }

    #[test]
    fn names_match_runs_on() {
        let set = parse_labels(&["debian:docker://node:22", "self-hosted:host"]).expect("valid");
        assert!(set.matches(&["debian", "self-hosted"]));
        assert!(!set.matches(&["ubuntu"]));
        assert!(parse_labels(&["a", "a:host"]).is_err());
    }
}
