//! A `locus serve` child process on a free loopback port, and a small HTTP/1.1 client for the
//! server tests (raw sockets, so a test can also send what no well-behaved client would).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use locus::json::Json;

/// A running server; killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    /// stderr lines after the "listening" line, collected by a reader thread.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// `--api-key`'s value, sent by [`Server::get`] and [`Server::post`].
    pub key: Option<String>,
}

impl Server {
    /// Starts `locus serve -m MODEL --port 0 ARGS…` and waits until `/health` says ready.
    pub fn start(model: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_locus"))
            .arg("serve")
            .arg("-m")
            .arg(model)
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start locus serve");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut addr = None;
        let mut line = String::new();
        while err.read_line(&mut line).unwrap_or(0) > 0 {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                addr = rest.split_whitespace().next().map(str::to_string);
                break;
            }
            line.clear();
        }
        let addr = addr.unwrap_or_else(|| panic!("the server printed no address: {line}"));
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for l in err.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(l);
            }
        });
        let key = args
            .iter()
            .position(|a| *a == "--api-key")
            .map(|i| args[i + 1].to_string());
        let s = Server {
            child,
            addr,
            log,
            key,
        };
        let t0 = Instant::now();
        while s.get("/health").0 != 200 {
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "the server never became ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        s
    }

    fn auth(&self) -> Vec<(&'static str, String)> {
        self.key
            .iter()
            .map(|k| ("Authorization", format!("Bearer {k}")))
            .collect()
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        let h = self.auth();
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = request(&mut self.connect(), "GET", path, &h, b"");
        (r.status, r.body_text())
    }

    /// POSTs a body as it is; the response.
    pub fn post_raw(&self, path: &str, body: &str) -> Response {
        let h = self.auth();
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        request(&mut self.connect(), "POST", path, &h, body.as_bytes())
    }

    /// POSTs a JSON body; the status and the parsed body.
    pub fn post(&self, path: &str, body: &str) -> (u16, Json) {
        let h = self.auth();
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = request(&mut self.connect(), "POST", path, &h, body.as_bytes());
        let j = Json::parse(&r.body)
            .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {}", r.body_text()));
        (r.status, j)
    }

    /// One metric's value from `/metrics` (the first line of that name and labels).
    pub fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .find(|l| l.split(' ').next() == Some(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in {text}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response as read off the wire.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).to_string()
    }

    /// The `data:` payloads of a server-sent event stream.
    pub fn events(&self) -> Vec<String> {
        self.body_text()
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }
}

/// Sends one request on `s` and reads the response.
pub fn request(
    s: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    read_response(s)
}

/// Reads one response (Content-Length or chunked).
pub fn read_response(s: &mut TcpStream) -> Response {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("not a status line: {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.to_string(), v.trim().to_string()));
    }
    let find = |n: &str| {
        headers
            .iter()
            .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v == "chunked") {
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            let n = usize::from_str_radix(line.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        let n: usize = find("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        body = vec![0; n];
        r.read_exact(&mut body).unwrap();
    }
    Response {
        status,
        headers,
        body,
    }
}

/// A request body's string member, or a number member as text.
pub fn text_of(j: &Json, path: &[&str]) -> String {
    let mut v = j;
    for p in path {
        v = match (v, p.parse::<usize>()) {
            (Json::Arr(a), Ok(i)) => &a[i],
            _ => v.get(p).unwrap_or_else(|| panic!("no {p} in {j}")),
        };
    }
    match v {
        Json::Str(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `tokens` list of a response's first choice.
pub fn tokens_of(j: &Json) -> Vec<u32> {
    match j
        .get("choices")
        .and_then(|c| match c {
            Json::Arr(a) => a.first(),
            _ => None,
        })
        .and_then(|c| c.get("tokens"))
    {
        Some(Json::Arr(t)) => t
            .iter()
            .map(|v| match v {
                Json::Num(n) => *n as u32,
                _ => panic!("a token id that is not a number"),
            })
            .collect(),
        _ => panic!("no tokens in {j}"),
    }
}

/// How long a wait for an event may last: far beyond what any of them needs, so a loaded
/// machine never fails a test, while one that never comes fails it instead of blocking the run.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `done` every 20 ms; fails naming `what` after [`PATIENCE`].
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < PATIENCE, "waited {PATIENCE:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `locus run`'s stdout for these arguments.
pub fn run_text(model: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_locus"))
        .arg("run")
        .arg("-m")
        .arg(model)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `s` as a JSON string literal.
pub fn json(s: &str) -> String {
    Json::str(s).to_string()
}
