//! Checks of the cache server and the runner pods' cache config that hold for Gitea and Forgejo
//! alike (feature `testing`); each forge's tests add what its runner does differently.

use forgerunner_core::RunnerGroup;
use forgerunner_core::cache_server::{
    CONFIG_DIR, CacheServer, RUNNER_CONFIG_KEY, RUNNER_CONFIG_VOLUME, service_host,
};
use forgerunner_core::forge::{Forge, GroupKey, SecretValue};
use forgerunner_core::runner_pod::restricted_violations;
use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::cache_server::CacheFlavour;

/// The shared secret the checks hand out; never in an argument.
pub const SECRET: &str = "s3cr3t-s3cr3t-s3cr3t";

/// A group `web` in `ci` of `forge` (`gitea`, `forgejo`) on one repository, running `image`,
/// with a cache when `cache`.
pub fn group(forge: &str, image: Option<&str>, cache: bool) -> RunnerGroup {
    let mut spec = serde_json::json!({
        "forge": forge, "maxRunners": 5,
        forge: {"url": "https://code.example.com", "scope": "repo", "repo": "alice/app",
            "credentials": "token", "labels": ["linux:host"]}
    });
    if cache {
        spec["cache"] = serde_json::json!({"size": "10Gi"});
    }
    if let Some(image) = image {
        spec["image"] = serde_json::json!(image);
    }
    let mut g = crate::pod_checks::group(spec, None, None);
    g.metadata.name = Some("web".into());
    g
}

/// The server `forge` makes for a cache group `web` of `forge_name` on its default image,
/// checked to be `command`'s `cache-server` with its config and cache directory, listening on
/// `port`, with [`SECRET`] under `cache.<secret_key>` of both config files and nowhere else, and
/// the runners pointed at the server's URL.
pub fn default_server(
    forge: &impl Forge,
    forge_name: &str,
    command: &str,
    port: i32,
    secret_key: &str,
) -> CacheServer {
    let g = group(forge_name, None, true);
    let host = service_host(&g);
    assert_eq!(host, "web-actions-cache.ci.svc.cluster.local");
    let s = forge
        .open(&GroupKey {
            namespace: "ci".into(),
            name: "web".into(),
        })
        .cache_server(&g, &host, &SecretValue::new(SECRET))
        .expect("the forge runs a cache server");
    assert_eq!(s.command, [command]);
    let head = [
        "cache-server",
        "--config",
        "/etc/forgerunner-cache/server.yaml",
        "--dir",
        "/cache",
    ];
    assert!(s.args.starts_with(&head.map(str::to_owned)), "{:?}", s.args);
    assert!(
        s.args.ends_with(&["--port".to_owned(), port.to_string()]),
        "{:?}",
        s.args
    );
    assert_eq!(s.port, port);
    assert!(
        !s.args.iter().any(|a| a.contains(SECRET)),
        "the secret is never an argument"
    );
    let yaml =
        |file: &SecretValue| -> serde_yaml::Value { serde_yaml::from_str(file.expose()).expect("YAML") };
    let (server, runner) = (yaml(&s.server_config), yaml(&s.runner_config));
    assert_eq!(server["cache"][secret_key].as_str(), Some(SECRET));
    assert_eq!(runner["cache"][secret_key].as_str(), Some(SECRET));
    assert_eq!(runner["cache"]["external_server"].as_str(), Some(s.url.as_str()));
    assert_eq!(runner["cache"]["enabled"].as_bool(), Some(true));
    s
}

/// docs/caches.md shows `flavour`'s config files exactly as written (for its example group
/// `linux` in `ci`, the secret as a placeholder).
pub fn docs_show_the_config_files(flavour: &CacheFlavour) {
    let docs = include_str!("../../../docs/caches.md");
    let secret = SecretValue::new("<64 hex characters>");
    let url = flavour.url("linux-actions-cache.ci.svc.cluster.local");
    for file in [
        flavour.server_config(&secret),
        flavour.runner_config(&url, &secret),
    ] {
        assert!(
            docs.contains(file.expose()),
            "docs/caches.md lacks:\n{}",
            file.expose()
        );
    }
}

/// The container `name` of `pod`, main or init.
pub fn named<'a>(pod: &'a PodSpec, name: &str) -> &'a Container {
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .expect("container")
}

/// Whether `c` mounts the cache config.
pub fn mounts_config(c: &Container) -> bool {
    c.volume_mounts
        .iter()
        .flatten()
        .any(|m| m.name == RUNNER_CONFIG_VOLUME && m.mount_path == CONFIG_DIR && m.read_only == Some(true))
}

/// `pod` (of group `web`) has the runner config of the group's cache Secret as a volume, which
/// exactly the `readers` mount, and still passes restricted.
pub fn config_mounted_into(pod: &PodSpec, readers: &[&str]) {
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == RUNNER_CONFIG_VOLUME)
        .expect("cache config volume");
    let secret = volume.secret.as_ref().expect("secret volume");
    assert_eq!(secret.secret_name.as_deref(), Some("web-actions-cache"));
    let keys: Vec<&str> = secret.items.iter().flatten().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, [RUNNER_CONFIG_KEY]);
    let all = pod.containers.iter().chain(pod.init_containers.iter().flatten());
    let mounting: Vec<&str> = all
        .filter(|c| mounts_config(c))
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(mounting, readers, "who mounts the config");
    assert_eq!(restricted_violations(pod), Vec::new());
}

/// `pod` has no cache config at all.
pub fn no_config(pod: &PodSpec) {
    assert!(
        !pod.volumes
            .iter()
            .flatten()
            .any(|v| v.name == RUNNER_CONFIG_VOLUME)
    );
}
