//! HTTP/1.1 on `std::net`: reading one request under size caps and a deadline, and writing
//! responses, whole or chunked. Knows nothing of models or of the API.

use std::io::{self, BufRead, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// What one request may take.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The request line and headers together.
    pub max_head: usize,
    pub max_body: usize,
    /// The whole request (head and body) must arrive within this long of its first byte, and
    /// an idle keep-alive connection is closed after it.
    pub timeout: Duration,
}

/// Most header lines one request may carry.
pub const MAX_HEADERS: usize = 100;

/// One parsed request.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// The path without its query.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The connection stays open after the response (HTTP/1.1 unless `Connection: close`).
    pub keep_alive: bool,
}

impl Request {
    /// The first header of that name (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why no request was read.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed the connection (or stayed idle past the timeout) before a request began:
    /// nothing to answer.
    Closed,
    /// A request began but did not arrive in time (408).
    Timeout,
    /// The head (431) or the body (413) is larger than allowed.
    TooLarge {
        what: &'static str,
        limit: usize,
    },
    /// Not HTTP/1.x as this server reads it (400, or 501 for a body encoding it does not take).
    Malformed {
        status: u16,
        why: String,
    },
    Io(io::Error),
}

impl ReadError {
    /// The status to answer with, where there is anyone to answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            ReadError::Closed | ReadError::Io(_) => None,
            ReadError::Timeout => Some(408),
            ReadError::TooLarge {
                what: "the request head",
                ..
            } => Some(431),
            ReadError::TooLarge { .. } => Some(413),
            ReadError::Malformed { status, .. } => Some(*status),
        }
    }

    pub fn message(&self) -> String {
        match self {
            ReadError::Closed => "the connection closed".into(),
            ReadError::Timeout => "the request did not arrive in time".into(),
            ReadError::TooLarge { what, limit } => format!("{what} is larger than {limit} bytes"),
            ReadError::Malformed { why, .. } => why.clone(),
            ReadError::Io(e) => e.to_string(),
        }
    }
}

fn malformed(why: impl Into<String>) -> ReadError {
    ReadError::Malformed {
        status: 400,
        why: why.into(),
    }
}

/// Where requests are read from: a buffered reader whose reads can be given a timeout (a
/// socket; a byte slice for tests and fuzzing, which never waits).
pub trait Input: BufRead {
    fn set_timeout(&mut self, t: Duration) -> io::Result<()>;
}

impl Input for io::BufReader<TcpStream> {
    fn set_timeout(&mut self, t: Duration) -> io::Result<()> {
        self.get_ref().set_read_timeout(Some(t))
    }
}

impl Input for &[u8] {
    fn set_timeout(&mut self, _: Duration) -> io::Result<()> {
        Ok(())
    }
}

/// Reads from `r` with `deadline` as the read timeout.
fn fill(r: &mut impl Input, deadline: Instant, started: bool) -> Result<&[u8], ReadError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(if started {
            ReadError::Timeout
        } else {
            ReadError::Closed
        });
    }
    r.set_timeout(left).map_err(ReadError::Io)?;
    match r.fill_buf() {
        Ok(b) => Ok(b),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Err(if started {
                ReadError::Timeout
            } else {
                ReadError::Closed
            })
        }
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Err(ReadError::Closed),
        Err(e) => Err(ReadError::Io(e)),
    }
}

