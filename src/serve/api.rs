//! The OpenAI-compatible request bodies and responses: reading `/v1/completions` and
//! `/v1/chat/completions` requests into a prompt and [`Params`], and writing the response
//! objects and stream chunks. Every wrong field is an [`ApiError`] naming it.

use super::engine::{Finish, Params, Usage};
use crate::json::Json;
use crate::model::chat::{ChatTemplate, Role};
use crate::model::sampler::SamplerConfig;
use crate::model::tokenizer::Tokenizer;
use std::ops::Range;

/// A request the API refuses: the HTTP status and OpenAI's error object.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    /// The request field at fault, where there is one.
    pub param: Option<String>,
    pub kind: &'static str,
    /// A prompt too long for a slot: its tokens and the slot's (llama-server's
    /// `exceed_context_size_error` carries them as `n_prompt_tokens` and `n_ctx`).
    pub context: Option<(usize, usize)>,
}

impl ApiError {
    pub fn bad(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            param: Some(param.to_string()),
            kind: "invalid_request_error",
            context: None,
        }
    }

    /// llama-server's 400 for a prompt of `n_prompt` tokens that a slot of `n_ctx` cannot hold.
    pub fn exceed_context(message: String, n_prompt: usize, n_ctx: usize) -> ApiError {
        ApiError {
            status: 400,
            message,
            param: None,
            kind: "exceed_context_size_error",
            context: Some((n_prompt, n_ctx)),
        }
    }

    /// A body that is not JSON.
    pub fn not_json(e: crate::json::JsonError) -> ApiError {
        ApiError::new(
            400,
            "invalid_request_error",
            format!("the body is not JSON: {e}"),
        )
    }

    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            param: None,
            kind,
            context: None,
        }
    }

    /// `{"error": {"message", "type", "param", "code"}}`; a context overflow is llama-server's
    /// `{"error": {"code", "message", "type", "n_prompt_tokens", "n_ctx"}}`, which has no
    /// `param` (its errors never name one).
    pub fn body(&self) -> String {
        let mut m = vec![
            ("message".to_string(), Json::str(self.message.clone())),
            ("type".to_string(), Json::str(self.kind)),
        ];
        match self.context {
            None => m.push((
                "param".into(),
                self.param.clone().map_or(Json::Null, Json::Str),
            )),
            Some((n, c)) => m.extend([
                ("n_prompt_tokens".into(), Json::num(n as f64)),
                ("n_ctx".into(), Json::num(c as f64)),
            ]),
        }
        m.push(("code".into(), Json::num(self.status)));
        Json::obj([("error", Json::Obj(m))]).to_string()
    }
}

/// Which endpoint a generation request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Completion,
    Chat,
}

/// A generation request, read and checked.
#[derive(Clone, Debug)]
pub struct Generate {
    pub kind: Kind,
    pub prompt: Vec<u32>,
    pub params: Params,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk carries the usage.
    pub stream_usage: bool,
    /// locus's extension: the response lists the generated token ids (`tokens`).
    pub return_tokens: bool,
    /// llama-server's `timings_per_token`: every stream chunk carries the timings so far.
    pub timings_per_token: bool,
}

/// What the reader needs to know of the server.
pub struct Context<'a> {
    pub tokenizer: &'a Tokenizer,
    /// The chat format, or why there is none.
    pub template: Result<&'a ChatTemplate, String>,
    /// The names a request's `model` may give.
    pub model_names: &'a [String],
    /// Tokens each slot holds.
    pub ctx: usize,
    /// Control tokens written in a chat message's text become those tokens (llama-server's
    /// way; `--parse-special-in-messages`); otherwise only the template writes them.
    pub parse_special_in_messages: bool,
}

pub(super) fn field<'j>(body: &'j Json, name: &str) -> Option<&'j Json> {
    body.get(name).filter(|v| **v != Json::Null)
}

pub(super) fn number(body: &Json, name: &str) -> Result<Option<f64>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(Json::Num(n)) => Ok(Some(*n)),
        Some(v) => Err(ApiError::bad(
            name,
            format!("{name} must be a number, not {}", v.kind()),
        )),
    }
}

