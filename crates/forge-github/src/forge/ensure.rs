//! Bringing a group's forge-side state in line with its spec: the client (per URL and
//! credentials), the scale set (find, create, rename, move, recreate) and the listener task.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use forgerunner_core::RunnerGroup;
use forgerunner_core::forge::{GroupContext, GroupKey};

use super::transports::trust_key;
use super::{GithubForge, GroupState, ScaleSetInfo};
use crate::auth::AuthMethod;
use crate::client::{GithubClient, build_transport};
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
    ) -> Result<reqwest::Client, ApiError> {
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
        let client = Arc::new(self.build_client(ctx)?);
        st.client = Some((fp, client.clone()));
        Ok(client)
    }

    /// Makes sure the scale set exists and matches the spec's name and runner group.
    pub(super) async fn ensure_scale_set(
        &self,
        ctx: &GroupContext,
        st: &mut GroupState,
        client: &GithubClient,
    ) -> Result<i64, ApiError> {
        let want = desired(ctx)?;
        if st.listener.as_ref().is_some_and(|l| l.state().scale_set_gone) {
            if let Some(l) = st.listener.take() {
                l.stop().await;
            }
            st.scale_set = None;
        }
        if let Some(have) = &st.scale_set {
            if have.name == want.name && have.runner_group == want.runner_group {
                return Ok(have.id);
            }
            let id = have.id;
            let name = (have.name != want.name).then_some(want.name.as_str());
            let group = if have.runner_group != want.runner_group {
                Some(scale_set::runner_group_id(client, want.runner_group.as_deref()).await?)
            } else {
                None
            };
            match scale_set::update(client, id, name, group).await {
                Ok(_) => {
                    st.scale_set = Some(ScaleSetInfo {
                        id,
                        name: want.name,
                        runner_group: want.runner_group,
                    });
                    return Ok(id);
                }
                Err(e) if e.status() == Some(404) => st.scale_set = None,
                Err(e) => return Err(e),
            }
        }
        let group_id = scale_set::runner_group_id(client, want.runner_group.as_deref()).await?;
        let known = ctx.group.status.as_ref().and_then(|s| s.scale_set_id);
        let mut found = match known {
            Some(id) => scale_set::get(client, id).await?,
            None => None,
        };
        if let Some(set) = &found
            && (set.name != want.name || set.runner_group_id != group_id)
        {
            let name = (set.name != want.name).then_some(want.name.as_str());
            let group = (set.runner_group_id != group_id).then_some(group_id);
            found = Some(scale_set::update(client, set.id, name, group).await?);
        }
        let set = match found {
            Some(set) => set,
            None => match scale_set::find(client, group_id, &want.name).await? {
                Some(set) => set,
                None => {
                    let set = scale_set::create(client, group_id, &want).await?;
                    tracing::info!(group = %ctx.key, scale_set_id = set.id, name = %want.name, "created GitHub runner scale set");
                    set
                }
            },
        };
        st.scale_set = Some(ScaleSetInfo {
            id: set.id,
            name: want.name,
            runner_group: want.runner_group,
        });
        Ok(set.id)
    }

    pub(super) async fn ensure(
        &self,
        ctx: &GroupContext,
        st: &mut GroupState,
    ) -> Result<(Arc<GithubClient>, i64), ApiError> {
        let client = self.ensure_client(ctx, st).await?;
        let id = self.ensure_scale_set(ctx, st, &client).await?;
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
        if let Some(l) = &st.listener
            && l.scale_set_id() == id
            && !l.is_finished()
        {
            l.set_max_capacity(capacity);
            return;
        }
        // A finished or stale listener has already released its session (or lost it).
        st.listener = None;
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
        };
        st.listener = Some(Listener::spawn(
            client.clone(),
            self.trigger.clone(),
            config,
            capacity,
        ));
    }
}
