//! Spec validation the reconciler runs again (a cluster may skip the CRD's CEL rules, and an object
//! stored before a rule existed is never re-checked by the API server).
//!
//! Every rule of the CRD schema has a twin: the common fields and the choice of forge block here,
//! the rules of each forge's block in its backend (`Forge::describe`), which builds on the
//! helpers below. Each violation names the JSON path to fix.

use crate::crd::{CacheSpec, ContainerModeType, DockerCacheSpec, ForgeKind, RunnerGroupSpec};

/// A spec rule that does not hold; `field` is the JSON path a user must fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecViolation {
    /// JSON path of the offending field, e.g. `spec.gitea.org`.
    pub field: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Longest URL the schema accepts (`maxLength` of `configUrl`, `url`, `proxyUrl`).
pub const MAX_URL_LEN: usize = 2048;
/// Longest Kubernetes object name (DNS-1123 subdomain).
pub const MAX_OBJECT_NAME_LEN: usize = 253;
/// Most labels the schema accepts on one group.
pub const MAX_LABELS: usize = 64;
/// Longest single label the schema accepts.
pub const MAX_LABEL_LEN: usize = 256;
/// Longest forge-side name the schema accepts (GitHub runner group and scale set, Gitea and
/// Forgejo org and user): GitHub and Gitea both cap names at 255 characters.
pub const MAX_FORGE_NAME_LEN: usize = 255;
/// Longest `owner/name` repository the schema accepts (two forge names and the slash, rounded up).
pub const MAX_REPO_LEN: usize = 512;
/// Highest `maxRunners` the schema accepts.
///
/// Each runner is a Job, a pod and a Secret, and the operator keeps every runner Job in memory
/// and creates runners one API call at a time: a thousand runners per group is far above what
/// one group needs (split larger fleets into several groups, each with its own limit) and keeps
/// a typo such as `maxRunners: 100000` from flooding the namespace and the forge.
pub const MAX_RUNNERS_LIMIT: u32 = 1000;

/// A violation of the rule at `field`.
pub fn violation(field: &'static str, message: impl Into<String>) -> SpecViolation {
    SpecViolation {
        field,
        message: message.into(),
    }
}

/// `http://` or `https://` followed by a non-empty host, like the CEL rule `^https?://[^/]+`,
/// and no longer than the schema's `maxLength`.
pub fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|host| !host.is_empty() && !host.starts_with('/')) && chars(url) <= MAX_URL_LEN
}

/// Length as the API server's `maxLength` counts it: characters, not bytes.
pub fn chars(s: &str) -> usize {
    s.chars().count()
}

/// A DNS-1123 subdomain: what Kubernetes accepts as a Secret or ConfigMap name.
pub fn is_object_name(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= MAX_OBJECT_NAME_LEN
        && name.split('.').all(|part| {
            part.starts_with(alnum) && part.ends_with(alnum) && part.chars().all(|c| alnum(c) || c == '-')
        })
}

/// act_runner label form `name`, `name:host` or `name:docker://image` (no commas or spaces, since
/// the runner receives the list comma-separated). Gitea's and Forgejo's runners both accept it.
pub fn is_runner_label(label: &str) -> bool {
    let plain = |s: &str| !s.is_empty() && !s.contains([',', ' '] as [char; 2]);
    if chars(label) > MAX_LABEL_LEN {
        return false;
    }
    match label.split_once(':') {
        None => plain(label),
        Some((name, schema)) => {
            plain(name)
                && !name.contains(':')
                && (schema == "host" || schema.strip_prefix("docker://").is_some_and(plain))
        }
    }
}

/// JSON path of the container mode, named by violations about it.
pub const CONTAINER_MODE_TYPE_FIELD: &str = "spec.containerMode.type";

