//! Runner classes (`spec.classes`) at Forgejo: which waiting jobs a group serves, whose runners
//! each job wants, and the labels a runner of a class declares. Pure.
//!
//! What Forgejo does with labels (Forgejo `d883bd8f`):
//! - The jobs listing keeps a job when every `runs-on` label is among the `labels` query
//!   (`routers/api/v1/shared/runners.go` `fromRunJobModelToResponse` →
//!   `models/actions/run_job.go` `ItRunsOn`): a group with classes asks with its own label
//!   names and every class's ([`Claim::listing_labels`]), or the jobs of its classes are never
//!   listed.
//! - A runner gets a job only if its labels hold every `runs-on` label, and a runner bound by a
//!   handle (15+) only that job (`models/actions/task.go` `CreateTaskForRunner`:
//!   `j.IsRequestedByRunner(handle) && j.ItRunsOn(runner.AgentLabels)`). So a runner of a class
//!   is bound only to a job that wants that class (core's `runner_class::is_for`, which picks the
//!   job it reserves for the runner): the kind of job core's
//!   planner made a runner of that class for (`forgerunner_core::plan`, by the same
//!   [`wanted`] rule), and one the runner's labels can take.
//! - A runner's labels are those it declares (15+: `one-job --label`, `Declare` in
//!   `routers/api/actions/runner/runner.go`; 11–14: `register --labels`): the group's and its
//!   class's ([`runner_labels`]).

use std::collections::BTreeSet;

use forgerunner_core::crd::{RunnerClass, RunnerGroupSpec};
use forgerunner_core::runner_class::{self, ClassMatch, Wanted, wanted};

use crate::labels::LabelSet;

/// The jobs a group serves: its own label names and its classes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The group's own label names, in the order the jobs listing was asked for them before
    /// classes existed ([`LabelSet::names`]).
    own: Vec<String>,
    /// The same, for look-ups.
    group: BTreeSet<String>,
    /// The classes, in spec order.
    classes: Vec<ClassMatch>,
}

impl Claim {
    /// A group with the labels `own` and no classes.
    pub fn own(own: &LabelSet) -> Claim {
        let own: Vec<String> = own.names().map(str::to_owned).collect();
        Claim {
            group: own.iter().cloned().collect(),
            own,
            classes: Vec::new(),
        }
    }

    /// The group of `spec`, whose own labels are `own` (the parsed `spec.forgejo.labels`).
    pub fn of(own: &LabelSet, spec: &RunnerGroupSpec) -> Claim {
        Claim {
            classes: ClassMatch::of(spec),
            ..Claim::own(own)
        }
    }

    /// The label names the jobs listing is asked for: the group's, then each class's not
    /// named before. Without classes, the group's alone (as before classes existed).
    pub fn listing_labels(&self) -> Vec<String> {
        let mut out = self.own.clone();
        for c in &self.classes {
            for l in &c.labels {
                if !out.contains(l) {
                    out.push(l.clone());
                }
            }
        }
        out
    }

    /// Whose runners a job asking for `runs_on` wants ([`wanted`]).
    pub fn wants<S: AsRef<str>>(&self, runs_on: &[S]) -> Wanted {
        wanted(&self.classes, &self.group, runs_on)
    }

    /// Whether some runner of the group can take a job asking for `runs_on`.
    pub fn takes<S: AsRef<str>>(&self, runs_on: &[S]) -> bool {
        self.wants(runs_on) != Wanted::Nobody
    }
}

/// The labels a runner of `class` (`None`: one of the group's own) declares: the group's
/// labels `own`, then the class's ([`runner_class::runner_labels`]).
pub fn runner_labels(own: &[String], class: Option<&RunnerClass>) -> Vec<String> {
    match class {
        Some(c) => runner_class::runner_labels(own, c),
        None => own.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::parse_labels;
    use forgerunner_core::crd::{ForgeKind, RunnerGroup};

    fn spec() -> RunnerGroupSpec {
        let mut spec = RunnerGroup::test(ForgeKind::Forgejo).spec();
        spec.classes = serde_json::from_value(serde_json::json!([
            {"name": "small", "labels": ["linux:host"]},
            {"name": "large", "labels": ["linux:host", "large:docker://node:22"]}
        ]))
        .expect("classes");
        spec
    }

    fn claim() -> Claim {
        Claim::of(
            &parse_labels(&["self-hosted:host", "linux:host"]).expect("labels"),
            &spec(),
        )
    }

    #[test]
    fn the_listing_asks_for_the_group_s_labels_then_the_classes() {
        assert_eq!(claim().listing_labels(), ["linux", "self-hosted", "large"]);
        let own = Claim::own(&parse_labels(&["debian:host"]).expect("labels"));
        assert_eq!(own.listing_labels(), ["debian"]);
    }

    #[test]
    fn a_job_no_runner_of_the_group_can_run_is_not_taken() {
        assert!(claim().takes(&["linux", "large"]));
        assert!(
            !claim().takes(&["large", "gpu"]),
            "no runner of the group has gpu"
        );
    }

    #[test]
    fn a_class_runner_declares_the_group_s_labels_and_its_class_s() {
        let spec = spec();
        let own = vec!["self-hosted:host".to_owned(), "linux:docker://alpine".to_owned()];
        assert_eq!(runner_labels(&own, None), own);
        assert_eq!(
            runner_labels(&own, spec.classes.get(1)),
            ["self-hosted:host", "linux:host", "large:docker://node:22"],
            "the class's linux replaces the group's"
        );
    }
}
