//! Runners this group's forge session registered, when, and what the forge said of each (pure).
//!
//! [`crate::forge::ForgeSession::register`] returns annotations for the runner's Job: the ids the
//! forge gave the runner (GitHub: its runner id and scale set id). Until the store lists the Job
//! they are nowhere else; and once it does, the Job's copy is one anyone who may edit Jobs in
//! the namespace can rewrite, while this one came from the forge itself. So the forge is told
//! these, not the Job's, for the keys `register` returned ([`Registrations::runner_ref`]), and
//! when the runner was registered through this session: it has seen the runner's whole life,
//! and a forge listing fetched before that time cannot tell of it.
//!
//! A registration is forgotten once no pass observes its runner, and all of them when the
//! group's session is replaced or closed ([`super::Ledger::session`]): another session did not
//! register them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::forge::RunnerRef;
use crate::plan::{ObservedRunner, RunnerPhase};
use crate::runner_job::ObservedJob;

/// One runner the session registered: when, and the annotations `register` returned.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Registration {
    at: Instant,
    annotations: BTreeMap<String, String>,
}

/// What `register` returned for each runner of the group's current session, and when, by
/// runner name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registrations {
    by_runner: BTreeMap<String, Registration>,
}

impl Registrations {
    /// Takes in that the session registered `runner` at `at` (right after `register` returned),
    /// with the annotations `register` returned.
    pub fn record(&mut self, runner: &str, annotations: &BTreeMap<String, String>, at: Instant) {
        let registration = Registration {
            at,
            annotations: annotations.clone(),
        };
        self.by_runner.insert(runner.to_owned(), registration);
    }

    /// Forgets the runners no pass observes any more (their Jobs are gone, and so are they).
    pub fn retain_observed(&mut self, runners: &[ObservedRunner]) {
        let observed: BTreeSet<&str> = runners.iter().map(|r| r.name.as_str()).collect();
        self.by_runner.retain(|name, _| observed.contains(name.as_str()));
        if self.by_runner.is_empty() {
            // An emptied B-tree keeps its node; a group that made no runner lately keeps nothing.
            self.by_runner = BTreeMap::new();
        }
    }

    /// Forgets every registration (the session that made them is gone).
    pub fn clear(&mut self) {
        self.by_runner = BTreeMap::new();
    }

    /// Whether the session registered `runner`.
    pub fn contains(&self, runner: &str) -> bool {
        self.by_runner.contains_key(runner)
    }

    /// How many runners the book holds.
    pub fn len(&self) -> usize {
        self.by_runner.len()
    }

    /// Whether the book holds no runner.
    pub fn is_empty(&self) -> bool {
        self.by_runner.is_empty()
    }

    /// How the forge should see the runner `name` in `phase`, whose Job is `job` when the store
    /// shows it: the Job's annotations with what `register` returned laid over them.
    pub fn runner_ref(&self, name: &str, phase: RunnerPhase, job: Option<&ObservedJob>) -> RunnerRef {
        let mut annotations = job
            .and_then(|j| j.metadata.annotations.clone())
            .unwrap_or_default();
        let registration = self.by_runner.get(name);
        if let Some(registered) = registration {
            annotations.extend(registered.annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        RunnerRef {
            name: name.to_owned(),
            annotations,
            phase,
            stored: job.is_some(),
            registered_at: registration.map(|r| r.at),
            connected_since: None,
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn observed(name: &str) -> ObservedRunner {
        ObservedRunner::fresh(name)
    }

    fn now() -> Instant {
        Instant::now()
    }

    fn ids(id: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("forge/runner-id".to_owned(), id.to_owned())])
    }

    fn job(name: &str, annotations: &[(&str, &str)]) -> ObservedJob {
        crate::testing::annotated_job(name, annotations)
    }

    #[test]
    fn a_recorded_runner_is_known_until_no_pass_observes_it() {
        let mut book = Registrations::default();
        book.record("g-aaaaa", &ids("1"), now());
        book.record("g-bbbbb", &ids("2"), now());
        assert!(book.contains("g-aaaaa") && book.contains("g-bbbbb"));
        book.retain_observed(&[observed("g-bbbbb"), observed("g-zzzzz")]);
        assert!(!book.contains("g-aaaaa"), "its Job is gone");
        assert!(book.contains("g-bbbbb"));
        assert_eq!(book.len(), 1);
        book.retain_observed(&[]);
        assert!(book.is_empty());
        assert_eq!(book, Registrations::default());
    }

    #[test]
    fn a_runner_the_store_does_not_show_yet_gets_what_register_returned() {
        let mut book = Registrations::default();
        let at = now();
        book.record("g-aaaaa", &ids("7"), at);
        let fresh = book.runner_ref("g-aaaaa", RunnerPhase::Pending, None);
        assert_eq!(fresh.annotations, ids("7"));
        assert_eq!(fresh.registered_at, Some(at), "when the session registered it");
        assert!(fresh.registered_here() && !fresh.stored);
        let adopted = book.runner_ref("g-ccccc", RunnerPhase::Pending, None);
        assert!(adopted.annotations.is_empty());
        assert_eq!(adopted.registered_at, None);
        assert!(!adopted.registered_here() && !adopted.stored);
    }

    /// M2 of the security review: a Job's runner id is an annotation anyone who may edit Jobs
    /// can rewrite; for a runner this session registered, the forge's own answer wins.
    #[test]
    fn what_register_returned_wins_over_the_jobs_copy() {
        let mut book = Registrations::default();
        book.record("g-aaaaa", &ids("7"), now());
        let edited = job("g-aaaaa", &[("forge/runner-id", "666"), ("busy", "true")]);
        let r = book.runner_ref("g-aaaaa", RunnerPhase::Running, Some(&edited));
        assert_eq!(
            r.annotations.get("forge/runner-id").map(String::as_str),
            Some("7")
        );
        assert_eq!(r.annotations.get("busy").map(String::as_str), Some("true"));
        assert!(r.registered_here() && r.stored);
        let other = job("g-ccccc", &[("forge/runner-id", "9")]);
        let r = book.runner_ref("g-ccccc", RunnerPhase::Running, Some(&other));
        assert_eq!(r.annotations, ids("9"), "an adopted runner's Job speaks for it");
        assert!(!r.registered_here());
    }

    #[test]
    fn clearing_forgets_every_registration() {
        let mut book = Registrations::default();
        book.record("g-aaaaa", &ids("7"), now());
        book.clear();
        assert!(!book.contains("g-aaaaa"));
        assert!(
            !book
                .runner_ref("g-aaaaa", RunnerPhase::Pending, None)
                .registered_here()
        );
    }
}
