//! Every name the operator makes from a group's name, in the forms a real API server accepts.
//!
//! The rules are apimachinery's (`pkg/util/validation/validation.go`): a label value is at most
//! 63 characters of `[A-Za-z0-9._-]` starting and ending alphanumeric (`IsValidLabelValue`); an
//! object name such as a Job's or a Secret's is a DNS-1123 subdomain, whose every dot-separated
//! part starts and ends alphanumeric (`IsDNS1123Subdomain`, `dns1123SubdomainFmt`).

use rand::Rng;

/// Longest group name: it is the value of the `forgerunner.dev/group` label on every runner Job,
/// and a real server refuses longer label values, in objects and in label selectors alike.
pub const GROUP_NAME_MAX: usize = 63;
/// Longest prefix of the group name used in runner names (63 − 1 − 5, minus room for the pod
/// suffix the Job controller appends).
pub const RUNNER_NAME_PREFIX_MAX: usize = 46;
/// Length of the random runner name suffix.
pub const RUNNER_NAME_SUFFIX_LEN: usize = 5;

/// A valid label value (apimachinery `IsValidLabelValue`): empty, or at most 63 characters of
/// `[A-Za-z0-9._-]` that start and end alphanumeric.
pub fn is_label_value(value: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    value.is_empty()
        || (value.len() <= GROUP_NAME_MAX
            && value.starts_with(alnum)
            && value.ends_with(alnum)
            && value.chars().all(|c| alnum(c) || "._-".contains(c)))
}

/// Why `name` cannot name a group, or `None`. The API server already checked it is a DNS-1123
/// subdomain; a group name must also be a label value.
pub fn group_name_problem(name: &str) -> Option<String> {
    (name.len() > GROUP_NAME_MAX).then(|| {
        format!(
            "must be at most {GROUP_NAME_MAX} characters, it is {}: it is the value of the \
             forgerunner.dev/group label on every runner (delete the group and create it with a \
             shorter name)",
            name.len()
        )
    })
}

/// The part of a group's name its runner names start with: cut to [`RUNNER_NAME_PREFIX_MAX`],
/// without a trailing `.` (`web.eu.` + `-abc12` would be a dot-separated part starting with
/// `-`, which a real server refuses in a Job or Secret name). A trailing `-` stays: `web--abc12`
/// is valid, and runners named so before must still be recognised.
pub fn runner_name_prefix(group_name: &str) -> &str {
    // Group names are DNS subdomains (ASCII), so a byte cut is a char cut; `get` keeps a
    // non-ASCII name (never stored by a real server) from panicking.
    let cut = group_name.get(..RUNNER_NAME_PREFIX_MAX).unwrap_or(group_name);
    cut.trim_end_matches('.')
}

/// A fresh runner name: [`runner_name_prefix`], `-`, and 5 random `[a-z0-9]`. Used for the
/// runner's Job, its Secret and, by the forges, the forge-side runner.
pub fn runner_name(group_name: &str) -> String {
    runner_name_with(group_name, &mut rand::rng())
}

/// [`runner_name`] with a given random source (for tests).
pub fn runner_name_with(group_name: &str, rng: &mut impl Rng) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let suffix: String = (0..RUNNER_NAME_SUFFIX_LEN)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect();
    format!("{}-{suffix}", runner_name_prefix(group_name))
}

