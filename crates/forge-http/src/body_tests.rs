use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::*;
use crate::test_server::{HUGE, serve_huge};

/// The cap the tests read with.
const CAP: usize = 1024 * 1024;
/// Far less than [`HUGE`], yet above the cap plus what loopback socket buffers can hold.
const CONSUMED_AT_MOST: usize = 40 * 1024 * 1024;

async fn get(port: u16) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .expect("response head")
}

async fn sent(server: JoinHandle<usize>) -> usize {
    tokio::time::timeout(Duration::from_secs(60), server)
        .await
        .expect("the server notices the client left")
        .expect("server task")
}

#[tokio::test]
async fn refuses_an_announced_huge_body_without_reading_it() {
    let (port, server) = serve_huge(true).await;
    let err = read_capped(get(port).await, CAP).await.expect_err("over the cap");
    assert_eq!(err, BodyError::TooLarge { limit: CAP });
    assert_eq!(err.to_string(), "the response body is larger than 1 MiB");
    let n = sent(server).await;
    assert!(n < CONSUMED_AT_MOST, "the server got {n} of {HUGE} bytes out");
}

#[tokio::test]
async fn stops_reading_a_chunked_body_at_the_cap() {
    let (port, server) = serve_huge(false).await;
    let resp = get(port).await;
    assert_eq!(resp.content_length(), None, "no length announced");
    let err = read_capped(resp, CAP).await.expect_err("over the cap");
    assert_eq!(err, BodyError::TooLarge { limit: CAP });
    let n = sent(server).await;
    assert!(n < CONSUMED_AT_MOST, "the server got {n} of {HUGE} bytes out");
}

#[tokio::test]
async fn reads_a_body_up_to_the_cap() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        let body = "x".repeat(CAP);
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
        let _ = s.write_all(head.as_bytes()).await;
        let _ = s.write_all(body.as_bytes()).await;
    });
    let body = read_capped(get(port).await, CAP).await.expect("exactly the cap");
    assert_eq!(body.len(), CAP);
}

#[test]
fn byte_sizes_read_well() {
    assert_eq!(ByteSize(4 * 1024 * 1024).to_string(), "4 MiB");
    assert_eq!(ByteSize(64 * 1024).to_string(), "64 KiB");
    assert_eq!(ByteSize(1000).to_string(), "1000 bytes");
}
