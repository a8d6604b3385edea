//! Every `RunnerGroup` in `docs/examples/` deserializes, passes `validate_spec`, and names a
//! Secret the same file shows with the keys its forge reads; broken specs name the right field.

use std::collections::BTreeMap;
use std::path::PathBuf;

use forgerunner_core::RunnerGroup;
use forgerunner_core::crd::ForgeKind;
use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::validate::SpecViolation;

/// Every rule the reconciler checks: the common ones, then the forge block's own.
fn validate_spec(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    let mut out = forgerunner_core::validate::validate_spec(spec);
    if let Some(gh) = &spec.github {
        out.extend(forgerunner_github::validate::validate_github(gh));
    }
    if let Some(gt) = &spec.gitea {
        out.extend(forgerunner_gitea::validate::validate_gitea(gt));
    }
    if let Some(fj) = &spec.forgejo {
        out.extend(forgerunner_forgejo::validate::validate_forgejo(fj));
    }
    out
}
use serde::Deserialize;

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples")
}

/// Every YAML document of every example file, by file name.
fn documents() -> BTreeMap<String, Vec<serde_yaml::Value>> {
    let mut out = BTreeMap::new();
    let entries = std::fs::read_dir(examples_dir()).expect("docs/examples exists");
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable example");
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| serde_yaml::Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            .filter(|v| !v.is_null())
            .collect();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        out.insert(name, docs);
    }
    out
}