/// A violation when `spec.containerMode.type` is set to a mode not in `supported`, for a forge
/// whose runners cannot run it; `why` says what the mode needs (e.g. "kubernetes mode needs
/// GitHub's runner container hooks"). No mode is always supported.
pub fn check_container_mode(
    spec: &RunnerGroupSpec,
    supported: &[ContainerModeType],
    why: &str,
) -> Option<SpecViolation> {
    let mode = spec.container_mode_type()?;
    if supported.contains(&mode) {
        return None;
    }
    let choices: Vec<&str> = supported.iter().map(|m| m.as_str()).collect();
    let choices = if choices.is_empty() {
        "no mode".to_owned()
    } else {
        format!("{} or no mode", choices.join(", "))
    };
    Some(violation(
        CONTAINER_MODE_TYPE_FIELD,
        format!("{why}; {} runners support {choices}", spec.forge),
    ))
}

/// Checks the common fields and that exactly the block of `spec.forge` is set; empty when valid.
/// The block's own rules are its forge's ([`crate::forge::Forge::describe`]).
pub fn validate_spec(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    let mut out = Vec::new();
    check_common(spec, &mut out);
    let selected = spec.forge.block_field();
    let set = spec.forge_blocks_set();
    if !set.contains(&spec.forge) {
        out.push(violation(
            selected,
            format!("is required when spec.forge is {}", spec.forge),
        ));
    }
    for other in set.into_iter().filter(|k| *k != spec.forge) {
        out.push(violation(
            other.block_field(),
            format!("must not be set when spec.forge is {}", spec.forge),
        ));
    }
    out
}

fn check_common(spec: &RunnerGroupSpec, out: &mut Vec<SpecViolation>) {
    if spec.max_runners < 1 {
        out.push(violation("spec.maxRunners", "must be at least 1"));
    }
    if spec.max_runners > MAX_RUNNERS_LIMIT {
        out.push(violation(
            "spec.maxRunners",
            format!("must be at most {MAX_RUNNERS_LIMIT} (split a larger fleet into several groups)"),
        ));
    }
    if spec.min_runners > spec.max_runners {
        out.push(violation(
            "spec.minRunners",
            format!(
                "{} exceeds spec.maxRunners {}",
                spec.min_runners, spec.max_runners
            ),
        ));
    }
    if spec.idle_timeout_seconds == Some(0) {
        out.push(violation(
            "spec.idleTimeoutSeconds",
            "must be at least 1 (or unset for the default)",
        ));
    }
    if spec.startup_timeout_seconds == Some(0) {
        out.push(violation(
            "spec.startupTimeoutSeconds",
            "must be at least 1 (or unset for the default)",
        ));
    }
    out.extend(crate::schedule::validate_schedules(
        &spec.schedules,
        spec.max_runners,
    ));
    if let Some(r) = &spec.rerun
        && !(1..=crate::crd::MAX_RERUNS_PER_HOUR).contains(&r.max_per_hour)
    {
        out.push(violation("spec.rerun.maxPerHour", "must be between 1 and 100"));
    }
    if spec.stalled_job_seconds == Some(0) {
        out.push(violation(
            "spec.stalledJobSeconds",
            "must be at least 1 (or unset for the default)",
        ));
    }
    if spec.active_deadline_seconds.is_some_and(|s| s < 1) {
        out.push(violation(
            "spec.activeDeadlineSeconds",
            "must be at least 1 (or unset for no deadline)",
        ));
    }
    if spec.ttl_seconds_after_finished.is_some_and(|s| s < 0) {
        out.push(violation("spec.ttlSecondsAfterFinished", "must not be negative"));
    }
    if let Some(mode) = &spec.container_mode
        && mode.type_ != ContainerModeType::Kubernetes
        && mode.kubernetes_mode_work_volume_claim.is_some()
    {
        out.push(violation(
            "spec.containerMode.kubernetesModeWorkVolumeClaim",
            format!(
                "is only used with type kubernetes (type is {})",
                mode.type_.as_str()
            ),
        ));
    }
    if let Err(e) = spec.pod_template() {
        out.push(violation(
            "spec.template",
            format!("{e} (it must be a Kubernetes pod template)"),
        ));
    }
    if let Err(e) = spec.work_volume_claim() {
        out.push(violation(
            "spec.containerMode.kubernetesModeWorkVolumeClaim",
            format!("{e} (it must be a PersistentVolumeClaim template)"),
        ));
    }
    if let Some(cache) = &spec.cache {
        out.extend(check_cache(spec, cache));
    }
    if let Some(cache) = &spec.docker_cache {
        out.extend(check_docker_cache(spec, cache));
    }
    out.extend(check_classes(spec));
    if spec.image.as_deref().is_some_and(|i| i.trim().is_empty()) {
        out.push(violation(
            "spec.image",
            "must not be empty (leave it unset for the forge's default)",
        ));
    }
}

