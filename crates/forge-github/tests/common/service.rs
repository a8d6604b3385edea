//! A scripted Actions service on the stub, for what the emulator cannot show: the token chain,
//! sessions of scale set [`SCALE_SET`] and their queue, `acquirablejobs` (which the emulator
//! does not serve) and `acquirejobs`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::stub::{self, Stub, StubReply, StubRequest};

/// The scale set the service's sessions belong to.
pub const SCALE_SET: i64 = 7;

/// What the tests vary of the service.
#[derive(Clone, Debug)]
pub struct Script {
    /// `totalAvailableJobs` of a new session's statistics.
    pub available: u32,
    /// The answer to `acquirablejobs`.
    pub acquirable: StubReply,
    /// How long a long poll is held before its empty (202) answer.
    pub poll_hold: Duration,
}

impl Script {
    /// The stub's handler. The URLs the service hands out point at `port`, the stub's, set once
    /// it listens.
    pub fn handler(
        self,
        port: &Arc<OnceLock<u16>>,
    ) -> impl Fn(&StubRequest) -> StubReply + Send + Sync + 'static {
        let port = port.clone();
        move |req: &StubRequest| {
            let base = format!("http://127.0.0.1:{}", port.get().copied().unwrap_or_default());
            match (req.method.as_str(), req.path()) {
                ("POST", p) if p.ends_with("/registration-token") => {
                    StubReply::json(201, r#"{"token":"registration"}"#)
                }
                ("POST", "/api/v3/actions/runner-registration") => StubReply::json(
                    200,
                    format!(r#"{{"url":"{base}/tenant/","token":"admin-token"}}"#),
                ),
                ("POST", p) if p.ends_with("/sessions") => StubReply::json(
                    200,
                    format!(
                        r#"{{"sessionId":"s-1","ownerName":"t","messageQueueUrl":"{base}/queue/{SCALE_SET}/s-1","messageQueueAccessToken":"queue-token","statistics":{{"totalAvailableJobs":{},"totalAssignedJobs":0}}}}"#,
                        self.available
                    ),
                ),
                ("PATCH", p) if p.ends_with("/sessions/s-1") => StubReply::json(
                    200,
                    format!(
                        r#"{{"sessionId":"s-1","messageQueueUrl":"{base}/queue/{SCALE_SET}/s-1","messageQueueAccessToken":"queue-token"}}"#
                    ),
                ),
                ("DELETE", p) if p.contains("/sessions/") => StubReply::empty(204),
                ("GET", p) if p.ends_with("/acquirablejobs") => self.acquirable.clone(),
                ("POST", p) if p.ends_with("/acquirejobs") => {
                    let ids: Vec<i64> = serde_json::from_slice(&req.body).unwrap_or_default();
                    StubReply::json(
                        200,
                        serde_json::json!({"count": ids.len(), "value": ids}).to_string(),
                    )
                }
                // The long poll: nothing new within the hold.
                ("GET", p) if p.starts_with("/queue/") => StubReply {
                    delay: self.poll_hold,
                    ..StubReply::empty(202)
                },
                _ => StubReply::json(404, r#"{"message":"not in the stub"}"#),
            }
        }
    }

    /// A stub serving the script.
    pub async fn start(self) -> Stub {
        let port = Arc::new(OnceLock::new());
        let stub = stub::start(self.handler(&port)).await;
        port.set(stub.port).expect("set once");
        stub
    }
}
