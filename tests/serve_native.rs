//! `locus serve` as a drop-in for llama-server (llama.cpp 0c1e57098, tools/server): its native
//! endpoints with its field names, its flags with its meanings, its metric names. Values are
//! checked against `locus run` (the same greedy text) and against each other (counts that
//! must agree), never against locus's own earlier output.

mod common;
// The server helpers serve.rs uses too; some are not needed here.
#[allow(dead_code)]
#[path = "common/server.rs"]
mod server;

use server::{json, request, run_text, text_of, Json, Server};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const PROMPT: &str = "The capital of Germany is";
const QUESTION: &str = "What is the capital of France? Answer in one sentence.";

fn num(j: &Json, path: &[&str]) -> f64 {
    text_of(j, path)
        .parse()
        .unwrap_or_else(|_| panic!("{path:?} is not a number in {j}"))
}

fn arr<'j>(j: &'j Json, key: &str) -> &'j [Json] {
    match j.get(key) {
        Some(Json::Arr(a)) => a,
        _ => panic!("no array {key} in {j}"),
    }
}

fn ids(j: &Json, key: &str) -> Vec<u32> {
    arr(j, key)
        .iter()
        .map(|v| match v {
            Json::Num(n) => *n as u32,
            _ => panic!("{key} holds a non-number in {j}"),
        })
        .collect()
}

/// `/completion` with `body`: the status and the response.
fn complete(srv: &Server, body: &str) -> Json {
    let (status, j) = srv.post("/completion", body);
    assert_eq!(status, 200, "{body}: {j}");
    j
}

/// The error object of a refused request, after checking its status.
fn refused(srv: &Server, path: &str, body: &str, status: u16) -> Json {
    let (s, j) = srv.post(path, body);
    assert_eq!(s, status, "{body}: {j}");
    j.get("error").cloned().unwrap_or_else(|| panic!("{j}"))
}

