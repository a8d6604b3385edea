//! Resolving a container's environment and mounted Secret/ConfigMap files, as the kubelet does
//! before it starts a container. Pure: Secrets and ConfigMaps come through [`SourceLookup`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVarSource, Pod, Volume};
use thiserror::Error;

/// Where the resolver reads Secrets and ConfigMaps (decoded to text).
pub trait SourceLookup {
    /// The data of Secret `namespace/name`, or `None` when it does not exist.
    fn secret(&self, namespace: &str, name: &str) -> Option<BTreeMap<String, String>>;
    /// The data of ConfigMap `namespace/name`, or `None` when it does not exist.
    fn config_map(&self, namespace: &str, name: &str) -> Option<BTreeMap<String, String>>;
}

/// Runtime facts the downward API can expose (`fieldRef`).
#[derive(Clone, Debug, Default)]
pub struct FieldContext {
    /// Simulated node name.
    pub node_name: String,
    /// IP the pod gets.
    pub pod_ip: String,
    /// IP of the simulated node.
    pub host_ip: String,
}

/// The two kinds of object a container can draw configuration from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// A core/v1 Secret.
    Secret,
    /// A core/v1 ConfigMap.
    ConfigMap,
}

impl SourceKind {
    fn lower(self) -> &'static str {
        match self {
            SourceKind::Secret => "secret",
            SourceKind::ConfigMap => "configmap",
        }
    }

    fn title(self) -> &'static str {
        match self {
            SourceKind::Secret => "Secret",
            SourceKind::ConfigMap => "ConfigMap",
        }
    }
}

/// Why a container cannot start yet; the messages follow the kubelet's wording.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A required Secret or ConfigMap referenced by env does not exist.
    #[error("{} \"{name}\" not found", kind.lower())]
    NotFound {
        /// Secret or ConfigMap.
        kind: SourceKind,
        /// Its name.
        name: String,
    },
    /// The object exists but lacks the referenced key.
    #[error("couldn't find key {key} in {} {namespace}/{name}", kind.title())]
    KeyNotFound {
        /// Secret or ConfigMap.
        kind: SourceKind,
        /// Namespace of the object.
        namespace: String,
        /// Its name.
        name: String,
        /// The missing key.
        key: String,
    },
    /// A volume cannot be mounted (the pod stays `ContainerCreating`).
    #[error("MountVolume.SetUp failed for volume \"{volume}\" : {cause}")]
    Mount {
        /// Volume name.
        volume: String,
        /// What is missing.
        cause: Box<ConfigError>,
    },
    /// A `fieldRef` names a field the simulator does not know.
    #[error("unsupported fieldRef {0}")]
    UnsupportedField(String),
}

impl ConfigError {
    /// The container waiting reason the kubelet reports for this error.
    pub fn waiting_reason(&self) -> &'static str {
        match self {
            ConfigError::Mount { .. } => "ContainerCreating",
            _ => "CreateContainerConfigError",
        }
    }
}

/// A container's resolved configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Environment variables.
    pub env: BTreeMap<String, String>,
    /// Mounted files: full path → content.
    pub files: BTreeMap<String, String>,
}

/// Resolves `container`'s env (envFrom, then env, with `$(VAR)` expansion) and mounted files.
pub fn resolve(
    pod: &Pod,
    container: &Container,
    lookup: &dyn SourceLookup,
    ctx: &FieldContext,
) -> Result<Resolved, ConfigError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut env = BTreeMap::new();
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.as_deref().unwrap_or("");
        let found = if let Some(r) = &source.config_map_ref {
            fetch(lookup, SourceKind::ConfigMap, namespace, &r.name, r.optional)?
        } else if let Some(r) = &source.secret_ref {
            fetch(lookup, SourceKind::Secret, namespace, &r.name, r.optional)?
        } else {
            None
        };
        for (key, value) in found.into_iter().flatten() {
            env.insert(format!("{prefix}{key}"), value);
        }
    }
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (_, Some(from)) => value_from(pod, namespace, from, lookup, ctx)?,
            (Some(value), None) => Some(expand(value, &env)),
            (None, None) => Some(String::new()),
        };
        if let Some(value) = value {
            env.insert(var.name.clone(), value);
        }
    }
    let files = mounted_files(pod, container, namespace, lookup)?;
    Ok(Resolved { env, files })
}

fn fetch(
    lookup: &dyn SourceLookup,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    optional: Option<bool>,
) -> Result<Option<BTreeMap<String, String>>, ConfigError> {
    let found = match kind {
        SourceKind::Secret => lookup.secret(namespace, name),
        SourceKind::ConfigMap => lookup.config_map(namespace, name),
    };
    match found {
        Some(data) => Ok(Some(data)),
        None if optional.unwrap_or(false) => Ok(None),
        None => Err(ConfigError::NotFound {
            kind,
            name: name.to_owned(),
        }),
    }
}

