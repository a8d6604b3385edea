//! The rules `spec.gitea` and `spec.forgejo` share, one function per rule.
//!
//! Forgejo is a fork of Gitea and the two blocks have the same fields with the same meaning, so
//! the CRD schema gives both the same CEL rules and messages, and the reconciler's twins of those
//! rules must agree with them in both blocks alike. Written once, a fix to a rule or its message
//! reaches both forges, and each block spells out only what is its own (Gitea's webhook Secret,
//! Forgejo's label forms). Each rule takes the block's [`BlockFields`], because a violation names
//! its field as a `&'static str`, and pushes onto the block's list, because the order of the
//! violations is the order users read them in, and each block decides it.

use forgerunner_core::crd::{ContainerModeType, GiteaScope, RunnerGroupSpec};
use forgerunner_core::validate::{
    MAX_FORGE_NAME_LEN, MAX_LABELS, MAX_REPO_LEN, SpecViolation, check_length, is_http_url, is_object_name,
    violation,
};

/// The JSON paths of a Gitea-family block's fields, which its violations name. Built by
/// [`block_fields!`](crate::block_fields) from the forge's name, so that a block's rules cannot
/// name a field of the other block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockFields {
    /// `spec.<forge>`: named when the block is missing, and what the paths below start with.
    pub block: &'static str,
    /// An instance URL for the example in the `url` message, so that it looks like the user's forge.
    pub example_url: &'static str,
    /// `url`: where every call and every runner goes.
    pub url: &'static str,
    /// `org`: the organization of `scope: org`.
    pub org: &'static str,
    /// `user`: the user of `scope: user`.
    pub user: &'static str,
    /// `repo`: the `owner/name` of `scope: repo`.
    pub repo: &'static str,
    /// `credentials`: the Secret with the API token.
    pub credentials: &'static str,
    /// `labels`: what the runners offer, and so which jobs the group serves.
    pub labels: &'static str,
    /// `pollIntervalSeconds`: how often the operator asks for waiting jobs.
    pub poll_interval_seconds: &'static str,
    /// `proxyUrl`: the proxy of the operator's calls and the runner pods.
    pub proxy_url: &'static str,
    /// `caBundleConfigMap`: the ConfigMap with extra trusted CA certificates.
    pub ca_bundle_config_map: &'static str,
}

/// The [`BlockFields`](crate::spec_rules::BlockFields) of `spec.<forge>`, e.g.
/// `block_fields!("gitea")`. A macro because the paths must be `&'static str`, and `concat!` is
/// what builds those at compile time from the one name.
#[macro_export]
macro_rules! block_fields {
    ($forge:literal) => {
        $crate::spec_rules::BlockFields {
            block: concat!("spec.", $forge),
            example_url: concat!("https://", $forge, ".example.com"),
            url: concat!("spec.", $forge, ".url"),
            org: concat!("spec.", $forge, ".org"),
            user: concat!("spec.", $forge, ".user"),
            repo: concat!("spec.", $forge, ".repo"),
            credentials: concat!("spec.", $forge, ".credentials"),
            labels: concat!("spec.", $forge, ".labels"),
            poll_interval_seconds: concat!("spec.", $forge, ".pollIntervalSeconds"),
            proxy_url: concat!("spec.", $forge, ".proxyUrl"),
            ca_bundle_config_map: concat!("spec.", $forge, ".caBundleConfigMap"),
        }
    };
}

/// `org`, `user` and `repo` no longer than the schema's `maxLength`, counted as the API server
/// counts (characters): a longer name could never exist on the forge, so the group could never
/// register a runner.
pub fn check_name_lengths(
    f: &BlockFields,
    org: Option<&str>,
    user: Option<&str>,
    repo: Option<&str>,
    out: &mut Vec<SpecViolation>,
) {
    out.extend(check_length(f.org, org, MAX_FORGE_NAME_LEN));
    out.extend(check_length(f.user, user, MAX_FORGE_NAME_LEN));
    out.extend(check_length(f.repo, repo, MAX_REPO_LEN));
}

/// `url` an http(s) URL with a host, like the CEL rule: anything else cannot be called, and the
/// message shows the form with an instance of the user's forge.
pub fn check_url(f: &BlockFields, url: &str, out: &mut Vec<SpecViolation>) {
    if !is_http_url(url) {
        out.push(violation(
            f.url,
            format!(
                "must be an http:// or https:// URL with a host, e.g. {}",
                f.example_url
            ),
        ));
    }
}