/// Where a request head ends in `b`: just past its first blank line (`\r\n\r\n`, or `\n\n`
/// from a client that sends bare newlines).
fn head_end(b: &[u8]) -> Option<usize> {
    (0..b.len()).find_map(|i| {
        if b[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if b[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

/// Reads one request. `w` gets the `100 Continue` a client that asks for it waits for.
pub fn read_request(
    r: &mut impl Input,
    w: &mut impl Write,
    limits: &Limits,
) -> Result<Request, ReadError> {
    // The idle wait before a request and the request itself each get the timeout.
    let idle_deadline = Instant::now() + limits.timeout;
    if fill(r, idle_deadline, false)?.is_empty() {
        return Err(ReadError::Closed);
    }
    let deadline = Instant::now() + limits.timeout;
    let mut head = Vec::new();
    loop {
        let buf = fill(r, deadline, true)?;
        if buf.is_empty() {
            return Err(malformed("the connection closed inside the request head"));
        }
        let n = buf.len();
        let prev = head.len();
        head.extend_from_slice(buf);
        // The blank line that ends the head may straddle two reads.
        let from = prev.saturating_sub(3);
        let end = head_end(&head[from..]).map(|e| from + e);
        r.consume(end.map_or(n, |e| e - prev));
        if let Some(e) = end {
            head.truncate(e);
        }
        if head.len() > limits.max_head {
            return Err(ReadError::TooLarge {
                what: "the request head",
                limit: limits.max_head,
            });
        }
        if end.is_some() {
            break;
        }
    }
    let head =
        std::str::from_utf8(&head).map_err(|_| malformed("the request head is not UTF-8"))?;
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed(format!("a malformed request line {line:?}")));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(malformed(format!("a malformed method {method:?}")));
    }
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        v => {
            return Err(ReadError::Malformed {
                status: 505,
                why: format!("HTTP version {v:?} is not served (HTTP/1.1 or 1.0)"),
            })
        }
    };
    if !target.starts_with('/') {
        return Err(malformed(format!(
            "a request target {target:?} that is not a path"
        )));
    }
    let path = target.split('?').next().unwrap_or("/").to_string();
    let mut headers = Vec::new();
    for l in lines.filter(|l| !l.is_empty()) {
        let Some((k, v)) = l.split_once(':') else {
            return Err(malformed(format!("a header line without ':': {l:?}")));
        };
        if k.is_empty() || k.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(malformed(format!("a malformed header name {k:?}")));
        }
        headers.push((k.to_string(), v.trim_matches([' ', '\t']).to_string()));
        if headers.len() > MAX_HEADERS {
            return Err(ReadError::TooLarge {
                what: "the request head",
                limit: limits.max_head,
            });
        }
    }
    let mut req = Request {
        method: method.to_string(),
        path,
        headers,
        body: Vec::new(),
        keep_alive: false,
    };
    let conn = req.header("connection").map(str::to_ascii_lowercase);
    req.keep_alive = match conn.as_deref() {
        Some(c) if c.contains("close") => false,
        Some(c) if c.contains("keep-alive") => true,
        _ => !http10,
    };
    if req.header("transfer-encoding").is_some() {
        return Err(ReadError::Malformed {
            status: 501,
            why: "a Transfer-Encoding request body is not read; send Content-Length".into(),
        });
    }
    let lengths: Vec<&str> = req
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.as_str())
        .collect();
    let len = match lengths[..] {
        [] => 0,
        [v] if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
            v.parse::<usize>().unwrap_or(usize::MAX)
        }
        [v] => return Err(malformed(format!("a malformed Content-Length {v:?}"))),
        _ => return Err(malformed("more than one Content-Length")),
    };
    if len > limits.max_body {
        return Err(ReadError::TooLarge {
            what: "the request body",
            limit: limits.max_body,
        });
    }
    if len > 0
        && req
            .header("expect")
            .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .and_then(|_| w.flush())
            .map_err(ReadError::Io)?;
    }
    let mut body = Vec::with_capacity(len);
    while body.len() < len {
        let buf = fill(r, deadline, true)?;
        if buf.is_empty() {
            return Err(malformed(format!(
                "the connection closed after {} of {len} body bytes",
                body.len()
            )));
        }
        let take = buf.len().min(len - body.len());
        body.extend_from_slice(&buf[..take]);
        r.consume(take);
    }
    req.body = body;
    Ok(req)
}

/// The reason phrase of the statuses this server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// The CORS header every response carries, as llama-server's: any page may call the API
/// (the API key, where there is one, still guards it).
pub const CORS: &str = "Access-Control-Allow-Origin: *\r\n";