fn fetch_key(
    lookup: &dyn SourceLookup,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    key: &str,
    optional: Option<bool>,
) -> Result<Option<String>, ConfigError> {
    let Some(data) = fetch(lookup, kind, namespace, name, optional)? else {
        return Ok(None);
    };
    match data.get(key) {
        Some(value) => Ok(Some(value.clone())),
        None if optional.unwrap_or(false) => Ok(None),
        None => Err(ConfigError::KeyNotFound {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
        }),
    }
}

fn value_from(
    pod: &Pod,
    namespace: &str,
    from: &EnvVarSource,
    lookup: &dyn SourceLookup,
    ctx: &FieldContext,
) -> Result<Option<String>, ConfigError> {
    if let Some(r) = &from.secret_key_ref {
        return fetch_key(lookup, SourceKind::Secret, namespace, &r.name, &r.key, r.optional);
    }
    if let Some(r) = &from.config_map_key_ref {
        return fetch_key(
            lookup,
            SourceKind::ConfigMap,
            namespace,
            &r.name,
            &r.key,
            r.optional,
        );
    }
    if let Some(r) = &from.field_ref {
        return field(pod, &r.field_path, ctx).map(Some);
    }
    // resourceFieldRef: the simulator has no resource model, so the variable is left unset.
    Ok(None)
}

fn field(pod: &Pod, path: &str, ctx: &FieldContext) -> Result<String, ConfigError> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let from_map = |map: &Option<BTreeMap<String, String>>, rest: &str| {
        let key = rest.trim_start_matches("['").trim_end_matches("']");
        map.as_ref().and_then(|m| m.get(key)).cloned().unwrap_or_default()
    };
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| ctx.node_name.clone()),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".to_owned()),
        "status.podIP" | "status.podIPs" => ctx.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => ctx.host_ip.clone(),
        other => {
            if let Some(rest) = other.strip_prefix("metadata.labels") {
                from_map(&meta.labels, rest)
            } else if let Some(rest) = other.strip_prefix("metadata.annotations") {
                from_map(&meta.annotations, rest)
            } else {
                return Err(ConfigError::UnsupportedField(other.to_owned()));
            }
        }
    };
    Ok(value)
}

