//! Runner classes (`spec.classes`): which class each new runner of a pass gets, from the jobs
//! that wait and the runners each class already has. Pure: the reconciler hands in the pass's
//! observation and the number of runners the planner decided to create.
//!
//! The planner decides how many runners a group creates ([`crate::plan::plan`]); this module
//! only decides which class each of them is. A job wants the first class, in spec order, whose
//! labels it names in `runs-on` and whose runners can take it (every `runs-on` label is the
//! class's or the group's); a job that names no class's label wants the group's own runners
//! (no class), if the group's labels take it. Runners of a class that wait for a job (pending or
//! idle, never busy) are counted against the jobs that want that class first, oldest job first,
//! so a job that has a runner of its class coming gets no second one. A class at its
//! `maxRunners` gets no more runners: its jobs wait, and the runners the planner counted for
//! them are not made at all (a runner of another class could not take them). Runners the
//! planner wants beyond the jobs (`minRunners`) are the group's own.
//!
//! How the class reaches the runner: the label [`CLASS_LABEL`] on its Job and pod (read back
//! when runners are observed), the overlay of [`overlay`] on its pod, and the class handed to
//! [`crate::forge::Forge::default_runner_pod`], whose runner registers with the class's labels.

pub mod overlay;

use std::collections::{BTreeMap, BTreeSet};

use crate::crd::{ForgeKind, RunnerClass, RunnerGroupSpec};
use crate::forge::WaitingJob;
use crate::labels::split_label;

pub use overlay::{dress_job, job_class};

/// Label on a runner's Job, pod and Secret naming its class; absent on the group's own runners.
pub const CLASS_LABEL: &str = "forgerunner.dev/class";

/// What the choice needs of one class: its name, the names of its labels and its limit.
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

/// The runners a class (or the group, under `None`) has now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCount {
    /// Runners whose pods may still run (pending, running, terminating): what its
    /// `maxRunners` bounds.
    pub occupied: u32,
    /// Of those, runners that wait for a job and stay (not removed by this pass): each covers
    /// one waiting job that wants the class.
    pub covering: u32,
}

/// Everything the choice is made from.
#[derive(Clone, Copy, Debug)]
pub struct ChoiceInput<'a> {
    /// The group's classes, in spec order.
    pub classes: &'a [ClassMatch],
    /// The names of the group's own labels.
    pub group_labels: &'a BTreeSet<String>,
    /// The jobs waiting for the group, with the labels they ask for.
    pub waiting: &'a [WaitingJob],
    /// The runners each class has, by class name; `None` for the group's own.
    pub existing: &'a BTreeMap<Option<String>, ClassCount>,
    /// How many runners the planner creates this pass.
    pub create: u32,
}

/// The class of each runner to create (`None`: the group's own), at most `create` of them: fewer
/// only when jobs wait for a class at its `maxRunners`.
pub fn choose(input: &ChoiceInput<'_>) -> Vec<Option<String>> {
    let create = input.create as usize;
    if input.classes.is_empty() {
        return vec![None; create];
    }
    let mut covering: BTreeMap<Option<&str>, u32> = input
        .existing
        .iter()
        .map(|(k, c)| (k.as_deref(), c.covering))
        .collect();
    let mut occupied: Vec<u32> = input
        .classes
        .iter()
        .map(|c| {
            input
                .existing
                .get(&Some(c.name.clone()))
                .map_or(0, |n| n.occupied)
        })
        .collect();
    let mut jobs: Vec<&WaitingJob> = input.waiting.iter().collect();
    // Oldest first; jobs without a queue time after those with one.
    jobs.sort_by(|a, b| {
        (a.queued_at.is_none(), a.queued_at, &a.id).cmp(&(b.queued_at.is_none(), b.queued_at, &b.id))
    });
    let mut out: Vec<Option<String>> = Vec::with_capacity(create);
    // Jobs of a full class: the planner counted a runner for each that no class may get.
    let mut held = 0usize;
    for job in jobs {
        if out.len() == create {
            break;
        }
        let index = match wanted(input.classes, input.group_labels, &job.labels) {
            Wanted::Nobody => continue,
            Wanted::Group => None,
            Wanted::Class(i) => Some(i),
        };
        let name = index.and_then(|i| input.classes.get(i)).map(|c| c.name.as_str());
        if let Some(n) = covering.get_mut(&name).filter(|n| **n > 0) {
            *n -= 1;
            continue;
        }
        if let Some(i) = index {
            let full = input.classes[i].max_runners.is_some_and(|max| occupied[i] >= max);
            if full {
                held += 1;
                continue;
            }
            occupied[i] += 1;
        }
        out.push(name.map(str::to_owned));
    }
    let rest = create.saturating_sub(out.len()).saturating_sub(held);
    out.extend(std::iter::repeat_n(None, rest));
    out
}

#[cfg(test)]
mod tests;
