//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as kubectl's typed `create`
//! subcommands and client-go send them: the envelope is unwrapped, the object decoded with the
//! `k8s-pb` prost types and converted to the JSON the JSON path would have received.
//!
//! Responses stay JSON: kubectl's Accept lists `application/json` after protobuf.

mod basic;
mod envelope;
mod json;
mod pod;
mod volume;
mod workloads;

use http::{HeaderMap, header};
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::{apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination};
use k8s_pb::api::{events::v1 as events, networking::v1 as networking, rbac::v1 as rbac};
use prost::Message;
use serde_json::Value;

use self::json::ToJson;
use super::status::{ApiError, Reason};

pub use envelope::{Envelope, wrap};

/// The media type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Why a protobuf body could not be turned into JSON.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The body lacks the `k8s\0` prefix.
    #[error("the protobuf body does not start with the k8s\\0 envelope prefix")]
    NoMagic,
    /// The `runtime.Unknown` envelope is malformed.
    #[error("the protobuf envelope could not be decoded: {0}")]
    Envelope(String),
    /// No decoder for this apiVersion/kind.
    #[error(
        "the fake API server cannot decode protobuf for {api_version}, Kind={kind}; send it as application/json"
    )]
    UnsupportedKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
    /// The object's bytes are not a valid message of its kind.
    #[error("the protobuf {kind} could not be decoded: {message}")]
    Object {
        /// The envelope's kind.
        kind: String,
        /// The prost decode error.
        message: String,
    },
    /// A set field whose conversion is not implemented.
    #[error(
        "protobuf field {field} is not supported by the fake API server; send the object as application/json"
    )]
    UnsupportedField {
        /// Field path, outermost first.
        field: &'static str,
    },
    /// A field's value has no JSON form.
    #[error("protobuf field {field} could not be converted: {message}")]
    Field {
        /// Field path.
        field: String,
        /// What was wrong.
        message: String,
    },
}

impl ProtoError {
    /// Adds the enclosing field's name to a field error's path.
    pub fn within(self, parent: &str) -> ProtoError {
        match self {
            ProtoError::Field { field, message } if !parent.is_empty() => ProtoError::Field {
                field: format!("{parent}.{field}"),
                message,
            },
            other => other,
        }
    }

    /// The API error the server answers with: 415 for what it cannot decode, 400 for garbage.
    pub fn to_api_error(&self) -> ApiError {
        let reason = match self {
            ProtoError::UnsupportedKind { .. } | ProtoError::UnsupportedField { .. } => {
                Reason::UnsupportedMediaType
            }
            _ => Reason::BadRequest,
        };
        ApiError::new(reason, self.to_string())
    }
}

/// Whether a request body is Kubernetes protobuf, by its Content-Type.
pub fn is_protobuf(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim().starts_with(CONTENT_TYPE))
}

type Decoder = fn(&[u8]) -> Result<Value, ProtoError>;

/// The kinds this server decodes, by apiVersion and kind: every built-in kind it serves except
/// CustomResourceDefinition, which clients write as JSON or YAML.
const DECODERS: &[(&str, &str, Decoder)] = &[
    ("v1", "Namespace", decode_as::<core::Namespace>),
    ("v1", "Secret", decode_as::<core::Secret>),
    ("v1", "ConfigMap", decode_as::<core::ConfigMap>),
    ("v1", "ServiceAccount", decode_as::<core::ServiceAccount>),
    ("v1", "Pod", decode_as::<core::Pod>),
    ("v1", "Event", decode_as::<core::Event>),
    ("v1", "Service", decode_as::<core::Service>),
    (
        "v1",
        "PersistentVolumeClaim",
        decode_as::<core::PersistentVolumeClaim>,
    ),
    ("apps/v1", "Deployment", decode_as::<apps::Deployment>),
    ("batch/v1", "Job", decode_as::<batch::Job>),
    (RBAC, "Role", decode_as::<rbac::Role>),
    (RBAC, "RoleBinding", decode_as::<rbac::RoleBinding>),
    (RBAC, "ClusterRole", decode_as::<rbac::ClusterRole>),
    (RBAC, "ClusterRoleBinding", decode_as::<rbac::ClusterRoleBinding>),
    (
        "coordination.k8s.io/v1",
        "Lease",
        decode_as::<coordination::Lease>,
    ),
    ("events.k8s.io/v1", "Event", decode_as::<events::Event>),
    (
        "networking.k8s.io/v1",
        "NetworkPolicy",
        decode_as::<networking::NetworkPolicy>,
    ),
];

