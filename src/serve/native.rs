//! llama-server's own endpoints, for the scripts and UIs written against it:
//! `POST /completion` (and `/completions`, as llama-server routes it), `GET /props`,
//! `GET /slots`, `POST /apply-template`, `GET /v1/models/{id}`, and the `OPTIONS` preflight
//! a browser sends before a cross-origin call. Field names and shapes are llama-server's
//! (llama.cpp 0c1e57098, tools/server).

use std::io;
use std::net::TcpStream;
use std::sync::mpsc::RecvTimeoutError;

use super::api::{self, ApiError, Context, FINGERPRINT};
use super::engine::{Event, Finish, TokenProbs};
use super::llamacpp::{Detail, SlotView, Timings};
use super::native_req::{settings_json, Completion};
use super::{http, send_error, send_json, Ready, ServeError, Server, PEER_CHECK};
use crate::json::Json;
use crate::model::sampler::SamplerConfig;

/// The methods the preflight allows (llama-server's list, less DELETE, which locus has no use for).
const ALLOW_METHODS: &str = "GET, POST, OPTIONS";

/// The fewest tokens a slot may hold (llama-server's minimum context): a chat template alone
/// takes several.
pub(super) const MIN_SLOT_CTX: usize = 8;

/// The tokens of each slot: `-c` is all slots' context together, as llama-server's `n_ctx`
/// (each slot gets `n_ctx / n_parallel`), so `-c 32768 -np 4` sizes memory for 32768 tokens.
pub(super) fn slot_context(total: usize, slots: usize) -> Result<usize, ServeError> {
    let per = total / slots.max(1);
    if per < MIN_SLOT_CTX {
        return Err(ServeError::Start {
            what: "-c is the context of all slots together",
            err: io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{total} tokens for {slots} slots leave each fewer than {MIN_SLOT_CTX}; raise -c or lower -np"),
            ),
        });
    }
    Ok(per)
}

/// `--alias`'s names: comma-separated, blanks dropped (llama-server's reading).
pub(super) fn aliases(alias: Option<&str>) -> Vec<String> {
    alias
        .into_iter()
        .flat_map(|a| a.split(','))
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect()
}

/// Adds llama-server's `timings` object to a response or chunk.
pub(super) fn add_timings(j: &mut Json, t: &Timings) {
    if let Json::Obj(m) = j {
        m.push(("timings".into(), t.to_json()));
    }
}

