//! Credentials for GitHub: a PAT or a GitHub App, and the cached Actions service admin token.

pub mod app_jwt;
pub mod pat;
pub mod token_cache;

use forgerunner_core::forge::{Credentials, SecretValue};

use crate::error::ApiError;
pub use app_jwt::AppKey;

/// Secret key holding a personal access token.
pub const KEY_TOKEN: &str = "github_token";
/// Secret key holding the GitHub App id (or client id).
pub const KEY_APP_ID: &str = "github_app_id";
/// Secret key holding the GitHub App installation id.
pub const KEY_INSTALLATION_ID: &str = "github_app_installation_id";
/// Secret key holding the GitHub App private key (PEM).
pub const KEY_PRIVATE_KEY: &str = "github_app_private_key";

/// How we authenticate against the GitHub REST API.
#[derive(Debug)]
pub enum AuthMethod {
    /// A personal access token, sent as a bearer token.
    Pat(SecretValue),
    /// A GitHub App: a JWT is exchanged for an installation token.
    App {
        /// App id or client id (the JWT issuer).
        app_id: String,
        /// Installation id.
        installation_id: i64,
        /// The parsed private key (boxed: it is large).
        key: Box<AppKey>,
    },
}

impl AuthMethod {
    /// A stable id of the credential that is safe to show (metric labels, logs): the App and
    /// installation ids for an App, otherwise the credentials Secret's `namespace/name`
    /// (`secret`), never the token.
    pub fn credential_id(&self, secret: &str) -> String {
        match self {
            AuthMethod::Pat(_) => format!("secret/{secret}"),
            AuthMethod::App {
                app_id,
                installation_id,
                ..
            } => format!("app/{app_id}/installation/{installation_id}"),
        }
    }

    /// Reads the credentials Secret as ARC users have it: a non-empty `github_token` wins,
    /// otherwise all three App keys are required.
    pub fn from_credentials(creds: &Credentials) -> Result<AuthMethod, ApiError> {
        if let Some(token) = pat::token(creds) {
            return Ok(AuthMethod::Pat(token));
        }
        let missing: Vec<&str> = [KEY_APP_ID, KEY_INSTALLATION_ID, KEY_PRIVATE_KEY]
            .into_iter()
            .filter(|k| creds.get(k).is_none())
            .collect();
        if missing.len() == 3 {
            return Err(ApiError::InvalidCredentials(format!(
                "Secret {:?} has neither {KEY_TOKEN} nor the GitHub App keys {KEY_APP_ID}, {KEY_INSTALLATION_ID}, {KEY_PRIVATE_KEY}",
                creds.secret_name
            )));
        }
        if !missing.is_empty() {
            return Err(ApiError::InvalidCredentials(format!(
                "Secret {:?} is missing GitHub App key(s): {}",
                creds.secret_name,
                missing.join(", ")
            )));
        }
        let value = |k: &str| {
            creds
                .get(k)
                .map(|v| v.expose().trim().to_string())
                .unwrap_or_default()
        };
        let app_id = value(KEY_APP_ID);
        let installation_id: i64 = value(KEY_INSTALLATION_ID).parse().map_err(|_| {
            ApiError::InvalidCredentials(format!(
                "Secret {:?}: {KEY_INSTALLATION_ID} is not an integer",
                creds.secret_name
            ))
        })?;
        let pem = creds
            .get(KEY_PRIVATE_KEY)
            .map(SecretValue::expose)
            .unwrap_or_default();
        let key = AppKey::from_pem(pem).map_err(|e| {
            ApiError::InvalidCredentials(format!("Secret {:?}: {KEY_PRIVATE_KEY}: {e}", creds.secret_name))
        })?;
        Ok(AuthMethod::App {
            app_id,
            installation_id,
            key: Box::new(key),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(pairs: &[(&str, &str)]) -> Credentials {
        Credentials {
            secret_name: "gh".into(),
            data: pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), SecretValue::new(*v)))
                .collect(),
            version: "1".into(),
        }
    }

    #[test]
    fn pat_wins() {
        let m = AuthMethod::from_credentials(&creds(&[(KEY_TOKEN, "ghp_x"), (KEY_APP_ID, "1")])).unwrap();
        assert!(matches!(m, AuthMethod::Pat(t) if t.expose() == "ghp_x"));
    }

    #[test]
    fn missing_keys_are_named() {
        let e = AuthMethod::from_credentials(&creds(&[])).unwrap_err();
        assert!(matches!(&e, ApiError::InvalidCredentials(m) if m.contains(KEY_TOKEN)));
        let e = AuthMethod::from_credentials(&creds(&[(KEY_APP_ID, "1")])).unwrap_err();
        assert!(
            matches!(&e, ApiError::InvalidCredentials(m) if m.contains(KEY_PRIVATE_KEY) && m.contains(KEY_INSTALLATION_ID))
        );
    }

    #[test]
    fn malformed_app_values_are_rejected_without_leaking() {
        let e = AuthMethod::from_credentials(&creds(&[
            (KEY_APP_ID, "1"),
            (KEY_INSTALLATION_ID, "abc"),
            (KEY_PRIVATE_KEY, "SECRETPEM"),
        ]))
        .unwrap_err();
        assert!(matches!(&e, ApiError::InvalidCredentials(m) if m.contains("integer")));
        let e = AuthMethod::from_credentials(&creds(&[
            (KEY_APP_ID, "1"),
            (KEY_INSTALLATION_ID, "5"),
            (KEY_PRIVATE_KEY, "SECRETPEM"),
        ]))
        .unwrap_err();
        assert!(!e.to_string().contains("SECRETPEM"));
        assert!(matches!(e, ApiError::InvalidCredentials(_)));
    }
}
