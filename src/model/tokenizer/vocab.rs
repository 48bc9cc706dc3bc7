//! The vocabulary as llama.cpp loads it: token texts, scores and attributes, the special token
//! ids, the tokenizer flags, and the end-of-generation set.
//!
//! llama.cpp does more at load time than read keys: it fills defaults per tokenizer type,
//! finds EOT/EOM/FIM tokens by their text, marks "control-looking" tokens as control, and
//! builds the end-of-generation set from a list of known texts. Which tokens count as control
//! changes both tokenization (control tokens are only matched with `parse_special`) and
//! rendering (control tokens render empty unless asked), so this module repeats those rules.

use crate::model::gguf::{Gguf, Value};
use crate::model::ModelError;

use super::hash::FastMap;
use super::pretok::PreSplit;

/// Token attributes, as llama.cpp's `llama_token_attr` bit set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr(u16);

impl Attr {
    pub const UNDEFINED: Attr = Attr(0);
    pub const UNKNOWN: Attr = Attr(1 << 0);
    pub const UNUSED: Attr = Attr(1 << 1);
    pub const NORMAL: Attr = Attr(1 << 2);
    pub const CONTROL: Attr = Attr(1 << 3);
    pub const USER_DEFINED: Attr = Attr(1 << 4);
    pub const BYTE: Attr = Attr(1 << 5);
    pub const LSTRIP: Attr = Attr(1 << 7);
    pub const RSTRIP: Attr = Attr(1 << 8);

    /// Both sets of bits.
    pub const fn or(self, other: Attr) -> Attr {
        Attr(self.0 | other.0)
    }

    /// Whether any bit of `other` is set.
    pub fn has(self, other: Attr) -> bool {
        self.0 & other.0 != 0
    }

    fn with(self, other: Attr, on: bool) -> Attr {
        if on {
            Attr(self.0 | other.0)
        } else {
            Attr(self.0 & !other.0)
        }
    }

    /// The attribute of a GGUF `token_type` value.
    fn from_token_type(t: i64) -> Attr {
        match t {
            TOKEN_TYPE_NORMAL => Attr::NORMAL,
            TOKEN_TYPE_UNKNOWN => Attr::UNKNOWN,
            TOKEN_TYPE_CONTROL => Attr::CONTROL,
            TOKEN_TYPE_USER_DEFINED => Attr::USER_DEFINED,
            TOKEN_TYPE_UNUSED => Attr::UNUSED,
            TOKEN_TYPE_BYTE => Attr::BYTE,
            _ => Attr::UNDEFINED,
        }
    }
}

// GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
const TOKEN_TYPE_NORMAL: i64 = 1;
const TOKEN_TYPE_UNKNOWN: i64 = 2;
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;
const TOKEN_TYPE_UNUSED: i64 = 5;
const TOKEN_TYPE_BYTE: i64 = 6;

// llama.cpp's default special ids when the metadata names none (GPT-2's "<|endoftext|>" is 11
// in Falcon's vocabulary; SentencePiece's <unk>, <s>, </s> are 0, 1, 2).
const BPE_DEFAULT_BOS: u32 = 11;
const BPE_DEFAULT_EOS: u32 = 11;
const SPM_DEFAULT_UNK: u32 = 0;
const SPM_DEFAULT_BOS: u32 = 1;
const SPM_DEFAULT_EOS: u32 = 2;

/// Which tokenization algorithm the vocabulary uses (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `gpt2`: byte-level BPE with merges.
    Bpe,
    /// `llama`: SentencePiece, merging by score, with byte fallback.
    Spm,
}

/// Ids of the special tokens llama.cpp tracks; `None` where the model has none.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// Selects one field of [`SpecialIds`].
type IdField = fn(&mut SpecialIds) -> &mut Option<u32>;

/// Tokenizer switches, defaulted per type and pre-tokenizer, then overridden by metadata.
#[derive(Clone, Copy, Debug)]
pub struct Flags {
    pub add_bos: bool,
    pub add_eos: bool,
    /// SPM: prefix text after BOS or a special token with a space. Detokenize: strip one
    /// leading space from the first piece.
    pub add_space_prefix: bool,
    /// Detokenize: llama.cpp's `clean_up_tokenization_spaces` passes.
    pub clean_spaces: bool,
    /// BPE: look a whole pre-tokenized word up before merging (Llama 3).
    pub ignore_merges: bool,
}

