//! llama-server's native request bodies: `POST /completion` read into a prompt, [`Params`] and
//! [`JobExtra`], its `generation_settings`, and the server-wide defaults (`-n`, `--temp`,
//! `--seed`) that also fill the OpenAI endpoints' unset fields. Field names, types and defaults
//! are llama-server's (tools/server/README.md); a field locus cannot honour is refused by name.

use super::api::{boolean, field, integer, number, ApiError, Generate};
use super::engine::Params;
use super::llamacpp::JobExtra;
use crate::json::Json;
use crate::model::sampler::{random_seed, SamplerConfig};
use crate::model::tokenizer::Tokenizer;

/// llama-server's flags that set server-wide behaviour (`ServeOptions::llama`).
#[derive(Clone, Debug, Default)]
pub struct LlamaOptions {
    /// `-n/--n-predict`: the tokens a request generates at most when it does not say.
    pub n_predict: Option<usize>,
    /// `--temp`: the default temperature.
    pub temp: Option<f32>,
    /// `-s/--seed`: the default seed (`None`: a random one per request).
    pub seed: Option<u64>,
    /// `--no-slots`: `GET /slots` answers 501.
    pub no_slots: bool,
}

/// The sampler order locus applies (llama-server's `samplers` names).
pub const SAMPLERS: [&str; 5] = ["penalties", "top_k", "top_p", "min_p", "temperature"];

/// Fields llama-server reads that change nothing at these values; any other value is refused.
const NEUTRAL: [(&str, f64); 10] = [
    ("n_indent", 0.0),
    ("typical_p", 1.0),
    ("mirostat", 0.0),
    ("presence_penalty", 0.0),
    ("frequency_penalty", 0.0),
    ("dry_multiplier", 0.0),
    ("xtc_probability", 0.0),
    ("dynatemp_range", 0.0),
    ("top_n_sigma", -1.0),
    ("n_cmpl", 1.0),
];

/// Fields llama-server reads that locus does not serve (yet), whatever their value.
const REFUSED: [&str; 8] = [
    "grammar",
    "json_schema",
    "image_data",
    "multimodal_data",
    "lora",
    "response_fields",
    "t_max_predict_ms",
    "t_max_prompt_ms",
];

/// Fields that are read elsewhere or change nothing in locus (`n_keep` matters only for a
/// context shift, which locus never does; `cache_prompt` and `id_slot` are [`JobExtra`]).
const ACCEPTED: [&str; 24] = [
    "prompt",
    "n_predict",
    "max_tokens",
    "stream",
    "stop",
    "seed",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repeat_penalty",
    "repeat_last_n",
    "cache_prompt",
    "return_tokens",
    "id_slot",
    "logit_bias",
    "ignore_eos",
    "samplers",
    "timings_per_token",
    "n_keep",
    "model",
    "post_sampling_probs",
    "min_keep",
    "n_probs",
];

/// Fields that change nothing because what they tune is off in locus: the settings of the
/// samplers above while those are at their neutral values, of speculative decoding and of
/// context shifting (locus has neither), and the transport's pings. Clients send them with
/// every request.
const INERT: [&str; 20] = [
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "xtc_threshold",
    "mirostat_tau",
    "mirostat_eta",
    "dynatemp_exponent",
    "n_discard",
    "n_cache_reuse",
    "sse_ping_interval",
    "verbose",
    "backend_sampling",
    "stream_options",
    "speculative.n_max",
    "speculative.n_min",
    "speculative.p_min",
    "speculative.type",
    "speculative.ngram_size_n",
    "speculative.ngram_size_m",
];

/// Switches refused when on (what they turn on is not served).
const OFF_ONLY: [&str; 3] = ["return_progress", "echo", "grammar_lazy"];

/// The most alternatives `n_probs` may ask for at each token: every one is a JSON object per
/// generated token, so the whole vocabulary would make a response of gigabytes (OpenAI
/// allows 20 `top_logprobs`).
pub const MAX_N_PROBS: usize = 100;

/// A `/completion` request, read and checked.
#[derive(Clone, Debug)]
pub struct Completion {
    pub prompt: Vec<u32>,
    pub params: Params,
    pub extra: JobExtra,
    pub stream: bool,
    pub return_tokens: bool,
    pub timings_per_token: bool,
    /// `n_predict` as given (-1: until the end of generation or of the context).
    pub n_predict: i64,
}

