use std::sync::atomic::Ordering;
use std::time::Duration;

use forgerunner_core::ForgeError;
use forgerunner_http::test_server::{HUGE, JsonReply, page_number, serve_huge, serve_json};

use super::*;
use crate::version::ForgejoVersion;

fn client(url: &str) -> Result<ForgejoClient, ForgejoError> {
    ForgejoClient::new(
        url,
        SecretValue::new("t"),
        Arc::default(),
        ClientOptions::default(),
        None,
        None,
    )
}

#[test]
fn rejects_bad_urls_and_proxies() {
    for bad in ["", "forgejo.local", "ftp://x", "mailto:a@b"] {
        assert!(matches!(client(bad), Err(ForgejoError::Spec(_))), "{bad}");
    }
    let proxied = ForgejoClient::new(
        "https://x",
        SecretValue::new("t"),
        Arc::default(),
        ClientOptions::default(),
        None,
        Some("http://proxy.internal:3128"),
    );
    assert!(proxied.is_ok());
}

fn local(port: u16) -> ForgejoClient {
    let opts = ClientOptions {
        backoff: Duration::from_millis(1),
        ..ClientOptions::default()
    };
    ForgejoClient::new(
        &format!("http://127.0.0.1:{port}"),
        SecretValue::new("t"),
        Arc::default(),
        opts,
        None,
        None,
    )
    .expect("client")
}

const V15: ForgejoVersion = ForgejoVersion {
    major: 15,
    minor: 0,
    patch: 0,
};

fn org() -> Scope {
    Scope::Org("acme".into())
}

#[tokio::test]
async fn a_huge_job_list_is_refused_without_reading_it() {
    for announce_length in [true, false] {
        let (port, server) = serve_huge(announce_length).await;
        let err = local(port)
            .list_jobs(V15, &org(), &["x"])
            .await
            .expect_err("too large");
        assert!(
            matches!(err, ForgejoError::Request(RequestError::TooLarge { .. })),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "Forgejo returned a response too large to list waiting Actions jobs: the response body is larger than 4 MiB"
        );
        let sent = tokio::time::timeout(Duration::from_secs(60), server)
            .await
            .expect("the server notices the client left")
            .expect("server task");
        assert!(sent < 40 * 1024 * 1024, "{sent} of {HUGE} bytes went out");
    }
}

/// A page of `n` runners numbered from `first`, and a total far above what exists.
fn runners_page(first: usize, n: usize) -> JsonReply {
    let rows: Vec<String> = (first..first + n)
        .map(|id| format!(r#"{{"id":{id},"name":"r{id}","status":"online"}}"#))
        .collect();
    (
        vec![("x-total-count".into(), "1000000000".into())],
        format!("[{}]", rows.join(",")),
    )
}

#[tokio::test]
async fn a_runner_listing_that_never_ends_fails_whole() {
    let (port, served) = serve_json(|target| runners_page(page_number(target), 1)).await;
    let err = local(port)
        .list_runners(V15, &org())
        .await
        .expect_err("never ends");
    assert_eq!(
        err.to_string(),
        "Forgejo returned a response too large to list runners: the listing did not end within 400 pages"
    );
    assert_eq!(served.load(Ordering::SeqCst), 400);
}

#[tokio::test]
async fn a_runner_listing_with_too_many_items_fails_whole() {
    // 100 runners a page (more than asked for): 200 pages fill the 20 000 entries.
    let (port, served) = serve_json(|target| runners_page(page_number(target) * 1000, 100)).await;
    let err = local(port).list_runners(V15, &org()).await.expect_err("too many");
    assert_eq!(
        err.to_string(),
        "Forgejo returned a response too large to list runners: the listing holds more than 20000 items and labels"
    );
    assert_eq!(served.load(Ordering::SeqCst), 201);
}

/// H3c of the security review: Forgejo's job list is one unpaged answer, so it is one whole
/// listing, and its labels count against the budget. 400 jobs of 64 distinct labels are
/// 26 000 entries in ~1 MiB: refused, where before any list that fit in 4 MiB was kept.
#[tokio::test]
async fn a_job_list_over_the_entry_budget_fails_whole() {
    let labels: Vec<String> = (0..64).map(|i| format!("label-{i}")).collect();
    let labels = serde_json::to_string(&labels).expect("JSON");
    let jobs: Vec<String> = (1..=400)
        .map(|id| format!(r#"{{"id":{id},"status":"waiting","runs_on":{labels}}}"#))
        .collect();
    let body = format!("[{}]", jobs.join(","));
    let (port, served) = serve_json(move |_| (vec![], body.clone())).await;
    let err = local(port)
        .list_jobs(V15, &org(), &["x"])
        .await
        .expect_err("too many");
    assert_eq!(
        err.to_string(),
        "Forgejo returned a response too large to list waiting Actions jobs: the listing holds more than 20000 items and labels"
    );
    assert_eq!(served.load(Ordering::SeqCst), 1, "a budget error is not retried");

    let ok = r#"[{"id":1,"status":"waiting","runs_on":["","",""]},{"id":2,"runs_on":null}]"#;
    let (port, _) = serve_json(move |_| (vec![], ok.to_string())).await;
    let jobs = local(port).list_jobs(V15, &org(), &["x"]).await.expect("jobs");
    assert_eq!(jobs[0].runs_on, [""]);
    assert!(jobs[1].runs_on.is_empty());
    let (port, _) = serve_json(|_| (vec![], "null".to_string())).await;
    assert!(
        local(port)
            .list_jobs(V15, &org(), &["x"])
            .await
            .expect("null")
            .is_empty()
    );
}

/// M1 of the security review: a Forgejo URL answered with a 308 to another host. reqwest's
/// default policy would follow it and send the DELETE again there
/// (`redirect::Policy::default()` is `limited(10)`, reqwest 0.13.5 `src/redirect.rs`); the
/// shared client follows none, and Forgejo's words tell the user which field to fix.
#[tokio::test]
async fn a_redirect_is_a_configuration_error_and_never_followed() {
    let (target, reached) = serve_json(|_| (vec![], "{}".into())).await;
    let (port, answered) = forgerunner_http::test_server::serve_redirect(
        308,
        format!("http://127.0.0.1:{target}/admin?token=hunter2"),
    )
    .await;
    let err = local(port).delete_runner(V15, &org(), 7).await.unwrap_err();
    let text = err.to_string();
    assert_eq!(
        text,
        format!(
            "Forgejo answered the request to delete a runner with a redirect (308) to another \
             address, http://127.0.0.1:{target}; forgerunner does not follow redirects: set \
             spec.forgejo.url to the final address"
        )
    );
    assert!(matches!(ForgeError::from(err), ForgeError::Config(_)));
    assert_eq!(answered.load(Ordering::SeqCst), 1, "no retry");
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "the redirect target got requests"
    );
}