/// Answers the requests this module owns; `None` for the others.
pub(super) fn route(
    server: &'static Server,
    req: &http::Request,
    stream: &TcpStream,
    keep: bool,
) -> Option<(&'static str, io::Result<u16>)> {
    // A HEAD request's answer is GET's head without its body.
    let mut w = http::HeadOnly::new(stream, req.method == "HEAD");
    if req.method == "OPTIONS" {
        // A browser's preflight carries no key; it learns what it may send.
        let headers = [
            ("Access-Control-Allow-Credentials", "false".to_string()),
            ("Access-Control-Allow-Methods", ALLOW_METHODS.to_string()),
            ("Access-Control-Allow-Headers", "*".to_string()),
        ];
        let r = http::write_response(&mut w, 200, &headers, "text/html", b"", keep);
        return Some(("OPTIONS", r.map(|_| 200)));
    }
    let path = req.path.trim_end_matches('/');
    let (endpoint, post): (&'static str, bool) = match path {
        "/completion" | "/completions" => ("/completion", true),
        "/props" => ("/props", req.method == "POST"),
        "/slots" => ("/slots", false),
        p if p.starts_with("/slots/") => ("/slots/{id}", true),
        "/apply-template" => ("/apply-template", true),
        p if p.starts_with("/v1/models/") || p.starts_with("/models/") => {
            ("/v1/models/{id}", false)
        }
        _ => return None,
    };
    let fail = |w: &mut http::HeadOnly<&TcpStream>, e: ApiError| {
        (endpoint, send_error(w, &e, keep).map(|_| e.status))
    };
    let key = server.opts.api_key.as_ref();
    if !key.is_none_or(|k| super::authorized(req, k)) {
        let e = ApiError::new(
            401,
            "authentication_error",
            "a valid API key is required (Authorization: Bearer KEY)",
        );
        return Some(fail(&mut w, e));
    }
    let method_ok = if post {
        req.method == "POST"
    } else {
        req.method == "GET" || req.method == "HEAD"
    };
    if !method_ok {
        let want = if post { "POST" } else { "GET" };
        let e = ApiError::new(
            405,
            "invalid_request_error",
            format!("{endpoint} takes {want}"),
        );
        return Some(fail(&mut w, e));
    }
    if endpoint == "/props" && post {
        let e = ApiError::new(
            501,
            "not_supported_error",
            "changing global properties (POST /props) is not served",
        );
        return Some(fail(&mut w, e));
    }
    if endpoint == "/slots/{id}" {
        // Saving, restoring and erasing a slot need a save path, which locus does not take.
        let e = ApiError::new(
            501,
            "not_supported_error",
            "This server does not support slots action. Start it with `--slot-save-path`",
        );
        return Some(fail(&mut w, e));
    }
    if endpoint == "/slots" && server.opts.llama.no_slots {
        let e = ApiError::new(
            501,
            "not_supported_error",
            "This server does not support slots endpoint. Start it without `--no-slots`",
        );
        return Some(fail(&mut w, e));
    }
    let Some(ready) = server.ready.get() else {
        return Some(fail(
            &mut w,
            ApiError::new(503, "unavailable_error", "the model is loading"),
        ));
    };
    let answered = |r: Result<Json, ApiError>, w: &mut http::HeadOnly<&TcpStream>| match r {
        Ok(j) => send_json(w, 200, &j, keep).map(|_| 200),
        Err(e) => send_error(w, &e, keep).map(|_| e.status),
    };
    let r = match endpoint {
        "/props" => answered(Ok(props(server, ready)), &mut w),
        "/slots" => answered(slots(server, ready, req), &mut w),
        "/apply-template" => answered(apply_template(ready, &req.body), &mut w),
        "/v1/models/{id}" => {
            let id = path.rsplit_once("/models/").map_or("", |(_, id)| id);
            answered(model(server, ready, id), &mut w)
        }
        _ => completion(server, ready, req, stream, keep),
    };
    Some((endpoint, r))
}

/// The default sampling settings: locus's, with `--temp`, `--seed` and `-n` applied.
fn default_params(server: &Server) -> (super::engine::Params, i64) {
    let o = &server.opts.llama;
    let d = SamplerConfig::default();
    let sampling = SamplerConfig {
        temp: o.temp.unwrap_or(d.temp),
        seed: o.seed.unwrap_or(u64::from(u32::MAX)),
        ..d
    };
    let p = super::engine::Params {
        sampling,
        max_tokens: o.n_predict,
        stop: Vec::new(),
        ignore_eos: false,
    };
    (p, o.n_predict.map_or(-1, |n| n as i64))
}

/// `GET /props`.
fn props(server: &Server, ready: &Ready) -> Json {
    let (p, n_predict) = default_params(server);
    let template = ready.tokenizer.chat_template().unwrap_or("").to_string();
    Json::Obj(vec![
        (
            "default_generation_settings".into(),
            Json::obj([
                (
                    "params",
                    settings_json(&p, n_predict, false, &Default::default()),
                ),
                ("n_ctx", Json::num(ready.ctx as f64)),
            ]),
        ),
        ("total_slots".into(), Json::num(server.opts.slots as f64)),
        ("model_alias".into(), Json::str(ready.names[0].clone())),
        (
            "model_path".into(),
            Json::str(server.opts.model.display().to_string()),
        ),
        (
            "modalities".into(),
            Json::obj([
                ("vision", Json::Bool(false)),
                ("video", Json::Bool(false)),
                ("audio", Json::Bool(false)),
            ]),
        ),
        (
            "endpoint_slots".into(),
            Json::Bool(!server.opts.llama.no_slots),
        ),
        ("endpoint_props".into(), Json::Bool(false)),
        ("endpoint_metrics".into(), Json::Bool(true)),
        ("chat_template".into(), Json::Str(template)),
        (
            "chat_format".into(),
            ready
                .template
                .as_ref()
                .map_or(Json::Null, |t| Json::str(t.format.name())),
        ),
        ("bos_token".into(), token_text(ready, ready.tokenizer.bos())),
        ("eos_token".into(), token_text(ready, ready.tokenizer.eos())),
        ("build_info".into(), Json::str(FINGERPRINT)),
        ("is_sleeping".into(), Json::Bool(false)),
    ])
}

