//! Tokenizer: text ↔ token ids, with ids equal to llama.cpp's.
//!
//! Supported vocabularies: byte-level BPE (`tokenizer.ggml.model = gpt2`, e.g. SmolLM2,
//! Llama 3, Qwen 2, DeepSeek V2/V3, Kimi-K2, GLM-4) and SentencePiece (`llama`, e.g. Gemma 3). Encoding runs in three stages,
//! each in its own module:
//! 1. `special`: special tokens found in the text are cut out (llama.cpp's
//!    `tokenizer_st_partition`);
//! 2. each remaining piece of raw text is split into words by the pre-tokenizer (`pretok`,
//!    BPE only; the Unicode classes come from `unicode`);
//! 3. words are merged into tokens (`bpe`, or `spm` for SentencePiece).
//!
//! `vocab` loads the vocabulary and llama.cpp's load-time rules; `decode` turns tokens back
//! into bytes.

mod bpe;
mod decode;
mod hash;
mod pretok;
mod special;
mod spm;
mod unicode;
mod unicode_tables;
mod vocab;

pub use decode::Utf8Stream;
pub use unicode_tables::UNICODE_VERSION;

/// The metadata key of the model's chat template (a Jinja text).
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

use crate::model::gguf::Gguf;
use crate::model::ModelError;

use decode::{Pieces, SPM_SPACE};
use pretok::PreSplit;
use special::{Fragment, SpecialMatcher};
use vocab::{Kind, Vocab};

/// The algorithm and its tables (boxed: both hold 256-entry byte tables).
enum Model {
    Bpe(Box<bpe::Bpe>),
    Spm(Box<spm::Spm>),
}

/// A tokenizer built from a model's GGUF metadata. Immutable and shareable across threads.
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    special: SpecialMatcher,
    pieces: Pieces,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.vocab.kind)
            .field("pre", &self.vocab.pre)
            .field("n_vocab", &self.vocab.n_tokens())
            .finish()
    }
}

impl Tokenizer {
    /// Builds the tokenizer from GGUF metadata (`tokenizer.ggml.*`, `tokenizer.chat_template`).
    /// An unknown `tokenizer.ggml.pre` falls back to llama.cpp's default pre-tokenizer with a
    /// warning on stderr.
    pub fn from_gguf(g: &Gguf) -> Result<Tokenizer, ModelError> {
        let vocab = Vocab::from_gguf(g)?;
        let model = match vocab.kind {
            Kind::Bpe => {
                let key = "tokenizer.ggml.merges";
                let merges = match g.get(key) {
                    Some(v) => v.as_array().and_then(|a| a.as_strings()).ok_or_else(|| {
                        ModelError::BadKey {
                            key: key.into(),
                            why: "is not an array of strings".into(),
                        }
                    })?,
                    // Kimi-K2 files may carry no merges (its tokenizer is tiktoken's); llama.cpp
                    // then merges nothing, so every byte is a token of its own.
                    None if vocab.pre == PreSplit::KimiK2 => &[],
                    None => return Err(ModelError::MissingKey(key.into())),
                };
                Model::Bpe(Box::new(bpe::Bpe::new(&vocab, merges)))
            }
            Kind::Spm => Model::Spm(Box::new(spm::Spm::new(&vocab))),
        };
        let special = SpecialMatcher::new(&vocab);
        let pieces = Pieces::new(&vocab);
        Ok(Tokenizer {
            vocab,
            model,
            special,
            pieces,
        })
    }

