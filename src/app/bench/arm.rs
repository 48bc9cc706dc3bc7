//! One arm, as the child process (`locus bench --arm …`) runs it: open, place and load the
//! model, time `pp`/`tg` after a warm-up, audit where the weights live, and print the
//! [`ArmReport`] as one JSON line, which the parent reads back with [`ArmReport::from_json`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use super::{file_name, node_map};
use crate::app::AppError;
use crate::json::Json;
use crate::model::forward::KvType;
use crate::model::sampler::Rng;
use crate::model::ModelFile;
use crate::placement::audit::audit;
use crate::placement::Options;
use crate::pool::Pool;
use crate::runtime::LoadedModel;
use crate::sys::memory;

/// One arm, as the child process runs it.
#[derive(Clone, Debug)]
pub struct ArmOptions {
    pub model: PathBuf,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub reps: usize,
    /// Mode and thread count set.
    pub numa: Options,
    pub cold: bool,
}

/// What one arm measured (the child's JSON line, read back by the parent).
#[derive(Clone, Debug, PartialEq)]
pub struct ArmReport {
    pub model: String,
    pub size_bytes: u64,
    pub params: u64,
    pub kernels: String,
    /// The mode asked for and the mode in effect (after `auto` and any fallback).
    pub requested: String,
    pub mode: String,
    pub threads: usize,
    /// (node, threads) per slot of the plan; `None` = unpinned.
    pub slots: Vec<(Option<u32>, usize)>,
    /// Open, place and load, milliseconds.
    pub load_ms: f64,
    /// How fast the weight copies were built (bytes copied ÷ the build's time), GB/s; `None`
    /// where the arm reads the file's mapping.
    pub place_gb_per_s: Option<f64>,
    pub cold: bool,
    /// Bytes of the model file in the page cache when the arm started (after `--cold`'s release).
    pub cached_bytes: Option<u64>,
    pub file_bytes: u64,
    pub pp: Vec<f64>,
    pub tg: Vec<f64>,
    /// Experts per layer (0: a dense model), and per test how many tokens chose each expert
    /// over its timed runs (`n_layer × n_expert`, layer-major; empty for a dense model).
    pub n_expert: usize,
    pub pp_experts: Vec<u64>,
    pub tg_experts: Vec<u64>,
    /// From the audit, after the timed runs.
    pub bytes_by_node: BTreeMap<u32, u64>,
    pub unknown_bytes: u64,
    pub locality: Option<f64>,
    pub page_source: String,
    /// Weight bytes all threads read per token (the audit's per-thread reads, summed).
    pub read_bytes_per_token: u64,
    pub page_cache_after: u64,
    pub warnings: Vec<String>,
}

/// `sum += more`, element by element (`sum` grows to `more`'s length).
pub(super) fn add_counts(sum: &mut Vec<u64>, more: &[u64]) {
    if sum.len() < more.len() {
        sum.resize(more.len(), 0);
    }
    for (s, m) in sum.iter_mut().zip(more) {
        *s += m;
    }
}

fn random_tokens(rng: &mut Rng, n: usize, vocab: usize) -> Vec<u32> {
    (0..n)
        .map(|_| (rng.next_u64() % vocab as u64) as u32)
        .collect()
}

/// Times `n` prompt tokens evaluated in batches from an empty cache; tokens/s.
fn time_pp(l: &LoadedModel, pool: &Pool, tokens: &[u32]) -> Result<(f64, Vec<u64>), AppError> {
    let mut s = l
        .model
        .try_new_state(tokens.len().max(1), pool, KvType::F16)?;
    let t = Instant::now();
    l.model.eval(
        pool,
        &mut s,
        tokens,
        tokens.len().saturating_sub(1),
        |_, _| {},
    );
    let tps = tokens.len() as f64 / t.elapsed().as_secs_f64();
    Ok((tps, s.expert_counts().unwrap_or_default().to_vec()))
}

/// Times `n` single-token decode steps from an empty cache; tokens/s.
fn time_tg(l: &LoadedModel, pool: &Pool, tokens: &[u32]) -> Result<(f64, Vec<u64>), AppError> {
    let mut s = l
        .model
        .try_new_state(tokens.len().max(1), pool, KvType::F16)?;
    let t = Instant::now();
    for &tok in tokens {
        l.model.forward(pool, &mut s, tok, true);
    }
    let tps = tokens.len() as f64 / t.elapsed().as_secs_f64();
    Ok((tps, s.expert_counts().unwrap_or_default().to_vec()))
}