/// `credentials` a Secret name: the operator reads the token from it, and a name Kubernetes
/// cannot hold would only fail later, at every pass, as a missing Secret.
pub fn check_credentials(f: &BlockFields, credentials: &str, out: &mut Vec<SpecViolation>) {
    if !is_object_name(credentials) {
        out.push(violation(
            f.credentials,
            "must name a Secret in the group's namespace",
        ));
    }
}

/// `proxyUrl`, when set, an http(s) URL with a host (the same rule and message as
/// `spec.github.proxyUrl`): every client of the group is built with it, so a bad one would stop
/// all calls.
pub fn check_proxy_url(f: &BlockFields, proxy_url: Option<&str>, out: &mut Vec<SpecViolation>) {
    if proxy_url.is_some_and(|u| !is_http_url(u)) {
        out.push(violation(
            f.proxy_url,
            "must be an http:// or https:// URL with a host",
        ));
    }
}

/// `caBundleConfigMap`, when set, a ConfigMap name (the same rule and message as
/// `spec.github.caBundleConfigMap`): the operator and the runner pods read the bundle from it.
pub fn check_ca_bundle_config_map(f: &BlockFields, name: Option<&str>, out: &mut Vec<SpecViolation>) {
    if name.is_some_and(|n| !is_object_name(n)) {
        out.push(violation(
            f.ca_bundle_config_map,
            "must name a ConfigMap in the group's namespace",
        ));
    }
}

/// `pollIntervalSeconds` at least 1: 0 would poll the forge without pause.
pub fn check_poll_interval(f: &BlockFields, seconds: Option<u32>, out: &mut Vec<SpecViolation>) {
    if seconds == Some(0) {
        out.push(violation(
            f.poll_interval_seconds,
            "must be at least 1 (or unset for the default 5)",
        ));
    }
}

/// Between 1 and [`MAX_LABELS`] labels: a runner without labels takes no job, and the schema
/// caps the list.
pub fn check_label_count(f: &BlockFields, labels: &[String], out: &mut Vec<SpecViolation>) {
    if labels.is_empty() {
        out.push(violation(f.labels, "must list at least one label"));
    } else if labels.len() > MAX_LABELS {
        out.push(violation(
            f.labels,
            format!("must list at most {MAX_LABELS} labels"),
        ));
    }
}

/// The first label that is not `valid` in the forge's runner, named with the `forms` the runner
/// takes: the runner refuses the whole list for one bad label, so one is enough to fix first.
/// Returns whether all are valid, so that the rules that need well-formed labels run only then.
pub fn check_label_forms(
    f: &BlockFields,
    labels: &[String],
    valid: impl Fn(&str) -> bool,
    forms: &str,
    out: &mut Vec<SpecViolation>,
) -> bool {
    let Some(bad) = labels.iter().find(|l| !valid(l)) else {
        return true;
    };
    out.push(violation(f.labels, format!("label {bad:?} must be {forms}")));
    false
}