fn token_text(ready: &Ready, id: Option<u32>) -> Json {
    id.map_or(Json::str(""), |id| {
        Json::Str(String::from_utf8_lossy(&ready.tokenizer.token_to_piece(id, true)).to_string())
    })
}

/// `GET /slots`: one object per slot, as llama-server's `server_slot::to_json`; with
/// `?fail_on_no_slot=` anything (as there, any value but an empty one), 503 when no slot is
/// idle.
fn slots(server: &Server, ready: &Ready, req: &http::Request) -> Result<Json, ApiError> {
    let views = server.metrics.native.slots();
    let fail = req.param("fail_on_no_slot").is_some_and(|v| !v.is_empty());
    if fail && views.iter().all(|v| v.is_processing) {
        return Err(ApiError::new(503, "unavailable_error", "no slot available"));
    }
    Ok(Json::Arr(
        views
            .iter()
            .enumerate()
            .map(|(i, v)| slot_json(i, v, ready.ctx))
            .collect(),
    ))
}

fn slot_json(i: usize, v: &SlotView, n_ctx: usize) -> Json {
    let mut m: Vec<(String, Json)> = vec![
        ("id".into(), Json::num(i as f64)),
        ("n_ctx".into(), Json::num(n_ctx as f64)),
        ("speculative".into(), Json::Bool(false)),
        ("is_processing".into(), Json::Bool(v.is_processing)),
    ];
    if let Some((task, n_prompt, p)) = &v.task {
        let n_predict = p.max_tokens.map_or(-1, |n| n as i64);
        m.extend([
            ("id_task".to_string(), Json::num(*task as f64)),
            ("n_prompt_tokens".into(), Json::num(*n_prompt as f64)),
            (
                "n_prompt_tokens_processed".into(),
                Json::num(v.prompt_processed as f64),
            ),
            (
                "n_prompt_tokens_cache".into(),
                Json::num(v.prompt_cached as f64),
            ),
            (
                "params".into(),
                settings_json(p, n_predict, false, &Default::default()),
            ),
            (
                "next_token".into(),
                Json::Arr(vec![Json::obj([
                    ("has_next_token", Json::Bool(v.is_processing)),
                    ("n_decoded", Json::num(v.decoded as f64)),
                ])]),
            ),
        ]);
    }
    Json::Obj(m)
}

/// `POST /apply-template`: `{"messages": […]}` to `{"prompt": text}`, the text a chat request
/// with those messages would be given.
fn apply_template(ready: &Ready, body: &[u8]) -> Result<Json, ApiError> {
    let body = Json::parse(body).map_err(ApiError::not_json)?;
    let cx = Context {
        tokenizer: ready.tokenizer,
        template: ready.template.as_ref().map_err(Clone::clone),
        model_names: &ready.names,
        ctx: ready.ctx,
        // The text is the same either way; only its tokenization differs.
        parse_special_in_messages: false,
    };
    let (text, _) = api::chat_prompt(&body, &cx)?;
    Ok(Json::obj([("prompt", Json::Str(text))]))
}

