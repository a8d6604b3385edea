use super::*;

fn spec(template: serde_json::Value) -> RunnerGroupSpec {
    serde_json::from_value(serde_json::json!({
        "forge": "gitea",
        "maxRunners": 2,
        "gitea": {"url": "https://git.example.com", "scope": "global", "credentials": "c", "labels": ["x"]},
        "template": template,
    }))
    .expect("spec")
}

fn pod() -> PodSpec {
    PodSpec {
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
    }
}

fn env(c: &Container) -> Vec<(String, String)> {
    c.env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn nothing_set_changes_nothing() {
    let mut p = pod();
    let t = RunnerTrust::new(Some(" "), None);
    assert!(t.is_empty());
    t.apply(
        &mut p,
        &["runner", "register"],
        TrustStyle::Go,
        &spec(serde_json::json!({})),
    );
    assert_eq!(p, pod());
}

#[test]
fn go_runners_get_one_extra_cert_file_and_upper_case_proxy() {
    let mut p = pod();
    let t = RunnerTrust::new(Some("corp-ca"), Some("http://proxy:3128"));
    t.apply(
        &mut p,
        &["runner", "register"],
        TrustStyle::Go,
        &spec(serde_json::json!({})),
    );
    let vols = p.volumes.as_ref().expect("volumes");
    assert_eq!(vols.len(), 1);
    let cm = vols[0].config_map.as_ref().expect("configMap volume");
    assert_eq!(cm.name, "corp-ca");
    assert_eq!(cm.items.as_ref().expect("items")[0].key, "ca.crt");
    let init = p.init_containers.as_ref().expect("init");
    for c in [&p.containers[0], &init[0]] {
        let m = &c.volume_mounts.as_ref().expect("mounts")[0];
        assert_eq!(
            (
                m.name.as_str(),
                m.mount_path.as_str(),
                m.sub_path.as_deref(),
                m.read_only
            ),
            (CA_VOLUME, GO_CA_FILE, Some("ca.crt"), Some(true))
        );
        assert_eq!(
            env(c),
            [
                ("HTTPS_PROXY".to_string(), "http://proxy:3128".to_string()),
                ("HTTP_PROXY".to_string(), "http://proxy:3128".to_string()),
                ("NO_PROXY".to_string(), DEFAULT_NO_PROXY.to_string()),
            ]
        );
        assert!(
            !env(c).iter().any(|(n, _)| n == "SSL_CERT_DIR"),
            "system roots stay"
        );
    }
    assert_eq!(
        init[1],
        pod().init_containers.expect("init")[1],
        "unnamed containers untouched"
    );
    // Applying twice adds nothing more.
    let again = p.clone();
    t.apply(
        &mut p,
        &["runner", "register"],
        TrustStyle::Go,
        &spec(serde_json::json!({})),
    );
    assert_eq!(p, again);
}

#[test]
fn github_runner_gets_node_and_runner_ca_settings() {
    let mut p = pod();
    RunnerTrust::new(Some("corp-ca"), None).apply(
        &mut p,
        &["runner"],
        TrustStyle::Node,
        &spec(serde_json::json!({})),
    );
    let c = &p.containers[0];
    assert_eq!(
        c.volume_mounts.as_ref().expect("mounts")[0].mount_path,
        NODE_CA_FILE
    );
    assert_eq!(
        env(c),
        [
            ("NODE_EXTRA_CA_CERTS".to_string(), NODE_CA_FILE.to_string()),
            ("RUNNER_UPDATE_CA_CERTS".to_string(), "1".to_string()),
        ]
    );
    let mut p = pod();
    RunnerTrust::new(None, Some("http://p:1")).apply(
        &mut p,
        &["runner"],
        TrustStyle::Node,
        &spec(serde_json::json!({})),
    );
    let names: Vec<String> = env(&p.containers[0]).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["https_proxy", "http_proxy", "no_proxy"]);
    assert!(p.volumes.is_none(), "no CA, no volume");
}

#[test]
fn the_template_can_set_the_proxy_variables_itself() {
    let s = spec(serde_json::json!({"spec": {"containers": [
        {"name": "runner", "env": [{"name": "no_proxy", "value": ".corp"}]}
    ]}}));
    assert_eq!(
        template_env_names(&s, "runner"),
        BTreeSet::from(["NO_PROXY".to_string()])
    );
    let mut p = pod();
    RunnerTrust::new(None, Some("http://p:1")).apply(&mut p, &["runner", "register"], TrustStyle::Go, &s);
    let names: Vec<String> = env(&p.containers[0]).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["HTTPS_PROXY", "HTTP_PROXY"],
        "the template's no_proxy wins"
    );
    let init = &p.init_containers.as_ref().expect("init")[0];
    assert_eq!(
        env(init).len(),
        3,
        "the template set it on the runner container only"
    );
}