/// A loaded vocabulary.
pub struct Vocab {
    pub kind: Kind,
    /// Texts of all tokens, concatenated; token `i` is `text_buf[text_end[i-1]..text_end[i]]`.
    text_buf: Vec<u8>,
    text_end: Vec<usize>,
    pub scores: Vec<f32>,
    pub attrs: Vec<Attr>,
    pub text_to_id: FastMap<Box<[u8]>, u32>,
    /// Length of the longest token text: longer strings need no lookup.
    pub max_token_len: usize,
    pub ids: SpecialIds,
    pub flags: Flags,
    pub pre: PreSplit,
    /// End-of-generation tokens, sorted.
    pub eog: Vec<u32>,
    pub chat_template: Option<String>,
}

/// Texts llama.cpp takes for an end-of-turn token when `eot_token_id` is absent.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Texts llama.cpp adds to the end-of-generation set.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
/// gpt-oss tokens llama.cpp always renders (forced to user-defined).
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// The pre-tokenizer and flag overrides for each supported `tokenizer.ggml.pre` value.
struct PreConfig {
    split: PreSplit,
    clean_spaces: bool,
    ignore_merges: bool,
    add_bos: bool,
    /// Whether the BPE default BOS id is dropped (GLM: only the file's own id counts).
    drop_default_bos: bool,
}

fn pre_config(name: &str) -> Option<PreConfig> {
    let cfg = |split, clean_spaces, ignore_merges, add_bos| PreConfig {
        split,
        clean_spaces,
        ignore_merges,
        add_bos,
        drop_default_bos: false,
    };
    // GLM-4 and later name no BOS token: llama.cpp's default id is dropped for them.
    let glm = |ignore_merges| PreConfig {
        drop_default_bos: true,
        ..cfg(PreSplit::Llama3, true, ignore_merges, false)
    };
    Some(match name {
        "default" => cfg(PreSplit::Default, true, false, false),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => cfg(PreSplit::Llama3, true, true, true),
        "dbrx" | "smaug-bpe" => cfg(PreSplit::Llama3, true, false, false),
        "smollm" | "command-r" => cfg(PreSplit::SmolLm, false, false, false),
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" => {
            cfg(PreSplit::SmolLm, true, false, false)
        }
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais" | "exaone4" => {
            cfg(PreSplit::Gpt2, true, false, false)
        }
        "trillion" | "granite-docling" => cfg(PreSplit::Gpt2, false, false, false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" => {
            cfg(PreSplit::Qwen2, false, false, false)
        }
        "megrez" | "stablelm2" => cfg(PreSplit::Qwen2, true, false, false),
        "deepseek-llm" => cfg(PreSplit::DeepSeekLlm, false, false, false),
        "deepseek-coder" => cfg(PreSplit::DeepSeekCoder, false, false, false),
        "deepseek-v3" | "hunyuan-dense" | "hy_v4" | "joyai-llm" => {
            cfg(PreSplit::DeepSeek3, false, false, false)
        }
        "kimi-k2" => cfg(PreSplit::KimiK2, false, false, false),
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => {
            cfg(PreSplit::Gpt4o, false, false, false)
        }
        "granite-embed-multi-97m" => cfg(PreSplit::Gpt4oMarks, false, true, false),
        "chatglm-bpe" => glm(false),
        "glm4" | "glm5" => glm(true),
        _ => return None,
    })
}

fn tok_err(msg: impl Into<String>) -> ModelError {
    ModelError::Tokenizer(msg.into())
}

fn bad_key(key: &str, why: &str) -> ModelError {
    ModelError::BadKey {
        key: key.to_string(),
        why: why.to_string(),
    }
}

