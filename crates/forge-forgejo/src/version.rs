//! Forgejo version parsing and what each version gets (reference §6).

use std::fmt;

use forgerunner_http::version::Release;

/// A release version: the part of `/api/v1/version` before `+` (`15.0.3+gitea-1.22.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ForgejoVersion {
    /// Major (Forgejo majors are 7 or higher; Gitea's are 1).
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
}

/// How runners join, by server version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Forgejo 15+: runners created over REST, ephemeral, bound to a job handle.
    Ephemeral,
    /// Forgejo 11–14: a shared registration token and `forgejo-runner register`.
    RegistrationToken,
}

/// Why a server version cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// Not a `major.minor[.patch]` version.
    #[error("cannot read the Forgejo version {0:?} from /api/v1/version")]
    Unparsable(String),
    /// A server that is not Forgejo (Gitea answers 1.x and has no /api/forgejo/v1/version).
    #[error(
        "the server at spec.forgejo.url reports version {0:?} and is not Forgejo; use spec.gitea for a Gitea server"
    )]
    NotForgejo(String),
    /// Older than 11.
    #[error("Forgejo {0} is not supported: forgerunner needs Forgejo 11 or newer (15+ recommended)")]
    TooOld(String),
}

impl ForgejoVersion {
    /// Parses `15.0.3+gitea-1.22.0`, `v14.0.4`, `15.0.0-rc1`, `11.0`.
    pub fn parse(raw: &str) -> Result<ForgejoVersion, VersionError> {
        let Release { major, minor, patch } =
            Release::parse(raw).ok_or_else(|| VersionError::Unparsable(raw.to_string()))?;
        Ok(ForgejoVersion { major, minor, patch })
    }

    /// Parses and decides the mode: 15+ ephemeral, 11–14 registration token, older refused.
    /// Majors below 7 are Gitea's numbering, not Forgejo's.
    pub fn supported(raw: &str) -> Result<(ForgejoVersion, Mode), VersionError> {
        let v = ForgejoVersion::parse(raw)?;
        if v.major < 7 {
            return Err(VersionError::NotForgejo(raw.trim().to_string()));
        }
        let mode = match v.major {
            0..=10 => return Err(VersionError::TooOld(v.to_string())),
            11..=14 => Mode::RegistrationToken,
            _ => Mode::Ephemeral,
        };
        Ok((v, mode))
    }

    /// Whether the instance-wide lists live under `/admin/actions/…` (15+) rather than the
    /// older `/admin/runners/…`.
    pub fn admin_actions_paths(self) -> bool {
        self.major >= 15
    }
}

impl fmt::Display for ForgejoVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_by_version() {
        let ok = [
            ("15.0.3+gitea-1.22.0", (15, 0, 3), Mode::Ephemeral),
            ("16.0.5+gitea-1.22.0", (16, 0, 5), Mode::Ephemeral),
            ("v15.0.0-rc1", (15, 0, 0), Mode::Ephemeral),
            ("14.0.4+gitea-1.22.0", (14, 0, 4), Mode::RegistrationToken),
            ("11.0", (11, 0, 0), Mode::RegistrationToken),
            // Distribution builds set `GITEA_VERSION`, and then `/api/v1/version` (`AppVer` =
            // `FORGEJO_VERSION`) has no `+gitea-…` suffix (`Makefile@v15.0.0`, lines 88-91); a
            // build from git between tags reads `git describe`.
            ("15.0.3", (15, 0, 3), Mode::Ephemeral),
            ("14.0.2", (14, 0, 2), Mode::RegistrationToken),
            ("15.0.3-12-6a0c2f1+gitea-1.22.0", (15, 0, 3), Mode::Ephemeral),
        ];
        for (raw, (a, b, c), mode) in ok {
            let (v, m) = ForgejoVersion::supported(raw).expect(raw);
            assert_eq!(((v.major, v.minor, v.patch), m), ((a, b, c), mode), "{raw}");
        }
    }

    #[test]
    fn refusals_say_what_to_do() {
        let e = ForgejoVersion::supported("10.0.1+gitea-1.22.0").expect_err("too old");
        assert_eq!(
            e.to_string(),
            "Forgejo 10.0.1 is not supported: forgerunner needs Forgejo 11 or newer (15+ recommended)"
        );
        assert!(matches!(
            ForgejoVersion::supported("1.25.0"),
            Err(VersionError::NotForgejo(_))
        ));
        for bad in ["", "dev", "15", "15.x", "1.2.3.4"] {
            assert!(
                matches!(ForgejoVersion::parse(bad), Err(VersionError::Unparsable(_))),
                "{bad}"
            );
        }
    }
}
