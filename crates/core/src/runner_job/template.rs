//! Merge of the user's `spec.template` onto the forge's default runner pod.
//!
//! Rules (after ARC's listener-template ADR, adapted to runner pods):
//! - the container named `runner` (or, in the default pod, the first container when none is
//!   named so) is the runner container; a template container of the same name merges into it:
//!   `image`, `command` and every other scalar or object field replace the default only when
//!   set; `env`, `envFrom`, `args`, `ports`, `volumeMounts` and `volumeDevices` are appended,
//!   except entries that collide with the default (same env name, mount path, port number,
//!   device path), which keep the default because the runner needs them;
//! - any other template container or init container with the name of a default one merges the
//!   same way; the rest are appended in template order;
//! - `volumes` are appended; a template volume named like a default volume is ignored (the
//!   default volumes carry the runner's secret material);
//! - pod fields replace the default when set in the template, except the reserved ones:
//!   `restartPolicy` (always `Never`) and `ephemeralContainers`. `serviceAccountName` *is*
//!   taken from the template: runners commonly need a workload identity, and the operator
//!   does not create one of its own;
//! - metadata labels and annotations are added unless the key is reserved (the
//!   `forgerunner.dev/` prefix and `app.kubernetes.io/managed-by`); name and namespace are
//!   never taken from the template.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};

/// Name of the runner container, in the default pod and in templates.
pub const RUNNER_CONTAINER: &str = "runner";

/// Label and annotation key prefix reserved for forgerunner.
pub const RESERVED_PREFIX: &str = "forgerunner.dev/";

/// `restartPolicy` of every runner pod: a runner is ephemeral and never restarted in place.
pub const RESTART_POLICY_NEVER: &str = "Never";

/// Replaces each listed `Option` field of `$dst` with the one of `$src` when that one is set.
macro_rules! take_if_set {
    ($dst:expr, $src:expr, [$($field:ident),* $(,)?]) => {
        $( if $src.$field.is_some() { $dst.$field = $src.$field.clone(); } )*
    };
}

/// Appends `extra` to `base`, skipping entries whose key already appears in `base`.
fn append_unique<T: Clone, K: PartialEq>(
    base: &mut Option<Vec<T>>,
    extra: &Option<Vec<T>>,
    key: impl Fn(&T) -> K,
) {
    let Some(extra) = extra else { return };
    let out = base.get_or_insert_with(Vec::new);
    for item in extra {
        let k = key(item);
        if !out.iter().any(|existing| key(existing) == k) {
            out.push(item.clone());
        }
    }
}

/// Merges a template container into a default one; the default's name is kept.
pub fn merge_container(default: &mut Container, tpl: &Container) {
    if tpl.image.as_deref().is_some_and(|i| !i.is_empty()) {
        default.image = tpl.image.clone();
    }
    if tpl.command.as_ref().is_some_and(|c| !c.is_empty()) {
        default.command = tpl.command.clone();
    }
    take_if_set!(
        default,
        tpl,
        [
            image_pull_policy,
            lifecycle,
            liveness_probe,
            readiness_probe,
            startup_probe,
            resize_policy,
            resources,
            restart_policy,
            security_context,
            stdin,
            stdin_once,
            termination_message_path,
            termination_message_policy,
            tty,
            working_dir,
        ]
    );
    // Appended lists; on a key collision the default entry wins (reserved env and mounts).
    append_unique(&mut default.env, &tpl.env, |e: &EnvVar| e.name.clone());
    if let Some(extra) = &tpl.env_from {
        default
            .env_from
            .get_or_insert_with(Vec::new)
            .extend(extra.iter().cloned());
    }
    if let Some(extra) = &tpl.args {
        default
            .args
            .get_or_insert_with(Vec::new)
            .extend(extra.iter().cloned());
    }
    append_unique(&mut default.ports, &tpl.ports, |p| {
        (p.container_port, p.protocol.clone())
    });
    append_unique(&mut default.volume_mounts, &tpl.volume_mounts, |m| {
        m.mount_path.clone()
    });
    append_unique(&mut default.volume_devices, &tpl.volume_devices, |d| {
        d.device_path.clone()
    });
}

/// Merges template containers into default ones by name; unknown names are appended.
/// `runner_index` names the default container a template `runner` container merges into.
fn merge_containers(defaults: &mut Vec<Container>, tpl: &[Container], runner_index: Option<usize>) {
    for t in tpl {
        let target = if t.name == RUNNER_CONTAINER {
            runner_index.or_else(|| defaults.iter().position(|d| d.name == t.name))
        } else {
            defaults.iter().position(|d| d.name == t.name)
        };
        match target {
            Some(i) => {
                if let Some(d) = defaults.get_mut(i) {
                    merge_container(d, t);
                }
            }
            None => defaults.push(t.clone()),
        }
    }
}

/// Index of the runner container in a default pod: the one named `runner`, else the first.
pub fn runner_container_index(spec: &PodSpec) -> Option<usize> {
    if spec.containers.is_empty() {
        return None;
    }
    Some(
        spec.containers
            .iter()
            .position(|c| c.name == RUNNER_CONTAINER)
            .unwrap_or(0),
    )
}

/// Merges the template's pod spec onto the default one (rules in the module docs) and forces the
/// reserved fields.
pub fn merge_pod_spec(mut default: PodSpec, tpl: Option<&PodSpec>) -> PodSpec {
    let runner_index = runner_container_index(&default);
    if let Some(i) = runner_index
        && let Some(c) = default.containers.get_mut(i)
    {
        c.name = RUNNER_CONTAINER.to_owned();
    }
    if let Some(t) = tpl {
        merge_containers(&mut default.containers, &t.containers, runner_index);
        if let Some(init) = &t.init_containers {
            merge_containers(default.init_containers.get_or_insert_with(Vec::new), init, None);
        }
        append_unique(&mut default.volumes, &t.volumes, |v| v.name.clone());
        take_if_set!(
            default,
            t,
            [
                active_deadline_seconds,
                affinity,
                automount_service_account_token,
                dns_config,
                dns_policy,
                enable_service_links,
                host_aliases,
                host_ipc,
                host_network,
                host_pid,
                host_users,
                hostname,
                image_pull_secrets,
                node_name,
                node_selector,
                os,
                overhead,
                preemption_policy,
                priority,
                priority_class_name,
                readiness_gates,
                resource_claims,
                resources,
                runtime_class_name,
                scheduler_name,
                scheduling_gates,
                security_context,
                service_account,
                service_account_name,
                set_hostname_as_fqdn,
                share_process_namespace,
                subdomain,
                termination_grace_period_seconds,
                tolerations,
                topology_spread_constraints,
            ]
        );
    }
    default.restart_policy = Some(RESTART_POLICY_NEVER.to_owned());
    default.ephemeral_containers = None;
    default
}

/// Whether a label or annotation key is reserved for forgerunner.
pub fn is_reserved_key(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX) || key == super::MANAGED_BY_LABEL
}

/// `ours` plus the template's non-reserved entries; ours always win.
pub fn merge_metadata_map(
    ours: &BTreeMap<String, String>,
    tpl: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = tpl
        .into_iter()
        .flatten()
        .filter(|(k, _)| !is_reserved_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.extend(ours.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

/// The template's pod spec, if the template has one.
pub fn template_spec(tpl: Option<&PodTemplateSpec>) -> Option<&PodSpec> {
    tpl.and_then(|t| t.spec.as_ref())
}
