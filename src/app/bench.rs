//! `locus bench`: prompt processing and decode speed in llama-bench's shape. For every model ×
//! thread count: `pp<P>` evaluates P random tokens from an empty cache, `tg<N>` generates N
//! tokens one at a time; each repeated `-r` times, reported as mean ± sd tokens/s. A warm-up
//! run precedes the timed ones (as llama-bench does), so page faults are not timed.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use super::{AppError, Loaded};
use crate::model::llama::KvType;
use crate::model::sampler::Rng;
use crate::model::ModelFile;
use crate::pool::Pool;

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub models: Vec<PathBuf>,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub reps: usize,
    pub threads: Vec<usize>,
    pub json: bool,
}

/// One row of results.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRow {
    pub model: String,
    pub size_bytes: u64,
    pub params: u64,
    pub kernels: String,
    pub threads: usize,
    /// `pp128` or `tg64`.
    pub test: String,
    pub samples: Vec<f64>,
}

impl BenchRow {
    pub fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / self.samples.len().max(1) as f64
    }

    /// Sample standard deviation (0 for a single sample).
    pub fn sd(&self) -> f64 {
        let n = self.samples.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.samples.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

fn random_tokens(rng: &mut Rng, n: usize, vocab: usize) -> Vec<u32> {
    (0..n)
        .map(|_| (rng.next_u64() % vocab as u64) as u32)
        .collect()
}

/// Times `n` prompt tokens evaluated in batches from an empty cache; tokens/s.
fn time_pp(l: &Loaded, pool: &Pool, tokens: &[u32]) -> f64 {
    let mut s = l
        .llama
        .new_state(tokens.len().max(1), pool.threads(), KvType::F16);
    let t = Instant::now();
    l.llama.eval(
        pool,
        &mut s,
        tokens,
        tokens.len().saturating_sub(1),
        |_, _| {},
    );
    tokens.len() as f64 / t.elapsed().as_secs_f64()
}

/// Times `n` single-token decode steps from an empty cache; tokens/s.
fn time_tg(l: &Loaded, pool: &Pool, tokens: &[u32]) -> f64 {
    let mut s = l
        .llama
        .new_state(tokens.len().max(1), pool.threads(), KvType::F16);
    let t = Instant::now();
    for &tok in tokens {
        l.llama.forward(pool, &mut s, tok, true);
    }
    tokens.len() as f64 / t.elapsed().as_secs_f64()
}

/// Runs every model × threads × test combination.
pub fn bench(opts: &BenchOptions) -> Result<Vec<BenchRow>, AppError> {
    let mut rows = Vec::new();
    for path in &opts.models {
        let file = ModelFile::open(path)?;
        let l = Loaded::load(&file, Instant::now())?;
        let c = &l.llama.config;
        let g = file.gguf()?;
        let params: u64 = g.tensors.iter().map(|t| t.n_elements()).sum();
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut rng = Rng::new(42);
        for &t in &opts.threads {
            let pool = Pool::new(t, |_| {});
            let tests = [("pp", opts.n_prompt), ("tg", opts.n_gen)];
            for (kind, n) in tests.into_iter().filter(|(_, n)| *n > 0) {
                let run = |tokens: &[u32]| {
                    if kind == "pp" {
                        time_pp(&l, &pool, tokens)
                    } else {
                        time_tg(&l, &pool, tokens)
                    }
                };
                run(&random_tokens(&mut rng, n, c.n_vocab)); // warm-up
                let samples = (0..opts.reps)
                    .map(|_| run(&random_tokens(&mut rng, n, c.n_vocab)))
                    .collect();
                rows.push(BenchRow {
                    model: name.clone(),
                    size_bytes: file.bytes().len() as u64,
                    params,
                    kernels: l.llama.kernels.tier.name().to_string(),
                    threads: t,
                    test: format!("{kind}{n}"),
                    samples,
                });
            }
        }
    }
    Ok(rows)
}

/// llama-bench's markdown table.
pub fn render_markdown(rows: &[BenchRow]) -> String {
    let mut s = String::from("| model | size | params | kernels | threads | test | t/s |\n");
    s.push_str("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {:.2} MiB | {:.2} M | {} | {} | {} | {:.2} ± {:.2} |",
            r.model,
            r.size_bytes as f64 / (1 << 20) as f64,
            r.params as f64 / 1e6,
            r.kernels,
            r.threads,
            r.test,
            r.mean(),
            r.sd()
        );
    }
    s
}

fn json_str(v: &str) -> String {
    let mut o = String::from("\"");
    for ch in v.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

pub fn render_json(rows: &[BenchRow]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            let samples: Vec<String> = r.samples.iter().map(|x| format!("{x:.4}")).collect();
            format!(
                "{{\"model\":{},\"size_bytes\":{},\"params\":{},\"kernels\":{},\"threads\":{},\"test\":{},\"mean_tps\":{:.4},\"sd_tps\":{:.4},\"samples\":[{}]}}",
                json_str(&r.model),
                r.size_bytes,
                r.params,
                json_str(&r.kernels),
                r.threads,
                json_str(&r.test),
                r.mean(),
                r.sd(),
                samples.join(",")
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// `locus bench`.
pub fn run(opts: &BenchOptions) -> Result<Vec<BenchRow>, AppError> {
    let rows = bench(opts)?;
    if opts.json {
        println!("{}", render_json(&rows));
    } else {
        print!("{}", render_markdown(&rows));
    }
    Ok(rows)
}
