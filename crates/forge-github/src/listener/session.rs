//! Message sessions (admin token): create, refresh (new queue token), delete.

use forgerunner_core::forge::SecretValue;
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::client::GithubClient;
use crate::error::ApiError;
use crate::scale_set;
use crate::types::Statistics;

/// An open message session. `Debug` hides the queue token.
#[derive(Clone, Debug)]
pub struct Session {
    /// Scale set the session belongs to.
    pub scale_set_id: i64,
    /// Session id (UUID).
    pub id: String,
    /// Opaque queue URL (query string kept).
    pub queue_url: String,
    /// Queue token (for get/delete message and acquirejobs).
    pub token: SecretValue,
    /// Statistics at creation/refresh.
    pub statistics: Option<Statistics>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionReply {
    #[serde(default)]
    session_id: String,
    #[serde(default)]
    message_queue_url: String,
    #[serde(default)]
    message_queue_access_token: String,
    #[serde(default)]
    statistics: Option<Statistics>,
}

fn parse(
    scale_set_id: i64,
    operation: &'static str,
    reply: &crate::client::Reply,
) -> Result<Session, ApiError> {
    let r: SessionReply = reply.json(operation)?;
    if r.session_id.is_empty() || r.message_queue_url.is_empty() || r.message_queue_access_token.is_empty() {
        return Err(ApiError::BadResponse {
            operation,
            message: "session without id, queue URL or token".into(),
        });
    }
    Ok(Session {
        scale_set_id,
        id: r.session_id,
        queue_url: r.message_queue_url,
        token: SecretValue::new(r.message_queue_access_token),
        statistics: r.statistics,
    })
}

/// Creates a session; a live one yields 409 (conflict), a deleted scale set 404.
pub async fn create(client: &GithubClient, scale_set_id: i64, owner: &str) -> Result<Session, ApiError> {
    let body = json!({ "ownerName": owner });
    let reply = client
        .actions(
            "create_session",
            Method::POST,
            &scale_set::path(scale_set_id, "sessions"),
            &[],
            Some(&body),
        )
        .await?;
    match parse(scale_set_id, "create_session", &reply) {
        Ok(session) => Ok(session),
        Err(e) => {
            // A reply with a session id but no usable queue (seen while the broker had trouble:
            // "CreateMessageSession succeeded but returned an empty messageQueueUrl",
            // actions-runner-controller#4370) leaves a session the service holds; the next
            // create would meet our own 409 until it expires. Delete it, best effort.
            if let Ok(r) = reply.json::<SessionReply>("create_session")
                && !r.session_id.is_empty()
                && let Err(d) = delete_by_id(client, scale_set_id, &r.session_id).await
            {
                tracing::debug!(error = %d, "could not delete an unusable GitHub session");
            }
            Err(e)
        }
    }
}

/// Refreshes a session, returning it with a new queue token; 404 when the service dropped it.
pub async fn refresh(client: &GithubClient, session: &Session) -> Result<Session, ApiError> {
    let path = scale_set::path(session.scale_set_id, &format!("sessions/{}", session.id));
    let reply = client
        .actions("refresh_session", Method::PATCH, &path, &[], None)
        .await?;
    parse(session.scale_set_id, "refresh_session", &reply)
}

/// Deletes a session; one already gone counts as deleted.
pub async fn delete(client: &GithubClient, session: &Session) -> Result<(), ApiError> {
    delete_by_id(client, session.scale_set_id, &session.id).await
}

/// Deletes the session `id` of a scale set; one already gone counts as deleted.
pub async fn delete_by_id(client: &GithubClient, scale_set_id: i64, id: &str) -> Result<(), ApiError> {
    let path = scale_set::path(scale_set_id, &format!("sessions/{id}"));
    match client
        .actions("delete_session", Method::DELETE, &path, &[], None)
        .await
    {
        Err(e) if e.status() != Some(404) => Err(e),
        _ => Ok(()),
    }
}
