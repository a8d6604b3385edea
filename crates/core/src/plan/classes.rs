//! Demand and supply per runner class (`spec.classes`), for [`super::plan`].
//!
//! Every runner and every unit of demand belongs to one *kind*: a class of the spec, the group's
//! own runners (no class), or a class the spec no longer has (runners only). A runner covers
//! only demand of its own kind: a job that wants `large` is never covered by a `small` runner,
//! which could not take it, nor the warm pool by a class's runner. A group without classes has
//! one kind, the group's own, and plans exactly as before classes existed.

use std::collections::BTreeMap;

/// A class of `spec.classes` as the planner sees it: its name and its limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassLimit {
    /// The class's name.
    pub name: String,
    /// `maxRunners` of the class; `None`: only the group's `maxRunners` bounds it.
    pub max_runners: Option<u32>,
}

/// The group's classes, the class each waiting job wants and the class of each runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classes<'a> {
    /// The classes of the spec, in spec order; empty for a group without classes.
    pub limits: &'a [ClassLimit],
    /// The class each job of the forge's waiting list wants, as an index into `limits`
    /// (`None`: the group's own runners), oldest job first. Jobs the forge counts in
    /// `waiting_jobs` but does not list want the group's own runners; when the list is longer
    /// than `waiting_jobs` (runners took jobs since the list was fetched), its oldest entries
    /// are the ones taken, as the forge hands out its oldest job first.
    pub wanted: &'a [Option<usize>],
    /// The class of each classed runner, by runner name; a runner not named here is one of the
    /// group's own.
    pub of_runner: &'a BTreeMap<String, String>,
}

/// No classes: every runner and every job is the group's own.
static NO_RUNNER_CLASSES: BTreeMap<String, String> = BTreeMap::new();

impl Classes<'static> {
    /// A group without classes.
    pub const NONE: Classes<'static> = Classes {
        limits: &[],
        wanted: &[],
        of_runner: &NO_RUNNER_CLASSES,
    };
}

/// Whose a runner, or a unit of demand, is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// The class at this index of [`Classes::limits`].
    Class(usize),
    /// The group's own runners.
    Group,
    /// A class the spec no longer has: its runners cover nothing.
    Retired,
}

/// Demand in the order it is served: runs of units of one kind.
pub(super) type Demand = Vec<(Kind, u32)>;

/// The kinds of one pass, with a tally slot for each.
pub(super) struct Kinds<'a> {
    classes: Classes<'a>,
}

impl<'a> Kinds<'a> {
    pub(super) fn new(classes: Classes<'a>) -> Self {
        Kinds { classes }
    }

    /// Tally slots: one per class, then the group's own, then retired classes.
    pub(super) fn len(&self) -> usize {
        self.classes.limits.len() + 2
    }

    pub(super) fn index(&self, kind: Kind) -> usize {
        let n = self.classes.limits.len();
        match kind {
            Kind::Class(i) => i.min(n),
            Kind::Group => n,
            Kind::Retired => n + 1,
        }
    }

    /// The kind of the runner called `name`; without classes, always the group's own.
    pub(super) fn of_runner(&self, name: &str) -> Kind {
        if self.classes.limits.is_empty() {
            return Kind::Group;
        }
        match self.classes.of_runner.get(name) {
            None => Kind::Group,
            Some(class) => self
                .classes
                .limits
                .iter()
                .position(|c| &c.name == class)
                .map_or(Kind::Retired, Kind::Class),
        }
    }

    /// How many of `names` are of each kind.
    pub(super) fn tally<'n>(&self, names: impl IntoIterator<Item = &'n str>) -> Vec<u32> {
        let mut out = vec![0u32; self.len()];
        for name in names {
            let i = self.index(self.of_runner(name));
            out[i] = out[i].saturating_add(1);
        }
        out
    }

    /// The demand of `waiting_jobs` jobs and `min_runners` warm runners, in the order it is
    /// served: the listed jobs oldest first, then the jobs the forge counts without listing,
    /// then the warm pool (the group's own runners). Its units add up to
    /// `waiting_jobs + min_runners`, whatever the classes.
    pub(super) fn demand(&self, waiting_jobs: u32, min_runners: u32) -> Demand {
        let n = self.classes.limits.len();
        let listed: &[Option<usize>] = if n == 0 { &[] } else { self.classes.wanted };
        let jobs = usize::try_from(waiting_jobs).unwrap_or(usize::MAX);
        let listed = &listed[listed.len().saturating_sub(jobs)..];
        let mut out: Demand = listed
            .iter()
            .map(|w| (w.filter(|i| *i < n).map_or(Kind::Group, Kind::Class), 1))
            .collect();
        let unlisted = waiting_jobs.saturating_sub(u32::try_from(listed.len()).unwrap_or(u32::MAX));
        out.push((Kind::Group, unlisted));
        out.push((Kind::Group, min_runners));
        out
    }

    /// Units of `demand` of each kind.
    pub(super) fn totals(&self, demand: &Demand) -> Vec<u32> {
        let mut out = vec![0u32; self.len()];
        for &(kind, n) in demand {
            let i = self.index(kind);
            out[i] = out[i].saturating_add(n);
        }
        out
    }

    /// Of `supply` waiting runners of each kind, how many each kind keeps: those covering a
    /// unit of demand of their kind, served in order, no more than `cap` in all.
    pub(super) fn kept(&self, demand: &Demand, supply: &[u32], cap: u32) -> Vec<u32> {
        let mut cover = supply.to_vec();
        let mut kept = vec![0u32; self.len()];
        let mut left = cap;
        for &(kind, n) in demand {
            let i = self.index(kind);
            let k = n.min(cover[i]).min(left);
            cover[i] -= k;
            kept[i] += k;
            left -= k;
        }
        kept
    }

    /// The runners to create, in the order demand is served: one for each unit of demand no
    /// waiting runner of its kind covers, while the group has `headroom` and the unit's class
    /// is below its `maxRunners` (`occupied`: runners of each kind that count against it). A
    /// unit whose class is full gets nothing, and takes no room from the others.
    pub(super) fn creations(
        &self,
        demand: &Demand,
        supply: &[u32],
        occupied: &[u32],
        headroom: u32,
    ) -> Vec<Option<String>> {
        let mut cover = supply.to_vec();
        let mut room: Vec<u32> = vec![u32::MAX; self.len()];
        for (i, class) in self.classes.limits.iter().enumerate() {
            if let Some(max) = class.max_runners {
                room[i] = max.saturating_sub(occupied[i]);
            }
        }
        let mut left = headroom;
        let mut out = Vec::new();
        for &(kind, n) in demand {
            let i = self.index(kind);
            let covered = n.min(cover[i]);
            cover[i] -= covered;
            let make = (n - covered).min(room[i]).min(left);
            room[i] -= make;
            left -= make;
            let name = match kind {
                Kind::Class(c) => self.classes.limits.get(c).map(|l| l.name.clone()),
                Kind::Group | Kind::Retired => None,
            };
            out.extend(std::iter::repeat_n(name, make as usize));
        }
        out
    }
}
#[cfg(test)]
mod tests;
