//! Message-queue calls made with the session's queue token: long poll, ack, acquire.

use reqwest::Method;
use url::Url;

use super::message::{self, Message};
use super::session::Session;
use crate::client::{Auth, GithubClient};
use crate::error::ApiError;
use crate::scale_set;
use crate::types::ListOf;

/// Header telling the service how many jobs we can run at most.
pub const MAX_CAPACITY_HEADER: &str = "X-ScaleSetMaxCapacity";

fn queue_url(session: &Session, operation: &'static str) -> Result<Url, ApiError> {
    Url::parse(&session.queue_url).map_err(|e| ApiError::BadResponse {
        operation,
        message: format!("message queue URL is invalid: {e}"),
    })
}

/// Long-polls for the next message after `last_message_id`. `Ok(None)` on 202 (nothing within
/// the hold time) and on an empty 200 body.
pub async fn get_message(
    client: &GithubClient,
    session: &Session,
    last_message_id: i64,
    max_capacity: u32,
) -> Result<Option<Message>, ApiError> {
    let mut url = queue_url(session, "get_message")?;
    if last_message_id > 0 {
        url.query_pairs_mut()
            .append_pair("lastMessageId", &last_message_id.to_string());
    }
    let reply = client
        .execute_poll("get_message", client.poll_timeout(), || {
            // Its own HTTP/1.1 connection: a stream of the shared HTTP/2 one could queue
            // behind other groups' polls.
            client
                .poll_request(url.clone(), Auth::Bearer(&session.token))
                .header(
                    reqwest::header::ACCEPT,
                    "application/json; api-version=6.0-preview",
                )
                .header(MAX_CAPACITY_HEADER, max_capacity.to_string())
        })
        .await?;
    if reply.status == 202 {
        return Ok(None);
    }
    message::decode(&reply.body).map_err(|e| ApiError::BadResponse {
        operation: "get_message",
        message: e.to_string(),
    })
}

/// Acknowledges (deletes) a message so it is not redelivered.
pub async fn delete_message(
    client: &GithubClient,
    session: &Session,
    message_id: i64,
) -> Result<(), ApiError> {
    let mut url = queue_url(session, "delete_message")?;
    let path = format!("{}/{message_id}", url.path().trim_end_matches('/'));
    url.set_path(&path);
    client
        .execute("delete_message", client.request_timeout(), || {
            client
                .raw_request(Method::DELETE, url.clone(), Auth::Bearer(&session.token))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
        })
        .await?;
    Ok(())
}

/// Acquires jobs in one call; returns the ids the service granted.
pub async fn acquire_jobs(
    client: &GithubClient,
    session: &Session,
    ids: &[i64],
) -> Result<Vec<i64>, ApiError> {
    let url = client
        .actions_url(&scale_set::path(session.scale_set_id, "acquirejobs"))
        .await?;
    let reply = client
        .execute("acquire_jobs", client.request_timeout(), || {
            client
                .raw_request(Method::POST, url.clone(), Auth::Bearer(&session.token))
                .json(ids)
        })
        .await?;
    let list: ListOf<i64> = reply.json("acquire_jobs")?;
    Ok(list.value)
}