pub(super) fn integer(body: &Json, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
    match number(body, name)? {
        None => Ok(None),
        // `hi as f64` may round up (i64::MAX is 2^63 as f64): compare below the next integer.
        Some(n) if n.fract() == 0.0 && n >= lo as f64 && n < hi as f64 + 1.0 => Ok(Some(n as i64)),
        Some(n) => Err(ApiError::bad(
            name,
            format!("{name} must be a whole number from {lo} to {hi}, not {n}"),
        )),
    }
}

pub(super) fn boolean(body: &Json, name: &str) -> Result<bool, ApiError> {
    match field(body, name) {
        None => Ok(false),
        Some(Json::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::bad(
            name,
            format!("{name} must be true or false, not {}", v.kind()),
        )),
    }
}

/// The request fields a completion or chat reads (besides its `prompt` or `messages`).
pub const HONOURED_FIELDS: &[&str] = &[
    "model",
    "n",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "min_p",
    "top_k",
    "repeat_penalty",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "return_tokens",
    "ignore_eos",
    // llama-server's: timings on every stream chunk.
    "timings_per_token",
];

/// OpenAI fields that locus does not do, accepted only at the value that asks for nothing
/// (what their absence means), with that value in words.
fn inert(name: &str, v: &Json) -> Option<(bool, &'static str)> {
    let zero = |v: &Json| matches!(v, Json::Num(n) if *n == 0.0);
    Some(match name {
        "frequency_penalty" | "presence_penalty" => (zero(v), "0"),
        // An end user's name for the provider's abuse tracking: nothing to generate by.
        "user" => (matches!(v, Json::Str(_)), "a string"),
        "logprobs" | "echo" => (*v == Json::Bool(false), "false"),
        "best_of" => (matches!(v, Json::Num(n) if *n == 1.0), "1"),
        "logit_bias" => (matches!(v, Json::Obj(m) if m.is_empty()), "{}"),
        "tools" => (matches!(v, Json::Arr(a) if a.is_empty()), "[]"),
        "tool_choice" => (*v == Json::str("none"), "\"none\""),
        "response_format" => (
            matches!(v, Json::Obj(_))
                && v.get("type") == Some(&Json::str("text"))
                && matches!(v, Json::Obj(m) if m.len() == 1),
            "{\"type\": \"text\"}",
        ),
        _ => return None,
    })
}

/// Every member of a request body is read: a field locus does not honour is refused by name
/// (400), never dropped in silence; `null` is as absent.
fn check_fields(body: &Json, kind: Kind) -> Result<(), ApiError> {
    let Json::Obj(members) = body else {
        return Ok(());
    };
    let own = match kind {
        Kind::Completion => "prompt",
        Kind::Chat => "messages",
    };
    for (name, v) in members {
        if *v == Json::Null || name == own || HONOURED_FIELDS.contains(&name.as_str()) {
            continue;
        }
        return Err(match inert(name, v) {
            Some((true, _)) => continue,
            Some((false, only)) => ApiError::bad(
                name,
                format!("{name} is not supported here (only {only}, as if absent, is taken)"),
            ),
            None => ApiError::bad(name, format!("unknown field {name:?}")),
        });
    }
    Ok(())
}

/// Most stop strings a request may give.
pub const MAX_STOPS: usize = 16;

