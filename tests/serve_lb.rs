//! `locus serve` behind a real load balancer (issue 44, "Real parts"): HAProxy from Debian's
//! packages in front of two servers on loopback, health-checked on `/health`. One server is
//! killed (SIGKILL) under a bounded load: no request fails but those in flight at that moment,
//! and the survivor takes the rest. README's "Behind a load balancer" recipe is the
//! configuration used here.

mod common;
#[allow(dead_code)]
#[path = "common/server.rs"]
mod server;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use server::{Json, Server};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Client threads, and the requests each sends one after another.
const CLIENTS: usize = 4;
const REQUESTS_PER_CLIENT: usize = 24;
/// Requests answered before one server is killed (both have served by then: round robin).
const KILL_AFTER: usize = 24;
/// Tokens per completion: short requests, so many are sent in a few seconds.
const MAX_TOKENS: usize = 8;
/// How long after its head a request's body is sent.
const BODY_DELAY: Duration = Duration::from_millis(5);
/// How long a wait may last (far beyond what it needs on a loaded machine).
const PATIENCE: Duration = Duration::from_secs(60);

/// Where HAProxy is: on `PATH`, else where Debian puts it (`/usr/sbin` is not on every
/// user's `PATH`).
fn haproxy() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("haproxy"));
    on_path
        .chain(["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"].map(PathBuf::from))
        .find(|p| p.is_file())
}

/// A free loopback port (bound, then released for HAProxy to take).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// README's recipe, with the test's ports, and `X-Backend` giving the address of the server
/// that answered (the test tells the backends apart by it).
fn config(front: u16, backends: [&str; 2]) -> String {
    let readme = std::fs::read_to_string(common::repo_path("README.md")).unwrap();
    let recipe = readme
        .split("**Behind a load balancer.**")
        .nth(1)
        .and_then(|s| s.split("```haproxy").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("README has the load balancer recipe in a ```haproxy block");
    let cfg = recipe
        .replace("*:8080", &format!("127.0.0.1:{front}"))
        .replace("127.0.0.1:8081", backends[0])
        .replace("127.0.0.1:8082", backends[1]);
    assert!(
        cfg.contains(backends[0]) && cfg.contains(backends[1]),
        "the recipe names its servers 127.0.0.1:8081 and :8082 and listens on *:8080"
    );
    // Every request logged to stderr (kept in a file the failure messages quote), with
    // HAProxy's termination state and retry count.
    let cfg = cfg.replacen(
        "frontend llm\n",
        "frontend llm\n    log stderr format raw local0\n    option httplog\n",
        1,
    );
    format!("{cfg}    http-response set-header X-Backend %si:%sp\n")
}

/// HAProxy in the foreground on `cfg`; killed when dropped.
struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One request's outcome as the client saw it.
#[derive(Debug, Clone)]
struct Outcome {
    id: String,
    sent: Instant,
    done: Instant,
    /// The HTTP status, or the transport error.
    result: Result<u16, String>,
    backend: Option<String>,
}

/// One request on a fresh connection (`Connection: close`): the status and the answering
/// backend, or why there was none. Never panics: a failure is a result here.
fn send(addr: &str, path: &str, body: &str) -> (Result<u16, String>, Option<String>, String) {
    let attempt = || -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(PATIENCE))?;
        // The head and the body in two segments, the body a little later, as many clients send
        // them over a real network: HAProxy can resend such a request only when it waited for
        // the body (README: http-buffer-request; without it, requests sent after the kill fail).
        s.set_nodelay(true)?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: lb\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes())?;
        std::thread::sleep(BODY_DELAY);
        s.write_all(body.as_bytes())?;
        let mut got = Vec::new();
        s.read_to_end(&mut got)?;
        Ok(got)
    };
    let got = match attempt() {
        Ok(g) => g,
        Err(e) => return (Err(e.to_string()), None, String::new()),
    };
    let text = String::from_utf8_lossy(&got).to_string();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return (Err(format!("no response head: {text:?}")), None, text);
    };
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|v| v.parse::<u16>().ok())
        .ok_or_else(|| format!("no status: {head:?}"));
    let backend = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("x-backend"))
        .map(|(_, v)| v.trim().to_string());
    (status, backend, body.to_string())
}

