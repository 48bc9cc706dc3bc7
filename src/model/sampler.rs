//! Token sampling with llama.cpp's defaults and order: repetition penalty, top-k, top-p, min-p,
//! temperature, then a draw from the remaining distribution. `temp <= 0` is greedy (argmax of
//! the raw logits, ties to the lowest id).

use std::collections::VecDeque;

/// Sampling settings; `Default` gives llama.cpp's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    pub temp: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temp: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

/// A small, fast, seedable generator (SplitMix64 seeding a xoshiro256**).
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^ (x >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A seed from the clock and the process id, for a run or request that asks for a random one
/// (`-s -1`). A u32, as llama.cpp's seeds are: a seed printed for replay stays short.
pub fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    ((t as u64) ^ ((std::process::id() as u64) << 16)) & u64::from(u32::MAX)
}

pub struct Sampler {
    pub cfg: SamplerConfig,
    rng: Rng,
    recent: VecDeque<u32>,
    cand: Vec<(u32, f32)>,
}

/// Index of the largest value (lowest index on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Sampler {
        let rng = Rng::new(cfg.seed);
        Sampler {
            cfg,
            rng,
            recent: VecDeque::new(),
            cand: Vec::new(),
        }
    }

    /// Records a token in the penalty window (prompt tokens too, as llama.cpp does).
    pub fn accept(&mut self, token: u32) {
        if self.cfg.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.cfg.repeat_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    /// Picks the next token from `logits` (which it may modify).
    pub fn sample(&mut self, logits: &mut [f32]) -> u32 {
        let cfg = &self.cfg;
        if cfg.repeat_penalty != 1.0 {
            let mut seen: Vec<u32> = self.recent.iter().copied().collect();
            seen.sort_unstable();
            seen.dedup();
            for t in seen {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = if *l <= 0.0 {
                        *l * cfg.repeat_penalty
                    } else {
                        *l / cfg.repeat_penalty
                    };
                }
            }
        }
        if cfg.temp <= 0.0 {
            return argmax(logits);
        }
        let cand = &mut self.cand;
        cand.clear();
        cand.extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)));
        let by_logit_desc =
            |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if cfg.top_k > 0 && cfg.top_k < cand.len() {
            cand.select_nth_unstable_by(cfg.top_k - 1, by_logit_desc);
            cand.truncate(cfg.top_k);
        }
        cand.sort_unstable_by(by_logit_desc);
        if cfg.top_p < 1.0 {
            let probs = softmax(cand);
            let mut cum = 0.0;
            let mut keep = cand.len();
            for (i, p) in probs.iter().enumerate() {
                cum += p;
                if cum >= cfg.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep.max(1));
        }
        if cfg.min_p > 0.0 && !cand.is_empty() {
            let threshold = cand[0].1 + cfg.min_p.ln();
            let keep = cand.iter().take_while(|c| c.1 >= threshold).count();
            cand.truncate(keep.max(1));
        }
        for c in cand.iter_mut() {
            c.1 /= cfg.temp;
        }
        let probs = softmax(cand);
        let r = self.rng.next_f64();
        let mut cum = 0.0;
        for (c, p) in cand.iter().zip(&probs) {
            cum += p;
            if r < cum {
                return c.0;
            }
        }
        cand.last().map_or(0, |c| c.0)
    }
}

fn softmax(cand: &[(u32, f32)]) -> Vec<f64> {
    let max = cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = cand.iter().map(|c| ((c.1 - max) as f64).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|v| v / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_is_argmax_lowest_on_tie() {
        let mut s = Sampler::new(SamplerConfig {
            temp: 0.0,
            ..Default::default()
        });
        assert_eq!(s.sample(&mut [0.1, 2.0, 2.0, -1.0]), 1);
    }

    #[test]
    fn same_seed_same_draws_and_top_k_one_is_greedy() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut s = Sampler::new(SamplerConfig {
                seed,
                temp: 1.0,
                min_p: 0.0,
                top_p: 1.0,
                top_k: 0,
                ..Default::default()
            });
            (0..50)
                .map(|_| s.sample(&mut logits.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let mut s = Sampler::new(SamplerConfig {
            top_k: 1,
            temp: 1.0,
            ..Default::default()
        });
        assert_eq!(s.sample(&mut logits.clone()), argmax(&logits));
    }

    #[test]
    fn repetition_penalty_demotes_recent_tokens() {
        let mut s = Sampler::new(SamplerConfig {
            temp: 0.0,
            repeat_penalty: 2.0,
            ..Default::default()
        });
        s.accept(0);
        // token 0 (logit 3) becomes 1.5 < token 1's 2.0
        assert_eq!(s.sample(&mut [3.0, 2.0, -1.0]), 1);
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        // With min_p = 0.5, only tokens within ln(0.5) of the best survive: never token 2.
        let mut s = Sampler::new(SamplerConfig {
            temp: 1.0,
            min_p: 0.5,
            top_k: 0,
            top_p: 1.0,
            seed: 3,
            ..Default::default()
        });
        for _ in 0..200 {
            let t = s.sample(&mut [1.0, 0.8, -5.0]);
            assert!(t == 0 || t == 1);
        }
    }
}