/// Whether `runner` is a name [`runner_name`] makes for `group_name` (forge-side runner rows
/// carry no labels, so the name is how a forge finds its group's runners).
pub fn is_runner_name_of(group_name: &str, runner: &str) -> bool {
    runner
        .strip_prefix(runner_name_prefix(group_name))
        .and_then(|r| r.strip_prefix('-'))
        .is_some_and(|s| {
            s.len() == RUNNER_NAME_SUFFIX_LEN
                && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// Name of the ServiceAccount (and of the RoleBinding granting it the runner container hooks'
/// ClusterRole) the runner pods of `group_name` run as when the forge asks for runner permissions
/// ([`crate::forge::ForgeProfile::runner_role_rules`]): at most 70 characters of a valid group name, a
/// valid DNS-1123 subdomain and path segment.
pub fn runner_service_account_name(group_name: &str) -> String {
    format!("{group_name}-runner")
}

/// Name of the RoleBinding that lets the operator itself delete what the hooks of
/// `group_name`'s runners leave behind, in the group's namespace only: at most 78 characters, a
/// valid path segment (the rule for RBAC object names). It ends in `-cleanup`, so it never equals
/// another group's [`runner_service_account_name`] (which ends in `-runner`).
pub fn runner_cleanup_binding_name(group_name: &str) -> String {
    format!("{}-cleanup", runner_service_account_name(group_name))
}

/// Longest DNS-1035 label (apimachinery `DNS1035LabelMaxLength`): the rule for Service names.
pub const SERVICE_NAME_MAX: usize = 63;

/// What [`cache_name`] appends to a group's name.
const CACHE_SUFFIX: &str = "-actions-cache";

/// A DNS-1035 label (apimachinery `IsDNS1035Label`): at most 63 characters of `[a-z0-9-]`,
/// starting with a letter and ending alphanumeric. Service names must be one.
pub fn is_dns1035_label(value: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    value.len() <= SERVICE_NAME_MAX
        && value.starts_with(|c: char| c.is_ascii_lowercase())
        && value.ends_with(alnum)
        && value.chars().all(|c| alnum(c) || c == '-')
}

/// Name of every object of `group_name`'s shared Actions cache (Deployment, Service,
/// PersistentVolumeClaim, NetworkPolicy, Secret; [`crate::cache_server`]): `<group>-actions-cache`
/// when that is a valid Service name (a DNS-1035 label), else `actions-cache-<cut>-<hash>` with the
/// group's name cut to 40 characters, its dots made dashes, and 8 hex digits of its hash, so two
/// groups never share one. Never a runner name ([`is_runner_name_of`]): its suffix is not 5
/// characters.
pub fn cache_name(group_name: &str) -> String {
    let plain = format!("{group_name}{CACHE_SUFFIX}");
    if is_dns1035_label(&plain) {
        return plain;
    }
    let hash = crate::stable_hash::fnv1a(group_name.as_bytes());
    let cleaned: String = group_name
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let cut = cleaned.get(..40).unwrap_or(&cleaned);
    format!("actions-cache-{cut}-{:08x}", hash & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    // apimachinery `IsDNS1123Subdomain`: every dot-separated part starts and ends alphanumeric.
    use crate::validate::is_object_name as is_dns1123_subdomain;

    #[test]
    fn a_cut_ending_in_a_dot_or_dash_is_trimmed() {
        let mut rng = StdRng::seed_from_u64(7);
        // Character 46 of this valid group name is the `.` before `build`.
        let group = "linux-amd64-large.ci-runners.platform-team-eu.build";
        let name = runner_name_with(group, &mut rng);
        assert!(
            name.starts_with("linux-amd64-large.ci-runners.platform-team-eu-"),
            "{name}"
        );
        assert!(is_dns1123_subdomain(&name), "{name}");
        assert!(is_runner_name_of(group, &name));
        // A cut ending in `-` was always valid and keeps its form.
        let dashed = format!("{}-{}", "a".repeat(45), "b".repeat(10));
        let name = runner_name_with(&dashed, &mut rng);
        assert!(name.starts_with(&format!("{}--", "a".repeat(45))), "{name}");
        assert!(is_dns1123_subdomain(&name), "{name}");
    }

    #[test]
    fn runner_names_have_a_cut_prefix_and_a_random_suffix() {
        let mut rng = StdRng::seed_from_u64(7);
        let name = runner_name_with(&"a".repeat(80), &mut rng);
        assert_eq!(name.len(), RUNNER_NAME_PREFIX_MAX + 1 + RUNNER_NAME_SUFFIX_LEN);
        let (prefix, suffix) = name.rsplit_once('-').expect("dash");
        assert_eq!(prefix, "a".repeat(46));
        assert!(
            suffix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        let short = runner_name_with("g", &mut rng);
        assert!(short.starts_with("g-") && short.len() == 7);
    }

    #[test]
    fn every_valid_group_name_gives_valid_runner_names() {
        let mut rng = StdRng::seed_from_u64(11);
        let parts = ["a", "b1", "c-d", "e", "f.g", "h-"];
        for n in 0..4000usize {
            // Valid subdomains of up to 63 characters built from pieces, many with a `.` or `-`
            // at every possible cut.
            let mut name = String::new();
            let mut i = n;
            while name.len() < 40 + n % 24 {
                name.push_str(parts[i % parts.len()]);
                i = i / parts.len() + 7;
            }
            let name: String = name.chars().take(63).collect();
            let name = name
                .trim_end_matches(['.', '-'])
                .replace(".-", ".x")
                .replace("-.", "x.");
            let name = name.replace("..", ".");
            if !is_dns1123_subdomain(&name) {
                continue;
            }
            let runner = runner_name_with(&name, &mut rng);
            assert!(is_dns1123_subdomain(&runner), "{name} -> {runner}");
            assert!(is_label_value(&runner), "{name} -> {runner}");
            assert!(is_runner_name_of(&name, &runner));
        }
    }

    #[test]
    fn runner_names_of_a_group() {
        assert!(is_runner_name_of("web", "web-ab12c"));
        assert!(!is_runner_name_of("web", "web-gpu-ab12c"));
        assert!(!is_runner_name_of("web", "web-AB12C"));
        assert!(!is_runner_name_of("web", "web-ab12"));
        assert!(!is_runner_name_of("web", "webx-ab12c"));
        let name = format!("{}-zz9zz", "a".repeat(46));
        assert!(is_runner_name_of(&"a".repeat(60), &name));
    }

    #[test]
    fn cache_names_are_service_names_and_tell_groups_apart() {
        assert_eq!(cache_name("web"), "web-actions-cache");
        assert!(is_dns1035_label(&cache_name("web")));
        // Dots, a leading digit or a long name: the hashed form, still a Service name.
        for group in [
            "a.b",
            "1web",
            &"a".repeat(63),
            "linux-amd64-large.ci-runners.platform-team-eu.build",
        ] {
            let name = cache_name(group);
            assert!(name.starts_with("actions-cache-"), "{group} -> {name}");
            assert!(is_dns1035_label(&name), "{group} -> {name}");
            assert!(is_dns1123_subdomain(&name), "{group} -> {name}");
            assert!(is_label_value(&name), "{group} -> {name}");
        }
        // Groups whose names differ only where the name is cleaned get different caches.
        assert_ne!(cache_name("a.b"), cache_name("a-b"));
        assert_ne!(cache_name("a.b"), cache_name("a-b-actions-cache"));
        // Never a runner name of the group (forges find their runners by name).
        assert!(!is_runner_name_of("web", &cache_name("web")));
        assert!(!is_dns1035_label("Web") && !is_dns1035_label("1a") && !is_dns1035_label("a-"));
        assert!(!is_dns1035_label(&"a".repeat(64)));
    }

    #[test]
    fn label_values_as_apimachinery_counts_them() {
        assert!(is_label_value(""));
        assert!(is_label_value(&"a".repeat(63)));
        assert!(!is_label_value(&"a".repeat(64)));
        assert!(!is_label_value("-a") && !is_label_value("a.") && !is_label_value("a/b"));
        assert!(group_name_problem(&"a".repeat(63)).is_none());
        assert!(group_name_problem(&"a".repeat(64)).is_some());
    }
}
