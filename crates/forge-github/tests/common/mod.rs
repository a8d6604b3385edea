//! Shared helpers of the wire tests: an emulator, a group context and fast options.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::Forge;
use forgerunner_core::crd::{ForgeKind, GithubSpec};
pub use forgerunner_core::forge::ForgeSession;
use forgerunner_core::forge::{
    Credentials, GroupContext, GroupKey, ReconcileTrigger, RemoveOutcome, RunnerCredentials, RunnerRef,
    RunnerRequest, SecretValue,
};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::{ForgeError, RunnerGroup};
use forgerunner_github::backoff::Backoff;
use forgerunner_github::client::HttpOptions;
use forgerunner_github::{GithubForge, GithubOptions};
use scaleset::testing::{DEFAULT_PAT, Emulator};
use tokio::sync::mpsc::UnboundedReceiver;

pub const PKCS1: &str = include_str!("../fixtures/app_key_pkcs1.pem");

/// An emulator with a short long-poll hold.
pub async fn emulator() -> Emulator {
    Emulator::builder()
        .long_poll(Duration::from_millis(200))
        .start()
        .await
}

/// Options with millisecond backoffs so that tests stay fast.
pub fn fast_options() -> GithubOptions {
    GithubOptions {
        http: HttpOptions {
            request_timeout: Duration::from_secs(10),
            poll_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            max_retries: 3,
            retry: Backoff {
                base: Duration::from_millis(5),
                cap: Duration::from_secs(2),
            },
            registration_retry: Backoff {
                base: Duration::from_millis(5),
                cap: Duration::from_millis(50),
            },
            ..HttpOptions::default()
        },
        listener_backoff: Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(200),
        },
        conflict_backoff: Backoff {
            base: Duration::from_millis(50),
            cap: Duration::from_millis(200),
        },
        shutdown_timeout: Duration::from_secs(5),
        owner_name: "forgerunner-test".into(),
        ..GithubOptions::default()
    }
}

pub struct Harness {
    pub forge: GithubForge,
    pub metrics: Arc<Metrics>,
    pub wakes: UnboundedReceiver<GroupKey>,
}

pub fn harness() -> Harness {
    let metrics = Arc::new(Metrics::default());
    let (trigger, wakes) = ReconcileTrigger::channel();
    let forge = GithubForge::with_options(metrics.clone(), trigger, fast_options());
    Harness {
        forge,
        metrics,
        wakes,
    }
}

pub fn pat_credentials(token: &str) -> Credentials {
    credentials(&[("github_token", token)])
}

pub fn credentials(pairs: &[(&str, &str)]) -> Credentials {
    Credentials {
        secret_name: "gh-creds".into(),
        data: pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), SecretValue::new(*v)))
            .collect::<BTreeMap<_, _>>(),
        version: "1".into(),
    }
}

/// A GitHub RunnerGroup `ns/name` (uid `uid-<name>`) with extra `github` fields merged in.
pub fn group(name: &str, config_url: &str, github_extra: serde_json::Value, max_runners: u32) -> RunnerGroup {
    let mut github = serde_json::json!({ "configUrl": config_url, "credentials": "gh-creds" });
    if let (Some(g), Some(extra)) = (github.as_object_mut(), github_extra.as_object()) {
        for (k, v) in extra {
            g.insert(k.clone(), v.clone());
        }
    }
    let github: GithubSpec = serde_json::from_value(github).expect("valid github block");
    RunnerGroup::test(ForgeKind::Github)
        .named("ns", name)
        .uid(format!("uid-{name}"))
        .github(github)
        .max(max_runners)
        .build()
}

pub fn context(group: RunnerGroup, credentials: Credentials) -> GroupContext {
    let name = group.metadata.name.clone().unwrap_or_default();
    GroupContext {
        key: GroupKey {
            namespace: "ns".into(),
            name,
        },
        uid: group.metadata.uid.clone().unwrap_or_default(),
        group,
        credentials,
        ca_bundle: None,
        webhook_secret: None,
    }
}

/// Opens the session of a group as core does ([`Forge::open`]). The sessions of one group share
/// its state at the backend, so a test may open one for each call.
pub trait OpenSession {
    /// The session of `ctx`'s group.
    fn session(&self, ctx: &GroupContext) -> Box<dyn ForgeSession>;
}

impl OpenSession for GithubForge {
    fn session(&self, ctx: &GroupContext) -> Box<dyn ForgeSession> {
        self.open(&ctx.key)
    }
}

/// A PAT context for `name` against `emu`.
pub fn pat_context(emu: &Emulator, name: &str) -> GroupContext {
    context(
        group(name, &emu.config_url(), serde_json::json!({}), 10),
        pat_credentials(DEFAULT_PAT),
    )
}

/// Retries `f` until it returns `Some`, failing after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The forge's view with no runners, retrying while the backend reports `NotReady`.
pub async fn demand(forge: &GithubForge, ctx: &GroupContext) -> forgerunner_core::forge::ForgeView {
    eventually(Duration::from_secs(10), "demand", || async {
        match forge.session(ctx).snapshot(ctx, &[]).await {
            Ok(d) => Some(d),
            Err(ForgeError::NotReady(_)) => None,
            Err(e) => panic!("demand failed: {e}"),
        }
    })
    .await
}

pub const WAIT: Duration = Duration::from_secs(15);

pub mod listener;
pub mod service;
pub mod stub;

/// Registers the runner `name` of the group's own (bound to no job) through a session of
/// `ctx`'s group, as core does; panics on an error.
pub async fn registered(forge: &GithubForge, ctx: &GroupContext, name: &str) -> RunnerCredentials {
    forge
        .session(ctx)
        .register(ctx, &RunnerRequest::unbound(name, None))
        .await
        .expect("register")
}

/// Deregisters `runner` through a session of `ctx`'s group, as core does; panics on an error.
pub async fn removed(forge: &GithubForge, ctx: &GroupContext, runner: &RunnerRef) -> RemoveOutcome {
    forge
        .session(ctx)
        .deregister(ctx, runner)
        .await
        .expect("deregister")
}
