//! Typed errors of the GitHub client and their mapping onto core's `ForgeError`.

use forgerunner_core::ForgeError;
use forgerunner_core::metrics::Outcome;

/// Most characters of a server message kept in an error (server text is never trusted to be short).
const MAX_MESSAGE: usize = 300;

/// Why a call to GitHub or the Actions service failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ApiError {
    /// Connection failure or timeout.
    #[error("{operation}: transport error: {message}")]
    Transport {
        /// Fixed operation name.
        operation: &'static str,
        /// What went wrong: kind, origin and causes, never the URL's path or query.
        message: String,
    },
    /// A non-success HTTP status.
    #[error("{operation}: HTTP {status}{}: {message}{}", type_name.as_deref().map(|t| format!(" {t}")).unwrap_or_default(), request_ids.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Status {
        /// Fixed operation name.
        operation: &'static str,
        /// HTTP status code.
        status: u16,
        /// .NET exception type name from the body, if any.
        type_name: Option<String>,
        /// Server message (truncated).
        message: String,
        /// `Retry-After` seconds, if sent.
        retry_after: Option<u64>,
        /// Whether the response is a (primary or secondary) rate limit.
        rate_limited: bool,
        /// `X-GitHub-Request-Id` and `ActivityId`, as scaleset keeps them (`errors.go`,
        /// `newRequestResponseError`): what GitHub support asks for.
        request_ids: Option<String>,
    },
    /// A 2xx whose body could not be decoded.
    #[error("{operation}: unreadable response: {message}")]
    BadResponse {
        /// Fixed operation name.
        operation: &'static str,
        /// Decode error.
        message: String,
    },
    /// A body over its cap; refused unread, since whoever runs the server picks its size.
    #[error("{operation}: GitHub returned a response too large: {what}")]
    TooLarge {
        /// Fixed operation name.
        operation: &'static str,
        /// Which cap it passed (never the body).
        what: String,
    },
    /// A 3xx: no client follows redirects, which would lead past `forgeHosts.allowed`.
    #[error(
        "{operation}: GitHub answered with {detail}; forgerunner does not follow redirects: set \
         spec.github.configUrl to the final address"
    )]
    Redirect {
        /// Fixed operation name.
        operation: &'static str,
        /// The status and the target's origin, never its path or query.
        detail: forgerunner_http::Redirected,
    },
    /// The credentials Secret is incomplete or malformed.
    #[error("{0}")]
    InvalidCredentials(String),
    /// The spec cannot work (e.g. a config URL of the wrong shape).
    #[error("{0}")]
    Config(String),
    /// The backend is starting and has nothing to report yet.
    #[error("{0}")]
    NotReady(String),
}

impl ApiError {
    /// The HTTP status, if the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the exception type name contains `needle` (as ARC matches them).
    pub fn is_exception(&self, needle: &str) -> bool {
        matches!(self, ApiError::Status { type_name: Some(t), .. } if t.contains(needle))
    }

    /// Whether a retry may succeed without anyone changing anything. An over-cap body is not
    /// retried: the same server would send it again.
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Transport { .. } | ApiError::BadResponse { .. } => true,
            ApiError::Status {
                status, rate_limited, ..
            } => *rate_limited || *status == 429 || (*status >= 500 && *status != 501),
            _ => false,
        }
    }

    /// `Retry-After` the server asked for, if any.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The metrics outcome of this failure.
    pub fn outcome(&self) -> Outcome {
        match self {
            ApiError::Transport { .. } => Outcome::Transport,
            ApiError::BadResponse { .. } | ApiError::TooLarge { .. } => Outcome::BadResponse,
            ApiError::Status {
                status, rate_limited, ..
            } => status_outcome(*status, *rate_limited),
            ApiError::InvalidCredentials(_)
            | ApiError::Config(_)
            | ApiError::NotReady(_)
            | ApiError::Redirect { .. } => Outcome::ClientError,
        }
    }
}

/// Outcome label for an HTTP status.
pub fn status_outcome(status: u16, rate_limited: bool) -> Outcome {
    match status {
        _ if rate_limited || status == 429 => Outcome::RateLimited,
        200..=299 => Outcome::Success,
        401 | 403 => Outcome::Unauthorized,
        404 => Outcome::NotFound,
        409 => Outcome::Conflict,
        500..=599 => Outcome::ServerError,
        _ => Outcome::ClientError,
    }
}

/// Cuts a server-provided message to a bounded length on a char boundary.
pub fn truncate(message: &str) -> String {
    let mut out: String = message.chars().take(MAX_MESSAGE).collect();
    if out.len() < message.len() {
        out.push('…');
    }
    out
}

/// Default wait when a rate limit names no `Retry-After`.
const DEFAULT_RATE_LIMIT_WAIT: u64 = 60;

impl From<ApiError> for ForgeError {
    fn from(e: ApiError) -> ForgeError {
        match &e {
            ApiError::InvalidCredentials(m) => ForgeError::InvalidCredentials(m.clone()),
            ApiError::Config(m) => ForgeError::Config(m.clone()),
            ApiError::Redirect { .. } => ForgeError::Config(e.to_string()),
            ApiError::NotReady(m) => ForgeError::NotReady(m.clone()),
            ApiError::Transport { .. } | ApiError::BadResponse { .. } | ApiError::TooLarge { .. } => {
                ForgeError::Unavailable(e.to_string())
            }
            ApiError::Status {
                status,
                rate_limited,
                retry_after,
                ..
            } => {
                if *rate_limited || *status == 429 {
                    ForgeError::RateLimited {
                        retry_after_seconds: retry_after.unwrap_or(DEFAULT_RATE_LIMIT_WAIT),
                    }
                } else {
                    match status {
                        401 | 403 => ForgeError::Unauthorized(e.to_string()),
                        404 => ForgeError::NotFound(e.to_string()),
                        400 | 422 => ForgeError::Config(e.to_string()),
                        _ => ForgeError::Unavailable(e.to_string()),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, rate_limited: bool, retry_after: Option<u64>) -> ApiError {
        ApiError::Status {
            operation: "op",
            status,
            type_name: None,
            message: "m".into(),
            retry_after,
            rate_limited,
            request_ids: None,
        }
    }

    #[test]
    fn maps_statuses_to_forge_errors() {
        assert!(matches!(
            ForgeError::from(status(401, false, None)),
            ForgeError::Unauthorized(_)
        ));
        assert!(matches!(
            ForgeError::from(status(403, false, None)),
            ForgeError::Unauthorized(_)
        ));
        assert!(matches!(
            ForgeError::from(status(403, true, Some(7))),
            ForgeError::RateLimited {
                retry_after_seconds: 7
            }
        ));
        assert!(matches!(
            ForgeError::from(status(429, false, None)),
            ForgeError::RateLimited {
                retry_after_seconds: 60
            }
        ));
        assert!(matches!(
            ForgeError::from(status(404, false, None)),
            ForgeError::NotFound(_)
        ));
        assert!(matches!(
            ForgeError::from(status(503, false, None)),
            ForgeError::Unavailable(_)
        ));
        assert!(status(503, false, None).is_transient());
        assert!(!status(501, false, None).is_transient());
        assert!(!status(404, false, None).is_transient());
    }

    #[test]
    fn truncates_long_messages() {
        let long = "x".repeat(1000);
        assert!(truncate(&long).chars().count() <= MAX_MESSAGE + 1);
        assert_eq!(truncate("short"), "short");
    }
}
