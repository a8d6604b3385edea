//! Labels of the job counters: the group's, plus the job's repository and workflow when the
//! operator is configured for them (`metrics.jobLabels`, as ARC's optional labels).

use std::collections::HashSet;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};

use super::group::GroupLabels;
use crate::job_identity::JobIdentity;

/// Labels of `forgerunner_jobs_started_total` and `forgerunner_jobs_completed_total`.
/// `repository` and `workflow` are left out of a series when not set, so without the switch the
/// series are exactly the per-group ones.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JobLabels {
    /// The group's labels.
    pub group: GroupLabels,
    /// `owner/repo`, when the switch is on and the forge named it.
    pub repository: Option<String>,
    /// The workflow, when the switch is on and the forge named it.
    pub workflow: Option<String>,
}

impl JobLabels {
    /// The labels of one job: the group's, and with `with_identity` its repository and workflow
    /// where known.
    pub fn of(group: &GroupLabels, identity: Option<&JobIdentity>, with_identity: bool) -> JobLabels {
        let identity = identity.filter(|_| with_identity);
        JobLabels {
            group: group.clone(),
            repository: identity.and_then(|i| i.repository.clone()),
            workflow: identity.and_then(|i| i.workflow.clone()),
        }
    }
}

/// Most `repository`/`workflow` pairs one group's job counters keep as their own series. The
/// values come from the forge (a tenant's own server may send a new repository name with every
/// job), so without a bound every job could add a series to the shared operator's `/metrics`.
pub const MAX_JOB_SERIES_PER_GROUP: usize = 100;

/// The `repository` and `workflow` value of jobs past [`MAX_JOB_SERIES_PER_GROUP`]: a real
/// repository is `owner/repo`, so it never reads like this.
pub const OTHER_JOB_SERIES: &str = "_other";

/// The `repository`/`workflow` pairs a group's job counters already have series for, up to
/// [`MAX_JOB_SERIES_PER_GROUP`]; kept in the group's ledger, so it goes with the group.
#[derive(Debug, Default)]
pub struct JobSeriesBook {
    kept: HashSet<(Option<String>, Option<String>)>,
}

impl JobSeriesBook {
    /// `labels` as counted: its own series while the group has room or already has it, else the
    /// group's [`OTHER_JOB_SERIES`] series.
    pub fn admit(&mut self, mut labels: JobLabels) -> JobLabels {
        if labels.repository.is_none() && labels.workflow.is_none() {
            return labels;
        }
        let pair = (labels.repository.take(), labels.workflow.take());
        if self.kept.contains(&pair) || self.kept.len() < MAX_JOB_SERIES_PER_GROUP {
            (labels.repository, labels.workflow) = pair.clone();
            self.kept.insert(pair);
        } else {
            labels.repository = Some(OTHER_JOB_SERIES.to_owned());
            labels.workflow = Some(OTHER_JOB_SERIES.to_owned());
        }
        labels
    }
}

impl EncodeLabelSet for JobLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        self.group.encode(encoder)?;
        if let Some(repository) = &self.repository {
            ("repository", repository.as_str()).encode(encoder.encode_label())?;
        }
        if let Some(workflow) = &self.workflow {
            ("workflow", workflow.as_str()).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::registry::Registry;

    use super::*;

    fn exposition(labels: &JobLabels) -> String {
        let family: Family<JobLabels, Counter> = Family::default();
        family.get_or_create(labels).inc();
        let mut registry = Registry::default();
        registry.register("jobs_started", "test", family);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    /// A forge naming a new repository with every job (a tenant's own server can) adds at most
    /// [`MAX_JOB_SERIES_PER_GROUP`] series per group; the rest count under `_other`.
    #[test]
    fn a_group_keeps_a_bounded_number_of_job_series() {
        let group = GroupLabels {
            forge: "gitea",
            namespace: "ci".into(),
            group: "linux".into(),
        };
        let job = |n: usize| {
            let id = JobIdentity {
                repository: Some(format!("octo/app-{n}")),
                workflow: Some("ci.yml".into()),
                ..JobIdentity::default()
            };
            JobLabels::of(&group, Some(&id), true)
        };
        let mut book = JobSeriesBook::default();
        let family: Family<JobLabels, Counter> = Family::default();
        for n in 0..10 * MAX_JOB_SERIES_PER_GROUP {
            family.get_or_create(&book.admit(job(n))).inc();
        }
        let again = book.admit(job(7));
        assert_eq!(
            again.repository.as_deref(),
            Some("octo/app-7"),
            "a kept series stays its own"
        );
        let late = book.admit(job(10 * MAX_JOB_SERIES_PER_GROUP));
        assert_eq!(late.repository.as_deref(), Some(OTHER_JOB_SERIES));
        assert_eq!(late.workflow.as_deref(), Some(OTHER_JOB_SERIES));
        let bare = book.admit(JobLabels::of(&group, None, true));
        assert_eq!(
            bare,
            JobLabels::of(&group, None, false),
            "the per-group series is always there"
        );
        let mut registry = Registry::default();
        registry.register("jobs_started", "test", family);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let series = text
            .lines()
            .filter(|l| l.starts_with("jobs_started_total{"))
            .count();
        assert_eq!(series, MAX_JOB_SERIES_PER_GROUP + 1);
    }

    #[test]
    fn repository_and_workflow_only_with_the_switch_and_when_known() {
        let group = GroupLabels {
            forge: "github",
            namespace: "ci".into(),
            group: "linux".into(),
        };
        let id = JobIdentity {
            repository: Some("octo/app".into()),
            workflow: Some("ci.yml".into()),
            ..JobIdentity::default()
        };
        let on = exposition(&JobLabels::of(&group, Some(&id), true));
        assert!(
            on.contains(r#"jobs_started_total{forge="github",namespace="ci",group="linux",repository="octo/app",workflow="ci.yml"} 1"#),
            "{on}"
        );
        for labels in [
            JobLabels::of(&group, Some(&id), false),
            JobLabels::of(&group, None, true),
        ] {
            let off = exposition(&labels);
            assert!(
                off.contains(r#"jobs_started_total{forge="github",namespace="ci",group="linux"} 1"#),
                "{off}"
            );
        }
    }
}
