//! The Kubernetes Pod Security Standards **restricted** profile (baseline rules included), checked
//! in code over a pod spec, as `PodSecurity` admission does for a namespace labelled
//! `pod-security.kubernetes.io/enforce: restricted` (Kubernetes 1.33 rules).
//!
//! Used to prove in tests that the default runner pods are admitted by such namespaces, and that
//! modes which cannot be (`dind`) say why. Only the pod spec is checked: the AppArmor
//! *annotations* of older clusters live in the pod's metadata and are out of reach here (the
//! default pods set none).

use std::fmt;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, ContainerPort, PodSpec, SELinuxOptions, SeccompProfile, SecurityContext, Volume,
    WindowsSecurityContextOptions,
};

/// One check of the Pod Security Standards; [`PssRule::as_str`] is PodSecurity admission's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PssRule {
    /// Windows HostProcess containers are forbidden.
    HostProcess,
    /// `hostNetwork`, `hostPID` and `hostIPC` are forbidden.
    HostNamespaces,
    /// `privileged` containers are forbidden.
    Privileged,
    /// Every container drops `ALL` and adds nothing but `NET_BIND_SERVICE`.
    Capabilities,
    /// `hostPath` volumes are forbidden.
    HostPathVolumes,
    /// `hostPort` is forbidden.
    HostPorts,
    /// AppArmor profiles other than `RuntimeDefault` or `Localhost` are forbidden.
    AppArmor,
    /// SELinux: only the container types, and no custom user or role.
    SeLinux,
    /// `procMount` other than `Default` is forbidden.
    ProcMount,
    /// A seccomp profile `RuntimeDefault` or `Localhost` on the pod or on every container.
    Seccomp,
    /// Only the namespaced, safe sysctls.
    Sysctls,
    /// Only configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected
    /// and secret volumes.
    VolumeTypes,
    /// `allowPrivilegeEscalation: false` on every container.
    PrivilegeEscalation,
    /// `runAsNonRoot: true` on the pod or on every container.
    RunAsNonRoot,
    /// `runAsUser` must not be 0.
    RunAsUser,
}

impl PssRule {
    /// PodSecurity admission's name for the check (the restricted variant where one exists).
    pub fn as_str(self) -> &'static str {
        match self {
            PssRule::HostProcess => "hostProcess",
            PssRule::HostNamespaces => "hostNamespaces",
            PssRule::Privileged => "privileged",
            PssRule::Capabilities => "capabilities_restricted",
            PssRule::HostPathVolumes => "hostPathVolumes",
            PssRule::HostPorts => "hostPorts",
            PssRule::AppArmor => "appArmorProfile",
            PssRule::SeLinux => "seLinuxOptions",
            PssRule::ProcMount => "procMount",
            PssRule::Seccomp => "seccompProfile_restricted",
            PssRule::Sysctls => "sysctls",
            PssRule::VolumeTypes => "restrictedVolumes",
            PssRule::PrivilegeEscalation => "allowPrivilegeEscalation",
            PssRule::RunAsNonRoot => "runAsNonRoot",
            PssRule::RunAsUser => "runAsUser",
        }
    }
}

impl fmt::Display for PssRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A place in the pod spec that breaks a rule of the restricted profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSecurityViolation {
    /// The rule broken.
    pub rule: PssRule,
    /// Path of the offending field, e.g. `spec.initContainers[dind].securityContext.privileged`.
    pub field: String,
    /// What is wrong, in words an operator can act on.
    pub message: String,
}

impl fmt::Display for PodSecurityViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.rule, self.field, self.message)
    }
}

/// The only capability the restricted profile lets a container add.
pub const ALLOWED_ADDED_CAPABILITY: &str = "NET_BIND_SERVICE";

/// SELinux types the baseline profile allows (empty is allowed too).
const ALLOWED_SELINUX_TYPES: [&str; 4] = [
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// The safe (namespaced, non-interfering) sysctls of the baseline profile.
const SAFE_SYSCTLS: [&str; 12] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// Volume sources (JSON field names) the restricted profile allows.
const ALLOWED_VOLUME_SOURCES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// One container of any kind, as the checks see it.
struct Ctr<'a> {
    /// `spec.containers[name]`, `spec.initContainers[name]` or `spec.ephemeralContainers[name]`.
    path: String,
    sc: Option<&'a SecurityContext>,
    ports: &'a [ContainerPort],
}

