//! Wire types both Gitea-family forges share (Forgejo kept Gitea's `modules/structs` for
//! these), decoded leniently: a field the server leaves out or sends as `null` is its default.

use forgerunner_core::forge::SecretValue;
use serde::{Deserialize, Deserializer};

/// `deserialize_with` for fields a server may send as `null` (Go's nil slices and strings):
/// such a value decodes as the default instead of failing the whole listing.
pub fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `GET /api/v1/version` body (and Forgejo's `/api/forgejo/v1/version`).
#[derive(Clone, Debug, Deserialize)]
pub struct ServerVersion {
    /// Version string, e.g. `1.26.0`, `1.25.2+dev-12-gabcdef` or `15.0.3+gitea-1.22.0`.
    #[serde(default)]
    pub version: String,
}

/// Registration token body `{"token": "…"}`.
#[derive(Deserialize)]
struct RegistrationTokenBody {
    #[serde(default)]
    token: String,
}

/// Decodes a registration token body straight into a [`SecretValue`], so the token is never
/// held in plain form; an empty token is a bad response, not a token.
pub fn registration_token(body: &[u8]) -> Option<SecretValue> {
    serde_json::from_slice::<RegistrationTokenBody>(body)
        .ok()
        .filter(|t| !t.token.is_empty())
        .map(|t| SecretValue::new(t.token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Row {
        #[serde(default, deserialize_with = "null_as_default")]
        labels: Vec<String>,
    }

    #[test]
    fn lenient_bodies() {
        let r: Row = serde_json::from_str(r#"{"labels":null}"#).expect("null");
        assert!(r.labels.is_empty());
        let r: Row = serde_json::from_str(r#"{}"#).expect("missing");
        assert!(r.labels.is_empty());
        let v: ServerVersion = serde_json::from_str(r#"{"version":"1.26.0"}"#).expect("version");
        assert_eq!(v.version, "1.26.0");
        let t = registration_token(br#"{"token":"abc"}"#).expect("token");
        assert_eq!(t.expose(), "abc");
        assert!(registration_token(br#"{"token":""}"#).is_none());
        assert!(registration_token(b"<html>").is_none());
    }
}
