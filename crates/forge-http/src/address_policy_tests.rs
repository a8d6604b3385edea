use std::sync::Arc;
use std::sync::atomic::Ordering;

use forgerunner_core::forge::SecretValue;
use reqwest::Method;

use super::*;
use crate::rest::{Api, Call, CallError, ClientOptions, MAX_SMALL_BYTES, RestClient, SetupError, json};
use crate::test_server::serve_json;
use crate::transport::{TransportFailure, TransportKind};

const API: Api = Api {
    forge: "gitea",
    name: "Gitea",
    spec: "spec.gitea",
    lift_block_after_wait: false,
};

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("a socket address")
}

fn url(text: &str) -> Url {
    Url::parse(text).expect("a URL")
}

fn client(policy: AddressPolicy) -> reqwest::Client {
    with_policy(reqwest::Client::builder(), policy)
        .build()
        .expect("client")
}

#[test]
fn resolved_addresses_keep_only_public_ones() {
    let (kept, refused) = keep_public(vec![
        addr("127.0.0.1:0"),
        addr("140.82.121.4:0"),
        addr("[::ffff:169.254.169.254]:0"),
        addr("[2606:50c0:8000::153]:0"),
    ]);
    assert_eq!(
        kept,
        vec![addr("140.82.121.4:0"), addr("[2606:50c0:8000::153]:0")]
    );
    assert_eq!(
        refused,
        vec![
            (addr("127.0.0.1:0").ip(), AddressClass::Loopback),
            (addr("[::ffff:169.254.169.254]:0").ip(), AddressClass::LinkLocal),
        ]
    );
    let many: Vec<SocketAddr> = (1..=10).map(|i| addr(&format!("10.0.0.{i}:0"))).collect();
    let (kept, refused) = keep_public(many);
    assert!(kept.is_empty());
    assert_eq!(refused.len(), MAX_NAMED, "a message names a few, not all");
}

#[test]
fn literals_are_checked_before_the_call() {
    let on = AddressPolicy::RefusePrivate;
    let e = check_url(on, &url("http://169.254.169.254/latest/meta-data?token=x")).expect_err("metadata");
    assert_eq!(e.class(), Some(AddressClass::LinkLocal));
    assert_eq!(
        e.to_string(),
        "169.254.169.254 is 169.254.169.254 (link-local (incl. cloud metadata)), which \
         forgeHosts.refusePrivateAddresses refuses"
    );
    let e = check_url(on, &url("https://[::1]:3000/")).expect_err("loopback");
    assert_eq!(
        (e.host.as_str(), e.class()),
        ("[::1]", Some(AddressClass::Loopback))
    );
    assert!(
        check_url(on, &url("https://[::ffff:a00:1]/")).is_err(),
        "IPv4-mapped 10.0.0.1"
    );
    assert!(check_url(on, &url("https://140.82.121.4/")).is_ok());
    assert!(
        check_url(on, &url("http://localhost:3000/")).is_ok(),
        "names are resolved later"
    );
    assert!(check_url(AddressPolicy::AllowPrivate, &url("http://127.0.0.1/")).is_ok());

    let e = check_proxy(on, Some(" http://user:hunter2@10.1.2.3:3128 ")).expect_err("private proxy");
    assert_eq!(e.class(), Some(AddressClass::Private));
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(check_proxy(on, Some("http://proxy.corp:3128")).is_ok());
    assert!(check_proxy(on, None).is_ok());
    assert!(check_proxy(on, Some("  ")).is_ok());
    assert!(
        check_proxy(on, Some("http://[::not")).is_ok(),
        "left to the builder"
    );
}

