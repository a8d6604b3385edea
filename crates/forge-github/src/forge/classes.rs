//! Runner classes (`spec.classes`) on GitHub: each class is a runner scale set of its own, in
//! the group's runner group, named `<scale set name>-<class>` and labelled with the group's
//! labels and the class's. GitHub assigns a job to a scale set whose labels hold all its
//! `runs-on` labels (actions/scaleset README, "Job matching"), so the scale set a job arrives
//! at is its class: each class's set has its own listener and message session, its waiting
//! jobs are reported with the class's labels (so core's choice gives their runners that class),
//! and a runner of the class gets its JIT config from the class's set.

use std::collections::BTreeSet;
use std::sync::Arc;

use forgerunner_core::crd::RunnerClass;
use forgerunner_core::forge::{GroupContext, RunnerRef};
use forgerunner_core::runner_class::{label_names, runner_labels};

use super::ensure::desired;
use super::{GithubForge, GroupState, ScaleSetInfo};
use crate::SCALE_SET_ID_ANNOTATION;
use crate::client::GithubClient;
use crate::error::ApiError;
use crate::listener::Listener;
use crate::scale_set::{self, DesiredScaleSet};

/// The scale set of one class, as this process knows it.
#[derive(Debug, Default)]
pub(super) struct ClassSet {
    /// The set as last confirmed at the service.
    pub(super) scale_set: Option<ScaleSetInfo>,
    /// Its listener; none for a class the spec no longer has.
    pub(super) listener: Option<Listener>,
}

impl ClassSet {
    /// Stops the set's listener, if any (its session is deleted on the way).
    pub(super) async fn stop(self) {
        if let Some(l) = self.listener {
            l.stop().await;
        }
    }
}

/// The name of `class`'s scale set in a group whose own set is `base`.
pub fn class_scale_set_name(base: &str, class: &str) -> String {
    format!("{base}-{class}")
}

/// What `class`'s scale set should be: its name, the group's runner group, and the group's
/// labels with the class's (a class label of the same name as a group label replaces it); the
/// name is a label of its own ([`DesiredScaleSet::label_list`]), as ARC does for its sets.
pub(super) fn desired_class(ctx: &GroupContext, class: &RunnerClass) -> Result<DesiredScaleSet, ApiError> {
    let own = desired(ctx)?;
    Ok(DesiredScaleSet {
        name: class_scale_set_name(&own.name, &class.name),
        runner_group: own.runner_group,
        labels: runner_labels(&own.labels, class),
    })
}

/// The labels a waiting job of `class`'s scale set is reported with: the class's label names.
/// Validation makes sure core's choice picks `class` for exactly these
/// ([`crate::validate::validate_classes`]); a job of the group's own set is reported with none,
/// which core gives the group's own runners.
pub(super) fn reported_labels(class: &RunnerClass) -> Vec<String> {
    label_names(&class.labels).into_iter().collect()
}

/// The scale set ids of runners among `runners`, from their Jobs' annotations.
fn sets_in_use(runners: &[RunnerRef]) -> BTreeSet<i64> {
    runners
        .iter()
        .filter_map(|r| r.annotations.get(SCALE_SET_ID_ANNOTATION)?.parse().ok())
        .collect()
}

impl GithubForge {
    /// Makes sure each class of the spec has its scale set and listener, and retires the sets
    /// of classes the spec no longer has (see [`GithubForge::retire_classes`]).
    pub(super) async fn ensure_classes(
        &self,
        ctx: &GroupContext,
        st: &mut GroupState,
        client: &Arc<GithubClient>,
        runners: &[RunnerRef],
    ) -> Result<(), ApiError> {
        for class in &ctx.group.spec.classes {
            let id = self.ensure_class(ctx, st, client, class).await?;
            let max = ctx.group.spec.max_runners;
            let capacity = class.max_runners.map_or(max, |m| m.min(max));
            let set = st.classes.entry(class.name.clone()).or_default();
            self.ensure_listener_of(ctx, &mut set.listener, client, id, capacity);
        }
        self.retire_classes(ctx, st, client, runners).await
    }

    /// Makes sure `class`'s scale set exists and matches the spec; its id.
    pub(super) async fn ensure_class(
        &self,
        ctx: &GroupContext,
        st: &mut GroupState,
        client: &GithubClient,
        class: &RunnerClass,
    ) -> Result<i64, ApiError> {
        let want = desired_class(ctx, class)?;
        let set = st.classes.entry(class.name.clone()).or_default();
        self.ensure_set(ctx, client, want, None, &mut set.scale_set, &mut set.listener)
            .await
    }

