//! Labels of the job counters: the group's, plus the job's repository and workflow when the
//! operator is configured for them (`metrics.jobLabels`, as ARC's optional labels).

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
