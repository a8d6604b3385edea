//! The `labels` query of the waiting-job lists, exactly as reference §1 describes it: only the
//! first occurrence counts, the whole value is trimmed, items are split on `,` and not trimmed,
//! and a job matches when every `runs_on` entry is in the list.

use super::version::ForgejoVersion;

/// What a job list is filtered by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelFilter {
    /// No filter (v14+ without `labels`): every waiting and running job in scope.
    All,
    /// A job matches if its `runs_on` is a subset of these names.
    Subset(Vec<String>),
}

impl LabelFilter {
    /// The filter for the first `labels` value (`None`: absent) on version `v`.
    pub fn from_query(first_value: Option<&str>, v: ForgejoVersion) -> LabelFilter {
        match first_value.map(str::trim) {
            None if v.labels_optional() => LabelFilter::All,
            // v14+ special-cases `labels=`: only jobs with an empty `runs_on`.
            Some("") if v.labels_optional() => LabelFilter::Subset(Vec::new()),
            // Before v14 an absent value is read as "" and split like any other, giving the
            // one label "" that no real job has: nothing matches.
            other => LabelFilter::Subset(other.unwrap_or("").split(',').map(str::to_string).collect()),
        }
    }

    /// Whether a job with `runs_on` is listed.
    pub fn matches(&self, runs_on: &[String]) -> bool {
        match self {
            LabelFilter::All => true,
            // An empty list selects exactly the jobs without `runs_on`, and an empty `runs_on`
            // never matches a non-empty list (it is not treated as the empty subset).
            LabelFilter::Subset(names) if names.is_empty() => runs_on.is_empty(),
            LabelFilter::Subset(_) if runs_on.is_empty() => false,
            LabelFilter::Subset(names) => runs_on.iter().all(|l| names.contains(l)),
        }
    }
}

/// The label *name* of a forgejo-runner label (`name[:scheme[:arg]]`), or why it is invalid
/// (reference §7: a name with outer spaces, an unknown scheme, or `host` with an argument).
pub fn label_name(label: &str) -> Result<&str, String> {
    let mut parts = label.splitn(3, ':');
    let name = parts.next().unwrap_or_default();
    let scheme = parts.next();
    let arg = parts.next();
    if name.is_empty() || name.trim() != name {
        return Err(format!("invalid label name {name:?}"));
    }
    match (scheme, arg) {
        (None, _) | (Some("docker" | "lxc"), _) => Ok(name),
        (Some("host"), None) => Ok(name),
        (Some("host"), Some(_)) => Err(format!("label {label:?}: host takes no argument")),
        (Some(other), _) => Err(format!("label {label:?}: unsupported scheme {other:?}")),
    }
}

/// forgejo-runner's scheme of a label: `docker` when none is given (`internal/pkg/labels/labels.go`
/// `Parse`: `Schema: "docker"` unless a second part names `host`, `docker` or `lxc`).
pub fn label_scheme(label: &str) -> Result<&str, String> {
    label_name(label)?;
    Ok(label.split(':').nth(1).unwrap_or("docker"))
}

/// `Labels.RequireDocker` (`internal/pkg/labels/labels.go`): whether any label resolves to the
/// docker scheme, which makes `configCheck` look for a Docker daemon. Invalid labels count as
/// not docker (the runner refuses them before this check).
pub fn require_docker<S: AsRef<str>>(labels: &[S]) -> bool {
    labels.iter().any(|l| label_scheme(l.as_ref()) == Ok("docker"))
}

/// The scheme `Labels.PickPlatform` (`internal/pkg/labels/labels.go`) runs a job with: that of
/// the first `runs-on` entry a label names (a later label of the same name wins), else docker.
pub fn pick_scheme<'a, S: AsRef<str>>(labels: &'a [S], runs_on: &[String]) -> &'a str {
    let platforms: Vec<(&str, &str)> = labels
        .iter()
        .filter_map(|l| Some((label_name(l.as_ref()).ok()?, label_scheme(l.as_ref()).ok()?)))
        .collect();
    runs_on
        .iter()
        .find_map(|want| {
            platforms
                .iter()
                .rev()
                .find(|(name, _)| name == want)
                .map(|(_, scheme)| *scheme)
        })
        .unwrap_or("docker")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> ForgejoVersion {
        ForgejoVersion::parse(s)
    }

    fn names(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn subset_and_untrimmed_items() {
        let f = LabelFilter::from_query(Some(" a, b,c "), v("15.0.0"));
        assert_eq!(f, LabelFilter::Subset(names(&["a", " b", "c"])));
        assert!(f.matches(&names(&["a", "c"])));
        assert!(!f.matches(&names(&["a", "b"])), "items are not trimmed");
        assert!(!f.matches(&[]), "empty runs_on never matches a non-empty list");
    }

    #[test]
    fn absent_and_empty_per_version() {
        let jobs = [names(&[]), names(&["a"])];
        let count = |f: LabelFilter| jobs.iter().filter(|j| f.matches(j)).count();
        assert_eq!(count(LabelFilter::from_query(None, v("13.0.0"))), 0);
        assert_eq!(count(LabelFilter::from_query(Some(""), v("11.0.0"))), 0);
        assert_eq!(count(LabelFilter::from_query(None, v("14.0.0"))), 2);
        let empty = LabelFilter::from_query(Some(" "), v("14.0.0"));
        assert!(empty.matches(&[]) && !empty.matches(&names(&["a"])));
    }

    #[test]
    fn label_names() {
        assert_eq!(label_name("debian:docker://node:22"), Ok("debian"));
        assert_eq!(label_name("bookworm:lxc://debian:bookworm"), Ok("bookworm"));
        assert_eq!(label_name("self-hosted:host"), Ok("self-hosted"));
        assert_eq!(label_name("plain"), Ok("plain"));
        assert!(label_name("x:host://y").is_err());
        assert!(label_name("x:vm://y").is_err());
        assert!(label_name(" x").is_err());
    }

    #[test]
    fn schemes_and_require_docker() {
        assert_eq!(label_scheme("ubuntu-latest"), Ok("docker"));
        assert_eq!(label_scheme("debian:docker://node:22"), Ok("docker"));
        assert_eq!(label_scheme("bookworm:lxc"), Ok("lxc"));
        assert_eq!(label_scheme("self-hosted:host"), Ok("host"));
        assert!(require_docker(&["a:host", "ubuntu-latest"]));
        assert!(require_docker(&["a:docker"]));
        assert!(!require_docker(&["a:host", "b:lxc://debian:bookworm"]));
        assert!(!require_docker::<&str>(&[]));
        let labels = ["a:host", "b:lxc", "c"];
        let runs_on = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(pick_scheme(&labels, &runs_on(&["b", "a"])), "lxc");
        assert_eq!(pick_scheme(&labels, &runs_on(&["x", "a"])), "host");
        assert_eq!(pick_scheme(&labels, &runs_on(&["x"])), "docker");
    }
}
