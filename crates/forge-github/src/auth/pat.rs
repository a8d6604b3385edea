//! Personal access token credentials.

use forgerunner_core::forge::{Credentials, SecretValue};

use super::KEY_TOKEN;

/// The PAT from the Secret, trimmed, if present and non-blank.
pub fn token(creds: &Credentials) -> Option<SecretValue> {
    let t = creds.get(KEY_TOKEN)?.expose().trim();
    (!t.is_empty()).then(|| SecretValue::new(t))
}
