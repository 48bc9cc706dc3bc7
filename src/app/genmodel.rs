//! `locus gen-model`: write a GGUF of any supported family with random weights (a working
//! byte-level BPE vocabulary included), so large models can be benchmarked and tested without
//! downloads.

use std::path::PathBuf;
use std::time::Instant;

use super::AppError;
use crate::kernels::blocks::QK;
use crate::kernels::GgmlType;
use crate::model::arch::Arch;
use crate::model::synth::{write_synth_model, SynthSpec};

/// The largest value of any one shape option (`--dim`, `--vocab`, …): 2²⁴, beyond every
/// model published; the tensor sizes they multiply to are checked as well.
pub const MAX_DIM: usize = 1 << 24;
/// The most layers (published models have up to a few hundred).
const MAX_LAYERS: usize = 4096;
/// The largest vocabulary (published ones have up to 262,144 tokens; its strings are held in
/// memory while the file is written).
const MAX_VOCAB: usize = 1 << 21;
/// The largest tensor gen-model writes, in elements (2³⁶ = 64 Gi: a 256 GiB F32 matrix).
const MAX_TENSOR_ELEMENTS: u64 = 1 << 36;

#[derive(Clone, Debug)]
pub struct GenModelOptions {
    pub out: PathBuf,
    pub spec: SynthSpec,
}