/// Runs one arm in this process: (cold release,) place, load, warm up, time, audit.
pub fn measure_arm(o: &ArmOptions) -> Result<ArmReport, AppError> {
    let started = Instant::now();
    let file = ModelFile::open(&o.model)?;
    let mut warnings = Vec::new();
    if o.cold {
        if let Err(e) = memory::fadvise_dontneed(file.fd()) {
            warnings.push(format!(
                "--cold: {e}: the model file may still be in the page cache"
            ));
        }
    }
    // mincore faults nothing in: it only asks which of the mapping's pages are cached.
    let cached_bytes = memory::resident_bytes(file.bytes()).ok();
    if let (true, Some(b)) = (o.cold, cached_bytes) {
        let n = file.bytes().len().max(1) as u64;
        if b * 100 > n {
            warnings.push(format!(
                "--cold: {:.0}% of the model file is still in the page cache after the release (another process maps it?); this arm is not cold",
                b as f64 * 100.0 / n as f64
            ));
        }
    }
    let p = crate::runtime::place(&file, &o.numa, false)?;
    let l = LoadedModel::load_placed(&file, &p, started)?;
    let pool = crate::runtime::pool_of(&p)?;
    let c = &l.model.config;
    // The largest state a test needs, allocated once up front: a -p or -n no memory holds is
    // an error naming the size here, not an abort inside a timed run.
    let longest = o.n_prompt.max(o.n_gen).max(1);
    drop(
        l.model
            .try_new_state(longest, &pool, KvType::F16)
            .map_err(|e| match e {
                crate::model::ModelError::ContextTooLarge { .. } => AppError::Usage(format!(
                    "bench: a test of {longest} tokens (-p {}, -n {}) needs a KV cache this \
                     machine cannot hold; use fewer tokens",
                    o.n_prompt, o.n_gen
                )),
                e => e.into(),
            })?,
    );
    let g = file.gguf()?;
    let params: u64 = g.tensors.iter().map(|t| t.n_elements()).sum();
    let mut rng = Rng::new(42);
    // Per test its samples and, for a mixture of experts, how often each expert was chosen
    // over the timed runs (the warm-up not counted).
    let mut timed = |kind: &str, n: usize| -> Result<(Vec<f64>, Vec<u64>), AppError> {
        if n == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let run = |tokens: &[u32]| {
            if kind == "pp" {
                time_pp(&l, &pool, tokens)
            } else {
                time_tg(&l, &pool, tokens)
            }
        };
        run(&random_tokens(&mut rng, n, c.n_vocab))?; // warm-up
        let mut samples = Vec::with_capacity(o.reps);
        let mut experts: Vec<u64> = Vec::new();
        for _ in 0..o.reps {
            let (tps, counts) = run(&random_tokens(&mut rng, n, c.n_vocab))?;
            samples.push(tps);
            add_counts(&mut experts, &counts);
        }
        Ok((samples, experts))
    };
    let (pp, pp_experts) = timed("pp", o.n_prompt)?;
    let (tg, tg_experts) = timed("tg", o.n_gen)?;
    // After the timed runs every weight page a run reads has been read (and, for the modes
    // that read the file mapping, placed by that first read), as `locus audit` arranges.
    if p.plan.store == crate::placement::Store::File && pp.is_empty() && tg.is_empty() {
        let mut state = l.model.try_new_state(1, &pool, KvType::F16)?;
        l.model
            .forward(&pool, &mut state, l.tokenizer.bos().unwrap_or(0), true);
    }
    let a = audit(&p, &l.model.weights, &file);
    warnings.extend(p.warnings.iter().cloned());
    warnings.extend(a.warnings.iter().cloned());
    Ok(ArmReport {
        model: file_name(&o.model),
        size_bytes: file.bytes().len() as u64,
        params,
        kernels: l.model.kernels.tier.name().to_string(),
        requested: p.plan.requested.name().to_string(),
        mode: p.plan.mode.name().to_string(),
        threads: pool.threads(),
        slots: p
            .plan
            .slots
            .iter()
            .map(|s| (s.node.map(|n| n.0), s.threads.len()))
            .collect(),
        load_ms: l.load_ms,
        place_gb_per_s: p.placed_gb_per_s(),
        cold: o.cold,
        cached_bytes,
        file_bytes: a.file_bytes,
        pp,
        tg,
        n_expert: c.moe.map_or(0, |m| m.n_expert),
        pp_experts,
        tg_experts,
        bytes_by_node: a.bytes_by_node.clone(),
        unknown_bytes: a.unknown_bytes,
        locality: a.locality,
        page_source: a.source.name().to_string(),
        read_bytes_per_token: a.threads.iter().map(|t| t.read_bytes).sum(),
        page_cache_after: a.page_cache_bytes,
        warnings,
    })
}

