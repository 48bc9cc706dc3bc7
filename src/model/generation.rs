//! Generation as a step API: one [`Sequence`] per request, advanced by whoever runs the
//! forward steps. `locus run` drives one sequence with [`Model::eval_chunk`] and
//! [`Model::forward`]; `locus serve` drives many, their decoded tokens and prompt chunks
//! together in [`Model::forward_mixed`] steps. Both take their tokens and text from the same
//! code here, so a request's output is decided in one place: prompt chunks, sampling, end of
//! generation, stop strings (held back while they could still be forming), the UTF-8 stream.

use super::forward::{Model, Part, State};
use super::sampler::{Sampler, SamplerConfig};
use super::tokenizer::{Tokenizer, Utf8Stream};
use crate::pool::Pool;

/// What a request asks of generation.
#[derive(Clone, Debug)]
pub struct Params {
    pub sampling: SamplerConfig,
    /// Tokens to generate at most; `None`: until end of generation or the context is full.
    pub max_tokens: Option<usize>,
    /// Generation ends before the first of these strings; none of it is output.
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens (llama.cpp's `--ignore-eos`).
    pub ignore_eos: bool,
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` or the context's end (or, in the server, shutting down).
    Length,
}

impl Finish {
    pub fn name(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// One sequence's generation: its prompt, how much of it is in the cache, its sampler, and
/// the tokens and text generated so far.
pub struct Sequence {
    prompt: Vec<u32>,
    params: Params,
    sampler: Sampler,
    /// Prompt tokens in the cache (reused or evaluated).
    done: usize,
    /// The logits the next token is sampled from.
    logits: Vec<f32>,
    generated: Vec<u32>,
    /// Generation ended on an end-of-generation token: decoded (and counted, as llama-server
    /// counts it in `tokens_predicted`), though not part of [`Sequence::generated`] or the text.
    ended_on_eog: bool,
    /// Tokens generated but not yet taken by [`Sequence::output`].
    unsent_tokens: Vec<u32>,
    stream: Utf8Stream,
    /// All text generated; `sent` bytes of it have been taken.
    text: String,
    sent: usize,
    /// The stop string that ended generation, if one did.
    stopping_word: Option<String>,
    /// Added to a token's logit before each draw (`f32::NEG_INFINITY`: never drawn).
    logit_bias: Vec<(u32, f32)>,
    /// Each generated token's probabilities are recorded with this many alternatives
    /// (0: none are).
    n_probs: usize,
    /// Probabilities of generated tokens not yet taken by [`Sequence::take_probs`].
    probs: Vec<TokenProbs>,
}

/// A generated token's probability and the most likely tokens at its place, from the
/// softmax of the model's logits before any sampler or bias (llama-server's `n_probs`).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenProbs {
    pub id: u32,
    pub p: f32,
    /// The `n_probs` likeliest tokens, likeliest first.
    pub top: Vec<(u32, f32)>,
}

impl TokenProbs {
    /// As llama.cpp's `get_token_probabilities`: softmax over every logit, the `n` largest
    /// first; `chosen`'s probability.
    pub fn of(logits: &[f32], chosen: u32, n: usize) -> TokenProbs {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
        let p = |l: f32| (l - max).exp() / sum;
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let n = n.min(idx.len());
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
        if n > 0 && n < idx.len() {
            idx.select_nth_unstable_by(n - 1, by_logit);
        }
        idx.truncate(n);
        idx.sort_by(by_logit);
        TokenProbs {
            id: chosen,
            p: logits.get(chosen as usize).map_or(0.0, |&l| p(l)),
            top: idx.iter().map(|&t| (t, p(logits[t as usize]))).collect(),
        }
    }
}

impl Sequence {
    /// A sequence for `prompt` (not empty) whose first `cached` tokens are already in its
    /// cache, sampling with a repeat window no longer than the context `ctx`.
    pub fn new(
        prompt: Vec<u32>,
        params: Params,
        cached: usize,
        ctx: usize,
        n_vocab: usize,
    ) -> Self {
        assert!(
            !prompt.is_empty() && cached < prompt.len(),
            "a prompt to evaluate"
        );
        let mut sampling = params.sampling.clone();
        sampling.repeat_last_n = sampling.repeat_last_n.min(ctx);
        Sequence {
            prompt,
            params,
            sampler: Sampler::new(sampling),
            done: cached,
            logits: vec![0.0; n_vocab],
            generated: Vec::new(),
            ended_on_eog: false,
            unsent_tokens: Vec::new(),
            stream: Utf8Stream::new(),
            text: String::new(),
            sent: 0,
            stopping_word: None,
            logit_bias: Vec::new(),
            n_probs: 0,
            probs: Vec::new(),
        }
    }

    /// Records each generated token's probability and the `n` likeliest at its place.
    pub fn set_n_probs(&mut self, n: usize) {
        self.n_probs = n;
    }

    /// The probabilities recorded since the last call (one per token generated since).
    pub fn take_probs(&mut self) -> Vec<TokenProbs> {
        std::mem::take(&mut self.probs)
    }

    /// Biases added to these tokens' logits before every draw (llama.cpp's `logit_bias`);
    /// ids past the vocabulary are ignored.
    pub fn set_logit_bias(&mut self, bias: Vec<(u32, f32)>) {
        self.logit_bias = bias;
    }

    /// The stop string that ended generation (`None`: none did, or not yet).
    pub fn stopping_word(&self) -> Option<&str> {
        self.stopping_word.as_deref()
    }

    pub fn prompt(&self) -> &[u32] {
        &self.prompt
    }

    /// Whether the whole prompt is in the cache (the next step decodes).
    pub fn decoding(&self) -> bool {
        self.done == self.prompt.len()
    }

    /// The tokens generated, without an end-of-generation token that ended them.
    pub fn generated(&self) -> &[u32] {
        &self.generated
    }

    /// Tokens sampled: [`Sequence::generated`] and an end-of-generation token that ended them
    /// (llama-server's `n_decoded`: its `tokens_predicted` and `completion_tokens`).
    pub fn decoded(&self) -> usize {
        self.generated.len() + usize::from(self.ended_on_eog)
    }

    /// The token the next decode step feeds: the last one sampled.
    pub fn last_token(&self) -> Option<u32> {
        self.generated.last().copied()
    }

    /// Where a decode step writes the logits to sample from.
    pub fn logits_mut(&mut self) -> &mut [f32] {
        &mut self.logits
    }

    /// One forward step of the prompt into `state` (see [`Model::eval_chunk`]); returns the
    /// prompt positions it evaluated. Once the last one is in, the logits to sample from are
    /// set and the sampler has seen the prompt. A stopped state (Ctrl-C) evaluates nothing more.
    pub fn feed_prompt(
        &mut self,
        model: &Model,
        pool: &Pool,
        state: &mut State,
    ) -> std::ops::Range<usize> {
        let (start, n) = (self.done, self.prompt.len());
        let logits = &mut self.logits;
        let end = model.eval_chunk(pool, state, &self.prompt, start, n - 1, &mut |_, l| {
            logits.copy_from_slice(l)
        });
        if state.stopped() {
            return start..start;
        }
        self.advance(end, None);
        start..end
    }

    /// This sequence's part of a mixed step ([`Model::forward_mixed`]): the next chunk of its
    /// prompt, at most `most` tokens, or, once the prompt is in, its last sampled token.
    ///
    /// # Panics
    /// Where the sequence decodes but has sampled nothing yet.
    pub fn part(&self, most: usize) -> Part<'_> {
        if self.decoding() {
            let n = self.generated.len();
            assert!(n > 0, "a decoding sequence has sampled a token");
            return Part::decode(&self.generated[n - 1..]);
        }
        Part {
            tokens: &self.prompt,
            start: self.done,
            logits_from: self.prompt.len() - 1,
            most,
        }
    }

    /// Records that a mixed step evaluated this sequence's [`Sequence::part`] up to `end`
    /// (decoding: 1), with `logits` the logits of its last token where the part had them.
    /// Once the prompt's last token is in, the sampler has seen the prompt.
    pub fn advance(&mut self, end: usize, logits: Option<&[f32]>) {
        if let Some(l) = logits {
            self.logits.copy_from_slice(l);
        }
        if self.decoding() {
            return;
        }
        self.done = end;
        if end == self.prompt.len() {
            for &t in &self.prompt {
                self.sampler.accept(t);
            }
        }
    }

    /// Samples the next token from the logits and records it. `Some` where generation ends
    /// here: an end-of-generation token (not part of the text, but among the tokens
    /// [`Sequence::output`] gives and counted by [`Sequence::decoded`], as llama-server lists
    /// and counts it), a stop string (the text is cut before it), `max_tokens`, or `pos` (the
    /// cache's length) at the context `ctx`.
    pub fn sample(&mut self, tok: &Tokenizer, pos: usize, ctx: usize) -> Option<Finish> {
        let raw = (self.n_probs > 0).then(|| self.logits.clone());
        for &(t, b) in &self.logit_bias {
            if let Some(l) = self.logits.get_mut(t as usize) {
                *l += b;
            }
        }
        let next = self.sampler.sample(&mut self.logits);
        if let Some(raw) = raw {
            self.probs.push(TokenProbs::of(&raw, next, self.n_probs));
        }
        if tok.is_eog(next) && !self.params.ignore_eos {
            self.ended_on_eog = true;
            self.unsent_tokens.push(next);
            return Some(Finish::Stop);
        }
        self.generated.push(next);
        self.unsent_tokens.push(next);
        self.sampler.accept(next);
        let piece = tok.token_to_piece(next, false);
        self.text.push_str(&self.stream.push(&piece));
        if let Some(cut) = stop_at(&self.text, self.sent, &self.params.stop) {
            self.stopping_word = self
                .params
                .stop
                .iter()
                .find(|s| !s.is_empty() && self.text[cut..].starts_with(s.as_str()))
                .cloned();
            self.text.truncate(cut);
            return Some(Finish::Stop);
        }
        if self
            .params
            .max_tokens
            .is_some_and(|m| self.generated.len() >= m)
            || pos >= ctx
        {
            return Some(Finish::Length);
        }
        None
    }

    /// The text and tokens that can go out now; with `last`, everything that is left (a
    /// partial UTF-8 character completed as the tokenizer's stream completes it, a partial
    /// stop string released). `None` when there is nothing new.
    pub fn output(&mut self, last: bool) -> Option<(String, Vec<u32>)> {
        if last {
            let rest = std::mem::take(&mut self.stream).finish();
            self.text.push_str(&rest);
            if let Some(cut) = stop_at(&self.text, self.sent, &self.params.stop) {
                self.text.truncate(cut);
            }
        }
        let end = if last {
            self.text.len()
        } else {
            safe_end(&self.text, &self.params.stop)
        };
        if end <= self.sent && self.unsent_tokens.is_empty() {
            return None;
        }
        // `sent` never passes a stop string's start (a partial one is held back), so the range
        // is always there; should it not be, nothing goes out rather than a panic.
        let text = self.text.get(self.sent..end).unwrap_or("").to_string();
        self.sent = end.max(self.sent);
        Some((text, std::mem::take(&mut self.unsent_tokens)))
    }
}

/// Where the first stop string begins in `text`, looking only where it could not have been
/// seen before (`sent` bytes went out without one).
fn stop_at(text: &str, sent: usize, stops: &[String]) -> Option<usize> {
    let longest = stops.iter().map(String::len).max()?;
    let mut from = sent.saturating_sub(longest);
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text[from..].find(s.as_str()).map(|i| from + i))
        .min()
}

/// The end of the text that can go out now: all of it, but a tail that could be the start of
/// a stop string.
fn safe_end(text: &str, stops: &[String]) -> usize {
    let mut end = text.len();
    for s in stops {
        for k in (1..s.len().min(text.len() + 1)).rev() {
            if s.is_char_boundary(k) && text.ends_with(&s[..k]) {
                end = end.min(text.len() - k);
                break;
            }
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_are_found_across_pieces_and_held_back_while_partial() {
        let stops = vec!["\nUser:".to_string(), "END".to_string()];
        assert_eq!(stop_at("hello\nUs", 0, &stops), None);
        assert_eq!(safe_end("hello\nUs", &stops), 5);
        assert_eq!(safe_end("hello E", &stops), 6);
        assert_eq!(safe_end("hello", &stops), 5);
        assert_eq!(stop_at("hello\nUser: hi", 5, &stops), Some(5));
        assert_eq!(stop_at("abcEND", 3, &stops), Some(3));
        assert_eq!(stop_at("héllo", 3, &["x".into()]), None);
        assert_eq!(stop_at("anything", 0, &[]), None);
    }

    #[test]
    fn token_probs_are_the_softmax_of_the_raw_logits_likeliest_first() {
        let logits = [1.0f32, 3.0, 2.0, 3.0f32.ln() + 1.0, -1.0];
        let t = TokenProbs::of(&logits, 2, 3);
        let sum: f32 = logits.iter().map(|l| l.exp()).sum();
        assert!((t.p - 2f32.exp() / sum).abs() < 1e-6);
        let ids: Vec<u32> = t.top.iter().map(|x| x.0).collect();
        assert_eq!(ids, [1, 3, 2]);
        assert!((t.top[0].1 - 3f32.exp() / sum).abs() < 1e-6);
        assert_eq!(TokenProbs::of(&logits, 0, 9).top.len(), logits.len());
    }
}
