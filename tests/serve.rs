//! `locus serve` end to end on loopback: the API against `locus run`'s output, batch
//! invariance under concurrent requests, hostile clients, shutdown, and OpenAI's own Python
//! client.

mod common;
#[path = "common/server.rs"]
mod server;

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use server::{
    json, read_response, request, run_text, text_of, tokens_of, wait_for, Json, Server, PATIENCE,
};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const SMOL_KQ: &str = "SmolLM2-135M-Instruct.Q4_K_M.gguf";
const QUESTION: &str = "What is the capital of France? Answer in one sentence.";

#[test]
fn chat_and_completions_give_the_text_of_locus_run() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    let srv = Server::start(&model, &["-np", "2", "-t", "2"]);
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":{}}}],"max_tokens":64,"temperature":0}}"#,
        json(QUESTION)
    );
    let (status, j) = srv.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{j}");
    let answer = text_of(&j, &["choices", "0", "message", "content"]);
    assert!(answer.contains("Paris"), "{answer}");
    let want = run_text(
        &model,
        &["--chat", "-p", QUESTION, "-n", "64", "--temp", "0"],
    );
    assert_eq!(answer, want);
    assert_eq!(text_of(&j, &["object"]), "chat.completion");
    assert_eq!(text_of(&j, &["choices", "0", "finish_reason"]), "stop");
    let used: f64 = text_of(&j, &["usage", "completion_tokens"])
        .parse()
        .unwrap();
    assert!(used >= 1.0);

    // The same streamed: deltas that add up to the answer, a finish, the usage, [DONE].
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":{}}}],"max_tokens":64,"temperature":0,"stream":true,"stream_options":{{"include_usage":true}}}}"#,
        json(QUESTION)
    );
    let r = srv.post_raw("/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{body}: {}", r.body_text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let mut streamed = String::new();
    let mut finish = None;
    for e in &events[..events.len() - 1] {
        let j = Json::parse(e.as_bytes()).unwrap();
        assert_eq!(text_of(&j, &["object"]), "chat.completion.chunk");
        if let Some(Json::Arr(c)) = j.get("choices") {
            if let Some(c) = c.first() {
                if let Some(Json::Str(t)) = c.get("delta").and_then(|d| d.get("content")) {
                    streamed.push_str(t);
                }
                if let Some(Json::Str(f)) = c.get("finish_reason") {
                    finish = Some(f.clone());
                }
            }
        }
    }
    assert_eq!(streamed, want);
    assert_eq!(finish.as_deref(), Some("stop"));
    assert!(events[events.len() - 2].contains("\"usage\""), "{events:?}");

    // A completion: the raw prompt, as `locus run -p` continues it.
    let prompt = "The capital of Germany is";
    let body = format!(
        r#"{{"prompt":{},"max_tokens":24,"temperature":0}}"#,
        json(prompt)
    );
    let (status, j) = srv.post("/v1/completions", &body);
    assert_eq!(status, 200, "{j}");
    let want = run_text(&model, &["-p", prompt, "-n", "24", "--temp", "0"]);
    assert_eq!(text_of(&j, &["choices", "0", "text"]), want);
    assert_eq!(text_of(&j, &["choices", "0", "finish_reason"]), "length");

    // A stop string ends the text before it.
    let body = format!(
        r#"{{"prompt":{},"max_tokens":24,"temperature":0,"stop":["."]}}"#,
        json(prompt)
    );
    let (_, j) = srv.post("/v1/completions", &body);
    let text = text_of(&j, &["choices", "0", "text"]);
    assert_eq!(text, want.split('.').next().unwrap());
    assert_eq!(text_of(&j, &["choices", "0", "finish_reason"]), "stop");

    // The model list, tokenize and detokenize.
    let (status, models) = srv.get("/v1/models");
    assert_eq!(status, 200);
    assert!(models.contains(SMOL), "{models}");
    let (_, t) = srv.post("/tokenize", r#"{"content":"Hello world"}"#);
    let ids = match t.get("tokens") {
        Some(Json::Arr(a)) => a.clone(),
        _ => panic!("{t}"),
    };
    assert_eq!(ids.len(), 2, "{t}");
    let (_, d) = srv.post(
        "/detokenize",
        &format!(r#"{{"tokens":{}}}"#, Json::Arr(ids)),
    );
    assert_eq!(text_of(&d, &["content"]), "Hello world");
    let (_, metrics) = srv.get("/metrics");
    assert!(
        metrics
            .contains("locus_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("locus_time_to_first_token_seconds_count"),
        "{metrics}"
    );
    assert!(metrics.contains("locus_placement_locality"), "{metrics}");
}

/// With the harmony format (`--chat-template gpt-oss`) the answer goes through the
/// analysis/final split (`locus::model::harmony`, unit-tested on llama.cpp's strings). SmolLM2
/// writes no harmony channels, so all of its text is the content, whole and streamed (the
/// stream's held-back tail included), with no `reasoning_content`: as `locus run` writes it.
#[test]
fn a_harmony_chat_without_channels_is_all_content() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    let srv = Server::start(&model, &["-t", "2", "--chat-template", "gpt-oss"]);
    let want = run_text(
        &model,
        &[
            "--chat-template",
            "gpt-oss",
            "-p",
            QUESTION,
            "-n",
            "24",
            "--temp",
            "0",
        ],
    );
    assert!(!want.is_empty());
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":{}}}],"max_tokens":24,"temperature":0}}"#,
        json(QUESTION)
    );
    let (status, j) = srv.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{j}");
    assert_eq!(text_of(&j, &["choices", "0", "message", "content"]), want);
    let message = j
        .get("choices")
        .and_then(|c| match c {
            Json::Arr(a) => a.first(),
            _ => None,
        })
        .and_then(|c| c.get("message"))
        .expect("a message");
    assert!(message.get("reasoning_content").is_none(), "{j}");
    let body = body.replace("\"temperature\":0", "\"temperature\":0,\"stream\":true");
    let r = srv.post_raw("/v1/chat/completions", &body);
    assert_eq!(r.status, 200);
    let events = r.events();
    let mut streamed = String::new();
    for e in &events[..events.len() - 1] {
        let j = Json::parse(e.as_bytes()).unwrap();
        assert!(!e.contains("reasoning_content"), "{e}");
        if let Some(Json::Arr(c)) = j.get("choices") {
            if let Some(Json::Str(t)) = c
                .first()
                .and_then(|c| c.get("delta"))
                .and_then(|d| d.get("content"))
            {
                streamed.push_str(t);
            }
        }
    }
    assert_eq!(streamed, want);
}

/// One request's tokens: a completion (streamed or not) with `return_tokens`.
fn tokens(srv: &Server, prompt: &str, n: usize, stream: bool, sampling: &str) -> Vec<u32> {
    let body = format!(
        r#"{{"prompt":{},"max_tokens":{n},{sampling},"return_tokens":true,"stream":{stream},"ignore_eos":true}}"#,
        json(prompt)
    );
    let r = srv.post_raw("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.body_text());
    if !stream {
        return tokens_of(&Json::parse(&r.body).unwrap());
    }
    let mut all = Vec::new();
    for e in r.events().iter().filter(|e| *e != "[DONE]") {
        let j = Json::parse(e.as_bytes()).unwrap();
        if let Some(Json::Arr(c)) = j.get("choices") {
            if c.first().and_then(|c| c.get("tokens")).is_some() {
                all.extend(tokens_of(&j));
            }
        }
    }
    all
}

#[test]
fn concurrent_requests_get_the_tokens_they_get_alone() {
    let Some(model) = common::model_path(SMOL_KQ) else {
        return;
    };
    // Four slots for eight requests: some wait in the queue, and every step mixes prompts
    // of different lengths with decoding.
    let srv = Server::start(&model, &["-np", "4", "-t", "2"]);
    let base = "Write a short story about a lighthouse keeper who finds a message in a bottle. ";
    let reqs: Vec<(String, usize, bool, &str)> = (0..8)
        .map(|i| {
            let prompt = format!(
                "{}{}",
                base.repeat(1 + i % 3),
                ["Once", "The sea", "At dawn", "Rain"][i % 4]
            );
            let sampling = if i == 5 {
                r#""temperature":0.8,"seed":42"#
            } else {
                r#""temperature":0"#
            };
            (prompt, 12 + 5 * i, i % 2 == 1, sampling)
        })
        .collect();
    let alone: Vec<Vec<u32>> = reqs
        .iter()
        .map(|(p, n, st, s)| tokens(&srv, p, *n, *st, s))
        .collect();
    for (t, r) in alone.iter().zip(&reqs) {
        assert_eq!(t.len(), r.1, "every request runs to max_tokens");
    }
    let together: Vec<Vec<u32>> = std::thread::scope(|sc| {
        let hs: Vec<_> = reqs
            .iter()
            .map(|(p, n, st, s)| sc.spawn(|| tokens(&srv, p, *n, *st, s)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a, t, "request {i}: tokens alone and beside 7 others");
    }
    // And the greedy ones are `locus run`'s continuation.
    let (p, n, _, _) = &reqs[2];
    let body = format!(
        r#"{{"prompt":{},"max_tokens":{n},"temperature":0}}"#,
        json(p)
    );
    let (_, j) = srv.post("/v1/completions", &body);
    let want = run_text(&model, &["-p", p, "-n", &n.to_string(), "--temp", "0"]);
    assert_eq!(text_of(&j, &["choices", "0", "text"]), want);
    // The engine updates the gauge after the step that answered (a slot that leaks never
    // gets there).
    wait_for("every slot to be freed", || {
        srv.metric("locus_slots_busy") == 0.0
    });
}

/// Reads until the peer closes or `limit` passes; the bytes, and whether the peer closed (the
/// read ended at the end of the stream, not at our limit).
fn read_all(s: &mut std::net::TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut v = Vec::new();
    let closed = s.read_to_end(&mut v).is_ok();
    (v, closed)
}

#[test]
fn hostile_clients_get_clear_errors_and_the_server_keeps_serving() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    let key = "s3cret-key";
    let srv = Server::start(
        &model,
        &[
            "-np",
            "1",
            "--queue",
            "1",
            "--timeout",
            "2",
            "--api-key",
            key,
            "--max-body",
            "4096",
            "-t",
            "2",
        ],
    );
    let auth = ("Authorization", "Bearer s3cret-key");
    let call = |method: &str, path: &str, headers: &[(&str, &str)], body: &str| {
        request(&mut srv.connect(), method, path, headers, body.as_bytes())
    };
    // The key: /health needs none; everything else needs the right one.
    assert_eq!(call("GET", "/health", &[], "").status, 200);
    assert_eq!(call("GET", "/v1/models", &[], "").status, 401);
    assert_eq!(
        call(
            "GET",
            "/metrics",
            &[("Authorization", "Bearer s3cret-kez")],
            ""
        )
        .status,
        401
    );
    assert_eq!(call("GET", "/v1/models", &[auth], "").status, 200);

    // Bad requests: the status, and an error object naming the field.
    let cases: [(&str, u16, Option<&str>); 8] = [
        ("{bad", 400, None),
        (r#"{"prompt":5}"#, 400, Some("prompt")),
        (
            r#"{"prompt":"x","max_tokens":100000}"#,
            400,
            Some("max_tokens"),
        ),
        (
            r#"{"prompt":"x","max_tokens":"ten"}"#,
            400,
            Some("max_tokens"),
        ),
        (
            r#"{"prompt":"x","temperature":-1}"#,
            400,
            Some("temperature"),
        ),
        (r#"{"prompt":"x","model":5}"#, 400, Some("model")),
        (r#"{"prompt":"x","stop":[1]}"#, 400, Some("stop")),
        (r#"[1,2]"#, 400, None),
    ];
    for (body, status, param) in cases {
        let r = call("POST", "/v1/completions", &[auth], body);
        assert_eq!(r.status, status, "{body}: {}", r.body_text());
        let j = Json::parse(&r.body).unwrap();
        let err = j.get("error").unwrap_or_else(|| panic!("{body}: {j}"));
        assert!(matches!(err.get("message"), Some(Json::Str(m)) if !m.is_empty()));
        if let Some(p) = param {
            assert_eq!(err.get("param"), Some(&Json::str(p)), "{body}: {j}");
        }
    }
    let r = call(
        "POST",
        "/v1/chat/completions",
        &[auth],
        r#"{"messages":"hi"}"#,
    );
    assert_eq!(r.status, 400);
    assert!(
        r.body_text().contains("\"param\":\"messages\""),
        "{}",
        r.body_text()
    );
    assert_eq!(
        call("POST", "/v1/completions", &[auth], &"x".repeat(5000)).status,
        413
    );
    assert_eq!(call("GET", "/nowhere", &[auth], "").status, 404);
    assert_eq!(call("GET", "/v1/completions", &[auth], "").status, 405);
    let big = "a".repeat(20 << 10);
    assert_eq!(call("GET", "/health", &[("X-Big", &big)], "").status, 431);
    let mut s = srv.connect();
    s.write_all(b"GARBAGE\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s).status, 400);

    // A slow client: half a request head, then nothing; the server gives up after --timeout
    // (2 s): it answers 408 and closes. Our reader waits 30 s, generous on a loaded machine
    // yet half the default --timeout (60 s), so a 408 and a close within it are the server's
    // own doing under --timeout 2, not our reader giving up or the default deadline.
    let mut slow = srv.connect();
    slow.write_all(b"POST /v1/completions HTTP/1.1\r\nContent-Le")
        .unwrap();
    let (got, closed) = read_all(&mut slow, Duration::from_secs(30));
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 408") && closed,
        "{:?} (the server closed: {closed})",
        String::from_utf8_lossy(&got)
    );

    // A full queue: one long stream holds the only slot, one request waits, the next is told
    // to come back later. The stream's client then hangs up: the slot frees, the waiting one runs.
    // The holder's client reads its stream all along (a client that stops reading is cut after
    // --timeout, which would free the slot early), and the waiting request is sent only once
    // the holder has its slot (a stream's head is written while its job may still be queued).
    let long = r#"{"prompt":"Count: one, two,","max_tokens":2000,"temperature":0,"ignore_eos":true,"stream":true}"#;
    let mut holder = srv.connect();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\nContent-Length: {}\r\n\r\n{long}",
        long.len()
    );
    holder.write_all(head.as_bytes()).unwrap();
    let mut first = [0u8; 256];
    let n = holder.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    let drain = std::thread::spawn({
        let mut s = holder.try_clone().unwrap();
        move || {
            let mut buf = [0u8; 4096];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    });
    wait_for("the stream to take the only slot", || {
        srv.metric("locus_slots_busy") == 1.0 && srv.metric("locus_queue_depth") == 0.0
    });
    let waiting = std::thread::spawn({
        let addr = srv.addr.clone();
        move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let body = r#"{"prompt":"Hi","max_tokens":4,"temperature":0}"#;
            request(
                &mut s,
                "POST",
                "/v1/completions",
                &[("Authorization", "Bearer s3cret-key")],
                body.as_bytes(),
            )
            .status
        }
    });
    wait_for("the second request to queue", || {
        srv.metric("locus_queue_depth") >= 1.0
    });
    let r = call(
        "POST",
        "/v1/completions",
        &[auth],
        r#"{"prompt":"Hi","max_tokens":4}"#,
    );
    assert_eq!(r.status, 503, "{}", r.body_text());
    assert_eq!(r.header("retry-after"), Some("1"));
    holder.shutdown(std::net::Shutdown::Both).unwrap();
    drop(holder);
    drain.join().unwrap();
    assert_eq!(waiting.join().unwrap(), 200);
    wait_for("the dropped stream's slot to be freed", || {
        srv.metric("locus_cancelled_total") >= 1.0 && srv.metric("locus_slots_busy") == 0.0
    });
    let r = call(
        "POST",
        "/v1/completions",
        &[auth],
        r#"{"prompt":"Hi","max_tokens":4,"temperature":0}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body_text());
    // Each closed client's connection thread sees the close a moment after the client drops
    // it, so wait for that (a connection that leaks never gets there); the scrape itself is
    // the one connection that stays.
    wait_for("every closed client's connection to be released", || {
        srv.metric("locus_open_connections") == 1.0
    });
}

#[test]
fn sigterm_finishes_streams_cleanly_and_exits_0() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    let mut srv = Server::start(&model, &["-t", "2"]);
    let body = r#"{"prompt":"Once upon a time","max_tokens":40,"temperature":0,"ignore_eos":true,"stream":true}"#;
    let mut s = srv.connect();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut first = [0u8; 64];
    let _ = s.read(&mut first).unwrap();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(srv.child.id() as i32, libc::SIGTERM) };
    let (rest, _) = read_all(&mut s, PATIENCE);
    let rest = String::from_utf8_lossy(&rest).to_string();
    assert!(
        rest.contains("data: [DONE]") && rest.ends_with("0\r\n\r\n"),
        "{rest}"
    );
    let mut status = None;
    wait_for("the server to exit", || {
        status = srv.child.try_wait().unwrap();
        status.is_some()
    });
    let status = status.unwrap();
    assert!(
        status.success(),
        "{status:?}: {:?}",
        srv.log.lock().unwrap()
    );
    assert!(
        std::net::TcpStream::connect(&srv.addr).is_err(),
        "still listening"
    );
}

/// OpenAI's Python package against the server: chat with and without streaming, and a
/// completion (tools/serve/client-setup.sh installs it; `make test` runs that).
#[test]
fn openai_python_client_talks_to_the_server() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    let py = common::repo_path("target/pyclient/bin/python");
    let ok = py.exists()
        && Command::new(&py)
            .args(["-c", "import openai"])
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            !common::skip::models_required(),
            "the openai Python package is missing from target/pyclient: run tools/serve/client-setup.sh"
        );
        common::skip::skip(
            "the openai Python package is not installed (tools/serve/client-setup.sh)",
        );
        return;
    }
    let srv = Server::start(&model, &["-np", "2", "-t", "2", "--api-key", "k"]);
    let out = Command::new(&py)
        .arg(common::repo_path("tests/data/serve/openai_client.py"))
        .arg(format!("http://{}/v1", srv.addr))
        .arg(QUESTION)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = run_text(
        &model,
        &["--chat", "-p", QUESTION, "-n", "64", "--temp", "0"],
    );
    assert!(text.contains(&format!("chat: {want}\n")), "{text}");
    assert!(text.contains(&format!("stream: {want}\n")), "{text}");
    assert!(text.contains("completion: "), "{text}");
    assert!(want.contains("Paris"));
}

/// The `curl` lines of README's "Serving" section, run as written against a server (its port
/// put in for 8080): each succeeds and prints what the endpoint serves.
#[test]
fn readme_curl_examples_work_as_written() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    if Command::new("curl").arg("--version").output().is_err() {
        assert!(!common::skip::models_required(), "curl is missing");
        common::skip::skip("curl is not installed");
        return;
    }
    let readme = std::fs::read_to_string(common::repo_path("README.md")).unwrap();
    let section = readme
        .split("## Serving")
        .nth(1)
        .expect("README has a Serving section");
    let block = section
        .split("```sh")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    let mut commands = Vec::new();
    let mut cur = String::new();
    for line in block.lines() {
        let l = line.trim_end();
        if cur.is_empty() && !l.starts_with("curl") {
            continue;
        }
        match l.strip_suffix('\\') {
            Some(part) => cur.push_str(part),
            None => {
                cur.push_str(l);
                commands.push(std::mem::take(&mut cur));
            }
        }
    }
    assert!(commands.len() >= 3, "{commands:?}");
    let srv = Server::start(&model, &["-np", "2", "-t", "2"]);
    let mut outputs = String::new();
    for c in &commands {
        let c = c.replace("localhost:8080", &srv.addr);
        let out = Command::new("sh").args(["-c", &c]).output().unwrap();
        assert!(
            out.status.success(),
            "{c}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(!text.is_empty(), "{c}: no output");
        outputs.push_str(&text);
    }
    assert!(outputs.contains("Paris"), "{outputs}");
    assert!(outputs.contains("data: [DONE]"), "{outputs}");
    assert!(outputs.contains("{\"status\":\"ok\"}"), "{outputs}");
    assert!(outputs.contains("locus_requests_total"), "{outputs}");
}

/// Resident memory of a process, in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// tools/serve/load.py's summary of a run against `srv`.
fn load(srv: &Server, clients: usize, requests: usize, max_tokens: usize) -> Json {
    let out = Command::new("python3")
        .arg(common::repo_path("tools/serve/load.py"))
        .args(["--url", &format!("http://{}", srv.addr)])
        .args([
            "--clients",
            &clients.to_string(),
            "--requests",
            &requests.to_string(),
        ])
        .args(["--max-tokens", &max_tokens.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Json::parse(out.stdout.trim_ascii()).unwrap()
}

/// 16 clients for a fixed number of streamed requests: none fails, and afterwards no slot,
/// queue place or connection is held and resident memory has not grown.
#[test]
fn a_bounded_load_leaves_nothing_behind() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    let srv = Server::start(&model, &["-np", "8", "-c", "512", "-t", "2"]);
    // A first round touches every slot's cache and the buffers; the second is measured.
    let warm = load(&srv, 16, 16, 32);
    assert_eq!(text_of(&warm, &["failed"]), "0", "{warm}");
    let before = rss_kib(srv.child.id());
    let r = load(&srv, 16, 48, 32);
    let after = rss_kib(srv.child.id());
    eprintln!("load: {r}; RSS {before} KiB before, {after} KiB after");
    assert_eq!(text_of(&r, &["failed"]), "0", "{r}");
    assert_eq!(text_of(&r, &["tokens"]), (48 * 32).to_string(), "{r}");
    assert!(
        after <= before + 4096,
        "RSS grew from {before} KiB to {after} KiB"
    );
    wait_for("every slot to be freed and the queue emptied", || {
        srv.metric("locus_slots_busy") == 0.0 && srv.metric("locus_queue_depth") == 0.0
    });
    wait_for("the connections to close", || {
        srv.metric("locus_open_connections") <= 1.0
    });
}
