use forgerunner_core::ForgeError;
use forgerunner_http::test_server::{HUGE, serve_huge};
use reqwest::header::RETRY_AFTER;

use super::*;

#[test]
fn strips_only_a_leading_bom() {
    assert_eq!(strip_bom(b"\xEF\xBB\xBF{}"), b"{}");
    assert_eq!(strip_bom(b"{}"), b"{}");
    assert_eq!(strip_bom(b""), b"");
}

#[test]
fn status_errors_read_type_names_and_rate_limits() {
    let mut h = HeaderMap::new();
    let e = status_error(
        "op",
        409,
        &h,
        br#"{"typeName":"GitHub.X.AgentExistsException","message":"exists"}"#,
    );
    assert!(e.is_exception("AgentExistsException"));
    assert!(!e.is_transient());
    h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
    let e = status_error(
        "op",
        403,
        &h,
        br#"{"message":"You have exceeded a secondary rate limit"}"#,
    );
    assert!(matches!(
        e,
        ApiError::Status {
            rate_limited: true,
            retry_after: Some(7),
            ..
        }
    ));
    let e = status_error("op", 503, &HeaderMap::new(), b"upstream down");
    assert!(matches!(&e, ApiError::Status { message, .. } if message == "upstream down"));
    assert!(e.is_transient());
}

fn client_with_no_retries() -> GithubClient {
    let opts = HttpOptions {
        max_retries: 0,
        ..HttpOptions::default()
    };
    let http = build_transport(None, None, &opts).expect("transport");
    GithubClient::new(
        Arc::default(),
        ConfigUrl::parse("https://github.com/acme").expect("config URL"),
        AuthMethod::Pat(SecretValue::new("t")),
        http,
        opts,
    )
}

async fn get(client: &GithubClient, url: &str) -> Result<Reply, ApiError> {
    let url = Url::parse(url).expect("URL");
    let token = SecretValue::new("t");
    client
        .execute("get_message", Duration::from_secs(30), || {
            client.raw_request(Method::GET, url.clone(), Auth::Bearer(&token))
        })
        .await
}

#[test]
fn retry_after_and_rate_limit_resets_are_clamped() {
    let mut h = HeaderMap::new();
    h.insert(RETRY_AFTER, HeaderValue::from_static("999999"));
    let e = status_error("op", 429, &h, b"");
    assert_eq!(e.retry_after(), Some(3600));
    assert!(matches!(
        ForgeError::from(e),
        ForgeError::RateLimited {
            retry_after_seconds: 3600
        }
    ));
    let mut h = HeaderMap::new();
    h.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
    h.insert("x-ratelimit-reset", HeaderValue::from_static("99999999999"));
    let e = status_error("op", 403, &h, br#"{"message":"API rate limit exceeded"}"#);
    assert_eq!(e.retry_after(), Some(3600));
}

#[tokio::test]
async fn transport_errors_name_no_path_or_query() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let url = format!(
        "http://127.0.0.1:{port}/_apis/runtime/queue/secret-queue/messages?sessionId=abc&token=hunter2"
    );
    let e = get(&client_with_no_retries(), &url)
        .await
        .expect_err("nothing listens");
    let text = ForgeError::from(e.clone()).to_string();
    assert!(matches!(e, ApiError::Transport { .. }), "{e:?}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    for leak in ["secret-queue", "sessionId", "hunter2", "_apis"] {
        assert!(!text.contains(leak), "{leak} leaked into {text:?}");
    }
}

#[tokio::test]
async fn a_huge_body_is_refused_without_reading_it() {
    for announce_length in [true, false] {
        let (port, server) = serve_huge(announce_length).await;
        let e = get(&client_with_no_retries(), &format!("http://127.0.0.1:{port}/x"))
            .await
            .expect_err("too large");
        assert_eq!(
            e.to_string(),
            "get_message: GitHub returned a response too large: the response body is larger than 4 MiB"
        );
        assert!(!e.is_transient());
        assert!(matches!(ForgeError::from(e), ForgeError::Unavailable(_)));
        let sent = tokio::time::timeout(Duration::from_secs(60), server)
            .await
            .expect("the server notices the client left")
            .expect("server task");
        assert!(sent < 40 * 1024 * 1024, "{sent} of {HUGE} bytes went out");
    }
}

