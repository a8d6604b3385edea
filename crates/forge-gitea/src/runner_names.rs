//! Which forge-side runners belong to a group, and how several same-named runners combine.

use forgerunner_core::forge::ForgeRunnerState;

/// Runner names are `<group name truncated to 46>-<5 of [a-z0-9]>` (the shared Job naming).
pub fn is_group_runner_name(group_name: &str, runner: &str) -> bool {
    let prefix: String = group_name.chars().take(46).collect();
    runner
        .strip_prefix(prefix.as_str())
        .and_then(|r| r.strip_prefix('-'))
        .is_some_and(|s| s.len() == 5 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// Finished beats busy beats idle beats offline beats unknown (several runners may share a
/// name). Gitea never reports `Finished` itself; it ranks highest because it is final.
pub(crate) fn strongest(a: ForgeRunnerState, b: ForgeRunnerState) -> ForgeRunnerState {
    let rank = |s| match s {
        ForgeRunnerState::Unknown => 0,
        ForgeRunnerState::Offline => 1,
        ForgeRunnerState::Idle => 2,
        ForgeRunnerState::Busy => 3,
        ForgeRunnerState::Finished => 4,
    };
    if rank(b) > rank(a) { b } else { a }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_names_of_a_group() {
        assert!(is_group_runner_name("web", "web-ab12c"));
        assert!(!is_group_runner_name("web", "web-gpu-ab12c"));
        assert!(!is_group_runner_name("web", "web-AB12C"));
        assert!(!is_group_runner_name("web", "web-ab12"));
        assert!(!is_group_runner_name("web", "webx-ab12c"));
        let long = "a".repeat(60);
        let name = format!("{}-zz9zz", "a".repeat(46));
        assert!(is_group_runner_name(&long, &name));
    }

    #[test]
    fn strongest_state() {
        use ForgeRunnerState::*;
        assert_eq!(strongest(Offline, Idle), Idle);
        assert_eq!(strongest(Busy, Idle), Busy);
        assert_eq!(strongest(Unknown, Offline), Offline);
    }
}
