//! The cache objects' shape: names, owners, labels, restricted Pod Security, and the secret in
//! the Secret alone.

use super::*;
use crate::crd::ForgeKind;
use crate::runner_job::runner_labels;
use crate::runner_pod::restricted_violations;

const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn group() -> RunnerGroup {
    RunnerGroup::test(ForgeKind::Gitea)
        .named("ci", "web")
        .uid("uid-1")
        .cache("20Gi")
        .build()
}

fn server() -> CacheServer {
    CacheServer {
        image: "gitea/runner:1.0.8".into(),
        command: vec!["gitea-runner".into()],
        args: vec![
            "cache-server".into(),
            "--config".into(),
            SERVER_CONFIG_PATH.into(),
            "--dir".into(),
            CACHE_DIR.into(),
            "--port".into(),
            "8088".into(),
        ],
        port: 8088,
        url: "http://web-actions-cache.ci.svc.cluster.local:8088/".into(),
        server_config: SecretValue::new(format!("cache:\n  external_secret: \"{SECRET}\"\n")),
        runner_config: SecretValue::new(format!(
            "cache:\n  external_server: \"http://x/\"\n  external_secret: \"{SECRET}\"\n"
        )),
    }
}

fn objects() -> CacheObjects {
    let g = group();
    cache_objects(&g, g.spec.cache.as_ref().expect("cache"), &server()).expect("objects")
}

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: "web-actions-cache".into(),
        uid: "deploy-uid".into(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

#[test]
fn every_object_has_the_cache_name_and_labels_and_is_owned_by_the_group() {
    let o = objects();
    for meta in [
        &o.deployment.metadata,
        &o.claim.metadata,
        &o.service.metadata,
        &o.policy.metadata,
    ] {
        assert_eq!(meta.name.as_deref(), Some("web-actions-cache"));
        assert_eq!(meta.namespace.as_deref(), Some("ci"));
        let owner = &meta.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("RunnerGroup", "uid-1")
        );
        assert_eq!(owner.block_owner_deletion, None);
        let labels = meta.labels.as_ref().expect("labels");
        assert_eq!(labels.get(CACHE_OF_LABEL).map(String::as_str), Some("web"));
        assert_eq!(
            labels.get(COMPONENT_LABEL).map(String::as_str),
            Some(COMPONENT_VALUE)
        );
        assert_eq!(
            labels.get(MANAGED_BY_LABEL).map(String::as_str),
            Some(MANAGED_BY_VALUE)
        );
        // The operator lists a group's runner pods by the group label: never on the cache.
        assert!(!labels.contains_key(GROUP_LABEL));
        assert!(
            meta.annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(SPEC_HASH_ANNOTATION))
        );
    }
    let secret = cache_secret(&group(), &server(), &SecretValue::new(SECRET), owner());
    assert_eq!(secret.metadata.name.as_deref(), Some("web-actions-cache"));
    let owners = secret.metadata.owner_references.expect("owner");
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].uid.as_str()),
        ("Deployment", "deploy-uid")
    );
}

#[test]
fn a_group_without_uid_gets_no_objects() {
    let mut g = group();
    g.metadata.uid = None;
    assert!(cache_objects(&g, g.spec.cache.as_ref().expect("cache"), &server()).is_err());
}

