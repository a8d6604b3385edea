//! Fault injection and the request log: the shared middleware (see
//! [`crate::forge_common::faults`]) and Gitea's error body.

use axum::http::StatusCode;
use axum::response::Response;

pub use crate::forge_common::faults::{Fault, LoggedRequest, Repeated};

/// A Gitea-style error body (`{"message", "url"}`).
pub(crate) fn api_error(status: StatusCode, message: &str) -> Response {
    crate::forge_common::http::api_error(status, message, "https://docs.gitea.com/api/")
}
