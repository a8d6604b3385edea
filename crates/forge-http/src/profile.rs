//! What a Gitea-family forge makes of a spec (`Forge::describe`): its violations, or the
//! [`ForgeProfile`] of the group.
//!
//! `spec.gitea` and `spec.forgejo` name the same cluster objects and URLs in fields of the same
//! meaning and are polled at their own interval, so the profile is built here once from the
//! fields each forge reads out of its block ([`Block`]). What differs stays the forge's: its
//! rules, whether it takes a webhook Secret, its cleanup hint and its default poll.

use std::collections::BTreeMap;
use std::time::Duration;

use forgerunner_core::forge::{ClusterRefs, ForgeProfile, OutboundUrl};
use forgerunner_core::validate::SpecViolation;

use crate::spec_rules::BlockFields;

/// The fields of a Gitea-family block that the profile is made of.
#[derive(Clone, Copy, Debug)]
pub struct Block<'a> {
    /// `url`: the instance, every call's base.
    pub url: &'a str,
    /// `proxyUrl` as written: listed as an outbound URL whenever it is set, so that a
    /// configured allowlist judges it.
    pub proxy_url: Option<&'a str>,
    /// `credentials`: the Secret with the API token.
    pub credentials: &'a str,
    /// `caBundleConfigMap`; an empty name counts as unset.
    pub ca_bundle_config_map: Option<&'a str>,
    /// The Secret that verifies webhook deliveries (`None` for a forge without job webhooks);
    /// an empty name counts as unset.
    pub webhook_secret: Option<&'a str>,
    /// `pollIntervalSeconds` with its default applied.
    pub poll_interval_seconds: u32,
}

/// What a Gitea-family forge says of a spec besides its [`Block`].
#[derive(Clone, Debug)]
pub struct Described<'a> {
    /// What the forge refuses in the spec, in the order users read it; empty when valid.
    pub violations: Vec<SpecViolation>,
    /// The paths of the block's fields, which the outbound URLs name.
    pub fields: &'a BlockFields,
    /// The forge's block; `None` when it is missing (the reconciler refuses such a spec before
    /// it asks the forge), which leaves the profile empty but for its poll.
    pub block: Option<Block<'a>>,
    /// How often a group is polled when the block is missing.
    pub default_poll_seconds: u32,
    /// What a failed cleanup may leave at the forge ([`ForgeProfile::cleanup_hint`]).
    pub cleanup_hint: String,
}

/// The spec's violations, or the group's profile: its block's cluster objects and URLs, a resync
/// at its poll interval, no runner permissions and no exit code that means more than "failed".
pub fn describe(d: Described<'_>) -> Result<ForgeProfile, Vec<SpecViolation>> {
    if !d.violations.is_empty() {
        return Err(d.violations);
    }
    let block = d.block.as_ref();
    let named = |n: Option<&str>| n.filter(|n| !n.is_empty()).map(str::to_owned);
    let cluster_refs = ClusterRefs {
        credentials_secret: block.map(|b| b.credentials.to_owned()).unwrap_or_default(),
        ca_bundle_config_map: block.and_then(|b| named(b.ca_bundle_config_map)),
        webhook_secret: block.and_then(|b| named(b.webhook_secret)),
    };
    let outbound_urls = block.map_or_else(Vec::new, |b| outbound_urls(d.fields, b));
    let seconds = block.map_or(d.default_poll_seconds, |b| b.poll_interval_seconds);
    Ok(ForgeProfile {
        cluster_refs,
        outbound_urls,
        resync_interval: Duration::from_secs(u64::from(seconds)),
        cleanup_hint: d.cleanup_hint,
        runner_role_rules: Vec::new(),
        runner_exits: BTreeMap::new(),
    })
}

/// The block's URL and, when set, its proxy.
fn outbound_urls(fields: &BlockFields, block: &Block<'_>) -> Vec<OutboundUrl> {
    let mut urls = vec![OutboundUrl {
        field: fields.url,
        url: block.url.to_owned(),
    }];
    urls.extend(block.proxy_url.map(|p| OutboundUrl {
        field: fields.proxy_url,
        url: p.to_owned(),
    }));
    urls
}

#[cfg(test)]
mod tests {
    use forgerunner_core::validate::violation;

    use super::*;

    const FIELDS: BlockFields = crate::block_fields!("gitea");

    fn described(block: Option<Block<'static>>) -> Described<'static> {
        Described {
            violations: Vec::new(),
            fields: &FIELDS,
            block,
            default_poll_seconds: 7,
            cleanup_hint: "delete them".into(),
        }
    }

    fn block() -> Block<'static> {
        Block {
            url: "https://gitea.example.com",
            proxy_url: Some("http://proxy:3128"),
            credentials: "creds",
            ca_bundle_config_map: Some(""),
            webhook_secret: Some("hook"),
            poll_interval_seconds: 30,
        }
    }

    #[test]
    fn violations_come_back_as_they_are() {
        let v = vec![violation("spec.gitea.url", "bad")];
        let d = Described {
            violations: v.clone(),
            ..described(Some(block()))
        };
        assert_eq!(describe(d), Err(v));
    }

    #[test]
    fn the_block_names_objects_urls_and_poll() {
        let p = describe(described(Some(block()))).expect("valid");
        assert_eq!(p.cluster_refs.credentials_secret, "creds");
        assert_eq!(
            p.cluster_refs.ca_bundle_config_map, None,
            "an empty name is unset"
        );
        assert_eq!(p.cluster_refs.webhook_secret.as_deref(), Some("hook"));
        let urls: Vec<_> = p
            .outbound_urls
            .iter()
            .map(|u| (u.field, u.url.as_str()))
            .collect();
        assert_eq!(
            urls,
            [
                ("spec.gitea.url", "https://gitea.example.com"),
                ("spec.gitea.proxyUrl", "http://proxy:3128"),
            ]
        );
        assert_eq!(p.resync_interval, Duration::from_secs(30));
        assert_eq!(p.cleanup_hint, "delete them");
        assert!(p.runner_role_rules.is_empty() && p.runner_exits.is_empty());
    }

    #[test]
    fn no_block_leaves_the_default_poll() {
        let p = describe(described(None)).expect("valid");
        assert_eq!(p.cluster_refs, ClusterRefs::default());
        assert!(p.outbound_urls.is_empty());
        assert_eq!(p.resync_interval, Duration::from_secs(7));
    }
}