#[test]
fn the_cache_pod_passes_the_restricted_profile_with_a_read_only_root() {
    let o = objects();
    let spec = &o.deployment.spec;
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(
        spec.strategy.as_ref().and_then(|s| s.type_.as_deref()),
        Some("Recreate"),
        "one process per cache directory"
    );
    let pod = spec.template.spec.as_ref().expect("pod");
    assert_eq!(restricted_violations(pod), Vec::new());
    let psc = pod.security_context.as_ref().expect("pod security context");
    assert_eq!(
        (
            psc.run_as_user,
            psc.run_as_group,
            psc.fs_group,
            psc.run_as_non_root
        ),
        (Some(1000), Some(1000), Some(1000), Some(true))
    );
    assert_eq!(pod.automount_service_account_token, Some(false));
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().expect("security context");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_owned()])
    );
    let mounts: Vec<(&str, &str, Option<bool>)> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
        .collect();
    assert_eq!(
        mounts,
        [
            ("cache", CACHE_DIR, None),
            ("config", CONFIG_DIR, Some(true)),
            ("tmp", "/tmp", None)
        ]
    );
    let volumes = pod.volumes.as_ref().expect("volumes");
    assert_eq!(
        volumes[0]
            .persistent_volume_claim
            .as_ref()
            .map(|p| p.claim_name.as_str()),
        Some("web-actions-cache")
    );
    let items = volumes[1]
        .secret
        .as_ref()
        .and_then(|s| s.items.clone())
        .expect("items");
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].key, SERVER_CONFIG_KEY,
        "the server's config, nothing else"
    );
    assert!(volumes[2].empty_dir.is_some());
    let home = c.env.iter().flatten().find(|e| e.name == "HOME");
    assert_eq!(home.and_then(|e| e.value.as_deref()), Some("/tmp"));
    assert_eq!(c.args.as_ref(), Some(&server().args));
    assert_eq!(c.image.as_deref(), Some("gitea/runner:1.0.8"));
}

#[test]
fn the_secret_is_in_the_secret_alone() {
    let o = objects();
    let text = serde_json::to_string(&(&o.deployment, &o.claim, &o.service, &o.policy)).expect("json");
    assert!(
        !text.contains(SECRET),
        "the secret leaked into a non-Secret object"
    );
    let secret = cache_secret(&group(), &server(), &SecretValue::new(SECRET), owner());
    let data = secret.data.as_ref().expect("data");
    let text = |k: &str| String::from_utf8(data[k].0.clone()).expect("utf-8");
    assert_eq!(text(SECRET_KEY), SECRET);
    assert!(text(SERVER_CONFIG_KEY).contains(SECRET));
    assert!(text(RUNNER_CONFIG_KEY).contains(SECRET));
    assert_eq!(stored_secret(&secret), Some(SecretValue::new(SECRET)));
    // A new secret restarts the server (its config hash moves), and nothing else shows it.
    let mut other = server();
    other.server_config = SecretValue::new("cache:\n  external_secret: \"other\"\n");
    let g = group();
    let moved = cache_objects(&g, g.spec.cache.as_ref().expect("cache"), &other).expect("objects");
    let hash = |d: &Deployment| {
        d.spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(CONFIG_HASH_ANNOTATION))
            .cloned()
    };
    assert!(hash(&o.deployment).is_some());
    assert_ne!(hash(&o.deployment), hash(&moved.deployment));
    assert_ne!(
        o.deployment
            .metadata
            .annotations
            .as_ref()
            .map(|a| a[SPEC_HASH_ANNOTATION].clone()),
        moved
            .deployment
            .metadata
            .annotations
            .as_ref()
            .map(|a| a[SPEC_HASH_ANNOTATION].clone()),
        "the Deployment is updated"
    );
}

#[test]
fn an_empty_stored_secret_is_none() {
    let mut secret = cache_secret(&group(), &server(), &SecretValue::new(" \n"), owner());
    assert_eq!(stored_secret(&secret), None);
    secret.data = None;
    assert_eq!(stored_secret(&secret), None);
}

