//! The description a runner row gets when a group registers it (15+), and how a listing tells
//! the group's own rows by it.
//!
//! Forgejo stores the description `POST …/actions/runners` is given and lists it back
//! (`routers/api/v1/shared/runners.go` `RegisterRunner`, `services/convert/convert.go`
//! `ToActionRunner`). The RunnerGroup's uid in it marks the row as this group's: a same-named
//! group of another namespace or cluster at the same scope has another uid. Core gives a marked
//! row without a Job a short ghost grace (`forgerunner_core::reconcile::ledger::OfflineRows`):
//! such a row was left by a process that died between the registration and the Job's create.

/// What a row's description says when the group has no uid to mark it with (an object that was
/// never stored, as in unit tests).
const PLAIN: &str = "ephemeral runner managed by forgerunner";

/// The description of the rows a group of uid `uid` (`GroupContext::uid`) registers, when it
/// has one: a row listed with exactly this description is the group's own.
pub(crate) fn of_group(uid: &str) -> Option<String> {
    let uid = uid.trim();
    (!uid.is_empty()).then(|| format!("{PLAIN} for RunnerGroup {uid}"))
}

/// The description of a runner row a group of uid `uid` registers.
pub(crate) fn description(uid: &str) -> String {
    of_group(uid).unwrap_or_else(|| PLAIN.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_group_marks_its_rows_with_its_uid() {
        let uid = "6f1c1b9e-0d4a-4c1e-9f57-2b7f0d3c9a11";
        assert_eq!(
            description(uid),
            "ephemeral runner managed by forgerunner for RunnerGroup 6f1c1b9e-0d4a-4c1e-9f57-2b7f0d3c9a11"
        );
        assert_eq!(of_group(uid), Some(description(uid)));
        assert_ne!(
            of_group(uid),
            of_group("0b7e6c52-3f0e-4a3d-8d0b-5e2a1f4c7d20"),
            "a same-named group elsewhere"
        );
    }

    #[test]
    fn a_group_without_a_uid_marks_nothing() {
        for uid in ["", "  "] {
            assert_eq!(of_group(uid), None);
            assert_eq!(description(uid), PLAIN);
        }
    }
}
