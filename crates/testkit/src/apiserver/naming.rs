//! The string formats Kubernetes names, label keys and label values must have, with the messages
//! the real server gives when they do not.
//!
//! Mirrors apimachinery v0.34 (Kubernetes 1.34) `pkg/util/validation/validation.go`
//! (`IsDNS1123Label`, `IsDNS1123Subdomain`, `IsDNS1035Label`, `IsQualifiedName`,
//! `IsValidLabelValue`, `MaxLenError`, `RegexError`), `pkg/api/validation/path/name.go`
//! (`IsValidPathSegmentName`) and `pkg/api/validation/generic.go` (`NameIsDNSSubdomain` and
//! friends, `maskTrailingDash`). Each check returns the list of problems; empty means valid.
//! The regular expressions are checked by hand: each is a simple character-class pattern.

/// Longest DNS-1123 label (and DNS-1035 label).
pub const DNS1123_LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Longest name part of a qualified name, and longest label value.
pub const QUALIFIED_NAME_MAX: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters \
     or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
     characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', \
     start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and \
     end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, \
     '-', '_' or '.', and must start and end with an alphanumeric character";

/// `MaxLenError`.
pub fn max_len_error(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// `RegexError`: the message, then the examples and the pattern in parentheses.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let quoted: Vec<String> = examples.iter().map(|e| format!("'{e}'")).collect();
    format!(
        "{msg} (e.g. {}, regex used for validation is '{fmt}')",
        quoted.join(" or ")
    )
}

/// `[<first>]([<middle>]*[<first>])?`: non-empty, ends in `first` characters, `middle` inside.
fn shaped(s: &str, first: impl Fn(u8) -> bool, middle: impl Fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            let inner = b.get(1..b.len() - 1).unwrap_or_default();
            first(f) && first(l) && inner.iter().all(|&c| middle(c) || first(c))
        }
        _ => false,
    }
}

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn matches_dns1123_label(s: &str) -> bool {
    shaped(s, lower_alnum, |c| c == b'-')
}

fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

fn matches_qualified_name_part(s: &str) -> bool {
    shaped(
        s,
        |c| c.is_ascii_alphanumeric(),
        |c| matches!(c, b'-' | b'_' | b'.'),
    )
}