/// The rules of `spec.cache`: a forge whose runner can use a cache server, a size within the
/// bounds, a storage class that is an object name, and no config file of the user's own (the
/// operator writes the runner's config file for the cache).
fn check_cache(spec: &RunnerGroupSpec, cache: &CacheSpec) -> Vec<SpecViolation> {
    use crate::cache_server::{MAX_CACHE_BYTES, MIN_CACHE_BYTES, size_bytes, template_names_config_file};
    let mut out = Vec::new();
    if spec.forge == ForgeKind::Github {
        out.push(violation(
            "spec.cache",
            "is not supported for GitHub: GitHub's runner takes the cache URL from the job message \
             and no setting of a stock runner overrides it; see docs/caches.md for what works instead",
        ));
    }
    if !size_bytes(&cache.size).is_some_and(|b| (MIN_CACHE_BYTES..=MAX_CACHE_BYTES).contains(&b)) {
        out.push(violation(
            "spec.cache.size",
            format!(
                "must be a whole quantity between 1Gi and 10Ti such as 10Gi or 50G, not {:?}",
                cache.size
            ),
        ));
    }
    if let Some(class) = &cache.storage_class_name
        && !is_object_name(class)
    {
        out.push(violation(
            "spec.cache.storageClassName",
            format!("must be a StorageClass name (lowercase DNS subdomain of at most {MAX_OBJECT_NAME_LEN} characters)"),
        ));
    }
    if template_names_config_file(spec) {
        out.push(violation(
            "spec.cache",
            "cannot be combined with CONFIG_FILE on the runner container of spec.template: the \
             operator gives the runner a config file of its own for the cache; remove spec.cache \
             and set the cache keys in your config file instead (see docs/caches.md)",
        ));
    }
    out
}

/// The rules of `spec.dockerCache`: `containerMode: dind` (the volumes are a Docker daemon's
/// data root), a size within the bounds of `spec.cache`'s, a storage class that is an object
/// name, and a pool of 1 to [`crate::docker_cache::MAX_DOCKER_CACHE_CLAIMS`] claims.
fn check_docker_cache(spec: &RunnerGroupSpec, cache: &DockerCacheSpec) -> Vec<SpecViolation> {
    use crate::cache_server::{MAX_CACHE_BYTES, MIN_CACHE_BYTES, size_bytes};
    use crate::docker_cache::MAX_DOCKER_CACHE_CLAIMS;
    let mut out = Vec::new();
    let dind = spec
        .container_mode
        .as_ref()
        .is_some_and(|m| m.type_ == ContainerModeType::Dind);
    if !dind {
        out.push(violation(
            "spec.dockerCache",
            "is only used with containerMode dind (it holds the Docker daemon's /var/lib/docker); \
             set spec.containerMode.type to dind or remove spec.dockerCache",
        ));
    }
    if !size_bytes(&cache.size).is_some_and(|b| (MIN_CACHE_BYTES..=MAX_CACHE_BYTES).contains(&b)) {
        out.push(violation(
            "spec.dockerCache.size",
            format!(
                "must be a whole quantity between 1Gi and 10Ti such as 20Gi or 50G, not {:?}",
                cache.size
            ),
        ));
    }
    if let Some(class) = &cache.storage_class_name
        && !is_object_name(class)
    {
        out.push(violation(
            "spec.dockerCache.storageClassName",
            format!("must be a StorageClass name (lowercase DNS subdomain of at most {MAX_OBJECT_NAME_LEN} characters)"),
        ));
    }
    if cache
        .claims
        .is_some_and(|c| !(1..=MAX_DOCKER_CACHE_CLAIMS).contains(&c))
    {
        out.push(violation(
            "spec.dockerCache.claims",
            format!("must be between 1 and {MAX_DOCKER_CACHE_CLAIMS} (or unset for maxRunners)"),
        ));
    }
    out
}

