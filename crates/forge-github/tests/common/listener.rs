//! A listener and its client, as the listener wire tests start them.

use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::Fence;
use forgerunner_core::forge::{GroupKey, ReconcileTrigger, SecretValue};
use forgerunner_core::metrics::Metrics;
use forgerunner_github::auth::AuthMethod;
use forgerunner_github::client::{GithubClient, HttpOptions, build_transport};
use forgerunner_github::config_url::ConfigUrl;
use forgerunner_github::listener::{Listener, ListenerConfig};

use super::fast_options;

/// A client of the service at `config_url`, with PAT `token`.
pub fn client(config_url: &str, token: &str, opts: HttpOptions) -> Arc<GithubClient> {
    let transport = build_transport(None, None, &opts).expect("transport");
    Arc::new(GithubClient::new(
        Arc::new(Metrics::default()),
        ConfigUrl::parse(config_url).expect("config URL"),
        AuthMethod::Pat(SecretValue::new(token)),
        transport,
        opts,
    ))
}

/// The listener of group `ns/g` on scale set `scale_set_id`, announcing `capacity`, with the
/// fast options' backoffs and a delivery check every `delivery_check`.
pub fn spawn(
    client: Arc<GithubClient>,
    scale_set_id: i64,
    capacity: u32,
    delivery_check: Duration,
) -> Listener {
    let opts = fast_options();
    let (trigger, _wakes) = ReconcileTrigger::channel();
    Listener::spawn(
        client,
        trigger,
        ListenerConfig {
            key: GroupKey {
                namespace: "ns".into(),
                name: "g".into(),
            },
            scale_set_id,
            owner: "forgerunner-test".into(),
            backoff: opts.listener_backoff,
            conflict_backoff: opts.conflict_backoff,
            shutdown_timeout: opts.shutdown_timeout,
            fence: Fence::open(),
            delivery_check,
        },
        capacity,
    )
}
