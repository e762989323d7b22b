//! The lean scrape client against scripted servers on loopback sockets: each answers every request with
//! the same bytes, written in the pieces given (each flushed on its own, so the client sees split reads).
//! Real hyper servers are scraped through it by `supervisor_tests` and the e2e suites.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

const PAGE: &[u8] =
    b"# HELP vllm:num_requests_waiting waiting\nvllm:num_requests_waiting{model_name=\"m\"} 3\n";
const MAX: usize = 1 << 20;

struct Scripted {
    addr: SocketAddr,
    accepts: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// Serves `pieces` for every request; `close_after` closes the connection after each answer.
async fn serve(pieces: Vec<Vec<u8>>, close_after: bool) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepts = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (count, seen) = (accepts.clone(), requests.clone());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let (pieces, seen) = (pieces.clone(), seen.clone());
            tokio::spawn(async move {
                let mut request = Vec::new();
                loop {
                    let mut chunk = [0u8; 1024];
                    let n = socket.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&chunk[..n]);
                    if !request.ends_with(b"\r\n\r\n") {
                        continue;
                    }
                    seen.lock().unwrap().push(std::mem::take(&mut request));
                    for piece in &pieces {
                        socket.write_all(piece).await.unwrap();
                        socket.flush().await.unwrap();
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    if close_after {
                        return;
                    }
                }
            });
        }
    });
    Scripted { addr, accepts, requests }
}

fn client(addr: SocketAddr) -> Http1Scrape {
    Http1Scrape::for_url(&format!("http://{addr}/metrics")).unwrap()
}

fn with_length(page: &[u8], extra_headers: &str) -> Vec<u8> {
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n{extra_headers}Content-Length: {}\r\n\r\n",
        page.len()
    )
    .into_bytes();
    answer.extend_from_slice(page);
    answer
}

async fn get_page(scrape: &mut Http1Scrape) -> Result<Vec<u8>, ScrapeError> {
    let mut buf = Vec::new();
    let body = scrape.get(&mut buf, MAX).await?;
    Ok(buf[body].to_vec())
}

#[test]
fn only_plain_http_urls_without_credentials_are_taken() {
    assert!(Http1Scrape::for_url("https://10.0.0.1:8000/metrics").is_none());
    assert!(Http1Scrape::for_url("http://user:secret@10.0.0.1:8000/metrics").is_none());
    assert!(Http1Scrape::for_url("not a url").is_none());
    let plain = Http1Scrape::for_url("http://pod.ns.svc/metrics?name=vllm").unwrap();
    assert_eq!((plain.host.as_str(), plain.port), ("pod.ns.svc", 80));
    assert_eq!(plain.request, b"GET /metrics?name=vllm HTTP/1.1\r\nHost: pod.ns.svc\r\nAccept: */*\r\n\r\n");
    let v6 = Http1Scrape::for_url("http://[::1]:9000/metrics").unwrap();
    assert_eq!((v6.host.as_str(), v6.port), ("::1", 9000));
}

#[tokio::test]
async fn a_content_length_page_comes_over_one_kept_alive_connection() {
    let server = serve(vec![with_length(PAGE, "")], false).await;
    let mut scrape = client(server.addr);
    for _ in 0..3 {
        assert_eq!(get_page(&mut scrape).await.unwrap(), PAGE);
    }
    assert_eq!(server.accepts.load(Ordering::SeqCst), 1);
    let request = server.requests.lock().unwrap()[0].clone();
    let expected = format!("GET /metrics HTTP/1.1\r\nHost: {}\r\nAccept: */*\r\n\r\n", server.addr);
    assert_eq!(String::from_utf8(request).unwrap(), expected);
}

#[tokio::test]
async fn a_chunked_page_split_across_reads_is_decoded_in_place() {
    let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let (first, second) = PAGE.split_at(30);
    let pieces = vec![
        head,
        format!("{:x};ext=1\r\n", first.len()).into_bytes(),
        first.to_vec(),
        b"\r\n".to_vec(),
        format!("{:X}\r\n", second.len()).into_bytes(),
        [second, &b"\r\n0\r\nX-Trailer: yes\r\n"[..]].concat(),
        b"\r\n".to_vec(),
    ];
    let server = serve(pieces, false).await;
    let mut scrape = client(server.addr);
    assert_eq!(get_page(&mut scrape).await.unwrap(), PAGE);
    assert_eq!(get_page(&mut scrape).await.unwrap(), PAGE);
    assert_eq!(server.accepts.load(Ordering::SeqCst), 1, "a chunked answer keeps the connection");
}