    /// Tokenizes `text` as llama.cpp's `llama_tokenize(text, add_special, parse_special)`:
    /// `add_special` adds BOS/EOS as the model's `add_bos_token`/`add_eos_token` say;
    /// `parse_special` lets control tokens written in the text (e.g. `<|im_start|>`) become
    /// those tokens. User-defined tokens are always matched.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        self.encode_bytes(text.as_bytes(), add_special, parse_special)
    }

    /// [`Tokenizer::encode`] for text that may not be valid UTF-8 (invalid bytes are treated
    /// as llama.cpp treats them: U+FFFD, one per byte).
    pub fn encode_bytes(&self, text: &[u8], add_special: bool, parse_special: bool) -> Vec<u32> {
        self.encode_guarded(text, add_special, parse_special, &[])
    }

    /// [`Tokenizer::encode`] with `parse_special`, except in the byte ranges `text_only` (a
    /// chat's message contents): a control token's text there stays text, so only the
    /// template around them writes control tokens.
    pub fn encode_text_in(
        &self,
        text: &str,
        add_special: bool,
        text_only: &[std::ops::Range<usize>],
    ) -> Vec<u32> {
        self.encode_guarded(text.as_bytes(), add_special, true, text_only)
    }

    /// Whether `text` holds a control token's text ([`Tokenizer::encode_text_in`] guards it).
    pub fn mentions_control(&self, text: &str) -> bool {
        self.special.mentions_control(text.as_bytes())
    }

    fn encode_guarded(
        &self,
        text: &[u8],
        add_special: bool,
        parse_special: bool,
        text_only: &[std::ops::Range<usize>],
    ) -> Vec<u32> {
        let mut fragments = Vec::new();
        self.special
            .partition_guarded(text, parse_special, text_only, &mut fragments);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        let flags = self.vocab.flags;
        if add_special && flags.add_bos {
            out.extend(self.vocab.ids.bos);
        }
        match &self.model {
            Model::Bpe(bpe) => {
                let mut pre_scratch = pretok::Scratch::default();
                let mut bpe_scratch = bpe::Scratch::default();
                let mut words = Vec::new();
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(start, end) => {
                            let raw = &text[start..end];
                            words.clear();
                            pretok::split(self.vocab.pre, raw, &mut pre_scratch, &mut words);
                            let bytes = pre_scratch.bytes(raw);
                            for &(a, b) in &words {
                                bpe.encode_word(&bytes[a..b], &mut bpe_scratch, &mut out);
                            }
                        }
                    }
                }
            }
            Model::Spm(spm) => {
                let mut scratch = spm::Scratch::default();
                let mut escaped = Vec::new();
                // llama.cpp prefixes a space to text that follows the start or a special token.
                let mut after_special = true;
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => {
                            out.push(id);
                            after_special = true;
                        }
                        Fragment::Text(start, end) => {
                            escaped.clear();
                            if flags.add_space_prefix && after_special {
                                escaped.extend_from_slice(SPM_SPACE.as_bytes());
                            }
                            for &b in &text[start..end] {
                                if b == b' ' {
                                    escaped.extend_from_slice(SPM_SPACE.as_bytes());
                                } else {
                                    escaped.push(b);
                                }
                            }
                            spm.encode(&self.vocab, &escaped, &mut scratch, &mut out);
                            after_special = false;
                        }
                    }
                }
            }
        }
        if add_special && flags.add_eos {
            out.extend(self.vocab.ids.eos);
        }
        out
    }

    /// The bytes token `id` renders to, as llama.cpp's `llama_token_to_piece(id, lstrip = 0,
    /// special)`: control and unknown tokens render empty unless `special` is true; ids past
    /// the vocabulary render empty.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Vec<u8> {
        self.piece(id, special).to_vec()
    }

    /// [`Tokenizer::token_to_piece`] without copying.
    pub fn piece(&self, id: u32, special: bool) -> &[u8] {
        decode::piece(&self.vocab, &self.pieces, id, special)
    }

    /// Detokenizes a whole sequence as `llama_detokenize(ids, remove_special = false,
    /// unparse_special = special)`: the pieces concatenated, minus one leading space of the
    /// first piece when the model adds a space prefix, then llama.cpp's space clean-up passes
    /// when the model asks for them (neither applies to SmolLM2 or Gemma 3).
    pub fn decode(&self, ids: &[u32], special: bool) -> Vec<u8> {
        decode::detokenize(&self.vocab, &self.pieces, ids, special)
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.n_tokens()
    }

    pub fn bos(&self) -> Option<u32> {
        self.vocab.ids.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.vocab.ids.eos
    }

    /// The end-of-turn token (`tokenizer.ggml.eot_token_id`, or found by its text).
    pub fn eot(&self) -> Option<u32> {
        self.vocab.ids.eot
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.flags.add_bos && self.vocab.ids.bos.is_some()
    }

    /// Whether generating `id` ends generation: EOS, EOT, EOM, and tokens such as
    /// `<|im_end|>`, `<|eot_id|>`, `<|endoftext|>` or `<end_of_turn>`, as llama.cpp marks them.
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.is_eog(id)
    }

    /// The tokens that end generation, ascending.
    pub fn eog_tokens(&self) -> &[u32] {
        &self.vocab.eog
    }

    /// The token whose text is exactly `text` (e.g. `<|im_start|>`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.token_id(text.as_bytes())
    }

    /// The token's text as stored in the model (byte-level or ▁-escaped); `None` past the end.
    pub fn token_text(&self, id: u32) -> Option<&[u8]> {
        ((id as usize) < self.vocab.n_tokens()).then(|| self.vocab.text(id))
    }

    /// Whether `id` is a control token (rendered only on request, matched only with
    /// `parse_special`).
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab.attr(id).has(vocab::Attr::CONTROL)
    }

    /// The chat template stored in the model, if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.vocab.chat_template.as_deref()
    }
}