/// A request whose prompt does not fit a slot: llama-server's 400 with `n_prompt_tokens`
/// and `n_ctx`.
pub fn exceed_context(n_prompt: usize, n_ctx: usize) -> ApiError {
    ApiError::exceed_context(
        format!(
            "request ({n_prompt} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"
        ),
        n_prompt,
        n_ctx,
    )
}

impl Completion {
    /// Reads a `/completion` body for slots of `ctx` tokens (there are `slots` of them).
    pub fn read(
        body: &[u8],
        tok: &Tokenizer,
        ctx: usize,
        slots: usize,
        o: &LlamaOptions,
    ) -> Result<Completion, ApiError> {
        let body = Json::parse(body).map_err(ApiError::not_json)?;
        let Json::Obj(members) = &body else {
            return Err(ApiError::new(
                400,
                "invalid_request_error",
                "the body must be a JSON object",
            ));
        };
        for (k, _) in members {
            let known = ACCEPTED.contains(&k.as_str())
                || NEUTRAL.iter().any(|(n, _)| n == k)
                || REFUSED.contains(&k.as_str())
                || INERT.contains(&k.as_str())
                || OFF_ONLY.contains(&k.as_str());
            if !known {
                return Err(ApiError::bad(k, format!("{k} is not a field locus serves")));
            }
        }
        for name in REFUSED {
            if field(&body, name).is_some() {
                return Err(ApiError::bad(
                    name,
                    format!("{name} is not served by locus"),
                ));
            }
        }
        for name in OFF_ONLY {
            if boolean(&body, name)? {
                return Err(ApiError::bad(
                    name,
                    format!("{name} is not served by locus"),
                ));
            }
        }
        for (name, neutral) in NEUTRAL {
            if let Some(v) = number(&body, name)? {
                if v != neutral {
                    return Err(ApiError::bad(
                        name,
                        format!("{name} is served only at {neutral} (locus does not have it)"),
                    ));
                }
            }
        }
        if let Some(s) = field(&body, "samplers") {
            let names: Option<Vec<&str>> = match s {
                Json::Arr(a) => a
                    .iter()
                    .map(|v| match v {
                        Json::Str(s) => Some(s.as_str()),
                        _ => None,
                    })
                    .collect(),
                _ => None,
            };
            if names.as_deref() != Some(&SAMPLERS[..]) {
                return Err(ApiError::bad(
                    "samplers",
                    format!("samplers: locus applies {SAMPLERS:?} in that order, only"),
                ));
            }
        }
        let prompt = prompt_tokens(&body, tok)?;
        if prompt.is_empty() {
            return Err(ApiError::bad(
                "prompt",
                "the prompt is empty after tokenization",
            ));
        }
        if prompt.len() >= ctx {
            return Err(exceed_context(prompt.len(), ctx));
        }
        let n_name = if field(&body, "n_predict").is_some() {
            "n_predict"
        } else {
            "max_tokens"
        };
        let n_predict = integer(&body, n_name, -1, i64::MAX)?;
        let max_tokens = match n_predict {
            Some(-1) => None,
            Some(0) => {
                return Err(ApiError::bad(
                    n_name,
                    format!("{n_name} 0 (evaluate the prompt only) is not served; -1 = no limit"),
                ))
            }
            Some(n) => Some(n as usize),
            None => o.n_predict,
        };
        let d = SamplerConfig::default();
        let temp = number(&body, "temperature")?.map_or(o.temp.unwrap_or(d.temp), |t| t as f32);
        let top_p = number(&body, "top_p")?.unwrap_or(d.top_p as f64);
        if !(0.0..=1.0).contains(&top_p) {
            return Err(ApiError::bad("top_p", "top_p must be in [0, 1]"));
        }
        let min_p = number(&body, "min_p")?.unwrap_or(d.min_p as f64);
        if !(0.0..=1.0).contains(&min_p) {
            return Err(ApiError::bad("min_p", "min_p must be in [0, 1]"));
        }
        let top_k =
            integer(&body, "top_k", i64::MIN, i64::MAX)?.map_or(d.top_k, |k| k.max(0) as usize);
        let repeat_penalty = number(&body, "repeat_penalty")?.unwrap_or(d.repeat_penalty as f64);
        if !(repeat_penalty > 0.0 && repeat_penalty.is_finite()) {
            return Err(ApiError::bad(
                "repeat_penalty",
                "repeat_penalty must be positive (1 = off)",
            ));
        }
        let repeat_last_n = match integer(&body, "repeat_last_n", -1, i64::MAX)? {
            None => d.repeat_last_n,
            Some(-1) => ctx,
            Some(n) => n as usize,
        };
        let seed = match integer(&body, "seed", -1, u32::MAX as i64)? {
            None => o.seed.unwrap_or_else(random_seed),
            Some(-1) => random_seed(),
            Some(s) => s as u64,
        };
        let id_slot = match integer(&body, "id_slot", -1, i64::MAX)? {
            None | Some(-1) => None,
            Some(i) if (i as usize) < slots => Some(i as usize),
            Some(i) => {
                return Err(ApiError::bad(
                    "id_slot",
                    format!("id_slot {i}: this server has slots 0 to {}", slots - 1),
                ))
            }
        };
        // Probabilities after the samplers (`post_sampling_probs`) are not served.
        if boolean(&body, "post_sampling_probs")? {
            return Err(ApiError::bad(
                "post_sampling_probs",
                "post_sampling_probs is not served: n_probs gives the model's own probabilities",
            ));
        }
        if let Some(Json::Str(_)) | None = field(&body, "model") {
        } else {
            return Err(ApiError::bad("model", "model must be a string"));
        }
        for name in ["n_keep", "min_keep"] {
            integer(&body, name, -1, i64::MAX)?;
        }
        let most = MAX_N_PROBS.min(tok.n_vocab()) as i64;
        let n_probs = integer(&body, "n_probs", 0, most)?.unwrap_or(0) as usize;
        let cache_prompt = match field(&body, "cache_prompt") {
            None => true,
            Some(_) => boolean(&body, "cache_prompt")?,
        };
        Ok(Completion {
            prompt,
            params: Params {
                sampling: SamplerConfig {
                    temp,
                    top_k,
                    top_p: top_p as f32,
                    min_p: min_p as f32,
                    repeat_penalty: repeat_penalty as f32,
                    repeat_last_n,
                    seed,
                },
                max_tokens,
                stop: super::api::stop_strings(&body)?,
                ignore_eos: boolean(&body, "ignore_eos")?,
            },
            extra: JobExtra {
                id_slot,
                cache_prompt,
                logit_bias: logit_bias(&body, tok)?,
                n_probs,
            },
            stream: boolean(&body, "stream")?,
            return_tokens: boolean(&body, "return_tokens")?,
            timings_per_token: boolean(&body, "timings_per_token")?,
            n_predict: max_tokens.map_or(-1, |m| m as i64),
        })
    }
}