/// A whole response.
pub fn write_response(
    w: &mut impl Write,
    status: u16,
    headers: &[(&str, String)],
    content_type: &str,
    body: &[u8],
    keep_alive: bool,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
        reason(status),
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(CORS);
    head.push_str(if keep_alive {
        "Connection: keep-alive\r\n\r\n"
    } else {
        "Connection: close\r\n\r\n"
    });
    w.write_all(head.as_bytes())?;
    w.write_all(body)?;
    w.flush()
}

/// A response whose body is sent in chunks as it is made (server-sent events).
pub struct Chunked<'w, W: Write> {
    w: &'w mut W,
}

impl<'w, W: Write> Chunked<'w, W> {
    /// Sends the head.
    pub fn start(w: &'w mut W, content_type: &str, keep_alive: bool) -> io::Result<Self> {
        let conn = if keep_alive { "keep-alive" } else { "close" };
        write!(
            w,
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nCache-Control: no-cache\r\n\
             Transfer-Encoding: chunked\r\n{CORS}Connection: {conn}\r\n\r\n"
        )?;
        w.flush()?;
        Ok(Chunked { w })
    }

    /// Sends one chunk (an empty `data` sends nothing: an empty chunk would end the body).
    pub fn send(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        write!(self.w, "{:x}\r\n", data.len())?;
        self.w.write_all(data)?;
        self.w.write_all(b"\r\n")?;
        self.w.flush()
    }

    /// Ends the body.
    pub fn finish(self) -> io::Result<()> {
        self.w.write_all(b"0\r\n\r\n")?;
        self.w.flush()
    }
}

/// Whether the peer has closed its end (a read would see end of file). Pipelined bytes of a
/// next request count as alive.
pub fn peer_closed(s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    let gone = match s.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    };
    let _ = s.set_nonblocking(false);
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_head: 256,
        max_body: 64,
        timeout: Duration::from_secs(5),
    };

    fn read(bytes: &[u8]) -> (Result<Request, ReadError>, Vec<u8>) {
        let mut input = bytes;
        let mut sent = Vec::new();
        (read_request(&mut input, &mut sent, &LIMITS), sent)
    }

    #[test]
    fn requests_are_read_one_after_another_from_one_stream() {
        let two = b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /health HTTP/1.0\n\n";
        let mut input = &two[..];
        let mut sink = Vec::new();
        let a = read_request(&mut input, &mut sink, &LIMITS).unwrap();
        assert_eq!(
            (a.method.as_str(), a.path.as_str()),
            ("POST", "/v1/completions")
        );
        assert_eq!(a.body, b"hello");
        assert!(a.keep_alive);
        assert_eq!(a.header("HOST"), Some("a"));
        let b = read_request(&mut input, &mut sink, &LIMITS).unwrap();
        assert_eq!(b.path, "/health");
        assert!(!b.keep_alive, "HTTP/1.0 closes unless asked");
        assert!(matches!(
            read_request(&mut input, &mut sink, &LIMITS),
            Err(ReadError::Closed)
        ));
        assert!(sink.is_empty());
    }

    #[test]
    fn a_client_that_expects_100_continue_gets_it() {
        let (r, sent) =
            read(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok");
        assert_eq!(r.unwrap().body, b"ok");
        assert_eq!(sent, b"HTTP/1.1 100 Continue\r\n\r\n");
    }

    #[test]
    fn bad_requests_get_the_status_that_says_why() {
        let long_head = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(300));
        let cases: [(&[u8], u16); 10] = [
            (long_head.as_bytes(), 431),
            (b"POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n", 413),
            (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                501,
            ),
            (b"GET / HTTP/2.0\r\n\r\n", 505),
            (b"GET /\r\n\r\n", 400),
            (b"get / HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nshort", 400),
        ];
        for (bytes, status) in cases {
            let e = read(bytes).0.unwrap_err();
            assert_eq!(
                e.status(),
                Some(status),
                "{:?}: {}",
                String::from_utf8_lossy(bytes),
                e.message()
            );
        }
        assert!(read(b"GET / HTTP/1.1\r\nHost").0.unwrap_err().status() == Some(400));
    }
}