impl Generate {
    /// Reads a request body of `kind`.
    pub fn read(kind: Kind, body: &[u8], cx: &Context) -> Result<Generate, ApiError> {
        let body = Json::parse(body).map_err(ApiError::not_json)?;
        if !matches!(body, Json::Obj(_)) {
            return Err(ApiError::new(
                400,
                "invalid_request_error",
                "the body must be a JSON object",
            ));
        }
        check_fields(&body, kind)?;
        // Any model name is served by the one model loaded, as llama-server serves it.
        if let Some(m) = field(&body, "model") {
            if !matches!(m, Json::Str(_)) {
                return Err(ApiError::bad("model", "model must be a string"));
            }
        }
        if let Some(n) = integer(&body, "n", 1, 1_000_000)? {
            if n != 1 {
                return Err(ApiError::bad("n", "only n = 1 is served"));
            }
        }
        let (prompt, prompt_field) = match kind {
            Kind::Completion => (completion_prompt(&body, cx.tokenizer)?, "prompt"),
            Kind::Chat => {
                let (text, contents) = chat_prompt(&body, cx)?;
                (
                    cx.tokenizer.encode_text_in(&text, true, &contents),
                    "messages",
                )
            }
        };
        if prompt.is_empty() {
            return Err(ApiError::bad(
                prompt_field,
                "the prompt is empty after tokenization",
            ));
        }
        if prompt.len() >= cx.ctx {
            return Err(ApiError::exceed_context(
                format!(
                    "the prompt is {} tokens and a slot holds {} (-c / -np); shorten it or start the server with a larger -c",
                    prompt.len(),
                    cx.ctx
                ),
                prompt.len(),
                cx.ctx,
            ));
        }
        let max_name = if field(&body, "max_completion_tokens").is_some() {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        let max_tokens = match integer(&body, max_name, -1, i64::MAX)? {
            None | Some(-1) => None,
            Some(0) => {
                return Err(ApiError::bad(
                    max_name,
                    format!("{max_name} must be at least 1"),
                ))
            }
            Some(n) => Some(n as usize),
        };
        if let Some(m) = max_tokens {
            if prompt.len() + m > cx.ctx {
                return Err(ApiError::bad(
                    max_name,
                    format!(
                        "{max_name} may be at most {} here: the prompt takes {} of a slot's {} tokens (-c)",
                        cx.ctx - prompt.len(),
                        prompt.len(),
                        cx.ctx
                    ),
                ));
            }
        }
        let d = SamplerConfig::default();
        let temp = number(&body, "temperature")?.unwrap_or(d.temp as f64);
        if !(0.0..=100.0).contains(&temp) {
            return Err(ApiError::bad(
                "temperature",
                "temperature must be from 0 to 100",
            ));
        }
        let top_p = number(&body, "top_p")?.unwrap_or(d.top_p as f64);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::bad("top_p", "top_p must be in (0, 1]"));
        }
        let min_p = number(&body, "min_p")?.unwrap_or(d.min_p as f64);
        if !(0.0..=1.0).contains(&min_p) {
            return Err(ApiError::bad("min_p", "min_p must be in [0, 1]"));
        }
        let top_k = integer(&body, "top_k", -1, i64::MAX)?.map_or(d.top_k, |k| k.max(0) as usize);
        let repeat_penalty = number(&body, "repeat_penalty")?.unwrap_or(1.0);
        if !(repeat_penalty > 0.0 && repeat_penalty.is_finite()) {
            return Err(ApiError::bad(
                "repeat_penalty",
                "repeat_penalty must be positive (1 = off)",
            ));
        }
        let seed = match integer(&body, "seed", -1, i64::MAX)? {
            None | Some(-1) => crate::model::sampler::random_seed(),
            Some(s) => s as u64,
        };
        let stop = stop_strings(&body)?;
        let stream_usage = match field(&body, "stream_options") {
            None => false,
            Some(o @ Json::Obj(_)) => boolean(o, "include_usage").map_err(|_| {
                ApiError::bad("stream_options", "include_usage must be true or false")
            })?,
            Some(_) => {
                return Err(ApiError::bad(
                    "stream_options",
                    "stream_options must be an object",
                ))
            }
        };
        Ok(Generate {
            kind,
            prompt,
            params: Params {
                sampling: SamplerConfig {
                    temp: temp as f32,
                    top_k,
                    top_p: top_p as f32,
                    min_p: min_p as f32,
                    repeat_penalty: repeat_penalty as f32,
                    seed,
                    ..d
                },
                max_tokens,
                stop,
                ignore_eos: boolean(&body, "ignore_eos")?,
            },
            stream: boolean(&body, "stream")?,
            stream_usage,
            return_tokens: boolean(&body, "return_tokens")?,
            timings_per_token: boolean(&body, "timings_per_token")?,
        })
    }
}

