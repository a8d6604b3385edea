//! Gitea version parsing and the minimum-version gate.

use std::fmt;

use forgerunner_http::version::Release;

/// The oldest Gitea with the `/actions/jobs` lists (1.25.0).
pub const MINIMUM: GiteaVersion = GiteaVersion {
    major: 1,
    minor: 25,
    patch: 0,
};

/// The first Gitea with a token API to re-run a job (`POST …/actions/runs/{run}/jobs/{job_id}/rerun`,
/// `routers/api/v1/api.go` at v1.26.0; none at v1.25.4): see `crate::rerun`.
pub const JOB_RERUN_API: GiteaVersion = GiteaVersion {
    major: 1,
    minor: 26,
    patch: 0,
};

/// A release version (pre-release and build suffixes dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GiteaVersion {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
}

/// Why a server version cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// Not a `major.minor[.patch]` version.
    #[error("cannot read the Gitea version {0:?}")]
    Unparsable(String),
    /// A Forgejo server (`…+gitea-…`), whose Actions API differs.
    #[error("{0:?} is a Forgejo server; its Actions API differs from Gitea's and is not supported")]
    Forgejo(String),
    /// Older than 1.25.
    #[error("Gitea {0} is too old: forgerunner needs Gitea 1.25 or newer (for the /actions/jobs API)")]
    TooOld(String),
}

/// Forgejo's first major version of its own numbering (after Gitea 1.21).
const FORGEJO_FIRST_MAJOR: u64 = 7;

impl GiteaVersion {
    /// Parses `1.26.0`, `v1.25.2`, `1.26.0-rc1`, `1.25.0+dev-12-gabc`.
    pub fn parse(raw: &str) -> Result<GiteaVersion, VersionError> {
        if raw.trim().contains("+gitea-") {
            return Err(VersionError::Forgejo(raw.to_string()));
        }
        let Release { major, minor, patch } =
            Release::parse(raw).ok_or_else(|| VersionError::Unparsable(raw.to_string()))?;
        // Gitea has only ever been 1.x; Forgejo counts from 7. A Forgejo built with
        // `GITEA_VERSION` set (distribution builds) reports its version without the `+gitea-`
        // suffix (forgejo `Makefile@v15.0.0`, lines 88-91) and would otherwise pass as Gitea.
        if major >= FORGEJO_FIRST_MAJOR {
            return Err(VersionError::Forgejo(raw.to_string()));
        }
        Ok(GiteaVersion { major, minor, patch })
    }

    /// Parses and requires at least [`MINIMUM`].
    pub fn parse_supported(raw: &str) -> Result<GiteaVersion, VersionError> {
        let v = GiteaVersion::parse(raw)?;
        if v < MINIMUM {
            return Err(VersionError::TooOld(raw.trim().to_string()));
        }
        Ok(v)
    }

    /// Gitea ≥1.27 lists reusable-workflow caller jobs as queued with empty labels although no
    /// runner ever takes them, so empty `runs-on` is demand only before 1.27.
    pub fn empty_runs_on_is_demand(self) -> bool {
        self < GiteaVersion {
            major: 1,
            minor: 27,
            patch: 0,
        }
    }

    /// Whether the server has the job re-run API ([`JOB_RERUN_API`]).
    pub fn has_job_rerun_api(self) -> bool {
        self >= JOB_RERUN_API
    }
}

impl fmt::Display for GiteaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let ok = [
            ("1.25.0", (1, 25, 0)),
            ("1.26.1", (1, 26, 1)),
            ("v1.25.2", (1, 25, 2)),
            ("1.27.0-rc0", (1, 27, 0)),
            ("1.26.0+dev-1277-g9d3f04eb", (1, 26, 0)),
            ("1.26", (1, 26, 0)),
            ("2.0.0", (2, 0, 0)),
        ];
        for (raw, (a, b, c)) in ok {
            let v = GiteaVersion::parse_supported(raw).unwrap();
            assert_eq!((v.major, v.minor, v.patch), (a, b, c), "{raw}");
        }
        assert!(matches!(
            GiteaVersion::parse_supported("1.24.6"),
            Err(VersionError::TooOld(_))
        ));
        assert!(matches!(
            GiteaVersion::parse_supported("1.22.0"),
            Err(VersionError::TooOld(_))
        ));
        assert!(matches!(
            GiteaVersion::parse_supported("11.0.1+gitea-1.22.0"),
            Err(VersionError::Forgejo(_))
        ));
        // A distribution build of Forgejo reports no `+gitea-` suffix (forgejo `Makefile`).
        for forgejo in ["15.0.3", "7.0.0", "v12.0.1"] {
            assert!(
                matches!(
                    GiteaVersion::parse_supported(forgejo),
                    Err(VersionError::Forgejo(_))
                ),
                "{forgejo}"
            );
        }
        for bad in ["", "development", "1", "1.x.0", "1.2.3.4", "a.b"] {
            assert!(
                matches!(GiteaVersion::parse(bad), Err(VersionError::Unparsable(_))),
                "{bad}"
            );
        }
        assert!(GiteaVersion::parse("1.26.0").unwrap().empty_runs_on_is_demand());
        assert!(!GiteaVersion::parse("1.27.0").unwrap().empty_runs_on_is_demand());
        assert!(!GiteaVersion::parse("1.25.4").unwrap().has_job_rerun_api());
        assert!(GiteaVersion::parse("1.26.0-rc0").unwrap().has_job_rerun_api());
        assert!(GiteaVersion::parse("1.27.0").unwrap().has_job_rerun_api());
    }
}
