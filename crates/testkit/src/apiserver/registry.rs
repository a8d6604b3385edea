//! The resource types the fake serves: built-ins with their k8s-openapi types, and the custom
//! resources registered from CRDs.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// A built-in resource type; each maps to a k8s-openapi type used to decode and prune bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// core/v1 Namespace.
    Namespace,
    /// core/v1 Secret.
    Secret,
    /// core/v1 ConfigMap.
    ConfigMap,
    /// core/v1 Pod.
    Pod,
    /// core/v1 Event.
    CoreEvent,
    /// core/v1 ServiceAccount.
    ServiceAccount,
    /// core/v1 Service.
    Service,
    /// core/v1 PersistentVolumeClaim (stored only: no volume is ever bound).
    PersistentVolumeClaim,
    /// batch/v1 Job.
    Job,
    /// events.k8s.io/v1 Event.
    Event,
    /// coordination.k8s.io/v1 Lease.
    Lease,
    /// apps/v1 Deployment (stored only).
    Deployment,
    /// networking.k8s.io/v1 NetworkPolicy (stored only: nothing enforces it).
    NetworkPolicy,
    /// rbac Role (stored only).
    Role,
    /// rbac RoleBinding (stored only).
    RoleBinding,
    /// rbac ClusterRole (stored only).
    ClusterRole,
    /// rbac ClusterRoleBinding (stored only).
    ClusterRoleBinding,
    /// apiextensions CustomResourceDefinition.
    Crd,
}

/// Everything the server knows about one resource type in one version.
#[derive(Clone, Debug)]
pub struct ResourceDef {
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Plural resource name used in paths.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Whether a `/status` subresource exists (status ignored on the main endpoint).
    pub status: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories for kubectl (`all`).
    pub categories: Vec<String>,
    /// The k8s-openapi type for built-ins.
    pub builtin: Option<Builtin>,
    /// The CRD's openAPIV3Schema for custom resources.
    pub schema: Option<Value>,
    /// The CRD's additionalPrinterColumns.
    pub printer_columns: Vec<Value>,
    /// Extra field-selector paths accepted on list and watch.
    pub field_selectors: Vec<String>,
    /// Name of the CRD that defines this type.
    pub crd: Option<String>,
}

impl ResourceDef {
    /// `group/version`, or `version` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The storage key shared by every version of the type.
    pub fn type_key(&self) -> TypeKey {
        if super::event_alias::is_alias(self) {
            return super::event_alias::storage_key();
        }
        TypeKey {
            group: self.group.clone(),
            plural: self.plural.clone(),
        }
    }

    /// Whether `metadata.generation` is maintained (types with a spec).
    pub fn tracks_generation(&self) -> bool {
        self.crd.is_some()
            || matches!(
                self.builtin,
                Some(
                    Builtin::Pod
                        | Builtin::Job
                        | Builtin::Deployment
                        | Builtin::Service
                        | Builtin::NetworkPolicy
                        | Builtin::Crd
                )
            )
    }
}

/// Identifies a type's storage independent of version.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TypeKey {
    /// API group.
    pub group: String,
    /// Plural resource name.
    pub plural: String,
}

struct BuiltinSpec {
    builtin: Builtin,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    status: bool,
    short: &'static [&'static str],
    fields: &'static [&'static str],
}