/// Checks a spec for shapes the forward pass can run.
pub fn validate(spec: &SynthSpec) -> Result<(), AppError> {
    let bad = |m: String| Err(AppError::Usage(format!("gen-model: {m}")));
    let ty = spec.weight_type;
    if !ty.supported() {
        return bad(format!(
            "--type {} is not a weight type locus writes ({})",
            ty.name(),
            GgmlType::supported_names()
        ));
    }
    if spec.n_head == 0 || spec.n_head_kv == 0 || !spec.n_head.is_multiple_of(spec.n_head_kv) {
        return bad(format!(
            "--kv-heads {} must divide --heads {}",
            spec.n_head_kv, spec.n_head
        ));
    }
    if spec.head_dim == 0
        && (!spec.n_embd.is_multiple_of(spec.n_head)
            || !(spec.n_embd / spec.n_head).is_multiple_of(2))
    {
        return bad(format!(
            "--dim {} must be a multiple of 2 × --heads {} (or give --head-dim)",
            spec.n_embd, spec.n_head
        ));
    }
    if !spec.head_dim().is_multiple_of(2) {
        return bad(format!("--head-dim {} must be even", spec.head_dim));
    }
    if spec.sliding_window > 0 && !matches!(spec.arch, Arch::Gemma3 | Arch::Gemma4 | Arch::GptOss) {
        return bad(format!(
            "--window is for --arch gemma3, gemma4 or gpt-oss, not {}",
            spec.arch.name()
        ));
    }
    if spec.arch == Arch::Gemma4 {
        validate_gemma4(spec)?;
    } else if spec.g4 != Default::default() {
        return bad(format!(
            "--global-head-dim, --global-kv-heads, --global-rope-dims, --softcap, --ple, \
             --shared-kv-layers and --double-wide-ffn are for --arch gemma4, not {}",
            spec.arch.name()
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
    for (what, v) in [
        ("--dim", spec.n_embd),
        ("--ffn", spec.n_ff),
        ("--vocab", spec.n_vocab),
        ("--layers", spec.n_layer),
        ("--heads", spec.n_head),
        ("--ctx", spec.n_ctx_train),
    ] {
        if v > MAX_DIM {
            return bad(format!("{what} {v} is larger than {MAX_DIM}"));
        }
    }
    if spec.n_layer > MAX_LAYERS {
        return bad(format!(
            "--layers {} is more than {MAX_LAYERS}",
            spec.n_layer
        ));
    }
    if spec.n_vocab > MAX_VOCAB {
        return bad(format!("--vocab {} is more than {MAX_VOCAB}", spec.n_vocab));
    }
    // Every matrix: the embedding (vocab × dim), attention's (dim × dim) and the FFN's (ffn × dim).
    for (what, rows) in [
        ("--vocab", spec.n_vocab),
        ("--dim", spec.n_embd),
        ("--ffn", spec.n_ff),
    ] {
        let n = rows as u64 * spec.n_embd as u64;
        if n > MAX_TENSOR_ELEMENTS {
            return bad(format!(
                "{what} {rows} × --dim {} = {n} weights in one matrix, more than {MAX_TENSOR_ELEMENTS}",
                spec.n_embd
            ));
        }
    }
    if spec.n_expert > 0 {
        if !matches!(
            spec.arch,
            Arch::Llama
                | Arch::Qwen3Moe
                | Arch::Glm4Moe
                | Arch::Deepseek2
                | Arch::GptOss
                | Arch::Gemma4
        ) {
            return bad(format!(
                "--experts is for --arch qwen3moe, glm4moe, deepseek2, gpt-oss, gemma4 or mixtral, \
                 not {}",
                spec.arch.name()
            ));
        }
        if spec.n_expert > crate::model::config::MAX_EXPERTS {
            return bad(format!(
                "--experts {} is more than llama.cpp's {}",
                spec.n_expert,
                crate::model::config::MAX_EXPERTS
            ));
        }
        if spec.n_expert_used == 0 || spec.n_expert_used > spec.n_expert {
            return bad(format!(
                "--experts-used {} must be between 1 and --experts {}",
                spec.n_expert_used, spec.n_expert
            ));
        }
        if spec.arch == Arch::Llama && spec.n_ff_exp != spec.n_ff {
            return bad(format!(
                "--expert-ffn {} must equal --ffn {} for mixtral (its experts are --ffn wide)",
                spec.n_ff_exp, spec.n_ff
            ));
        }
        if spec.n_ff_exp == 0 || !spec.n_ff_exp.is_multiple_of(block) {
            return bad(format!(
                "--expert-ffn {} must be a positive multiple of {} for {}",
                spec.n_ff_exp,
                block,
                ty.name()
            ));
        }
        let n = spec.n_expert as u64 * spec.n_ff_exp as u64 * spec.n_embd as u64;
        if n > MAX_TENSOR_ELEMENTS {
            return bad(format!(
                "--experts {} × --expert-ffn {} × --dim {} = {n} weights in one tensor, more \
                 than {MAX_TENSOR_ELEMENTS}",
                spec.n_expert, spec.n_ff_exp, spec.n_embd
            ));
        }
        validate_moe_knobs(spec)?;
    } else if matches!(spec.arch, Arch::Qwen3Moe | Arch::Glm4Moe | Arch::GptOss) {
        return bad(format!("--arch {} needs --experts", spec.arch.name()));
    }
    if spec.n_rot() > spec.head_dim() || !spec.n_rot().is_multiple_of(2) {
        return bad(format!(
            "--rope-dims {} must be even and at most the head size {}",
            spec.n_rot(),
            spec.head_dim()
        ));
    }
    if spec.n_nextn > 0 && spec.arch != Arch::Glm4Moe {
        return bad(format!(
            "--nextn is for --arch glm4moe, not {}",
            spec.arch.name()
        ));
    }
    if spec.arch == Arch::Deepseek2 {
        validate_latent(spec)?;
    }
    // The query projection (heads × head size) × --dim, checked after the matrices above
    // so that a huge --vocab or --dim is named first.
    let q_dim = spec.n_head as u64 * spec.head_dim() as u64;
    if q_dim > MAX_TENSOR_ELEMENTS / spec.n_embd as u64 {
        return bad(format!(
            "--heads {} × --head-dim {} is too large",
            spec.n_head,
            spec.head_dim()
        ));
    }
    // (deepseek2's heads feed attn_output through attn_v_b, checked above.)
    if spec.arch != Arch::Deepseek2 && !(q_dim as usize).is_multiple_of(ty.block_size()) {
        return bad(format!(
            "--heads × --head-dim = {q_dim} must be a multiple of {} for {}",
            ty.block_size(),
            ty.name()
        ));
    }
    Ok(())
}

/// A gemma4 spec: a window, and global layers whose heads divide the query heads, whose
/// rotated dimensions are even and within the head, and whose matrices are whole blocks.
fn validate_gemma4(spec: &SynthSpec) -> Result<(), AppError> {
    let bad = |m: String| Err(AppError::Usage(format!("gen-model: {m}")));
    let ty = spec.weight_type;
    if spec.sliding_window == 0 {
        return bad("--arch gemma4 needs --window (its sliding-window layers')".into());
    }
    let (hd, kv, rot) = spec.g4.global(spec);
    if kv == 0 || !spec.n_head.is_multiple_of(kv) {
        return bad(format!(
            "--global-kv-heads {kv} must divide --heads {}",
            spec.n_head
        ));
    }
    if hd == 0 || hd % 2 != 0 || hd > MAX_DIM || rot > hd || rot % 2 != 0 {
        return bad(format!(
            "--global-head-dim {hd} must be even and --global-rope-dims {rot} even and at most it"
        ));
    }
    let q_dim = spec.n_head as u64 * hd as u64;
    if q_dim > MAX_TENSOR_ELEMENTS / spec.n_embd as u64
        || !(q_dim as usize).is_multiple_of(ty.block_size())
    {
        return bad(format!(
            "--heads × --global-head-dim = {q_dim} must be a multiple of {} for {}",
            ty.block_size(),
            ty.name()
        ));
    }
    if !spec.g4.softcap.is_finite() || spec.g4.softcap < 0.0 {
        return bad(format!(
            "--softcap {} must be a non-negative number",
            spec.g4.softcap
        ));
    }
    let ple = spec.g4.ple as u64;
    if ple > 0
        && (!spec.g4.ple.is_multiple_of(ty.block_size())
            || ple * spec.n_layer as u64 > MAX_TENSOR_ELEMENTS / spec.n_vocab.max(1) as u64)
    {
        return bad(format!(
            "--ple {ple} must be a multiple of {} for {}, and --ple × --layers × --vocab at most \
             {MAX_TENSOR_ELEMENTS}",
            ty.block_size(),
            ty.name()
        ));
    }
    let shared = spec.g4.shared_kv;
    if shared > 0 {
        // llama.cpp's reuse rule: a shared sliding-window layer reads the cached layer before
        // last, a global one the last; both must exist and be of those kinds.
        let local = spec.gemma4_local_layers();
        let own = spec.n_layer.saturating_sub(shared);
        let kinds_fit = own >= 2
            && (own..spec.n_layer)
                .all(|il| local[own - if local[il] { 2 } else { 1 }] == local[il]);
        if !kinds_fit {
            return bad(format!(
                "--shared-kv-layers {shared} must leave at least 2 of the {} layers with a cache, \
                 the last of them global and the one before it sliding-window (see --swa-pattern)",
                spec.n_layer
            ));
        }
    }
    if spec.g4.double_wide && shared == 0 {
        return bad(
            "--double-wide-ffn widens the shared-KV layers: give --shared-kv-layers".into(),
        );
    }
    Ok(())
}

/// A deepseek2 spec's latent attention sizes: one latent KV head, a rotated part shorter than
/// the query head, and every matrix's rows of whole blocks of the weight type.
fn validate_latent(spec: &SynthSpec) -> Result<(), AppError> {
    let bad = |m: String| Err(AppError::Usage(format!("gen-model: {m}")));
    // Rows too narrow for the type's blocks take llama-quantize's 32-wide fallback.
    let (m, qh, block) = (spec.mla, spec.head_dim(), QK);
    if spec.n_head_kv != 1 {
        return bad(format!(
            "--kv-heads {} must be 1 for deepseek2 (its latent cache is one head every query \
             head reads)",
            spec.n_head_kv
        ));
    }
    if m.rope == 0 || m.rope % 2 != 0 || m.rope >= qh {
        return bad(format!(
            "--rope-dims {} must be even, positive and below --head-dim {qh}",
            m.rope
        ));
    }
    for (what, v) in [
        ("--kv-lora", m.kv_lora),
        ("--v-head-dim", m.v_head),
        ("--head-dim minus --rope-dims", qh - m.rope),
        ("--heads × --v-head-dim", spec.n_head * m.v_head),
    ] {
        if v == 0 || v % block != 0 || v > MAX_DIM {
            return bad(format!(
                "{what} = {v} must be a positive multiple of {block}, at most {MAX_DIM}"
            ));
        }
    }
    if m.q_lora % block != 0 || m.q_lora > MAX_DIM {
        return bad(format!(
            "--q-lora {} must be a multiple of {block}, at most {MAX_DIM}",
            m.q_lora
        ));
    }
    Ok(())
}

/// Checks the giant mixtures' knobs (shared experts, leading dense layers, groups) as the
/// loader will, so gen-model does not write a file locus refuses.
fn validate_moe_knobs(spec: &SynthSpec) -> Result<(), AppError> {
    let bad = |m: String| Err(AppError::Usage(format!("gen-model: {m}")));
    let m = &spec.moe;
    let giant = matches!(spec.arch, Arch::Glm4Moe | Arch::Deepseek2);
    if !giant && (m.n_shared > 0 || m.dense_lead > 0 || m.groups > 0 || m.probs_bias) {
        return bad(format!(
            "--shared-experts, --dense-layers, --expert-groups and --probs-bias are for --arch \
             glm4moe or deepseek2, not {}",
            spec.arch.name()
        ));
    }
    if giant && spec.n_expert > 0 && m.n_shared == 0 {
        return bad(format!(
            "--shared-experts must be at least 1 for --arch {}",
            spec.arch.name()
        ));
    }
    if m.n_shared > spec.n_expert {
        return bad(format!(
            "--shared-experts {} is more than --experts {}",
            m.n_shared, spec.n_expert
        ));
    }
    if m.dense_lead > spec.n_layer {
        return bad(format!(
            "--dense-layers {} is more than --layers {}",
            m.dense_lead, spec.n_layer
        ));
    }
    if m.groups > 1 {
        let per = spec.n_expert / m.groups;
        if m.groups >= spec.n_expert || !spec.n_expert.is_multiple_of(m.groups) || per < 2 {
            return bad(format!(
                "--expert-groups {} must divide --experts {} into groups of at least 2",
                m.groups, spec.n_expert
            ));
        }
        if m.groups_used == 0 || m.groups_used >= m.groups {
            return bad(format!(
                "--expert-groups-used {} must be between 1 and --expert-groups {} less one",
                m.groups_used, m.groups
            ));
        }
    }
    Ok(())
}

/// The file's size, roughly: every matrix in the weight type (1-D norms and metadata are small
/// beside them).
fn estimated_bytes(s: &SynthSpec) -> u64 {
    let ty = s.weight_type;
    let row = |cols: usize| ty.row_bytes(cols) as u64;
    let kv = (s.n_head_kv * s.head_dim()) as u64;
    let q = (s.n_head * s.head_dim()) as u64;
    let attn = q * row(s.n_embd) + s.n_embd as u64 * row(q as usize) + 2 * kv * row(s.n_embd);
    let heads = if s.tied { 1 } else { 2 };
    let layers = s.n_layer + s.n_nextn;
    let dense = s.moe.dense_lead.min(layers) as u64;
    let gated = |ff: usize| 2 * ff as u64 * row(s.n_embd) + s.n_embd as u64 * row(ff);
    let ffn = match s.n_expert {
        0 => gated(s.n_ff) * layers as u64,
        n => {
            let mut moe = n as u64 * gated(s.n_ff_exp) + gated(s.moe.n_shared * s.n_ff_exp);
            if s.arch == Arch::Gemma4 {
                // Its dense FFN beside the experts.
                moe += gated(s.n_ff);
            }
            dense * gated(s.n_ff) + (layers as u64 - dense) * moe
        }
    };
    // Gemma 4 E2B/E4B: the per-layer table and projections, and the double-wide FFNs' extra.
    let (w, all) = (s.g4.ple, (s.g4.ple * s.n_layer) as u64);
    let ple = match w {
        0 => 0,
        _ => (s.n_vocab as u64 * row(all as usize))
            .saturating_add(all * row(s.n_embd))
            .saturating_add(layers as u64 * (w as u64 * row(s.n_embd) + s.n_embd as u64 * row(w))),
    };
    let wide = match s.g4.double_wide {
        true => (s.g4.shared_kv as u64).saturating_mul(gated(s.n_ff)),
        false => 0,
    };
    (heads * s.n_vocab as u64 * row(s.n_embd))
        .saturating_add(attn.saturating_mul(layers as u64))
        .saturating_add(ffn)
        .saturating_add(ple)
        .saturating_add(wide)
}

/// Refuses a model bigger than the free space where it would be written (it would fill the
/// disk and then fail).
fn check_room(opts: &GenModelOptions) -> Result<(), AppError> {
    let dir = opts
        .out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let need = estimated_bytes(&opts.spec);
    if let Some(free) = crate::sys::fs::free_bytes(dir) {
        if need > free {
            return Err(AppError::Usage(format!(
                "gen-model: the model would take about {:.1} GiB, and {} has {:.1} GiB free",
                need as f64 / (1u64 << 30) as f64,
                dir.display(),
                free as f64 / (1u64 << 30) as f64
            )));
        }
    }
    Ok(())
}

/// Generates the model and writes it atomically; returns the file size.
pub fn run(opts: &GenModelOptions) -> Result<u64, AppError> {
    validate(&opts.spec)?;
    check_room(opts)?;
    let t = Instant::now();
    super::catch_interrupts();
    // Test hook: `LOCUS_FAULT=deaf` makes the writer ignore a first Ctrl-C, so only the second
    // one's handler can remove the temporary file (as when a write blocks).
    static NEVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let stop = match crate::placement::fault("deaf") {
        Some(_) => &NEVER,
        None => crate::sys::signal::interrupt_flag(),
    };
    write_synth_model(&opts.spec, &opts.out, stop)?;
    let size = std::fs::metadata(&opts.out).map(|m| m.len()).unwrap_or(0);
    let s = &opts.spec;
    crate::diagln!(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_a3b_preset_is_a_valid_qwen3_30b_a3b_layer() {
        let s = SynthSpec::a3b(GgmlType::Q4_0);
        assert!(validate(&s).is_ok(), "{:?}", validate(&s).err());
        assert_eq!(s.arch, Arch::Qwen3Moe);
        assert_eq!(
            (s.n_embd, s.head_dim(), s.n_head, s.n_head_kv),
            (2048, 128, 32, 4)
        );
        assert_eq!((s.n_expert, s.n_expert_used, s.n_ff_exp), (128, 8, 768));
        // About 4 GiB, almost all of it experts.
        let gib = estimated_bytes(&s) as f64 / (1u64 << 30) as f64;
        assert!((3.5..4.5).contains(&gib), "{gib} GiB");
    }

    #[test]
    fn the_gemma4_e2b_preset_is_a_valid_gemma4_e2b_layer_set() {
        let s = SynthSpec::gemma4_e2b(GgmlType::Q4_0);
        assert!(validate(&s).is_ok(), "{:?}", validate(&s).err());
        assert_eq!(
            (s.n_embd, s.n_ff, s.n_head, s.n_head_kv),
            (1536, 6144, 8, 1)
        );
        assert_eq!((s.head_dim(), s.sliding_window), (256, 512));
        assert_eq!(s.g4.global(&s), (512, 1, 128));
        assert_eq!((s.g4.ple, s.g4.shared_kv, s.g4.double_wide), (256, 5, true));
        // Layers 0–3 and 5–8 local: the shared layers read layer 3 (local) and 4 (global).
        let local = s.gemma4_local_layers();
        assert!(local[3] && !local[4] && local[8] && !local[9]);
        assert_eq!((s.g4.ffn_of(&s, 4), s.g4.ffn_of(&s, 5)), (6144, 12288));
        let mib = estimated_bytes(&s) as f64 / (1u64 << 20) as f64;
        assert!((250.0..450.0).contains(&mib), "{mib} MiB");
        // Refused: shared layers whose last cached layers are not global after local.
        assert!(validate(&SynthSpec {
            g4: crate::model::synth::SynthGemma4 {
                shared_kv: 6,
                ..s.g4
            },
            ..s.clone()
        })
        .is_err());
    }

    #[test]
    fn the_gemma4_31b_preset_is_a_valid_gemma4_31b_layer_set() {
        let s = SynthSpec::gemma4_31b(GgmlType::Q4_0);
        assert!(validate(&s).is_ok());
        assert_eq!(s.arch, Arch::Gemma4);
        assert_eq!((s.n_embd, s.n_ff, s.n_head), (5376, 21504, 32));
        assert_eq!(
            (s.head_dim(), s.n_head_kv, s.sliding_window),
            (256, 16, 1024)
        );
        assert_eq!(s.g4.global(&s), (512, 4, 128));
        // Without a window gemma4 is refused; the global knobs are its own.
        assert!(validate(&SynthSpec {
            sliding_window: 0,
            ..s.clone()
        })
        .is_err());
        let q3 = SynthSpec {
            arch: Arch::Qwen3,
            ..SynthSpec::tiny(GgmlType::F32)
        };
        assert!(validate(&SynthSpec { g4: s.g4, ..q3 }).is_err());
    }

    #[test]
    fn the_gemma4_a4b_preset_is_a_valid_gemma4_26b_a4b_layer_set() {
        let s = SynthSpec::gemma4_a4b(GgmlType::Q4_0);
        assert!(validate(&s).is_ok(), "{:?}", validate(&s).err());
        assert_eq!(s.arch, Arch::Gemma4);
        assert_eq!((s.n_embd, s.n_ff, s.n_head), (2816, 2112, 16));
        assert_eq!((s.n_expert, s.n_expert_used, s.n_ff_exp), (128, 8, 704));
        assert_eq!((s.head_dim(), s.n_head_kv), (256, 8));
        assert_eq!(s.g4.global(&s), (512, 2, 128));
        // A few GiB, almost all of it experts.
        let gib = estimated_bytes(&s) as f64 / (1u64 << 30) as f64;
        assert!((2.0..3.0).contains(&gib), "{gib} GiB");
    }

    #[test]
    fn the_glm45_air_preset_keeps_its_proportions() {
        let s = SynthSpec::glm45_air(GgmlType::Q4_0);
        assert!(validate(&s).is_ok(), "{:?}", validate(&s).err());
        assert_eq!(s.arch, Arch::Glm4Moe);
        // GLM-4.5-Air: query width 3 × dim, 12 query heads per KV head, RoPE on half a head.
        assert_eq!(s.n_head * s.head_dim(), 3 * s.n_embd);
        assert_eq!((s.n_head / s.n_head_kv, s.n_rot() * 2), (12, s.head_dim()));
        assert_eq!((s.n_expert, s.n_expert_used, s.moe.n_shared), (128, 8, 1));
        assert_eq!((s.moe.dense_lead, s.n_nextn), (1, 1));
        let gib = estimated_bytes(&s) as f64 / (1u64 << 30) as f64;
        assert!((3.5..5.0).contains(&gib), "{gib} GiB");
        // Groups that do not divide the experts are refused before anything is written.
        let bad = SynthSpec {
            moe: crate::model::synth::SynthMoe {
                groups: 3,
                groups_used: 1,
                ..s.moe.clone()
            },
            ..s
        };
        assert!(validate(&bad).is_err());
    }
}