impl Vocab {
    /// Text of token `id` as stored in the model.
    pub fn text(&self, id: u32) -> &[u8] {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.text_end[i - 1] };
        &self.text_buf[start..self.text_end[i]]
    }

    pub fn n_tokens(&self) -> usize {
        self.text_end.len()
    }

    pub fn attr(&self, id: u32) -> Attr {
        self.attrs
            .get(id as usize)
            .copied()
            .unwrap_or(Attr::UNDEFINED)
    }

    pub fn token_id(&self, text: &[u8]) -> Option<u32> {
        if text.len() > self.max_token_len {
            return None;
        }
        self.text_to_id.get(text).copied()
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// Loads the vocabulary from GGUF metadata, applying llama.cpp's load-time rules.
    pub fn from_gguf(g: &Gguf) -> Result<Vocab, ModelError> {
        let model_key = "tokenizer.ggml.model";
        let model = g
            .get(model_key)
            .ok_or_else(|| ModelError::MissingKey(model_key.into()))?;
        let model = model
            .as_str()
            .ok_or_else(|| bad_key(model_key, "is not a string"))?;
        let pre_name = g
            .get("tokenizer.ggml.pre")
            .and_then(Value::as_str)
            .unwrap_or("");

        // Defaults per type, as llama.cpp's `llama_vocab::impl::load`.
        let (kind, mut ids) = match model {
            "gpt2" => (
                Kind::Bpe,
                SpecialIds { bos: Some(BPE_DEFAULT_BOS), eos: Some(BPE_DEFAULT_EOS), ..SpecialIds::default() },
            ),
            "llama" => (
                Kind::Spm,
                SpecialIds {
                    bos: Some(SPM_DEFAULT_BOS),
                    eos: Some(SPM_DEFAULT_EOS),
                    unk: Some(SPM_DEFAULT_UNK),
                    ..SpecialIds::default()
                },
            ),
            other => {
                return Err(tok_err(format!(
                    "tokenizer.ggml.model = '{other}' is not supported (locus reads 'gpt2' and 'llama')"
                )))
            }
        };
        let (mut flags, pre) = match kind {
            Kind::Bpe => {
                let cfg = pre_config(pre_name).unwrap_or_else(|| {
                    let shown = if pre_name.is_empty() { "(missing)" } else { pre_name };
                    crate::diagln!(
                        "warning: tokenizer.ggml.pre = '{shown}' is not known to locus; using the 'default' pre-tokenizer"
                    );
                    pre_config("default").expect("the default pre-tokenizer is always known")
                });
                if cfg.drop_default_bos {
                    ids.bos = None;
                }
                let flags = Flags {
                    add_bos: cfg.add_bos,
                    add_eos: false,
                    add_space_prefix: false,
                    clean_spaces: cfg.clean_spaces,
                    ignore_merges: cfg.ignore_merges,
                };
                (flags, cfg.split)
            }
            Kind::Spm => {
                let flags = Flags {
                    add_bos: true,
                    add_eos: false,
                    add_space_prefix: true,
                    clean_spaces: false,
                    ignore_merges: false,
                };
                (flags, PreSplit::Default)
            }
        };
        if let Some(v) = g
            .get("tokenizer.ggml.add_space_prefix")
            .and_then(Value::as_bool)
        {
            flags.add_space_prefix = v;
        }

        let tokens_key = "tokenizer.ggml.tokens";
        let tokens = g
            .get(tokens_key)
            .ok_or_else(|| ModelError::MissingKey(tokens_key.into()))?
            .as_array()
            .and_then(|a| a.as_strings())
            .ok_or_else(|| bad_key(tokens_key, "is not an array of strings"))?;
        let n = tokens.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(bad_key(
                tokens_key,
                "must hold between 1 and 2^32 - 1 tokens",
            ));
        }
        let scores = read_scores(g, n)?;
        let types = read_token_types(g, n)?;

        let mut text_buf = Vec::with_capacity(tokens.iter().map(|t| t.len()).sum());
        let mut text_end = Vec::with_capacity(n);
        let mut text_to_id: FastMap<Box<[u8]>, u32> = FastMap::default();
        text_to_id.reserve(n);
        for (i, t) in tokens.iter().enumerate() {
            if t.is_empty() {
                // llama.cpp renames empty tokens so that every text is unique and non-empty.
                text_buf.extend_from_slice(format!("[EMPTY_{i}]").as_bytes());
            } else {
                text_buf.extend_from_slice(t);
            }
            let start = text_end.last().copied().unwrap_or(0);
            text_end.push(text_buf.len());
            let text: Box<[u8]> = text_buf[start..].into();
            if let Some(prev) = text_to_id.insert(text, i as u32) {
                return Err(tok_err(format!(
                    "tokens {prev} and {i} have the same text {:?}; llama.cpp refuses such vocabularies too",
                    String::from_utf8_lossy(&text_buf[start..])
                )));
            }
        }
        let max_token_len = (0..n)
            .map(|i| text_end[i] - if i == 0 { 0 } else { text_end[i - 1] })
            .max()
            .unwrap_or(0);
        let attrs = types.map_or_else(
            || vec![Attr::NORMAL; n],
            |t| t.into_iter().map(Attr::from_token_type).collect(),
        );

        let mut vocab = Vocab {
            kind,
            text_buf,
            text_end,
            scores,
            attrs,
            max_token_len,
            text_to_id,
            ids: SpecialIds::default(),
            flags,
            pre,
            eog: Vec::new(),
            chat_template: g
                .get(super::CHAT_TEMPLATE_KEY)
                .and_then(Value::as_str)
                .map(str::to_string),
        };

        read_special_ids(g, &mut ids, n);
        read_bool_flags(g, &mut vocab.flags);
        vocab.ids = ids;
        vocab.detect_special_by_text();
        vocab.build_eog();
        vocab.apply_name_rules(g);
        Ok(vocab)
    }

    /// Finds EOT/EOM/FIM tokens by text where the metadata names none, marking them control.
    fn detect_special_by_text(&mut self) {
        let lists: [(IdField, &[&str]); 8] = [
            (|s| &mut s.eot, EOT_TEXTS),
            (|s| &mut s.eom, EOM_TEXTS),
            (|s| &mut s.fim_pre, FIM_PRE_TEXTS),
            (|s| &mut s.fim_suf, FIM_SUF_TEXTS),
            (|s| &mut s.fim_mid, FIM_MID_TEXTS),
            (|s| &mut s.fim_pad, FIM_PAD_TEXTS),
            (|s| &mut s.fim_rep, FIM_REP_TEXTS),
            (|s| &mut s.fim_sep, FIM_SEP_TEXTS),
        ];
        for (field, texts) in lists {
            if field(&mut self.ids).is_some() {
                continue;
            }
            // llama.cpp walks an unordered map and keeps the first hit, so with several
            // candidates its choice is unspecified; the lowest id is ours. All candidates of
            // the EOT list are end-of-generation tokens anyway.
            let found = texts
                .iter()
                .filter_map(|t| self.token_id(t.as_bytes()))
                .min();
            if let Some(id) = found {
                *field(&mut self.ids) = Some(id);
                self.mark_control(id);
            }
        }
        // Control tokens whose text says "unused" are unused.
        for i in 0..self.n_tokens() {
            if self.attrs[i].has(Attr::CONTROL) && contains(self.text(i as u32), b"unused") {
                self.attrs[i] = self.attrs[i].with(Attr::UNUSED, true);
            }
        }
    }

    fn mark_control(&mut self, id: u32) {
        let a = &mut self.attrs[id as usize];
        *a = a.with(Attr::CONTROL, true);
    }

    /// The end-of-generation set, as llama.cpp builds it.
    fn build_eog(&mut self) {
        let mut eog: Vec<u32> = [self.ids.fim_pad, self.ids.fim_rep, self.ids.fim_sep]
            .into_iter()
            .flatten()
            .collect();
        for t in EOG_TEXTS {
            if let Some(id) = self.token_id(t.as_bytes()) {
                eog.push(id);
                self.mark_control(id);
            }
        }
        for t in ALWAYS_RENDERED {
            if let Some(id) = self.token_id(t.as_bytes()) {
                self.attrs[id as usize] = Attr::USER_DEFINED;
            }
        }
        eog.extend(
            [self.ids.eos, self.ids.eot, self.ids.eom]
                .into_iter()
                .flatten(),
        );
        eog.sort_unstable();
        eog.dedup();

        // o200k_harmony / solar-open: "<|end|>" is not the end when "<|return|>"/"<|call|>"
        // (or "<|calls|>"/"<|flush|>") exist.
        let in_eog =
            |v: &Vocab, e: &[u32], t: &str| v.token_id(t.as_bytes()).filter(|id| e.contains(id));
        let has = |v: &Vocab, e: &[u32], t: &str| in_eog(v, e, t).is_some();
        if let Some(end) = in_eog(self, &eog, "<|end|>") {
            let call = has(self, &eog, "<|call|>") || has(self, &eog, "<|calls|>");
            if call && (has(self, &eog, "<|return|>") || has(self, &eog, "<|flush|>")) {
                eog.retain(|&id| id != end);
                self.attrs[end as usize] = Attr::USER_DEFINED;
            }
        }
        // Gemma 4 and PLaMo have an ordinary "</s>".
        if let Some(s) = in_eog(self, &eog, "</s>") {
            if has(self, &eog, "<|tool_response>") || has(self, &eog, "<|plamo:eos|>") {
                eog.retain(|&id| id != s);
                self.attrs[s as usize] = Attr::NORMAL;
            }
        }
        self.eog = eog;
    }

    /// llama.cpp's per-model lstrip/rstrip attributes, chosen by model name and architecture.
    fn apply_name_rules(&mut self, g: &Gguf) {
        let name = g
            .get("general.name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_lowercase();
        let pre = g
            .get("tokenizer.ggml.pre")
            .and_then(Value::as_str)
            .unwrap_or("");
        let arch = g
            .get("general.architecture")
            .and_then(Value::as_str)
            .unwrap_or("");
        let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
        let set = |v: &mut Vocab, text: &str, attr: Attr, on: bool| {
            if let Some(id) = v.token_id(text.as_bytes()) {
                v.attrs[id as usize] = v.attrs[id as usize].with(attr, on);
            }
        };
        if any(pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"])
            || any(arch, &["nomic-bert-moe", "jina-bert-v3"])
        {
            set(self, "<mask>", Attr::LSTRIP, true);
        } else if any(&name, &["phi-3", "phi3"]) {
            let special = Attr::CONTROL.or(Attr::USER_DEFINED).or(Attr::UNKNOWN);
            for a in self.attrs.iter_mut().filter(|a| a.has(special)) {
                *a = a.with(Attr::RSTRIP, true);
            }
            set(self, "</s>", Attr::RSTRIP, true);
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                set(self, t, Attr::RSTRIP, false);
            }
        } else if any(&name, &["modern-bert"]) {
            set(self, "[MASK]", Attr::LSTRIP, true);
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn read_scores(g: &Gguf, n: usize) -> Result<Vec<f32>, ModelError> {
    let key = "tokenizer.ggml.scores";
    let Some(v) = g.get(key) else {
        return Ok(vec![0.0; n]);
    };
    let arr = v
        .as_array()
        .ok_or_else(|| bad_key(key, "is not an array"))?;
    let scores = match arr.as_f32s() {
        Some(s) => s,
        None => arr
            .as_i64s()
            .ok_or_else(|| bad_key(key, "is not an array of numbers"))?
            .into_iter()
            .map(|s| s as f32)
            .collect(),
    };
    if scores.len() < n {
        return Err(bad_key(
            key,
            &format!("has {} entries for {n} tokens", scores.len()),
        ));
    }
    Ok(scores)
}

fn read_token_types(g: &Gguf, n: usize) -> Result<Option<Vec<i64>>, ModelError> {
    let key = "tokenizer.ggml.token_type";
    let Some(v) = g.get(key) else { return Ok(None) };
    let types = v
        .as_array()
        .and_then(|a| a.as_i64s())
        .ok_or_else(|| bad_key(key, "is not an integer array"))?;
    if types.len() < n {
        return Err(bad_key(
            key,
            &format!("has {} entries for {n} tokens", types.len()),
        ));
    }
    Ok(Some(types))
}

/// Reads the special token ids; defaults out of range are disabled, ids out of range in the
/// file are ignored (keeping the default), as llama.cpp does.
fn read_special_ids(g: &Gguf, ids: &mut SpecialIds, n: usize) {
    let keys: [(&str, IdField); 17] = [
        ("tokenizer.ggml.bos_token_id", |s| &mut s.bos),
        ("tokenizer.ggml.eos_token_id", |s| &mut s.eos),
        ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
        ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
        ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
        ("tokenizer.ggml.seperator_token_id", |s| &mut s.sep),
        ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
        ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
        ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
        ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
        ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
        ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
        ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
        ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
        ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
        ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
        ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
    ];
    for (key, field) in keys {
        let slot = field(ids);
        if slot.is_some_and(|id| id as usize >= n) {
            *slot = None;
        }
        let Some(v) = g.get(key).and_then(Value::as_i64) else {
            continue;
        };
        match u32::try_from(v) {
            Ok(id) if (id as usize) < n => *slot = Some(id),
            _ => crate::diagln!(
                "warning: {key} = {v} is outside the vocabulary of {n} tokens; ignored"
            ),
        }
    }
}

fn read_bool_flags(g: &Gguf, flags: &mut Flags) {
    if let Some(v) = g
        .get("tokenizer.ggml.add_bos_token")
        .and_then(Value::as_bool)
    {
        flags.add_bos = v;
    }
    if let Some(v) = g
        .get("tokenizer.ggml.add_eos_token")
        .and_then(Value::as_bool)
    {
        flags.add_eos = v;
    }
}
