use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use forgerunner_core::ForgeKind;

use super::*;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn yaml_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(text.as_bytes()).expect("write");
    f
}

fn load(file: Option<&str>, env_pairs: &[(&str, &str)], flags: FlagOverrides) -> Result<Config, ConfigError> {
    let file = file.map(yaml_file);
    Config::load(file.as_ref().map(|f| f.path()), &env(env_pairs), &flags)
}

fn key_of(err: ConfigError) -> String {
    match err {
        ConfigError::Key { key, .. } => key,
        other => panic!("expected a key error, got {other}"),
    }
}

#[test]
fn defaults_apply_without_any_layer() {
    let c = load(None, &[], FlagOverrides::default()).expect("defaults load");
    assert_eq!(c.forges, compiled_forges());
    assert!(c.watch_namespaces.is_empty());
    assert_eq!(c.http_addr.to_string(), "0.0.0.0:8080");
    assert_eq!(c.metrics_addr, None, "metrics stay on httpAddr unless asked");
    assert_eq!(c.log_format, LogFormat::Text);
    assert_eq!(c.log_level, "info");
    assert!(c.leader_election.enabled);
    assert_eq!(c.leader_election.lease_name, "forgerunner");
    assert_eq!(c.leader_election.lease_namespace, "default");
    assert_eq!(c.leader_election.lease_duration, Duration::from_secs(15));
    assert_eq!(c.leader_election.renew_deadline, Duration::from_secs(10));
    assert_eq!(c.leader_election.retry_period, Duration::from_secs(2));
}

#[test]
fn lease_timing_is_derived_from_the_duration_unless_set() {
    let env = [("FORGERUNNER_LEADER_ELECTION_LEASE_DURATION_SECONDS", "3")];
    let c = load(None, &env, FlagOverrides::default()).expect("load");
    assert_eq!(c.leader_election.renew_deadline, Duration::from_secs(2));
    assert_eq!(c.leader_election.retry_period, Duration::from_millis(400));
    let c = load(
        Some("leaderElection:\n  leaseDurationSeconds: 8\n  renewDeadlineSeconds: 5\n"),
        &[("FORGERUNNER_LEADER_ELECTION_RETRY_PERIOD_SECONDS", "1")],
        FlagOverrides::default(),
    )
    .expect("load");
    assert_eq!(c.leader_election.lease_duration, Duration::from_secs(8));
    assert_eq!(c.leader_election.renew_deadline, Duration::from_secs(5));
    assert_eq!(c.leader_election.retry_period, Duration::from_secs(1));
}

