//! A failed Gitea or Forgejo request in the words users read, and the category it has for the
//! reconciler. The two forges word every failure alike but for their name and spec block; what
//! a 404 means and which right a 403 lacks each forge says itself ([`Asked`]).

use forgerunner_core::ForgeError;

use crate::redirect::Redirected;
use crate::rest::{Api, CallError};

/// What a request was for, as its failure message needs it.
#[derive(Clone, Debug)]
pub struct Asked {
    /// Metric label of the operation, e.g. `list_runners`; the terse messages name it.
    pub operation: &'static str,
    /// The operation in words, e.g. `list runners`.
    pub words: &'static str,
    /// Where it was asked (the scope's display form).
    pub scope: String,
    /// The token right a 403 means is missing.
    pub needs: &'static str,
    /// What a 404 means, as the whole message.
    pub not_found: String,
}

/// How a request to a Gitea-family forge failed, in that forge's words.
#[derive(Clone, Debug, thiserror::Error)]
pub enum RequestError {
    /// 401: the token is unknown or expired.
    #[error("{} rejected the API token (401) at {scope}; check the Secret's token key", .api.name)]
    Unauthenticated {
        /// The forge.
        api: Api,
        /// Where it happened (scope display).
        scope: String,
    },
    /// 403: the token lacks a right.
    #[error("the API token may not {operation} at {scope} (403); it needs {needs}")]
    Forbidden {
        /// The operation, in words.
        operation: &'static str,
        /// Where.
        scope: String,
        /// Which token right is missing.
        needs: &'static str,
    },
    /// 404: what was asked for does not exist (or Actions are disabled there), as the forge
    /// words it.
    #[error("{0}")]
    NotFound(String),
    /// 429: retry after this many seconds.
    #[error("{} rate limited the request; retry after {seconds}s", .api.name)]
    RateLimited {
        /// The forge.
        api: Api,
        /// How long to wait.
        seconds: u64,
    },
    /// 5xx.
    #[error("{} answered {status} to {operation}", .api.name)]
    Server {
        /// The forge.
        api: Api,
        /// The status.
        status: u16,
        /// The operation's metric label.
        operation: &'static str,
    },
    /// Another 4xx.
    #[error("{} refused {operation} with {status}", .api.name)]
    Rejected {
        /// The forge.
        api: Api,
        /// The status.
        status: u16,
        /// The operation's metric label.
        operation: &'static str,
    },
    /// Connection failure or timeout.
    #[error("cannot reach {} for {operation}: {detail}", .api.name)]
    Transport {
        /// The forge.
        api: Api,
        /// The operation's metric label.
        operation: &'static str,
        /// What failed: kind, origin and causes, never the URL's path or query.
        detail: String,
    },
    /// Every address of the host is one `forgeHosts.refusePrivateAddresses` refuses: the
    /// configuration's to fix, not the network's.
    #[error("{operation}: {detail}")]
    AddressRefused {
        /// The operation's metric label.
        operation: &'static str,
        /// The refused addresses, never the URL's path or query.
        detail: String,
    },
    /// A 3xx: no forge client follows redirects (they would lead past `forgeHosts.allowed`).
    #[error(
        "{} answered the request to {operation} with {detail}; forgerunner does not follow \
         redirects: set {}.url to the final address",
        .api.name,
        .api.spec
    )]
    Redirect {
        /// The forge.
        api: Api,
        /// The operation, in words.
        operation: &'static str,
        /// The status and the target's origin, never its path or query.
        detail: Redirected,
    },
    /// A 2xx body that does not decode.
    #[error("{} sent a malformed response to {operation}", .api.name)]
    BadResponse {
        /// The forge.
        api: Api,
        /// The operation's metric label.
        operation: &'static str,
    },
    /// A body or a paged listing over its cap; refused whole, never truncated.
    #[error("{} returned a response too large to {operation}: {what}", .api.name)]
    TooLarge {
        /// The forge.
        api: Api,
        /// The operation, in words.
        operation: &'static str,
        /// Which cap it passed (never the body).
        what: String,
    },
}