/// `locus bench --arm …` (the child): measures one arm and prints its JSON line.
pub fn run_arm(o: &ArmOptions) -> Result<ArmReport, AppError> {
    // Test hook: `LOCUS_FAULT=arm-signal:N` makes the child die of signal N, as an arm killed
    // by the out-of-memory killer (9) or crashing (11) would.
    if let Some(sig) = crate::placement::fault("arm-signal").and_then(|v| v.parse().ok()) {
        crate::sys::signal::raise(sig);
    }
    let r = measure_arm(o)?;
    super::super::write_stdout(&format!("{}\n", r.to_json()))?;
    Ok(r)
}

impl ArmReport {
    /// One line of JSON (the child's output).
    pub fn to_json(&self) -> String {
        let slots = self
            .slots
            .iter()
            .map(|&(node, k)| Json::obj([("node", node.into()), ("threads", k.into())]))
            .collect();
        Json::obj([
            ("model", Json::str(&self.model)),
            ("size_bytes", self.size_bytes.into()),
            ("params", self.params.into()),
            ("kernels", Json::str(&self.kernels)),
            ("requested", Json::str(&self.requested)),
            ("mode", Json::str(&self.mode)),
            ("threads", self.threads.into()),
            ("slots", slots),
            ("load_ms", self.load_ms.into()),
            ("place_gb_per_s", self.place_gb_per_s.into()),
            ("cold", self.cold.into()),
            ("cached_bytes", self.cached_bytes.into()),
            ("file_bytes", self.file_bytes.into()),
            ("pp", self.pp.iter().copied().collect()),
            ("tg", self.tg.iter().copied().collect()),
            ("n_expert", self.n_expert.into()),
            ("pp_experts", self.pp_experts.iter().copied().collect()),
            ("tg_experts", self.tg_experts.iter().copied().collect()),
            ("bytes_by_node", node_map(&self.bytes_by_node)),
            ("unknown_bytes", self.unknown_bytes.into()),
            ("locality", self.locality.into()),
            ("page_source", Json::str(&self.page_source)),
            ("read_bytes_per_token", self.read_bytes_per_token.into()),
            ("page_cache_after", self.page_cache_after.into()),
            ("warnings", self.warnings.iter().map(Json::str).collect()),
        ])
        .to_string()
    }

