//! Every CEL rule (`x-kubernetes-validations`) of the checked-in CRD has a bad example: a
//! RunnerGroup that breaks just that rule. The fake cluster refuses it at `kubectl apply` (the
//! real kubectl) naming the rule's field and message, and the reconciler's own validation (the
//! rule's twin in `validate_spec` or `Forge::describe`) refuses it too. A good example per forge
//! passes both.
//!
//! The rules are read from `charts/forgerunner/crds/runnergroups.yaml`, so a rule added without
//! a bad example here fails the test.

use std::path::Path;

use forgerunner_core::RunnerGroup;
use forgerunner_core::reconcile::pipeline::check_spec;
use forgerunner_testkit::apiserver::FakeApiServer;
use kube::Resource;
use serde_json::{Value, json};

use crate::controller::ForgeSet;
use crate::forges::EnabledForges;

const NS: &str = "cel";
const FORGES: [&str; 3] = ["github", "gitea", "forgejo"];

/// One rule: the schema node declaring it (`spec.gitea`), the field its error names and its
/// message.
#[derive(Debug)]
struct RuleRef {
    node: String,
    field: String,
    message: String,
}

fn collect(schema: &Value, path: &str, out: &mut Vec<RuleRef>) {
    for rule in schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let fp = rule["fieldPath"].as_str().unwrap_or_default();
        out.push(RuleRef {
            node: path.to_owned(),
            field: format!("{path}{fp}"),
            message: rule["message"].as_str().unwrap_or_default().to_owned(),
        });
    }
    for (name, sub) in schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let child = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        collect(sub, &child, out);
    }
    if let Some(items) = schema.get("items") {
        collect(items, &format!("{path}[0]"), out);
    }
}

fn crd_rules() -> Vec<RuleRef> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/forgerunner/crds/runnergroups.yaml");
    let text = std::fs::read_to_string(&file).expect("the generated CRD");
    let crd: Value = serde_yaml::from_str(&text).expect("CRD YAML");
    let mut out = Vec::new();
    for version in crd["spec"]["versions"].as_array().expect("versions") {
        collect(&version["schema"]["openAPIV3Schema"], "", &mut out);
    }
    out
}

/// A valid spec of one forge.
fn base(forge: &str) -> Value {
    match forge {
        "github" => json!({"forge": "github", "maxRunners": 5, "github": {
            "configUrl": "https://github.com/org", "credentials": "creds"}}),
        // A bare Forgejo label is a docker label, which needs a Docker daemon: `:host` here.
        f => json!({"forge": f, "maxRunners": 5, f: {
            "url": format!("https://{f}.example.com"), "scope": "repo", "repo": "o/r",
            "credentials": "creds", "labels": [if f == "forgejo" { "linux:host" } else { "linux" }]}}),
    }
}

fn without(mut v: Value, key: &str) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.remove(key);
    }
    v
}

/// A RunnerGroup (named after `i`) that breaks just the rule, or None when the rule has no bad
/// example yet.
fn bad_object(i: usize, rule: &RuleRef) -> Option<Value> {
    if rule.node.is_empty() && rule.message.starts_with("metadata.name must be at most 63") {
        // The one rule at the root: the name is a label value.
        let name = format!("bad-{i}-{}", "n".repeat(60));
        return Some(object(&name, &base("github")));
    }
    bad_spec(rule).map(|spec| object(&format!("bad-{i}"), &spec))
}

/// A spec that breaks just the rule, or None when the rule has no bad example yet.
fn bad_spec(rule: &RuleRef) -> Option<Value> {
    let msg = rule.message.as_str();
    match rule.node.as_str() {
        "spec" => {
            for f in FORGES {
                if msg == format!("{f} is required when forge is {f}") {
                    return Some(without(base(f), f));
                }
                if msg == format!("{f} must not be set unless forge is {f}") {
                    let other = FORGES.iter().find(|o| **o != f)?;
                    let mut s = base(other);
                    s[f] = base(f)[f].clone();
                    return Some(s);
                }
            }
            let mut s = base("github");
            match msg {
                "maxRunners must be at least 1" => s["maxRunners"] = json!(0),
                "minRunners must not exceed maxRunners" => {
                    s["minRunners"] = json!(3);
                    s["maxRunners"] = json!(2);
                }
                "a class's maxRunners must not exceed maxRunners" => {
                    s = base("gitea");
                    s["classes"] = json!([{"name": "large", "labels": ["large"], "maxRunners": 6}]);
                }
                m if m.starts_with("cache must not be set when forge is github") => {
                    s["cache"] = json!({"size": "10Gi"});
                }
                m if m.starts_with("dockerCache is only used with containerMode dind") => {
                    s["dockerCache"] = json!({"size": "20Gi"});
                }
                _ => return None,
            }
            Some(s)
        }
        "spec.containerMode" if msg.starts_with("kubernetesModeWorkVolumeClaim") => {
            let mut s = base("github");
            s["containerMode"] = json!({"type": "dind",
                "kubernetesModeWorkVolumeClaim": {"spec": {"accessModes": ["ReadWriteOnce"]}}});
            Some(s)
        }
        node => {
            let f = node.strip_prefix("spec.").filter(|f| FORGES.contains(f))?;
            let mut s = base(f);
            let block = &mut s[f];
            match msg {
                m if m.starts_with("url must") => block["url"] = json!("gitea.example.com"),
                m if m.starts_with("configUrl must") => block["configUrl"] = json!("github.com/org"),
                m if m.starts_with("proxyUrl must") => block["proxyUrl"] = json!("proxy.example:3128"),
                m if m.starts_with("each label must") => block["labels"] = json!(["linux:vm"]),
                "repo must be owner/name" => block["repo"] = json!("just-a-name"),
                "repo (owner/name) is required when scope is repo" => *block = without(block.take(), "repo"),
                "org is required when scope is org" | "user is required when scope is user" => {
                    let scope = msg.split(' ').next().unwrap_or_default();
                    *block = without(block.take(), "repo");
                    block["scope"] = json!(scope);
                }
                _ => return None,
            }
            Some(s)
        }
    }
}

