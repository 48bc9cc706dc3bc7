//! The scheduler: slots that each hold one sequence's cache, a bounded queue of requests, and
//! a step loop that feeds every active slot one prompt chunk or one decoded token per step.
//! A request joins or leaves between steps.
//!
//! Batch invariance: every token is computed with the arithmetic `locus run` gives it for the
//! same prompt ([`Model::eval_chunk`] keeps each prompt token's place in its micro-batch; a
//! decoded token is a batch of one), whatever the other slots are doing, so a greedy or seeded
//! request gives the same tokens alone or next to any others.
//!
//! Prefix reuse: a slot keeps the tokens in its cache and each one's arithmetic signature
//! ([`Model::token_signature`]); a new request takes the free slot that shares the longest
//! prefix with its prompt, counting only tokens whose signature under the new prompt is the
//! one they were computed with, so reuse never changes a bit.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::metrics::Metrics;
use crate::model::forward::{Model, State, MAX_BATCH};
use crate::model::sampler::{Sampler, SamplerConfig};
use crate::model::tokenizer::{Tokenizer, Utf8Stream};
use crate::pool::Pool;

/// What a request asks of generation.
#[derive(Clone, Debug)]
pub struct Params {
    pub sampling: SamplerConfig,
    /// Tokens to generate at most; `None`: until end of generation or the slot's context is full.
    pub max_tokens: Option<usize>,
    /// Generation ends before the first of these strings; none of it is sent.
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens (llama-server's `ignore_eos`).
    pub ignore_eos: bool,
}

/// A request handed to the engine.
pub struct Job {
    pub prompt: Vec<u32>,
    pub params: Params,
    pub events: Sender<Event>,
    /// Set by the connection when its client went away: the slot is freed at the next step.
    pub cancelled: Arc<AtomicBool>,
    pub queued_at: Instant,
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens`, the context's end, or the server shutting down.
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

/// A finished request's token counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub prompt: usize,
    pub completion: usize,
    /// Prompt tokens taken from the slot's cache instead of evaluated.
    pub cached: usize,
}

/// What the engine tells a request's connection.
#[derive(Clone, Debug)]
pub enum Event {
    /// New text (held back while it could still be the start of a stop string) and the
    /// tokens generated since the last event.
    Text {
        text: String,
        tokens: Vec<u32>,
    },
    Done {
        finish: Finish,
        usage: Usage,
    },
    /// The request could not run (the server is shutting down before it started).
    Refused(String),
}

/// The engine's options.
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    pub slots: usize,
    /// Tokens each slot's cache holds.
    pub ctx: usize,
    /// In-flight streams get this long to finish once shutdown begins.
    pub grace: Duration,
}

/// One sequence slot: its cache, what the cache holds, and the request it serves.
struct Slot {
    state: State,
    /// The tokens in the cache, each with the signature it was computed with.
    cached: Vec<(u32, u64)>,
    active: Option<Active>,
}

/// A request being served.
struct Active {
    job: Job,
    sampler: Sampler,
    /// Prompt tokens in the cache (reused or evaluated).
    done: usize,
    reused: usize,
    logits: Vec<f32>,
    generated: Vec<u32>,
    /// Tokens generated but not yet reported.
    unsent_tokens: Vec<u32>,
    stream: Utf8Stream,
    /// All text generated; `sent` bytes of it have gone out.
    text: String,
    sent: usize,
    first_token: bool,
}

impl Active {
    fn usage(&self) -> Usage {
        Usage {
            prompt: self.job.prompt.len(),
            completion: self.generated.len(),
            cached: self.reused,
        }
    }
}

/// The step loop over `slots` slots, fed by `jobs`.
pub struct Engine<'m> {
    model: &'m Model<'m>,
    tokenizer: &'m Tokenizer,
    pool: &'m Pool,
    slots: Vec<Slot>,
    /// The buffers of the steps that decode for several slots at once.
    work: State,
    queue: VecDeque<Job>,
    jobs: Receiver<Job>,
    metrics: &'m Metrics,
    opts: EngineOptions,
}

impl<'m> Engine<'m> {
    /// Allocates every slot's cache up front (an error where memory does not hold them).
    pub fn new(
        model: &'m Model<'m>,
        tokenizer: &'m Tokenizer,
        pool: &'m Pool,
        jobs: Receiver<Job>,
        metrics: &'m Metrics,
        opts: EngineOptions,
        kv_type: crate::model::forward::KvType,
    ) -> Result<Engine<'m>, crate::model::ModelError> {
        let slots = (0..opts.slots)
            .map(|_| {
                Ok(Slot {
                    state: model.try_new_state(opts.ctx, pool.threads(), kv_type)?,
                    cached: Vec::new(),
                    active: None,
                })
            })
            .collect::<Result<Vec<_>, crate::model::ModelError>>()?;
        let work = model.try_new_workspace(opts.ctx, pool.threads(), kv_type)?;
        Ok(Engine {
            model,
            tokenizer,
            pool,
            slots,
            work,
            queue: VecDeque::new(),
            jobs,
            metrics,
            opts,
        })
    }

    /// Every slot's cache as blocks, each with the pool group that writes it
    /// ([`State::kv_head_blocks`]).
    pub fn kv_blocks(&self) -> Vec<(&[u8], usize)> {
        self.slots
            .iter()
            .flat_map(|s| s.state.kv_head_blocks(self.model, self.pool))
            .collect()
    }

    /// Runs until `shutdown` is set and the in-flight requests are done (or the grace period
    /// has passed), or until every sender of jobs is gone.
    pub fn run(&mut self, shutdown: &AtomicBool) {
        let mut stop_at: Option<Instant> = None;
        let mut rate = Rate::default();
        loop {
            let busy = self.slots.iter().any(|s| s.active.is_some());
            if shutdown.load(Ordering::SeqCst) && stop_at.is_none() {
                stop_at = Some(Instant::now() + self.opts.grace);
            }
            if let Some(at) = stop_at {
                self.refuse_queued();
                if !busy {
                    return;
                }
                if Instant::now() >= at {
                    self.cut_all();
                    return;
                }
            }
            // Wait for work when there is none; otherwise take what has arrived.
            if !busy && self.queue.is_empty() {
                match self.jobs.recv_timeout(Duration::from_millis(100)) {
                    Ok(j) => self.queue.push_back(j),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            while let Ok(j) = self.jobs.try_recv() {
                self.queue.push_back(j);
            }
            if stop_at.is_none() {
                self.admit();
            }
            let decoded = self.step();
            rate.add(decoded);
            self.metrics.set_decode_rate(rate.per_second());
            self.metrics
                .set_busy(self.slots.iter().filter(|s| s.active.is_some()).count());
        }
    }

    /// Gives queued requests to free slots, oldest first, each to the free slot whose cache
    /// shares the longest reusable prefix with its prompt.
    fn admit(&mut self) {
        while let Some(free) = self.slots.iter().position(|s| s.active.is_none()) {
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            self.metrics.dequeued();
            if job.cancelled.load(Ordering::Relaxed) {
                continue;
            }
            let mut best = (free, 0);
            for (i, s) in self.slots.iter().enumerate() {
                if s.active.is_none() {
                    let k = self.reusable(&s.cached, &job.prompt);
                    if k > best.1 {
                        best = (i, k);
                    }
                }
            }
            let (i, reused) = best;
            let slot = &mut self.slots[i];
            slot.state.reset();
            slot.cached.truncate(reused);
            slot.state.pos = reused;
            let mut sampling = job.params.sampling.clone();
            sampling.repeat_last_n = sampling.repeat_last_n.min(self.opts.ctx);
            slot.active = Some(Active {
                sampler: Sampler::new(sampling),
                done: reused,
                reused,
                logits: vec![0.0; self.model.config.n_vocab],
                generated: Vec::new(),
                unsent_tokens: Vec::new(),
                stream: Utf8Stream::new(),
                text: String::new(),
                sent: 0,
                first_token: false,
                job,
            });
        }
    }

    /// How many of `prompt`'s first tokens a cache holding `cached` can keep: equal tokens
    /// computed with the signature the new prompt gives them, and never the last prompt token
    /// (its logits are needed).
    fn reusable(&self, cached: &[(u32, u64)], prompt: &[u32]) -> usize {
        if !self.model.reuses_prefixes() {
            return 0;
        }
        let n = prompt.len();
        cached
            .iter()
            .zip(prompt)
            .take(n.saturating_sub(1))
            .enumerate()
            .take_while(|(i, ((t, sig), p))| t == *p && *sig == self.model.token_signature(n, *i))
            .count()
    }

    /// One step: a decoded token for every slot past its prompt, all in one forward step
    /// (each weight row read once for all), then a prompt chunk for every slot still reading
    /// its prompt. Returns the tokens decoded.
    fn step(&mut self) -> usize {
        let (model, pool) = (self.model, self.pool);
        for slot in &mut self.slots {
            if slot
                .active
                .as_ref()
                .is_some_and(|a| a.job.cancelled.load(Ordering::Relaxed))
            {
                self.metrics.cancelled();
                slot.active = None;
            }
        }
        let decoding: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                self.slots[i]
                    .active
                    .as_ref()
                    .is_some_and(|a| a.done == a.job.prompt.len())
            })
            .collect();
        if !decoding.is_empty() {
            let mut tokens = Vec::with_capacity(decoding.len());
            let mut states: Vec<&mut State> = Vec::with_capacity(decoding.len());
            let mut outs: Vec<&mut Vec<f32>> = Vec::with_capacity(decoding.len());
            for (i, slot) in self.slots.iter_mut().enumerate() {
                let Slot {
                    state,
                    cached,
                    active,
                } = slot;
                if let (true, Some(a)) = (decoding.contains(&i), active.as_mut()) {
                    let last = *a
                        .generated
                        .last()
                        .expect("a decoding slot has sampled a token");
                    tokens.push(last);
                    cached.push((last, model.token_signature(1, 0)));
                    states.push(state);
                    outs.push(&mut a.logits);
                }
            }
            for ((states, tokens), outs) in states
                .chunks_mut(MAX_BATCH)
                .zip(tokens.chunks(MAX_BATCH))
                .zip(outs.chunks_mut(MAX_BATCH))
            {
                model.forward_multi(pool, &mut self.work, states, tokens);
                for (j, out) in outs.iter_mut().enumerate() {
                    out.copy_from_slice(self.work.logits(j));
                }
            }
            for &i in &decoding {
                self.emit(i);
            }
        }
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            let prompt = &a.job.prompt;
            let n = prompt.len();
            if a.done == n || decoding.contains(&i) {
                continue;
            }
            let start = a.done;
            let logits = &mut a.logits;
            let end = model.eval_chunk(pool, &mut slot.state, prompt, start, n - 1, &mut |_, l| {
                logits.copy_from_slice(l)
            });
            for (j, &t) in prompt.iter().enumerate().take(end).skip(start) {
                slot.cached.push((t, model.token_signature(n, j)));
            }
            a.done = end;
            if end == n {
                self.metrics.prompt_tokens(n - a.reused);
                for &t in prompt.iter() {
                    a.sampler.accept(t);
                }
                self.emit(i);
            }
        }
        decoding.len()
    }

    /// Samples slot `i`'s next token from its logits and sends what is new; frees the slot
    /// where generation ends or the client is gone.
    fn emit(&mut self, i: usize) {
        let ctx = self.opts.ctx;
        let slot = &mut self.slots[i];
        let Some(a) = slot.active.as_mut() else {
            return;
        };
        let finish = sample_one(a, self.tokenizer, slot.state.pos, ctx);
        if !a.first_token {
            a.first_token = true;
            self.metrics.first_token(a.job.queued_at.elapsed());
        }
        let gone = flush(a, finish.is_some()).is_err();
        if let Some(f) = finish {
            self.metrics.generated_tokens(a.generated.len());
            let _ = a.job.events.send(Event::Done {
                finish: f,
                usage: a.usage(),
            });
            slot.active = None;
        } else if gone {
            self.metrics.generated_tokens(a.generated.len());
            self.metrics.cancelled();
            slot.active = None;
        }
    }

    /// Shutdown: requests that never started are told so.
    fn refuse_queued(&mut self) {
        while let Ok(j) = self.jobs.try_recv() {
            self.queue.push_back(j);
        }
        for j in self.queue.drain(..) {
            self.metrics.dequeued();
            let _ = j
                .events
                .send(Event::Refused("the server is shutting down".into()));
        }
    }

    /// Shutdown after the grace period: every stream still running ends now, properly.
    fn cut_all(&mut self) {
        for s in &mut self.slots {
            if let Some(mut a) = s.active.take() {
                let _ = flush(&mut a, true);
                let _ = a.job.events.send(Event::Done {
                    finish: Finish::Length,
                    usage: a.usage(),
                });
            }
        }
    }
}

/// Samples the next token from `a.logits` and records it; `Some` where generation ends here
/// (the token itself is then not part of the output when it is an end-of-generation token).
fn sample_one(a: &mut Active, tok: &Tokenizer, pos: usize, ctx: usize) -> Option<Finish> {
    let next = a.sampler.sample(&mut a.logits);
    if tok.is_eog(next) && !a.job.params.ignore_eos {
        return Some(Finish::Stop);
    }
    a.generated.push(next);
    a.unsent_tokens.push(next);
    a.sampler.accept(next);
    let piece = tok.token_to_piece(next, false);
    a.text.push_str(&a.stream.push(&piece));
    if let Some(cut) = stop_at(&a.text, a.sent, &a.job.params.stop) {
        a.text.truncate(cut);
        return Some(Finish::Stop);
    }
    if a.job
        .params
        .max_tokens
        .is_some_and(|m| a.generated.len() >= m)
        || pos >= ctx
    {
        return Some(Finish::Length);
    }
    None
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

/// The end of the text that can go out now: all of it at the end, else all but a tail that
/// could be the start of a stop string.
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

/// Sends what is new; an error where the connection is gone.
fn flush(a: &mut Active, last: bool) -> Result<(), ()> {
    if last {
        let rest = std::mem::take(&mut a.stream).finish();
        a.text.push_str(&rest);
        if let Some(cut) = stop_at(&a.text, a.sent, &a.job.params.stop) {
            a.text.truncate(cut);
        }
    }
    let end = if last {
        a.text.len()
    } else {
        safe_end(&a.text, &a.job.params.stop)
    };
    if end <= a.sent && a.unsent_tokens.is_empty() {
        return Ok(());
    }
    // `sent` never passes a stop string's start (a partial one is held back), so the range is
    // always there; should it not be, nothing is sent rather than the engine panicking.
    let text = a.text.get(a.sent..end).unwrap_or("").to_string();
    a.sent = end.max(a.sent);
    let tokens = std::mem::take(&mut a.unsent_tokens);
    a.job
        .events
        .send(Event::Text { text, tokens })
        .map_err(|_| ())
}

/// Decoded tokens per second over the last few seconds.
#[derive(Default)]
struct Rate {
    window: VecDeque<(Instant, usize)>,
}

impl Rate {
    const SPAN: Duration = Duration::from_secs(5);

    fn add(&mut self, n: usize) {
        let now = Instant::now();
        self.window.push_back((now, n));
        while self
            .window
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > Self::SPAN)
        {
            self.window.pop_front();
        }
    }

    fn per_second(&self) -> f64 {
        match (self.window.front(), self.window.back()) {
            (Some(a), Some(b)) if b.0 > a.0 => {
                let n: usize = self.window.iter().skip(1).map(|x| x.1).sum();
                n as f64 / b.0.duration_since(a.0).as_secs_f64()
            }
            _ => 0.0,
        }
    }
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
    fn the_rate_counts_tokens_after_the_first_step_of_its_window() {
        let mut r = Rate::default();
        assert_eq!(r.per_second(), 0.0);
        r.add(3);
        std::thread::sleep(Duration::from_millis(20));
        r.add(2);
        let v = r.per_second();
        assert!(v > 0.0 && v < 2.0 / 0.019, "{v}");
    }
}
