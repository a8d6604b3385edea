//! Bringing a group's forge-side state in line with its spec: the client (per URL and
//! credentials), the scale set (find, create, rename, move, relabel, recreate) and the listener
//! task.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use forgerunner_core::RunnerGroup;
use forgerunner_core::forge::{GroupContext, GroupKey};

use super::transports::trust_key;
use super::{GithubForge, GroupState, ScaleSetInfo};
use crate::auth::AuthMethod;
use crate::client::{GithubClient, Transport, build_transport};
use crate::config_url::ConfigUrl;
use crate::error::ApiError;
use crate::listener::{Listener, ListenerConfig};
use crate::scale_set::{self, DesiredScaleSet};

pub(super) fn desired(ctx: &GroupContext) -> Result<DesiredScaleSet, ApiError> {
    let spec = github_spec(&ctx.group)?;
    let name = spec
        .scale_set_name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .unwrap_or(&ctx.key.name)
        .to_string();
    let runner_group = spec
        .runner_group
        .as_deref()
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_string);
    Ok(DesiredScaleSet {
        name,
        runner_group,
        labels: spec.labels.clone(),
    })
}

fn github_spec(group: &RunnerGroup) -> Result<&forgerunner_core::crd::GithubSpec, ApiError> {
    group
        .spec
        .github
        .as_ref()
        .ok_or_else(|| ApiError::Config("spec.github is required for forge github".into()))
}

fn fingerprint(ctx: &GroupContext) -> u64 {
    let mut h = DefaultHasher::new();
    if let Some(spec) = &ctx.group.spec.github {
        spec.config_url.hash(&mut h);
        spec.proxy_url.hash(&mut h);
    }
    ctx.credentials.secret_name.hash(&mut h);
    ctx.credentials.version.hash(&mut h);
    for (k, v) in &ctx.credentials.data {
        k.hash(&mut h);
        v.expose().hash(&mut h);
    }
    ctx.ca_bundle.hash(&mut h);
    h.finish()
}

impl GithubForge {
    pub(super) fn build_client(&self, ctx: &GroupContext) -> Result<GithubClient, ApiError> {
        let spec = github_spec(&ctx.group)?;
        let config = ConfigUrl::parse(&spec.config_url).map_err(|e| ApiError::Config(e.to_string()))?;
        let auth = AuthMethod::from_credentials(&ctx.credentials)?;
        let credential =
            auth.credential_id(&format!("{}/{}", ctx.key.namespace, ctx.credentials.secret_name));
        let http = self.transport(&ctx.key, ctx.ca_bundle.as_deref(), spec.proxy_url.as_deref())?;
        Ok(
            GithubClient::new(self.metrics.clone(), config, auth, http, self.opts.http.clone())
                .with_credential_id(credential),
        )
    }

    /// The shared transport for this CA bundle and proxy (built on first use); `group` uses
    /// it from now on, and a transport no group uses any more is dropped.
    fn transport(
        &self,
        group: &GroupKey,
        ca_bundle: Option<&str>,
        proxy: Option<&str>,
    ) -> Result<Transport, ApiError> {
        let key = trust_key(ca_bundle, proxy);
        let http = self
            .transports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_or_build(group, key, || build_transport(ca_bundle, proxy, &self.opts.http));
        self.report_cache();
        http
    }

    /// Makes sure the group has a current client (rebuilt when URL, credentials, CA or proxy
    /// change, which also restarts its listener).
    pub(super) async fn ensure_client(
        &self,
        ctx: &GroupContext,
        st: &mut GroupState,
    ) -> Result<Arc<GithubClient>, ApiError> {
        let fp = fingerprint(ctx);
        if let Some((have, client)) = &st.client
            && *have == fp
        {
            return Ok(client.clone());
        }
        if let Some(l) = st.listener.take() {
            l.stop().await;
        }
        st.scale_set = None;
        for set in std::mem::take(&mut st.classes).into_values() {
            set.stop().await;
        }
        let client = Arc::new(self.build_client(ctx)?);
        st.client = Some((fp, client.clone()));
        Ok(client)
    }

    /// Makes sure the group's own scale set exists and matches the spec's name, runner group
    /// and labels.
    pub(super) async fn ensure_scale_set(
        &self,
        ctx: &GroupContext,
        st: &mut GroupState,
        client: &GithubClient,
    ) -> Result<i64, ApiError> {
        let want = desired(ctx)?;
        let known = ctx.group.status.as_ref().and_then(|s| s.scale_set_id);
        self.ensure_set(ctx, client, want, known, &mut st.scale_set, &mut st.listener)
            .await
    }

