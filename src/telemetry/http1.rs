//! A lean HTTP/1.1 GET for plain-`http` scrapes: each scrape loop keeps its own connection and reads the
//! page straight into the loop's reused buffer.
//!
//! Why not reqwest here: at the default 50 ms interval a pool of 100 model servers is 2,000 scrapes a
//! second with nothing else to do, and a profile of idle epp (BENCHMARKS.md §10) spent more of it in the
//! general client (its pool lookup, URL parsing, header maps, a buffer per chunk) than in parsing the page.
//! One request line, fixed at start, and one read buffer that grows to the page's size leave the exchange
//! itself: a `write` and, mostly, one `recv`. `https` URLs, and URLs with credentials, still go through
//! reqwest (`super::scraper`).
//!
//! What it speaks (RFC 9112): a `200` with `Content-Length`, `Transfer-Encoding: chunked` (extensions and
//! trailers skipped), or a close-delimited body; `Connection: close` and HTTP/1.0 answers end the
//! connection after the page. Any error drops the connection, and the next poll dials again. A kept-alive
//! connection the server closed while idle (uvicorn, which serves vLLM's `/metrics`, closes idle
//! connections after 5 s) is dialled again at once, as hyper does for a request that never reached the
//! server.

use std::ops::Range;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::scrape_error::ScrapeError;

/// A response head larger than this is refused (vLLM's is about 200 bytes).
const MAX_HEAD_BYTES: usize = 64 << 10;
/// Headers parsed; a response with more is refused.
const MAX_HEADERS: usize = 64;
/// The smallest read: the buffer grows to the page's size after the first scrape.
const MIN_READ: usize = 16 << 10;

/// One endpoint's plain-http scrape target and its kept-alive connection.
#[derive(Debug)]
pub(crate) struct Http1Scrape {
    host: String,
    port: u16,
    authority: String,
    request: Vec<u8>,
    stream: Option<TcpStream>,
}

impl Http1Scrape {
    /// `Some` for an `http://host[:port]/path` URL without credentials; `None` for anything else.
    pub(crate) fn for_url(url: &str) -> Option<Self> {
        let uri: http::Uri = url.parse().ok()?;
        if uri.scheme_str() != Some("http") {
            return None;
        }
        let authority = uri.authority()?;
        if authority.as_str().contains('@') {
            return None;
        }
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let request = get_request(path, authority.as_str());
        let port = authority.port_u16().unwrap_or(80);
        Some(Self { host, port, authority: authority.to_string(), request, stream: None })
    }

    /// Asks for `url`'s path and query from now on, over the same connection (the caller keeps the scheme
    /// and authority: `super::name_filter`'s forms of one URL). A URL that does not parse changes nothing.
    pub(crate) fn set_url(&mut self, url: &str) {
        if let Some(path) = url.parse::<http::Uri>().ok().as_ref().and_then(|u| u.path_and_query()) {
            self.request = get_request(path.as_str(), &self.authority);
        }
    }

    /// GETs the page into `buf` (cleared first); returns where its body lies in `buf`. Cancel-safe in
    /// the sense that matters: a poll dropped half-way (the poll timeout) drops the connection with it.
    pub(crate) async fn get(
        &mut self,
        buf: &mut Vec<u8>,
        max_page: usize,
    ) -> Result<Range<usize>, ScrapeError> {
        if let Some(stream) = self.stream.take() {
            match self.exchange(stream, buf, max_page).await {
                Err(Exchange::Stale) => {}
                other => return self.settle(other),
            }
        }
        let stream = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| ScrapeError::Request(format!("connecting to {}:{}: {e}", self.host, self.port)))?;
        // The request is one small write: Nagle's algorithm would only hold it back.
        let _ = stream.set_nodelay(true);
        let fresh = self.exchange(stream, buf, max_page).await;
        self.settle(fresh.map_err(|e| match e {
            Exchange::Stale => {
                Exchange::Failed(ScrapeError::Request("connection closed before a response".into()))
            }
            e => e,
        }))
    }

    fn settle(&mut self, outcome: Result<Answer, Exchange>) -> Result<Range<usize>, ScrapeError> {
        match outcome {
            Ok(answer) => {
                self.stream = answer.keep;
                Ok(answer.body)
            }
            Err(Exchange::Stale) => Err(ScrapeError::Request("connection closed before a response".into())),
            Err(Exchange::Failed(e)) => Err(e),
        }
    }

    async fn exchange(
        &self,
        mut stream: TcpStream,
        buf: &mut Vec<u8>,
        max_page: usize,
    ) -> Result<Answer, Exchange> {
        buf.clear();
        if stream.write_all(&self.request).await.is_err() {
            return Err(Exchange::Stale);
        }
        let head = loop {
            match read_more(&mut stream, buf).await {
                Ok(0) | Err(_) if buf.is_empty() => return Err(Exchange::Stale),
                Ok(0) => return Err(failed("connection closed inside the response head")),
                Err(e) => return Err(failed(format!("reading the response: {e}"))),
                Ok(_) => {}
            }
            if let Some(head) = parse_head(buf)? {
                break head;
            }
            if buf.len() > MAX_HEAD_BYTES {
                return Err(failed(format!("response head larger than {MAX_HEAD_BYTES} bytes")));
            }
        };
        if head.status != 200 {
            return Err(Exchange::Failed(ScrapeError::Status(head.status)));
        }
        let start = head.len;
        let body = match head.framing {
            Framing::Length(n) => {
                if n > max_page {
                    return Err(Exchange::Failed(ScrapeError::TooLarge(max_page)));
                }
                read_to(&mut stream, buf, start + n).await?;
                start..start + n
            }
            Framing::Chunked => {
                let (body, end) = dechunk(&mut stream, buf, start, max_page).await?;
                let keep = (head.keep_alive && buf.len() == end).then_some(stream);
                return Ok(Answer { body, keep });
            }
            Framing::Close => {
                while read_more(&mut stream, buf)
                    .await
                    .map_err(|e| failed(format!("reading the page: {e}")))?
                    > 0
                {
                    if buf.len() - start > max_page {
                        return Err(Exchange::Failed(ScrapeError::TooLarge(max_page)));
                    }
                }
                return Ok(Answer { body: start..buf.len(), keep: None });
            }
        };
        let keep = (head.keep_alive && buf.len() == body.end).then_some(stream);
        Ok(Answer { body, keep })
    }
}