fn kind(doc: &serde_yaml::Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

#[test]
fn the_documented_examples_exist() {
    let docs = documents();
    for name in [
        "github-pat.yaml",
        "github-app.yaml",
        "gitea-repo.yaml",
        "gitea-org.yaml",
    ] {
        let file = docs
            .get(name)
            .unwrap_or_else(|| panic!("docs/examples/{name} is missing"));
        let groups = file.iter().filter(|d| kind(d) == "RunnerGroup").count();
        assert_eq!(groups, 1, "{name} should hold exactly one RunnerGroup");
    }
}

#[test]
fn every_example_runner_group_is_valid() {
    let mut checked = 0;
    for (name, docs) in documents() {
        for doc in docs.iter().filter(|d| kind(d) == "RunnerGroup") {
            assert_eq!(
                doc["apiVersion"].as_str(),
                Some("forgerunner.dev/v1alpha1"),
                "{name}"
            );
            let group: RunnerGroup = serde_yaml::from_value(doc.clone())
                .unwrap_or_else(|e| panic!("{name}: not a RunnerGroup: {e}"));
            let violations = validate_spec(&group.spec);
            assert!(violations.is_empty(), "{name}: {violations:?}");
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} RunnerGroups found");
}

/// The keys each credential form needs, as the forge backends read them.
fn expected_keys(group: &RunnerGroup, secret: &serde_yaml::Value) -> Vec<&'static str> {
    let has = |k: &str| !secret["stringData"][k].is_null() || !secret["data"][k].is_null();
    match group.spec.forge {
        ForgeKind::Github if has("github_token") => vec!["github_token"],
        ForgeKind::Github => vec![
            "github_app_id",
            "github_app_installation_id",
            "github_app_private_key",
        ],
        ForgeKind::Gitea | ForgeKind::Forgejo => vec!["token"],
    }
}

#[test]
fn every_example_shows_its_credentials_secret() {
    for (name, docs) in documents() {
        let secrets: BTreeMap<&str, &serde_yaml::Value> = docs
            .iter()
            .filter(|d| kind(d) == "Secret")
            .filter_map(|d| Some((d["metadata"]["name"].as_str()?, d)))
            .collect();
        for doc in docs.iter().filter(|d| kind(d) == "RunnerGroup") {
            let group: RunnerGroup = serde_yaml::from_value(doc.clone()).expect("valid RunnerGroup");
            let credentials = match (&group.spec.github, &group.spec.gitea, &group.spec.forgejo) {
                (Some(gh), _, _) => gh.credentials.as_str(),
                (_, Some(gt), _) => gt.credentials.as_str(),
                (_, _, Some(fj)) => fj.credentials.as_str(),
                _ => panic!("{name}: no forge block"),
            };
            let secret = secrets
                .get(credentials)
                .unwrap_or_else(|| panic!("{name}: Secret {credentials} not shown"));
            assert_eq!(
                secret["metadata"]["namespace"], doc["metadata"]["namespace"],
                "{name}: the Secret must live in the group's namespace"
            );
            for key in expected_keys(&group, secret) {
                assert!(
                    !secret["stringData"][key].is_null(),
                    "{name}: Secret {credentials} lacks key {key}"
                );
            }
            if let Some(webhook) = group
                .spec
                .gitea
                .as_ref()
                .and_then(|g| g.webhook_secret.as_deref())
            {
                let secret = secrets
                    .get(webhook)
                    .unwrap_or_else(|| panic!("{name}: Secret {webhook} not shown"));
                assert!(
                    !secret["stringData"]["secret"].is_null(),
                    "{name}: webhook Secret lacks key secret"
                );
            }
        }
    }
}

/// Parses a RunnerGroup spec written as YAML and returns the fields `validate_spec` names.
fn violations(spec_yaml: &str) -> Vec<&'static str> {
    let doc = format!(
        "apiVersion: forgerunner.dev/v1alpha1\nkind: RunnerGroup\nmetadata:\n  name: bad\n  namespace: ci\nspec:\n{}",
        spec_yaml.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    let group: RunnerGroup = serde_yaml::from_str(&doc).unwrap_or_else(|e| panic!("{e}:\n{doc}"));
    validate_spec(&group.spec).into_iter().map(|v| v.field).collect()
}

#[test]
fn invalid_specs_name_their_fields() {
    let cases: &[(&str, &[&str])] = &[
        ("forge: github\nmaxRunners: 3\n", &["spec.github"]),
        (
            "forge: gitea\nmaxRunners: 3\ngithub:\n  configUrl: https://github.com/o\n  credentials: c\n",
            &["spec.gitea", "spec.github"],
        ),
        (
            "forge: github\nminRunners: 4\nmaxRunners: 3\ngithub:\n  configUrl: github.com/o\n  credentials: c\n",
            &["spec.minRunners", "spec.github.configUrl"],
        ),
        (
            "forge: github\nmaxRunners: 0\ngithub:\n  configUrl: https://github.com/o\n  credentials: c\n",
            &["spec.maxRunners"],
        ),
        (
            "forge: gitea\nmaxRunners: 2\ngitea:\n  url: https://g.example\n  scope: org\n  credentials: t\n  labels: [linux]\n",
            &["spec.gitea.org"],
        ),
        (
            "forge: gitea\nmaxRunners: 2\ngitea:\n  url: https://g.example\n  scope: repo\n  repo: justaname\n  credentials: t\n  labels: [linux]\n",
            &["spec.gitea.repo"],
        ),
        (
            "forge: gitea\nmaxRunners: 2\ngitea:\n  url: https://g.example\n  scope: user\n  user: bob\n  credentials: t\n  labels: [\"linux:vm\"]\n",
            &["spec.gitea.labels"],
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(violations(spec), *want, "spec:\n{spec}");
    }
}

#[test]
fn malformed_specs_are_rejected_by_deserialization_not_a_panic() {
    for spec in [
        "forge: bitbucket\nmaxRunners: 1\n",
        "forge: github\n",
        "forge: github\nmaxRunners: -1\n",
    ] {
        let doc = format!(
            "apiVersion: forgerunner.dev/v1alpha1\nkind: RunnerGroup\nmetadata:\n  name: bad\nspec:\n{}",
            spec.lines().map(|l| format!("  {l}\n")).collect::<String>()
        );
        assert!(serde_yaml::from_str::<RunnerGroup>(&doc).is_err(), "{spec}");
    }
}

/// serde ignores unknown keys, and the API server would prune them: catch typos in the examples by
/// checking every key against the generated schema (the template's too: it is the pod
/// template's schema).
#[test]
fn example_keys_exist_in_the_crd_schema() {
    use kube::CustomResourceExt;
    fn check(value: &serde_json::Value, schema: &serde_json::Value, at: &str) {
        if schema["x-kubernetes-preserve-unknown-fields"] == true {
            return;
        }
        match value {
            // A map (`resources.requests`, `nodeSelector`): its keys are the user's.
            serde_json::Value::Object(map) if schema.get("additionalProperties").is_some() => {
                for (key, sub) in map {
                    check(sub, &schema["additionalProperties"], &format!("{at}.{key}"));
                }
            }
            serde_json::Value::Object(map) => {
                for (key, sub) in map {
                    let prop = &schema["properties"][key];
                    assert!(prop.is_object(), "{at}.{key} is not in the RunnerGroup schema");
                    check(sub, prop, &format!("{at}.{key}"));
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|i| check(i, &schema["items"], at)),
            _ => {}
        }
    }
    let crd = serde_json::to_value(RunnerGroup::crd()).expect("CRD serializes");
    let spec_schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    for (name, docs) in documents() {
        for doc in docs.iter().filter(|d| kind(d) == "RunnerGroup") {
            let spec = serde_json::to_value(&doc["spec"]).expect("YAML maps to JSON");
            check(&spec, spec_schema, &format!("{name}: spec"));
        }
    }
}