fn token_id(v: &Json, tok: &Tokenizer, name: &str) -> Result<u32, ApiError> {
    match v {
        Json::Num(n) if n.fract() == 0.0 && *n >= 0.0 && (*n as usize) < tok.n_vocab() => {
            Ok(*n as u32)
        }
        _ => Err(ApiError::bad(
            name,
            format!("token ids must be whole numbers below {}", tok.n_vocab()),
        )),
    }
}

/// `prompt`: a string, or an array mixing strings and token ids (llama-server's
/// `tokenize_mixed`: the first piece gets the model's BOS where a string does), or an
/// array of one such array. Several prompts in one request are refused.
fn prompt_tokens(body: &Json, tok: &Tokenizer) -> Result<Vec<u32>, ApiError> {
    let items = match field(body, "prompt") {
        None => return Err(ApiError::bad("prompt", "prompt is required")),
        Some(Json::Str(s)) => return Ok(tok.encode(s, true, true)),
        Some(Json::Arr(a)) => match &a[..] {
            [Json::Arr(inner)] => inner,
            a if a.iter().any(|v| matches!(v, Json::Arr(_))) => {
                return Err(ApiError::bad(
                    "prompt",
                    "several prompts in one request are not served; send one request each",
                ))
            }
            a => a,
        },
        Some(v) => {
            return Err(ApiError::bad(
                "prompt",
                format!(
                    "prompt must be a string or an array of strings and token ids, not {}",
                    v.kind()
                ),
            ))
        }
    };
    if items.len() > 1 && items.iter().all(|v| matches!(v, Json::Str(_))) {
        return Err(ApiError::bad(
            "prompt",
            "several prompts in one request are not served; send one request each",
        ));
    }
    let mut out = Vec::new();
    for (i, v) in items.iter().enumerate() {
        match v {
            Json::Str(s) => out.extend(tok.encode(s, i == 0, true)),
            v => out.push(token_id(v, tok, "prompt")?),
        }
    }
    Ok(out)
}