    /// Makes sure the scale set `want` exists and matches it; `slot` holds what was last
    /// confirmed, `listener` the set's listener (stopped when the set turns out gone), `known`
    /// an id recorded earlier (the status), tried before a lookup by name.
    pub(super) async fn ensure_set(
        &self,
        ctx: &GroupContext,
        client: &GithubClient,
        want: DesiredScaleSet,
        known: Option<i64>,
        slot: &mut Option<ScaleSetInfo>,
        listener: &mut Option<Listener>,
    ) -> Result<i64, ApiError> {
        if listener.as_ref().is_some_and(|l| l.state().scale_set_gone) {
            if let Some(l) = listener.take() {
                l.stop().await;
            }
            *slot = None;
        }
        let want_labels = want.label_list();
        if let Some(have) = &*slot {
            let labels_same = scale_set::same_labels(&have.labels, &want_labels);
            if have.name == want.name && have.runner_group == want.runner_group && labels_same {
                return Ok(have.id);
            }
            let id = have.id;
            let name = (have.name != want.name).then_some(want.name.as_str());
            let group = if have.runner_group != want.runner_group {
                Some(scale_set::runner_group_id(client, want.runner_group.as_deref()).await?)
            } else {
                None
            };
            let labels = (!labels_same).then_some(want_labels.as_slice());
            match self.patch_scale_set(ctx, client, id, name, group, labels).await {
                Ok(()) => {
                    *slot = Some(ScaleSetInfo {
                        id,
                        name: want.name,
                        runner_group: want.runner_group,
                        labels: want_labels,
                    });
                    return Ok(id);
                }
                Err(e) if e.status() == Some(404) => *slot = None,
                Err(e) => return Err(e),
            }
        }
        let group_id = scale_set::runner_group_id(client, want.runner_group.as_deref()).await?;
        let found = match known {
            Some(id) => scale_set::get(client, id).await?,
            None => None,
        };
        let found = match found {
            Some(set) => Some(set),
            None => scale_set::find(client, group_id, &want.name).await?,
        };
        let id = match found {
            // Made earlier, by us or by hand: bring name, group and labels in line with the
            // spec (the labels may have changed while no operator ran).
            Some(set) => {
                let name = (set.name != want.name).then_some(want.name.as_str());
                let group = (set.runner_group_id != group_id).then_some(group_id);
                let labels = (!scale_set::same_labels(&set.label_names(), &want_labels))
                    .then_some(want_labels.as_slice());
                if name.is_some() || group.is_some() || labels.is_some() {
                    self.patch_scale_set(ctx, client, set.id, name, group, labels)
                        .await?;
                }
                set.id
            }
            None => {
                let set = scale_set::create(client, group_id, &want).await?;
                tracing::info!(group = %ctx.key, scale_set_id = set.id, name = %want.name, "created GitHub runner scale set");
                set.id
            }
        };
        *slot = Some(ScaleSetInfo {
            id,
            name: want.name,
            runner_group: want.runner_group,
            labels: want_labels,
        });
        Ok(id)
    }

    /// PATCHes what differs from the spec: name and runner group in one call, then the labels
    /// (actions/scaleset `client.go`, `UpdateRunnerScaleSet`). A 404 (the scale set is gone)
    /// is returned for the caller to recreate it. A refusal of the labels alone (400, 422) is
    /// logged and not retried until the labels change again or the operator restarts: the
    /// scale set still serves the workflows that use its old labels, and failing here would
    /// stop every runner of the group.
    async fn patch_scale_set(
        &self,
        ctx: &GroupContext,
        client: &GithubClient,
        id: i64,
        name: Option<&str>,
        group: Option<i64>,
        labels: Option<&[String]>,
    ) -> Result<(), ApiError> {
        if name.is_some() || group.is_some() {
            scale_set::update(client, id, name, group).await?;
        }
        if let Some(labels) = labels {
            match scale_set::update_labels(client, id, labels).await {
                Ok(_) => {
                    tracing::info!(group = %ctx.key, scale_set_id = id, labels = ?labels, "updated the labels of the GitHub runner scale set");
                }
                Err(e) if matches!(e.status(), Some(400 | 422)) => {
                    tracing::warn!(group = %ctx.key, scale_set_id = id, error = %e, "GitHub refused the new labels; the scale set keeps its old ones");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub(super) async fn ensure(
        &self,
        ctx: &GroupContext,
        st: &mut GroupState,
    ) -> Result<(Arc<GithubClient>, i64), ApiError> {
        let client = self.ensure_client(ctx, st).await?;
        let id = self.ensure_scale_set(ctx, st, &client).await?;
        // Named in the User-Agent of every later call, as ARC's listener does.
        client.set_scale_set_id(id);
        Ok((client, id))
    }

    pub(super) fn ensure_listener(
        &self,
        ctx: &GroupContext,
        st: &mut GroupState,
        client: &Arc<GithubClient>,
        id: i64,
    ) {
        let capacity = ctx.group.spec.max_runners;
        self.ensure_listener_of(ctx, &mut st.listener, client, id, capacity);
    }

    /// Makes sure `listener` listens on the scale set `id`, announcing `capacity`.
    pub(super) fn ensure_listener_of(
        &self,
        ctx: &GroupContext,
        listener: &mut Option<Listener>,
        client: &Arc<GithubClient>,
        id: i64,
        capacity: u32,
    ) {
        if let Some(l) = &*listener
            && l.scale_set_id() == id
            && !l.is_finished()
        {
            l.set_max_capacity(capacity);
            return;
        }
        // A finished or stale listener has already released its session (or lost it).
        *listener = None;
        // A deposed leader's late reconcile must not start a listener beside the new leader's.
        if !self.opts.fence.is_held() {
            tracing::debug!(group = %ctx.key, "not leading; GitHub listener not started");
            return;
        }
        let config = ListenerConfig {
            key: ctx.key.clone(),
            scale_set_id: id,
            owner: self.opts.owner_name.clone(),
            backoff: self.opts.listener_backoff,
            conflict_backoff: self.opts.conflict_backoff,
            shutdown_timeout: self.opts.shutdown_timeout,
            fence: self.opts.fence.clone(),
            delivery_check: crate::listener::delivery::DEFAULT_EVERY,
        };
        *listener = Some(Listener::spawn(
            client.clone(),
            self.trigger.clone(),
            config,
            capacity,
        ));
    }
}