#[test]
fn the_service_and_the_policy_reach_the_cache_pod_on_the_servers_port_from_runner_pods_only() {
    let o = objects();
    let pod_labels = o
        .deployment
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .expect("pod labels");
    let svc = o.service.spec.as_ref().expect("service");
    let selector = svc.selector.clone().expect("selector");
    assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
    assert_eq!(o.deployment.spec.selector.match_labels.as_ref(), Some(&selector));
    let port = &svc.ports.as_ref().expect("ports")[0];
    assert_eq!(
        (port.port, port.target_port.clone()),
        (8088, Some(IntOrString::Int(8088)))
    );
    let c = &o.deployment.spec.template.spec.as_ref().expect("pod").containers[0];
    assert_eq!(c.ports.as_ref().expect("ports")[0].container_port, 8088);

    let policy = o.policy.spec.as_ref().expect("policy");
    assert_eq!(
        policy.pod_selector.as_ref().and_then(|s| s.match_labels.as_ref()),
        Some(&selector)
    );
    assert_eq!(policy.policy_types.as_deref(), Some(&["Ingress".to_owned()][..]));
    let rule = &policy.ingress.as_ref().expect("ingress")[0];
    let peer = &rule.from.as_ref().expect("from")[0];
    assert!(peer.namespace_selector.is_none() && peer.ip_block.is_none());
    let admitted = peer
        .pod_selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .expect("peer labels");
    // Every runner pod of the group matches; the cache pod itself and other groups' runners do not.
    let runner = runner_labels(&group());
    assert!(admitted.iter().all(|(k, v)| runner.get(k) == Some(v)));
    let other = runner_labels(&RunnerGroup::test(ForgeKind::Gitea).named("ci", "api").build());
    assert!(!admitted.iter().all(|(k, v)| other.get(k) == Some(v)));
    assert!(!admitted.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
    let ports = rule.ports.as_ref().expect("ports");
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].port, Some(IntOrString::Int(8088)));
}

#[test]
fn the_claim_is_read_write_once_of_the_asked_size_and_class() {
    let g = RunnerGroup::test(ForgeKind::Forgejo)
        .named("ci", "web")
        .uid("uid-1")
        .cache("20Gi")
        .build();
    let mut cache = g.spec.cache.clone().expect("cache");
    cache.storage_class_name = Some("fast".into());
    let o = cache_objects(&g, &cache, &server()).expect("objects");
    let spec = o.claim.spec.as_ref().expect("claim");
    assert_eq!(
        spec.access_modes.as_deref(),
        Some(&["ReadWriteOnce".to_owned()][..])
    );
    assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.as_str());
    assert_eq!(size, Some("20Gi"));
    let claim_hash = |o: &CacheObjects| {
        o.claim
            .metadata
            .annotations
            .as_ref()
            .map(|a| a[SPEC_HASH_ANNOTATION].clone())
    };
    cache.size = "30Gi".into();
    let grown = cache_objects(&g, &cache, &server()).expect("objects");
    assert_ne!(claim_hash(&o), claim_hash(&grown));
    assert_eq!(
        o.service.metadata.annotations, grown.service.metadata.annotations,
        "a new size leaves the Service alone"
    );
}

#[test]
fn the_template_pull_secrets_go_to_the_cache_pod() {
    let g = RunnerGroup::test(ForgeKind::Gitea)
        .named("ci", "web")
        .uid("uid-1")
        .cache("20Gi")
        .template_json(serde_json::json!({"spec": {"imagePullSecrets": [{"name": "registry"}]}}))
        .build();
    let o = cache_objects(&g, g.spec.cache.as_ref().expect("cache"), &server()).expect("objects");
    let pull = o
        .deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.image_pull_secrets.clone());
    assert_eq!(pull.map(|p| p[0].name.clone()), Some("registry".to_owned()));
}

#[test]
fn sizes_are_whole_quantities() {
    assert_eq!(size_bytes("10Gi"), Some(10 << 30));
    assert_eq!(size_bytes("50G"), Some(50_000_000_000));
    assert_eq!(size_bytes("2048Mi"), Some(2 << 30));
    assert_eq!(size_bytes("1073741824"), Some(1 << 30));
    for bad in [
        "",
        "Gi",
        "1.5Gi",
        "-1Gi",
        "10GB",
        "1e9",
        " 1Gi",
        "12345678901234567Gi",
    ] {
        assert_eq!(size_bytes(bad), None, "{bad}");
    }
}

