//! The rules of `spec.forgejo` (`Forge::describe`), twins of the CRD schema's. Where a field
//! means what it means in `spec.gitea` (or `spec.github` for the CA bundle and proxy), the rule
//! and its message are the same: [`forgerunner_http::spec_rules`], which both blocks call.
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

use forgerunner_core::crd::ForgejoSpec;
use forgerunner_core::crd::{ContainerModeType, RunnerGroupSpec};
use forgerunner_core::runner_job::RUNNER_CONTAINER;
use forgerunner_core::validate::{CLASSES_FIELD, MAX_LABEL_LEN, SpecViolation, violation};
use forgerunner_http::spec_rules::{self as rules, BlockFields};
use k8s_openapi::api::core::v1::Container;

use crate::labels::{DEFAULT_DOCKER_IMAGE, RunnerLabel, parse_labels};
use crate::pod::DATA_DIR;

/// Paths of `spec.forgejo`'s fields, which the shared rules name.
pub(crate) const FIELDS: BlockFields = forgerunner_http::block_fields!("forgejo");

/// Field of the label rules.
const LABELS_FIELD: &str = FIELDS.labels;

/// The rules of `spec.forgejo`; empty when valid.
pub fn validate_forgejo(fj: &ForgejoSpec) -> Vec<SpecViolation> {
    let (org, user, repo) = (fj.org.as_deref(), fj.user.as_deref(), fj.repo.as_deref());
    let mut out = Vec::new();
    rules::check_name_lengths(&FIELDS, org, user, repo, &mut out);
    rules::check_url(&FIELDS, &fj.url, &mut out);
    rules::check_credentials(&FIELDS, &fj.credentials, &mut out);
    rules::check_poll_interval(&FIELDS, fj.poll_interval_seconds, &mut out);
    rules::check_proxy_url(&FIELDS, fj.proxy_url.as_deref(), &mut out);
    rules::check_ca_bundle_config_map(&FIELDS, fj.ca_bundle_config_map.as_deref(), &mut out);
    rules::check_label_count(&FIELDS, &fj.labels, &mut out);
    check_labels(&fj.labels, &mut out);
    rules::check_scope(&FIELDS, fj.scope, org, user, repo, &mut out);
    out
}

/// Forgejo's label forms, then the rules that need well-formed labels: no name twice, no `lxc`.
fn check_labels(labels: &[String], out: &mut Vec<SpecViolation>) {
    let valid = |l: &str| l.len() <= MAX_LABEL_LEN && parse_labels(&[l]).is_ok();
    let forms = "name, name:host, name:docker://image or name:lxc://template";
    if !rules::check_label_forms(&FIELDS, labels, valid, forms, out) {
        return;
    }
    if let Err(e) = parse_labels(labels) {
        // Each label is fine alone, so the set repeats a name.
        out.push(violation(LABELS_FIELD, e.to_string()));
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

/// [`validate_docker_daemon`] for the labels of `spec.classes`: a runner of a class declares
/// them too (`one-job --label`), so a docker label of a class needs the same daemon. One
/// violation per class with docker labels, naming `spec.classes` and the class. Labels that do
/// not parse are the common class rules' (`forgerunner_core::validate`).
pub fn validate_class_docker_daemon(spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    if spec.classes.is_empty()
        || spec.container_mode_type() == Some(ContainerModeType::Dind)
        || template_brings_docker(spec)
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    for class in &spec.classes {
        let docker: Vec<&String> = class
            .labels
            .iter()
            .filter(|l| {
                parse_labels(&[l.as_str()])
                    .is_ok_and(|s| matches!(s.labels()[0].1, RunnerLabel::Docker { .. }))
            })
            .collect();
        let Some(first) = docker.first() else {
            continue;
        };
        let name = first.split(':').next().unwrap_or_default();
        let quoted: Vec<String> = docker.iter().map(|l| format!("{l:?}")).collect();
        out.push(violation(
            CLASSES_FIELD,
            format!(
                "class {}: label(s) {} run jobs in Docker containers (a label without a scheme is \
                 docker://{DEFAULT_DOCKER_IMAGE}); forgejo-runner exits at start without a Docker \
                 daemon: set containerMode.type: dind, set DOCKER_HOST on the runner container in \
                 spec.template, or give each a host scheme ({name}:host)",
                class.name,
                quoted.join(", ")
            ),
        ));
    }
    out
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
    rules::check_container_mode(spec)
}

#[cfg(test)]
mod class_tests;
#[cfg(test)]
mod container_mode_tests;

#[cfg(test)]
mod tests;
