use std::collections::BTreeMap;

use super::*;
use crate::crd::{ForgeKind, RunnerGroup};

fn spec(template: serde_json::Value) -> RunnerGroupSpec {
    RunnerGroup::test(ForgeKind::Gitea)
        .url("https://git.example.com")
        .credentials("c")
        .labels(["x"])
        .max(2)
        .template_json(template)
        .spec()
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
    assert_eq!(
        init.len(),
        2,
        "Go reads the mounted file itself: no bundle to write"
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
fn github_runner_gets_a_bundle_written_by_an_init_container() {
    let mut p = pod();
    p.containers[0].image = Some("runner-image:1".into());
    let t = RunnerTrust::new(Some("corp-ca"), None);
    t.apply(
        &mut p,
        &["runner"],
        TrustStyle::Node,
        &spec(serde_json::json!({})),
    );
    let c = &p.containers[0];
    assert_eq!(
        env(c),
        [
            ("SSL_CERT_FILE".to_string(), CA_BUNDLE_FILE.to_string()),
            ("GIT_SSL_CAINFO".to_string(), CA_BUNDLE_FILE.to_string()),
            ("CURL_CA_BUNDLE".to_string(), CA_BUNDLE_FILE.to_string()),
            ("REQUESTS_CA_BUNDLE".to_string(), CA_BUNDLE_FILE.to_string()),
            ("NODE_EXTRA_CA_CERTS".to_string(), EXTRA_CA_FILE.to_string()),
        ]
    );
    assert_eq!(
        c.volume_mounts,
        Some(vec![VolumeMount {
            name: TRUST_VOLUME.into(),
            mount_path: TRUST_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        "the runner sees the written bundle only, read-only"
    );
    assert!(CA_BUNDLE_FILE.starts_with(TRUST_DIR) && EXTRA_CA_FILE.starts_with(TRUST_DIR));
    let vols: Vec<&str> = p.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    assert_eq!(vols, [CA_VOLUME, TRUST_VOLUME]);
    let trust = &p.volumes.as_ref().expect("volumes")[1];
    assert!(trust.empty_dir.is_some());

    let init = p.init_containers.as_ref().expect("init");
    let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [CA_BUNDLE_INIT, "register", "other"],
        "first, so later init containers can use the bundle too"
    );
    let b = &init[0];
    assert_eq!(b.image.as_deref(), Some("runner-image:1"));
    let cmd = b.command.as_ref().expect("command");
    assert_eq!(cmd[..2], ["sh".to_string(), "-c".to_string()]);
    assert_eq!(
        cmd[2],
        ca_bundle_script(CA_SOURCE_DIR, TRUST_DIR, &SYSTEM_CA_BUNDLES)
    );
    assert!(cmd[2].contains(CA_BUNDLE_FILE) && cmd[2].contains(SYSTEM_CA_BUNDLES[0]));
    assert_eq!(b.args, None);
    assert_eq!(
        b.env, None,
        "no environment, nothing of the group's in the command"
    );
    let mounts: Vec<(&str, &str, Option<bool>)> = b
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
        .collect();
    assert_eq!(
        mounts,
        [
            (CA_VOLUME, CA_SOURCE_DIR, Some(true)),
            (TRUST_VOLUME, TRUST_DIR, None)
        ]
    );
    assert_eq!(
        b.termination_message_policy.as_deref(),
        Some("FallbackToLogsOnError")
    );

    // Applying twice adds nothing more.
    let again = p.clone();
    t.apply(
        &mut p,
        &["runner"],
        TrustStyle::Node,
        &spec(serde_json::json!({})),
    );
    assert_eq!(p, again);

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
    assert_eq!(
        p.init_containers,
        pod().init_containers,
        "no CA, no init container"
    );
}

#[test]
fn the_bundle_comes_from_the_image_the_template_gives_the_runner() {
    let s = spec(serde_json::json!({"spec": {"containers": [
        {"name": "runner", "image": "corp/runner:rhel"}
    ]}}));
    let mut p = pod();
    p.containers[0].image = Some("runner-image:1".into());
    RunnerTrust::new(Some("corp-ca"), None).apply(&mut p, &["runner"], TrustStyle::Node, &s);
    let init = &p.init_containers.as_ref().expect("init")[0];
    assert_eq!(
        (init.name.as_str(), init.image.as_deref()),
        (CA_BUNDLE_INIT, Some("corp/runner:rhel"))
    );
}

#[test]
fn no_named_container_no_bundle() {
    let mut p = pod();
    RunnerTrust::new(Some("corp-ca"), None).apply(
        &mut p,
        &["missing"],
        TrustStyle::Node,
        &spec(serde_json::json!({})),
    );
    assert_eq!(p.init_containers, pod().init_containers);
    let vols: Vec<&str> = p.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    assert_eq!(vols, [CA_VOLUME]);
}

#[test]
fn the_template_can_set_the_ca_variables_itself() {
    let s = spec(serde_json::json!({"spec": {"containers": [
        {"name": "runner", "env": [{"name": "ssl_cert_file", "value": "/mine.pem"}]}
    ]}}));
    let mut p = pod();
    RunnerTrust::new(Some("corp-ca"), None).apply(&mut p, &["runner"], TrustStyle::Node, &s);
    let names: Vec<String> = env(&p.containers[0]).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "GIT_SSL_CAINFO",
            "CURL_CA_BUNDLE",
            "REQUESTS_CA_BUNDLE",
            "NODE_EXTRA_CA_CERTS"
        ]
    );
}

/// A scratch directory for one script test, removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("forgerunner-trust-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ca")).expect("ca dir");
        std::fs::create_dir_all(dir.join("out")).expect("out dir");
        Scratch(dir)
    }

    fn path(&self, rel: &str) -> String {
        self.0.join(rel).to_string_lossy().into_owned()
    }

    /// Runs the init container's script over this directory with `system` as the candidate
    /// system bundles: (exit code, stdout, stderr).
    fn run(&self, system: &[&str]) -> (i32, String, String) {
        let system: Vec<String> = system.iter().map(|s| self.path(s)).collect();
        let system: Vec<&str> = system.iter().map(String::as_str).collect();
        let script = ca_bundle_script(&self.path("ca"), &self.path("out"), &system);
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .output()
            .expect("sh runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.0.join(rel)).ok()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const PEM: &str = "-----BEGIN CERTIFICATE-----\nQ09SUA==\n-----END CERTIFICATE-----\n";
/// A system bundle whose last line has no newline: the script must not glue the next PEM on.
const SYSTEM: &str = "-----BEGIN CERTIFICATE-----\nU1lT\n-----END CERTIFICATE-----";

#[test]
fn the_script_appends_the_ca_to_the_first_system_bundle() {
    let d = Scratch::new("system");
    std::fs::write(d.0.join("ca/ca.crt"), PEM).expect("ca");
    std::fs::write(d.0.join("second.pem"), SYSTEM).expect("system");
    std::fs::write(d.0.join("third.pem"), "not this one").expect("system");
    let (code, stdout, stderr) = d.run(&["missing.pem", "second.pem", "third.pem"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        d.read("out/ca-certificates.crt").as_deref(),
        Some(format!("{SYSTEM}\n{PEM}").as_str())
    );
    assert_eq!(d.read("out/forgerunner-ca.crt").as_deref(), Some(PEM));
    assert!(stdout.contains("second.pem"), "{stdout}");
    assert_eq!(stderr, "");
}

#[test]
fn the_script_falls_back_to_the_ca_alone_and_says_so() {
    let d = Scratch::new("nosystem");
    std::fs::write(d.0.join("ca/ca.crt"), PEM).expect("ca");
    let (code, _, stderr) = d.run(&["missing.pem"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(d.read("out/ca-certificates.crt").as_deref(), Some(PEM));
    assert_eq!(d.read("out/forgerunner-ca.crt").as_deref(), Some(PEM));
    assert!(stderr.contains("warning: no system CA bundle"), "{stderr}");
}

#[test]
fn the_script_fails_loudly_without_a_usable_ca() {
    let d = Scratch::new("noca");
    std::fs::write(d.0.join("system.pem"), SYSTEM).expect("system");
    let (code, _, stderr) = d.run(&["system.pem"]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with("forgerunner: cannot read ") && stderr.contains("ca.crt"),
        "{stderr}"
    );
    assert_eq!(d.read("out/ca-certificates.crt"), None, "nothing half-written");

    std::fs::write(d.0.join("ca/ca.crt"), "").expect("empty ca");
    let (code, _, stderr) = d.run(&["system.pem"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("holds no PEM certificate"), "{stderr}");
    assert_eq!(d.read("out/ca-certificates.crt"), None);
}

#[test]
fn the_script_quotes_its_paths() {
    assert_eq!(sh_quote("/a b/it's"), r"'/a b/it'\''s'");
    let d = Scratch::new("quote it's");
    std::fs::write(d.0.join("ca/ca.crt"), PEM).expect("ca");
    std::fs::write(d.0.join("sys tem.pem"), SYSTEM).expect("system");
    let (code, _, stderr) = d.run(&["sys tem.pem"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        d.read("out/ca-certificates.crt").as_deref(),
        Some(format!("{SYSTEM}\n{PEM}").as_str())
    );
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

/// The GitHub runner must trust the CA although its container can never use `sudo`.
///
/// Upstream `actions/runner` `src/Misc/layoutroot/run.sh` `updateCerts`: with
/// `RUNNER_UPDATE_CA_CERTS` set, a runner whose uid is not 0 runs `sudo update-ca-certificates`;
/// when that fails the script only prints a message and starts the runner anyway. The image's
/// `runner` has passwordless sudo (`images/Dockerfile`), but the hardened container sets
/// `allowPrivilegeEscalation: false` (no_new_privs), so sudo refuses: the system store is never
/// updated and the .NET listener (OpenSSL's store) and git never trust the CA. The trust must
/// come from a bundle an init container writes, named by `SSL_CERT_FILE` and `GIT_SSL_CAINFO`.
#[test]
fn hardened_node_runner_trusts_the_ca_without_sudo() {
    let mut p = PodSpec {
        containers: vec![Container {
            name: "runner".into(),
            image: Some("ghcr.io/actions/actions-runner:2.330.0".into()),
            ..Container::default()
        }],
        ..PodSpec::default()
    };
    RunnerTrust::new(Some("corp-ca"), None).apply(
        &mut p,
        &["runner"],
        TrustStyle::Node,
        &spec(serde_json::json!({})),
    );
    crate::runner_pod::harden(
        &mut p,
        crate::runner_pod::RunAs {
            user: 1001,
            group: 123,
        },
    );
    assert_eq!(crate::runner_pod::restricted_violations(&p), []);
    let runner = &p.containers[0];
    let sc = runner.security_context.as_ref().expect("context");
    assert_eq!(sc.allow_privilege_escalation, Some(false), "sudo is blocked");
    let vars: BTreeMap<String, String> = env(runner).into_iter().collect();
    assert!(
        !vars.contains_key("RUNNER_UPDATE_CA_CERTS"),
        "RUNNER_UPDATE_CA_CERTS needs sudo, which this container cannot use"
    );
    let bundle = vars.get("SSL_CERT_FILE").expect("SSL_CERT_FILE");
    assert_eq!(vars.get("GIT_SSL_CAINFO"), Some(bundle));
    // The bundle lives in an emptyDir the runner mounts read-only...
    let mount = runner
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| bundle.starts_with(&format!("{}/", m.mount_path)))
        .expect("the bundle's directory is mounted");
    assert_eq!(mount.read_only, Some(true));
    let volume = p
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .expect("volume");
    assert!(volume.empty_dir.is_some(), "{volume:?}");
    // ...and an init container of the runner's image, hardened the same way, writes it.
    let writer = p
        .init_containers
        .iter()
        .flatten()
        .find(|c| {
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == mount.name && m.read_only != Some(true))
        })
        .expect("an init container writes the bundle");
    assert_eq!(writer.image, runner.image);
    assert!(
        writer
            .command
            .iter()
            .flatten()
            .any(|a| a.contains(bundle.as_str())),
        "{:?}",
        writer.command
    );
    let sc = writer.security_context.as_ref().expect("init context");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
}
