use forgerunner_http::spec_rules::testing::Harness;
use serde_json::json;

use super::*;

/// `spec.forgejo` under the tables it shares with `spec.gitea`, starting from labels with and
/// without a scheme.
pub(super) fn harness() -> Harness {
    Harness {
        labels: &["debian:docker://node:22", "self-hosted:host", "ubuntu-latest"],
        more_good_labels: &["debian", "debian:docker", "x:docker://node:22", "x:host"],
        ..Harness::new(FIELDS, |s| s.forgejo.as_ref().map(validate_forgejo))
    }
}

forgerunner_http::block_rule_tests!(harness());

#[test]
fn violations_come_in_rule_order() {
    harness().every_setting_wrong(
        &[],
        &[
            "spec.forgejo.url",
            "spec.forgejo.credentials",
            "spec.forgejo.pollIntervalSeconds",
            "spec.forgejo.proxyUrl",
            "spec.forgejo.caBundleConfigMap",
        ],
    );
}

#[test]
fn lxc_and_repeated_names_are_refused() {
    let h = harness();
    // Well-formed, but no runner pod can run LXC (forgejo-runner `Dockerfile`: no LXC, uid 1000).
    for lxc in ["x:lxc", "x:lxc://debian:bookworm"] {
        let v = h.violations(&h.spec(&[("labels", json!(["y:host", lxc]))]));
        assert_eq!(v.len(), 1, "{lxc:?}: {v:?}");
        assert_eq!(v[0].field, "spec.forgejo.labels");
        assert_eq!(
            v[0].message,
            format!(
                "label {lxc:?} runs jobs in LXC containers, which a runner pod cannot create (forgejo-runner \
                 would take the job and fail it): use a docker label with containerMode.type: dind, or a host \
                 label (x:host)"
            )
        );
    }
    let repeated = h.fields_with(&[("labels", json!(["a", "a:host"]))]);
    assert_eq!(repeated, ["spec.forgejo.labels"]);
}