/// `GET /v1/models/{id}`: the one model, under any of its names.
fn model(server: &Server, ready: &Ready, id: &str) -> Result<Json, ApiError> {
    if !ready.names.iter().any(|n| n == id) {
        return Err(ApiError::new(
            404,
            "not_found_error",
            format!("no model {id:?}; this server has {:?}", ready.names),
        ));
    }
    Ok(Json::obj([
        ("id", Json::str(id)),
        (
            "aliases",
            Json::Arr(ready.names.iter().map(|n| Json::str(n.clone())).collect()),
        ),
        ("object", Json::str("model")),
        ("created", Json::num(super::unix_now() as f64)),
        ("owned_by", Json::str("locus")),
        (
            "meta",
            Json::obj([
                ("n_vocab", Json::num(ready.tokenizer.n_vocab() as f64)),
                ("n_ctx", Json::num(ready.ctx as f64)),
                ("n_ctx_train", Json::num(ready.n_ctx_train as f64)),
                ("slots", Json::num(server.opts.slots as f64)),
            ]),
        ),
    ]))
}

/// llama-server's `stop_type`.
fn stop_type(finish: Finish, d: &Detail) -> &'static str {
    match (finish, &d.stopping_word) {
        (Finish::Length, _) => "limit",
        (Finish::Stop, Some(_)) => "word",
        (Finish::Stop, None) => "eos",
    }
}

/// A token's text (up to a partial UTF-8 character at its end, as llama-server cuts it), its
/// bytes, and a log-probability (never -inf: JSON has none, so the least f32, as there).
fn token_entry(ready: &Ready, id: u32, p: f32) -> Vec<(String, Json)> {
    let bytes = ready.tokenizer.token_to_piece(id, false);
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
    };
    let logprob = if p == 0.0 { f32::MIN } else { p.ln() };
    vec![
        ("id".into(), Json::num(id)),
        ("token".into(), Json::str(text)),
        (
            "bytes".into(),
            Json::Arr(bytes.iter().map(|&b| Json::num(b)).collect()),
        ),
        ("logprob".into(), Json::num(logprob)),
    ]
}

/// llama-server's `completion_probabilities`: per token, its log-probability and the
/// likeliest tokens at its place (`top_logprobs`).
fn probs_json(ready: &Ready, probs: &[TokenProbs]) -> Json {
    Json::Arr(
        probs
            .iter()
            .map(|t| {
                let mut e = token_entry(ready, t.id, t.p);
                let top = t
                    .top
                    .iter()
                    .map(|&(id, p)| Json::Obj(token_entry(ready, id, p)))
                    .collect();
                e.push(("top_logprobs".into(), Json::Arr(top)));
                Json::Obj(e)
            })
            .collect(),
    )
}

fn ids(t: &[u32]) -> Json {
    Json::Arr(t.iter().map(|&x| Json::num(x)).collect())
}