/// `prompt`: a string (or an array of one), or an array of token ids.
fn completion_prompt(body: &Json, tok: &Tokenizer) -> Result<Vec<u32>, ApiError> {
    let text = match field(body, "prompt") {
        None => return Err(ApiError::bad("prompt", "prompt is required")),
        Some(Json::Str(s)) => s,
        Some(Json::Arr(a)) => match &a[..] {
            [Json::Str(s)] => s,
            ids if ids.iter().all(|v| matches!(v, Json::Num(_))) && !ids.is_empty() => {
                return ids
                    .iter()
                    .map(|v| match v {
                        Json::Num(n)
                            if n.fract() == 0.0 && *n >= 0.0 && (*n as usize) < tok.n_vocab() =>
                        {
                            Ok(*n as u32)
                        }
                        _ => Err(ApiError::bad(
                            "prompt",
                            format!("token ids must be whole numbers below {}", tok.n_vocab()),
                        )),
                    })
                    .collect();
            }
            _ => {
                return Err(ApiError::bad(
                    "prompt",
                    "prompt must be a string, an array of one string, or an array of token ids",
                ))
            }
        },
        Some(v) => {
            return Err(ApiError::bad(
                "prompt",
                format!("prompt must be a string, not {}", v.kind()),
            ))
        }
    };
    Ok(tok.encode(text, true, true))
}

/// The chat prompt text of `messages` in the model's format.
/// The prompt text of a chat, and the byte ranges of its message contents that must read as
/// plain text (those that hold a control token's text, unless `parse_special_in_messages`).
pub(super) fn chat_prompt(
    body: &Json,
    cx: &Context,
) -> Result<(String, Vec<Range<usize>>), ApiError> {
    let Some(Json::Arr(msgs)) = field(body, "messages") else {
        return Err(ApiError::bad(
            "messages",
            "messages must be an array of {role, content} objects",
        ));
    };
    let mut turns: Vec<(Role, String)> = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = match m.get("role") {
            Some(Json::Str(r)) => match r.as_str() {
                "system" => Role::System,
                "developer" => Role::Developer,
                "user" => Role::User,
                "assistant" => Role::Assistant,
                r => {
                    return Err(ApiError::bad(
                        &format!("{at}.role"),
                        format!("unknown role {r:?} (system, developer, user, assistant)"),
                    ))
                }
            },
            _ => {
                return Err(ApiError::bad(
                    &format!("{at}.role"),
                    "role must be a string",
                ))
            }
        };
        let content = match m.get("content") {
            Some(Json::Str(s)) => s.clone(),
            // Content parts: only text ones.
            Some(Json::Arr(parts)) => {
                let mut s = String::new();
                for p in parts {
                    match (p.get("type"), p.get("text")) {
                        (Some(Json::Str(t)), Some(Json::Str(x))) if t == "text" => s.push_str(x),
                        _ => {
                            return Err(ApiError::bad(
                                &format!("{at}.content"),
                                "only text content parts are served",
                            ))
                        }
                    }
                }
                s
            }
            _ => {
                return Err(ApiError::bad(
                    &format!("{at}.content"),
                    "content must be a string",
                ))
            }
        };
        turns.push((role, content));
    }
    let template = cx.template.as_ref().map_err(|e| {
        ApiError::new(
            400,
            "invalid_request_error",
            format!("chat is not available: {e}"),
        )
    })?;
    // Assistant prefill: a last assistant message is continued, not closed (llama-server's
    // `prefill_assistant`): the conversation before it, the assistant's turn opened, its text.
    let prefill = match &turns[..] {
        [.., (Role::Assistant, _), (Role::Assistant, _)] => {
            return Err(ApiError::bad(
                "messages",
                "two or more assistant messages cannot end the conversation",
            ))
        }
        [.., (Role::Assistant, _)] => turns.pop().map(|(_, t)| t),
        _ => None,
    };
    let msgs: Vec<(Role, &str)> = turns.iter().map(|(r, t)| (*r, t.as_str())).collect();
    let special = |t: &str| !cx.parse_special_in_messages && cx.tokenizer.mentions_control(t);
    let guard: Vec<bool> = msgs.iter().map(|(_, t)| special(t)).collect();
    let (mut text, mut ranges) = template
        .render_with_contents(&msgs, &guard)
        .map_err(|e| ApiError::bad("messages", e))?;
    // The prefilled text is the assistant's message too: plain text unless asked otherwise.
    if let Some(p) = prefill.filter(|p| !p.is_empty()) {
        if special(&p) {
            ranges.push(text.len()..text.len() + p.len());
        }
        text.push_str(&p);
    }
    Ok((text, ranges))
}

