//! The rules of `spec.forgejo` (`Forge::validate`), twins of the CRD schema's. Where a field
//! means what it means in `spec.gitea` (or `spec.github` for the CA bundle and proxy), the rule
//! and its message are the same.
//!
//! Two rules have no twin in the schema, because they depend on what the runner pod can do
//! (forgejo-runner 12.8.x, `code.forgejo.org/forgejo/runner`):
//! - **docker labels need a daemon** ([`validate_docker_daemon`]): a label without a scheme is
//!   docker (`internal/pkg/labels/labels.go` `Parse`), and `one-job` runs `configCheck`
//!   (`internal/app/cmd/job.go` `runJob` → `internal/app/cmd/daemon.go` `configCheck`) before it
//!   polls: with a docker label and no `DOCKER_HOST` or Docker socket it exits 1, so no runner of
//!   the group would ever take a job;
//! - **no `lxc` labels** ([`validate_forgejo`]): LXC needs `lxc-helpers` and root, which the
//!   runner image (`Dockerfile`: alpine, `USER 1000:1000`) and its restricted pod do not have;
//!   `configCheck` does not look at LXC, so the runner would take the job and fail it.

use forgerunner_core::crd::{ContainerModeType, RunnerGroupSpec};
use forgerunner_core::crd::{ForgejoScope, ForgejoSpec};
use forgerunner_core::runner_job::RUNNER_CONTAINER;
use forgerunner_core::validate::{
    MAX_FORGE_NAME_LEN, MAX_LABEL_LEN, MAX_LABELS, MAX_REPO_LEN, SpecViolation, check_container_mode,
    check_length, is_http_url, is_object_name, violation,
};
use k8s_openapi::api::core::v1::Container;

use crate::labels::{DEFAULT_DOCKER_IMAGE, RunnerLabel, parse_labels};
use crate::pod::DATA_DIR;

/// Field of the label rules.
const LABELS_FIELD: &str = "spec.forgejo.labels";

/// The rules of `spec.forgejo`; empty when valid.
pub fn validate_forgejo(fj: &ForgejoSpec) -> Vec<SpecViolation> {
    let mut out = Vec::new();
    out.extend(check_length(
        "spec.forgejo.org",
        fj.org.as_deref(),
        MAX_FORGE_NAME_LEN,
    ));
    out.extend(check_length(
        "spec.forgejo.user",
        fj.user.as_deref(),
        MAX_FORGE_NAME_LEN,
    ));
    out.extend(check_length(
        "spec.forgejo.repo",
        fj.repo.as_deref(),
        MAX_REPO_LEN,
    ));
    if !is_http_url(&fj.url) {
        out.push(violation(
            "spec.forgejo.url",
            "must be an http:// or https:// URL with a host, e.g. https://forgejo.example.com",
        ));
    }
    if !is_object_name(&fj.credentials) {
        out.push(violation(
            "spec.forgejo.credentials",
            "must name a Secret in the group's namespace",
        ));
    }
    if fj.poll_interval_seconds == Some(0) {
        out.push(violation(
            "spec.forgejo.pollIntervalSeconds",
            "must be at least 1 (or unset for the default 5)",
        ));
    }
    if fj.proxy_url.as_deref().is_some_and(|u| !is_http_url(u)) {
        out.push(violation(
            "spec.forgejo.proxyUrl",
            "must be an http:// or https:// URL with a host",
        ));
    }
    if fj
        .ca_bundle_config_map
        .as_deref()
        .is_some_and(|n| !is_object_name(n))
    {
        out.push(violation(
            "spec.forgejo.caBundleConfigMap",
            "must name a ConfigMap in the group's namespace",
        ));
    }
    check_labels(&fj.labels, &mut out);
    check_scope(fj, &mut out);
    out
}

fn check_labels(labels: &[String], out: &mut Vec<SpecViolation>) {
    if labels.is_empty() {
        out.push(violation("spec.forgejo.labels", "must list at least one label"));
    } else if labels.len() > MAX_LABELS {
        out.push(violation(
            "spec.forgejo.labels",
            format!("must list at most {MAX_LABELS} labels"),
        ));
    }
    let one_bad = labels
        .iter()
        .find(|l| l.len() > MAX_LABEL_LEN || parse_labels(&[l.as_str()]).is_err());
    if let Some(bad) = one_bad {
        out.push(violation(
            "spec.forgejo.labels",
            format!("label {bad:?} must be name, name:host, name:docker://image or name:lxc://template"),
        ));
    } else if let Err(e) = parse_labels(labels) {
        // Each label is fine alone, so the set repeats a name.
        out.push(violation("spec.forgejo.labels", e.to_string()));
    } else if let Some(lxc) = labels.iter().find(|l| is_lxc(l)) {
        let name = lxc.split(':').next().unwrap_or_default();
        out.push(violation(
            LABELS_FIELD,
            format!(
                "label {lxc:?} runs jobs in LXC containers, which a runner pod cannot create (forgejo-runner \
                 would take the job and fail it): use a docker label with containerMode.type: dind, or a host \
                 label ({name}:host)"
            ),
        ));
    }
}

/// Whether a (valid) label has the `lxc` scheme.
fn is_lxc(label: &str) -> bool {
    parse_labels(&[label]).is_ok_and(|s| matches!(s.labels()[0].1, RunnerLabel::Lxc { .. }))
}