    /// Stops the listeners of classes the spec no longer has, and deletes their scale sets
    /// once no runner of the group was registered in them (a runner at work keeps its set
    /// until its Job is gone). Only sets this process knows are retired: after a restart, the
    /// set of a class removed meanwhile stays at the service (it has no runners and takes
    /// jobs only from workflows that still name it).
    async fn retire_classes(
        &self,
        ctx: &GroupContext,
        st: &mut GroupState,
        client: &GithubClient,
        runners: &[RunnerRef],
    ) -> Result<(), ApiError> {
        let wanted: BTreeSet<&str> = ctx.group.spec.classes.iter().map(|c| c.name.as_str()).collect();
        let gone: Vec<String> = st
            .classes
            .keys()
            .filter(|n| !wanted.contains(n.as_str()))
            .cloned()
            .collect();
        let in_use = sets_in_use(runners);
        for name in gone {
            let Some(set) = st.classes.get_mut(&name) else {
                continue;
            };
            if let Some(l) = set.listener.take() {
                l.stop().await;
            }
            let id = set.scale_set.as_ref().map(|s| s.id);
            if id.is_some_and(|id| in_use.contains(&id)) {
                continue;
            }
            if let Some(id) = id {
                match scale_set::delete(client, id).await {
                    Ok(()) => {
                        tracing::info!(group = %ctx.key, class = %name, scale_set_id = id, "deleted the GitHub runner scale set of a class the spec no longer has");
                    }
                    Err(e) if e.status() == Some(404) => {}
                    Err(e) => return Err(e),
                }
            }
            st.classes.remove(&name);
        }
        Ok(())
    }

    /// Deletes the scale set of every class: those of the spec (looked up by name when this
    /// process has not seen them) and those it still knows of classes removed since. A set
    /// already gone is no error.
    pub(super) async fn delete_class_sets(
        &self,
        ctx: &GroupContext,
        st: &mut GroupState,
        client: &GithubClient,
    ) -> Result<(), ApiError> {
        let mut ids: Vec<(String, i64)> = st
            .classes
            .iter()
            .filter_map(|(n, s)| Some((n.clone(), s.scale_set.as_ref()?.id)))
            .collect();
        let unseen: Vec<&RunnerClass> = ctx
            .group
            .spec
            .classes
            .iter()
            .filter(|c| !ids.iter().any(|(n, _)| n == &c.name))
            .collect();
        if !unseen.is_empty() {
            let own = desired(ctx)?;
            let gid = scale_set::runner_group_id(client, own.runner_group.as_deref()).await?;
            for class in unseen {
                let name = class_scale_set_name(&own.name, &class.name);
                if let Some(found) = scale_set::find(client, gid, &name).await? {
                    ids.push((class.name.clone(), found.id));
                }
            }
        }
        for (class, id) in ids {
            match scale_set::delete(client, id).await {
                Ok(()) => {
                    tracing::info!(group = %ctx.key, class = %class, scale_set_id = id, "deleted the GitHub runner scale set of a class");
                }
                Err(e) if e.status() == Some(404) => {}
                Err(e) => return Err(e),
            }
            st.classes.remove(&class);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, labels: &[&str]) -> RunnerClass {
        serde_json::from_value(serde_json::json!({"name": name, "labels": labels})).expect("class")
    }

    #[test]
    fn a_class_set_is_named_after_the_groups_set_and_the_class() {
        assert_eq!(class_scale_set_name("runners", "large"), "runners-large");
    }

    fn context(github: serde_json::Value) -> GroupContext {
        use forgerunner_core::crd::{ForgeKind, GithubSpec, RunnerGroup};
        use forgerunner_core::forge::{Credentials, GroupKey};
        let github: GithubSpec = serde_json::from_value(github).expect("github block");
        GroupContext {
            key: GroupKey {
                namespace: "ns".into(),
                name: "sized".into(),
            },
            uid: "uid".into(),
            group: RunnerGroup::test(ForgeKind::Github)
                .named("ns", "sized")
                .github(github)
                .build(),
            credentials: Credentials::default(),
            ca_bundle: None,
            webhook_secret: None,
        }
    }

    #[test]
    fn a_class_sets_labels_are_its_name_the_groups_and_the_classes() {
        let ctx = context(serde_json::json!({
            "configUrl": "https://github.com/org", "credentials": "c",
            "scaleSetName": " ci ", "runnerGroup": "big", "labels": ["linux"]
        }));
        let want = desired_class(&ctx, &class("large", &["linux", "large"])).expect("desired");
        assert_eq!(want.name, "ci-large");
        assert_eq!(
            want.runner_group.as_deref(),
            Some("big"),
            "the group's runner group"
        );
        assert_eq!(want.label_list(), ["ci-large", "linux", "large"]);
        let unnamed = context(serde_json::json!({"configUrl": "https://github.com/org", "credentials": "c"}));
        let want = desired_class(&unnamed, &class("large", &["large"])).expect("desired");
        assert_eq!(want.name, "sized-large", "after the group's name by default");
        assert_eq!(want.runner_group, None);
    }

    #[test]
    fn jobs_of_a_class_set_are_reported_with_the_class_label_names() {
        assert_eq!(
            reported_labels(&class("large", &["large", "gpu"])),
            ["gpu", "large"]
        );
    }

    #[test]
    fn the_sets_in_use_are_read_from_the_runner_jobs() {
        let runner = |set: Option<&str>| RunnerRef {
            name: "r".into(),
            annotations: set
                .map(|v| [(SCALE_SET_ID_ANNOTATION.to_owned(), v.to_owned())].into())
                .unwrap_or_default(),
            phase: forgerunner_core::plan::RunnerPhase::Running,
            stored: true,
            registered_at: None,
            connected_since: None,
        };
        let in_use = sets_in_use(&[runner(Some("7")), runner(None), runner(Some("x"))]);
        assert_eq!(in_use, BTreeSet::from([7]));
    }
}
