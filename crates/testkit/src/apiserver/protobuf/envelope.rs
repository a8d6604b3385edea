//! The Kubernetes protobuf envelope: the 4-byte `k8s\0` magic, then a `runtime.Unknown` that
//! names the object's apiVersion and kind and carries the object's own encoding in `raw`.

use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;

use super::ProtoError;

/// The prefix every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// An unwrapped envelope.
#[derive(Debug, PartialEq)]
pub struct Envelope {
    /// `apiVersion` from the envelope's type meta (`v1`, `batch/v1`).
    pub api_version: String,
    /// `kind` from the envelope's type meta.
    pub kind: String,
    /// The object itself, protobuf-encoded.
    pub raw: Vec<u8>,
}

/// Checks the magic and decodes the `runtime.Unknown` around the object.
pub fn unwrap(body: &[u8]) -> Result<Envelope, ProtoError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ProtoError::NoMagic)?;
    let unknown = Unknown::decode(rest).map_err(|e| ProtoError::Envelope(e.to_string()))?;
    // Only the default encoding is defined for request bodies; a compressed or JSON payload
    // inside the envelope would be misread as protobuf.
    if let Some(enc) = unknown.content_encoding.as_deref().filter(|e| !e.is_empty()) {
        return Err(ProtoError::Envelope(format!(
            "unsupported contentEncoding {enc:?}"
        )));
    }
    if let Some(ct) = unknown
        .content_type
        .as_deref()
        .filter(|c| !c.is_empty() && !c.starts_with(super::CONTENT_TYPE))
    {
        return Err(ProtoError::Envelope(format!("unsupported contentType {ct:?}")));
    }
    let meta = unknown.type_meta.unwrap_or_default();
    Ok(Envelope {
        api_version: meta.api_version.unwrap_or_default(),
        kind: meta.kind.unwrap_or_default(),
        raw: unknown.raw.unwrap_or_default(),
    })
}

/// Wraps an encoded object in the envelope, as Kubernetes clients do (tests use it to build
/// request bodies).
pub fn wrap(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_then_unwrap_round_trips() {
        let body = wrap("batch/v1", "Job", vec![1, 2, 3]);
        assert!(body.starts_with(b"k8s\0"));
        let env = unwrap(&body).unwrap();
        assert_eq!(env.api_version, "batch/v1");
        assert_eq!(env.kind, "Job");
        assert_eq!(env.raw, vec![1, 2, 3]);
    }

    #[test]
    fn a_body_without_magic_is_refused() {
        assert!(matches!(unwrap(b"{\"kind\":\"Pod\"}"), Err(ProtoError::NoMagic)));
    }

    #[test]
    fn a_truncated_envelope_is_refused() {
        let body = wrap("v1", "Namespace", vec![0; 16]);
        let cut = &body[..body.len() - 5];
        assert!(matches!(unwrap(cut), Err(ProtoError::Envelope(_))));
    }
}
