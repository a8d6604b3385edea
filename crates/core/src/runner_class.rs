//! Runner classes (`spec.classes`): which class a job wants, and what a class's runner is.
//!
//! A job wants the first class, in spec order, whose labels it names in `runs-on` and whose
//! runners can take it (every `runs-on` label is the class's or the group's); a job that names
//! no class's label wants the group's own runners (no class), if the group's labels take it
//! ([`wanted`]). How many runners of each class a pass creates is the planner's decision
//! ([`crate::plan::plan`], from the class each job wants and each runner is; see
//! [`crate::plan::classes`]).
//!
//! How the class reaches the runner: the label [`CLASS_LABEL`] on its Job and pod (read back
//! when runners are observed), the overlay of [`overlay`] on its pod, and the class handed to
//! [`crate::forge::ForgeSession::runner_pod`], whose runner registers with the class's labels.

pub mod overlay;

use std::collections::BTreeSet;

use crate::crd::{ForgeKind, RunnerClass, RunnerGroupSpec};
use crate::labels::split_label;

pub use overlay::{dress_job, job_class};

/// Label on a runner's Job, pod and Secret naming its class; absent on the group's own runners.
pub const CLASS_LABEL: &str = "forgerunner.dev/class";

/// What matching a job needs of one class: its name, the names of its labels and its limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassMatch {
    /// The class's name.
    pub name: String,
    /// The names of the class's labels (`name` of `name:scheme`).
    pub labels: BTreeSet<String>,
    /// `maxRunners` of the class.
    pub max_runners: Option<u32>,
}

impl ClassMatch {
    /// The classes of `spec`, in spec order.
    pub fn of(spec: &RunnerGroupSpec) -> Vec<ClassMatch> {
        spec.classes
            .iter()
            .map(|c| ClassMatch {
                name: c.name.clone(),
                labels: label_names(&c.labels),
                max_runners: c.max_runners,
            })
            .collect()
    }
}

/// The names of labels in the `name[:scheme]` form (a malformed one, which validation refuses,
/// is left out).
pub fn label_names<S: AsRef<str>>(labels: &[S]) -> BTreeSet<String> {
    labels
        .iter()
        .filter_map(|l| split_label(l.as_ref()).ok().map(|p| p.name.to_owned()))
        .collect()
}

/// The names of the group's own labels, which every runner of the group registers with: the
/// forge block's labels (GitHub: its extra labels; the scale set's name is not in the spec).
pub fn group_label_names(spec: &RunnerGroupSpec) -> BTreeSet<String> {
    match spec.forge {
        ForgeKind::Gitea => spec.gitea.as_ref().map(|g| label_names(&g.labels)),
        ForgeKind::Forgejo => spec.forgejo.as_ref().map(|f| label_names(&f.labels)),
        ForgeKind::Github => spec.github.as_ref().map(|g| g.labels.iter().cloned().collect()),
    }
    .unwrap_or_default()
}

/// The labels a runner of `class` registers with: the group's, then the class's, a class label
/// replacing a group label of the same name (so a class can run one name in another image).
pub fn runner_labels(group_labels: &[String], class: &RunnerClass) -> Vec<String> {
    let ours = label_names(&class.labels);
    let name = |l: &str| split_label(l).map(|p| p.name.to_owned()).unwrap_or_default();
    group_labels
        .iter()
        .filter(|l| !ours.contains(&name(l)))
        .chain(&class.labels)
        .cloned()
        .collect()
}

/// Whose runners a job wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// The class at this index of the spec's classes.
    Class(usize),
    /// The group's own runners (no class).
    Group,
    /// No runner of the group can take it.
    Nobody,
}

/// Whose runners a job asking for `runs_on` wants (rules in the module docs).
pub fn wanted<S: AsRef<str>>(classes: &[ClassMatch], group: &BTreeSet<String>, runs_on: &[S]) -> Wanted {
    let ours = |c: &ClassMatch, l: &str| c.labels.contains(l) || group.contains(l);
    let class = classes.iter().position(|c| {
        runs_on.iter().any(|l| c.labels.contains(l.as_ref())) && runs_on.iter().all(|l| ours(c, l.as_ref()))
    });
    match class {
        Some(i) => Wanted::Class(i),
        None if runs_on.iter().all(|l| group.contains(l.as_ref())) => Wanted::Group,
        None => Wanted::Nobody,
    }
}

/// Whether a job asking for `runs_on` is one for a runner of `class` (`None`: one of the
/// group's own), as [`wanted`] decides whose runners a job wants.
pub fn is_for<S: AsRef<str>>(
    classes: &[ClassMatch],
    group: &BTreeSet<String>,
    runs_on: &[S],
    class: Option<&str>,
) -> bool {
    match wanted(classes, group, runs_on) {
        Wanted::Class(i) => classes.get(i).map(|c| c.name.as_str()) == class,
        Wanted::Group => class.is_none(),
        Wanted::Nobody => false,
    }
}

#[cfg(test)]
mod tests;
