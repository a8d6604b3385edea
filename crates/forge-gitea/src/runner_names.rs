//! How several same-named forge-side runners combine (which runners belong to a group is
//! `forgerunner_core::names::is_runner_name_of`).

use forgerunner_core::forge::ForgeRunnerState;

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
    fn strongest_state() {
        use ForgeRunnerState::*;
        assert_eq!(strongest(Offline, Idle), Idle);
        assert_eq!(strongest(Busy, Idle), Busy);
        assert_eq!(strongest(Unknown, Offline), Offline);
    }
}