fn check_scope(fj: &ForgejoSpec, out: &mut Vec<SpecViolation>) {
    let empty = |v: &Option<String>| v.as_deref().is_none_or(str::is_empty);
    match fj.scope {
        ForgejoScope::Org if empty(&fj.org) => {
            out.push(violation("spec.forgejo.org", "is required when scope is org"));
        }
        ForgejoScope::User if empty(&fj.user) => {
            out.push(violation("spec.forgejo.user", "is required when scope is user"));
        }
        ForgejoScope::Repo if fj.repo.is_none() => {
            out.push(violation(
                "spec.forgejo.repo",
                "is required as owner/name when scope is repo",
            ));
        }
        _ => {}
    }
    let owner_name = |r: &str| {
        r.split_once('/')
            .is_some_and(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
    };
    if fj.repo.as_deref().is_some_and(|r| !owner_name(r)) {
        out.push(violation("spec.forgejo.repo", "must be owner/name"));
    }
}

/// Docker labels need a Docker daemon the runner finds at start: `containerMode: dind`, or a
/// template whose `runner` container sets `DOCKER_HOST` or mounts a Docker socket where
/// forgejo-runner looks for one (`commonSocketPaths` of `internal/app/cmd/daemon.go`, `$HOME` being
/// [`DATA_DIR`]). Without one, forgejo-runner's `configCheck` exits 1 before the runner polls.
/// A template that does not decode is reported by the common rules, not here.
pub fn validate_docker_daemon(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    let Some(fj) = spec.forgejo.as_ref() else {
        return Vec::new();
    };
    // Only well-formed label sets: the label rules report the others.
    let Ok(set) = parse_labels(&fj.labels) else {
        return Vec::new();
    };
    let docker: Vec<(&str, bool)> = fj
        .labels
        .iter()
        .zip(set.labels())
        .filter(|(_, (_, l))| matches!(l, RunnerLabel::Docker { .. }))
        .map(|(raw, (name, _))| (raw.as_str(), raw.as_str() == name))
        .collect();
    let Some(&(first, _)) = docker.first() else {
        return Vec::new();
    };
    if spec.container_mode_type() == Some(ContainerModeType::Dind) || template_brings_docker(spec) {
        return Vec::new();
    }
    let name = first.split(':').next().unwrap_or_default();
    let quoted: Vec<String> = docker.iter().map(|(l, _)| format!("{l:?}")).collect();
    let subject = if docker.len() == 1 {
        format!("label {} runs", quoted[0])
    } else {
        format!("labels {} run", quoted.join(", "))
    };
    let bare = if docker.iter().any(|(_, bare)| *bare) {
        format!(" (a label without a scheme is docker://{DEFAULT_DOCKER_IMAGE})")
    } else {
        String::new()
    };
    let which = if docker.len() == 1 {
        "the label"
    } else {
        "each of them"
    };
    vec![violation(
        LABELS_FIELD,
        format!(
            "{subject} jobs in Docker containers{bare}; forgejo-runner exits at start without a Docker daemon: \
             set containerMode.type: dind, set DOCKER_HOST on the runner container in spec.template, or give \
             {which} a host scheme ({name}:host)"
        ),
    )]
}

/// Where forgejo-runner looks for a socket when `DOCKER_HOST` is unset (`commonSocketPaths`,
/// without the Windows pipe and the `$XDG_RUNTIME_DIR` ones the image does not set).
fn socket_paths() -> [String; 4] {
    [
        "/var/run/docker.sock".to_string(),
        "/run/podman/podman.sock".to_string(),
        format!("{DATA_DIR}/.colima/docker.sock"),
        format!("{DATA_DIR}/.docker/run/docker.sock"),
    ]
}

/// Whether `spec.template`'s runner container sets `DOCKER_HOST` or mounts a volume at (or
/// above) a socket path; `/var/run` is `/run` in the image.
fn template_brings_docker(spec: &RunnerGroupSpec) -> bool {
    let Ok(tpl) = spec.pod_template() else {
        // Reported as `spec.template`; do not add a second violation.
        return true;
    };
    let runner: Vec<&Container> = tpl
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .into_iter()
        .flat_map(|s| &s.containers)
        .filter(|c| c.name == RUNNER_CONTAINER)
        .collect();
    let canonical = |p: &str| {
        let p = p.trim_end_matches('/');
        match p.strip_prefix("/var/run") {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("/run{rest}"),
            _ => p.to_string(),
        }
    };
    let sockets = socket_paths().map(|s| canonical(&s));
    runner.iter().any(|c| {
        let env = c.env.iter().flatten().any(|e| e.name == "DOCKER_HOST");
        let mount = c.volume_mounts.iter().flatten().any(|m| {
            let m = canonical(&m.mount_path);
            !m.is_empty()
                && m != DATA_DIR
                && sockets
                    .iter()
                    .any(|s| *s == m || s.strip_prefix(&m).is_some_and(|r| r.starts_with('/')))
        });
        env || mount
    })
}

/// `spec.containerMode`: Forgejo's runners run job containers through a Docker daemon,
/// so `dind` (or no mode) works; the `kubernetes` modes need GitHub's runner container hooks.
/// Whether docker labels have their daemon is [`validate_docker_daemon`]'s rule.
pub fn validate_container_mode(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    check_container_mode(
        spec,
        &[ContainerModeType::Dind],
        "the kubernetes modes need GitHub's runner container hooks",
    )
    .into_iter()
    .collect()
}

#[cfg(test)]
mod container_mode_tests;

#[cfg(test)]
mod tests;
