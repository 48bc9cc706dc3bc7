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
    /// The query after `?` (empty when there is none), as sent.
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The connection stays open after the response (HTTP/1.1 unless `Connection: close`).
    pub keep_alive: bool,
    /// An HTTP/1.0 request: no chunked responses, no 1xx interim responses.
    pub http10: bool,
}

impl Request {
    /// The first query parameter of that name, percent-decoded (`+` is a space, as in a
    /// form); `Some("")` for a name without a value.
    pub fn param(&self, name: &str) -> Option<String> {
        self.query
            .split('&')
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
            .find(|(k, _)| percent_decode(k) == name)
            .map(|(_, v)| percent_decode(v))
    }

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

/// `%XX` escapes decoded and `+` read as a space; an escape that is not two hex digits is kept
/// as it is, and bytes that do not form UTF-8 are replaced.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |i: usize| b.get(i).and_then(|&c| (c as char).to_digit(16));
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if let (b'%', Some(h), Some(l)) = (b[i], hex(i + 1), hex(i + 2)) {
            // Two hex digits: at most 0xff.
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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
    let mut blank = 0;
    loop {
        let buf = fill(r, deadline, true)?;
        if buf.is_empty() {
            return Err(malformed("the connection closed inside the request head"));
        }
        if head.is_empty() {
            // Empty lines before the request line are ignored (RFC 9112, 2.2), within the
            // head's size cap.
            let skip = buf
                .iter()
                .take_while(|b| matches!(b, b'\r' | b'\n'))
                .count();
            if skip > 0 {
                r.consume(skip);
                blank += skip;
                if blank > limits.max_head {
                    return Err(ReadError::TooLarge {
                        what: "the request head",
                        limit: limits.max_head,
                    });
                }
                continue;
            }
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
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let (path, query) = (path.to_string(), query.to_string());
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
        query,
        headers,
        body: Vec::new(),
        keep_alive: false,
        http10,
    };
    req.keep_alive = if connection_has(&req, "close") {
        false
    } else {
        connection_has(&req, "keep-alive") || !http10
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

/// Whether the `Connection` headers list `option` as one of their comma-separated tokens
/// (case-insensitively; `Connection: closed` is not `close`).
fn connection_has(req: &Request, option: &str) -> bool {
    req.headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| v.split(','))
        .any(|t| t.trim_matches([' ', '\t']).eq_ignore_ascii_case(option))
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

/// A response whose body is sent in chunks as it is made (server-sent events). To an HTTP/1.0
/// client, which cannot read chunks, the body is sent as it is and ends when the connection
/// closes.
pub struct Chunked<'w, W: Write> {
    w: &'w mut W,
    chunked: bool,
}

impl<'w, W: Write> Chunked<'w, W> {
    /// Sends the head of a chunked body.
    pub fn start(w: &'w mut W, content_type: &str, keep_alive: bool) -> io::Result<Self> {
        Self::open(w, content_type, keep_alive, false)
    }

    /// Sends the head: chunked, or for an HTTP/1.0 client (`http10`) a body that the
    /// connection's close ends (the caller closes it after [`Chunked::finish`]).
    pub fn open(
        w: &'w mut W,
        content_type: &str,
        keep_alive: bool,
        http10: bool,
    ) -> io::Result<Self> {
        let chunked = !http10;
        let (framing, conn) = match (chunked, keep_alive) {
            (true, true) => ("Transfer-Encoding: chunked\r\n", "keep-alive"),
            (true, false) => ("Transfer-Encoding: chunked\r\n", "close"),
            (false, _) => ("", "close"),
        };
        write!(
            w,
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nCache-Control: no-cache\r\n\
             {CORS}{framing}Connection: {conn}\r\n\r\n"
        )?;
        w.flush()?;
        Ok(Chunked { w, chunked })
    }

    /// Sends one chunk (an empty `data` sends nothing: an empty chunk would end the body).
    pub fn send(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if self.chunked {
            write!(self.w, "{:x}\r\n", data.len())?;
        }
        self.w.write_all(data)?;
        if self.chunked {
            self.w.write_all(b"\r\n")?;
        }
        self.w.flush()
    }

    /// Ends the body (a body that is not chunked ends when the caller closes).
    pub fn finish(self) -> io::Result<()> {
        if self.chunked {
            self.w.write_all(b"0\r\n\r\n")?;
        }
        self.w.flush()
    }
}

/// A writer that passes on a response's head and drops its body: the answer to `HEAD`, whose
/// response carries the headers `GET` would but no body (RFC 9110, 9.3.2).
pub struct HeadOnly<W: Write> {
    w: W,
    /// Drop the body (a `HEAD` request); otherwise every byte passes.
    drop_body: bool,
    /// How much of the blank line `\r\n\r\n` that ends the head has been written.
    matched: usize,
}

impl<W: Write> HeadOnly<W> {
    pub fn new(w: W, drop_body: bool) -> Self {
        HeadOnly {
            w,
            drop_body,
            matched: 0,
        }
    }
}

/// The blank line that ends a response head.
const HEAD_END: &[u8] = b"\r\n\r\n";

impl<W: Write> Write for HeadOnly<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.drop_body {
            return self.w.write(buf);
        }
        if self.matched == HEAD_END.len() {
            return Ok(buf.len());
        }
        let mut end = buf.len();
        for (i, &b) in buf.iter().enumerate() {
            self.matched = if b == HEAD_END[self.matched] {
                self.matched + 1
            } else if b == HEAD_END[0] {
                1
            } else {
                0
            };
            if self.matched == HEAD_END.len() {
                end = i + 1;
                break;
            }
        }
        self.w.write_all(&buf[..end])?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

/// Whether the connection is gone both ways (reset, or an error on it). A peer that only
/// shut down its writing half (a FIN after a complete request, as `nc -N` sends) still reads
/// what is sent to it, so that alone is not a disconnect.
pub fn peer_closed(s: &TcpStream) -> bool {
    crate::sys::poll::peer_state(s).is_ok_and(|p| p.hung_up)
}

/// The interim response that asks a peer which sent a FIN whether it is still there: a peer
/// that closed answers it with a reset; one that only half-closed skips it, as HTTP/1.1
/// clients skip any 1xx before the final response (RFC 9110, 15.2).
const PROBE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Watches a connection whose response has not begun, for the client leaving: a reset or an
/// error is a disconnect; a FIN alone (a close, or a half-close) is answered once with
/// [`PROBE`] (HTTP/1.1 only), whose reset then tells the two apart.
pub struct PeerWatch {
    may_probe: bool,
    probed: bool,
}

impl PeerWatch {
    pub fn new(req: &Request) -> Self {
        PeerWatch {
            may_probe: !req.http10,
            probed: false,
        }
    }

    /// Whether the client has gone (checks without waiting: cheap enough for every token).
    pub fn gone(&mut self, s: &TcpStream) -> bool {
        let Ok(p) = crate::sys::poll::peer_state(s) else {
            return false;
        };
        if p.hung_up {
            return true;
        }
        if p.read_closed && self.may_probe && !self.probed {
            self.probed = true;
            let mut w = s;
            return w.write_all(PROBE).and_then(|_| w.flush()).is_err();
        }
        false
    }
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
    fn the_query_is_kept_and_its_parameters_decoded() {
        let r = read(b"GET /slots?fail_on_no_slot=1&a%20b=c+d%2&e HTTP/1.1\r\n\r\n")
            .0
            .unwrap();
        assert_eq!(r.path, "/slots");
        assert_eq!(r.query, "fail_on_no_slot=1&a%20b=c+d%2&e");
        assert_eq!(r.param("fail_on_no_slot").as_deref(), Some("1"));
        assert_eq!(r.param("a b").as_deref(), Some("c d%2"));
        assert_eq!(r.param("e").as_deref(), Some(""));
        assert_eq!(r.param("f"), None);
        let r = read(b"GET /slots HTTP/1.1\r\n\r\n").0.unwrap();
        assert_eq!((r.query.as_str(), r.param("fail_on_no_slot")), ("", None));
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

    #[test]
    fn empty_lines_before_the_request_line_are_ignored() {
        let r = read(b"\r\n\r\nGET /health HTTP/1.1\r\n\r\n").0.unwrap();
        assert_eq!(r.path, "/health");
        let r = read(b"\nGET /x HTTP/1.1\n\n").0.unwrap();
        assert_eq!(r.path, "/x");
        let many = format!("{}GET / HTTP/1.1\r\n\r\n", "\r\n".repeat(200));
        assert_eq!(read(many.as_bytes()).0.unwrap_err().status(), Some(431));
    }

    #[test]
    fn connection_options_are_tokens_not_substrings() {
        let keep = |h: &str, v: &str| {
            let bytes = format!("GET / {v}\r\n{h}\r\n\r\n");
            read(bytes.as_bytes()).0.unwrap().keep_alive
        };
        assert!(keep("Connection: closed", "HTTP/1.1"));
        assert!(keep("Connection: not-keep-alive", "HTTP/1.1"));
        assert!(!keep("Connection: TE, Close", "HTTP/1.1"));
        assert!(!keep("Connection: x-keep-alive-ish", "HTTP/1.0"));
        assert!(keep("Connection: Keep-Alive", "HTTP/1.0"));
        assert!(!keep(
            "Connection: keep-alive\r\nConnection: close",
            "HTTP/1.1"
        ));
        assert!(read(b"GET / HTTP/1.0\r\n\r\n").0.unwrap().http10);
    }

    #[test]
    fn head_only_passes_the_head_and_drops_the_body() {
        for drop_body in [false, true] {
            let mut out = Vec::new();
            let mut w = HeadOnly::new(&mut out, drop_body);
            write_response(&mut w, 200, &[], "text/plain", b"body\r\n\r\nmore", true).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains("Content-Length: 12\r\n"), "{text}");
            assert_eq!(text.ends_with("\r\n\r\n"), drop_body, "{text}");
            assert_eq!(text.contains("body"), !drop_body, "{text}");
        }
        // A head split over many writes, byte by byte.
        let mut out = Vec::new();
        let mut w = HeadOnly::new(&mut out, true);
        for b in b"HTTP/1.1 200 OK\r\nA: b\r\n\r\nxyz" {
            w.write_all(&[*b]).unwrap();
        }
        assert_eq!(out, b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n");
    }

    #[test]
    fn a_stream_to_http10_is_not_chunked_and_closes() {
        let mut out = Vec::new();
        let mut c = Chunked::open(&mut out, "text/event-stream", true, true).unwrap();
        c.send(b"data: x\n\n").unwrap();
        c.finish().unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("Transfer-Encoding"), "{text}");
        assert!(text.contains("Connection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\ndata: x\n\n"), "{text}");
        let mut out = Vec::new();
        let mut c = Chunked::open(&mut out, "text/event-stream", true, false).unwrap();
        c.send(b"ab").unwrap();
        c.finish().unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Transfer-Encoding: chunked\r\nConnection: keep-alive"));
        assert!(text.ends_with("2\r\nab\r\n0\r\n\r\n"), "{text}");
    }
}