/// M1 of the security review: a forge URL answered with a redirect to another host. reqwest
/// follows up to 10 redirects to any host by default (`redirect::Policy::default()` is
/// `Policy::limited(10)`, reqwest 0.13.5 `src/redirect.rs`, `impl Default for Policy`), and
/// re-sends a POST on 307/308. Both clients of a transport (the ordinary one and the long
/// poll's) follow none: the second server gets nothing, the 3xx is a configuration error that
/// names the target's origin but not its path or query, and it is not retried.
#[tokio::test]
async fn redirects_are_never_followed_by_either_client() {
    use std::sync::atomic::Ordering;

    use forgerunner_http::test_server::{serve_json, serve_redirect};

    let (target, reached) = serve_json(|_| (vec![], "{}".into())).await;
    let (port, answered) = serve_redirect(
        307,
        format!("http://127.0.0.1:{target}/latest/meta-data?token=hunter2"),
    )
    .await;
    let opts = HttpOptions {
        retry: crate::backoff::Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(10),
        },
        ..HttpOptions::default()
    };
    let client = GithubClient::new(
        Arc::default(),
        ConfigUrl::parse("https://github.com/acme").expect("config URL"),
        AuthMethod::Pat(SecretValue::new("t")),
        build_transport(None, None, &opts).expect("transport"),
        opts,
    );
    let url = Url::parse(&format!("http://127.0.0.1:{port}/_apis/x")).expect("URL");
    let token = SecretValue::new("t");
    let ordinary = client
        .execute("get_runner", Duration::from_secs(30), || {
            client.raw_request(Method::POST, url.clone(), Auth::Bearer(&token))
        })
        .await
        .expect_err("a redirect is no answer");
    let poll = client
        .execute_poll("get_message", Duration::from_secs(30), || {
            client.poll_request(url.clone(), Auth::Bearer(&token))
        })
        .await
        .expect_err("a redirect is no answer");
    for e in [ordinary, poll] {
        assert!(matches!(e, ApiError::Redirect { .. }), "{e:?}");
        assert!(!e.is_transient());
        assert_eq!(e.outcome(), forgerunner_core::metrics::Outcome::ClientError);
        let forge = ForgeError::from(e);
        assert!(matches!(forge, ForgeError::Config(_)), "{forge:?}");
        let text = forge.to_string();
        assert!(
            text.contains(&format!(
                "a redirect (307) to another address, http://127.0.0.1:{target}"
            )) && text.contains("does not follow redirects")
                && text.contains("spec.github.configUrl"),
            "{text}"
        );
        for leak in ["latest", "meta-data", "hunter2", "_apis"] {
            assert!(!text.contains(leak), "{leak} leaked into {text:?}");
        }
    }
    assert_eq!(
        answered.load(Ordering::SeqCst),
        2,
        "one request per call, no retry"
    );
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "the redirect target got requests"
    );
}

#[test]
fn reply_debug_shows_no_body() {
    let body = br#"{"token":"ghs_secret","encodedJITConfig":"eyJzZWNyZXQiOnRydWV9"}"#.to_vec();
    let shown = format!(
        "{:?}",
        Reply {
            status: 201,
            body: body.clone()
        }
    );
    assert_eq!(
        shown,
        format!("Reply {{ status: 201, body_bytes: {} }}", body.len())
    );
    assert!(!shown.contains(&format!("{body:?}")));
}

/// Answers one request with `head` (status line and headers) and an empty JSON body.
async fn serve_once(head: &'static str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        let mut buf = [0u8; 4096];
        let _ = socket.read(&mut buf).await;
        let reply = format!("{head}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}");
        let _ = socket.write_all(reply.as_bytes()).await;
    });
    port
}

#[tokio::test]
async fn rate_limit_headers_become_the_budget_and_its_gauges() {
    let metrics = Arc::new(forgerunner_core::metrics::Metrics::default());
    let opts = HttpOptions {
        max_retries: 0,
        ..HttpOptions::default()
    };
    let client = GithubClient::new(
        metrics.clone(),
        ConfigUrl::parse("https://github.com/acme").expect("config URL"),
        AuthMethod::Pat(SecretValue::new("ghp_secret")),
        build_transport(None, None, &opts).expect("transport"),
        opts,
    )
    .with_credential_id("secret/ci/github-creds".into());
    assert_eq!(client.budget(), None);
    let port = serve_once(
        "HTTP/1.1 200 OK\r\nx-ratelimit-limit: 5000\r\nx-ratelimit-remaining: 123\r\nx-ratelimit-reset: 1900000000",
    )
    .await;
    get(&client, &format!("http://127.0.0.1:{port}/x"))
        .await
        .expect("200");
    let b = client.budget().expect("a budget reading");
    assert_eq!((b.remaining, b.limit), (123, 5000));
    let labels = forgerunner_core::budget::BudgetLabels {
        forge: "github",
        credential: "secret/ci/github-creds".into(),
    };
    assert_eq!(metrics.budget.remaining.get_or_create(&labels).get(), 123);
    assert_eq!(metrics.budget.limit.get_or_create(&labels).get(), 5000);
    assert_eq!(metrics.budget.reset.get_or_create(&labels).get(), 1_900_000_000);

    // A second group's client on the same credential keeps the gauges alive when the first
    // goes; the last one takes them along (a deleted group's credential is not exported).
    let exported = || {
        let mut reg = prometheus_client::registry::Registry::default();
        metrics.budget.register(&mut reg);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).expect("encode");
        out.contains("secret/ci/github-creds")
    };
    let other = GithubClient::new(
        metrics.clone(),
        ConfigUrl::parse("https://github.com/acme").expect("config URL"),
        AuthMethod::Pat(SecretValue::new("ghp_secret")),
        build_transport(None, None, &HttpOptions::default()).expect("transport"),
        HttpOptions::default(),
    )
    .with_credential_id("secret/ci/github-creds".into());
    drop(client);
    assert!(exported(), "the other client still uses the credential");
    drop(other);
    assert!(!exported(), "no client uses the credential any more");
}

