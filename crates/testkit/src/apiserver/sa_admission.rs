//! The ServiceAccount admission plugin, as far as pod creation needs it (Kubernetes
//! `plugin/pkg/admission/serviceaccount/admission.go`, `Plugin.Admit` → `getServiceAccount`):
//! a pod whose service account does not exist in its namespace is refused with 403 and
//! `pods "<name>" is forbidden: error looking up service account <ns>/<sa>: serviceaccount
//! "<sa>" not found` (`admission.NewForbidden`, which names a pod that has no name yet by its
//! generateName). It runs on create only, before validation, as a mutating plugin does.
//!
//! The fake keeps no `default` ServiceAccount objects. On a real cluster the ServiceAccount
//! controller (kube-controller-manager) creates `default` in every namespace as soon as the
//! namespace exists and re-creates it when deleted, and the plugin retries its lookup of
//! `default` ten times to ride out that delay. The fake therefore treats `default` as always
//! present; every other name must exist as an object.

use serde_json::{Value, json};

use super::status::{ApiError, ApiResult, Reason};
use super::store::{ObjKey, Store};

/// `DefaultServiceAccountName`: the account a pod without `serviceAccountName` runs as.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// `api.MirrorPodAnnotationKey`: static pods mirrored by the kubelet.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The account `pod` runs as: `serviceAccountName`, else the deprecated `serviceAccount` (the
/// v1 conversion falls back to it), else `default`.
fn account_of(pod: &Value) -> &str {
    let field = |k: &str| {
        pod.pointer(&format!("/spec/{k}"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    field("serviceAccountName")
        .or_else(|| field("serviceAccount"))
        .unwrap_or(DEFAULT_SERVICE_ACCOUNT)
}

/// `admission.NewForbidden` for a pod named (or generate-named) `name`.
fn forbidden(name: &str, why: String) -> ApiError {
    let mut e = ApiError::new(Reason::Forbidden, format!("pods \"{name}\" is forbidden: {why}"));
    e.details = Some(json!({"name": name, "group": "", "kind": "pods"}));
    e
}

/// Admits or refuses the creation of `pod` in namespace `ns`; `name` is its name, or its
/// generateName when the server has not named it yet.
pub fn admit(store: &Store, ns: &str, name: &str, pod: &Value) -> ApiResult<()> {
    let mirror = pod
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(MIRROR_POD_ANNOTATION))
        .is_some();
    if mirror {
        // `Validate`'s mirror-pod branch: such pods may not name an account at all.
        let named = ["serviceAccountName", "serviceAccount"].iter().any(|k| {
            pod.pointer(&format!("/spec/{k}"))
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        });
        if named {
            return Err(forbidden(
                name,
                "a mirror pod may not reference service accounts".into(),
            ));
        }
        return Ok(());
    }
    let account = account_of(pod);
    if account == DEFAULT_SERVICE_ACCOUNT {
        return Ok(());
    }
    let key = ObjKey {
        tk: super::registry::TypeKey {
            group: String::new(),
            plural: "serviceaccounts".into(),
        },
        ns: ns.to_string(),
        name: account.to_string(),
    };
    if store.get(&key).is_some() {
        return Ok(());
    }
    Err(forbidden(
        name,
        format!("error looking up service account {ns}/{account}: serviceaccount \"{account}\" not found"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// admission.go `Admit`: an empty `serviceAccountName` means `default`.
    #[test]
    fn account_defaults_to_default_and_falls_back_to_the_deprecated_field() {
        assert_eq!(account_of(&json!({"spec": {}})), "default");
        assert_eq!(
            account_of(&json!({"spec": {"serviceAccountName": ""}})),
            "default"
        );
        assert_eq!(account_of(&json!({"spec": {"serviceAccount": "old"}})), "old");
        assert_eq!(
            account_of(&json!({"spec": {"serviceAccountName": "new", "serviceAccount": "old"}})),
            "new"
        );
    }

    /// admission.go `Admit` → `admission.NewForbidden` → `apierrors.NewForbidden`.
    #[test]
    fn refusal_names_the_pod_and_the_account() {
        let e = forbidden(
            "job-",
            "error looking up service account ci/sa: serviceaccount \"sa\" not found".into(),
        );
        assert_eq!((e.code, e.reason), (403, Reason::Forbidden));
        assert_eq!(
            e.message,
            "pods \"job-\" is forbidden: error looking up service account ci/sa: serviceaccount \"sa\" not found"
        );
    }
}
