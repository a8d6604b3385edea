//! Helpers of the Forgejo fake tests: start a fake, call REST and the runner RPC.
#![allow(dead_code)] // each test binary uses a different subset

use forgerunner_testkit::forgejo::{ADMIN_TOKEN, FakeConfig, ForgejoFakeHandle};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

pub const V15: &str = "15.0.3+gitea-1.22.0";
pub const V14: &str = "14.0.4+gitea-1.22.0";
pub const V11: &str = "11.0.0+gitea-1.22.0";
pub const V10: &str = "10.0.1+gitea-1.22.0";

pub async fn fake(version: &str) -> ForgejoFakeHandle {
    ForgejoFakeHandle::start(FakeConfig::version(version))
        .await
        .unwrap()
}

pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|_| panic!("not JSON: {}", self.text))
    }
}

pub async fn call(
    f: &ForgejoFakeHandle,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let c = reqwest::Client::new();
    let mut req = c.request(method.parse().unwrap(), format!("{}{path}", f.url()));
    if let Some(t) = token {
        req = req.header("authorization", format!("token {t}"));
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    Reply {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        text: resp.text().await.unwrap(),
    }
}

pub async fn get(f: &ForgejoFakeHandle, path: &str) -> Reply {
    call(f, "GET", path, Some(ADMIN_TOKEN), None).await
}

pub async fn rpc(f: &ForgejoFakeHandle, method: &str, creds: (&str, &str), body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!(
            "{}/api/actions/runner.v1.RunnerService/{method}",
            f.url()
        ))
        .header("x-runner-uuid", creds.0)
        .header("x-runner-token", creds.1)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

pub fn ids(v: &Value) -> Vec<i64> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|j| j["id"].as_i64().unwrap())
        .collect()
}

/// A REST-created runner that declared `labels`: (id, uuid, token).
pub async fn declared_runner(
    f: &ForgejoFakeHandle,
    path: &str,
    labels: &[&str],
    ephemeral: bool,
) -> (i64, String, String) {
    let body = json!({"name": "r", "ephemeral": ephemeral});
    let r = call(f, "POST", path, Some(ADMIN_TOKEN), Some(body)).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let v = r.json();
    let (uuid, token) = (
        v["uuid"].as_str().unwrap().to_string(),
        v["token"].as_str().unwrap().to_string(),
    );
    let (s, _) = rpc(
        f,
        "Declare",
        (&uuid, &token),
        json!({"labels": labels, "version": "12.8.2"}),
    )
    .await;
    assert_eq!(s, 200);
    (v["id"].as_i64().unwrap(), uuid, token)
}
