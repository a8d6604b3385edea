use reqwest::header::{AUTHORIZATION, HOST};

use super::*;

/// Reads one response from `bytes`: the head, then the body under `cap`, and what is left.
async fn answer(bytes: &[u8], cap: usize) -> Result<(Head, Vec<u8>, Vec<u8>), WireError> {
    let mut io = bytes;
    let mut buf = Vec::new();
    let head = read_head(&mut io, &mut buf).await?;
    let body = read_body(&mut io, &mut buf, head.framing, cap).await?;
    buf.extend_from_slice(io);
    Ok((head, body, buf))
}

#[test]
fn the_request_names_path_query_host_and_the_callers_headers() {
    let url = Url::parse("https://pipelines.example:8443/_apis/queue/messages?sessionId=s&lastMessageId=7")
        .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer t"));
    headers.insert(HOST, HeaderValue::from_static("elsewhere.example"));
    let text = String::from_utf8(request_bytes(&url, &headers)).unwrap();
    assert_eq!(
        text,
        "GET /_apis/queue/messages?sessionId=s&lastMessageId=7 HTTP/1.1\r\nhost: pipelines.example:8443\r\nauthorization: Bearer t\r\n\r\n"
    );
    let default_port = Url::parse("https://pipelines.example/q").unwrap();
    let text = String::from_utf8(request_bytes(&default_port, &HeaderMap::new())).unwrap();
    assert_eq!(text, "GET /q HTTP/1.1\r\nhost: pipelines.example\r\n\r\n");
}

#[tokio::test]
async fn a_length_framed_answer_leaves_the_connection_reusable() {
    let (head, body, rest) = answer(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello",
        100,
    )
    .await
    .unwrap();
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.headers.get("x-a").unwrap(), "1");
    assert!(head.keep_alive);
    assert_eq!(body, b"hello");
    assert!(rest.is_empty());
}

#[tokio::test]
async fn a_chunked_answer_is_decoded_with_extensions_and_trailers() {
    let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\n";
    let (head, body, rest) = answer(wire, 100).await.unwrap();
    assert_eq!(head.framing, Framing::Chunked);
    assert!(head.keep_alive);
    assert_eq!(body, b"Wikipedia");
    assert!(rest.is_empty());
}

#[tokio::test]
async fn bodies_past_the_cap_are_refused() {
    let announced = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
    assert!(matches!(answer(announced, 999).await, Err(WireError::TooLarge)));
    let chunked =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n";
    assert!(matches!(answer(chunked, 9).await, Err(WireError::TooLarge)));
    assert_eq!(answer(chunked, 10).await.unwrap().1, b"helloworld");
    let unframed = b"HTTP/1.1 200 OK\r\n\r\n0123456789";
    assert!(matches!(answer(unframed, 9).await, Err(WireError::TooLarge)));
}

#[tokio::test]
async fn an_answer_to_the_close_is_read_to_the_end_and_never_reused() {
    let (head, body, _) = answer(b"HTTP/1.1 200 OK\r\n\r\nall of it", 100).await.unwrap();
    assert_eq!(head.framing, Framing::UntilClose);
    assert!(!head.keep_alive);
    assert_eq!(body, b"all of it");
    let close = b"HTTP/1.1 202 Accepted\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n";
    assert!(!answer(close, 100).await.unwrap().0.keep_alive);
    let old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
    assert!(!answer(old, 100).await.unwrap().0.keep_alive);
    // Any coding after chunked leaves the body running to the close (RFC 9112, 6.3).
    let gzip_last = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nraw";
    let (head, body, _) = answer(gzip_last, 100).await.unwrap();
    assert_eq!(
        (head.framing, body.as_slice()),
        (Framing::UntilClose, &b"raw"[..])
    );
}

#[tokio::test]
async fn interim_answers_are_skipped_and_empty_statuses_have_no_body() {
    let wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
    let (head, body, rest) = answer(wire, 100).await.unwrap();
    assert_eq!(head.status, StatusCode::NO_CONTENT);
    assert!(body.is_empty() && rest.is_empty());
}

#[tokio::test]
async fn a_close_before_any_byte_differs_from_one_in_the_middle() {
    assert!(matches!(
        answer(b"", 100).await,
        Err(WireError::ClosedBeforeReply)
    ));
    assert!(matches!(
        answer(b"HTTP/1.1 200 OK\r\nContent-", 100).await,
        Err(WireError::Truncated)
    ));
    let short = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    assert!(matches!(answer(short, 100).await, Err(WireError::Truncated)));
    let cut_chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel";
    assert!(matches!(answer(cut_chunk, 100).await, Err(WireError::Truncated)));
}

#[tokio::test]
async fn malformed_answers_are_refused() {
    for wire in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
    ] {
        let got = answer(wire, 100).await;
        assert!(
            matches!(got, Err(WireError::Malformed(_))),
            "{:?}: {got:?}",
            String::from_utf8_lossy(wire)
        );
    }
    let endless = [
        b"HTTP/1.1 200 OK\r\n".as_slice(),
        &b"X: y\r\n".repeat(MAX_HEAD_BYTES),
    ]
    .concat();
    assert!(matches!(
        answer(&endless, 100).await,
        Err(WireError::Malformed(_))
    ));
}
