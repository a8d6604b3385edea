//! `RunnerGroup` status conditions: closed sets of types, statuses and reasons, and a pure merge
//! that keeps `lastTransitionTime` stable while a condition's status does not change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::error::ErrorCategory;

/// The condition types a `RunnerGroup` reports, in the order they are listed in the status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConditionType {
    /// The group is reconciled and runners are managed as the spec asks.
    Ready,
    /// The forge answered the last request.
    ForgeConnected,
    /// The credentials Secret exists and the forge accepts it.
    CredentialsValid,
    /// Runners are being created or removed.
    Scaling,
    /// Something keeps failing (runners, or parts of the last apply).
    Degraded,
    /// A job the group serves has waited longer than `spec.stalledJobSeconds`
    /// ([`crate::reconcile::stalled`]).
    QueueStalled,
    /// The group's image runs an older runner release than its forge serves; shown only for a
    /// forge that tells which release it serves ([`crate::runner_version`]).
    RunnerOutdated,
}

impl ConditionType {
    /// Every type, in status order.
    pub const ALL: [ConditionType; 7] = [
        ConditionType::Ready,
        ConditionType::ForgeConnected,
        ConditionType::CredentialsValid,
        ConditionType::Scaling,
        ConditionType::Degraded,
        ConditionType::QueueStalled,
        ConditionType::RunnerOutdated,
    ];

    /// The `type` string in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::ForgeConnected => "ForgeConnected",
            ConditionType::CredentialsValid => "CredentialsValid",
            ConditionType::Scaling => "Scaling",
            ConditionType::Degraded => "Degraded",
            ConditionType::QueueStalled => "QueueStalled",
            ConditionType::RunnerOutdated => "RunnerOutdated",
        }
    }

    /// Parses the `type` string of a status condition.
    pub fn parse(s: &str) -> Option<ConditionType> {
        ConditionType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// The status of a condition, as the Kubernetes API conventions spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known (yet).
    Unknown,
}

impl ConditionStatus {
    /// `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// `True` when `holds`, else `False`.
    pub fn from_bool(holds: bool) -> ConditionStatus {
        if holds {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// Why a condition has its status: an error category or one of the success reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionReason {
    /// A failure, named by its bounded category.
    Error(ErrorCategory),
    /// The last reconcile went through every step.
    Reconciled,
    /// The forge answered.
    Connected,
    /// The credentials were accepted.
    CredentialsAccepted,
    /// Runners are being created.
    ScalingUp,
    /// Runners are being removed.
    ScalingDown,
    /// The runner count matches the demand.
    Steady,
    /// The demand asks for more runners than `maxRunners` allows.
    AtMaxRunners,
    /// Runners keep failing; creation is throttled.
    RunnersFailing,
    /// A runner exited because its version is too old for the forge; the image needs updating.
    RunnerOutdated,
    /// Nothing is failing.
    Healthy,
    /// The group is being deleted.
    Deleting,
    /// Runners do not start, for this reason (the backoff holds creation).
    Startup(crate::startup::StartupFailure),
    /// A job has waited past `spec.stalledJobSeconds`, most likely for this reason.
    Stalled(crate::reconcile::stalled::StallCause),
    /// No job the group serves has waited past `spec.stalledJobSeconds`.
    QueueMoving,
    /// The forge serves a newer runner release than the group's image runs.
    NewerReleaseServed,
    /// The group's image runs the release the forge serves, or a later one.
    ReleaseCurrent,
    /// The image's tag names no runner release, so it cannot be compared.
    ReleaseUnknown,
}

impl ConditionReason {
    /// CamelCase reason string for the status and for Events.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionReason::Error(c) => c.as_str(),
            ConditionReason::Reconciled => "Reconciled",
            ConditionReason::Connected => "Connected",
            ConditionReason::CredentialsAccepted => "CredentialsAccepted",
            ConditionReason::ScalingUp => "ScalingUp",
            ConditionReason::ScalingDown => "ScalingDown",
            ConditionReason::Steady => "Steady",
            ConditionReason::AtMaxRunners => "AtMaxRunners",
            ConditionReason::RunnersFailing => "RunnersFailing",
            ConditionReason::RunnerOutdated => "RunnerOutdated",
            ConditionReason::Healthy => "Healthy",
            ConditionReason::Deleting => "Deleting",
            ConditionReason::Startup(cause) => cause.as_str(),
            ConditionReason::Stalled(cause) => cause.as_str(),
            ConditionReason::QueueMoving => "QueueMoving",
            ConditionReason::NewerReleaseServed => "NewerReleaseServed",
            ConditionReason::ReleaseCurrent => "ReleaseCurrent",
            ConditionReason::ReleaseUnknown => "ReleaseUnknown",
        }
    }
}

/// One condition as the reconciler decides it, before times are attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupCondition {
    /// Which condition.
    pub type_: ConditionType,
    /// Its status.
    pub status: ConditionStatus,
    /// Why.
    pub reason: ConditionReason,
    /// What a person can do about it (never secret material).
    pub message: String,
}