#[tokio::test]
async fn a_close_delimited_page_is_read_to_the_end_and_the_next_poll_dials_again() {
    let mut answer = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n".to_vec();
    answer.extend_from_slice(PAGE);
    let server = serve(vec![answer], true).await;
    let mut scrape = client(server.addr);
    assert_eq!(get_page(&mut scrape).await.unwrap(), PAGE);
    assert_eq!(get_page(&mut scrape).await.unwrap(), PAGE);
    assert_eq!(server.accepts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn connection_close_ends_the_connection_after_the_page() {
    let server = serve(vec![with_length(PAGE, "Connection: close\r\n")], true).await;
    let mut scrape = client(server.addr);
    for _ in 0..2 {
        assert_eq!(get_page(&mut scrape).await.unwrap(), PAGE);
    }
    assert_eq!(server.accepts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_kept_alive_connection_closed_while_idle_is_dialled_again() {
    // The server says nothing of closing, then closes after each answer (an idle timeout).
    let server = serve(vec![with_length(PAGE, "")], true).await;
    let mut scrape = client(server.addr);
    assert_eq!(get_page(&mut scrape).await.unwrap(), PAGE);
    // Let the close reach the client's socket before the next poll writes to it.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(get_page(&mut scrape).await.unwrap(), PAGE, "the stale connection is not an error");
    assert_eq!(server.accepts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_non_200_answer_is_a_status_error() {
    let server =
        serve(vec![b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy".to_vec()], false)
            .await;
    let err = get_page(&mut client(server.addr)).await.unwrap_err();
    assert!(matches!(err, ScrapeError::Status(503)), "{err}");
}

#[tokio::test]
async fn a_page_over_the_limit_is_refused_by_length_and_by_chunks() {
    let server = serve(vec![with_length(PAGE, "")], false).await;
    let mut buf = Vec::new();
    let err = client(server.addr).get(&mut buf, 10).await.unwrap_err();
    assert!(matches!(err, ScrapeError::TooLarge(10)), "{err}");
    let chunked =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n";
    let server = serve(vec![chunked.to_vec()], false).await;
    let err = client(server.addr).get(&mut buf, 10).await.unwrap_err();
    assert!(matches!(err, ScrapeError::TooLarge(10)), "{err}");
    let absurd = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\nffffffffffffffff\r\n";
    let server = serve(vec![absurd.to_vec()], true).await;
    let err = client(server.addr).get(&mut buf, 10).await.unwrap_err();
    assert!(matches!(err, ScrapeError::TooLarge(10)), "a chunk size near usize::MAX: {err}");
}

#[tokio::test]
async fn malformed_answers_are_errors_that_say_what_was_wrong() {
    for (answer, says) in [
        (&b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n"[..], "Content-Length"),
        (&b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"[..], "conflicting"),
        (&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..], "chunk size"),
        (&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY0\r\n\r\n"[..], "CRLF"),
        (&b"SMTP ready\r\n\r\n"[..], "malformed"),
    ] {
        let server = serve(vec![answer.to_vec()], true).await;
        let err = get_page(&mut client(server.addr)).await.unwrap_err();
        assert!(err.to_string().contains(says), "{err} should say {says}");
    }
}

#[tokio::test]
async fn a_page_cut_short_is_an_error_not_a_partial_page() {
    let full = with_length(PAGE, "");
    let server = serve(vec![full[..full.len() - 5].to_vec()], true).await;
    let err = get_page(&mut client(server.addr)).await.unwrap_err();
    assert!(err.to_string().contains("closed inside the page"), "{err}");
}

#[tokio::test]
async fn nothing_listening_is_a_request_error_naming_the_address() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let err = get_page(&mut client(addr)).await.unwrap_err();
    assert!(matches!(err, ScrapeError::Request(ref m) if m.contains(&addr.to_string())), "{err}");
}