/// `locus_requests_total` for `/v1/completions` answered 200 (0 before the first).
fn completions_served(srv: &Server) -> f64 {
    let (_, text) = srv.get("/metrics");
    text.lines()
        .find(|l| {
            l.starts_with("locus_requests_total{endpoint=\"/v1/completions\",status=\"200\"}")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn haproxy_keeps_serving_when_a_backend_is_killed() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    let Some(haproxy) = haproxy() else {
        assert!(
            !common::skip::models_required(),
            "haproxy is missing and {}=1 requires it (apt-get install haproxy; .ci/run installs it)",
            common::skip::REQUIRE_MODELS
        );
        common::skip::skip("haproxy is not installed (apt-get install haproxy)");
        return;
    };
    let args = ["-np", "2", "-c", "1024", "-t", "1"];
    let mut servers = [Server::start(&model, &args), Server::start(&model, &args)];
    let front = free_port();
    let dir = common::temp_dir("serve-lb");
    let cfg_path = dir.join("haproxy.cfg");
    let log_path = dir.join("haproxy.log");
    let addrs = [servers[0].addr.clone(), servers[1].addr.clone()];
    let cfg = config(front, [&addrs[0], &addrs[1]]);
    std::fs::write(&cfg_path, &cfg).unwrap();
    let check = Command::new(&haproxy)
        .arg("-c")
        .arg("-f")
        .arg(&cfg_path)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "haproxy refuses the recipe:\n{}\n{cfg}",
        String::from_utf8_lossy(&check.stderr)
    );
    let _proxy = Proxy(
        Command::new(&haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&cfg_path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .expect("cannot start haproxy"),
    );
    let lb = format!("127.0.0.1:{front}");
    let body = |id: &str| {
        format!(
            r#"{{"prompt":"Request {id}: the capital of France is","max_tokens":{MAX_TOKENS},"temperature":0}}"#
        )
    };

    // Ready: both backends have answered through the proxy.
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        assert!(
            t0.elapsed() < PATIENCE,
            "the proxy never reached both backends (saw {seen:?})"
        );
        if let (Ok(200), Some(b), _) = send(&lb, "/v1/completions", &body("warm")) {
            if !seen.contains(&b) {
                seen.push(b);
            }
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // The load: each client sends its requests one after another, each carrying its id.
    let answered = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::<Outcome>::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (lb, answered, outcomes) = (lb.clone(), answered.clone(), outcomes.clone());
            std::thread::spawn(move || {
                for r in 0..REQUESTS_PER_CLIENT {
                    let id = format!("c{c}-r{r}");
                    let sent = Instant::now();
                    let (result, backend, text) = send(&lb, "/v1/completions", &body(&id));
                    let done = Instant::now();
                    let result = match result {
                        Ok(200) if Json::parse(text.as_bytes()).is_err() => {
                            Err(format!("200 without a JSON body: {text:?}"))
                        }
                        other => other,
                    };
                    answered.fetch_add(1, Ordering::SeqCst);
                    outcomes.lock().unwrap().push(Outcome {
                        id,
                        sent,
                        done,
                        result,
                        backend,
                    });
                }
            })
        })
        .collect();

    let t0 = Instant::now();
    while answered.load(Ordering::SeqCst) < KILL_AFTER {
        assert!(t0.elapsed() < PATIENCE, "the load never got going");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Which backend dies: the one that answered the latest request, so it is surely busy.
    let victim = {
        let o = outcomes.lock().unwrap();
        let last = o.last().and_then(|x| x.backend.clone());
        usize::from(last.as_deref() == Some(addrs[1].as_str()))
    };
    let survivor = 1 - victim;
    let survivor_before = completions_served(&servers[survivor]);
    let killed_at = Instant::now();
    servers[victim].child.kill().unwrap();
    let _ = servers[victim].child.wait();
    for c in clients {
        c.join().unwrap();
    }
    let outcomes = outcomes.lock().unwrap().clone();
    assert_eq!(outcomes.len(), CLIENTS * REQUESTS_PER_CLIENT);

    let in_flight = |o: &Outcome| o.sent <= killed_at && o.done >= killed_at;
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.result != Ok(200)).collect();
    let in_flight_n = outcomes.iter().filter(|o| in_flight(o)).count();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    // HAProxy's httplog: `actconn/feconn/beconn/srv_conn/retries`, the retries with a `+` where
    // the request went to another server than the first.
    let redispatched = log
        .lines()
        .filter(|l| {
            l.split(' ')
                .any(|f| f.rsplit('/').next().is_some_and(|r| r.starts_with('+')))
        })
        .count();
    eprintln!(
        "{} requests, {in_flight_n} in flight at the kill, {redispatched} sent again to the survivor, {} failed: {failed:?}",
        outcomes.len(),
        failed.len()
    );
    let why = format!("{failed:?}\nHAProxy's log:\n{log}");
    for f in &failed {
        assert!(
            in_flight(f),
            "request {} failed ({:?}) though it was not in flight when {} was killed; {why}",
            f.id,
            f.result,
            addrs[victim]
        );
    }
    assert!(failed.len() <= CLIENTS, "{why}");
    // The kill was felt: requests that the dead server refused, or took and never answered,
    // were sent again to the survivor before the health check took it out.
    assert!(redispatched > 0, "no request was sent again: {why}");
    // Before the kill both backends served; after it, only the survivor.
    for b in &addrs {
        assert!(
            outcomes
                .iter()
                .any(|o| o.done < killed_at && o.backend.as_deref() == Some(b.as_str())),
            "{b} served nothing before the kill; {why}"
        );
    }
    let after: Vec<&Outcome> = outcomes.iter().filter(|o| o.sent > killed_at).collect();
    assert!(
        after.len() >= CLIENTS * REQUESTS_PER_CLIENT - KILL_AFTER - 2 * CLIENTS,
        "too few requests after the kill: {}",
        after.len()
    );
    for o in &after {
        assert_eq!(
            o.backend.as_deref(),
            Some(addrs[survivor].as_str()),
            "{o:?}; {why}"
        );
    }
    let survivor_after = completions_served(&servers[survivor]);
    assert!(
        survivor_after - survivor_before >= after.len() as f64,
        "the survivor's count grew from {survivor_before} to {survivor_after} for {} requests",
        after.len()
    );
}
