//! The rules of `spec.github` (`Forge::describe`), twins of the CRD schema's.

use forgerunner_core::crd::{GithubSpec, RunnerGroupSpec};
use forgerunner_core::runner_class::{ClassMatch, Wanted, group_label_names, wanted};
use forgerunner_core::validate::{
    CLASSES_FIELD, MAX_FORGE_NAME_LEN, MAX_LABEL_LEN, MAX_LABELS, SpecViolation, chars, check_length,
    is_http_url, is_object_name, violation,
};

use crate::forge::class_scale_set_name;

/// The rules of `spec.github`; empty when valid.
pub fn validate_github(gh: &GithubSpec) -> Vec<SpecViolation> {
    let mut out = Vec::new();
    let out = &mut out;
    let max = MAX_FORGE_NAME_LEN;
    out.extend(check_length(
        "spec.github.runnerGroup",
        gh.runner_group.as_deref(),
        max,
    ));
    out.extend(check_length(
        "spec.github.scaleSetName",
        gh.scale_set_name.as_deref(),
        max,
    ));
    if !is_http_url(&gh.config_url) {
        out.push(violation(
            "spec.github.configUrl",
            "must be an http:// or https:// URL with a host, e.g. https://github.com/my-org",
        ));
    }
    if !is_object_name(&gh.credentials) {
        out.push(violation(
            "spec.github.credentials",
            "must name a Secret in the group's namespace",
        ));
    }
    if gh.proxy_url.as_deref().is_some_and(|u| !is_http_url(u)) {
        out.push(violation(
            "spec.github.proxyUrl",
            "must be an http:// or https:// URL with a host",
        ));
    }
    if gh
        .ca_bundle_config_map
        .as_deref()
        .is_some_and(|n| !is_object_name(n))
    {
        out.push(violation(
            "spec.github.caBundleConfigMap",
            "must name a ConfigMap in the group's namespace",
        ));
    }
    if gh.labels.len() > MAX_LABELS {
        out.push(violation(
            "spec.github.labels",
            format!("must list at most {MAX_LABELS} labels"),
        ));
    }
    if let Some(bad) = gh.labels.iter().find(|l| l.is_empty() || l.len() > MAX_LABEL_LEN) {
        out.push(violation(
            "spec.github.labels",
            format!("label {bad:?} must be 1 to {MAX_LABEL_LEN} characters"),
        ));
    }
    std::mem::take(out)
}

