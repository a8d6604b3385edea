use k8s_openapi::api::core::v1::Container;

use super::client::ExternalCache;
use super::*;

fn container(command: &[&str], args: &[&str]) -> Container {
    let words = |w: &[&str]| Some(w.iter().map(|s| (*s).to_owned()).collect());
    Container {
        name: "cache-server".into(),
        command: words(command),
        args: words(args),
        ..Container::default()
    }
}

#[test]
fn the_operators_cache_server_command_is_recognised() {
    let flags = cache_server_flags(&container(
        &["gitea-runner"],
        &[
            "cache-server",
            "--config",
            "/etc/forgerunner-cache/server.yaml",
            "--dir",
            "/cache",
            "--host",
            "web-actions-cache.ci.svc.cluster.local",
            "--port",
            "8088",
        ],
    ))
    .expect("a cache server");
    assert_eq!(
        flags,
        ServerFlags {
            binary: "gitea-runner".into(),
            config: Some("/etc/forgerunner-cache/server.yaml".into()),
            dir: Some("/cache".into()),
            host: Some("web-actions-cache.ci.svc.cluster.local".into()),
            port: Some(8088),
        }
    );
    let short = cache_server_flags(&container(
        &["/usr/local/bin/act_runner", "cache-server", "-p=1", "-s", "h"],
        &[],
    ));
    let short = short.expect("legacy binary");
    assert_eq!(
        (short.binary.as_str(), short.host.as_deref()),
        ("act_runner", Some("h"))
    );
}

#[test]
fn other_containers_are_not_cache_servers() {
    assert_eq!(
        cache_server_flags(&container(&["gitea-runner", "daemon"], &[])),
        None
    );
    assert_eq!(
        cache_server_flags(&container(
            &["forgejo-runner"],
            &["cache-server", "--port", "4000"]
        )),
        None,
        "forgejo-runner's server speaks another protocol (MAC headers)"
    );
    assert_eq!(cache_server_flags(&container(&[], &["cache-server"])), None);
}

#[test]
fn the_runner_config_names_the_external_server() {
    let yaml = "cache:\n  enabled: true\n  external_server: \"http://s.ci.svc.cluster.local:8088/\"\n  external_secret: \"x\"\n";
    assert_eq!(
        ExternalCache::from_config(yaml),
        Some(ExternalCache {
            server: "http://s.ci.svc.cluster.local:8088/".into(),
            secret: Some("x".into()),
        })
    );
    assert_eq!(ExternalCache::from_config("cache:\n  enabled: true\n"), None);
    assert_eq!(
        ExternalCache::from_config("cache:\n  enabled: false\n  external_server: http://s/\n"),
        None,
        "a disabled cache is no cache"
    );
    assert_eq!(ExternalCache::from_config("runner:\n  labels: [a]\n"), None);
}