const RBAC: &str = "rbac.authorization.k8s.io/v1";

fn decode_as<T>(raw: &[u8]) -> Result<Value, ProtoError>
where
    T: Message + Default + ToJson + k8s_pb::Resource,
{
    let msg = T::decode(raw).map_err(|e| ProtoError::Object {
        kind: T::KIND.to_string(),
        message: e.to_string(),
    })?;
    let mut obj = match msg.to_json()? {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    obj.insert("apiVersion".into(), Value::from(T::API_VERSION));
    obj.insert("kind".into(), Value::from(T::KIND));
    Ok(Value::Object(obj))
}

/// Decodes a protobuf request body into the JSON object the JSON path expects.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let env = envelope::unwrap(body)?;
    let (_, _, decoder) = DECODERS
        .iter()
        .find(|(v, k, _)| *v == env.api_version && *k == env.kind)
        .ok_or_else(|| ProtoError::UnsupportedKind {
            api_version: env.api_version.clone(),
            kind: env.kind.clone(),
        })?;
    decoder(&env.raw)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_pb::api::core::v1::Secret;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    use super::*;

    #[test]
    fn encoded_secret_decodes_to_the_json_a_json_client_sends() {
        let secret = Secret {
            metadata: Some(ObjectMeta {
                name: Some("gh-creds".into()),
                namespace: Some("ci".into()),
                ..Default::default()
            }),
            data: BTreeMap::from([("github_token".into(), b"ghp_x".to_vec())]),
            ..Default::default()
        };
        let body = wrap("v1", "Secret", secret.encode_to_vec());
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "gh-creds", "namespace": "ci"},
                   "data": {"github_token": "Z2hwX3g="}})
        );
    }

    #[test]
    fn an_unknown_kind_is_unsupported_media_type_naming_it() {
        let body = wrap("apps/v1", "StatefulSet", vec![]);
        let err = decode(&body).unwrap_err();
        let api = err.to_api_error();
        assert_eq!(api.reason, Reason::UnsupportedMediaType);
        assert_eq!(api.code, 415);
        assert!(
            api.message.contains("apps/v1, Kind=StatefulSet"),
            "{}",
            api.message
        );
    }

    #[test]
    fn bytes_that_are_not_the_named_kind_are_a_bad_request() {
        // Field 1 (metadata) as a varint where a message is expected.
        let body = wrap("v1", "Namespace", vec![0x08, 0x01]);
        let api = decode(&body).unwrap_err().to_api_error();
        assert_eq!(api.reason, Reason::BadRequest);
        assert!(api.message.contains("Namespace"), "{}", api.message);
    }

    #[test]
    fn every_served_builtin_kind_but_crds_has_a_decoder() {
        let registry = crate::apiserver::registry::Registry::with_builtins();
        let missing: Vec<String> = registry
            .all()
            .filter(|d| d.kind != "CustomResourceDefinition")
            .map(|d| (d.api_version(), d.kind.clone()))
            .filter(|(v, k)| !DECODERS.iter().any(|(dv, dk, _)| dv == v && dk == k))
            .map(|(v, k)| format!("{v}, Kind={k}"))
            .collect();
        assert!(missing.is_empty(), "no protobuf decoder for {missing:?}");
    }

    #[test]
    fn content_type_with_parameters_is_protobuf() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/vnd.kubernetes.protobuf; charset=utf-8"),
        );
        assert!(is_protobuf(&h));
        h.insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        assert!(!is_protobuf(&h));
    }
}
