//! The security settings every default runner pod carries, so that namespaces enforcing the
//! `restricted` Pod Security profile admit it ([`super::restricted`] checks the result).
//!
//! Only unset fields are filled: a value a forge or a mode set on purpose (the privileged `dind`
//! sidecar, the token a `kubernetes` mode needs) is kept. The user's `spec.template` is merged
//! afterwards and may still replace any of it.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

/// The capability set every unprivileged container drops.
pub const DROP_ALL: &str = "ALL";
/// The seccomp profile of every runner pod: the container runtime's default filter.
pub const SECCOMP_RUNTIME_DEFAULT: &str = "RuntimeDefault";

/// The numeric user and group a runner image's runner process runs as.
///
/// Numeric because the kubelet can enforce `runAsNonRoot` only on a numeric user, and because
/// some runner images (Gitea's basic act_runner) would otherwise run as root. `group` is also the
/// pod's `fsGroup`, so that volumes (emptyDirs, the `kubernetes` mode work volume, the `dind`
/// socket) are writable by the runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// `runAsUser` (never 0).
    pub user: i64,
    /// `runAsGroup` and `fsGroup`.
    pub group: i64,
}

/// Fills the restricted-profile settings into `pod`: a non-root, RuntimeDefault-seccomp pod
/// running as `run_as`, every unprivileged container without privilege escalation or
/// capabilities, and no ServiceAccount token unless something asked for one.
pub fn harden(pod: &mut PodSpec, run_as: RunAs) {
    let sc = pod
        .security_context
        .get_or_insert_with(PodSecurityContext::default);
    sc.run_as_non_root.get_or_insert(true);
    sc.run_as_user.get_or_insert(run_as.user);
    sc.run_as_group.get_or_insert(run_as.group);
    sc.fs_group.get_or_insert(run_as.group);
    sc.seccomp_profile.get_or_insert_with(|| SeccompProfile {
        type_: SECCOMP_RUNTIME_DEFAULT.to_owned(),
        localhost_profile: None,
    });
    // Workflow code runs in this pod: it gets no API credentials unless a mode needs them (the
    // `kubernetes` modes set `true` before this runs).
    pod.automount_service_account_token.get_or_insert(false);
    for c in pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten())
    {
        harden_container(c);
    }
}

/// Fills the restricted-profile settings into one container, unless it is privileged on purpose
/// (a privileged container with `allowPrivilegeEscalation: false` is rejected by the API server).
pub fn harden_container(c: &mut Container) {
    let sc = c.security_context.get_or_insert_with(SecurityContext::default);
    if sc.privileged == Some(true) {
        return;
    }
    sc.allow_privilege_escalation.get_or_insert(false);
    sc.run_as_non_root.get_or_insert(true);
    let caps = sc.capabilities.get_or_insert_with(Capabilities::default);
    let drop = caps.drop.get_or_insert_with(Vec::new);
    if !drop.iter().any(|d| d == DROP_ALL) {
        drop.push(DROP_ALL.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner_pod::restricted::restricted_violations;

    const RUN_AS: RunAs = RunAs {
        user: 1000,
        group: 1000,
    };

    fn pod() -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "runner".into(),
                image: Some("img".into()),
                ..Container::default()
            }],
            init_containers: Some(vec![Container {
                name: "setup".into(),
                ..Container::default()
            }]),
            ..PodSpec::default()
        }
    }

    #[test]
    fn a_bare_pod_breaks_restricted_and_a_hardened_one_passes() {
        let mut p = pod();
        assert!(!restricted_violations(&p).is_empty());
        harden(&mut p, RUN_AS);
        assert_eq!(restricted_violations(&p), []);
        let sc = p.security_context.as_ref().expect("pod context");
        assert_eq!(
            (sc.run_as_user, sc.run_as_group, sc.fs_group, sc.run_as_non_root),
            (Some(1000), Some(1000), Some(1000), Some(true))
        );
        assert_eq!(p.automount_service_account_token, Some(false));
        for c in p.containers.iter().chain(p.init_containers.iter().flatten()) {
            let sc = c.security_context.as_ref().expect("container context");
            assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
            assert_eq!(
                sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
                Some(vec!["ALL".to_owned()])
            );
        }
    }

    #[test]
    fn explicit_values_are_kept() {
        let mut p = pod();
        p.automount_service_account_token = Some(true);
        p.init_containers = Some(vec![Container {
            name: "dind".into(),
            security_context: Some(SecurityContext {
                privileged: Some(true),
                ..SecurityContext::default()
            }),
            ..Container::default()
        }]);
        harden(&mut p, RUN_AS);
        harden(&mut p, RUN_AS);
        assert_eq!(p.automount_service_account_token, Some(true));
        let dind = &p.init_containers.as_ref().expect("init")[0];
        let sc = dind.security_context.as_ref().expect("context");
        // Untouched: privileged containers must not get allowPrivilegeEscalation: false.
        assert_eq!(sc.allow_privilege_escalation, None);
        assert_eq!(sc.capabilities, None);
        // Idempotent: ALL dropped once.
        let runner = &p.containers[0];
        let drop = runner
            .security_context
            .as_ref()
            .and_then(|s| s.capabilities.as_ref())
            .and_then(|c| c.drop.clone());
        assert_eq!(drop, Some(vec!["ALL".to_owned()]));
    }
}