#[test]
fn the_runner_config_is_mounted_read_only_into_the_named_containers() {
    let mut pod = PodSpec {
        containers: vec![Container {
            name: "runner".into(),
            ..Container::default()
        }],
        init_containers: Some(vec![
            Container {
                name: "register".into(),
                ..Container::default()
            },
            Container {
                name: "other".into(),
                ..Container::default()
            },
        ]),
        ..PodSpec::default()
    };
    let path = mount_runner_config(&group(), &mut pod, &["runner", "register"]);
    assert_eq!(path, Some(RUNNER_CONFIG_PATH));
    let volume = pod
        .volumes
        .as_ref()
        .and_then(|v| v.iter().find(|v| v.name == RUNNER_CONFIG_VOLUME))
        .expect("volume");
    let secret = volume.secret.as_ref().expect("secret volume");
    assert_eq!(secret.secret_name.as_deref(), Some("web-actions-cache"));
    let items = secret.items.clone().expect("items");
    assert_eq!(
        items
            .iter()
            .map(|i| (i.key.as_str(), i.path.as_str()))
            .collect::<Vec<_>>(),
        [(RUNNER_CONFIG_KEY, "config.yaml")],
        "the runner config only"
    );
    assert!(RUNNER_CONFIG_PATH.ends_with("/config.yaml") && RUNNER_CONFIG_PATH.starts_with(CONFIG_DIR));
    let mounted = |c: &Container| {
        c.volume_mounts.iter().flatten().any(|m| {
            m.name == RUNNER_CONFIG_VOLUME && m.mount_path == CONFIG_DIR && m.read_only == Some(true)
        })
    };
    let inits = pod.init_containers.as_ref().expect("init");
    assert!(mounted(&pod.containers[0]) && mounted(&inits[0]));
    assert!(!mounted(&inits[1]));
    // Twice is once.
    mount_runner_config(&group(), &mut pod, &["runner", "register"]);
    assert_eq!(pod.volumes.as_ref().map(Vec::len), Some(1));
    assert_eq!(pod.containers[0].volume_mounts.as_ref().map(Vec::len), Some(1));

    let mut bare = PodSpec::default();
    let no_cache = RunnerGroup::test(ForgeKind::Gitea).uid("u").build();
    assert_eq!(mount_runner_config(&no_cache, &mut bare, &["runner"]), None);
    assert_eq!(bare, PodSpec::default());
}

#[test]
fn the_status_shows_the_bound_capacity_else_the_request() {
    let mut claim = objects().claim;
    assert_eq!(
        cache_status("http://u/", &claim),
        CacheStatus {
            url: "http://u/".into(),
            size: "20Gi".into()
        }
    );
    claim.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
        capacity: Some(BTreeMap::from([("storage".to_owned(), Quantity("25Gi".into()))])),
        ..Default::default()
    });
    assert_eq!(cache_status("http://u/", &claim).size, "25Gi");
}

#[test]
fn fresh_secrets_are_long_and_differ() {
    let (a, b) = (new_secret(), new_secret());
    assert_eq!(a.expose().len(), 64);
    assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a, b);
}

#[test]
fn the_service_host_is_the_cluster_dns_name() {
    assert_eq!(service_host(&group()), "web-actions-cache.ci.svc.cluster.local");
}

#[test]
fn a_config_file_of_the_template_is_seen() {
    let plain = RunnerGroup::test(ForgeKind::Gitea).spec();
    assert!(!template_names_config_file(&plain));
    let with = RunnerGroup::test(ForgeKind::Gitea)
        .template_json(serde_json::json!({"spec": {"containers": [{"name": "runner",
            "env": [{"name": "CONFIG_FILE", "value": "/etc/c.yaml"}]}]}}))
        .spec();
    assert!(template_names_config_file(&with));
    let other = RunnerGroup::test(ForgeKind::Gitea)
        .template_json(
            serde_json::json!({"spec": {"containers": [{"name": "sidecar", "image": "x",
            "env": [{"name": "CONFIG_FILE", "value": "/etc/c.yaml"}]}]}}),
        )
        .spec();
    assert!(!template_names_config_file(&other));
}
