//! The numbers of a Gitea or Forgejo version string. Both report `major.minor[.patch]` with
//! an optional `v` and `-pre`/`+build` suffixes (`1.26.0+dev-12-gabc`, `15.0.3+gitea-1.22.0`);
//! what each forge makes of the numbers (minimum, modes, telling the two apart) stays there.

/// The release numbers; pre-release and build suffixes dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch (0 when the string has none).
    pub patch: u64,
}

impl Release {
    /// Reads `1.26.0`, `v1.25.2`, `15.0.0-rc1`, `11.0`; `None` for anything else (`15`,
    /// `1.2.3.4`, `development`), which no supported server reports.
    pub fn parse(raw: &str) -> Option<Release> {
        let s = raw.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let core = s.split(['-', '+']).next().unwrap_or_default();
        let mut nums = core.split('.').map(|p| p.parse::<u64>());
        let major = nums.next()?.ok()?;
        let minor = nums.next()?.ok()?;
        let patch = match nums.next() {
            None => 0,
            Some(p) => p.ok()?,
        };
        if nums.next().is_some() {
            return None;
        }
        Some(Release { major, minor, patch })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_of_both_forges() {
        let ok = [
            ("1.25.0", (1, 25, 0)),
            ("v1.25.2", (1, 25, 2)),
            ("1.27.0-rc0", (1, 27, 0)),
            ("1.26.0+dev-1277-g9d3f04eb", (1, 26, 0)),
            ("1.26", (1, 26, 0)),
            ("15.0.3+gitea-1.22.0", (15, 0, 3)),
            ("v15.0.0-rc1", (15, 0, 0)),
            ("15.0.3-12-6a0c2f1+gitea-1.22.0", (15, 0, 3)),
            (" 11.0 ", (11, 0, 0)),
        ];
        for (raw, (a, b, c)) in ok {
            let r = Release::parse(raw).expect(raw);
            assert_eq!((r.major, r.minor, r.patch), (a, b, c), "{raw}");
        }
        for bad in [
            "",
            "development",
            "dev",
            "1",
            "15",
            "1.x.0",
            "15.x",
            "1.2.3.4",
            "a.b",
        ] {
            assert_eq!(Release::parse(bad), None, "{bad}");
        }
    }
}
