//! GitHub App authentication: an RS256 JWT signed with the App's private key (via `ring`).

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde::Serialize;

/// Seconds the JWT is back-dated, to tolerate clock drift (as GitHub recommends).
const BACKDATE_SECONDS: i64 = 60;
/// JWT lifetime after `iat`; GitHub allows at most ten minutes.
const LIFETIME_SECONDS: i64 = 9 * 60;

/// Why a private key could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// No `-----BEGIN … PRIVATE KEY-----` block.
    #[error("not a PEM private key")]
    NotPem,
    /// The PEM body is not base64.
    #[error("PEM body is not valid base64")]
    Base64,
    /// `ring` rejected the key (wrong type, too small, corrupt).
    #[error("RSA key rejected: {0}")]
    Rejected(String),
    /// Signing failed.
    #[error("signing failed")]
    Sign,
}

/// An App private key, ready to sign. `Debug` never shows key material.
pub struct AppKey(RsaKeyPair);

impl fmt::Debug for AppKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AppKey(<redacted>)")
    }
}

/// The claims GitHub reads from an App JWT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Claims {
    /// Issued at (back-dated by a minute).
    pub iat: i64,
    /// Expiry: `iat` + 9 minutes.
    pub exp: i64,
    /// App id or client id.
    pub iss: String,
}

impl Claims {
    /// Claims for an App JWT issued at `now` (unix seconds).
    pub fn new(app_id: &str, now: i64) -> Claims {
        let iat = now - BACKDATE_SECONDS;
        Claims {
            iat,
            exp: iat + LIFETIME_SECONDS,
            iss: app_id.to_string(),
        }
    }
}

impl AppKey {
    /// Parses a PKCS#1 (`RSA PRIVATE KEY`) or PKCS#8 (`PRIVATE KEY`) PEM. Literal `\n` sequences
    /// (a common copy-paste accident) are accepted as newlines.
    pub fn from_pem(pem: &str) -> Result<AppKey, KeyError> {
        let pem = if !pem.contains('\n') && pem.contains("\\n") {
            pem.replace("\\n", "\n")
        } else {
            pem.to_string()
        };
        let (label, der) = decode_pem(&pem)?;
        let pair = if label == "RSA PRIVATE KEY" {
            RsaKeyPair::from_der(&der)
        } else {
            RsaKeyPair::from_pkcs8(&der)
        }
        .map_err(|e| KeyError::Rejected(e.to_string()))?;
        Ok(AppKey(pair))
    }

    /// The public key (DER `RSAPublicKey`), for verifying in tests.
    pub fn public_key_der(&self) -> Vec<u8> {
        self.0.public().as_ref().to_vec()
    }

    /// A signed JWT with `claims`.
    pub fn sign(&self, claims: &Claims) -> Result<String, KeyError> {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let body = serde_json::to_vec(claims).map_err(|_| KeyError::Sign)?;
        let signing_input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(body));
        let mut signature = vec![0u8; self.0.public().modulus_len()];
        self.0
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| KeyError::Sign)?;
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }

    /// A JWT for `app_id` issued now.
    pub fn jwt(&self, app_id: &str) -> Result<String, KeyError> {
        self.sign(&Claims::new(app_id, jiff::Timestamp::now().as_second()))
    }
}

/// The label and DER body of the first PEM private key block.
fn decode_pem(pem: &str) -> Result<(String, Vec<u8>), KeyError> {
    let mut label = None;
    let mut body = String::new();
    for line in pem.lines().map(str::trim) {
        match &label {
            None => {
                if let Some(l) = line
                    .strip_prefix("-----BEGIN ")
                    .and_then(|l| l.strip_suffix("-----"))
                {
                    label = Some(l.to_string());
                }
            }
            Some(_) if line.starts_with("-----END ") => {
                let label = label.unwrap_or_default();
                if !label.ends_with("PRIVATE KEY") {
                    return Err(KeyError::NotPem);
                }
                let der = STANDARD.decode(body.as_bytes()).map_err(|_| KeyError::Base64)?;
                return Ok((label, der));
            }
            Some(_) => body.push_str(line),
        }
    }
    Err(KeyError::NotPem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_backdated_and_short_lived() {
        let c = Claims::new("123", 1_000_000);
        assert_eq!(c.iat, 1_000_000 - 60);
        assert_eq!(c.exp, c.iat + 540);
        assert_eq!(c.iss, "123");
        assert!(
            c.exp - 1_000_000 < 600,
            "GitHub rejects JWTs living over 10 minutes"
        );
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(AppKey::from_pem("hello").unwrap_err(), KeyError::NotPem);
        assert_eq!(
            AppKey::from_pem("-----BEGIN RSA PRIVATE KEY-----\n!!!\n-----END RSA PRIVATE KEY-----")
                .unwrap_err(),
            KeyError::Base64
        );
        assert!(matches!(
            AppKey::from_pem("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"),
            Err(KeyError::Rejected(_))
        ));
        assert_eq!(
            AppKey::from_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----").unwrap_err(),
            KeyError::NotPem
        );
    }
}

#[cfg(test)]
mod signing_tests {
    use ring::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};

    use super::*;

    const PKCS1: &str = include_str!("../../tests/fixtures/app_key_pkcs1.pem");
    const PKCS8: &str = include_str!("../../tests/fixtures/app_key_pkcs8.pem");

    fn verify(key: &AppKey, jwt: &str) -> Claims {
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header["alg"], "RS256");
        let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let public = key.public_key_der();
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &public)
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &sig)
            .expect("signature verifies");
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap()
    }

    #[test]
    fn signs_verifiable_jwts_with_both_pem_forms() {
        for pem in [PKCS1, PKCS8] {
            let key = AppKey::from_pem(pem).unwrap();
            let claims = Claims::new("Iv1.abc", 2_000_000_000);
            assert_eq!(verify(&key, &key.sign(&claims).unwrap()), claims);
        }
    }

    #[test]
    fn accepts_escaped_newlines() {
        let flat = PKCS1.trim().replace('\n', "\\n");
        assert!(AppKey::from_pem(&flat).is_ok());
        assert_eq!(
            format!("{:?}", AppKey::from_pem(PKCS8).unwrap()),
            "AppKey(<redacted>)"
        );
    }
}