/// The bytes of a GET of `path` from `authority`.
fn get_request(path: &str, authority: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: */*\r\n\r\n").into_bytes()
}

struct Answer {
    body: Range<usize>,
    keep: Option<TcpStream>,
}

enum Exchange {
    /// Nothing came back on a connection that may have been closed while idle: dial again.
    Stale,
    Failed(ScrapeError),
}

impl From<ScrapeError> for Exchange {
    fn from(e: ScrapeError) -> Self {
        Exchange::Failed(e)
    }
}

fn failed(message: impl Into<String>) -> Exchange {
    Exchange::Failed(ScrapeError::Request(message.into()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    Close,
}

#[derive(Debug)]
struct Head {
    len: usize,
    status: u16,
    framing: Framing,
    keep_alive: bool,
}

/// The response head, once `buf` holds all of it.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, Exchange> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(failed(format!("malformed response head: {e}"))),
    };
    let status = response.code.unwrap_or(0);
    let mut keep_alive = response.version == Some(1);
    let (mut length, mut chunked) = (None, false);
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value).unwrap_or("").trim();
        if header.name.eq_ignore_ascii_case("content-length") {
            let n = value.parse::<usize>().map_err(|_| failed(format!("bad Content-Length {value:?}")))?;
            if length.is_some_and(|m| m != n) {
                return Err(failed("conflicting Content-Length headers"));
            }
            length = Some(n);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked =
                value.rsplit(',').next().is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if header.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") && response.version == Some(0) {
                    keep_alive = true;
                }
            }
        }
    }
    // RFC 9112 §6.3: chunked wins over a length; neither means the body runs to the close.
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::Close,
    };
    Ok(Some(Head { len, status, framing, keep_alive: keep_alive && framing != Framing::Close }))
}

/// Reads what the socket has into `buf`'s spare room (at least [`MIN_READ`] of it).
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < MIN_READ {
        buf.reserve(MIN_READ.max(buf.len()));
    }
    stream.read_buf(buf).await
}

/// Reads until `buf` holds `end` bytes.
async fn read_to(stream: &mut TcpStream, buf: &mut Vec<u8>, end: usize) -> Result<(), Exchange> {
    if buf.capacity() < end {
        buf.reserve(end - buf.len());
    }
    while buf.len() < end {
        match stream.read_buf(buf).await {
            Ok(0) => return Err(failed("connection closed inside the page")),
            Ok(_) => {}
            Err(e) => return Err(failed(format!("reading the page: {e}"))),
        }
    }
    Ok(())
}

/// Decodes the chunked body that starts at `start`, in place: returns where the page lies and where the
/// message ends in `buf`.
async fn dechunk(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    start: usize,
    max_page: usize,
) -> Result<(Range<usize>, usize), Exchange> {
    let (mut write, mut read) = (start, start);
    loop {
        let line_end = read_line(stream, buf, read).await?;
        let line = &buf[read..line_end - 2];
        let size_text = line.split(|&b| b == b';').next().unwrap_or(line);
        let size = std::str::from_utf8(size_text)
            .ok()
            .and_then(|t| usize::from_str_radix(t.trim(), 16).ok())
            .ok_or_else(|| failed("malformed chunk size"))?;
        read = line_end;
        if size == 0 {
            // Trailer fields, if any, then the empty line.
            loop {
                let end = read_line(stream, buf, read).await?;
                let empty = end - read == 2;
                read = end;
                if empty {
                    return Ok((start..write, read));
                }
            }
        }
        // A size is the peer's number: compare without adding to it.
        if size > max_page - (write - start) {
            return Err(Exchange::Failed(ScrapeError::TooLarge(max_page)));
        }
        read_to(stream, buf, read + size + 2).await?;
        if &buf[read + size..read + size + 2] != b"\r\n" {
            return Err(failed("chunk not followed by CRLF"));
        }
        buf.copy_within(read..read + size, write);
        write += size;
        read += size + 2;
    }
}

/// Reads until a CRLF ends the line that starts at `from`; returns the index just past it.
async fn read_line(stream: &mut TcpStream, buf: &mut Vec<u8>, from: usize) -> Result<usize, Exchange> {
    let mut scanned = from;
    loop {
        if let Some(i) = buf[scanned..].windows(2).position(|w| w == b"\r\n") {
            return Ok(scanned + i + 2);
        }
        if buf.len() - from > MAX_HEAD_BYTES {
            return Err(failed("chunk line too long"));
        }
        scanned = buf.len().saturating_sub(1).max(from);
        match read_more(stream, buf).await {
            Ok(0) => return Err(failed("connection closed inside the page")),
            Ok(_) => {}
            Err(e) => return Err(failed(format!("reading the page: {e}"))),
        }
    }
}

#[cfg(test)]
#[path = "http1_tests.rs"]
mod tests;