/// `logit_bias`: `[[token, bias], …]` or `{"token": bias}`, a token given by id or as text
/// (each of its tokens biased), a bias of `false` banning the token (llama-server's forms).
fn logit_bias(body: &Json, tok: &Tokenizer) -> Result<Vec<(u32, f32)>, ApiError> {
    const NAME: &str = "logit_bias";
    // An object's keys are text: one that reads as a number is a token id.
    let pairs: Vec<(Json, &Json)> = match field(body, NAME) {
        None => return Ok(Vec::new()),
        Some(Json::Arr(a)) => a
            .iter()
            .map(|p| match p {
                Json::Arr(kv) if kv.len() == 2 => Ok((kv[0].clone(), &kv[1])),
                _ => Err(ApiError::bad(NAME, "logit_bias pairs are [token, bias]")),
            })
            .collect::<Result<_, _>>()?,
        Some(Json::Obj(m)) => m.iter().map(|(k, v)| (Json::Str(k.clone()), v)).collect(),
        Some(v) => {
            return Err(ApiError::bad(
                NAME,
                format!("logit_bias must be an array or an object, not {}", v.kind()),
            ))
        }
    };
    let mut out = Vec::new();
    for (k, v) in pairs {
        let bias = match v {
            Json::Num(b) if b.is_finite() => *b as f32,
            Json::Bool(false) => f32::NEG_INFINITY,
            _ => {
                return Err(ApiError::bad(
                    NAME,
                    "a bias is a number, or false to ban the token",
                ))
            }
        };
        let ids = match k {
            Json::Str(s) => match s.parse::<f64>() {
                Ok(n) => vec![token_id(&Json::Num(n), tok, NAME)?],
                Err(_) => tok.encode(&s, false, false),
            },
            v => vec![token_id(&v, tok, NAME)?],
        };
        out.extend(ids.into_iter().map(|t| (t, bias)));
    }
    Ok(out)
}

/// `generation_settings` (and `/props`' and `/slots`' `params`): llama-server's names, with
/// the neutral values of the samplers locus does not have.
pub fn settings_json(p: &Params, n_predict: i64, stream: bool, extra: &JobExtra) -> Json {
    let s = &p.sampling;
    let mut m: Vec<(String, Json)> = vec![
        ("seed".into(), Json::num(s.seed as f64)),
        ("temperature".into(), Json::num(s.temp)),
        ("top_k".into(), Json::num(s.top_k as f64)),
        ("top_p".into(), Json::num(s.top_p)),
        ("min_p".into(), Json::num(s.min_p)),
        ("repeat_last_n".into(), Json::num(s.repeat_last_n as f64)),
        ("repeat_penalty".into(), Json::num(s.repeat_penalty)),
    ];
    for (name, v) in NEUTRAL {
        if name != "n_cmpl" {
            m.push((name.into(), Json::num(v)));
        }
    }
    m.push(("n_probs".into(), Json::num(extra.n_probs as f64)));
    m.extend([
        (
            "stop".to_string(),
            Json::Arr(p.stop.iter().map(|s| Json::str(s.clone())).collect()),
        ),
        ("max_tokens".into(), Json::num(n_predict as f64)),
        ("n_predict".into(), Json::num(n_predict as f64)),
        ("n_keep".into(), Json::num(0)),
        ("ignore_eos".into(), Json::Bool(p.ignore_eos)),
        ("stream".into(), Json::Bool(stream)),
        (
            "logit_bias".into(),
            Json::Arr(
                extra
                    .logit_bias
                    .iter()
                    .map(|&(t, b)| {
                        let b = if b.is_finite() {
                            Json::num(b)
                        } else {
                            Json::Bool(false)
                        };
                        Json::Arr(vec![Json::num(t), b])
                    })
                    .collect(),
            ),
        ),
        (
            "samplers".into(),
            Json::Arr(SAMPLERS.iter().map(|s| Json::str(*s)).collect()),
        ),
    ]);
    Json::Obj(m)
}

/// The server's defaults (`-n`, `--temp`, `--seed`) for an OpenAI request's unset fields.
pub fn apply_defaults(g: &mut Generate, body: &[u8], o: &LlamaOptions) {
    let Ok(body) = Json::parse(body) else {
        return;
    };
    if field(&body, "max_tokens").is_none() && field(&body, "max_completion_tokens").is_none() {
        if let Some(n) = o.n_predict {
            g.params.max_tokens = Some(n);
        }
    }
    if field(&body, "temperature").is_none() {
        if let Some(t) = o.temp {
            g.params.sampling.temp = t;
        }
    }
    if field(&body, "seed").is_none() {
        if let Some(s) = o.seed {
            g.params.sampling.seed = s;
        }
    }
}