/// The name `scope` needs (`org`, `user`, or `repo`), and `repo` of the form `owner/name`
/// whatever the scope: the forge's API paths are built from them.
pub fn check_scope(
    f: &BlockFields,
    scope: GiteaScope,
    org: Option<&str>,
    user: Option<&str>,
    repo: Option<&str>,
    out: &mut Vec<SpecViolation>,
) {
    let empty = |v: Option<&str>| v.is_none_or(str::is_empty);
    match scope {
        GiteaScope::Org if empty(org) => {
            out.push(violation(f.org, "is required when scope is org"));
        }
        GiteaScope::User if empty(user) => {
            out.push(violation(f.user, "is required when scope is user"));
        }
        GiteaScope::Repo if repo.is_none() => {
            out.push(violation(f.repo, "is required as owner/name when scope is repo"));
        }
        _ => {}
    }
    let owner_name = |r: &str| {
        r.split_once('/')
            .is_some_and(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
    };
    if repo.is_some_and(|r| !owner_name(r)) {
        out.push(violation(f.repo, "must be owner/name"));
    }
}

/// `spec.containerMode`: both forges' runners run job containers through a Docker daemon, so
/// `dind` (or no mode) works; the `kubernetes` modes need GitHub's runner container hooks, which
/// neither runner has.
pub fn check_container_mode(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    forgerunner_core::validate::check_container_mode(
        spec,
        &[ContainerModeType::Dind],
        "the kubernetes modes need GitHub's runner container hooks",
    )
    .into_iter()
    .collect()
}

/// One `#[test]` per table of [`testing::Harness`] (feature `testing`), for the block of
/// `$harness` (an expression evaluated in each test): both forges run every table under the same
/// name, so neither can leave one out.
#[cfg(any(test, feature = "testing"))]
#[macro_export]
macro_rules! block_rule_tests {
    ($harness:expr) => {
        $crate::block_rule_tests!(@tables $harness;
            names_have_the_schemas_max_length,
            valid_spec_and_block_choice,
            url_must_be_http,
            credentials_must_be_a_secret_name,
            proxy_and_ca_bundle,
            poll_interval_is_at_least_one,
            label_count,
            label_forms,
            scope_needs_its_name
        );
    };
    (@tables $harness:expr; $($table:ident),*) => {
        $(
            #[test]
            fn $table() {
                $harness.$table();
            }
        )*
    };
}

/// The container mode tests of [`testing::Harness`] (feature `testing`) for `$forge` (its
/// `validate`), one `#[test]` each: `$no_mode` are labels valid with no mode, `$kubernetes`
/// labels whose only violation in a `kubernetes` mode is the mode. A forge may refuse docker
/// labels for other reasons, which is why it picks them.
#[cfg(any(test, feature = "testing"))]
#[macro_export]
macro_rules! container_mode_tests {
    ($harness:expr, $forge:expr, no_mode: $no_mode:expr, kubernetes: $kubernetes:expr $(,)?) => {
        #[test]
        fn dind_and_no_mode_are_valid() {
            $harness.dind_and_no_mode_are_valid(&$forge, $no_mode);
        }

        #[test]
        fn kubernetes_modes_are_rejected_naming_the_field() {
            $harness.kubernetes_modes_are_rejected_naming_the_field(&$forge, $kubernetes);
        }

        #[test]
        fn a_kubernetes_mode_makes_the_group_not_ready_with_invalid_spec() {
            $harness.a_kubernetes_mode_makes_the_group_not_ready_with_invalid_spec(&$forge);
        }
    };
}

/// The tables both blocks' rules must pass (feature `testing`): the same cases under each
/// block's field names, so that the twins cannot drift apart in one forge's tests only.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use forgerunner_core::RunnerGroup;
    use forgerunner_core::conditions::{ConditionStatus, ConditionType};
    use forgerunner_core::crd::{ContainerMode, ContainerModeType, RunnerGroupSpec};
    use forgerunner_core::error::ErrorCategory;
    use forgerunner_core::forge::Forge;
    use forgerunner_core::reconcile::pipeline::check_spec;
    use forgerunner_core::reconcile::status::error_conditions;
    use forgerunner_core::validate::{
        MAX_FORGE_NAME_LEN, MAX_LABELS, MAX_REPO_LEN, SpecViolation, validate_spec,
    };
    use serde_json::{Value, json};

    use super::BlockFields;

    /// A label every table's spec can keep: valid in both forges' runners.
    const DOCKER_LABEL: &str = "ubuntu-latest:docker://node:22";

    /// One forge's block under the shared tables: what the tables cannot know about it.
    #[derive(Clone, Copy)]
    pub struct Harness {
        /// The block's field paths; the block's name is also its JSON key.
        pub fields: BlockFields,
        /// The labels of the valid spec every table starts from, so that a forge can start from
        /// the label set its users write.
        pub labels: &'static [&'static str],
        /// Labels this forge's runner takes beyond those both take, so that the label table also
        /// covers the forge's own forms.
        pub more_good_labels: &'static [&'static str],
        /// The block's rules on a spec (`None` without the block): only those, because the
        /// forge's other rules (container mode, Forgejo's Docker daemon) would add violations
        /// the tables do not expect.
        pub block_rules: fn(&RunnerGroupSpec) -> Option<Vec<SpecViolation>>,
    }

    impl Harness {
        /// A harness for the block of `fields` with `block_rules`, starting from a docker and a
        /// host label, which both forges take.
        pub fn new(
            fields: BlockFields,
            block_rules: fn(&RunnerGroupSpec) -> Option<Vec<SpecViolation>>,
        ) -> Self {
            Self {
                fields,
                labels: &["ubuntu-latest:docker://node:20-bookworm", "self-hosted:host"],
                more_good_labels: &[],
                block_rules,
            }
        }

        fn key(&self) -> &'static str {
            self.fields
                .block
                .strip_prefix("spec.")
                .expect("a block path is spec.<forge>")
        }

        /// The valid spec (scope `repo`) as JSON, with `changes` (a field's JSON name and its
        /// value, `null` to unset it) made to the block: JSON, so that one table serves both
        /// blocks' types.
        pub fn json(&self, changes: &[(&str, Value)]) -> Value {
            let key = self.key();
            let mut spec = json!({"forge": key, "maxRunners": 5});
            spec[key] = json!({
                "url": format!("https://{key}.example.com"), "scope": "repo", "repo": "alice/app",
                "credentials": format!("{key}-token"), "labels": self.labels,
            });
            for (name, value) in changes {
                spec[key][*name] = value.clone();
            }
            spec
        }

        /// [`Self::json`] as a spec.
        pub fn spec(&self, changes: &[(&str, Value)]) -> RunnerGroupSpec {
            serde_json::from_value(self.json(changes)).expect("spec")
        }

        /// The valid spec with `labels` in container mode `mode`, for the container mode rules.
        pub fn in_mode(&self, mode: Option<ContainerModeType>, labels: &[&str]) -> RunnerGroupSpec {
            let mut s = self.spec(&[("labels", json!(labels))]);
            s.container_mode = mode.map(|type_| ContainerMode {
                type_,
                kubernetes_mode_work_volume_claim: None,
            });
            s
        }

        /// The violations of the common rules and the block's, in the order the reconciler
        /// reports them.
        pub fn violations(&self, spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
            let mut v = validate_spec(spec);
            v.extend((self.block_rules)(spec).unwrap_or_default());
            v
        }

        /// The fields the violations of the valid spec with `changes` name, in order.
        pub fn fields_with(&self, changes: &[(&str, Value)]) -> Vec<&'static str> {
            let spec = self.spec(changes);
            self.violations(&spec).into_iter().map(|v| v.field).collect()
        }

        /// Names longer than the schema allows are refused, in the order org, user, repo.
        pub fn names_have_the_schemas_max_length(&self) {
            let long = "é".repeat(MAX_FORGE_NAME_LEN + 1);
            let repo = format!("o/{}", "r".repeat(MAX_REPO_LEN - 1));
            let f = &self.fields;
            assert_eq!(
                self.fields_with(&[("org", json!(long)), ("user", json!(long)), ("repo", json!(repo))]),
                [f.org, f.user, f.repo]
            );
        }

        /// The valid spec has no violation; without its block, the block is named.
        pub fn valid_spec_and_block_choice(&self) {
            assert!(self.fields_with(&[]).is_empty());
            let mut json = self.json(&[]);
            json[self.key()] = Value::Null;
            let spec: RunnerGroupSpec = serde_json::from_value(json).expect("spec");
            let fields: Vec<_> = self.violations(&spec).into_iter().map(|v| v.field).collect();
            assert_eq!(fields, [self.fields.block]);
        }

        /// `url` needs a scheme; the violation's text starts with the field.
        pub fn url_must_be_http(&self) {
            let url = self.fields.url;
            let host = self.fields.example_url.trim_start_matches("https://");
            assert_eq!(self.fields_with(&[("url", json!(host))]), [url]);
            let text = self.violations(&self.spec(&[("url", json!("nope"))]))[0].to_string();
            assert!(text.starts_with(&format!("{url}: ")), "{text}");
            assert!(
                self.fields_with(&[("url", json!("https://code.example.com/sub"))])
                    .is_empty()
            );
        }

        /// `credentials` must be a DNS-1123 subdomain.
        pub fn credentials_must_be_a_secret_name(&self) {
            let field = self.fields.credentials;
            for bad in [
                "",
                "Upper",
                "-lead",
                "trail-",
                "under_score",
                "a..b",
                "Not_A_Name",
            ] {
                assert_eq!(
                    self.fields_with(&[("credentials", json!(bad))]),
                    [field],
                    "{bad:?}"
                );
            }
            let v = self.violations(&self.spec(&[("credentials", json!("a".repeat(254)))]));
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!(v[0].field, field);
            assert_eq!(v[0].message, "must name a Secret in the group's namespace");
            for good in ["gitea.token-1", "creds"] {
                assert!(
                    self.fields_with(&[("credentials", json!(good))]).is_empty(),
                    "{good:?}"
                );
            }
        }

        /// A bad proxy URL and a bad ConfigMap name are refused, in that order; good ones pass.
        pub fn proxy_and_ca_bundle(&self) {
            let f = &self.fields;
            let bad = [
                ("proxyUrl", json!("proxy:3128")),
                ("caBundleConfigMap", json!("Bad_Name")),
            ];
            assert_eq!(self.fields_with(&bad), [f.proxy_url, f.ca_bundle_config_map]);
            let good = [
                ("proxyUrl", json!("http://proxy.corp:3128")),
                ("caBundleConfigMap", json!("corp-ca")),
            ];
            assert!(self.fields_with(&good).is_empty());
        }

        /// A poll interval of 0 is refused, 1 passes.
        pub fn poll_interval_is_at_least_one(&self) {
            let seconds = |s: u32| self.fields_with(&[("pollIntervalSeconds", json!(s))]);
            assert_eq!(seconds(0), [self.fields.poll_interval_seconds]);
            assert!(seconds(1).is_empty());
        }

        /// At least one label and at most the schema's number.
        pub fn label_count(&self) {
            let field = self.fields.labels;
            assert_eq!(self.fields_with(&[("labels", json!([]))]), [field]);
            let many: Vec<String> = (0..=MAX_LABELS).map(|i| format!("l{i}:host")).collect();
            let v = self.violations(&self.spec(&[("labels", json!(many))]));
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!(v[0].field, field);
            assert_eq!(v[0].message, format!("must list at most {MAX_LABELS} labels"));
            assert!(
                self.fields_with(&[("labels", json!(many[..MAX_LABELS]))])
                    .is_empty()
            );
        }

        /// The label forms both runners take pass (and the forge's own); malformed labels are
        /// refused one violation each, quoting the label.
        pub fn label_forms(&self) {
            let good = [
                "ubuntu-latest",
                "linux:host",
                DOCKER_LABEL,
                "ubuntu-22.04:docker://ghcr.io/catthehacker/ubuntu:act-22.04",
            ];
            for good in good.iter().chain(self.more_good_labels) {
                assert!(
                    self.fields_with(&[("labels", json!([good]))]).is_empty(),
                    "{good:?}"
                );
            }
            let bad = [
                "",
                ":host",
                "a:vm",
                "a:docker://",
                "a:docker:image",
                "a,b",
                "a b",
                "a::host",
                "a:host://x",
            ];
            for bad in bad {
                let v = self.violations(&self.spec(&[("labels", json!([bad]))]));
                assert_eq!(v.len(), 1, "{bad:?}: {v:?}");
                assert_eq!(v[0].field, self.fields.labels);
                let quoted = format!("{bad:?}");
                assert!(v[0].message.contains(&quoted), "{bad:?}: {}", v[0].message);
            }
        }

        /// Each scope needs its name (an empty one counts as missing), `repo` must be
        /// `owner/name`, and `global` needs nothing.
        pub fn scope_needs_its_name(&self) {
            let f = &self.fields;
            let scope = |s: &str| ("scope", json!(s));
            assert_eq!(self.fields_with(&[scope("org")]), [f.org]);
            assert_eq!(self.fields_with(&[scope("org"), ("org", json!(""))]), [f.org]);
            assert!(
                self.fields_with(&[scope("org"), ("org", json!("acme"))])
                    .is_empty()
            );
            assert_eq!(self.fields_with(&[scope("user")]), [f.user]);
            assert!(
                self.fields_with(&[scope("user"), ("user", json!("alice"))])
                    .is_empty()
            );
            assert_eq!(self.fields_with(&[("repo", Value::Null)]), [f.repo]);
            for bad in ["app", "/app", "alice/", "alice/app/x", ""] {
                assert_eq!(self.fields_with(&[("repo", json!(bad))]), [f.repo], "{bad:?}");
            }
            assert!(
                self.fields_with(&[scope("global"), ("repo", Value::Null)])
                    .is_empty()
            );
        }

        /// With the url, credentials, poll interval, proxy and CA bundle all wrong, and the
        /// forge's own `more` changes, the violations name `order`: each forge runs its rules in
        /// its own order, which users see. With those five right again, nothing is wrong.
        pub fn every_setting_wrong(&self, more: &[(&str, Value)], order: &[&str]) {
            let mut bad = vec![
                ("url", json!("code.example.com")),
                ("credentials", json!("Not_A_Name")),
                ("pollIntervalSeconds", json!(0)),
                ("proxyUrl", json!("proxy:3128")),
                ("caBundleConfigMap", json!("Bad_Name")),
            ];
            bad.extend(more.iter().cloned());
            let v = self.violations(&self.spec(&bad));
            assert_eq!(v.iter().map(|v| v.field).collect::<Vec<_>>(), order);
            assert_eq!(v[1].message, "must name a Secret in the group's namespace");
            let good = [
                ("url", json!("https://code.example.com/sub")),
                ("credentials", json!("creds")),
                ("pollIntervalSeconds", json!(1)),
                ("proxyUrl", json!("http://proxy.internal:3128")),
                ("caBundleConfigMap", json!("corp-ca")),
            ];
            assert!(self.fields_with(&good).is_empty());
        }

        /// What `forge` refuses in `spec` (nothing when it describes it).
        fn refused(forge: &dyn Forge, spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
            forge.describe(spec).err().unwrap_or_default()
        }

        /// `dind` and no mode pass the forge's rules (`forge.describe`); with no mode the group
        /// has `no_mode_labels`, since a forge may need a daemon for docker labels.
        pub fn dind_and_no_mode_are_valid(&self, forge: &dyn Forge, no_mode_labels: &[&str]) {
            assert_eq!(
                Self::refused(
                    forge,
                    &self.in_mode(Some(ContainerModeType::Dind), &[DOCKER_LABEL])
                ),
                []
            );
            assert_eq!(Self::refused(forge, &self.in_mode(None, no_mode_labels)), []);
        }

        /// Each `kubernetes` mode is the one violation of a group with `labels`, naming the
        /// field and the modes the forge's runners support.
        pub fn kubernetes_modes_are_rejected_naming_the_field(&self, forge: &dyn Forge, labels: &[&str]) {
            for mode in [
                ContainerModeType::Kubernetes,
                ContainerModeType::KubernetesNoVolume,
            ] {
                let v = Self::refused(forge, &self.in_mode(Some(mode), labels));
                assert_eq!(v.len(), 1, "{mode:?}: {v:?}");
                assert_eq!(v[0].field, "spec.containerMode.type");
                assert_eq!(
                    v[0].message,
                    format!(
                        "the kubernetes modes need GitHub's runner container hooks; {} runners support dind \
                         or no mode",
                        self.key()
                    )
                );
            }
        }

        /// A `kubernetes` mode makes the group not ready with reason `InvalidSpec`; `dind` fixes it.
        pub fn a_kubernetes_mode_makes_the_group_not_ready_with_invalid_spec(&self, forge: &dyn Forge) {
            assert_not_ready_with_invalid_spec(
                forge,
                self.in_mode(Some(ContainerModeType::Kubernetes), &[DOCKER_LABEL]),
                self.in_mode(Some(ContainerModeType::Dind), &[DOCKER_LABEL]),
                &["spec.containerMode.type"],
            );
        }
    }

    /// `invalid` makes a group `Ready=False` with reason `InvalidSpec` and a message that says
    /// each of `says`, and `fixed` passes: what a user sees of a rule is the condition, not the
    /// violation.
    pub fn assert_not_ready_with_invalid_spec(
        forge: &dyn Forge,
        invalid: RunnerGroupSpec,
        fixed: RunnerGroupSpec,
        says: &[&str],
    ) {
        let mut group = RunnerGroup::new("g", invalid);
        group.metadata.namespace = Some("ci".into());
        let err = check_spec(&group, Some(forge)).expect_err("invalid spec");
        assert_eq!(err.category(), ErrorCategory::InvalidSpec);
        let conditions = error_conditions(err.category(), &err.to_string());
        let ready = conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Ready)
            .expect("Ready");
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason.as_str(), "InvalidSpec");
        for part in says {
            assert!(
                ready.message.contains(part),
                "{part:?} missing from {}",
                ready.message
            );
        }
        group.spec = fixed;
        assert!(check_spec(&group, Some(forge)).is_ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: BlockFields = crate::block_fields!("gitea");

    fn run(rule: impl FnOnce(&mut Vec<SpecViolation>)) -> Vec<SpecViolation> {
        let mut out = Vec::new();
        rule(&mut out);
        out
    }

    #[test]
    fn the_macro_spells_the_schemas_paths() {
        let f = crate::block_fields!("forgejo");
        assert_eq!(
            [
                f.block,
                f.example_url,
                f.url,
                f.org,
                f.user,
                f.repo,
                f.credentials,
                f.labels
            ],
            [
                "spec.forgejo",
                "https://forgejo.example.com",
                "spec.forgejo.url",
                "spec.forgejo.org",
                "spec.forgejo.user",
                "spec.forgejo.repo",
                "spec.forgejo.credentials",
                "spec.forgejo.labels"
            ]
        );
        assert_eq!(
            [f.poll_interval_seconds, f.proxy_url, f.ca_bundle_config_map],
            [
                "spec.forgejo.pollIntervalSeconds",
                "spec.forgejo.proxyUrl",
                "spec.forgejo.caBundleConfigMap"
            ]
        );
    }

    /// The messages are the users' and the CRD's: each rule's, word for word.
    #[test]
    fn each_rule_says_what_it_always_said() {
        let long = "x".repeat(MAX_REPO_LEN + 1);
        assert_eq!(
            run(|o| check_name_lengths(&F, Some(&long), Some(&long), Some(&long), o)),
            [
                violation("spec.gitea.org", "must be at most 255 characters"),
                violation("spec.gitea.user", "must be at most 255 characters"),
                violation("spec.gitea.repo", "must be at most 512 characters"),
            ]
        );
        assert_eq!(
            run(|o| check_url(&F, "gitea", o)),
            [violation(
                "spec.gitea.url",
                "must be an http:// or https:// URL with a host, e.g. https://gitea.example.com"
            )]
        );
        assert_eq!(
            run(|o| check_credentials(&F, "A", o)),
            [violation(
                "spec.gitea.credentials",
                "must name a Secret in the group's namespace"
            )]
        );
        assert_eq!(
            run(|o| check_proxy_url(&F, Some("p:1"), o)),
            [violation(
                "spec.gitea.proxyUrl",
                "must be an http:// or https:// URL with a host"
            )]
        );
        assert_eq!(
            run(|o| check_ca_bundle_config_map(&F, Some("A"), o)),
            [violation(
                "spec.gitea.caBundleConfigMap",
                "must name a ConfigMap in the group's namespace"
            )]
        );
        assert_eq!(
            run(|o| check_poll_interval(&F, Some(0), o)),
            [violation(
                "spec.gitea.pollIntervalSeconds",
                "must be at least 1 (or unset for the default 5)"
            )]
        );
        assert_eq!(
            run(|o| check_label_count(&F, &[], o)),
            [violation("spec.gitea.labels", "must list at least one label")]
        );
        let many = vec![String::from("a"); MAX_LABELS + 1];
        assert_eq!(
            run(|o| check_label_count(&F, &many, o)),
            [violation("spec.gitea.labels", "must list at most 64 labels")]
        );
        let labels = [String::from("ok"), String::from("no"), String::from("nope")];
        let mut all_valid = true;
        assert_eq!(
            run(|o| all_valid = check_label_forms(&F, &labels, |l| l == "ok", "ok", o)),
            [violation("spec.gitea.labels", "label \"no\" must be ok")]
        );
        assert!(!all_valid);
        assert!(run(|o| assert!(check_label_forms(&F, &labels[..1], |l| l == "ok", "ok", o))).is_empty());
    }

    #[test]
    fn scope_says_what_it_always_said() {
        let scope = |s, org, user, repo| run(|o| check_scope(&F, s, org, user, repo, o));
        assert_eq!(
            scope(GiteaScope::Org, Some(""), None, Some("x")),
            [
                violation("spec.gitea.org", "is required when scope is org"),
                violation("spec.gitea.repo", "must be owner/name"),
            ]
        );
        assert_eq!(
            scope(GiteaScope::User, None, None, None),
            [violation("spec.gitea.user", "is required when scope is user")]
        );
        assert_eq!(
            scope(GiteaScope::Repo, None, None, None),
            [violation(
                "spec.gitea.repo",
                "is required as owner/name when scope is repo"
            )]
        );
        assert!(scope(GiteaScope::Global, None, None, None).is_empty());
    }
}
