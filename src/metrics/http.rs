//! The HTTP/1.1 server of `--metrics-listen`: GET (or HEAD) of `/metrics`,
//! `/health` and `/ready`, one request per connection (`Connection:
//! close`). A request head larger than [`MAX_REQUEST`] or slower than
//! [`REQUEST_TIMEOUT`] is refused; anything but GET/HEAD is 405, an unknown
//! path 404, a malformed request 400.

use super::exposition::{render, CONTENT_TYPE};
use super::gauges::Gauges;
use super::Metrics;
use crate::shutdown::ShutdownSignal;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The longest request head read (request line and headers).
pub const MAX_REQUEST: usize = 8 * 1024;
/// A client has this long to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests served at once; more wait for their turn in the backlog.
const MAX_CONCURRENT: usize = 32;

/// What the exporter serves from.
pub struct Exporter {
    pub metrics: Arc<Metrics>,
    pub gauges: Gauges,
    /// Begins with the drain: from then on `/ready` is 503, so a load
    /// balancer sends no new clients to a queenwire that refuses them.
    pub draining: ShutdownSignal,
}

/// A parsed request line: what the server answers depends on nothing else.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
}

/// Why a request is refused before it is routed.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The head is not HTTP/1.x (400).
    Malformed,
    /// The head is larger than [`MAX_REQUEST`] (431).
    TooLarge,
}

/// The request line of a complete head (`head` ends at the blank line).
pub fn parse_request(head: &[u8]) -> Result<Request<'_>, Refusal> {
    let text = std::str::from_utf8(head).map_err(|_| Refusal::Malformed)?;
    // Lines end with CRLF, or a bare LF (which HTTP asks servers to take).
    let line = text.split('\n').next().ok_or(Refusal::Malformed)?;
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed);
    };
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1")
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
        || !target.starts_with('/')
    {
        return Err(Refusal::Malformed);
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    Ok(Request { method, path })
}

/// A response: status line, headers, body.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    pub allow: bool,
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn plain(status: u16, body: &str) -> Response {
    Response {
        status,
        content_type: "text/plain; charset=utf-8",
        body: format!("{body}\n"),
        allow: status == 405,
    }
}

impl Response {
    fn encode(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        if self.allow {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(self.body.as_bytes());
        }
        bytes
    }
}

impl Exporter {
    /// The answer to one routed request.
    pub async fn respond(&self, req: &Request<'_>) -> Response {
        if !matches!(req.method, "GET" | "HEAD") {
            return plain(405, "only GET and HEAD");
        }
        match req.path {
            "/metrics" => {
                let gauges = self.gauges.snapshot().await;
                Response {
                    status: 200,
                    content_type: CONTENT_TYPE,
                    body: render(&self.metrics, &gauges),
                    allow: false,
                }
            }
            "/health" => plain(200, "ok"),
            "/ready" => {
                if self.draining.has_begun() {
                    plain(503, "not ready: shutting down")
                } else if self.gauges.ready().await {
                    plain(200, "ready")
                } else {
                    plain(
                        503,
                        "not ready: the backend is unreachable or the schema is not applied",
                    )
                }
            }
            _ => plain(404, "not found: /metrics, /health or /ready"),
        }
    }
}

/// Where a request head ends: just after its blank line (CRLF CRLF, or
/// bare LFs).
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.iter().enumerate().find_map(|(i, &b)| {
        if b != b'\n' {
            return None;
        }
        match &buf[i + 1..] {
            [b'\n', ..] => Some(i + 2),
            [b'\r', b'\n', ..] => Some(i + 3),
            _ => None,
        }
    })
}

/// Reads a request head: up to and including the blank line, at most
/// [`MAX_REQUEST`] bytes.
async fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, Refusal> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| Refusal::Malformed)?;
        if n == 0 {
            return Err(Refusal::Malformed);
        }
        buf.extend_from_slice(&chunk[..n]);
        match head_end(&buf) {
            Some(end) if end <= MAX_REQUEST => {
                buf.truncate(end);
                return Ok(buf);
            }
            Some(_) => return Err(Refusal::TooLarge),
            None if buf.len() > MAX_REQUEST => return Err(Refusal::TooLarge),
            None => {}
        }
    }
}

async fn serve_one(exporter: &Exporter, mut stream: TcpStream) {
    let head = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await;
    let (response, head_only) = match head {
        Err(_) => (plain(408, "request timeout"), false),
        Ok(Err(Refusal::TooLarge)) => (plain(431, "request head too large"), false),
        Ok(Err(Refusal::Malformed)) => (plain(400, "bad request"), false),
        Ok(Ok(head)) => match parse_request(&head) {
            Ok(req) => (exporter.respond(&req).await, req.method == "HEAD"),
            Err(_) => (plain(400, "bad request"), false),
        },
    };
    let _ = tokio::time::timeout(
        REQUEST_TIMEOUT,
        stream.write_all(&response.encode(head_only)),
    )
    .await;
    let _ = stream.shutdown().await;
    // What the client still sends (the rest of a refused head, a body) is
    // read and dropped for a moment: closing with unread input would reset
    // the connection, and the client could lose the answer.
    let linger = async {
        let mut sink = [0u8; 4096];
        let mut left = MAX_REQUEST * 8;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), linger).await;
}

/// Serves until shutdown begins.
pub async fn serve(listener: TcpListener, exporter: Arc<Exporter>, shutdown: ShutdownSignal) {
    let slots = Arc::new(Semaphore::new(MAX_CONCURRENT));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            () = shutdown.begun() => return,
        };
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let exporter = exporter.clone();
                    tokio::spawn(async move {
                        let _permit = permit;
                        serve_one(&exporter, stream).await;
                    });
                }
                Err(e) => {
                    tracing::warn!("metrics listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = shutdown.begun() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_parsed_strictly() {
        assert_eq!(
            parse_request(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            Ok(Request {
                method: "GET",
                path: "/metrics"
            })
        );
        assert_eq!(
            parse_request(b"POST /ready HTTP/1.0\r\n\r\n").map(|r| r.method),
            Ok("POST")
        );
        for bad in [
            &b"GET /metrics\r\n\r\n"[..],
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/2\r\n\r\n",
            b"get /metrics HTTP/1.1\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"\xff\xfe /x HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(parse_request(bad), Err(Refusal::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn a_head_ends_at_its_blank_line_with_or_without_carriage_returns() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\nA: b\n\nbody"), Some(21));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
        assert_eq!(
            parse_request(b"GET /health HTTP/1.1\nHost: a\n\n").map(|r| r.path),
            Ok("/health")
        );
    }

    #[test]
    fn responses_say_their_length_and_close() {
        let r = plain(405, "no");
        let text = String::from_utf8(r.encode(false)).unwrap();
        assert!(text.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
        assert!(text.contains("Content-Length: 3\r\n"));
        assert!(text.contains("Connection: close\r\n"));
        assert!(text.contains("Allow: GET, HEAD\r\n"));
        assert!(text.ends_with("\r\n\r\nno\n"));
        let head = String::from_utf8(r.encode(true)).unwrap();
        assert!(head.ends_with("\r\n\r\n"));
    }
}
