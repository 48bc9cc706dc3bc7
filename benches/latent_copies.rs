//! What a copy of the latent cache per node costs: one decode step of a DeepSeek-shape model
//! after `LOCUS_BENCH_CTX` tokens of context (default 4096), its pool of two threads run as one
//! group, and as two groups of one thread (as two nodes' threads run) with one copy of the cells
//! (both threads transposing it) or a copy each (each thread transposing its own). All run on
//! this machine's one node, so the last two differ only by what the copies cost; what they buy
//! (every read of the cells local) needs two sockets.
//!
//! The three run in alternating rounds (the order turned each round; this machine is shared and
//! drifts), each round timing `STEPS` decode steps of each; it prints each round's times and
//! the ratios to the first, then their medians.
//!
//! Run: `LOCUS_BENCH_LATENT=/path/to/deepseek2.gguf cargo bench --bench latent_copies` (a
//! V3-shape file: `locus gen-model F --arch deepseek2 --preset v3 --type Q4_K`; `LOCUS_BENCH_ROUNDS`
//! rounds, default 10). Without the variable it prints a SKIPPED line.

use std::time::Instant;

use locus::model::forward::{KvType, Lanes, State};
use locus::model::ModelFile;
use locus::pool::Pool;
use locus::runtime::LoadedModel;

/// Decode steps a configuration runs per round.
const STEPS: usize = 40;

/// A context of `n` tokens spread over the vocabulary (no token repeats in a row).
fn context(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 11) % vocab) as u32).collect()
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument would select nothing else here.
    let Some(path) = std::env::var_os("LOCUS_BENCH_LATENT") else {
        eprintln!("SKIPPED latent_copies: set LOCUS_BENCH_LATENT to a deepseek2 GGUF file");
        return;
    };
    let (ctx, rounds) = (
        env_usize("LOCUS_BENCH_CTX", 4096),
        env_usize("LOCUS_BENCH_ROUNDS", 10).max(1),
    );
    let file = ModelFile::open(std::path::Path::new(&path)).expect("the model file opens");
    let l = LoadedModel::load(&file, Instant::now()).expect("the model loads");
    assert!(l.model.config.mla.is_some(), "not a latent-attention model");
    let tokens = context(ctx, l.model.config.n_vocab);
    // (name, pool, the groups the state keeps copies for).
    let runs = [
        ("one group", Pool::new(2, |_| {}), 1),
        ("two groups, one copy", Pool::grouped(&[1, 1], |_| {}), 1),
        ("two groups, two copies", Pool::grouped(&[1, 1], |_| {}), 2),
    ];
    let mut states: Vec<State> = runs
        .iter()
        .map(|(_, pool, groups)| {
            let lanes = Lanes {
                threads: pool.threads(),
                groups: *groups,
            };
            let mut s = l.model.new_state(ctx + 1, lanes, KvType::F16);
            l.model.eval(pool, &mut s, &tokens, tokens.len(), |_, _| {});
            s
        })
        .collect();
    let mut ratios = vec![Vec::new(); runs.len()];
    for round in 0..rounds {
        let mut ms = vec![0.0; runs.len()];
        let mut order: Vec<usize> = (0..runs.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (pool, s) = (&runs[i].1, &mut states[i]);
            let t = Instant::now();
            for _ in 0..STEPS {
                l.model.forward(pool, s, 1, true);
                // The next step writes the same cell again: the context stays `ctx` tokens.
                s.pos -= 1;
            }
            ms[i] = t.elapsed().as_secs_f64() * 1e3 / STEPS as f64;
        }
        let line: Vec<String> = (runs.iter().zip(&ms))
            .map(|((name, _, _), m)| format!("{name} {m:.2} ms"))
            .collect();
        println!("round {round}: {}", line.join(", "));
        for (r, m) in ratios.iter_mut().zip(&ms) {
            r.push(m / ms[1]);
        }
    }
    for ((name, _, _), r) in runs.iter().zip(ratios) {
        println!(
            "{name}: median {:.3} of two groups with one copy",
            median(r)
        );
    }
}
