//! Which scale set a job goes to, by its `runs-on` labels, for tests with several scale sets
//! (a group's own and its classes'). The `scaleset` emulator queues a job at the scale set the
//! caller names; GitHub instead matches a job to a scale set "based on the label and runner
//! group policies, just like regular self-hosted runners" (actions/scaleset README, "Job
//! matching"): a scale set whose labels, its name among them, hold every `runs-on` label.
//!
//! Simplifications: one runner group sees every repository (no group policies), labels compare
//! exactly, and a job that several scale sets match is refused rather than given to one of
//! them (GitHub does not document which one gets it), so a test cannot rely on a choice the
//! real service may make otherwise.

use scaleset::testing::{Emulator, EmulatorState};
use scaleset::{JobRequestId, ScaleSetId};

/// Why a job could not be routed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    /// No scale set has every label the job asks for.
    #[error("no scale set has all of {0:?}")]
    NoScaleSet(Vec<String>),
    /// Several scale sets have every label the job asks for.
    #[error("scale sets {1:?} all have {0:?}")]
    Ambiguous(Vec<String>, Vec<ScaleSetId>),
}

/// The scale sets of `state` whose labels hold every label of `runs_on`, by id.
pub fn matching_scale_sets(state: &EmulatorState, runs_on: &[&str]) -> Vec<ScaleSetId> {
    let mut out: Vec<ScaleSetId> = state
        .scale_sets
        .iter()
        .filter(|set| {
            !runs_on.is_empty()
                && runs_on
                    .iter()
                    .all(|l| set.labels.iter().any(|have| have.name == *l))
        })
        .map(|set| set.id)
        .collect();
    out.sort_by_key(|id| id.0);
    out
}

/// The one scale set of `state` a job asking for `runs_on` goes to.
pub fn route(state: &EmulatorState, runs_on: &[&str]) -> Result<ScaleSetId, RoutingError> {
    let labels = || runs_on.iter().map(|l| (*l).to_owned()).collect();
    match matching_scale_sets(state, runs_on).as_slice() {
        [one] => Ok(*one),
        [] => Err(RoutingError::NoScaleSet(labels())),
        many => Err(RoutingError::Ambiguous(labels(), many.to_vec())),
    }
}

/// Queues a job asking for `runs_on` at the scale set GitHub would give it; its id and the
/// scale set.
pub fn queue_runs_on(emu: &Emulator, runs_on: &[&str]) -> Result<(JobRequestId, ScaleSetId), RoutingError> {
    let set = route(&emu.state(), runs_on)?;
    Ok((emu.queue_job(set, runs_on.iter().copied()), set))
}

#[cfg(test)]
mod tests {
    use super::*;
    use scaleset::testing::JobState;
    use scaleset::{Label, RunnerScaleSetSpec};

    async fn two_sets() -> (Emulator, ScaleSetId, ScaleSetId) {
        let emu = Emulator::builder().start().await;
        let client = emu.client();
        let mut ids = Vec::new();
        for (name, labels) in [
            ("sized", ["sized", "linux"].as_slice()),
            ("sized-large", ["sized-large", "linux", "large"].as_slice()),
        ] {
            let mut spec = RunnerScaleSetSpec::new(name);
            spec.labels = labels.iter().map(|l| Label::new(*l)).collect();
            ids.push(client.create_runner_scale_set(&spec).await.expect("scale set").id);
        }
        (emu, ids[0], ids[1])
    }

    #[tokio::test]
    async fn a_job_goes_to_the_one_set_with_all_its_labels() {
        let (emu, own, large) = two_sets().await;
        let (job, set) = queue_runs_on(&emu, &["linux", "large"]).expect("routed");
        assert_eq!(set, large);
        assert_eq!(queue_runs_on(&emu, &["sized-large"]).expect("by name").1, large);
        assert_eq!(queue_runs_on(&emu, &["sized"]).expect("by name").1, own);
        let state = emu.state();
        let queued = state.jobs.iter().find(|j| j.id == job).expect("job");
        assert_eq!(queued.scale_set_id, large);
        assert_eq!(queued.labels, ["linux", "large"]);
        assert_eq!(queued.state, JobState::Available);
    }

    #[tokio::test]
    async fn a_job_several_sets_or_none_match_is_refused() {
        let (emu, own, large) = two_sets().await;
        assert_eq!(
            queue_runs_on(&emu, &["linux"]),
            Err(RoutingError::Ambiguous(vec!["linux".into()], vec![own, large]))
        );
        assert_eq!(
            queue_runs_on(&emu, &["large", "gpu"]),
            Err(RoutingError::NoScaleSet(vec!["large".into(), "gpu".into()]))
        );
        assert!(emu.state().jobs.is_empty(), "nothing was queued");
    }
}