    /// Reads back [`ArmReport::to_json`]'s line.
    pub fn from_json(text: &str) -> Result<ArmReport, String> {
        let v = Json::parse(text).map_err(|e| e.to_string())?;
        let num = |k: &str| -> Result<f64, String> {
            v.get(k)
                .and_then(Json::as_f64)
                .ok_or_else(|| format!("no number '{k}'"))
        };
        let uint = |k: &str| -> Result<u64, String> {
            let x = num(k)?;
            if x < 0.0 || x.fract() != 0.0 {
                return Err(format!("'{k}' is not a whole number"));
            }
            Ok(x as u64)
        };
        let string = |k: &str| -> Result<String, String> {
            v.get(k)
                .and_then(Json::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("no string '{k}'"))
        };
        let floats = |k: &str| -> Result<Vec<f64>, String> {
            v.get(k)
                .and_then(Json::as_array)
                .ok_or_else(|| format!("no array '{k}'"))?
                .iter()
                .map(|x| {
                    x.as_f64()
                        .ok_or_else(|| format!("'{k}' holds a non-number"))
                })
                .collect()
        };
        let counts = |k: &str| -> Result<Vec<u64>, String> {
            Ok(floats(k)?.into_iter().map(|x| x as u64).collect())
        };
        let opt_num = |k: &str| -> Result<Option<f64>, String> {
            match v.get(k) {
                Some(Json::Null) => Ok(None),
                Some(x) => x
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| format!("'{k}' is not a number")),
                None => Err(format!("no '{k}'")),
            }
        };
        let slots = v
            .get("slots")
            .and_then(Json::as_array)
            .ok_or("no array 'slots'")?
            .iter()
            .map(|s| {
                let node = match s.get("node") {
                    Some(Json::Null) => None,
                    Some(n) => Some(n.as_f64().ok_or("slot node is not a number")? as u32),
                    None => return Err("slot without 'node'".to_string()),
                };
                let k = s
                    .get("threads")
                    .and_then(Json::as_f64)
                    .ok_or("slot without 'threads'")?;
                Ok((node, k as usize))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut bytes_by_node = BTreeMap::new();
        match v.get("bytes_by_node") {
            Some(Json::Obj(kv)) => {
                for (k, b) in kv {
                    let n: u32 = k.parse().map_err(|_| format!("bad node id '{k}'"))?;
                    bytes_by_node.insert(n, b.as_f64().ok_or("bad byte count")? as u64);
                }
            }
            _ => return Err("no object 'bytes_by_node'".into()),
        }
        let warnings = v
            .get("warnings")
            .and_then(Json::as_array)
            .ok_or("no array 'warnings'")?
            .iter()
            .map(|w| w.as_str().map(str::to_string).ok_or("a non-string warning"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ArmReport {
            model: string("model")?,
            size_bytes: uint("size_bytes")?,
            params: uint("params")?,
            kernels: string("kernels")?,
            requested: string("requested")?,
            mode: string("mode")?,
            threads: uint("threads")? as usize,
            slots,
            load_ms: num("load_ms")?,
            place_gb_per_s: opt_num("place_gb_per_s")?,
            cold: matches!(v.get("cold"), Some(Json::Bool(true))),
            cached_bytes: opt_num("cached_bytes")?.map(|x| x as u64),
            file_bytes: uint("file_bytes")?,
            pp: floats("pp")?,
            tg: floats("tg")?,
            n_expert: uint("n_expert")? as usize,
            pp_experts: counts("pp_experts")?,
            tg_experts: counts("tg_experts")?,
            bytes_by_node,
            unknown_bytes: uint("unknown_bytes")?,
            locality: opt_num("locality")?,
            page_source: string("page_source")?,
            read_bytes_per_token: uint("read_bytes_per_token")?,
            page_cache_after: uint("page_cache_after")?,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> ArmReport {
        ArmReport {
            model: "a \"b\".gguf".into(),
            size_bytes: 123,
            params: 45,
            kernels: "avx2".into(),
            requested: "auto".into(),
            mode: "off".into(),
            threads: 2,
            slots: vec![(None, 2), (Some(1), 3)],
            load_ms: 12.5,
            place_gb_per_s: Some(1.75),
            cold: true,
            cached_bytes: None,
            file_bytes: 4096,
            pp: vec![1.5, 2.25],
            tg: vec![],
            n_expert: 2,
            pp_experts: vec![3, 0, 1, 2],
            tg_experts: vec![],
            bytes_by_node: [(0, 10), (3, 20)].into_iter().collect(),
            unknown_bytes: 0,
            locality: Some(0.5),
            page_source: "move_pages".into(),
            read_bytes_per_token: 999,
            page_cache_after: 0,
            warnings: vec!["line\nbreak ünïcode".into()],
        }
    }

    #[test]
    fn arm_report_round_trips() {
        let r = report();
        assert_eq!(ArmReport::from_json(&r.to_json()).unwrap(), r);
    }

    #[test]
    fn bad_reports_are_errors_not_panics() {
        let good = report().to_json();
        for cut in 0..good.len() {
            if good.is_char_boundary(cut) {
                assert!(ArmReport::from_json(&good[..cut]).is_err(), "{cut}");
            }
        }
        assert!(ArmReport::from_json(&good.replace("\"tg\"", "\"tx\"")).is_err());
        assert!(ArmReport::from_json(&"[".repeat(100)).is_err());
        assert!(ArmReport::from_json(&format!("{good} x")).is_err());
    }
}