/// The parts of every response object that do not change along a request.
pub struct Envelope<'a> {
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
    pub kind: Kind,
    /// A chat in gpt-oss's harmony format: the `analysis` channel is answered as
    /// `reasoning_content`, the `final` one as `content` ([`crate::model::harmony`]).
    pub harmony: bool,
}

/// `system_fingerprint`: the build that answered (llama-server gives its build info).
pub const FINGERPRINT: &str = concat!("locus-", env!("CARGO_PKG_VERSION"));

/// `stop`: a string or an array of at most [`MAX_STOPS`] strings (OpenAI's and llama-server's).
pub(super) fn stop_strings(body: &Json) -> Result<Vec<String>, ApiError> {
    Ok(match field(body, "stop") {
        None => Vec::new(),
        Some(Json::Str(s)) => vec![s.clone()],
        Some(Json::Arr(a)) if a.len() <= MAX_STOPS => a
            .iter()
            .map(|v| match v {
                Json::Str(s) => Ok(s.clone()),
                v => Err(ApiError::bad(
                    "stop",
                    format!("stop must hold strings, not {}", v.kind()),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(Json::Arr(_)) => {
            return Err(ApiError::bad(
                "stop",
                format!("at most {MAX_STOPS} stop strings"),
            ))
        }
        Some(v) => {
            return Err(ApiError::bad(
                "stop",
                format!(
                    "stop must be a string or an array of strings, not {}",
                    v.kind()
                ),
            ))
        }
    })
}

/// OpenAI's `usage` object.
pub fn usage(u: Usage) -> Json {
    Json::obj([
        ("prompt_tokens", Json::num(u.prompt as f64)),
        ("completion_tokens", Json::num(u.completion as f64)),
        ("total_tokens", Json::num((u.prompt + u.completion) as f64)),
        (
            "prompt_tokens_details",
            Json::obj([("cached_tokens", Json::num(u.cached as f64))]),
        ),
    ])
}

impl Envelope<'_> {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    fn wrap(&self, chunk: bool, choice: Json, usage: Option<Json>) -> Json {
        let mut m = vec![
            ("id".to_string(), Json::str(self.id)),
            ("object".to_string(), Json::str(self.object(chunk))),
            ("created".to_string(), Json::num(self.created as f64)),
            ("model".to_string(), Json::str(self.model)),
            ("choices".to_string(), Json::Arr(vec![choice])),
            ("system_fingerprint".to_string(), Json::str(FINGERPRINT)),
        ];
        if let Some(u) = usage {
            m.push(("usage".to_string(), u));
        }
        Json::Obj(m)
    }

    /// The whole response of a request that did not stream.
    pub fn response(
        &self,
        text: &str,
        finish: Finish,
        usage: Json,
        tokens: Option<&[u32]>,
    ) -> Json {
        let mut choice = match self.kind {
            Kind::Completion => vec![
                ("text".to_string(), Json::str(text)),
                ("index".to_string(), Json::num(0)),
                ("logprobs".to_string(), Json::Null),
            ],
            Kind::Chat => {
                let mut message = vec![("role".to_string(), Json::str("assistant"))];
                if self.harmony {
                    // llama-server's message: `reasoning_content` only when there is some.
                    let split = crate::model::harmony::split(text, false);
                    message.push(("content".to_string(), Json::str(&split.content)));
                    if !split.reasoning.is_empty() {
                        message
                            .push(("reasoning_content".to_string(), Json::str(&split.reasoning)));
                    }
                } else {
                    message.push(("content".to_string(), Json::str(text)));
                }
                vec![
                    ("index".to_string(), Json::num(0)),
                    ("message".to_string(), Json::Obj(message)),
                ]
            }
        };
        choice.push(("finish_reason".to_string(), Json::str(finish.name())));
        if let Some(t) = tokens {
            choice.push(("tokens".to_string(), token_list(t)));
        }
        self.wrap(false, Json::Obj(choice), Some(usage))
    }

    /// The chunk a chat stream opens with, before any text: llama-server's (and OpenAI's)
    /// `{"role": "assistant", "content": null}` delta.
    pub fn role_chunk(&self) -> Json {
        let delta = Json::obj([("role", Json::str("assistant")), ("content", Json::Null)]);
        let choice = Json::obj([
            ("index", Json::num(0)),
            ("delta", delta),
            ("finish_reason", Json::Null),
        ]);
        self.wrap(true, choice, None)
    }

    /// One stream chunk: new text, or (`text` None) the last chunk with `finish`, whose chat
    /// delta is empty.
    pub fn chunk(
        &self,
        text: Option<&str>,
        finish: Option<Finish>,
        tokens: Option<&[u32]>,
    ) -> Json {
        let reason = finish.map_or(Json::Null, |f| Json::str(f.name()));
        let mut choice = match self.kind {
            Kind::Completion => vec![
                ("text".to_string(), Json::str(text.unwrap_or(""))),
                ("index".to_string(), Json::num(0)),
                ("logprobs".to_string(), Json::Null),
            ],
            Kind::Chat => {
                let delta = text.map(|t| ("content".to_string(), Json::str(t)));
                vec![
                    ("index".to_string(), Json::num(0)),
                    ("delta".to_string(), Json::Obj(delta.into_iter().collect())),
                ]
            }
        };
        choice.push(("finish_reason".to_string(), reason));
        if let Some(t) = tokens {
            choice.push(("tokens".to_string(), token_list(t)));
        }
        self.wrap(true, Json::Obj(choice), None)
    }

    /// A harmony chat's stream chunk: what is new in the reasoning and in the content
    /// (llama-server sends each field's delta as it grows; an empty one is left out).
    pub fn harmony_chunk(&self, reasoning: &str, content: &str, tokens: Option<&[u32]>) -> Json {
        let mut delta = Vec::new();
        if !reasoning.is_empty() {
            delta.push(("reasoning_content".to_string(), Json::str(reasoning)));
        }
        if !content.is_empty() {
            delta.push(("content".to_string(), Json::str(content)));
        }
        let mut choice = vec![
            ("index".to_string(), Json::num(0)),
            ("delta".to_string(), Json::Obj(delta)),
            ("finish_reason".to_string(), Json::Null),
        ];
        if let Some(t) = tokens {
            choice.push(("tokens".to_string(), token_list(t)));
        }
        self.wrap(true, Json::Obj(choice), None)
    }

    /// `chunk` with the usage added, as a text-completion stream's last chunk has it.
    pub fn with_usage(&self, mut chunk: Json, usage: Json) -> Json {
        if let Json::Obj(m) = &mut chunk {
            m.push(("usage".to_string(), usage));
        }
        chunk
    }

    /// The usage chunk a chat stream with `include_usage` ends with (no choices).
    pub fn usage_chunk(&self, usage: Json) -> Json {
        let mut j = self.wrap(true, Json::Null, Some(usage));
        if let Json::Obj(m) = &mut j {
            m[4].1 = Json::Arr(Vec::new());
        }
        j
    }
}

fn token_list(t: &[u32]) -> Json {
    Json::Arr(t.iter().map(|&x| Json::num(x)).collect())
}
