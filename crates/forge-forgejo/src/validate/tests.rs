use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::validate::validate_spec;

use super::*;

fn forgejo() -> RunnerGroupSpec {
    serde_json::from_value(serde_json::json!({
        "forge": "forgejo", "maxRunners": 5,
        "forgejo": {
            "url": "https://code.example.com", "scope": "repo", "repo": "alice/app",
            "credentials": "forgejo-token",
            "labels": ["debian:docker://node:22", "self-hosted:host", "ubuntu-latest"]
        }
    }))
    .expect("spec")
}

fn fj(spec: &mut RunnerGroupSpec) -> &mut ForgejoSpec {
    spec.forgejo.as_mut().expect("forgejo block")
}

fn violations(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    let mut v = validate_spec(spec);
    if let Some(fj) = &spec.forgejo {
        v.extend(validate_forgejo(fj));
    }
    v
}

fn fields(spec: &RunnerGroupSpec) -> Vec<&'static str> {
    violations(spec).into_iter().map(|v| v.field).collect()
}

#[test]
fn names_have_the_schemas_max_length() {
    let long = |n: usize| Some("é".repeat(n));
    let mut s = forgejo();
    fj(&mut s).org = long(MAX_FORGE_NAME_LEN + 1);
    fj(&mut s).user = long(MAX_FORGE_NAME_LEN + 1);
    fj(&mut s).repo = Some(format!("o/{}", "r".repeat(MAX_REPO_LEN - 1)));
    let got = fields(&s);
    for field in ["spec.forgejo.org", "spec.forgejo.user", "spec.forgejo.repo"] {
        assert!(got.contains(&field), "{field} missing from {got:?}");
    }
}

#[test]
fn valid_spec_and_block_choice() {
    assert!(fields(&forgejo()).is_empty());
    let mut s = forgejo();
    s.forgejo = None;
    assert_eq!(fields(&s), ["spec.forgejo"]);
}

#[test]
fn url_credentials_poll_proxy_ca() {
    let mut s = forgejo();
    fj(&mut s).url = "code.example.com".into();
    fj(&mut s).credentials = "Not_A_Name".into();
    fj(&mut s).poll_interval_seconds = Some(0);
    fj(&mut s).proxy_url = Some("proxy:3128".into());
    fj(&mut s).ca_bundle_config_map = Some("Bad_Name".into());
    assert_eq!(
        fields(&s),
        [
            "spec.forgejo.url",
            "spec.forgejo.credentials",
            "spec.forgejo.pollIntervalSeconds",
            "spec.forgejo.proxyUrl",
            "spec.forgejo.caBundleConfigMap"
        ]
    );
    let v = violations(&s);
    assert_eq!(v[1].message, "must name a Secret in the group's namespace");
    fj(&mut s).proxy_url = Some("http://proxy.internal:3128".into());
    fj(&mut s).ca_bundle_config_map = Some("corp-ca".into());
    fj(&mut s).url = "https://code.example.com/sub".into();
    fj(&mut s).credentials = "creds".into();
    fj(&mut s).poll_interval_seconds = Some(1);
    assert!(fields(&s).is_empty());
}

#[test]
fn label_forms() {
    for good in ["debian", "debian:docker", "x:docker://node:22", "x:host"] {
        let mut s = forgejo();
        fj(&mut s).labels = vec![good.into()];
        assert!(fields(&s).is_empty(), "{good:?}");
    }
    for bad in [
        "",
        ":host",
        "a:vm",
        "a:docker://",
        "a:docker:image",
        "a,b",
        "a b",
        "a:host://x",
    ] {
        let mut s = forgejo();
        fj(&mut s).labels = vec![bad.into()];
        let v = violations(&s);
        assert_eq!(v.len(), 1, "{bad:?}");
        assert_eq!(v[0].field, "spec.forgejo.labels");
        assert!(v[0].message.contains(&format!("{bad:?}")), "{}", v[0].message);
    }
    // Well-formed, but no runner pod can run LXC (forgejo-runner `Dockerfile`: no LXC, uid 1000).
    for lxc in ["x:lxc", "x:lxc://debian:bookworm"] {
        let mut s = forgejo();
        fj(&mut s).labels = vec!["y:host".into(), lxc.into()];
        let v = violations(&s);
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
    let mut s = forgejo();
    fj(&mut s).labels = vec!["a".into(), "a:host".into()];
    assert_eq!(fields(&s), ["spec.forgejo.labels"]);
    fj(&mut s).labels.clear();
    assert_eq!(fields(&s), ["spec.forgejo.labels"]);
}

#[test]
fn scope_needs_its_name() {
    let mut s = forgejo();
    fj(&mut s).scope = ForgejoScope::Org;
    assert_eq!(fields(&s), ["spec.forgejo.org"]);
    fj(&mut s).org = Some("acme".into());
    assert!(fields(&s).is_empty());
    fj(&mut s).scope = ForgejoScope::User;
    assert_eq!(fields(&s), ["spec.forgejo.user"]);
    fj(&mut s).user = Some("alice".into());
    fj(&mut s).scope = ForgejoScope::Repo;
    fj(&mut s).repo = None;
    assert_eq!(fields(&s), ["spec.forgejo.repo"]);
    for bad in ["app", "/app", "alice/", "alice/app/x"] {
        fj(&mut s).repo = Some(bad.into());
        assert_eq!(fields(&s), ["spec.forgejo.repo"], "{bad:?}");
    }
    fj(&mut s).scope = ForgejoScope::Global;
    fj(&mut s).repo = None;
    assert!(fields(&s).is_empty());
}