#[test]
fn lease_timing_must_let_the_leader_stop_before_a_takeover() {
    let cases: [(&str, &str); 5] = [
        (
            "leaseDurationSeconds: 15\n  renewDeadlineSeconds: 15",
            "leaderElection.renewDeadlineSeconds",
        ),
        (
            "leaseDurationSeconds: 15\n  renewDeadlineSeconds: 0",
            "leaderElection.renewDeadlineSeconds",
        ),
        (
            "renewDeadlineSeconds: 4\n  retryPeriodSeconds: 4",
            "leaderElection.retryPeriodSeconds",
        ),
        ("retryPeriodSeconds: 0", "leaderElection.retryPeriodSeconds"),
        // One attempt per deadline is not enough.
        (
            "renewDeadlineSeconds: 1\n  retryPeriodSeconds: 1",
            "leaderElection.retryPeriodSeconds",
        ),
    ];
    for (block, key) in cases {
        let file = format!("leaderElection:\n  {block}\n");
        let err = load(Some(&file), &[], FlagOverrides::default()).expect_err(block);
        assert_eq!(key_of(err), key, "{block}");
    }
    let c = load(
        Some("leaderElection:\n  renewDeadlineSeconds: 1\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect("a 1 s deadline with its derived retry period");
    assert_eq!(c.leader_election.retry_period, Duration::from_millis(200));
}

#[test]
fn lease_namespace_defaults_to_pod_namespace() {
    let c = load(None, &[("POD_NAMESPACE", "ops")], FlagOverrides::default()).expect("load");
    assert_eq!(c.leader_election.lease_namespace, "ops");
}

#[test]
fn file_overrides_defaults() {
    let c = load(
        Some(
            "forges: [github]\nwatchNamespaces: [a, b]\nhttpAddr: 127.0.0.1:9000\nlogFormat: json\n\
             leaderElection:\n  enabled: false\n  leaseDurationSeconds: 30\n",
        ),
        &[],
        FlagOverrides::default(),
    )
    .expect("load");
    assert_eq!(c.forges, vec![ForgeKind::Github]);
    assert_eq!(c.watch_namespaces, vec!["a", "b"]);
    assert_eq!(c.http_addr.to_string(), "127.0.0.1:9000");
    assert_eq!(c.log_format, LogFormat::Json);
    assert!(!c.leader_election.enabled);
    assert_eq!(c.leader_election.lease_duration, Duration::from_secs(30));
    // Keys the file leaves out keep their defaults, even inside a nested block.
    assert_eq!(c.leader_election.lease_name, "forgerunner");
}

#[test]
fn env_overrides_file() {
    let c = load(
        Some("forges: [github]\nlogLevel: warn\nleaderElection:\n  enabled: true\n"),
        &[
            ("FORGERUNNER_FORGES", "gitea, github"),
            ("FORGERUNNER_WATCH_NAMESPACES", "x,y"),
            ("FORGERUNNER_LOG_LEVEL", "debug"),
            ("FORGERUNNER_LEADER_ELECTION_ENABLED", "false"),
            ("FORGERUNNER_LEADER_ELECTION_LEASE_NAME", "my-lease"),
            ("FORGERUNNER_LEADER_ELECTION_LEASE_NAMESPACE", "ops"),
            ("FORGERUNNER_LEADER_ELECTION_LEASE_DURATION_SECONDS", "20"),
        ],
        FlagOverrides::default(),
    );
    if compiled_forges().len() < 2 {
        // `gitea` is not built in: the same input must be refused instead.
        assert_eq!(key_of(c.expect_err("gitea not compiled")), "forges");
        return;
    }
    let c = c.expect("load");
    assert_eq!(c.forges, vec![ForgeKind::Gitea, ForgeKind::Github]);
    assert_eq!(c.watch_namespaces, vec!["x", "y"]);
    assert_eq!(c.log_level, "debug");
    assert!(!c.leader_election.enabled);
    assert_eq!(c.leader_election.lease_name, "my-lease");
    assert_eq!(c.leader_election.lease_namespace, "ops");
    assert_eq!(c.leader_election.lease_duration, Duration::from_secs(20));
}

#[test]
fn flags_override_env() {
    let c = load(
        Some("httpAddr: 127.0.0.1:1\n"),
        &[
            ("FORGERUNNER_HTTP_ADDR", "127.0.0.1:2"),
            ("FORGERUNNER_LOG_FORMAT", "json"),
        ],
        FlagOverrides {
            forges: Some("github".into()),
            watch_namespaces: Some("one,two".into()),
            http_addr: Some("127.0.0.1:3".into()),
            metrics_addr: Some("127.0.0.1:4".into()),
            log_format: Some("text".into()),
            log_level: Some("trace".into()),
            listing_cache_entries: None,
        },
    )
    .expect("load");
    assert_eq!(c.http_addr.to_string(), "127.0.0.1:3");
    assert_eq!(
        c.metrics_addr.map(|a| a.to_string()).as_deref(),
        Some("127.0.0.1:4")
    );
    assert_eq!(c.log_format, LogFormat::Text);
    assert_eq!(c.log_level, "trace");
    assert_eq!(c.forges, vec![ForgeKind::Github]);
    assert_eq!(c.watch_namespaces, vec!["one", "two"]);
}

#[test]
fn unknown_forge_is_named() {
    let err = load(
        None,
        &[],
        FlagOverrides {
            forges: Some("gitlab".into()),
            ..Default::default()
        },
    )
    .expect_err("gitlab is unknown");
    assert_eq!(
        err.to_string(),
        "config key 'forges': unknown forge 'gitlab' (known: github, gitea, forgejo)"
    );
}

#[test]
fn empty_forge_list_is_refused() {
    let err = load(Some("forges: []\n"), &[], FlagOverrides::default()).expect_err("empty");
    assert_eq!(key_of(err), "forges");
}

#[cfg(not(feature = "gitea"))]
#[test]
fn forge_not_compiled_in_is_refused() {
    let err =
        load(None, &[("FORGERUNNER_FORGES", "gitea")], FlagOverrides::default()).expect_err("not built");
    assert!(err.to_string().contains("not compiled"), "{err}");
}

#[test]
fn unknown_file_key_is_named() {
    let err = load(Some("forgez: [github]\n"), &[], FlagOverrides::default()).expect_err("typo");
    let text = err.to_string();
    assert_eq!(key_of(err), "forgez");
    assert!(text.contains("unknown key"), "{text}");
}

#[test]
fn unknown_nested_key_is_named() {
    let err = load(
        Some("leaderElection:\n  leaseDuration: 10\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect_err("typo");
    assert_eq!(key_of(err), "leaderElection.leaseDuration");
}

#[test]
fn unknown_env_variable_is_named() {
    let err = load(
        None,
        &[("FORGERUNNER_LOGLEVEL", "debug")],
        FlagOverrides::default(),
    )
    .expect_err("typo");
    assert_eq!(key_of(err), "FORGERUNNER_LOGLEVEL");
}

#[test]
fn config_file_variable_is_not_a_key() {
    load(
        None,
        &[("FORGERUNNER_CONFIG", "/etc/x.yaml")],
        FlagOverrides::default(),
    )
    .expect("ignored here");
}

/// (file, env, flags, the key the error must name)
type BadCase<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)], FlagOverrides, &'a str);

#[test]
fn bad_values_name_their_key() {
    let cases: [BadCase; 7] = [
        (
            None,
            &[],
            FlagOverrides {
                http_addr: Some("nowhere".into()),
                ..Default::default()
            },
            "httpAddr",
        ),
        (
            None,
            &[],
            FlagOverrides {
                log_format: Some("xml".into()),
                ..Default::default()
            },
            "logFormat",
        ),
        (
            None,
            &[],
            FlagOverrides {
                log_level: Some("loud[".into()),
                ..Default::default()
            },
            "logLevel",
        ),
        (
            None,
            &[("FORGERUNNER_LEADER_ELECTION_ENABLED", "maybe")],
            FlagOverrides::default(),
            "leaderElection.enabled",
        ),
        (
            None,
            &[("FORGERUNNER_LEADER_ELECTION_LEASE_DURATION_SECONDS", "1")],
            FlagOverrides::default(),
            "leaderElection.leaseDurationSeconds",
        ),
        (
            Some("watchNamespaces: [Bad_NS]\n"),
            &[],
            FlagOverrides::default(),
            "watchNamespaces",
        ),
        (
            Some("leaderElection:\n  leaseName: 'no spaces'\n"),
            &[],
            FlagOverrides::default(),
            "leaderElection.leaseName",
        ),
    ];
    for (file, env_pairs, flags, key) in cases {
        let err = load(file, env_pairs, flags).expect_err(key);
        assert_eq!(key_of(err), key);
    }
}

#[test]
fn missing_or_broken_file_is_reported() {
    let err = Config::load(
        Some(Path::new("/nonexistent/forgerunner.yaml")),
        &env(&[]),
        &FlagOverrides::default(),
    )
    .expect_err("missing");
    assert!(matches!(err, ConfigError::File { .. }), "{err}");
    let err = load(Some("forges: [github\n"), &[], FlagOverrides::default()).expect_err("bad yaml");
    assert!(matches!(err, ConfigError::File { .. }), "{err}");
    let err = load(Some("- a\n- b\n"), &[], FlagOverrides::default()).expect_err("not a mapping");
    assert!(matches!(err, ConfigError::File { .. }), "{err}");
}

#[test]
fn forge_names_are_deduplicated_and_trimmed() {
    let c = load(
        None,
        &[],
        FlagOverrides {
            forges: Some(" github , github,".into()),
            ..Default::default()
        },
    )
    .expect("load");
    assert_eq!(c.forges, vec![ForgeKind::Github]);
}

#[test]
fn forge_hosts_default_to_any() {
    let c = load(None, &[], FlagOverrides::default()).expect("defaults load");
    assert!(c.forge_hosts.allows_any());
}

#[test]
fn forge_hosts_from_file_and_env() {
    let c = load(
        Some("forgeHosts:\n  allowed: [github.com, '*.example.com']\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect("load");
    assert!(c.forge_hosts.allows("github.com"));
    assert!(c.forge_hosts.allows("gitea.example.com"));
    assert!(!c.forge_hosts.allows("gitea.internal"));
    let c = load(
        Some("forgeHosts:\n  allowed: [github.com]\n"),
        &[(
            "FORGERUNNER_FORGE_HOSTS_ALLOWED",
            "gitea.internal, forgejo.internal",
        )],
        FlagOverrides::default(),
    )
    .expect("load");
    assert!(c.forge_hosts.allows("gitea.internal"));
    assert!(c.forge_hosts.allows("forgejo.internal"));
    assert!(
        !c.forge_hosts.allows("github.com"),
        "the environment replaces the file's list"
    );
}

#[test]
fn bad_forge_host_names_the_key() {
    let err = load(
        Some("forgeHosts:\n  allowed: ['https://github.com']\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect_err("a URL is not a host");
    let text = err.to_string();
    assert!(text.starts_with("config key 'forgeHosts.allowed': "), "{text}");
    assert!(text.contains("https://github.com"), "{text}");
    let err = load(Some("forgeHosts:\n  denied: []\n"), &[], FlagOverrides::default()).expect_err("unknown");
    assert_eq!(key_of(err), "forgeHosts.denied");
}

#[test]
fn private_addresses_are_allowed_unless_refused_by_file_or_env() {
    use forgerunner_core::forge_hosts::addresses::AddressPolicy;

    let c = load(None, &[], FlagOverrides::default()).expect("defaults");
    assert_eq!(c.forge_hosts.addresses(), AddressPolicy::AllowPrivate);
    let c = load(
        Some("forgeHosts:\n  allowed: [github.com]\n  refusePrivateAddresses: true\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect("file");
    assert_eq!(c.forge_hosts.addresses(), AddressPolicy::RefusePrivate);
    assert!(c.forge_hosts.allows("github.com"), "the list is kept alongside");
    let c = load(
        Some("forgeHosts:\n  refusePrivateAddresses: true\n"),
        &[("FORGERUNNER_FORGE_HOSTS_REFUSE_PRIVATE_ADDRESSES", "false")],
        FlagOverrides::default(),
    )
    .expect("env");
    assert_eq!(
        c.forge_hosts.addresses(),
        AddressPolicy::AllowPrivate,
        "the environment wins"
    );
    let c = load(
        None,
        &[("FORGERUNNER_FORGE_HOSTS_REFUSE_PRIVATE_ADDRESSES", "true")],
        FlagOverrides::default(),
    )
    .expect("env");
    assert_eq!(c.forge_hosts.addresses(), AddressPolicy::RefusePrivate);
    let err = load(
        Some("forgeHosts:\n  refusePrivateAddresses: yes please\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect_err("not a boolean");
    assert_eq!(key_of(err), "forgeHosts.refusePrivateAddresses");
}

#[test]
fn a_listed_host_the_refusal_refuses_is_a_config_error() {
    let err = load(
        Some("forgeHosts:\n  allowed: [github.com, 10.0.0.5]\n  refusePrivateAddresses: true\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect_err("allowed and refused at once");
    let text = err.to_string();
    assert!(
        text.starts_with("config key 'forgeHosts.allowed': '10.0.0.5'"),
        "{text}"
    );
    assert!(
        text.contains("private") && text.contains("refusePrivateAddresses"),
        "{text}"
    );
    load(
        Some("forgeHosts:\n  allowed: [github.com, 10.0.0.5]\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect("without the refusal a private literal may be listed");
}

#[test]
fn job_labels_are_off_by_default_and_set_by_file_or_env() {
    let off = load(None, &[], FlagOverrides::default()).expect("defaults");
    assert!(!off.metrics_job_labels);
    let file = load(
        Some("metrics:\n  jobLabels: true\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect("file");
    assert!(file.metrics_job_labels);
    let env = load(
        None,
        &[("FORGERUNNER_METRICS_JOB_LABELS", "true")],
        FlagOverrides::default(),
    )
    .expect("env");
    assert!(env.metrics_job_labels);
    let typo = load(
        Some("metrics:\n  jobLabel: true\n"),
        &[],
        FlagOverrides::default(),
    );
    assert_eq!(key_of(typo.expect_err("unknown key")), "metrics.jobLabel");
}

#[test]
fn runner_hooks_are_off_by_default_and_need_every_name_when_on() {
    let off = load(None, &[], FlagOverrides::default()).expect("defaults");
    assert_eq!(off.runner_hooks, None);
    let file = "runnerHooks:\n  clusterRole: fr-runner-hooks\n  cleanupClusterRole: fr-runner-hooks-cleanup\n  \
                operatorServiceAccount: fr\n";
    // The operator's ServiceAccount is in its pod's namespace unless the file says otherwise.
    let on = load(Some(file), &[("POD_NAMESPACE", "ops")], FlagOverrides::default()).expect("file");
    assert_eq!(
        on.runner_hooks,
        Some(RunnerHooks {
            cluster_role: "fr-runner-hooks".into(),
            cleanup_cluster_role: "fr-runner-hooks-cleanup".into(),
            operator_namespace: "ops".into(),
            operator_service_account: "fr".into(),
        })
    );
    let env = load(
        None,
        &[
            ("FORGERUNNER_RUNNER_HOOKS_CLUSTER_ROLE", "a"),
            ("FORGERUNNER_RUNNER_HOOKS_CLEANUP_CLUSTER_ROLE", "b"),
            ("FORGERUNNER_RUNNER_HOOKS_OPERATOR_SERVICE_ACCOUNT", "c"),
            ("FORGERUNNER_RUNNER_HOOKS_OPERATOR_NAMESPACE", "d"),
        ],
        FlagOverrides::default(),
    )
    .expect("env");
    let hooks = env.runner_hooks.expect("on");
    assert_eq!(
        (
            hooks.cluster_role.as_str(),
            hooks.cleanup_cluster_role.as_str(),
            hooks.operator_service_account.as_str(),
            hooks.operator_namespace.as_str()
        ),
        ("a", "b", "c", "d")
    );
    // Half a configuration is a mistake, not "off": a roleRef cannot be corrected later.
    let half = load(
        None,
        &[("FORGERUNNER_RUNNER_HOOKS_CLUSTER_ROLE", "a")],
        FlagOverrides::default(),
    );
    assert_eq!(
        key_of(half.expect_err("no cleanup role")),
        "runnerHooks.cleanupClusterRole"
    );
    let bad_account = load(
        Some(
            "runnerHooks:\n  clusterRole: a\n  cleanupClusterRole: b\n  operatorServiceAccount: Not_Valid\n",
        ),
        &[],
        FlagOverrides::default(),
    );
    assert_eq!(
        key_of(bad_account.expect_err("bad account")),
        "runnerHooks.operatorServiceAccount"
    );
    let slash = load(
        Some("runnerHooks:\n  clusterRole: a/b\n"),
        &[],
        FlagOverrides::default(),
    );
    assert_eq!(key_of(slash.expect_err("slash")), "runnerHooks.clusterRole");
}

#[test]
fn metrics_addr_from_each_layer() {
    let c = load(
        Some("metricsAddr: \"0.0.0.0:9090\"\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect("file");
    assert_eq!(
        c.metrics_addr.map(|a| a.to_string()).as_deref(),
        Some("0.0.0.0:9090")
    );
    let c = load(
        Some("metricsAddr: \"0.0.0.0:9090\"\n"),
        &[("FORGERUNNER_METRICS_ADDR", "127.0.0.1:9191")],
        FlagOverrides::default(),
    )
    .expect("env");
    assert_eq!(
        c.metrics_addr.map(|a| a.to_string()).as_deref(),
        Some("127.0.0.1:9191")
    );
    // An empty value anywhere keeps /metrics on httpAddr (how an override turns it off again).
    let c = load(
        Some("metricsAddr: \"0.0.0.0:9090\"\n"),
        &[("FORGERUNNER_METRICS_ADDR", " ")],
        FlagOverrides::default(),
    )
    .expect("empty");
    assert_eq!(c.metrics_addr, None);
    // Two listeners on port 0 each get their own free port.
    let c = load(
        None,
        &[],
        FlagOverrides {
            http_addr: Some("127.0.0.1:0".into()),
            metrics_addr: Some("127.0.0.1:0".into()),
            ..Default::default()
        },
    )
    .expect("port 0 twice");
    assert_eq!(c.metrics_addr.map(|a| a.port()), Some(0));
}

#[test]
fn metrics_addr_must_be_an_address_off_the_webhook_port() {
    let refused = [
        ("nowhere", "0.0.0.0:8080"),
        ("9090", "0.0.0.0:8080"),
        // The port httpAddr holds: the second bind would fail.
        ("0.0.0.0:8080", "0.0.0.0:8080"),
        ("127.0.0.1:8080", "0.0.0.0:8080"),
        ("0.0.0.0:8080", "127.0.0.1:8080"),
    ];
    for (metrics, http) in refused {
        let flags = FlagOverrides {
            http_addr: Some(http.into()),
            metrics_addr: Some(metrics.into()),
            ..Default::default()
        };
        let err = load(None, &[], flags).expect_err(metrics);
        assert_eq!(key_of(err), "metricsAddr", "{metrics} with httpAddr {http}");
    }
    // The same port on two distinct addresses binds fine.
    let flags = FlagOverrides {
        http_addr: Some("127.0.0.1:8080".into()),
        metrics_addr: Some("127.0.0.2:8080".into()),
        ..Default::default()
    };
    assert!(load(None, &[], flags).is_ok());
}

#[test]
fn listing_cache_entries_from_each_layer() {
    let c = load(None, &[], FlagOverrides::default()).expect("defaults");
    assert_eq!(c.listing_cache_entries, 500_000, "the default budget");
    let c = load(
        Some("listingCacheEntries: 300000\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect("file");
    assert_eq!(c.listing_cache_entries, 300_000);
    let env = [("FORGERUNNER_LISTING_CACHE_ENTRIES", "400000")];
    let c = load(
        Some("listingCacheEntries: 300000\n"),
        &env,
        FlagOverrides::default(),
    )
    .expect("env");
    assert_eq!(
        c.listing_cache_entries, 400_000,
        "the environment wins over the file"
    );
    let flags = FlagOverrides {
        listing_cache_entries: Some("500000".into()),
        ..Default::default()
    };
    let c = load(None, &env, flags).expect("flag");
    assert_eq!(
        c.listing_cache_entries, 500_000,
        "the flag wins over the environment"
    );
}

#[test]
fn a_listing_budget_below_one_listing_is_refused_by_key() {
    for text in ["listingCacheEntries: 19999\n", "listingCacheEntries: 0\n"] {
        let err = load(Some(text), &[], FlagOverrides::default()).expect_err(text);
        let message = err.to_string();
        assert_eq!(key_of(err), "listingCacheEntries", "{text}");
        assert!(message.contains("20000"), "{message}");
    }
    let c = load(
        Some("listingCacheEntries: 20000\n"),
        &[],
        FlagOverrides::default(),
    )
    .expect("one listing");
    assert_eq!(c.listing_cache_entries, 20_000);
}