/// `POST /completion`: queued for the engine as a chat request is; answered whole, or
/// streamed as llama-server streams it (a `data:` event per piece, the last with
/// `"stop": true` and the whole summary; no `[DONE]`).
fn completion(
    server: &'static Server,
    ready: &Ready,
    req: &http::Request,
    stream: &TcpStream,
    keep: bool,
) -> io::Result<u16> {
    let mut w = stream;
    let o = &server.opts;
    let c = match Completion::read(&req.body, ready.tokenizer, ready.ctx, o.slots, &o.llama) {
        Ok(c) => c,
        Err(e) => return send_error(&mut w, &e, keep).map(|_| e.status),
    };
    let (rx, _submitted) =
        match super::submit(server, c.prompt.clone(), c.params.clone(), c.extra.clone()) {
            Ok(s) => s,
            Err((e, keep_open)) => return send_error(&mut w, &e, keep && keep_open).map(|_| 503),
        };
    // As the OpenAI endpoints wait: the client is checked after each event and meanwhile
    // (a response not yet begun asks a client that sent a FIN whether it left).
    let mut watch = http::PeerWatch::new(req);
    let mut next = |begun: bool| loop {
        let ev = rx.recv_timeout(PEER_CHECK);
        let gone = if begun {
            http::peer_closed(stream)
        } else {
            watch.gone(stream)
        };
        if !matches!(ev, Err(RecvTimeoutError::Disconnected)) && gone {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "client gone",
            ));
        }
        match ev {
            Ok(ev) => return Ok(ev),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Ok(Event::Refused("the engine stopped".into()));
            }
        }
    };
    let n_prompt = c.prompt.len();
    let last = |content: &str, tokens: &[u32], finish: Finish, d: &Detail, probs: &[TokenProbs]| {
        let mut j = vec![
            ("index".to_string(), Json::num(0)),
            ("content".into(), Json::str(content)),
            ("tokens".into(), ids(tokens)),
            ("id_slot".into(), Json::num(d.slot as f64)),
            ("stop".into(), Json::Bool(true)),
            ("model".into(), Json::str(ready.names[0].clone())),
            (
                "tokens_predicted".into(),
                Json::num(d.timings.predicted_n as f64),
            ),
            ("tokens_evaluated".into(), Json::num(n_prompt as f64)),
            (
                "generation_settings".into(),
                settings_json(&c.params, c.n_predict, c.stream, &c.extra),
            ),
            ("has_new_line".into(), Json::Bool(content.contains('\n'))),
            ("truncated".into(), Json::Bool(false)),
            ("stop_type".into(), Json::str(stop_type(finish, d))),
            (
                "stopping_word".into(),
                Json::str(d.stopping_word.clone().unwrap_or_default()),
            ),
            ("tokens_cached".into(), Json::num(d.cached as f64)),
        ];
        j.push(("timings".into(), d.timings.to_json()));
        if !probs.is_empty() {
            j.push(("completion_probabilities".into(), probs_json(ready, probs)));
        }
        Json::Obj(j)
    };
    if !c.stream {
        let (mut text, mut tokens, mut all_probs) = (String::new(), Vec::new(), Vec::new());
        loop {
            match next(false)? {
                Event::Text {
                    text: t,
                    tokens: ids,
                    probs,
                    ..
                } => {
                    text.push_str(&t);
                    tokens.extend(ids);
                    all_probs.extend(probs);
                }
                Event::Done { finish, detail, .. } => {
                    let shown: &[u32] = if c.return_tokens { &tokens } else { &[] };
                    let j = last(&text, shown, finish, &detail, &all_probs);
                    return send_json(&mut w, 200, &j, keep).map(|_| 200);
                }
                Event::Refused(why) => {
                    let e = ApiError::new(503, "unavailable_error", why);
                    return send_error(&mut w, &e, false).map(|_| 503);
                }
            }
        }
    }
    // HTTP/1.0: the stream's end is the connection's close.
    let close = || {
        if req.http10 {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    };
    let mut out = http::Chunked::open(&mut w, "text/event-stream", keep, req.http10)?;
    loop {
        match next(true)? {
            Event::Text {
                text,
                tokens,
                slot,
                timings,
                probs,
            } => {
                let mut j = Json::Obj(vec![
                    ("index".to_string(), Json::num(0)),
                    ("content".into(), Json::Str(text)),
                    ("tokens".into(), ids(&tokens)),
                    ("stop".into(), Json::Bool(false)),
                    ("id_slot".into(), Json::num(slot as f64)),
                    (
                        "tokens_predicted".into(),
                        Json::num(timings.predicted_n as f64),
                    ),
                    ("tokens_evaluated".into(), Json::num(n_prompt as f64)),
                ]);
                if c.timings_per_token {
                    add_timings(&mut j, &timings);
                }
                if let (false, Json::Obj(m)) = (probs.is_empty(), &mut j) {
                    m.push(("completion_probabilities".into(), probs_json(ready, &probs)));
                }
                out.send(&super::out_send(&j))?;
            }
            Event::Done { finish, detail, .. } => {
                out.send(&super::out_send(&last("", &[], finish, &detail, &[])))?;
                out.finish()?;
                close();
                return Ok(200);
            }
            Event::Refused(why) => {
                let e = ApiError::new(503, "unavailable_error", why);
                out.send(format!("data: {}\n\n", e.body()).as_bytes())?;
                out.finish()?;
                close();
                return Ok(503);
            }
        }
    }
}
