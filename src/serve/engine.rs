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

use super::llamacpp::{Detail, JobExtra, Timings};
use super::metrics::Metrics;
use crate::model::forward::{Model, State, MAX_BATCH};
use crate::model::generation::Sequence;
pub use crate::model::generation::{Finish, Params, TokenProbs};
use crate::model::tokenizer::Tokenizer;
use crate::pool::Pool;

/// A request handed to the engine.
pub struct Job {
    pub prompt: Vec<u32>,
    pub params: Params,
    pub events: Sender<Event>,
    /// Set by the connection when its client went away: the slot is freed at the next step.
    pub cancelled: Arc<AtomicBool>,
    pub queued_at: Instant,
    /// llama-server's options beyond [`Params`].
    pub extra: JobExtra,
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
        /// The slot serving the request and its timings so far (llama-server's stream chunks
        /// carry them).
        slot: usize,
        timings: Timings,
        /// The probabilities of `tokens` (empty unless the request asked, `n_probs`).
        probs: Vec<TokenProbs>,
    },
    Done {
        finish: Finish,
        usage: Usage,
        /// The slot, the stop string, the timings (llama-server's `/completion` fields).
        detail: Detail,
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
    seq: Sequence,
    /// The request's connection (its prompt and parameters are now the sequence's).
    events: Sender<Event>,
    cancelled: Arc<AtomicBool>,
    queued_at: Instant,
    /// Prompt tokens taken from the slot's cache.
    reused: usize,
    first_token: bool,
    /// The slot serving it; when the slot took it, and when its prompt was in.
    slot: usize,
    started: Instant,
    prompt_done: Option<Instant>,
}

impl Active {
    fn usage(&self) -> Usage {
        Usage {
            prompt: self.seq.prompt().len(),
            completion: self.seq.decoded(),
            cached: self.reused,
        }
    }

    /// How the request ended, for a slot `slot` whose cache now holds `cached` tokens.
    fn detail(&self, cached: usize) -> Detail {
        Detail {
            slot: self.slot,
            stopping_word: self.seq.stopping_word().map(str::to_string),
            cached,
            timings: self.timings(),
        }
    }

    fn timings(&self) -> Timings {
        let now = Instant::now();
        let prompt_done = self.prompt_done.unwrap_or(now);
        Timings {
            cache_n: self.reused,
            prompt_n: self.seq.prompt().len() - self.reused,
            prompt: prompt_done.duration_since(self.started),
            predicted_n: self.seq.decoded(),
            predicted: now.duration_since(prompt_done),
        }
    }