const BUILTINS: &[BuiltinSpec] = &[
    BuiltinSpec {
        builtin: Builtin::Namespace,
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        namespaced: false,
        status: true,
        short: &["ns"],
        fields: &["status.phase"],
    },
    BuiltinSpec {
        builtin: Builtin::Secret,
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        namespaced: true,
        status: false,
        short: &[],
        fields: &["type"],
    },
    BuiltinSpec {
        builtin: Builtin::ConfigMap,
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        namespaced: true,
        status: false,
        short: &["cm"],
        fields: &[],
    },
    BuiltinSpec {
        builtin: Builtin::Pod,
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        namespaced: true,
        status: true,
        short: &["po"],
        fields: &[
            "status.phase",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.podIP",
            "status.nominatedNodeName",
        ],
    },
    BuiltinSpec {
        builtin: Builtin::CoreEvent,
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        namespaced: true,
        status: false,
        short: &["ev"],
        fields: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
    },
    BuiltinSpec {
        builtin: Builtin::ServiceAccount,
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        namespaced: true,
        status: false,
        short: &["sa"],
        fields: &[],
    },
    BuiltinSpec {
        builtin: Builtin::Service,
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
        namespaced: true,
        status: true,
        short: &["svc"],
        fields: &["spec.clusterIP", "spec.type"],
    },
    BuiltinSpec {
        builtin: Builtin::PersistentVolumeClaim,
        group: "",
        version: "v1",
        kind: "PersistentVolumeClaim",
        plural: "persistentvolumeclaims",
        namespaced: true,
        status: true,
        short: &["pvc"],
        fields: &[],
    },
    BuiltinSpec {
        builtin: Builtin::Job,
        group: "batch",
        version: "v1",
        kind: "Job",
        plural: "jobs",
        namespaced: true,
        status: true,
        short: &[],
        fields: &["status.successful"],
    },
    BuiltinSpec {
        builtin: Builtin::Event,
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        namespaced: true,
        status: false,
        short: &["ev"],
        fields: &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingController",
            "type",
        ],
    },
    BuiltinSpec {
        builtin: Builtin::Lease,
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        namespaced: true,
        status: false,
        short: &[],
        fields: &[],
    },
    BuiltinSpec {
        builtin: Builtin::Deployment,
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
        status: true,
        short: &["deploy"],
        fields: &[],
    },
    BuiltinSpec {
        builtin: Builtin::NetworkPolicy,
        group: "networking.k8s.io",
        version: "v1",
        kind: "NetworkPolicy",
        plural: "networkpolicies",
        namespaced: true,
        status: false,
        short: &["netpol"],
        fields: &[],
    },
    BuiltinSpec {
        builtin: Builtin::Role,
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "Role",
        plural: "roles",
        namespaced: true,
        status: false,
        short: &[],
        fields: &[],
    },
    BuiltinSpec {
        builtin: Builtin::RoleBinding,
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "RoleBinding",
        plural: "rolebindings",
        namespaced: true,
        status: false,
        short: &[],
        fields: &[],
    },
    BuiltinSpec {
        builtin: Builtin::ClusterRole,
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "ClusterRole",
        plural: "clusterroles",
        namespaced: false,
        status: false,
        short: &[],
        fields: &[],
    },
    BuiltinSpec {
        builtin: Builtin::ClusterRoleBinding,
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "ClusterRoleBinding",
        plural: "clusterrolebindings",
        namespaced: false,
        status: false,
        short: &[],
        fields: &[],
    },
    BuiltinSpec {
        builtin: Builtin::Crd,
        group: "apiextensions.k8s.io",
        version: "v1",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        namespaced: false,
        status: true,
        short: &["crd", "crds"],
        fields: &[],
    },
];

/// All served resource types, by (group, version, plural).
#[derive(Clone, Debug, Default)]
pub struct Registry {
    defs: BTreeMap<(String, String, String), Arc<ResourceDef>>,
}

impl Registry {
    /// A registry holding every built-in type.
    pub fn with_builtins() -> Registry {
        let mut reg = Registry::default();
        for b in BUILTINS {
            let categories = match b.builtin {
                Builtin::Pod | Builtin::Job | Builtin::Service | Builtin::Deployment => {
                    vec!["all".to_string()]
                }
                _ => Vec::new(),
            };
            reg.insert(ResourceDef {
                group: b.group.into(),
                version: b.version.into(),
                kind: b.kind.into(),
                plural: b.plural.into(),
                singular: b.kind.to_ascii_lowercase(),
                namespaced: b.namespaced,
                status: b.status,
                short_names: b.short.iter().map(|s| s.to_string()).collect(),
                categories,
                builtin: Some(b.builtin),
                schema: None,
                printer_columns: Vec::new(),
                field_selectors: b.fields.iter().map(|s| s.to_string()).collect(),
                crd: None,
            });
        }
        reg
    }

    /// Adds or replaces a type.
    pub fn insert(&mut self, def: ResourceDef) {
        self.defs.insert(
            (def.group.clone(), def.version.clone(), def.plural.clone()),
            Arc::new(def),
        );
    }

    /// Removes every version registered by the named CRD.
    pub fn remove_crd(&mut self, crd_name: &str) {
        self.defs.retain(|_, d| d.crd.as_deref() != Some(crd_name));
    }

    /// Looks a type up by its path coordinates.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.defs
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Every served type.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceDef>> {
        self.defs.values()
    }
}
