//! Kubernetes objects embedded in a `RunnerGroup`'s spec (the pod template, the work volume
//! claim), kept as the JSON the API server stored and decoded one group at a time.
//!
//! Why not the typed struct in the spec: kube decodes a LIST of RunnerGroups as one batch, so one
//! group whose template does not decode (`env: {FOO: bar}` stored before the schema below
//! existed, or on a server that skipped it) would fail every LIST and WATCH of the scope and
//! stop every group. Held as JSON, such a template is that group's `InvalidSpec` instead.
//!
//! The schema is still the typed one (the k8s-openapi structs' OpenAPI, without descriptions to
//! keep the CRD small), so a real API server refuses type errors where the user types them.

use std::fmt;
use std::marker::PhantomData;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// An embedded Kubernetes object of type `T`, as stored; [`Embedded::decode`] gives the typed
/// value or the field that does not fit.
pub struct Embedded<T> {
    raw: Value,
    kind: PhantomData<fn() -> T>,
}

/// Why an embedded object does not decode: the path inside it and serde's reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct EmbeddedError {
    /// Path inside the embedded object, e.g. `spec.containers[0].env`; `.` for the object itself.
    pub path: String,
    /// What does not fit, in serde's words (e.g. "invalid type: map, expected a sequence").
    pub reason: String,
}

impl<T: DeserializeOwned + Serialize> Embedded<T> {
    /// The typed object, or where and why it does not decode.
    pub fn decode(&self) -> Result<T, EmbeddedError> {
        serde_path_to_error::deserialize(&self.raw).map_err(|e| EmbeddedError {
            path: e.path().to_string(),
            reason: e.inner().to_string(),
        })
    }

    /// Embeds a typed object (what a user would have written).
    pub fn new(typed: &T) -> Self {
        Embedded::from_raw(serde_json::to_value(typed).unwrap_or(Value::Null))
    }
}

impl<T> Embedded<T> {
    /// Embeds JSON as the API server would store it, decodable or not.
    pub fn from_raw(raw: Value) -> Self {
        Embedded {
            raw,
            kind: PhantomData,
        }
    }

    /// The JSON as stored.
    pub fn raw(&self) -> &Value {
        &self.raw
    }
}

// Derives would demand `T: Clone` etc. although only the JSON is held.
impl<T> Clone for Embedded<T> {
    fn clone(&self) -> Self {
        Embedded::from_raw(self.raw.clone())
    }
}

impl<T> fmt::Debug for Embedded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.raw, f)
    }
}

impl<T> PartialEq for Embedded<T> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<T> Serialize for Embedded<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de, T> Deserialize<'de> for Embedded<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Embedded::from_raw)
    }
}

impl<T: JsonSchema> JsonSchema for Embedded<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = T::json_schema(generator).to_value();
        simplify(&mut schema);
        Schema::try_from(schema).unwrap_or_default()
    }

    fn inline_schema() -> bool {
        true
    }
}

/// The metadata of an embedded template (the template's own, and a volume claim template's
/// inside it): labels and annotations, the only parts a template's metadata gives its objects
/// (what controller-gen's embedded object meta keeps too). The full `ObjectMeta` would bring
/// server-set fields (`managedFields`, `ownerReferences`) a user never writes here.
fn embedded_metadata_schema() -> Value {
    let string_map = serde_json::json!({"type": "object", "additionalProperties": {"type": "string"}});
    serde_json::json!({
        "type": "object",
        "properties": {"labels": string_map, "annotations": string_map}
    })
}

/// Whether a schema node is an `ObjectMeta`'s.
fn is_object_meta(schema: &Value) -> bool {
    schema.pointer("/properties/managedFields").is_some()
}

/// Removes `description` from every schema node (never a property that happens to be called
/// `description`), as the pod template's descriptions alone are most of a full pod schema's
/// bytes, and cuts every `metadata` to [`embedded_metadata_schema`].
fn simplify(schema: &mut Value) {
    let Some(node) = schema.as_object_mut() else {
        return;
    };
    node.remove("description");
    for (keyword, child) in node.iter_mut() {
        match keyword.as_str() {
            "properties" | "patternProperties" | "definitions" | "$defs" => {
                for (name, sub) in child.as_object_mut().into_iter().flat_map(|m| m.iter_mut()) {
                    if name == "metadata" && is_object_meta(sub) {
                        *sub = embedded_metadata_schema();
                    } else {
                        simplify(sub);
                    }
                }
            }
            "allOf" | "anyOf" | "oneOf" => {
                for sub in child.as_array_mut().into_iter().flatten() {
                    simplify(sub);
                }
            }
            "items" | "additionalProperties" | "not" => simplify(child),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use serde_json::json;

    #[test]
    fn a_map_where_a_list_belongs_names_the_field() {
        let t: Embedded<PodTemplateSpec> = Embedded::from_raw(json!({
            "spec": {"containers": [{"name": "runner", "env": {"FOO": "bar"}}]}
        }));
        let e = t.decode().expect_err("env is a list");
        assert_eq!(e.path, "spec.containers[0].env");
        assert!(e.reason.contains("expected a sequence"), "{e}");
    }

    #[test]
    fn a_quoted_port_names_the_field() {
        let t: Embedded<PodTemplateSpec> = Embedded::from_raw(json!({
            "spec": {"containers": [{"name": "x", "ports": [{"containerPort": "8080"}]}]}
        }));
        let e = t.decode().expect_err("containerPort is an integer");
        assert_eq!(e.path, "spec.containers[0].ports[0].containerPort");
    }

    #[test]
    fn a_valid_template_round_trips() {
        let raw = json!({
            "metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [], "nodeSelector": {"k": "v"}}
        });
        let t: Embedded<PodTemplateSpec> = Embedded::from_raw(raw.clone());
        let typed = t.decode().expect("decodes");
        assert_eq!(serde_json::to_value(&typed).expect("serializes"), raw);
        assert_eq!(Embedded::new(&typed), t);
    }

    #[test]
    fn descriptions_and_object_meta_go_but_a_property_named_description_stays() {
        let mut s = json!({
            "description": "x",
            "properties": {"description": {"type": "string", "description": "y"}},
            "items": {"description": "z", "type": "object", "properties": {
                "metadata": {"type": "object", "properties": {"managedFields": {"type": "array"}}}
            }}
        });
        simplify(&mut s);
        assert_eq!(
            s,
            json!({
                "properties": {"description": {"type": "string"}},
                "items": {"type": "object", "properties": {"metadata": embedded_metadata_schema()}}
            })
        );
    }
}
