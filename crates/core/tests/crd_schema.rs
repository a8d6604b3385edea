//! Unit tests on the generated `RunnerGroup` CRD: identity, printer columns, required fields, CEL
//! rules, and the structural-schema rules the Kubernetes API server enforces.

use forgerunner_core::RunnerGroup;
use kube::CustomResourceExt;
use serde_json::Value;

fn crd() -> Value {
    serde_json::to_value(RunnerGroup::crd()).expect("CRD serializes")
}

fn version(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]
}

fn root_schema(crd: &Value) -> &Value {
    &version(crd)["schema"]["openAPIV3Schema"]
}

fn spec_schema(crd: &Value) -> &Value {
    &root_schema(crd)["properties"]["spec"]
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn rules(schema: &Value) -> Vec<(&str, &str)> {
    schema["x-kubernetes-validations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["rule"].as_str().unwrap_or(""),
                        r["fieldPath"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn identity_scope_names_and_status_subresource() {
    let crd = crd();
    assert_eq!(crd["metadata"]["name"], "runnergroups.forgerunner.dev");
    assert_eq!(crd["spec"]["group"], "forgerunner.dev");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(crd["spec"]["names"]["kind"], "RunnerGroup");
    assert_eq!(crd["spec"]["names"]["plural"], "runnergroups");
    assert_eq!(strings(&crd["spec"]["names"]["shortNames"]), ["rg"]);
    let v = version(&crd);
    assert_eq!(v["name"], "v1alpha1");
    assert_eq!(v["served"], true);
    assert_eq!(v["storage"], true);
    assert!(
        v["subresources"]["status"].is_object(),
        "status subresource missing"
    );
}

#[test]
fn printer_columns_in_order() {
    let crd = crd();
    let cols = version(&crd)["additionalPrinterColumns"]
        .as_array()
        .expect("printer columns")
        .clone();
    let got: Vec<(String, String, String)> = cols
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["type"].as_str().unwrap_or_default().to_owned(),
                c["jsonPath"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let want = [
        ("Forge", "string", ".spec.forge"),
        ("Min", "integer", ".spec.minRunners"),
        ("Max", "integer", ".spec.maxRunners"),
        ("Current", "integer", ".status.currentRunners"),
        ("Running", "integer", ".status.runningJobs"),
        ("Pending", "integer", ".status.pendingRunners"),
        ("Idle", "integer", ".status.idleRunners"),
        ("Busy", "integer", ".status.busyRunners"),
        ("Desired", "integer", ".status.desiredRunners"),
        (
            "Ready",
            "string",
            ".status.conditions[?(@.type==\"Ready\")].status",
        ),
        // The schedule window in force; its next change only with `-o wide` (priority 1).
        ("Window", "string", ".status.schedule.active"),
        ("Next-Change", "string", ".status.schedule.nextChange"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn required_fields() {
    let crd = crd();
    let root = root_schema(&crd);
    assert_eq!(strings(&root["required"]), ["spec"]);
    let spec = spec_schema(&crd);
    assert_eq!(strings(&spec["required"]), ["forge", "maxRunners"]);
    assert_eq!(
        strings(&spec["properties"]["github"]["required"]),
        ["configUrl", "credentials"]
    );
    assert_eq!(
        strings(&spec["properties"]["gitea"]["required"]),
        ["credentials", "labels", "scope", "url"]
    );
    assert_eq!(spec["properties"]["gitea"]["properties"]["labels"]["minItems"], 1);
    assert_eq!(spec["properties"]["maxRunners"]["minimum"], 1.0);
    assert_eq!(spec["properties"]["minRunners"]["minimum"], 0.0);
}

#[test]
fn enums_list_every_value() {
    let crd = crd();
    let spec = spec_schema(&crd);
    assert_eq!(
        strings(&spec["properties"]["forge"]["enum"]),
        ["github", "gitea", "forgejo"]
    );
    for block in ["gitea", "forgejo"] {
        assert_eq!(
            strings(&spec["properties"][block]["properties"]["scope"]["enum"]),
            ["global", "org", "user", "repo"],
            "{block}"
        );
    }
}

#[test]
fn spec_cel_rules_sit_on_the_spec_and_cover_the_forge_blocks() {
    let crd = crd();
    // Rules on the root would see the whole object, where `self.forge` does not exist; the one
    // root rule is on the name, which CEL may read only there.
    assert_eq!(
        rules(root_schema(&crd)),
        [("oldSelf.hasValue() || size(self.metadata.name) <= 63", "")]
    );
    let got = rules(spec_schema(&crd));
    let want = [
        ("self.forge != 'github' || has(self.github)", ".github"),
        ("self.forge == 'github' || !has(self.github)", ".github"),
        ("self.forge != 'gitea' || has(self.gitea)", ".gitea"),
        ("self.forge == 'gitea' || !has(self.gitea)", ".gitea"),
        ("self.forge != 'forgejo' || has(self.forgejo)", ".forgejo"),
        ("self.forge == 'forgejo' || !has(self.forgejo)", ".forgejo"),
        ("self.maxRunners >= 1", ".maxRunners"),
        (
            "!has(self.minRunners) || self.minRunners <= self.maxRunners",
            ".minRunners",
        ),
        (
            "!has(self.classes) || self.classes.all(c, !has(c.maxRunners) || c.maxRunners <= self.maxRunners)",
            ".classes",
        ),
        ("self.forge != 'github' || !has(self.cache)", ".cache"),
        (
            "!has(self.dockerCache) || (has(self.containerMode) && self.containerMode.type == 'dind')",
            ".dockerCache",
        ),
    ];
    assert_eq!(got, want);
}

#[test]
fn github_cel_rules_check_urls() {
    let crd = crd();
    let got = rules(&spec_schema(&crd)["properties"]["github"]);
    assert_eq!(got.len(), 2);
    assert!(
        got.iter()
            .any(|(r, p)| r.contains("self.configUrl.matches('^https?://") && *p == ".configUrl")
    );
    assert!(
        got.iter()
            .any(|(r, p)| r.contains("self.proxyUrl.matches('^https?://") && *p == ".proxyUrl")
    );
}

#[test]
fn gitea_cel_rules_check_url_scope_and_labels() {
    let crd = crd();
    let got = rules(&spec_schema(&crd)["properties"]["gitea"]);
    let paths: Vec<&str> = got.iter().map(|(_, p)| *p).collect();
    assert_eq!(
        paths,
        [".url", ".org", ".user", ".repo", ".repo", ".labels", ".proxyUrl"]
    );
    assert!(got[0].0.contains("self.url.matches('^https?://"));
    assert!(got[1].0.starts_with("self.scope != 'org'"));
    assert!(got[2].0.starts_with("self.scope != 'user'"));
    assert!(got[3].0.starts_with("self.scope != 'repo'"));
    assert!(got[4].0.contains("self.repo.matches('^[^/]+/[^/]+$')"));
    assert!(got[5].0.starts_with("self.labels.all("));
    assert!(got[6].0.contains("self.proxyUrl.matches('^https?://"));
}

#[test]
fn container_mode_rule_keeps_the_work_volume_claim_to_kubernetes_mode() {
    let crd = crd();
    let mode = &spec_schema(&crd)["properties"]["containerMode"];
    let got = rules(mode);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, ".kubernetesModeWorkVolumeClaim");
    let types = mode["properties"]["type"]["enum"].as_array().expect("enum");
    assert_eq!(types.len(), 3, "{types:?}");
}

#[test]
fn every_rule_has_a_message_and_a_field_path_that_exists() {
    fn visit(schema: &Value, at: &str, seen: &mut usize) {
        if let Some(list) = schema["x-kubernetes-validations"].as_array() {
            for rule in list {
                *seen += 1;
                assert!(
                    rule["message"].as_str().is_some_and(|m| !m.is_empty()),
                    "{at}: rule without message"
                );
                if let Some(path) = rule["fieldPath"].as_str() {
                    let field = path.trim_start_matches('.');
                    assert!(
                        schema["properties"].get(field).is_some(),
                        "{at}: fieldPath {path} names no property"
                    );
                }
            }
        }
        if let Some(props) = schema["properties"].as_object() {
            for (name, sub) in props {
                visit(sub, &format!("{at}.{name}"), seen);
            }
        }
        if schema.get("items").is_some() {
            visit(&schema["items"], &format!("{at}[]"), seen);
        }
    }
    let crd = crd();
    let mut seen = 0;
    visit(root_schema(&crd), "", &mut seen);
    // 1 on the name, 11 common (classes, cache and dockerCache included), 2 GitHub, 7 Gitea, 7
    // Forgejo and 1 container-mode rule.
    assert_eq!(seen, 29);
}

/// Kubernetes rejects (or warns about) schemas that break these rules; see "Specifying a
/// structural schema" in the CustomResourceDefinition docs.
#[test]
fn schema_is_structural() {
    fn visit(schema: &Value, at: &str) {
        let obj = schema
            .as_object()
            .unwrap_or_else(|| panic!("{at}: schema is not an object"));
        for forbidden in [
            "$ref",
            "$defs",
            "definitions",
            "$schema",
            "anyOf",
            "oneOf",
            "allOf",
            "not",
        ] {
            assert!(
                !obj.contains_key(forbidden),
                "{at}: `{forbidden}` is not allowed in a CRD schema"
            );
        }
        let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        let ty = obj.get("type").and_then(Value::as_str);
        assert!(
            ty.is_some() || int_or_string,
            "{at}: every node needs a single `type`"
        );
        if let Some(format) = obj.get("format").and_then(Value::as_str) {
            // The API server warns on formats it does not know (e.g. schemars' `uint32`).
            let known = [
                "int32",
                "int64",
                "date-time",
                "byte",
                "date",
                "float",
                "double",
                "password",
            ];
            assert!(known.contains(&format), "{at}: unrecognized format {format}");
        }
        if obj.contains_key("properties") {
            assert_eq!(ty, Some("object"), "{at}: properties on a non-object");
        }
        if ty == Some("object")
            && !obj.contains_key("properties")
            && !obj.contains_key("additionalProperties")
        {
            assert!(
                preserve,
                "{at}: an object without properties must preserve unknown fields"
            );
        }
        if ty == Some("array") {
            visit(&schema["items"], &format!("{at}[]"));
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (name, sub) in props {
                visit(sub, &format!("{at}.{name}"));
            }
        }
        if let Some(extra) = obj.get("additionalProperties").filter(|v| v.is_object()) {
            visit(extra, &format!("{at}.*"));
        }
    }
    let crd = crd();
    visit(root_schema(&crd), "");
}

#[test]
fn optional_fields_are_nullable_and_required_ones_are_not() {
    let crd = crd();
    let spec = spec_schema(&crd);
    let p = &spec["properties"];
    for field in [
        "github",
        "gitea",
        "image",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "idleTimeoutSeconds",
    ] {
        assert_eq!(p[field]["nullable"], true, "spec.{field} should be nullable");
    }
    for field in ["forge", "maxRunners", "minRunners"] {
        assert!(
            p[field].get("nullable").is_none(),
            "spec.{field} should not be nullable"
        );
    }
    for field in ["runnerGroup", "scaleSetName", "caBundleConfigMap", "proxyUrl"] {
        assert_eq!(
            p["github"]["properties"][field]["nullable"], true,
            "spec.github.{field}"
        );
    }
    for field in ["org", "user", "repo", "pollIntervalSeconds", "webhookSecret"] {
        assert_eq!(
            p["gitea"]["properties"][field]["nullable"], true,
            "spec.gitea.{field}"
        );
    }
}

/// The template's schema is the pod template's, so a real API server refuses type errors at
/// `kubectl apply` (apiextensions-apiserver validates custom resources against the structural
/// schema); it does not require `containers`, which the forge's default pod brings.
#[test]
fn the_template_is_typed_and_conditions_are_a_map_list() {
    let crd = crd();
    let template = &spec_schema(&crd)["properties"]["template"];
    assert_eq!(template["type"], "object");
    assert!(template.get("x-kubernetes-preserve-unknown-fields").is_none());
    let pod = &template["properties"]["spec"];
    assert!(pod.get("required").is_none(), "{:?}", pod.get("required"));
    let container = &pod["properties"]["containers"]["items"];
    assert_eq!(container["properties"]["env"]["type"], "array");
    assert_eq!(
        container["properties"]["ports"]["items"]["properties"]["containerPort"]["type"],
        "integer"
    );
    assert_eq!(
        container["properties"]["resources"]["properties"]["limits"]["additionalProperties"]["x-kubernetes-int-or-string"],
        true
    );
    assert_eq!(
        template["properties"]["metadata"]["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["annotations".to_owned(), "labels".to_owned()])
    );
    let conditions = &root_schema(&crd)["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(strings(&conditions["x-kubernetes-list-map-keys"]), ["type"]);
}

#[test]
fn every_spec_field_is_documented() {
    // Embedded Kubernetes objects are documented by Kubernetes; their descriptions are left out
    // to keep the CRD small.
    const EMBEDDED: [&str; 2] = [
        "spec.template",
        "spec.containerMode.kubernetesModeWorkVolumeClaim",
    ];
    fn visit(schema: &Value, at: &str) {
        if let Some(props) = schema["properties"].as_object() {
            for (name, sub) in props {
                let path = format!("{at}.{name}");
                assert!(
                    sub["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{path} has no description"
                );
                if EMBEDDED.contains(&path.as_str()) {
                    continue;
                }
                visit(sub, &path);
            }
        }
    }
    let crd = crd();
    visit(spec_schema(&crd), "spec");
    visit(&root_schema(&crd)["properties"]["status"], "status");
}