fn all_containers(pod: &PodSpec) -> Vec<Ctr<'_>> {
    let regular = pod.containers.iter().map(|c| Ctr {
        path: format!("spec.containers[{}]", c.name),
        sc: c.security_context.as_ref(),
        ports: c.ports.as_deref().unwrap_or_default(),
    });
    let init = pod.init_containers.iter().flatten().map(|c| Ctr {
        path: format!("spec.initContainers[{}]", c.name),
        sc: c.security_context.as_ref(),
        ports: c.ports.as_deref().unwrap_or_default(),
    });
    let ephemeral = pod.ephemeral_containers.iter().flatten().map(|c| Ctr {
        path: format!("spec.ephemeralContainers[{}]", c.name),
        sc: c.security_context.as_ref(),
        ports: c.ports.as_deref().unwrap_or_default(),
    });
    init.chain(regular).chain(ephemeral).collect()
}

/// Collects violations.
struct Report(Vec<PodSecurityViolation>);

impl Report {
    fn add(&mut self, rule: PssRule, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(PodSecurityViolation {
            rule,
            field: field.into(),
            message: message.into(),
        });
    }
}

/// Every way `pod` breaks the restricted profile; empty when a `restricted` namespace admits it.
pub fn restricted_violations(pod: &PodSpec) -> Vec<PodSecurityViolation> {
    let mut r = Report(Vec::new());
    // The profile exempts Windows pods from the Linux-only rules.
    let linux = pod.os.as_ref().is_none_or(|os| os.name != "windows");
    let ctrs = all_containers(pod);
    check_host_namespaces(pod, &mut r);
    check_volumes(pod.volumes.as_deref().unwrap_or_default(), &mut r);
    check_pod_context(pod, &mut r);
    for c in &ctrs {
        check_container(c, linux, &mut r);
    }
    if linux {
        check_seccomp(pod, &ctrs, &mut r);
    }
    check_run_as_non_root(pod, &ctrs, &mut r);
    r.0
}

fn check_host_namespaces(pod: &PodSpec, r: &mut Report) {
    for (field, set) in [
        ("spec.hostNetwork", pod.host_network),
        ("spec.hostPID", pod.host_pid),
        ("spec.hostIPC", pod.host_ipc),
    ] {
        if set == Some(true) {
            r.add(PssRule::HostNamespaces, field, "must not be true");
        }
    }
}

fn check_volumes(volumes: &[Volume], r: &mut Report) {
    for v in volumes {
        let field = format!("spec.volumes[{}]", v.name);
        if v.host_path.is_some() {
            r.add(
                PssRule::HostPathVolumes,
                format!("{field}.hostPath"),
                "hostPath volumes are forbidden",
            );
        }
        // Through JSON so that every source type, present and future, is caught by its name.
        let Ok(serde_json::Value::Object(map)) = serde_json::to_value(v) else {
            continue;
        };
        for source in map.keys().filter(|k| k.as_str() != "name") {
            if !ALLOWED_VOLUME_SOURCES.contains(&source.as_str()) {
                r.add(
                    PssRule::VolumeTypes,
                    format!("{field}.{source}"),
                    format!("volume type {source} is not allowed (only {ALLOWED_VOLUME_SOURCES:?})"),
                );
            }
        }
    }
}

fn check_pod_context(pod: &PodSpec, r: &mut Report) {
    let Some(sc) = pod.security_context.as_ref() else {
        return;
    };
    let base = "spec.securityContext";
    check_host_process(sc.windows_options.as_ref(), base, r);
    check_app_armor(sc.app_armor_profile.as_ref(), base, r);
    check_se_linux(sc.se_linux_options.as_ref(), base, r);
    if sc.run_as_user == Some(0) {
        r.add(PssRule::RunAsUser, format!("{base}.runAsUser"), "must not be 0");
    }
    for s in sc.sysctls.iter().flatten() {
        if !SAFE_SYSCTLS.contains(&s.name.as_str()) {
            r.add(
                PssRule::Sysctls,
                format!("{base}.sysctls[{}]", s.name),
                "only the safe namespaced sysctls are allowed",
            );
        }
    }
}