#[test]
fn credential_ids_name_no_secret() {
    let pat = AuthMethod::Pat(SecretValue::new("ghp_secret"));
    assert_eq!(pat.credential_id("ci/creds"), "secret/ci/creds");
    assert!(!pat.credential_id("ci/creds").contains("ghp_"));
}

/// A registration refused with 401/403 is retried for about as long as scaleset does (its
/// `CheckRetry` retries 401/403 `RetryMax` 4 times with go-retryablehttp's 1 s → 30 s waits,
/// about 15 s in all), not the ~3 s of the ordinary retries, which gave up while a fresh
/// registration token was still replicating (actions-runner-controller#3377).
#[test]
fn a_refused_registration_is_retried_for_about_fifteen_seconds() {
    let opts = HttpOptions::default();
    for _ in 0..50 {
        let total: Duration = (0..crate::client::REGISTRATION_RETRIES)
            .map(|a| opts.registration_retry.delay(a))
            .sum();
        assert!(
            total >= Duration::from_millis(7_500) && total <= Duration::from_secs(15),
            "{total:?}"
        );
    }
    let ordinary: Duration = (0..opts.max_retries).map(|a| opts.retry.delay(a)).sum();
    assert!(
        ordinary < Duration::from_secs(4),
        "the old window was this short: {ordinary:?}"
    );
}

/// scaleset keeps `X-GitHub-Request-Id` and `ActivityId` in its errors (`errors.go`,
/// `newRequestResponseError`); GitHub support asks for them.
#[test]
fn errors_name_the_request_ids_support_asks_for() {
    let mut h = HeaderMap::new();
    h.insert("x-github-request-id", "C0DE:1234:ABCD".parse().unwrap());
    h.insert(
        "activityid",
        "6f1c2d3e-0000-4a4a-9b9b-112233445566".parse().unwrap(),
    );
    let e = status_error("op", 500, &h, br#"{"message":"boom"}"#);
    assert_eq!(
        e.to_string(),
        "op: HTTP 500: boom (X-GitHub-Request-Id C0DE:1234:ABCD, ActivityId 6f1c2d3e-0000-4a4a-9b9b-112233445566)"
    );
    let mut odd = HeaderMap::new();
    odd.insert("x-github-request-id", "a b <script>".parse().unwrap());
    assert_eq!(status_error("op", 500, &odd, b"x").to_string(), "op: HTTP 500: x");
}

/// Accepts connections and never answers; counts them.
async fn serve_silently() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            open.push(socket);
        }
    });
    (port, accepted)
}

/// Waits until `n` connections were accepted, then a little longer to see that no more come.
async fn settles_at(accepted: &std::sync::atomic::AtomicUsize, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    while accepted.load(Ordering::SeqCst) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    accepted.load(Ordering::SeqCst)
}

/// A thousand groups starting at once opened a thousand HTTP/1.1 connections to the same host
/// for calls of milliseconds, 30 KiB each; the long polls, one per group, are not held back.
#[tokio::test]
async fn requests_in_flight_to_a_host_are_bounded_but_long_polls_are_not() {
    let (port, accepted) = serve_silently().await;
    let client = Arc::new(client_with_no_retries());
    let url = Url::parse(&format!("http://127.0.0.1:{port}/x")).expect("URL");
    let token = SecretValue::new("t");
    let mut calls = Vec::new();
    for _ in 0..REQUESTS_IN_FLIGHT_PER_HOST + 8 {
        let (client, url, token) = (client.clone(), url.clone(), token.clone());
        calls.push(tokio::spawn(async move {
            client
                .execute("registration_token", Duration::from_secs(30), || {
                    client.raw_request(Method::POST, url.clone(), Auth::Bearer(&token))
                })
                .await
        }));
    }
    assert_eq!(
        settles_at(&accepted, REQUESTS_IN_FLIGHT_PER_HOST).await,
        REQUESTS_IN_FLIGHT_PER_HOST
    );
    for _ in 0..3 {
        let (client, url, token) = (client.clone(), url.clone(), token.clone());
        calls.push(tokio::spawn(async move {
            client
                .execute_poll("get_message", Duration::from_secs(30), || {
                    client.poll_request(url.clone(), Auth::Bearer(&token))
                })
                .await
        }));
    }
    assert_eq!(
        settles_at(&accepted, REQUESTS_IN_FLIGHT_PER_HOST + 3).await,
        REQUESTS_IN_FLIGHT_PER_HOST + 3
    );
    for call in calls {
        call.abort();
    }
}