/// GitHub's rules of `spec.classes` (core checks the common ones): each class is a scale set
/// named `<scale set name>-<class>` ([`class_scale_set_name`]), whose labels are plain names
/// (the `name:scheme` form is Gitea's and Forgejo's), and whose waiting jobs are reported with
/// the class's labels: core's choice must give exactly that class for them, so a class whose
/// labels are all an earlier class's or the group's is refused.
pub fn validate_classes(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    let mut out = Vec::new();
    let Some(gh) = spec.github.as_ref().filter(|_| !spec.classes.is_empty()) else {
        return out;
    };
    // The group's name stands in when no scale set name is given; a group name is short.
    let base = gh.scale_set_name.as_deref().map(str::trim).unwrap_or_default();
    let matches = ClassMatch::of(spec);
    let group = group_label_names(spec);
    for (i, class) in spec.classes.iter().enumerate() {
        let name = &class.name;
        if let Some(l) = class.labels.iter().find(|l| l.contains(':')) {
            out.push(violation(
                CLASSES_FIELD,
                format!("class {name}: label {l:?}: GitHub labels are plain names, without a ':scheme'"),
            ));
        }
        let set = class_scale_set_name(base, name);
        if chars(&set) > MAX_FORGE_NAME_LEN {
            out.push(violation(
                CLASSES_FIELD,
                format!(
                    "class {name}: its scale set name {set:?} must be at most {MAX_FORGE_NAME_LEN} \
                     characters; shorten spec.github.scaleSetName or the class name"
                ),
            ));
        }
        let labels: Vec<&String> = matches[i].labels.iter().collect();
        if let Wanted::Class(j) = wanted(&matches, &group, &labels)
            && j != i
        {
            out.push(violation(
                CLASSES_FIELD,
                format!(
                    "class {name}: its labels are all labels of class {} or of spec.github.labels, \
                     so the jobs of its scale set would get runners of class {}; give it a label \
                     of its own",
                    spec.classes[j].name, spec.classes[j].name
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use forgerunner_core::crd::RunnerGroupSpec;
    use forgerunner_core::validate::validate_spec;

    use super::*;

    fn github() -> RunnerGroupSpec {
        serde_json::from_value(serde_json::json!({
            "forge": "github", "maxRunners": 5,
            "github": {"configUrl": "https://github.com/my-org", "credentials": "github-pat"}
        }))
        .expect("spec")
    }

    fn gh(spec: &mut RunnerGroupSpec) -> &mut GithubSpec {
        spec.github.as_mut().expect("github block")
    }

    /// The fields named by the violations of the whole spec, in order.
    fn fields(spec: &RunnerGroupSpec) -> Vec<&'static str> {
        let mut v = validate_spec(spec);
        if let Some(gh) = &spec.github {
            v.extend(validate_github(gh));
        }
        v.into_iter().map(|v| v.field).collect()
    }

    #[test]
    fn names_have_the_schemas_max_length() {
        let long = |n: usize| Some("é".repeat(n));
        let mut s = github();
        // Characters, as the API server counts them, not bytes: 255 two-byte characters pass.
        gh(&mut s).runner_group = long(MAX_FORGE_NAME_LEN);
        gh(&mut s).scale_set_name = long(MAX_FORGE_NAME_LEN);
        assert!(fields(&s).is_empty());
        gh(&mut s).runner_group = long(MAX_FORGE_NAME_LEN + 1);
        gh(&mut s).scale_set_name = long(MAX_FORGE_NAME_LEN + 1);
        assert_eq!(
            fields(&s),
            ["spec.github.runnerGroup", "spec.github.scaleSetName"]
        );
    }

    #[test]
    fn github_urls() {
        for bad in [
            "github.com/my-org",
            "ftp://github.com/x",
            "https://",
            "https:///path",
            "",
        ] {
            let mut s = github();
            gh(&mut s).config_url = bad.into();
            assert_eq!(fields(&s), ["spec.github.configUrl"], "{bad:?}");
        }
        for good in [
            "http://ghes.local/org",
            "https://github.example.com/enterprises/e",
            "https://github.com/o/r",
        ] {
            let mut s = github();
            gh(&mut s).config_url = good.into();
            assert!(fields(&s).is_empty(), "{good:?}");
        }
        let mut s = github();
        gh(&mut s).config_url = format!("https://github.com/{}", "a".repeat(2048));
        assert_eq!(fields(&s), ["spec.github.configUrl"]);
    }

    #[test]
    fn github_proxy_and_ca_bundle() {
        let mut s = github();
        gh(&mut s).proxy_url = Some("proxy:3128".into());
        gh(&mut s).ca_bundle_config_map = Some("Bad_Name".into());
        assert_eq!(
            fields(&s),
            ["spec.github.proxyUrl", "spec.github.caBundleConfigMap"]
        );
        gh(&mut s).proxy_url = Some("http://proxy.internal:3128".into());
        gh(&mut s).ca_bundle_config_map = Some("corp-ca".into());
        assert!(fields(&s).is_empty());
    }

    #[test]
    fn github_labels() {
        let mut s = github();
        gh(&mut s).labels = vec!["linux".into(), String::new()];
        assert_eq!(fields(&s), ["spec.github.labels"]);
        gh(&mut s).labels = (0..65).map(|i| format!("l{i}")).collect();
        assert_eq!(fields(&s), ["spec.github.labels"]);
    }

    #[test]
    fn credentials_must_be_a_secret_name() {
        for bad in ["", "Upper", "-lead", "trail-", "under_score", "a..b"] {
            let mut s = github();
            gh(&mut s).credentials = bad.into();
            assert_eq!(fields(&s), ["spec.github.credentials"], "{bad:?}");
        }
    }

    fn class_messages(spec: &RunnerGroupSpec) -> Vec<String> {
        let mut v = validate_spec(spec);
        v.extend(validate_classes(spec));
        assert!(v.iter().all(|v| v.field == CLASSES_FIELD), "{v:?}");
        v.into_iter().map(|v| v.message).collect()
    }

    fn with_classes(classes: serde_json::Value) -> RunnerGroupSpec {
        let mut s = github();
        s.classes = serde_json::from_value(classes).expect("classes");
        s
    }

    #[test]
    fn classes_with_labels_of_their_own_pass() {
        let mut s = with_classes(serde_json::json!([
            {"name": "small", "labels": ["linux"]},
            {"name": "large", "labels": ["linux", "large"], "maxRunners": 2}
        ]));
        gh(&mut s).labels = vec!["self-hosted".into()];
        assert_eq!(class_messages(&s), Vec::<String>::new());
    }

    #[test]
    fn class_labels_have_no_scheme_on_github() {
        let s = with_classes(serde_json::json!([{"name": "large", "labels": ["large:host"]}]));
        let m = class_messages(&s);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].contains("plain names"), "{m:?}");
    }

    #[test]
    fn a_class_whose_jobs_would_count_as_another_classes_is_refused() {
        // `large` asks only for what `small` and the group have: core would give the jobs of
        // large's scale set small runners, which cannot take them.
        let mut s = with_classes(serde_json::json!([
            {"name": "small", "labels": ["linux", "x64"]},
            {"name": "large", "labels": ["linux", "gpu"]}
        ]));
        gh(&mut s).labels = vec!["gpu".into()];
        let m = class_messages(&s);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with("class large: its labels are all labels of class small"),
            "{m:?}"
        );
        gh(&mut s).labels.clear();
        assert_eq!(class_messages(&s), Vec::<String>::new());
    }

    #[test]
    fn a_class_scale_set_name_fits_githubs_length() {
        let mut s = with_classes(serde_json::json!([{"name": "large", "labels": ["large"]}]));
        gh(&mut s).scale_set_name = Some("s".repeat(MAX_FORGE_NAME_LEN - "-large".len()));
        assert_eq!(class_messages(&s), Vec::<String>::new());
        gh(&mut s).scale_set_name = Some("s".repeat(MAX_FORGE_NAME_LEN - "-large".len() + 1));
        let m = class_messages(&s);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].contains("shorten spec.github.scaleSetName"), "{m:?}");
    }
}
