//! GitHub's REST error body, `{message, documentation_url, status}`, which the GitHub fakes
//! answer their errors with.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use crate::forge_common::http::json_response;

/// `status` with GitHub's error body; `docs` is the `documentation_url` of the routes' page.
pub(crate) fn rest_error(docs: &str, status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        json!({"message": message, "documentation_url": docs, "status": status.as_str()}),
    )
}