/// `IsDNS1123Label`.
pub fn dns1123_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !matches_dns1123_label(v) {
        if matches_dns1123_subdomain(v) {
            // A valid subdomain that is not a valid label: the length was checked, so it is dots.
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`: every dot-separated part must be a DNS-1123 label.
pub fn dns1123_subdomain(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !matches_dns1123_subdomain(v) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1035Label`: a DNS-1123 label that starts with a letter.
pub fn dns1035_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    let starts_alpha = v.as_bytes().first().is_some_and(u8::is_ascii_lowercase);
    if !(starts_alpha && matches_dns1123_label(v)) {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `IsQualifiedName` (label keys, annotation keys, finalizers): an optional DNS-1123 subdomain
/// prefix and `/`, then a name of at most 63 characters.
pub fn qualified_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".into());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX)));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`: empty, or at most 63 characters shaped like a qualified name's name part.
pub fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > QUALIFIED_NAME_MAX {
        errs.push(max_len_error(QUALIFIED_NAME_MAX));
    }
    if !(v.is_empty() || matches_qualified_name_part(v)) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `IsValidPathSegmentName` (with `prefix`, `IsValidPathSegmentPrefix`): what any object name
/// must satisfy to be a URL path segment and an etcd key.
pub fn path_segment_name(v: &str, prefix: bool) -> Vec<String> {
    if !prefix && let Some(bad) = [".", ".."].into_iter().find(|b| *b == v) {
        return vec![format!("may not be '{bad}'")];
    }
    ["/", "%"]
        .into_iter()
        .filter(|bad| v.contains(bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// How a kind's `metadata.name` is validated (the `ValidateNameFunc` its strategy passes to
/// `ValidateObjectMeta`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// `NameIsDNSSubdomain`: Pods, Jobs, Secrets, ConfigMaps, ServiceAccounts, Leases,
    /// Deployments, CRDs, custom resources, events.k8s.io Events.
    DnsSubdomain,
    /// `NameIsDNSLabel`: Namespaces.
    DnsLabel,
    /// `NameIsDNS1035Label`: Services.
    Dns1035Label,
    /// `path.ValidatePathSegmentName` only: RBAC objects (`ValidateRBACName`) and core v1
    /// Events, whose strategy checks no name format, so only the generic check applies.
    PathSegment,
}

impl NameRule {
    /// The problems with `name`; `prefix` means it is a `generateName`, whose trailing dash is
    /// masked first, as `maskTrailingDash` does.
    pub fn check(self, name: &str, prefix: bool) -> Vec<String> {
        let masked;
        let name = if prefix && self != NameRule::PathSegment {
            masked = mask_trailing_dash(name);
            masked.as_str()
        } else {
            name
        };
        match self {
            NameRule::DnsSubdomain => dns1123_subdomain(name),
            NameRule::DnsLabel => dns1123_label(name),
            NameRule::Dns1035Label => dns1035_label(name),
            NameRule::PathSegment => path_segment_name(name, prefix),
        }
    }
}

/// `maskTrailingDash`: a generateName may end in `-`; upstream replaces the last two
/// characters with `a` (sic), which this keeps so the same prefixes pass.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        // The name ends in an ASCII dash, so cutting bytes before it may split a character only
        // if the one before is multi-byte; such a name is invalid anyway.
        let cut = name.len() - 2;
        let head = name.get(..cut).unwrap_or_default();
        format!("{head}a")
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// apimachinery validation.go `IsDNS1123Subdomain`: each dot-separated part must start and
    /// end alphanumeric (`dns1123SubdomainFmt`), so `.-` inside a name is refused.
    #[test]
    fn subdomain_checks_every_label() {
        assert!(dns1123_subdomain("a.b-c.d").is_empty());
        let bad = dns1123_subdomain("linux-amd64-large.ci-runners.platform-team-eu.-abc12");
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].starts_with("a lowercase RFC 1123 subdomain must consist of"));
        assert!(bad[0].ends_with(
            "(e.g. 'example.com', regex used for validation is \
             '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        ));
        for bad in ["a..b", ".a", "a.", "A", "a_b", ""] {
            assert!(!dns1123_subdomain(bad).is_empty(), "{bad}");
        }
        assert_eq!(dns1123_subdomain(&"a".repeat(254)), vec![max_len_error(253)]);
    }

    /// validation.go `IsDNS1123Label` says "must not contain dots" for a valid subdomain;
    /// `IsDNS1035Label` also wants a leading letter.
    #[test]
    fn labels_and_dns1035() {
        assert_eq!(dns1123_label("a.b"), vec!["must not contain dots".to_string()]);
        assert!(dns1123_label("1abc").is_empty());
        assert!(!dns1035_label("1abc").is_empty());
        assert!(dns1035_label("abc-1").is_empty());
        assert_eq!(dns1123_label(&"a".repeat(64)).len(), 1);
    }

    /// validation.go `IsQualifiedName` and `IsValidLabelValue`.
    #[test]
    fn qualified_names_and_label_values() {
        assert!(qualified_name("forgerunner.dev/group").is_empty());
        assert!(qualified_name("App_1.x").is_empty());
        assert_eq!(
            qualified_name("/x"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert!(qualified_name("Bad_Prefix/x")[0].starts_with("prefix part a lowercase RFC 1123 subdomain"));
        assert!(qualified_name("a/b/c")[0].starts_with("a qualified name must consist of"));
        let long = qualified_name(&"k".repeat(64));
        assert_eq!(
            long,
            vec!["name part must be no more than 63 characters".to_string()]
        );
        assert_eq!(qualified_name("").len(), 2, "empty: non-empty and regex");
        assert!(label_value("").is_empty());
        assert!(label_value("My_value-1.2").is_empty());
        assert_eq!(label_value(&"v".repeat(64)), vec![max_len_error(63)]);
        assert!(label_value("-x")[0].starts_with("a valid label must be an empty string"));
    }

    /// apimachinery path/name.go `IsValidPathSegmentName`, used by rbac `ValidateRBACName`.
    #[test]
    fn path_segments() {
        assert!(path_segment_name("system:controller:job-controller", false).is_empty());
        assert_eq!(
            path_segment_name("..", false),
            vec!["may not be '..'".to_string()]
        );
        assert_eq!(
            path_segment_name("a/b%c", false),
            vec![
                "may not contain '/'".to_string(),
                "may not contain '%'".to_string()
            ]
        );
        assert!(path_segment_name(".", true).is_empty());
    }

    /// generic.go `maskTrailingDash`: `generateName: job-` is checked as a valid prefix.
    #[test]
    fn generate_name_prefixes() {
        assert!(NameRule::DnsSubdomain.check("runner-", true).is_empty());
        assert!(!NameRule::DnsSubdomain.check("runner-", false).is_empty());
        assert!(!NameRule::DnsLabel.check("a.b-", true).is_empty());
    }
}