fn object(name: &str, spec: &Value) -> Value {
    json!({
        "apiVersion": RunnerGroup::api_version(&()),
        "kind": RunnerGroup::kind(&()),
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

/// `kubectl apply` of one object; (success, stdout and stderr).
fn apply(kubeconfig: &Path, obj: &Value, extra: &[&str]) -> (bool, String) {
    let dir = kubeconfig.parent().expect("kubeconfig dir");
    let name = obj["metadata"]["name"].as_str().expect("name");
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, obj.to_string()).expect("manifest");
    let mut args = vec!["apply", "-f", file.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    let r = forgerunner_testkit::kubectl::run(kubeconfig, &args).expect("kubectl is on the PATH");
    (r.ok, r.text())
}

fn reconciler_says(obj: &Value, forges: &EnabledForges) -> Result<(), String> {
    let group: RunnerGroup = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    check_spec(&group, forges.for_spec(&group.spec)).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cel_rule_refuses_its_bad_example_at_kubectl_apply_and_in_the_reconciler() {
    let rules = crd_rules();
    // The walk found the rules of the spec and of each forge block.
    assert!(rules.len() >= 20, "{rules:#?}");
    let missing: Vec<&RuleRef> = rules
        .iter()
        .enumerate()
        .filter(|(i, r)| bad_object(*i, r).is_none())
        .map(|(_, r)| r)
        .collect();
    assert!(
        missing.is_empty(),
        "CEL rules without a bad example: {missing:#?}"
    );

    let server = FakeApiServer::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let crd_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/forgerunner/crds/runnergroups.yaml");
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let (crd, ns_out) = tokio::task::spawn_blocking({
        let kubeconfig = kubeconfig.clone();
        move || {
            let crd_path = crd_file.to_str().expect("utf-8 path");
            let crd =
                forgerunner_testkit::kubectl::run(&kubeconfig, &["apply", "-f", crd_path]).expect("kubectl");
            (crd, apply(&kubeconfig, &ns, &[]))
        }
    })
    .await
    .expect("kubectl task");
    assert!(crd.ok, "{}", crd.stderr);
    assert!(ns_out.0, "{}", ns_out.1);

    let forges = crate::forges::all_for_tests();
    let kc = kubeconfig.clone();
    let problems = tokio::task::spawn_blocking(move || {
        let mut problems = Vec::new();
        for f in FORGES {
            let good = object(&format!("good-{f}"), &base(f));
            let (ok, out) = apply(&kc, &good, &[]);
            if !ok {
                problems.push(format!("good {f}: kubectl refused it: {out}"));
            }
            if let Err(e) = reconciler_says(&good, &forges) {
                problems.push(format!("good {f}: the reconciler refused it: {e}"));
            }
        }
        for (i, rule) in rules.iter().enumerate() {
            let Some(bad) = bad_object(i, rule) else { continue };
            let (ok, out) = apply(&kc, &bad, &[]);
            // A rule at the root without a fieldPath names the object itself (`<nil>`).
            let field = if rule.field.is_empty() {
                "<nil>"
            } else {
                rule.field.as_str()
            };
            let named = out.contains(&format!("{field}: ")) && out.contains(&rule.message);
            if ok || !named {
                problems.push(format!(
                    "{} ({}): kubectl apply {}: {out}",
                    rule.field,
                    rule.message,
                    if ok {
                        "accepted it"
                    } else {
                        "did not name the field and message"
                    }
                ));
            }
            match reconciler_says(&bad, &forges) {
                Ok(()) => problems.push(format!(
                    "{} ({}): the reconciler accepted it",
                    rule.field, rule.message
                )),
                Err(e)
                    if !e.contains(if rule.field.is_empty() {
                        "metadata.name"
                    } else {
                        &rule.field
                    }) =>
                {
                    problems.push(format!(
                        "{} ({}): the reconciler refused it at another field: {e}",
                        rule.field, rule.message
                    ))
                }
                Err(_) => {}
            }
        }
        problems
    })
    .await
    .expect("kubectl task");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// An update that breaks a rule is refused too, through kubectl's client-side apply (a patch)
/// and server-side apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_breaking_a_rule_is_refused_by_kubectl_apply() {
    let server = FakeApiServer::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let client = server.client().expect("client");
    let crds: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(client);
    crds.create(
        &Default::default(),
        &<RunnerGroup as kube::CustomResourceExt>::crd(),
    )
    .await
    .expect("CRD");
    let out = tokio::task::spawn_blocking(move || {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
        let mut out = vec![apply(&kubeconfig, &ns, &[])];
        let good = object("upd", &base("gitea"));
        out.push(apply(&kubeconfig, &good, &[]));
        let mut bad = base("gitea");
        bad["minRunners"] = json!(6);
        out.push(apply(&kubeconfig, &object("upd", &bad), &[]));
        out.push(apply(
            &kubeconfig,
            &object("upd", &bad),
            &["--server-side", "--field-manager=cel-test"],
        ));
        out
    })
    .await
    .expect("kubectl task");
    assert!(out[0].0 && out[1].0, "{out:?}");
    for (ok, text) in &out[2..] {
        assert!(!ok, "the update was accepted: {text}");
        assert!(
            text.contains(
                "spec.minRunners: Invalid value: \"object\": minRunners must not exceed maxRunners"
            ),
            "{text}"
        );
    }
}