/// Expands `$(NAME)` from already defined variables; `$$` escapes; unknown names stay literal.
pub fn expand(input: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match env.get(name) {
                Some(value) => out.push_str(value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn mounted_files(
    pod: &Pod,
    container: &Container,
    namespace: &str,
    lookup: &dyn SourceLookup,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    let mut files = BTreeMap::new();
    for mount in container.volume_mounts.iter().flatten() {
        let Some(volume) = volumes.and_then(|v| v.iter().find(|v| v.name == mount.name)) else {
            continue;
        };
        let Some(contents) = volume_files(volume, namespace, lookup)? else {
            continue;
        };
        let base = mount.mount_path.trim_end_matches('/');
        match mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => {
                if let Some(content) = contents.get(sub) {
                    files.insert(base.to_owned(), content.clone());
                }
            }
            None => {
                for (rel, content) in contents {
                    files.insert(format!("{base}/{rel}"), content);
                }
            }
        }
    }
    Ok(files)
}

/// The files a secret/configMap volume holds (relative path → content); `None` for other types
/// or an absent optional source.
fn volume_files(
    volume: &Volume,
    namespace: &str,
    lookup: &dyn SourceLookup,
) -> Result<Option<BTreeMap<String, String>>, ConfigError> {
    let (kind, name, items, optional) = if let Some(s) = &volume.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        (SourceKind::Secret, name, &s.items, s.optional)
    } else if let Some(c) = &volume.config_map {
        (SourceKind::ConfigMap, c.name.clone(), &c.items, c.optional)
    } else {
        return Ok(None);
    };
    let mount_error = |cause: ConfigError| ConfigError::Mount {
        volume: volume.name.clone(),
        cause: Box::new(cause),
    };
    let Some(data) = fetch(lookup, kind, namespace, &name, optional).map_err(mount_error)? else {
        return Ok(None);
    };
    let Some(items) = items else {
        return Ok(Some(data));
    };
    let mut out = BTreeMap::new();
    for item in items {
        match data.get(&item.key) {
            Some(content) => {
                out.insert(item.path.clone(), content.clone());
            }
            None if optional.unwrap_or(false) => {}
            None => {
                return Err(mount_error(ConfigError::KeyNotFound {
                    kind,
                    namespace: namespace.to_owned(),
                    name,
                    key: item.key.clone(),
                }));
            }
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    #[derive(Default)]
    struct Maps {
        secrets: HashMap<String, BTreeMap<String, String>>,
        config_maps: HashMap<String, BTreeMap<String, String>>,
    }

    impl SourceLookup for Maps {
        fn secret(&self, namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
            self.secrets.get(&format!("{namespace}/{name}")).cloned()
        }
        fn config_map(&self, namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
            self.config_maps.get(&format!("{namespace}/{name}")).cloned()
        }
    }

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p1", "namespace": "ns", "uid": "u1", "labels": {"app": "x"}},
            "spec": spec,
        }))
        .unwrap()
    }

    fn run(pod: &Pod, maps: &Maps) -> Result<Resolved, ConfigError> {
        let container = &pod.spec.as_ref().unwrap().containers[0];
        let ctx = FieldContext {
            node_name: "node".into(),
            pod_ip: "10.0.0.9".into(),
            host_ip: "h".into(),
        };
        resolve(pod, container, maps, &ctx)
    }

    #[test]
    fn env_sources_and_expansion() {
        let mut maps = Maps::default();
        maps.secrets
            .insert("ns/creds".into(), data(&[("token", "s3cret")]));
        maps.config_maps
            .insert("ns/cfg".into(), data(&[("url", "http://x"), ("a", "1")]));
        let p = pod(json!({"containers": [{"name": "runner", "image": "img",
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
        "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "URL", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "url"}}},
            {"name": "FULL", "value": "$(URL)/api $$(URL) $(NOPE)"},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        ]}]}));
        let r = run(&p, &maps).unwrap();
        assert_eq!(r.env["TOKEN"], "s3cret");
        assert_eq!(r.env["URL"], "http://x");
        assert_eq!(r.env["CFG_a"], "1");
        assert_eq!(r.env["FULL"], "http://x/api $(URL) $(NOPE)");
        assert!(!r.env.contains_key("OPT"));
        assert_eq!(r.env["POD"], "p1");
        assert_eq!(r.env["APP"], "x");
        assert_eq!(r.env["IP"], "10.0.0.9");
    }

    #[test]
    fn missing_secret_and_key_are_config_errors() {
        let mut maps = Maps::default();
        let p = pod(json!({"containers": [{"name": "c", "image": "i",
            "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]}]}));
        let err = run(&p, &maps).unwrap_err();
        assert_eq!(err.to_string(), "secret \"creds\" not found");
        assert_eq!(err.waiting_reason(), "CreateContainerConfigError");
        maps.secrets.insert("ns/creds".into(), data(&[("other", "v")]));
        let err = run(&p, &maps).unwrap_err();
        assert_eq!(err.to_string(), "couldn't find key token in Secret ns/creds");
    }

    #[test]
    fn volumes_items_subpath_and_missing_mount() {
        let mut maps = Maps::default();
        maps.secrets
            .insert("ns/s".into(), data(&[("a", "A"), ("b", "B")]));
        maps.config_maps
            .insert("ns/c".into(), data(&[("x", "X"), ("y", "Y")]));
        let p = pod(json!({
        "volumes": [
            {"name": "sv", "secret": {"secretName": "s"}},
            {"name": "cv", "configMap": {"name": "c", "items": [{"key": "y", "path": "dir/why"}]}},
            {"name": "empty", "emptyDir": {}},
            {"name": "opt", "secret": {"secretName": "missing", "optional": true}}
        ],
        "containers": [{"name": "c", "image": "i", "volumeMounts": [
            {"name": "sv", "mountPath": "/etc/s/"},
            {"name": "cv", "mountPath": "/etc/c"},
            {"name": "sv", "mountPath": "/one", "subPath": "b"},
            {"name": "empty", "mountPath": "/tmp"},
            {"name": "opt", "mountPath": "/opt"}
        ]}]}));
        let r = run(&p, &maps).unwrap();
        assert_eq!(
            r.files,
            data(&[
                ("/etc/s/a", "A"),
                ("/etc/s/b", "B"),
                ("/etc/c/dir/why", "Y"),
                ("/one", "B")
            ])
        );
        maps.secrets.clear();
        let err = run(&p, &maps).unwrap_err();
        assert_eq!(err.waiting_reason(), "ContainerCreating");
        assert!(err.to_string().contains("secret \"s\" not found"), "{err}");
    }

    #[test]
    fn expand_edge_cases_do_not_panic() {
        let env = data(&[("A", "1")]);
        assert_eq!(expand("$", &env), "$");
        assert_eq!(expand("$(A", &env), "$(A");
        assert_eq!(expand("x$(A)y$$", &env), "x1y$");
        assert_eq!(expand("é$(A)ü", &env), "é1ü");
    }
}
