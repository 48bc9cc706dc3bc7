//! `locus gen-model`: write a llama-shaped GGUF with random weights (a working byte-level BPE
//! vocabulary included), so large models can be benchmarked and tested without downloads.

use std::path::PathBuf;
use std::time::Instant;

use super::AppError;
use crate::kernels::GgmlType;
use crate::model::synth::{synth_model, SynthSpec};

#[derive(Clone, Debug)]
pub struct GenModelOptions {
    pub out: PathBuf,
    pub spec: SynthSpec,
}

/// Checks a spec for shapes the forward pass can run.
pub fn validate(spec: &SynthSpec) -> Result<(), AppError> {
    let bad = |m: String| Err(AppError::Usage(format!("gen-model: {m}")));
    let ty = spec.weight_type;
    if !matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::Bf16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q8_0
    ) {
        return bad(format!(
            "--type {} is not a weight type locus writes (F32, F16, BF16, Q4_0, Q4_1, Q8_0)",
            ty.name()
        ));
    }
    if spec.n_head == 0 || spec.n_head_kv == 0 || !spec.n_head.is_multiple_of(spec.n_head_kv) {
        return bad(format!(
            "--kv-heads {} must divide --heads {}",
            spec.n_head_kv, spec.n_head
        ));
    }
    if !spec.n_embd.is_multiple_of(spec.n_head) || !(spec.n_embd / spec.n_head).is_multiple_of(2) {
        return bad(format!(
            "--dim {} must be a multiple of 2 × --heads {}",
            spec.n_embd, spec.n_head
        ));
    }
    let block = ty.block_size();
    for (what, v) in [("--dim", spec.n_embd), ("--ffn", spec.n_ff)] {
        if v == 0 || v % block != 0 {
            return bad(format!(
                "{what} {v} must be a positive multiple of {} for {}",
                block,
                ty.name()
            ));
        }
    }
    if spec.n_vocab < 259 {
        return bad(format!(
            "--vocab {} is too small (the byte-level vocabulary needs 259 tokens)",
            spec.n_vocab
        ));
    }
    if spec.n_layer == 0 || spec.n_ctx_train == 0 {
        return bad("--layers and --ctx must be positive".into());
    }
    Ok(())
}

/// Generates the model and writes it atomically; returns the file size.
pub fn run(opts: &GenModelOptions) -> Result<u64, AppError> {
    validate(&opts.spec)?;
    let t = Instant::now();
    let w = synth_model(&opts.spec);
    w.write_atomic(&opts.out).map_err(|err| AppError::Io {
        path: opts.out.clone(),
        what: "cannot write the generated model",
        err,
    })?;
    let size = std::fs::metadata(&opts.out).map(|m| m.len()).unwrap_or(0);
    let s = &opts.spec;
    eprintln!(
        "locus: wrote {} ({:.1} MiB): dim {}, {} layers, ffn {}, {} heads / {} kv heads, vocab {}, {} weights, {:.1} s",
        opts.out.display(),
        size as f64 / (1 << 20) as f64,
        s.n_embd,
        s.n_layer,
        s.n_ff,
        s.n_head,
        s.n_head_kv,
        s.n_vocab,
        s.weight_type.name(),
        t.elapsed().as_secs_f64()
    );
    Ok(size)
}