/// JSON path of the classes, named by every violation about one of them (with the class).
pub const CLASSES_FIELD: &str = "spec.classes";

/// The rules of `spec.classes`: a forge that supports them, at most [`MAX_CLASSES`] classes,
/// each with a unique DNS-label name of at most 20 characters, one to 64 labels of the runner
/// label form with distinct names, a `maxRunners` from 1 to the group's, and resources and
/// tolerations that decode.
fn check_classes(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    use crate::crd::{MAX_CLASS_NAME_LEN, MAX_CLASSES};
    let mut out = Vec::new();
    if spec.classes.is_empty() {
        return out;
    }
    let mut bad = |message: String| out.push(violation(CLASSES_FIELD, message));
    match spec.forge {
        ForgeKind::Gitea => {}
        // A class is a scale set of its own; GitHub's own rules of classes are its forge's
        // (`forgerunner_github::validate::validate_classes`).
        ForgeKind::Github => {}
        // Forgejo 15 binds each runner of a class to a job of that class; 11–14 register each
        // runner with its class's labels (docs/classes.md#forgejo).
        ForgeKind::Forgejo => {}
    }
    if spec.classes.len() > MAX_CLASSES {
        bad(format!("must have at most {MAX_CLASSES} classes"));
    }
    let mut names = std::collections::BTreeSet::new();
    for class in &spec.classes {
        let name = &class.name;
        if !is_dns_label(name) || chars(name) > MAX_CLASS_NAME_LEN {
            bad(format!(
                "class name {name:?} must be a DNS label (lowercase letters, digits and '-', \
                 starting and ending with a letter or digit) of at most {MAX_CLASS_NAME_LEN} characters"
            ));
        }
        if !names.insert(name.as_str()) {
            bad(format!("class name {name:?} is used more than once"));
        }
        if class.labels.is_empty() || class.labels.len() > MAX_LABELS {
            bad(format!(
                "class {name}: must have 1 to {MAX_LABELS} labels (the runs-on labels that ask for it)"
            ));
        }
        for label in class.labels.iter().filter(|l| !is_runner_label(l)) {
            bad(format!(
                "class {name}: label {label:?} must be name, name:host or name:docker://image of at \
                 most {MAX_LABEL_LEN} characters"
            ));
        }
        if let Err(e) = crate::labels::LabelSet::parse(&class.labels, |_, _| Ok(()))
            && matches!(e, crate::labels::LabelError::Duplicate(_))
        {
            bad(format!("class {name}: {e}"));
        }
        if let Some(max) = class.max_runners
            && !(1..=spec.max_runners).contains(&max)
        {
            bad(format!(
                "class {name}: maxRunners {max} must be between 1 and spec.maxRunners {}",
                spec.max_runners
            ));
        }
        if let Err(e) = class.resources() {
            bad(format!(
                "class {name}: resources: {e} (they must be a container's resources)"
            ));
        }
        if let Err(e) = class.tolerations() {
            bad(format!(
                "class {name}: tolerations: {e} (each must be a pod toleration)"
            ));
        }
    }
    out
}

/// A DNS-1123 label: lowercase letters, digits and `-`, starting and ending with a letter or
/// digit, at most 63 characters.
pub fn is_dns_label(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name.chars().all(|c| alnum(c) || c == '-')
}

/// `field` longer than `max` characters, as the API server counts them (not bytes), for the
/// free-text name fields of the forge blocks (each forge checks its own block's). Fields with a
/// format (URLs, object names, labels) are checked with their format instead.
pub fn check_length(field: &'static str, value: Option<&str>, max: usize) -> Option<SpecViolation> {
    value
        .filter(|v| chars(v) > max)
        .map(|_| violation(field, format!("must be at most {max} characters")))
}

#[cfg(test)]
mod class_tests;
#[cfg(test)]
mod tests;