impl GroupCondition {
    /// A condition of `type_` with the given status, reason and message.
    pub fn new(
        type_: ConditionType,
        status: ConditionStatus,
        reason: ConditionReason,
        message: impl Into<String>,
    ) -> GroupCondition {
        GroupCondition {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }

    /// The API form, stamped with `now` (the merge keeps an older time when status is unchanged).
    pub fn to_condition(&self, observed_generation: Option<i64>, now: &Time) -> Condition {
        Condition {
            type_: self.type_.as_str().to_owned(),
            status: self.status.as_str().to_owned(),
            reason: self.reason.as_str().to_owned(),
            message: self.message.clone(),
            observed_generation,
            last_transition_time: now.clone(),
        }
    }
}

/// Merges freshly computed conditions onto the old ones.
///
/// A condition in `new` keeps the old `lastTransitionTime` when its status did not change, and
/// gets `now` otherwise. Old conditions of types absent from `new` are kept as they were, because
/// a failed step only knows some of them. The result lists our types in [`ConditionType::ALL`]
/// order, then any foreign types in their old order.
pub fn merge_conditions(old: &[Condition], new: Vec<Condition>, now: &Time) -> Vec<Condition> {
    let mut merged: Vec<Condition> = old.to_vec();
    for mut cond in new {
        match merged.iter_mut().find(|c| c.type_ == cond.type_) {
            Some(existing) => {
                cond.last_transition_time = if existing.status == cond.status {
                    existing.last_transition_time.clone()
                } else {
                    now.clone()
                };
                *existing = cond;
            }
            None => {
                cond.last_transition_time = now.clone();
                merged.push(cond);
            }
        }
    }
    // Stable sort: our types by their fixed rank, foreign ones after them in their old order.
    let rank = |c: &Condition| ConditionType::parse(&c.type_).map_or(usize::MAX, |t| t as usize);
    merged.sort_by_key(rank);
    merged
}

/// Conditions of `new` whose status or reason differs from `old` (or that are new): the
/// transitions worth an Event.
pub fn transitions<'a>(old: &[Condition], new: &'a [Condition]) -> Vec<&'a Condition> {
    new.iter()
        .filter(|n| {
            !old.iter()
                .any(|o| o.type_ == n.type_ && o.status == n.status && o.reason == n.reason)
        })
        .collect()
}

/// The condition of `type_` in `conditions`, if present.
pub fn find(conditions: &[Condition], type_: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == type_.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(secs).expect("valid timestamp"))
    }

    fn cond(type_: ConditionType, status: ConditionStatus, reason: ConditionReason, at: i64) -> Condition {
        GroupCondition::new(type_, status, reason, "m").to_condition(Some(1), &t(at))
    }

    #[test]
    fn unchanged_status_keeps_transition_time() {
        let old = vec![cond(
            ConditionType::Ready,
            ConditionStatus::True,
            ConditionReason::Reconciled,
            10,
        )];
        let new = vec![cond(
            ConditionType::Ready,
            ConditionStatus::True,
            ConditionReason::Reconciled,
            99,
        )];
        let merged = merge_conditions(&old, new, &t(99));
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].last_transition_time, t(10));
    }

    #[test]
    fn reason_change_without_status_change_keeps_time_but_updates_reason() {
        let old = vec![cond(
            ConditionType::Ready,
            ConditionStatus::False,
            ConditionReason::Error(ErrorCategory::SecretNotFound),
            10,
        )];
        let new = vec![cond(
            ConditionType::Ready,
            ConditionStatus::False,
            ConditionReason::Error(ErrorCategory::Unauthorized),
            50,
        )];
        let merged = merge_conditions(&old, new, &t(50));
        assert_eq!(merged[0].last_transition_time, t(10));
        assert_eq!(merged[0].reason, "Unauthorized");
    }

    #[test]
    fn status_change_takes_now() {
        let old = vec![cond(
            ConditionType::Ready,
            ConditionStatus::True,
            ConditionReason::Reconciled,
            10,
        )];
        let new = vec![cond(
            ConditionType::Ready,
            ConditionStatus::False,
            ConditionReason::Error(ErrorCategory::ForgeUnavailable),
            0,
        )];
        let merged = merge_conditions(&old, new, &t(77));
        assert_eq!(merged[0].last_transition_time, t(77));
        assert_eq!(merged[0].status, "False");
    }

    #[test]
    fn new_type_takes_now_and_absent_types_are_kept_in_order() {
        let old = vec![
            cond(
                ConditionType::Degraded,
                ConditionStatus::False,
                ConditionReason::Healthy,
                5,
            ),
            Condition {
                type_: "Foreign".into(),
                ..cond(
                    ConditionType::Ready,
                    ConditionStatus::True,
                    ConditionReason::Reconciled,
                    6,
                )
            },
        ];
        let new = vec![cond(
            ConditionType::Ready,
            ConditionStatus::True,
            ConditionReason::Reconciled,
            0,
        )];
        let merged = merge_conditions(&old, new, &t(20));
        let types: Vec<&str> = merged.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "Degraded", "Foreign"]);
        assert_eq!(merged[0].last_transition_time, t(20));
        assert_eq!(merged[1].last_transition_time, t(5));
    }

    #[test]
    fn transitions_report_status_and_reason_changes_only() {
        let old = vec![
            cond(
                ConditionType::Ready,
                ConditionStatus::True,
                ConditionReason::Reconciled,
                1,
            ),
            cond(
                ConditionType::Scaling,
                ConditionStatus::False,
                ConditionReason::Steady,
                1,
            ),
        ];
        let new = vec![
            cond(
                ConditionType::Ready,
                ConditionStatus::True,
                ConditionReason::Reconciled,
                2,
            ),
            cond(
                ConditionType::Scaling,
                ConditionStatus::True,
                ConditionReason::ScalingUp,
                2,
            ),
            cond(
                ConditionType::Degraded,
                ConditionStatus::False,
                ConditionReason::Healthy,
                2,
            ),
        ];
        let changed: Vec<&str> = transitions(&old, &new).iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(changed, ["Scaling", "Degraded"]);
    }

    #[test]
    fn type_names_round_trip() {
        for t in ConditionType::ALL {
            assert_eq!(ConditionType::parse(t.as_str()), Some(t));
        }
        assert_eq!(ConditionType::parse("Nope"), None);
        assert_eq!(
            ConditionReason::Error(ErrorCategory::Kubernetes).as_str(),
            "KubernetesError"
        );
    }
}