/// The point of the resolver: `localhost` passes any host-name check, yet resolves to
/// 127.0.0.1. With the policy on, the client opens no connection and says which host, address
/// and class; with it off, the same request reaches the server.
#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_without_a_request() {
    let (port, served) = serve_json(|_| (vec![], "{}".into())).await;
    let target = format!("http://localhost:{port}/api/v1/version?token=hunter2");

    let e = client(AddressPolicy::RefusePrivate)
        .get(&target)
        .send()
        .await
        .expect_err("refused");
    let refused = refusal_in(&e).expect("the resolver's refusal is in the chain");
    assert_eq!(refused.host, "localhost");
    assert!(!refused.literal);
    assert!(
        refused.refused.iter().all(|(ip, _)| ip.is_loopback()),
        "{refused:?}"
    );
    let f = TransportFailure::from_reqwest(&e);
    assert_eq!(f.kind, TransportKind::AddressRefused);
    let text = f.to_string();
    for part in [
        format!("refused to connect (http://localhost:{port})"),
        "localhost resolves only to".to_owned(),
        "(loopback)".to_owned(),
        "forgeHosts.refusePrivateAddresses".to_owned(),
    ] {
        assert!(text.contains(&part), "{part:?} missing from {text:?}");
    }
    for leak in ["hunter2", "/api/v1"] {
        assert!(!text.contains(leak), "{leak} leaked into {text:?}");
    }
    assert_eq!(served.load(Ordering::SeqCst), 0, "the server saw a request");

    client(AddressPolicy::AllowPrivate)
        .get(&target)
        .send()
        .await
        .expect("with the policy off the request arrives");
    assert_eq!(served.load(Ordering::SeqCst), 1);
}

/// hyper connects to an IP literal without asking the resolver, which is why literals are
/// checked before the call ([`check_url`], and the reconciler's host check).
#[tokio::test]
async fn a_literal_skips_the_resolver() {
    let (port, served) = serve_json(|_| (vec![], "{}".into())).await;
    client(AddressPolicy::RefusePrivate)
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .expect("the resolver never sees a literal");
    assert_eq!(served.load(Ordering::SeqCst), 1);
}

fn rest(url: &str, proxy: Option<&str>, addresses: AddressPolicy) -> Result<RestClient, SetupError> {
    let opts = ClientOptions {
        addresses,
        max_attempts: 3,
        ..ClientOptions::default()
    };
    RestClient::new(API, url, SecretValue::new("t"), Arc::default(), opts, None, proxy)
}

/// The Gitea/Forgejo client under the policy: a literal URL or proxy is refused when the
/// client is made, a name resolving to loopback at the call, once (a retry would resolve the
/// same), and nothing reaches the server.
#[tokio::test]
async fn the_rest_client_applies_the_policy() {
    let on = AddressPolicy::RefusePrivate;
    let (port, served) = serve_json(|_| (vec![], "{}".into())).await;

    let e = rest(&format!("http://127.0.0.1:{port}"), None, on).expect_err("a loopback literal");
    assert!(
        matches!(e, SetupError::AddressRefused { field: "url", .. }),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("spec.gitea.url: 127.0.0.1 is 127.0.0.1 (loopback)"),
        "{e}"
    );
    let e = rest("https://gitea.example.com", Some("http://[fd00::1]:3128"), on).expect_err("a ULA proxy");
    assert!(
        matches!(
            e,
            SetupError::AddressRefused {
                field: "proxyUrl",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        rest(
            &format!("http://127.0.0.1:{port}"),
            None,
            AddressPolicy::AllowPrivate
        )
        .is_ok()
    );

    let c = rest(&format!("http://localhost:{port}"), None, on).expect("a name is judged later");
    let call = Call {
        operation: "get_version",
        method: Method::GET,
        url: c.url(&["api", "v1"], &["version"], &[]),
        body: None,
        cap: MAX_SMALL_BYTES,
        idempotent: true,
    };
    let e = c
        .send(&call, &json::<serde_json::Value>)
        .await
        .err()
        .expect("refused");
    match &e {
        CallError::Transport(f) => assert!(f.is_address_refused(), "{f}"),
        other => panic!("not a transport refusal: {other:?}"),
    }
    assert!(!e.is_transient(), "the next resolution says the same");
    assert!(e.to_string().contains("(loopback)"), "{e}");
    assert_eq!(served.load(Ordering::SeqCst), 0, "the server saw a request");

    let off = rest(
        &format!("http://localhost:{port}"),
        None,
        AddressPolicy::AllowPrivate,
    )
    .expect("client");
    off.send(&call, &json::<serde_json::Value>)
        .await
        .map(|_| ())
        .expect("with the policy off the call arrives");
    assert_eq!(served.load(Ordering::SeqCst), 1);
}