fn check_container(c: &Ctr<'_>, linux: bool, r: &mut Report) {
    for p in c.ports {
        if p.host_port.is_some_and(|h| h != 0) {
            r.add(
                PssRule::HostPorts,
                format!("{}.ports[{}].hostPort", c.path, p.container_port),
                "must be unset or 0",
            );
        }
    }
    let sc_path = format!("{}.securityContext", c.path);
    let sc = c.sc;
    if sc.and_then(|s| s.privileged) == Some(true) {
        r.add(
            PssRule::Privileged,
            format!("{sc_path}.privileged"),
            "privileged containers are forbidden",
        );
    }
    if let Some(sc) = sc {
        check_host_process(sc.windows_options.as_ref(), &sc_path, r);
        check_app_armor(sc.app_armor_profile.as_ref(), &sc_path, r);
        check_se_linux(sc.se_linux_options.as_ref(), &sc_path, r);
        if sc.proc_mount.as_deref().is_some_and(|m| m != "Default") {
            r.add(
                PssRule::ProcMount,
                format!("{sc_path}.procMount"),
                "must be Default",
            );
        }
        if sc.run_as_user == Some(0) {
            r.add(
                PssRule::RunAsUser,
                format!("{sc_path}.runAsUser"),
                "must not be 0",
            );
        }
    }
    if !linux {
        return;
    }
    if sc.and_then(|s| s.allow_privilege_escalation) != Some(false) {
        r.add(
            PssRule::PrivilegeEscalation,
            format!("{sc_path}.allowPrivilegeEscalation"),
            "must be false",
        );
    }
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    for add in caps.and_then(|c| c.add.as_ref()).into_iter().flatten() {
        if add != ALLOWED_ADDED_CAPABILITY {
            r.add(
                PssRule::Capabilities,
                format!("{sc_path}.capabilities.add"),
                format!("must not add {add} (only {ALLOWED_ADDED_CAPABILITY})"),
            );
        }
    }
    if !caps
        .and_then(|c| c.drop.as_ref())
        .is_some_and(|d| d.iter().any(|x| x == "ALL"))
    {
        r.add(
            PssRule::Capabilities,
            format!("{sc_path}.capabilities.drop"),
            "must drop ALL",
        );
    }
}

fn check_host_process(w: Option<&WindowsSecurityContextOptions>, base: &str, r: &mut Report) {
    if w.and_then(|w| w.host_process) == Some(true) {
        r.add(
            PssRule::HostProcess,
            format!("{base}.windowsOptions.hostProcess"),
            "HostProcess containers are forbidden",
        );
    }
}

fn check_app_armor(p: Option<&AppArmorProfile>, base: &str, r: &mut Report) {
    if let Some(p) = p
        && !matches!(p.type_.as_str(), "RuntimeDefault" | "Localhost")
    {
        r.add(
            PssRule::AppArmor,
            format!("{base}.appArmorProfile.type"),
            format!("{} is not allowed (RuntimeDefault or Localhost)", p.type_),
        );
    }
}

fn check_se_linux(o: Option<&SELinuxOptions>, base: &str, r: &mut Report) {
    let Some(o) = o else { return };
    let set = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
    if let Some(t) = o.type_.as_deref().filter(|t| !t.is_empty())
        && !ALLOWED_SELINUX_TYPES.contains(&t)
    {
        r.add(
            PssRule::SeLinux,
            format!("{base}.seLinuxOptions.type"),
            format!("{t} is not allowed (only {ALLOWED_SELINUX_TYPES:?})"),
        );
    }
    for (name, v) in [("user", &o.user), ("role", &o.role)] {
        if set(v) {
            r.add(
                PssRule::SeLinux,
                format!("{base}.seLinuxOptions.{name}"),
                "must not be set",
            );
        }
    }
}

fn seccomp_ok(p: Option<&SeccompProfile>) -> Option<bool> {
    p.map(|p| matches!(p.type_.as_str(), "RuntimeDefault" | "Localhost"))
}

fn check_seccomp(pod: &PodSpec, ctrs: &[Ctr<'_>], r: &mut Report) {
    let pod_level = seccomp_ok(
        pod.security_context
            .as_ref()
            .and_then(|s| s.seccomp_profile.as_ref()),
    );
    if pod_level == Some(false) {
        r.add(
            PssRule::Seccomp,
            "spec.securityContext.seccompProfile.type",
            "must be RuntimeDefault or Localhost",
        );
    }
    for c in ctrs {
        let own = seccomp_ok(c.sc.and_then(|s| s.seccomp_profile.as_ref()));
        // A container's own profile wins; without one it inherits the pod's.
        let bad = match own {
            Some(ok) => !ok,
            None => pod_level != Some(true),
        };
        if bad {
            r.add(
                PssRule::Seccomp,
                format!("{}.securityContext.seccompProfile.type", c.path),
                "must be RuntimeDefault or Localhost (here or on the pod)",
            );
        }
    }
}

fn check_run_as_non_root(pod: &PodSpec, ctrs: &[Ctr<'_>], r: &mut Report) {
    let pod_level = pod.security_context.as_ref().and_then(|s| s.run_as_non_root);
    if pod_level == Some(false) {
        r.add(
            PssRule::RunAsNonRoot,
            "spec.securityContext.runAsNonRoot",
            "must not be false",
        );
    }
    for c in ctrs {
        let ok = match c.sc.and_then(|s| s.run_as_non_root) {
            Some(own) => own,
            None => pod_level == Some(true),
        };
        if !ok {
            r.add(
                PssRule::RunAsNonRoot,
                format!("{}.securityContext.runAsNonRoot", c.path),
                "must be true (here or on the pod)",
            );
        }
    }
}

#[cfg(test)]
mod tests;