#[test]
fn completion_has_llama_servers_fields_and_locus_runs_text() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    let srv = Server::start(&model, &["-np", "2", "-c", "2048", "-t", "2"]);
    let want = run_text(&model, &["-p", PROMPT, "-n", "24", "--temp", "0"]);
    let (_, t) = srv.post(
        "/tokenize",
        &format!(r#"{{"content":{},"add_special":true}}"#, json(PROMPT)),
    );
    let prompt_ids = ids(&t, "tokens");

    let body = format!(
        r#"{{"prompt":{},"n_predict":24,"temperature":0,"return_tokens":true}}"#,
        json(PROMPT)
    );
    let j = complete(&srv, &body);
    assert_eq!(text_of(&j, &["content"]), want);
    let tokens = ids(&j, "tokens");
    assert_eq!(tokens.len(), 24);
    assert_eq!(num(&j, &["tokens_predicted"]), 24.0);
    assert_eq!(num(&j, &["tokens_evaluated"]), prompt_ids.len() as f64);
    // The cache holds the prompt and every generated token but the last (never fed back).
    assert_eq!(
        num(&j, &["tokens_cached"]),
        (prompt_ids.len() + 24 - 1) as f64
    );
    assert_eq!(j.get("stop"), Some(&Json::Bool(true)));
    assert_eq!(text_of(&j, &["stop_type"]), "limit");
    assert_eq!(text_of(&j, &["stopping_word"]), "");
    assert_eq!(j.get("truncated"), Some(&Json::Bool(false)));
    assert!(num(&j, &["id_slot"]) < 2.0);
    assert_eq!(num(&j, &["generation_settings", "n_predict"]), 24.0);
    assert_eq!(num(&j, &["generation_settings", "temperature"]), 0.0);
    let tm = j.get("timings").unwrap();
    assert_eq!(num(tm, &["predicted_n"]), 24.0);
    for k in [
        "prompt_n",
        "prompt_ms",
        "prompt_per_token_ms",
        "prompt_per_second",
        "predicted_ms",
        "predicted_per_token_ms",
        "predicted_per_second",
    ] {
        assert!(num(tm, &[k]) >= 0.0, "{k}: {tm}");
    }
    assert!(num(tm, &["predicted_ms"]) > 0.0, "{tm}");
    // Those tokens decode to the content.
    let (_, d) = srv.post(
        "/detokenize",
        &format!(r#"{{"tokens":{}}}"#, Json::Arr(arr(&j, "tokens").to_vec())),
    );
    assert_eq!(text_of(&d, &["content"]), want);

    // The same prompt again: its prefix comes from the slot's cache, the text is the same;
    // without cache_prompt nothing is reused.
    let again = complete(&srv, &body);
    assert_eq!(text_of(&again, &["content"]), want);
    assert_eq!(
        num(&again, &["timings", "cache_n"]) + num(&again, &["timings", "prompt_n"]),
        prompt_ids.len() as f64
    );
    assert!(num(&again, &["timings", "cache_n"]) > 0.0, "{again}");
    let cold = complete(
        &srv,
        &format!(
            r#"{{"prompt":{},"n_predict":24,"temperature":0,"cache_prompt":false}}"#,
            json(PROMPT)
        ),
    );
    assert_eq!(num(&cold, &["timings", "cache_n"]), 0.0);
    assert_eq!(text_of(&cold, &["content"]), want);
    // Without return_tokens, `tokens` is there and empty, as in llama-server.
    assert!(arr(&cold, "tokens").is_empty());

    // A mixed prompt (ids, then text) is the text's tokens: the same answer.
    let (first, rest) = PROMPT.split_once(' ').unwrap();
    let (_, t1) = srv.post(
        "/tokenize",
        &format!(r#"{{"content":{},"add_special":true}}"#, json(first)),
    );
    let mixed = complete(
        &srv,
        &format!(
            r#"{{"prompt":[{},{}],"n_predict":24,"temperature":0}}"#,
            Json::Arr(arr(&t1, "tokens").to_vec())
                .to_string()
                .trim_matches(|c| c == '[' || c == ']'),
            json(&format!(" {rest}"))
        ),
    );
    assert_eq!(num(&mixed, &["tokens_evaluated"]), prompt_ids.len() as f64);
    assert_eq!(text_of(&mixed, &["content"]), want);

    // A stop word: the text ends before it, stop_type "word".
    let stop = complete(
        &srv,
        &format!(
            r#"{{"prompt":{},"n_predict":24,"temperature":0,"stop":["."]}}"#,
            json(PROMPT)
        ),
    );
    assert_eq!(
        text_of(&stop, &["content"]),
        want.split('.').next().unwrap()
    );
    assert_eq!(text_of(&stop, &["stop_type"]), "word");
    assert_eq!(text_of(&stop, &["stopping_word"]), ".");

    // The end of generation: the chat prompt /apply-template writes, sent to /completion,
    // gives `locus run --chat`'s answer and stops with "eos".
    let msgs = format!(
        r#"{{"messages":[{{"role":"user","content":{}}}]}}"#,
        json(QUESTION)
    );
    let (status, t) = srv.post("/apply-template", &msgs);
    assert_eq!(status, 200, "{t}");
    let chat_prompt = text_of(&t, &["prompt"]);
    assert!(
        chat_prompt.ends_with("<|im_start|>assistant\n"),
        "{chat_prompt}"
    );
    let answer = run_text(
        &model,
        &["--chat", "-p", QUESTION, "-n", "64", "--temp", "0"],
    );
    let eos = complete(
        &srv,
        &format!(
            r#"{{"prompt":{},"n_predict":64,"temperature":0}}"#,
            json(&chat_prompt)
        ),
    );
    assert_eq!(text_of(&eos, &["content"]), answer);
    assert_eq!(text_of(&eos, &["stop_type"]), "eos");

    // Streamed: pieces that add up to the text, each with its token; the last event carries
    // "stop": true and the summary; no [DONE] (llama-server sends none on /completion).
    let r = srv.post_raw(
        "/completion",
        &format!(
            r#"{{"prompt":{},"n_predict":24,"temperature":0,"stream":true,"timings_per_token":true}}"#,
            json(PROMPT)
        ),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let events: Vec<Json> = r
        .events()
        .iter()
        .map(|e| Json::parse(e.as_bytes()).unwrap_or_else(|_| panic!("not JSON: {e}")))
        .collect();
    let (last, pieces) = events.split_last().unwrap();
    let mut text = String::new();
    let mut n = 0;
    for p in pieces {
        assert_eq!(p.get("stop"), Some(&Json::Bool(false)), "{p}");
        text.push_str(&text_of(p, &["content"]));
        n += arr(p, "tokens").len();
        assert_eq!(num(p, &["tokens_predicted"]), n as f64, "{p}");
        assert!(p.get("timings").is_some(), "timings_per_token: {p}");
    }
    assert_eq!(text, want);
    assert_eq!(n, 24);
    assert_eq!(last.get("stop"), Some(&Json::Bool(true)));
    assert_eq!(text_of(last, &["content"]), "");
    assert_eq!(num(last, &["tokens_predicted"]), 24.0);
    assert_eq!(num(last, &["timings", "predicted_n"]), 24.0);

    // A seed gives the same sampled text twice.
    let seeded = format!(
        r#"{{"prompt":{},"n_predict":16,"temperature":0.9,"seed":1234}}"#,
        json(PROMPT)
    );
    assert_eq!(
        text_of(&complete(&srv, &seeded), &["content"]),
        text_of(&complete(&srv, &seeded), &["content"])
    );

    // logit_bias false bans a token: greedy decoding then never picks the first one it picked.
    let banned = ids(&j, "tokens")[0];
    let b = complete(
        &srv,
        &format!(
            r#"{{"prompt":{},"n_predict":4,"temperature":0,"return_tokens":true,"logit_bias":[[{banned},false]]}}"#,
            json(PROMPT)
        ),
    );
    assert!(!ids(&b, "tokens").contains(&banned), "{b}");
    assert_eq!(
        text_of(&b, &["generation_settings", "logit_bias", "0", "1"]),
        "false"
    );

    // n_probs: each token's log-probability and the likeliest at its place; greedy picks the
    // likeliest, and the pieces spell the content.
    let p = complete(
        &srv,
        &format!(
            r#"{{"prompt":{},"n_predict":8,"temperature":0,"n_probs":3,"return_tokens":true}}"#,
            json(PROMPT)
        ),
    );
    let probs = arr(&p, "completion_probabilities");
    assert_eq!(probs.len(), ids(&p, "tokens").len());
    assert_eq!(probs.len() as f64, num(&p, &["tokens_predicted"]));
    let mut spelled = String::new();
    for (e, id) in probs.iter().zip(ids(&p, "tokens")) {
        assert_eq!(num(e, &["id"]), id as f64, "{e}");
        spelled.push_str(&text_of(e, &["token"]));
        let top = arr(e, "top_logprobs");
        assert_eq!(top.len(), 3, "{e}");
        assert_eq!(
            num(&top[0], &["id"]),
            id as f64,
            "greedy takes the likeliest: {e}"
        );
        assert_eq!(num(&top[0], &["logprob"]), num(e, &["logprob"]));
        let lp: Vec<f64> = top.iter().map(|t| num(t, &["logprob"])).collect();
        assert!(lp.windows(2).all(|w| w[0] >= w[1]), "{e}");
        assert!(lp[0] <= 0.0 && lp.iter().map(|l| l.exp()).sum::<f64>() <= 1.0 + 1e-6);
    }
    assert_eq!(spelled, text_of(&p, &["content"]));
    assert_eq!(num(&p, &["generation_settings", "n_probs"]), 3.0);

    // The settings clients send with every request, inert while their sampler is off, are
    // taken; turning that sampler on is refused by name.
    let inert = complete(
        &srv,
        r#"{"prompt":"Hi","n_predict":2,"dry_multiplier":0,"dry_base":1.75,"dry_allowed_length":2,"mirostat":0,"mirostat_tau":5,"typical_p":1,"xtc_probability":0,"xtc_threshold":0.1,"n_indent":0,"return_progress":false}"#,
    );
    assert_eq!(num(&inert, &["tokens_predicted"]), 2.0);
    for (body, param) in [
        (r#"{"prompt":"Hi","dry_multiplier":0.8}"#, "dry_multiplier"),
        (
            r#"{"prompt":"Hi","return_progress":true}"#,
            "return_progress",
        ),
    ] {
        let e = refused(&srv, "/completion", body, 400);
        assert_eq!(e.get("param"), Some(&Json::str(param)), "{body}: {e}");
    }

    // id_slot picks the slot.
    for slot in [1, 0] {
        let s = complete(
            &srv,
            &format!(r#"{{"prompt":"Hi","n_predict":2,"id_slot":{slot}}}"#),
        );
        assert_eq!(num(&s, &["id_slot"]), slot as f64);
    }

    // Refused by name: what locus cannot honour, and a prompt too long for a slot (llama-server's
    // shape, with the counts).
    for (body, param) in [
        (
            r#"{"prompt":"x","n_probs":5,"post_sampling_probs":true}"#,
            "post_sampling_probs",
        ),
        (r#"{"prompt":"x","n_probs":-1}"#, "n_probs"),
        (r#"{"prompt":"x","n_probs":101}"#, "n_probs"),
        (r#"{"prompt":"x","mirostat":2}"#, "mirostat"),
        (r#"{"prompt":"x","grammar":"root ::= \"a\""}"#, "grammar"),
        (r#"{"prompt":"x","samplers":["top_k"]}"#, "samplers"),
        (r#"{"prompt":"x","mystery":1}"#, "mystery"),
        (r#"{"prompt":"x","id_slot":7}"#, "id_slot"),
        (r#"{"prompt":"x","n_predict":"ten"}"#, "n_predict"),
        (r#"{"prompt":["a","b"]}"#, "prompt"),
        (r#"{"prompt":"x","logit_bias":[[1]]}"#, "logit_bias"),
    ] {
        let e = refused(&srv, "/completion", body, 400);
        assert_eq!(e.get("param"), Some(&Json::str(param)), "{body}: {e}");
    }
    let long = "word ".repeat(1100);
    let e = refused(
        &srv,
        "/completion",
        &format!(r#"{{"prompt":{}}}"#, json(&long)),
        400,
    );
    assert_eq!(text_of(&e, &["type"]), "exceed_context_size_error");
    assert_eq!(num(&e, &["n_ctx"]), 1024.0);
    assert!(num(&e, &["n_prompt_tokens"]) > 1024.0, "{e}");
    // llama-server's error object names no `param` (format_error_response: code, message,
    // type, and here the two counts).
    assert_eq!(e.get("param"), None, "{e}");
    assert_eq!(num(&e, &["code"]), 400.0);
    // The chat endpoint answers an overflow the same way.
    let e = refused(
        &srv,
        "/v1/chat/completions",
        &format!(
            r#"{{"messages":[{{"role":"user","content":{}}}]}}"#,
            json(&long)
        ),
        400,
    );
    assert_eq!(text_of(&e, &["type"]), "exceed_context_size_error");
    assert_eq!(num(&e, &["n_ctx"]), 1024.0);

    // llama-server's metric names, with the counts this test made.
    let predicted = srv.metric("llamacpp:tokens_predicted_total");
    assert_eq!(predicted, srv.metric("locus_generated_tokens_total"));
    assert!(predicted >= 24.0 * 6.0, "{predicted}");
    assert_eq!(
        srv.metric("llamacpp:prompt_tokens_total"),
        srv.metric("locus_prompt_tokens_total")
    );
    assert!(srv.metric("llamacpp:n_decode_total") >= predicted / 2.0);
    assert!(srv.metric("llamacpp:prompt_seconds_total") > 0.0);
    assert!(srv.metric("llamacpp:tokens_predicted_seconds_total") > 0.0);
    assert_eq!(srv.metric("llamacpp:requests_processing"), 0.0);
    assert_eq!(srv.metric("llamacpp:requests_deferred"), 0.0);
    srv.metric("llamacpp:prompt_tokens_seconds");
    srv.metric("llamacpp:predicted_tokens_seconds");
}

#[test]
fn props_slots_models_cors_and_chat_as_llama_server_has_them() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    // -c is the context of all slots together: 2048 over 4 slots is 512 each.
    let srv = Server::start(
        &model,
        &["-np", "4", "-c", "2048", "-t", "2", "-a", "smol, tiny"],
    );
    let (status, body) = srv.get("/props");
    assert_eq!(status, 200);
    let p = Json::parse(body.as_bytes()).unwrap();
    assert_eq!(num(&p, &["total_slots"]), 4.0);
    assert_eq!(num(&p, &["default_generation_settings", "n_ctx"]), 512.0);
    assert_eq!(
        num(&p, &["default_generation_settings", "params", "n_predict"]),
        -1.0
    );
    assert!(text_of(&p, &["chat_template"]).contains("<|im_start|>"));
    assert!(text_of(&p, &["model_path"]).ends_with(SMOL));
    assert_eq!(text_of(&p, &["model_alias"]), "smol");
    assert!(!text_of(&p, &["build_info"]).is_empty());

    let (status, body) = srv.get("/slots");
    assert_eq!(status, 200);
    let s = Json::parse(body.as_bytes()).unwrap();
    let Json::Arr(slots) = &s else { panic!("{s}") };
    assert_eq!(slots.len(), 4);
    for (i, slot) in slots.iter().enumerate() {
        assert_eq!(num(slot, &["id"]), i as f64);
        assert_eq!(num(slot, &["n_ctx"]), 512.0);
        assert_eq!(slot.get("is_processing"), Some(&Json::Bool(false)));
    }
    // After a request, its slot shows what it served.
    let j = complete(&srv, r#"{"prompt":"Hello","n_predict":3,"id_slot":2}"#);
    let (_, body) = srv.get("/slots");
    let s = Json::parse(body.as_bytes()).unwrap();
    let Json::Arr(slots) = &s else { panic!("{s}") };
    assert_eq!(
        num(&slots[2], &["n_prompt_tokens"]),
        num(&j, &["tokens_evaluated"])
    );
    assert_eq!(num(&slots[2], &["params", "n_predict"]), 3.0);

    // A request pinned to a busy slot waits for it; one behind it that is not pinned goes
    // ahead to a free slot, and /slots shows the busy one processing.
    std::thread::scope(|sc| {
        let long = sc.spawn(|| {
            complete(
                &srv,
                r#"{"prompt":"Once upon a time","n_predict":400,"ignore_eos":true,"id_slot":0}"#,
            )
        });
        let busy = || {
            let (_, body) = srv.get("/slots");
            let s = Json::parse(body.as_bytes()).unwrap();
            text_of(&s, &["0", "is_processing"]) == "true"
        };
        let t0 = std::time::Instant::now();
        while !busy() {
            assert!(t0.elapsed().as_secs() < 60, "slot 0 never got busy");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let pinned = sc.spawn(|| complete(&srv, r#"{"prompt":"Hi","n_predict":2,"id_slot":0}"#));
        std::thread::sleep(std::time::Duration::from_millis(50));
        let free = complete(&srv, r#"{"prompt":"Hi","n_predict":2}"#);
        assert_ne!(num(&free, &["id_slot"]), 0.0, "{free}");
        assert!(busy(), "the unpinned request waited for the long one");
        assert_eq!(num(&pinned.join().unwrap(), &["id_slot"]), 0.0);
        assert_eq!(num(&long.join().unwrap(), &["tokens_predicted"]), 400.0);
    });

    // Models: the aliases and the file's name, each served; another name is served too.
    let (_, body) = srv.get("/v1/models");
    for name in ["smol", "tiny", SMOL] {
        assert!(body.contains(&json(name)), "{name}: {body}");
        let (status, m) = srv.get(&format!("/v1/models/{name}"));
        assert_eq!(status, 200, "{m}");
        assert!(m.contains(&format!("\"id\":{}", json(name))), "{m}");
    }
    assert_eq!(srv.get("/v1/models/nope").0, 404);
    let (status, j) = srv.post(
        "/v1/completions",
        r#"{"prompt":"Hi","max_tokens":2,"model":"gpt-4"}"#,
    );
    assert_eq!(status, 200, "{j}");

    // CORS: the preflight, and the header on every response.
    let r = request(&mut srv.connect(), "OPTIONS", "/completion", &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert!(r
        .header("access-control-allow-methods")
        .is_some_and(|m| m.contains("POST")));
    assert_eq!(r.header("access-control-allow-headers"), Some("*"));
    let r = request(&mut srv.connect(), "GET", "/health", &[], b"");
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    // llama-server's second health path.
    assert_eq!(
        srv.get("/v1/health"),
        (200, r#"{"status":"ok"}"#.to_string())
    );
    let r = request(&mut srv.connect(), "GET", "/nowhere", &[], b"");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));

    // Chat streaming: the role first, the fingerprint, timings per chunk when asked, and
    // timings on the last.
    let r = srv.post_raw(
        "/v1/chat/completions",
        &format!(
            r#"{{"messages":[{{"role":"user","content":{}}}],"max_tokens":8,"temperature":0,"stream":true,"timings_per_token":true}}"#,
            json(QUESTION)
        ),
    );
    assert_eq!(r.status, 200, "{}", r.body_text());
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let first = Json::parse(events[0].as_bytes()).unwrap();
    assert_eq!(
        text_of(&first, &["choices", "0", "delta", "role"]),
        "assistant"
    );
    for (i, e) in events[..events.len() - 1].iter().enumerate() {
        let c = Json::parse(e.as_bytes()).unwrap();
        assert!(!text_of(&c, &["system_fingerprint"]).is_empty(), "{c}");
        // The role goes out with the first token's text, which carries that token's timings.
        assert_eq!(c.get("timings").is_some(), i > 0, "{c}");
    }

    // A text-completion stream ends as llama-server's does: one chunk with the finish reason
    // and the usage together, asked for or not, and no separate usage chunk.
    let r = srv.post_raw(
        "/v1/completions",
        r#"{"prompt":"Hello","max_tokens":4,"ignore_eos":true,"stream":true}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body_text());
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Json> = events[..events.len() - 1]
        .iter()
        .map(|e| Json::parse(e.as_bytes()).unwrap())
        .collect();
    let (last, texts) = chunks.split_last().unwrap();
    assert_eq!(text_of(last, &["choices", "0", "finish_reason"]), "length");
    assert_eq!(num(last, &["usage", "completion_tokens"]), 4.0, "{last}");
    for c in texts {
        assert!(c.get("usage").is_none(), "usage before the end: {c}");
    }

    // Slot actions (save, restore, erase) need --slot-save-path, which locus refuses: 501 with
    // llama-server's words, whatever the action.
    for action in ["save", "restore", "erase"] {
        let (status, e) = srv.post(
            &format!("/slots/0?action={action}"),
            r#"{"filename":"a.bin"}"#,
        );
        assert_eq!(status, 501, "{e}");
        assert_eq!(text_of(&e, &["error", "type"]), "not_supported_error");
        assert!(
            text_of(&e, &["error", "message"]).contains("--slot-save-path"),
            "{e}"
        );
    }

    // Assistant prefill: a conversation ending with the assistant's words continues them,
    // exactly as /completion continues the prompt /apply-template writes.
    let msgs = format!(
        r#"[{{"role":"user","content":{}}},{{"role":"assistant","content":"The capital of France"}}]"#,
        json(QUESTION)
    );
    let (_, t) = srv.post("/apply-template", &format!(r#"{{"messages":{msgs}}}"#));
    let prompt = text_of(&t, &["prompt"]);
    assert!(
        prompt.ends_with("<|im_start|>assistant\nThe capital of France"),
        "{prompt}"
    );
    let (status, chat) = srv.post(
        "/v1/chat/completions",
        &format!(r#"{{"messages":{msgs},"max_tokens":12,"temperature":0}}"#),
    );
    assert_eq!(status, 200, "{chat}");
    let cont = complete(
        &srv,
        &format!(
            r#"{{"prompt":{},"n_predict":12,"temperature":0}}"#,
            json(&prompt)
        ),
    );
    assert_eq!(
        text_of(&chat, &["choices", "0", "message", "content"]),
        text_of(&cont, &["content"])
    );
    assert!(chat.get("timings").is_some(), "{chat}");
}

#[test]
fn flags_take_llama_servers_meanings() {
    // Refused by name before any model is read.
    for (args, says) in [
        (&["--jinja"][..], "--jinja"),
        (&["--slot-save-path", "/tmp"], "--slot-save-path"),
        (&["--flash-attn", "on"], "--flash-attn"),
        (&["-n", "0"], "-n"),
        (&["--temp", "-1"], "--temp"),
    ] {
        let mut all = vec!["serve", "-m", "/nonexistent.gguf"];
        all.extend_from_slice(args);
        let out = common::locus(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    // A context too small to share among the slots is refused at start.
    let ms = model.to_str().unwrap();
    let out = common::locus(&["serve", "-m", ms, "--port", "0", "-np", "4", "-c", "4"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("-c"));

    // -n, --temp and --seed are the defaults of requests that do not say.
    let srv = Server::start(
        &model,
        &[
            "-n",
            "5",
            "--temp",
            "0",
            "--seed",
            "42",
            "--no-slots",
            "--metrics",
            "-t",
            "2",
        ],
    );
    let want = run_text(&model, &["-p", PROMPT, "-n", "5", "--temp", "0"]);
    let j = complete(&srv, &format!(r#"{{"prompt":{}}}"#, json(PROMPT)));
    assert_eq!(num(&j, &["tokens_predicted"]), 5.0);
    assert_eq!(text_of(&j, &["content"]), want);
    assert_eq!(num(&j, &["generation_settings", "seed"]), 42.0);
    let (status, o) = srv.post(
        "/v1/completions",
        &format!(r#"{{"prompt":{}}}"#, json(PROMPT)),
    );
    assert_eq!(status, 200, "{o}");
    assert_eq!(text_of(&o, &["choices", "0", "text"]), want);
    // --no-slots: 501, as llama-server's; --metrics: /metrics (always served by locus).
    let (status, body) = srv.get("/slots");
    assert_eq!(status, 501, "{body}");
    assert!(body.contains("not_supported_error"), "{body}");
    assert!(srv.metric("llamacpp:tokens_predicted_total") >= 10.0);
}

/// The details a llama-server client sees (tools/server, 0c1e57098): a chat stream opens with
/// `{"role":"assistant","content":null}` alone and then sends only what is new; the
/// end-of-generation token is among `tokens` and counted in `tokens_predicted` and
/// `completion_tokens` (its `n_decoded`); `/slots?fail_on_no_slot=1` is 503 while no slot is
/// idle.
#[test]
fn streams_counts_and_slots_in_llama_servers_detail() {
    let Some(model) = common::model_path(SMOL) else {
        return;
    };
    let srv = Server::start(&model, &["-np", "1", "-c", "1024", "-t", "2"]);
    let answer = run_text(
        &model,
        &["--chat", "-p", QUESTION, "-n", "64", "--temp", "0"],
    );
    let (_, t) = srv.post("/tokenize", r#"{"content":"<|im_end|>"}"#);
    let im_end = ids(&t, "tokens");
    assert_eq!(im_end.len(), 1, "{t}");
    let eog = im_end[0];

    // Whole: the answer ends on <|im_end|>, which is listed and counted but not in the text.
    let msgs = format!(r#"[{{"role":"user","content":{}}}]"#, json(QUESTION));
    let (status, chat) = srv.post(
        "/v1/chat/completions",
        &format!(r#"{{"messages":{msgs},"max_tokens":64,"temperature":0,"return_tokens":true}}"#),
    );
    assert_eq!(status, 200, "{chat}");
    assert_eq!(
        text_of(&chat, &["choices", "0", "message", "content"]),
        answer
    );
    assert_eq!(text_of(&chat, &["choices", "0", "finish_reason"]), "stop");
    let toks = server::tokens_of(&chat);
    assert_eq!(toks.last(), Some(&eog), "{chat}");
    assert_eq!(
        num(&chat, &["usage", "completion_tokens"]),
        toks.len() as f64
    );
    let (_, d) = srv.post(
        "/detokenize",
        &format!(r#"{{"tokens":{:?}}}"#, &toks[..toks.len() - 1]),
    );
    assert_eq!(text_of(&d, &["content"]), answer);

    let (_, t) = srv.post("/apply-template", &format!(r#"{{"messages":{msgs}}}"#));
    let prompt = text_of(&t, &["prompt"]);
    let body = format!(
        r#"{{"prompt":{},"n_predict":64,"temperature":0,"return_tokens":true}}"#,
        json(&prompt)
    );
    let j = complete(&srv, &body);
    assert_eq!(text_of(&j, &["content"]), answer);
    assert_eq!(text_of(&j, &["stop_type"]), "eos");
    assert_eq!(ids(&j, "tokens"), toks);
    assert_eq!(num(&j, &["tokens_predicted"]), toks.len() as f64);
    assert_eq!(num(&j, &["timings", "predicted_n"]), toks.len() as f64);
    // The cache holds the prompt and every token fed back: all but the end-of-generation
    // token, never fed.
    assert_eq!(
        num(&j, &["tokens_cached"]),
        num(&j, &["tokens_evaluated"]) + toks.len() as f64 - 1.0
    );

    // Streamed /completion: the end-of-generation token comes as its own piece, with no text.
    let r = srv.post_raw(
        "/completion",
        &body.replace("\"temperature\"", "\"stream\":true,\"temperature\""),
    );
    let events: Vec<Json> = r
        .events()
        .iter()
        .map(|e| Json::parse(e.as_bytes()).unwrap())
        .collect();
    let (last, pieces) = events.split_last().unwrap();
    let end = pieces.last().unwrap();
    assert_eq!(ids(end, "tokens"), [eog], "{end}");
    assert_eq!(text_of(end, &["content"]), "");
    let streamed: Vec<u32> = pieces.iter().flat_map(|p| ids(p, "tokens")).collect();
    assert_eq!(streamed, toks);
    assert_eq!(num(last, &["tokens_predicted"]), toks.len() as f64);

    // Streamed chat: the role alone first (content null), then text deltas only (none empty),
    // then an empty delta with the finish reason; the usage counts <|im_end|> too.
    let r = srv.post_raw(
        "/v1/chat/completions",
        &format!(
            r#"{{"messages":{msgs},"max_tokens":64,"temperature":0,"stream":true,"stream_options":{{"include_usage":true}}}}"#
        ),
    );
    assert_eq!(r.status, 200);
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Json> = events[..events.len() - 1]
        .iter()
        .map(|e| Json::parse(e.as_bytes()).unwrap())
        .collect();
    let choice = |c: &Json| {
        c.get("choices").and_then(|a| match a {
            Json::Arr(a) => a.first().cloned(),
            _ => None,
        })
    };
    let role = choice(&chunks[0]).unwrap();
    assert_eq!(
        role.get("delta"),
        Some(&Json::obj([
            ("role", Json::str("assistant")),
            ("content", Json::Null)
        ])),
        "{}",
        chunks[0]
    );
    assert_eq!(role.get("finish_reason"), Some(&Json::Null));
    assert_eq!(text_of(&chunks[0], &["object"]), "chat.completion.chunk");
    let (usage, rest) = chunks[1..].split_last().unwrap();
    let (fin, texts) = rest.split_last().unwrap();
    let mut text = String::new();
    for c in texts {
        let delta = choice(c).and_then(|ch| ch.get("delta").cloned()).unwrap();
        let Json::Obj(members) = &delta else {
            panic!("{c}")
        };
        assert_eq!(members.len(), 1, "only the new text: {c}");
        let piece = text_of(&delta, &["content"]);
        assert!(!piece.is_empty(), "a delta with nothing new: {c}");
        text.push_str(&piece);
    }
    assert_eq!(text, answer);
    let f = choice(fin).unwrap();
    assert_eq!(f.get("delta"), Some(&Json::Obj(Vec::new())), "{fin}");
    assert_eq!(text_of(&f, &["finish_reason"]), "stop");
    assert_eq!(
        num(usage, &["usage", "completion_tokens"]),
        toks.len() as f64
    );
    assert!(
        usage.get("timings").is_some(),
        "the last chunk has the timings: {usage}"
    );

    // /slots?fail_on_no_slot=1: 200 while the slot is idle, 503 while it is busy (a plain
    // /slots is still 200), as llama-server's; any value but an empty one asks.
    let (status, body) = srv.get("/slots?fail_on_no_slot=1");
    assert_eq!(status, 200, "{body}");
    std::thread::scope(|sc| {
        let long = sc.spawn(|| {
            complete(
                &srv,
                r#"{"prompt":"Once upon a time","n_predict":300,"ignore_eos":true}"#,
            )
        });
        let t0 = std::time::Instant::now();
        while !srv.get("/slots").1.contains(r#""is_processing":true"#) {
            assert!(t0.elapsed().as_secs() < 60, "the slot never got busy");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let (status, body) = srv.get("/slots?fail_on_no_slot=1");
        assert_eq!(status, 503, "{body}");
        let e = Json::parse(body.as_bytes()).unwrap();
        assert_eq!(text_of(&e, &["error", "type"]), "unavailable_error");
        assert_eq!(text_of(&e, &["error", "message"]), "no slot available");
        assert_eq!(srv.get("/slots?fail_on_no_slot=true").0, 503);
        assert_eq!(srv.get("/slots?fail_on_no_slot=").0, 200);
        assert_eq!(srv.get("/slots").0, 200);
        assert_eq!(num(&long.join().unwrap(), &["tokens_predicted"]), 300.0);
    });
    assert_eq!(srv.get("/slots?fail_on_no_slot=1").0, 200);
}
