//! Metadata-only answers (`Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`),
//! what kube's `list_metadata`/`get_metadata`/metadata watchers and `kubectl get -o name` ask for:
//! each object reduced to its `metadata`, as kind `PartialObjectMetadata` of `meta.k8s.io/v1`.

use http::{HeaderMap, header};
use serde_json::{Value, json};

/// The apiVersion of metadata-only objects and lists.
const META_API_VERSION: &str = "meta.k8s.io/v1";

/// Whether the client's preferred representation is metadata only (the first Accept entry,
/// as for Tables: a client that lists a fallback accepts the full object second).
pub fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split(',').next())
        .is_some_and(|first| first.contains("as=PartialObjectMetadata"))
}

/// One object (as it would be presented in full) reduced to its metadata.
pub fn object(full: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": META_API_VERSION,
        "metadata": full.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A list of objects reduced to their metadata, with the list's own metadata.
pub fn list(full_items: &[Value], list_meta: Value) -> Value {
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": META_API_VERSION,
        "metadata": list_meta,
        "items": full_items.iter().map(object).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, v.parse().unwrap());
        h
    }

    #[test]
    fn only_a_first_choice_of_metadata_counts() {
        assert!(wanted(&accept(
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
        )));
        assert!(wanted(&accept(
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
        )));
        assert!(!wanted(&accept(
            "application/json,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
        )));
        assert!(!wanted(&accept("application/json")));
        assert!(!wanted(&HeaderMap::new()));
    }

    #[test]
    fn objects_keep_metadata_only() {
        let pod = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"containers": []}});
        let l = list(&[pod], json!({"resourceVersion": "7"}));
        assert_eq!(l["kind"], "PartialObjectMetadataList");
        assert_eq!(l["metadata"]["resourceVersion"], "7");
        assert_eq!(l["items"][0]["kind"], "PartialObjectMetadata");
        assert_eq!(l["items"][0]["metadata"]["labels"]["a"], "b");
        assert!(l["items"][0].get("spec").is_none());
    }
}
