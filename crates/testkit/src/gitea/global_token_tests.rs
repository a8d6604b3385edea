//! The fake's fixed instance-wide registration token (`GITEA_RUNNER_REGISTRATION_TOKEN`)
//! against the Gitea 1.25/1.26 sources it copies:
//!
//! - `services/actions/init.go` `initGlobalRunnerToken`: the token is stored with
//!   `NewRunnerTokenWithValue(ctx, 0, 0, token)` (owner 0, repo 0: the global token) and must
//!   have at least 32 characters;
//! - `routers/api/actions/runner/runner.go` `Register`: the runner gets the token's
//!   `OwnerID`/`RepoID`, so it is a global runner, taking jobs of every repository
//!   (`models/actions/task.go` `CreateTaskForRunner`);
//! - `models/actions/runner.go` `FindRunnerOptions.ToConds` (org/user: `owner_id = X`, repo:
//!   `repo_id = X`): no scoped listing shows it;
//! - `routers/api/v1/shared/runners.go` `getRunnerByID` + `ActionRunner.EditableInContext`: an
//!   org/user/repo route answers 404 for it; only the admin route may delete it.

use serde_json::{Value, json};

use super::control::{ADMIN_TOKEN, FakeConfig, GiteaFakeHandle};
use super::model::{FakeScope, JobState, Model};
use crate::forge_common::rpc::RunnerClient;

/// 40 characters, as Gitea's own generated tokens (`NewRunnerToken`).
const FIXED: &str = "0123456789abcdef0123456789abcdef01234567";

async fn fake_with_fixed_token() -> GiteaFakeHandle {
    GiteaFakeHandle::start(FakeConfig {
        runner_registration_token: Some(FIXED.into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

/// What the runner's `register` does: the `Register` RPC with a registration token.
async fn register(fake: &GiteaFakeHandle, token: &str, name: &str) -> (u16, Value) {
    let rpc = RunnerClient::new(&fake.url()).unwrap();
    rpc.call(
        "Register",
        json!({"name": name, "token": token, "labels": ["linux"], "ephemeral": true}),
    )
    .await
    .unwrap()
}

/// `GET` (or `DELETE`) `/api/v1/{path}` with an API token; status and JSON body.
async fn rest(fake: &GiteaFakeHandle, delete: bool, path: &str, token: &str) -> (u16, Value) {
    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/{path}", fake.url());
    let req = if delete { http.delete(url) } else { http.get(url) };
    let resp = req
        .header("authorization", format!("token {token}"))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json::<Value>().await.unwrap_or(Value::Null))
}

fn listed_names(body: &Value) -> Vec<String> {
    body["runners"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn gitea_fixed_registration_token_registers_a_global_runner_no_scope_sees_or_deletes() {
    let fake = fake_with_fixed_token().await;
    fake.add_org("acme", &["alice"]);
    fake.add_repo("acme/app");
    let alice = fake.add_token("alice", false);
    let org_job = fake.queue_job("acme/app", &["linux"]);
    let foreign_job = fake.queue_job("other/secret", &["linux"]);

    // The operator meant an org runner; the token decides (`Register` copies its scope).
    let (status, body) = register(&fake, FIXED, "org-abcde").await;
    assert_eq!(status, 200, "{body}");
    let id = body["runner"]["id"].as_i64().unwrap();
    let runners = fake.runners();
    assert_eq!(runners.len(), 1);
    assert_eq!(runners[0].scope, FakeScope::Global, "owner 0, repo 0");

    // Not in the org's, the token user's, or the repository's runner list; in the admin one.
    for path in [
        "orgs/acme/actions/runners",
        "user/actions/runners",
        "repos/acme/app/actions/runners",
    ] {
        let (status, body) = rest(&fake, false, path, &alice).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(listed_names(&body).is_empty(), "{path}: {body}");
        assert_eq!(body["total_count"], 0, "{path}");
    }
    let (_, body) = rest(&fake, false, "admin/actions/runners", ADMIN_TOKEN).await;
    assert_eq!(listed_names(&body), ["org-abcde"]);

    // A scoped DELETE is 404 (not editable in that context) and leaves the runner in place.
    for path in [
        format!("orgs/acme/actions/runners/{id}"),
        format!("repos/acme/app/actions/runners/{id}"),
        format!("user/actions/runners/{id}"),
    ] {
        let (status, body) = rest(&fake, true, &path, &alice).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["message"], "No permission to access this runner", "{path}");
    }
    assert_eq!(fake.runners().len(), 1, "still registered");

    // It takes jobs of every repository: the oldest matching one, here the org's, but a second
    // global runner takes another owner's job just as well.
    assert_eq!(fake.take_job(id), Some(org_job));
    let (_, body) = register(&fake, FIXED, "org-fghij").await;
    let second = body["runner"]["id"].as_i64().unwrap();
    assert_eq!(fake.take_job(second), Some(foreign_job));
    assert_eq!(fake.job(foreign_job).unwrap().runner_name, "org-fghij");

    // Only the admin route deletes it.
    let (status, _) = rest(
        &fake,
        true,
        &format!("admin/actions/runners/{second}"),
        ADMIN_TOKEN,
    )
    .await;
    assert_eq!(status, 204);
    // An unknown id stays Gitea's "Runner not found".
    let (status, body) = rest(&fake, true, "orgs/acme/actions/runners/999999", &alice).await;
    assert_eq!(
        (status, body["message"].as_str()),
        (404, Some("Runner not found"))
    );
}

#[tokio::test]
async fn gitea_fixed_registration_token_is_the_admin_routes_token_and_scoped_tokens_differ() {
    let fake = fake_with_fixed_token().await;
    fake.add_org("acme", &["alice"]);
    // `GetRegistrationToken` returns the latest global token: the fixed one.
    assert_eq!(fake.registration_token(&FakeScope::Global), FIXED);
    let org = fake.registration_token(&FakeScope::Owner("acme".into()));
    assert_ne!(org, FIXED);
    let (status, body) = register(&fake, &org, "org-klmno").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(fake.runners()[0].scope, FakeScope::Owner("acme".into()));
}

#[tokio::test]
async fn gitea_fixed_registration_token_rules_of_init_global_runner_token() {
    // Fewer than 32 characters: Gitea refuses to start.
    let short = GiteaFakeHandle::start(FakeConfig {
        runner_registration_token: Some("too-short".into()),
        ..FakeConfig::default()
    })
    .await;
    assert!(short.is_err());

    // A new value replaces the active global token; a known one is kept where it is.
    let mut m = Model::default();
    let old = m.registration_token(&FakeScope::Global);
    m.init_global_runner_token(FIXED).unwrap();
    assert_eq!(m.registration_token(&FakeScope::Global), FIXED);
    assert!(
        m.register(&old, "x", vec![], true).is_none(),
        "old global token invalidated"
    );
    let org = m.registration_token(&FakeScope::Owner("acme".into()));
    let padded = format!("{org}{}", "0".repeat(32));
    m.registration_tokens
        .insert(FakeScope::Owner("acme".into()), padded.clone());
    m.init_global_runner_token(&padded).unwrap();
    assert_eq!(
        m.registration_token(&FakeScope::Global),
        FIXED,
        "existing token: no change"
    );
    let r = m.register(FIXED, "g", vec!["linux".into()], true).unwrap();
    assert_eq!(r.scope, FakeScope::Global);
    let job = m.add_job("anyone", "anything", &["linux"], JobState::Waiting);
    assert_eq!(m.fetch(r.id).0, super::model::Fetch::Task(job.id));
}
