use std::sync::atomic::Ordering;
use std::time::Duration;

use forgerunner_core::ForgeError;
use forgerunner_http::test_server::{HUGE, page_number, serve_huge, serve_json};

use super::*;

#[test]
fn urls_keep_subpaths_and_escape_segments() {
    let c = GiteaClient::new(
        "https://git.example.com/sub/",
        SecretValue::new("t"),
        Arc::new(Metrics::default()),
        ClientOptions::default(),
    )
    .unwrap();
    let u = c.url(
        &["repos", "a b", "r", "actions", "jobs"],
        &[("status", "queued".into())],
    );
    assert_eq!(
        u.as_str(),
        "https://git.example.com/sub/api/v1/repos/a%20b/r/actions/jobs?status=queued"
    );
    assert!(format!("{c:?}").contains("git.example.com"));
}

#[test]
fn rejects_bad_urls() {
    for bad in ["", "gitea.local", "ftp://x", "mailto:a@b"] {
        let r = GiteaClient::new(
            bad,
            SecretValue::new("t"),
            Arc::default(),
            ClientOptions::default(),
        );
        assert!(matches!(r, Err(GiteaError::Spec(_))), "{bad}");
    }
}

fn local(port: u16) -> GiteaClient {
    let opts = ClientOptions {
        backoff: Duration::from_millis(1),
        ..ClientOptions::default()
    };
    GiteaClient::new(
        &format!("http://127.0.0.1:{port}"),
        SecretValue::new("t"),
        Arc::default(),
        opts,
    )
    .unwrap()
}

fn org() -> Scope {
    Scope::Org("acme".into())
}

#[tokio::test]
async fn a_huge_page_is_refused_without_reading_it() {
    for announce_length in [true, false] {
        let (port, server) = serve_huge(announce_length).await;
        let err = local(port).list_jobs(&org(), &["queued"]).await.unwrap_err();
        assert!(
            matches!(err, GiteaError::Request(RequestError::TooLarge { .. })),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "Gitea returned a response too large to list Actions jobs: the response body is larger than 4 MiB"
        );
        let sent = tokio::time::timeout(Duration::from_secs(60), server)
            .await
            .expect("the server notices the client left")
            .unwrap();
        assert!(sent < 40 * 1024 * 1024, "{sent} of {HUGE} bytes went out");
        let forge = forgerunner_core::ForgeError::from(err);
        assert_eq!(
            forge.category(),
            forgerunner_core::error::ErrorCategory::ForgeUnavailable
        );
    }
}

/// A page of `n` jobs numbered from `first`, claiming far more exist.
fn jobs_page(first: usize, n: usize) -> String {
    let jobs: Vec<String> = (first..first + n)
        .map(|id| format!(r#"{{"id":{id},"status":"queued","labels":["x"]}}"#))
        .collect();
    format!(r#"{{"jobs":[{}],"total_count":1000000000}}"#, jobs.join(","))
}

#[tokio::test]
async fn a_listing_that_never_ends_fails_whole() {
    // One new job per page, for ever: the page cap ends it.
    let (port, served) = serve_json(|target| (vec![], jobs_page(page_number(target), 1))).await;
    let err = local(port).list_jobs(&org(), &["queued"]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Gitea returned a response too large to list Actions jobs: the listing did not end within 400 pages"
    );
    assert_eq!(served.load(Ordering::SeqCst), 400);
}

#[tokio::test]
async fn a_listing_with_too_many_items_fails_whole() {
    // 50 jobs of one label a page: 100 entries, so 200 pages fill the 20 000.
    let (port, served) = serve_json(|target| {
        let page = page_number(target);
        (vec![], jobs_page(page * 1000, 50))
    })
    .await;
    let err = local(port).list_jobs(&org(), &["queued"]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Gitea returned a response too large to list Actions jobs: the listing holds more than 20000 items and labels"
    );
    assert_eq!(served.load(Ordering::SeqCst), 201);
}

/// H3c of the security review: labels count against the listing's budget like items, since
/// each is a `String` of its own. 50 jobs of 64 distinct labels (what a group may hold) are
/// 3 250 entries a page, so the seventh page passes the 20 000 and the listing fails there,
/// though its bytes (~1 MiB) and items (350) are far within their caps.
#[tokio::test]
async fn labels_count_against_the_listing_budget() {
    let labels: Vec<String> = (0..64).map(|i| format!("label-{i}")).collect();
    let labels = serde_json::to_string(&labels).unwrap();
    let (port, served) = serve_json(move |target| {
        let first = page_number(target) * 1000;
        let jobs: Vec<String> = (first..first + 50)
            .map(|id| format!(r#"{{"id":{id},"status":"queued","labels":{labels}}}"#))
            .collect();
        (
            vec![],
            format!(r#"{{"jobs":[{}],"total_count":1000000}}"#, jobs.join(",")),
        )
    })
    .await;
    let err = local(port).list_jobs(&org(), &["queued"]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Gitea returned a response too large to list Actions jobs: the listing holds more than 20000 items and labels"
    );
    assert_eq!(served.load(Ordering::SeqCst), 7);
}

/// H3c: a listing whose jobs repeat one empty label a million times keeps one `""` per job
/// and decides as Gitea would (the jobs match no group), within every budget.
#[tokio::test]
async fn a_listing_of_repeated_labels_keeps_one_of_each() {
    let body = format!(
        r#"{{"jobs":[{{"id":1,"status":"queued","labels":[{}""]}},{{"id":2,"status":"queued","labels":["x"]}}],"total_count":2}}"#,
        r#""","#.repeat(1_000_000)
    );
    let (port, _) = serve_json(move |_| (vec![], body.clone())).await;
    let jobs = local(port).list_jobs(&org(), &["queued"]).await.unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0].labels, [""]);
    assert_eq!(jobs[1].labels, ["x"]);
}

/// M1 of the security review: a Gitea URL answered with a 307 to another host. reqwest's
/// default policy would follow it (`redirect::Policy::default()` is `limited(10)`, reqwest
/// 0.13.5 `src/redirect.rs`); the shared client follows none, and Gitea's words tell the user
/// which field to fix, naming the target's origin but not its path or query.
#[tokio::test]
async fn a_redirect_is_a_configuration_error_and_never_followed() {
    let (target, reached) = serve_json(|_| (vec![], r#"{"version":"1.24.0"}"#.into())).await;
    let (port, answered) = forgerunner_http::test_server::serve_redirect(
        307,
        format!("http://127.0.0.1:{target}/api/v1/version?token=hunter2"),
    )
    .await;
    let c = local(port);
    let err = c.version().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Gitea answered the request to read the server version with a redirect (307) to \
             another address, http://127.0.0.1:{target}; forgerunner does not follow redirects: \
             set spec.gitea.url to the final address"
        )
    );
    let err = c.delete_runner(&org(), 7).await.unwrap_err();
    assert!(
        matches!(err, GiteaError::Request(RequestError::Redirect { .. })),
        "{err:?}"
    );
    assert!(matches!(ForgeError::from(err), ForgeError::Config(_)));
    assert_eq!(answered.load(Ordering::SeqCst), 2, "no retry");
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "the redirect target got requests"
    );
}
