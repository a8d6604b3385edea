//! The Forgejo version the fake plays and the features it gates (reference §6).

/// A parsed Forgejo version (`15.0.3+gitea-1.22.0` → 15.0.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ForgejoVersion {
    /// Major (Forgejo majors are ≥ 7).
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
}

impl ForgejoVersion {
    /// Parses the part before `+` as `major.minor.patch` (missing parts are 0).
    pub fn parse(full: &str) -> ForgejoVersion {
        let core = full.split('+').next().unwrap_or_default();
        let mut it = core
            .split(['.', '-'])
            .map(|p| p.trim_start_matches('v').parse::<u64>().unwrap_or(0));
        ForgejoVersion {
            major: it.next().unwrap_or(0),
            minor: it.next().unwrap_or(0),
            patch: it.next().unwrap_or(0),
        }
    }

    /// The waiting-job lists (`…/runners/jobs`): v11+.
    pub fn has_job_lists(self) -> bool {
        self.major >= 11
    }

    /// Absent `labels` lists everything (v14+) instead of nothing.
    pub fn labels_optional(self) -> bool {
        self.major >= 14
    }

    /// The concurrency-group queue (`CONCURRENCY_GROUP_QUEUE_ENABLED`, `getConcurrencyCondition`
    /// in `models/actions/task.go`): v14+.
    pub fn has_concurrency_queue(self) -> bool {
        self.major >= 14
    }

    /// Runner REST (list/get/delete/create), `/admin/actions/…`, ephemeral runners, job
    /// `attempt`/`handle` and `FetchSingleTask`: v15+.
    pub fn v15(self) -> bool {
        self.major >= 15
    }
}

/// The version without its `+gitea-…` build suffix, as `/api/forgejo/v1/version` reports it.
pub fn without_suffix(full: &str) -> &str {
    full.split('+').next().unwrap_or(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_gates() {
        let v = ForgejoVersion::parse("15.0.3+gitea-1.22.0");
        assert_eq!((v.major, v.minor, v.patch), (15, 0, 3));
        assert!(v.v15() && v.labels_optional() && v.has_job_lists());
        let v = ForgejoVersion::parse("14.0.4+gitea-1.22.0");
        assert!(!v.v15() && v.labels_optional());
        let v = ForgejoVersion::parse("11.0.0");
        assert!(v.has_job_lists() && !v.labels_optional());
        assert!(!ForgejoVersion::parse("10.0.1+gitea-1.22.0").has_job_lists());
        assert_eq!(without_suffix("15.0.3+gitea-1.22.0"), "15.0.3");
    }
}
