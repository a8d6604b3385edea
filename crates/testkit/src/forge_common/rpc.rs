//! The runner RPC framing both forges share: act_runner and forgejo-runner speak connect
//! (`runner.v1.RunnerService`) and authenticate with `x-runner-uuid`/`x-runner-token`. The
//! fakes use its JSON encoding; this module has the server's error shape and result words, and
//! the client the simulated runners call it with.

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Path prefix of the runner service.
pub const RUNNER_SERVICE: &str = "/api/actions/runner.v1.RunnerService";

/// How a finished job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conclusion {
    /// Succeeded.
    Success,
    /// Failed.
    Failure,
    /// Cancelled.
    Cancelled,
    /// Skipped.
    Skipped,
}

impl Conclusion {
    /// API word.
    pub fn as_str(self) -> &'static str {
        match self {
            Conclusion::Success => "success",
            Conclusion::Failure => "failure",
            Conclusion::Cancelled => "cancelled",
            Conclusion::Skipped => "skipped",
        }
    }

    /// The `runner.v1.Result` word for a final result.
    pub fn rpc_word(self) -> &'static str {
        match self {
            Conclusion::Success => "RESULT_SUCCESS",
            Conclusion::Failure => "RESULT_FAILURE",
            Conclusion::Cancelled => "RESULT_CANCELLED",
            Conclusion::Skipped => "RESULT_SKIPPED",
        }
    }

    /// The final result a `runner.v1.Result` word means; `None` for `RESULT_UNSPECIFIED`
    /// (a heartbeat) and unknown words.
    pub fn from_rpc(word: &str) -> Option<Conclusion> {
        match word {
            "RESULT_SUCCESS" => Some(Conclusion::Success),
            "RESULT_FAILURE" => Some(Conclusion::Failure),
            "RESULT_CANCELLED" => Some(Conclusion::Cancelled),
            "RESULT_SKIPPED" => Some(Conclusion::Skipped),
            _ => None,
        }
    }
}

/// A connect error response (`{"code", "message"}`).
pub fn connect_error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(json!({"code": code, "message": message}))).into_response()
}

/// The `401 unauthenticated` a runner with unknown credentials gets.
pub fn unauthenticated() -> Response {
    connect_error(StatusCode::UNAUTHORIZED, "unauthenticated", "unregistered runner")
}

/// The runner credentials of a request (`x-runner-uuid`, `x-runner-token`; empty if absent).
pub fn runner_credentials(h: &HeaderMap) -> (String, String) {
    let get = |k: &str| {
        h.get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    (get("x-runner-uuid"), get("x-runner-token"))
}

/// A simulated runner's connection: calls `RunnerService` methods with its credentials.
pub struct RunnerClient {
    http: reqwest::Client,
    base: String,
    /// Runner UUID sent as `x-runner-uuid` (empty before registration).
    pub uuid: String,
    /// Runner secret sent as `x-runner-token` (empty before registration).
    pub token: String,
}

impl RunnerClient {
    /// A client for the instance at `base` (trailing `/` ignored), without credentials yet.
    pub fn new(base: &str) -> Result<RunnerClient, reqwest::Error> {
        Ok(RunnerClient {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
            base: base.trim_end_matches('/').to_string(),
            uuid: String::new(),
            token: String::new(),
        })
    }

    /// Calls `method` with a JSON body; the status and the JSON answer (`null` if not JSON).
    pub async fn call(&self, method: &str, body: Value) -> Result<(u16, Value), reqwest::Error> {
        let mut req = self
            .http
            .post(format!("{}{RUNNER_SERVICE}/{method}", self.base))
            .json(&body);
        if !self.uuid.is_empty() {
            req = req
                .header("x-runner-uuid", &self.uuid)
                .header("x-runner-token", &self.token);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let v = resp.json::<Value>().await.unwrap_or(Value::Null);
        Ok((status, v))
    }
}