    /// Sends what is new; an error where the connection is gone.
    fn flush(&mut self, last: bool) -> Result<(), ()> {
        match self.seq.output(last) {
            Some((text, tokens)) => {
                let (slot, timings) = (self.slot, self.timings());
                let probs = self.seq.take_probs();
                self.events
                    .send(Event::Text {
                        text,
                        tokens,
                        slot,
                        timings,
                        probs,
                    })
                    .map_err(|_| ())
            }
            None => Ok(()),
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
                    state: model.try_new_state(opts.ctx, pool, kv_type)?,
                    cached: Vec::new(),
                    active: None,
                })
            })
            .collect::<Result<Vec<_>, crate::model::ModelError>>()?;
        let work = model.try_new_workspace(opts.ctx, pool, kv_type)?;
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

    /// The copies each slot's cache keeps (one per pool group for latent attention).
    pub fn kv_copies(&self) -> usize {
        let ctx = self.opts.ctx;
        (self
            .model
            .state_bytes(ctx, self.pool, self.slots[0].state.kv_type()))
        .map_or(1, |b| b.kv_copies)
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
            self.drop_cancelled_queued();
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

    /// Removes the queued requests whose clients left: their places free at once, and each
    /// counts as cancelled.
    fn drop_cancelled_queued(&mut self) {
        let before = self.queue.len();
        self.queue.retain(|j| !j.cancelled.load(Ordering::Relaxed));
        for _ in self.queue.len()..before {
            self.metrics.dequeued();
            self.metrics.cancelled();
        }
    }

    /// Gives queued requests to free slots, oldest first, each to the free slot whose cache
    /// shares the longest reusable prefix with its prompt.
    /// A request that names a busy slot (`id_slot`) waits for it while those behind it go
    /// ahead (llama-server defers it the same way).
    fn admit(&mut self) {
        while let Some(free) = self.slots.iter().position(|s| s.active.is_none()) {
            let slots = &self.slots;
            let pinned = |j: &Job| j.extra.id_slot.filter(|&k| k < slots.len());
            let Some(at) = self.queue.iter().position(|j| {
                j.cancelled.load(Ordering::Relaxed)
                    || pinned(j).is_none_or(|k| slots[k].active.is_none())
            }) else {
                return;
            };
            let Some(job) = self.queue.remove(at) else {
                return;
            };
            let pinned = pinned(&job);
            self.metrics.dequeued();
            if job.cancelled.load(Ordering::Relaxed) {
                self.metrics.cancelled();
                continue;
            }
            let mut best = (pinned.unwrap_or(free), 0);
            for (i, s) in self.slots.iter().enumerate() {
                if s.active.is_none() && pinned.is_none_or(|k| k == i) && job.extra.cache_prompt {
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
            let Job {
                prompt,
                params,
                events,
                cancelled,
                queued_at,
                extra,
            } = job;
            self.metrics
                .native
                .slot_started(i, prompt.len(), reused, &params);
            let mut seq = Sequence::new(
                prompt,
                params,
                reused,
                self.opts.ctx,
                self.model.config.n_vocab,
            );
            seq.set_logit_bias(extra.logit_bias);
            seq.set_n_probs(extra.n_probs);
            slot.active = Some(Active {
                seq,
                events,
                cancelled,
                queued_at,
                reused,
                first_token: false,
                slot: i,
                started: Instant::now(),
                prompt_done: None,
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

    /// One step: a decoded token for every slot past its prompt and, in the room left in the
    /// last forward step (of [`MAX_BATCH`] tokens), prompt chunks of the slots still reading
    /// their prompts, oldest slot index first: every weight row read once for all of them
    /// ([`Model::forward_mixed`]). A prompt that finds no room waits for the next step; where
    /// decoding fills the last forward step, the prompts get one more of their own.
    /// Returns the tokens decoded.
    fn step(&mut self) -> usize {
        let model = self.model;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot
                .active
                .as_ref()
                .is_some_and(|a| a.cancelled.load(Ordering::Relaxed))
            {
                self.metrics.cancelled();
                let decoded = slot.active.take().map_or(0, |a| a.seq.decoded());
                self.metrics.generated_tokens(decoded);
                self.metrics.native.slot_done(i, decoded);
            }
        }
        let (decoding, prompting): (Vec<usize>, Vec<usize>) = (0..self.slots.len())
            .filter(|&i| self.slots[i].active.is_some())
            .partition(|&i| {
                self.slots[i]
                    .active
                    .as_ref()
                    .is_some_and(|a| a.seq.decoding())
            });
        let mut rest = decoding.as_slice();
        loop {
            let (now, later) = rest.split_at(rest.len().min(MAX_BATCH));
            rest = later;
            // (slot, most tokens it may take)
            let mut members: Vec<(usize, usize)> = now.iter().map(|&i| (i, 1)).collect();
            let mut room = MAX_BATCH - now.len();
            if rest.is_empty() {
                if room == 0 && !prompting.is_empty() {
                    // Decoding filled the last step: the prompts get one of their own rather
                    // than waiting for as long as the decoding lasts.
                    self.run_step(&members);
                    members.clear();
                    room = MAX_BATCH;
                }
                for &i in &prompting {
                    if room == 0 {
                        break;
                    }
                    let seq = &self.slots[i].active.as_ref().expect("an active slot").seq;
                    let part = seq.part(room);
                    members.push((i, room));
                    // A mixture of experts takes a whole chunk (`Part`), room or not.
                    room = room.saturating_sub(model.part_end(&part) - part.start);
                }
            }
            if members.is_empty() {
                break;
            }
            self.run_step(&members);
            if rest.is_empty() {
                break;
            }
        }
        decoding.len()
    }

    /// One forward step over `members` (slot, most tokens), then what each slot makes of it:
    /// the tokens its cache now holds, its logits, a sampled token where it decodes (or has
    /// just read its whole prompt).
    fn run_step(&mut self, members: &[(usize, usize)]) {
        let (model, pool) = (self.model, self.pool);
        let mut states: Vec<&mut State> = Vec::with_capacity(members.len());
        let mut parts = Vec::with_capacity(members.len());
        let mut who = Vec::with_capacity(members.len());
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(&(_, most)) = members.iter().find(|m| m.0 == i) else {
                continue;
            };
            let Slot { state, active, .. } = slot;
            let a = active.as_ref().expect("an active slot");
            parts.push(a.seq.part(most));
            states.push(state);
            who.push(i);
        }
        let starts: Vec<usize> = parts.iter().map(|p| p.start).collect();
        let outs: Vec<usize> = parts.iter().map(|p| model.part_outputs(p)).collect();
        let ends = model.forward_mixed(pool, &mut self.work, &mut states, &parts);
        self.metrics.native.decoded_step();
        drop((states, parts));
        let mut k = 0;
        for (j, &i) in who.iter().enumerate() {
            let logits = (outs[j] > 0).then(|| &*self.work.logits(k + outs[j] - 1));
            k += outs[j];
            let slot = &mut self.slots[i];
            let a = slot.active.as_mut().expect("an active slot");
            if a.seq.decoding() {
                let last = a.seq.last_token().expect("a decoding slot has sampled");
                slot.cached.push((last, model.token_signature(1, 0)));
                a.seq.advance(ends[j], logits);
                self.emit(i);
                continue;
            }
            let n = a.seq.prompt().len();
            for t in starts[j]..ends[j] {
                let sig = model.token_signature(n, t);
                slot.cached.push((a.seq.prompt()[t], sig));
            }
            a.seq.advance(ends[j], logits);
            if a.seq.decoding() {
                let now = Instant::now();
                a.prompt_done = Some(now);
                self.metrics
                    .native
                    .prompt_done(n - a.reused, now.duration_since(a.started));
                self.metrics.prompt_tokens(n - a.reused);
                self.emit(i);
            }
        }
    }

    /// Samples slot `i`'s next token from its logits and sends what is new; frees the slot
    /// where generation ends or the client is gone.
    fn emit(&mut self, i: usize) {
        let ctx = self.opts.ctx;
        let slot = &mut self.slots[i];
        let Some(a) = slot.active.as_mut() else {
            return;
        };
        let finish = a.seq.sample(self.tokenizer, slot.state.pos, ctx);
        if !a.first_token {
            a.first_token = true;
            self.metrics.first_token(a.queued_at.elapsed());
        }
        let gone = a.flush(finish.is_some()).is_err();
        if finish.is_some() || gone {
            let detail = a.detail(slot.state.pos);
            let n = a.seq.decoded();
            self.metrics.generated_tokens(n);
            self.metrics.native.predicted(n, detail.timings.predicted);
            self.metrics.native.slot_done(i, n);
            if let Some(f) = finish {
                let _ = a.events.send(Event::Done {
                    finish: f,
                    usage: a.usage(),
                    detail,
                });
            } else {
                self.metrics.cancelled();
            }
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
                let _ = a.flush(true);
                let _ = a.events.send(Event::Done {
                    finish: Finish::Length,
                    usage: a.usage(),
                    detail: a.detail(s.state.pos),
                });
            }
        }
    }
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