impl RequestError {
    /// How the request `asked` of `api` ended, `e`, in that forge's words.
    pub fn new(api: Api, asked: Asked, e: CallError) -> RequestError {
        let Asked {
            operation,
            words,
            scope,
            needs,
            not_found,
        } = asked;
        match e {
            CallError::Unauthenticated => RequestError::Unauthenticated { api, scope },
            CallError::Forbidden => RequestError::Forbidden {
                operation: words,
                scope,
                needs,
            },
            CallError::NotFound => RequestError::NotFound(not_found),
            CallError::RateLimited(seconds) => RequestError::RateLimited { api, seconds },
            CallError::Server(status) => RequestError::Server {
                api,
                status,
                operation,
            },
            CallError::Rejected(status) => RequestError::Rejected {
                api,
                status,
                operation,
            },
            CallError::Transport(f) if f.is_address_refused() => RequestError::AddressRefused {
                operation,
                detail: f.to_string(),
            },
            CallError::Transport(f) => RequestError::Transport {
                api,
                operation,
                detail: f.to_string(),
            },
            CallError::Redirect(detail) => RequestError::Redirect {
                api,
                operation: words,
                detail,
            },
            CallError::BadResponse => RequestError::BadResponse { api, operation },
            CallError::TooLarge(what) => RequestError::TooLarge {
                api,
                operation: words,
                what,
            },
        }
    }
}

impl From<RequestError> for ForgeError {
    fn from(e: RequestError) -> ForgeError {
        let msg = e.to_string();
        match e {
            RequestError::Unauthenticated { .. } | RequestError::Forbidden { .. } => {
                ForgeError::Unauthorized(msg)
            }
            RequestError::NotFound(_) => ForgeError::NotFound(msg),
            RequestError::RateLimited { seconds, .. } => ForgeError::RateLimited {
                retry_after_seconds: seconds,
            },
            RequestError::Server { .. }
            | RequestError::Transport { .. }
            | RequestError::BadResponse { .. }
            | RequestError::TooLarge { .. } => ForgeError::Unavailable(msg),
            RequestError::Rejected { .. }
            | RequestError::Redirect { .. }
            | RequestError::AddressRefused { .. } => ForgeError::Config(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forgerunner_core::error::ErrorCategory;

    const FORGE: Api = Api {
        forge: "forgejo",
        name: "Forgejo",
        spec: "spec.forgejo",
        lift_block_after_wait: true,
    };

    fn asked() -> Asked {
        Asked {
            operation: "list_runners",
            words: "list runners",
            scope: "organization acme".into(),
            needs: "the write:organization scope",
            not_found: "organization acme not found".into(),
        }
    }

    /// Every failure names the forge or the operation as users know them, and keeps the
    /// category the reconciler acts on.
    #[test]
    fn failures_are_worded_for_the_forge_and_keep_their_category() {
        let cases = [
            (
                CallError::Unauthenticated,
                "Forgejo rejected the API token (401) at organization acme; check the Secret's token key",
                ErrorCategory::Unauthorized,
            ),
            (
                CallError::Forbidden,
                "the API token may not list runners at organization acme (403); it needs the \
                 write:organization scope",
                ErrorCategory::Unauthorized,
            ),
            (
                CallError::NotFound,
                "organization acme not found",
                ErrorCategory::ForgeNotFound,
            ),
            (
                CallError::RateLimited(7),
                "Forgejo rate limited the request; retry after 7s",
                ErrorCategory::RateLimited,
            ),
            (
                CallError::Server(502),
                "Forgejo answered 502 to list_runners",
                ErrorCategory::ForgeUnavailable,
            ),
            (
                CallError::Rejected(409),
                "Forgejo refused list_runners with 409",
                ErrorCategory::ForgeConfig,
            ),
            (
                CallError::BadResponse,
                "Forgejo sent a malformed response to list_runners",
                ErrorCategory::ForgeUnavailable,
            ),
            (
                CallError::TooLarge("over 4 MiB".into()),
                "Forgejo returned a response too large to list runners: over 4 MiB",
                ErrorCategory::ForgeUnavailable,
            ),
        ];
        for (call, text, category) in cases {
            let e = RequestError::new(FORGE, asked(), call.clone());
            assert_eq!(e.to_string(), text, "{call:?}");
            assert_eq!(ForgeError::from(e).category(), category, "{call:?}");
        }
    }

    #[test]
    fn a_redirect_names_the_spec_field_to_fix() {
        let url = url::Url::parse("https://code.example.com/api").expect("URL");
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::LOCATION,
            reqwest::header::HeaderValue::from_static("https://other.example.com/x?token=t"),
        );
        let detail = Redirected::from_reply(reqwest::StatusCode::FOUND, &headers, &url);
        let e = RequestError::new(FORGE, asked(), CallError::Redirect(detail));
        let text = e.to_string();
        assert!(
            text.starts_with("Forgejo answered the request to list runners with a redirect (302)")
                && text.ends_with("set spec.forgejo.url to the final address")
                && !text.contains("token=t"),
            "{text}"
        );
        assert!(matches!(ForgeError::from(e), ForgeError::Config(_)));
    }
}