#[tokio::test]
async fn a_host_bound_is_forgotten_while_nothing_is_sent_there() {
    let limits = HostLimits::default();
    for i in 0..40 {
        let url = Url::parse(&format!("https://h{i}.example/x")).expect("URL");
        let turn = limits.acquire(&url).await;
        assert!(turn.is_some());
    }
    assert!(limits.hosts() <= IDLE_HOST_LIMITS_KEPT, "{}", limits.hosts());
    let url = Url::parse("https://busy.example/x").expect("URL");
    let held: Vec<_> =
        futures::future::join_all((0..REQUESTS_IN_FLIGHT_PER_HOST).map(|_| limits.acquire(&url))).await;
    assert!(held.iter().all(Option::is_some));
    for i in 0..40 {
        let url = Url::parse(&format!("https://other{i}.example/x")).expect("URL");
        let _turn = limits.acquire(&url).await;
    }
    // The busy host keeps its bound: a new one would let another 32 requests through.
    let more = tokio::time::timeout(Duration::from_millis(50), limits.acquire(&url)).await;
    assert!(more.is_err(), "the bound of a busy host was forgotten");
}

/// `forgeHosts.refusePrivateAddresses` in the GitHub client: a name resolving to loopback, a
/// loopback literal (the Actions service URL comes from GitHub's answers, which no host check
/// saw) and a private proxy are refused without a request, as configuration errors, not
/// retried; with the policy off the same request arrives.
#[tokio::test]
async fn private_addresses_are_refused_when_configured() {
    use std::sync::atomic::Ordering;

    use forgerunner_http::test_server::serve_json;

    let (port, served) = serve_json(|_| (vec![], "{}".into())).await;
    let opts = HttpOptions {
        addresses: AddressPolicy::RefusePrivate,
        ..HttpOptions::default()
    };
    let client = GithubClient::new(
        Arc::default(),
        ConfigUrl::parse("https://github.com/acme").expect("config URL"),
        AuthMethod::Pat(SecretValue::new("t")),
        build_transport(None, None, &opts).expect("transport"),
        opts.clone(),
    );
    for (url, words) in [
        (format!("http://localhost:{port}/x"), "localhost resolves only to"),
        (
            format!("http://127.0.0.1:{port}/x"),
            "127.0.0.1 is 127.0.0.1 (loopback)",
        ),
    ] {
        let e = get(&client, &url).await.expect_err("refused");
        let text = e.to_string();
        assert!(matches!(e, ApiError::Config(_)), "{url}: {e:?}");
        assert!(!e.is_transient());
        assert!(text.contains(words) && text.contains("(loopback)"), "{text}");
        assert!(text.contains("forgeHosts.refusePrivateAddresses"), "{text}");
    }
    assert_eq!(served.load(Ordering::SeqCst), 0, "the server saw a request");
    let e = build_transport(None, Some("http://169.254.169.254:3128"), &opts).expect_err("proxy");
    assert!(e.to_string().contains("link-local"), "{e}");

    let off = client_with_no_retries();
    get(&off, &format!("http://localhost:{port}/x"))
        .await
        .expect("with the policy off the request arrives");
    assert_eq!(served.load(Ordering::SeqCst), 1);
}

#[test]
fn the_poll_travels_direct_unless_a_proxy_is_set() {
    let opts = HttpOptions::default();
    let direct = build_transport(None, None, &opts).expect("transport");
    // A proxy in the operator's environment (CI's, say) also keeps reqwest.
    assert_eq!(
        matches!(direct.poll, PollTransport::Direct(_)),
        LongPollClient::serves(None)
    );
    let proxied = build_transport(None, Some("http://proxy.corp:3128"), &opts).expect("transport");
    assert!(matches!(proxied.poll, PollTransport::Proxied(_)));
    assert!(proxied.has_proxy);
}
