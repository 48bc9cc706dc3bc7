//! Qwen2, Qwen3, Gemma 3, the mixtures (Qwen3-MoE, Mixtral) and GLM-4.5 (glm4moe: shared
//! expert, leading dense layer, sigmoid routing with a selection bias, and a variant with
//! DeepSeek-V3's expert groups and weight scale) through the architecture seam: for a small
//! `locus gen-model` model of each family in F32, Q8_0 and Q4_0 (Q4_K for the mixtures), the full logits after two prompts equal llama.cpp's
//! (`-fa off`) bit for bit, and the greedy continuations of every golden prompt match for 32
//! steps. The Gemma 3 model has a 16-token sliding window on every other layer (the rest are
//! global), and its prompts are checked to run past the window, so the local layers' masking
//! is exercised. Its sliding-window cache is llama.cpp's ring of 768 cells; prompt 12 (1903
//! tokens) fills it twice over, and its logits after the prompt and after 32 decoded tokens
//! are compared bit for bit too, so the cells are reused in llama.cpp's order. Commands in
//! tests/data/golden/README.md ("Families").

mod common;
#[path = "common/golden.rs"]
mod golden;

use std::time::Instant;

use locus::model::forward::KvType;
use locus::model::sampler::argmax;
use locus::model::ModelFile;
use locus::pool::Pool;
use locus::runtime::LoadedModel;

/// `locus gen-model` shape shared by every family's model.
const SHAPE: [&str; 15] = [
    "--dim",
    "256",
    "--layers",
    "4",
    "--ffn",
    "512",
    "--heads",
    "4",
    "--kv-heads",
    "2",
    "--vocab",
    "1001",
    "--untied",
    "--seed",
    "11",
];

/// A test model's family: (label in the golden files' names, architecture, sliding window, its
/// extra `gen-model` arguments).
type Family = (&'static str, &'static str, usize, &'static [&'static str]);

const FAMILIES: [Family; 17] = [
    ("qwen2", "qwen2", 0, &[]),
    ("qwen3", "qwen3", 0, &["--head-dim", "128"]),
    (
        "gemma3",
        "gemma3",
        16,
        &["--head-dim", "128", "--window", "16", "--swa-pattern", "2"],
    ),
    // A window of 256 (a ring of 768 cells at n_ctx 2048), wide enough that a token's keys
    // from both sides of the ring's wrap meet in the same SIMD lanes of ggml's sums, so only
    // llama.cpp's cell order gives its bits. Golden data made with its ring (swa_full=false).
    (
        "gemma3w",
        "gemma3",
        256,
        &["--head-dim", "128", "--window", "256", "--swa-pattern", "2"],
    ),
    // Mixtures of experts: 8 experts of width 256, 2 per token, in every layer.
    (
        "qwen3moe",
        "qwen3moe",
        0,
        &[
            "--expert-ffn",
            "256",
            "--experts",
            "8",
            "--experts-used",
            "2",
        ],
    ),
    // Qwen3-30B-A3B's routing: 128 experts (narrow ones, 32 wide), 8 per token, so the
    // router's softmax runs whole 16-lane blocks and the top-k comes from libstdc++'s
    // introsort with its ties.
    (
        "qwen3moe128",
        "qwen3moe",
        0,
        &[
            "--expert-ffn",
            "32",
            "--experts",
            "128",
            "--experts-used",
            "8",
        ],
    ),
    // DeepSeek's latent attention, as DeepSeek-V2-Lite (a full-rank query) and as V2/V3 (the
    // low-rank query): heads of 64 unrotated and 32 rotated values, a latent vector of 128,
    // outputs of 64 values a head; every layer dense.
    ("deepseek2", "deepseek2", 0, &LATENT),
    ("deepseek2q", "deepseek2", 0, &LATENT_Q),
    // With YaRN (factor 4 over a 256-token original context, so the prompts run far past
    // it): DeepSeek-V3's log multiplier (0.1, the attention factor exactly 1) and V2's
    // (0.0707: DeepSeek's mscale rule gives another factor).
    ("deepseek2y", "deepseek2", 0, &LATENT_YARN_V3),
    ("deepseek2yv2", "deepseek2", 0, &LATENT_YARN_V2),
    // The mixtures: V2's (softmax routing, two shared experts, a dense first layer) and V3's
    // (sigmoid with the selection bias, 8 groups of which 4 hold the experts, one shared
    // expert, weights normalised and scaled by 2.5, a low-rank query, YaRN).
    ("deepseek2moe", "deepseek2", 0, &LATENT_MOE_V2),
    ("deepseek2v3", "deepseek2", 0, &LATENT_MOE_V3),
    // The older unabsorbed form (one attn_kv_b, per-head keys of 96 and values of 64 in the
    // cache), as llama.cpp still runs such files: V2-Lite's and V3's.
    ("deepseek2u", "deepseek2", 0, &LATENT_U),
    ("deepseek2uv3", "deepseek2", 0, &LATENT_MOE_V3_U),
    (
        "mixtral",
        "llama",
        0,
        &[
            "--arch",
            "mixtral",
            "--ffn",
            "256",
            "--experts",
            "8",
            "--experts-used",
            "2",
        ],
    ),
    // GLM-4.5 (glm4moe): Q/K/V biases, NEOX RoPE on half of each 128-wide head, layer 0 dense
    // (its FFN normed by `post_attention_norm`), then 16 experts of width 256, 4 per token,
    // with sigmoid gating, a selection bias, normalised weights (scale 1 written, so not
    // applied) and one shared expert; a NextN layer past the trunk that must be loaded past.
    ("glm4moe", "glm4moe", 0, &GLM4MOE),
    // The same with DeepSeek-V3's group-limited choice (4 groups of 4, the best 2 kept) and
    // its weights scale of 2.5.
    ("glm4moeg", "glm4moe", 0, &GLM4MOE_GROUPS),
];

/// gen-model's arguments of the glm4moe model.
const GLM4MOE: [&str; 16] = [
    "--head-dim",
    "128",
    "--rope-dims",
    "64",
    "--experts",
    "16",
    "--experts-used",
    "4",
    "--expert-ffn",
    "256",
    "--dense-layers",
    "1",
    "--weights-scale",
    "1",
    "--nextn",
    "1",
];

/// gen-model's arguments of the glm4moe model with expert groups.
const GLM4MOE_GROUPS: [&str; 18] = [
    "--head-dim",
    "128",
    "--rope-dims",
    "64",
    "--experts",
    "16",
    "--experts-used",
    "4",
    "--expert-ffn",
    "256",
    "--dense-layers",
    "1",
    "--expert-groups",
    "4",
    "--expert-groups-used",
    "2",
    "--weights-scale",
    "2.5",
];

/// The latent attention models' sizes (`gen-model --arch deepseek2`).
const LATENT: [&str; 10] = [
    "--kv-heads",
    "1",
    "--head-dim",
    "96",
    "--kv-lora",
    "128",
    "--rope-dims",
    "32",
    "--v-head-dim",
    "64",
];
/// `a` followed by `b` (`M` = `N` + `K`).
const fn cat<const N: usize, const K: usize, const M: usize>(
    a: [&'static str; N],
    b: [&'static str; K],
) -> [&'static str; M] {
    let mut out = [""; M];
    let mut i = 0;
    while i < N + K {
        out[i] = if i < N { a[i] } else { b[i - N] };
        i += 1;
    }
    out
}

/// V2/V3's low-rank query.
const LATENT_Q: [&str; 12] = cat(LATENT, ["--q-lora", "96"]);

/// YaRN by 4, with V3's log multiplier and V2's.
const LATENT_YARN_V3: [&str; 16] = cat(LATENT_Q, ["--yarn", "4", "--yarn-log-mul", "0.1"]);
const LATENT_YARN_V2: [&str; 16] = cat(LATENT_Q, ["--yarn", "4", "--yarn-log-mul", "0.0707"]);

/// V2's mixture: softmax routing, two shared experts, a dense first layer.
const LATENT_MOE_V2: [&str; 20] = cat(
    LATENT,
    [
        "--experts",
        "16",
        "--experts-used",
        "4",
        "--expert-ffn",
        "256",
        "--shared-experts",
        "2",
        "--dense-layers",
        "1",
    ],
);

/// V3's mixture (sigmoid routing with the bias, groups, normalised weights scaled by 2.5, one
/// shared expert), its query and YaRN.
const LATENT_MOE_V3: [&str; 37] = cat(
    LATENT_Q,
    [
        "--experts",
        "16",
        "--experts-used",
        "4",
        "--expert-ffn",
        "256",
        "--shared-experts",
        "1",
        "--dense-layers",
        "1",
        "--gating",
        "sigmoid",
        "--probs-bias",
        "--expert-groups",
        "8",
        "--expert-groups-used",
        "4",
        "--weights-scale",
        "2.5",
        "--weights-norm",
        "--yarn",
        "4",
        "--yarn-log-mul",
        "0.1",
        "--untied",
    ],
);

/// The older unabsorbed form of the V2-Lite-like and V3-like models (one `attn_kv_b`, a KV head
/// per query head).
const LATENT_U: [&str; 11] = cat(LATENT, ["--unabsorbed"]);
const LATENT_MOE_V3_U: [&str; 38] = cat(LATENT_MOE_V3, ["--unabsorbed"]);

/// (family label, type, FNV-1a of the model file): the golden data describe exactly these
/// files.
const MODELS: [(&str, &str, u64); 40] = [
    ("qwen2", "F32", 0xc4406c1fb93e8c4),
    ("qwen2", "Q8_0", 0xc3b89a8aed1d3ec2),
    ("qwen2", "Q4_0", 0xcde6fdc658c3229),
    ("qwen2", "IQ3_XXS", 0xc31e2d35d1e0d18f),
    ("qwen2", "IQ3_S", 0x5ecd3e67546ed4ad),
    ("qwen3", "F32", 0x192acaba97284673),
    ("qwen3", "Q8_0", 0x62bc0cd362862),
    ("qwen3", "Q4_0", 0x5be45c12d17fd1a0),
    ("gemma3", "F32", 0x95f07ded6c2527ab),
    ("gemma3", "Q8_0", 0x7fafb1c9e192875c),
    ("gemma3", "Q4_0", 0x56bdeec23e91a42b),
    ("gemma3w", "F32", 0x22f309533dd7a00a),
    ("gemma3w", "Q8_0", 0x3295b75b156b9d15),
    ("qwen3moe", "F32", 0xf872c1eb59ed7d1d),
    ("qwen3moe", "Q8_0", 0x85150375921525c0),
    ("qwen3moe", "Q4_K", 0x168ab38f364e060c),
    ("qwen3moe", "IQ3_XXS", 0x8ef3a5d66392479c),
    ("qwen3moe", "IQ3_S", 0x8bd5d35e9bcde734),
    ("qwen3moe128", "Q8_0", 0xb9666f8a1982c65e),
    ("deepseek2", "F32", 0xb5a6fdf63698044),
    ("deepseek2", "Q8_0", 0xed5c59d8c472a68a),
    ("deepseek2", "Q4_K", 0x30958ed4cf2afc44),
    ("deepseek2q", "F32", 0xd9aa5872ce76930b),
    ("deepseek2q", "Q8_0", 0xd015901c98bfc0a5),
    ("deepseek2q", "Q4_K", 0xccd91109c66eed04),
    ("deepseek2y", "F32", 0x97913f25b43be48),
    ("deepseek2yv2", "F32", 0x2c664ec6e318c713),
    ("deepseek2moe", "F32", 0x7f56cf52bd4a89cd),
    ("deepseek2moe", "Q8_0", 0x1acdefa83818756d),
    ("deepseek2moe", "Q4_K", 0xf628aaa018e9dd4b),
    ("deepseek2v3", "F32", 0x46e4a29f72e5c511),
    ("deepseek2v3", "Q8_0", 0x19f13ac0b3e31ec9),
    ("deepseek2v3", "Q4_K", 0x3a0f8f6616cefab8),
    ("deepseek2u", "F32", 0x59f1085a54e4cd94),
    ("deepseek2u", "Q8_0", 0x5d74dd6d438301dc),
    ("deepseek2u", "Q4_K", 0x9b1020d6db914cf1),
    ("deepseek2uv3", "F32", 0x9faa3afb5ed8642c),
    ("mixtral", "F32", 0x36defc841f684645),
    ("mixtral", "Q8_0", 0x6815e3c449ee94a7),
    ("mixtral", "Q4_K", 0xba08ace05fbd1c56),
];

/// Models of f16 (and bf16) weights, as [`MODELS`]: llama.cpp converts their matmuls' inputs
/// to the weights' type first, then sums with tinyBLAS (prompts) or `ggml_vec_dot_f16`.
const HALF_MODELS: [(&str, &str, u64); 2] = [
    ("qwen2", "F16", 0x25381e960dd4cc11),
    ("qwen2", "BF16", 0xa1d606e6580fe0fb),
];

/// Models of MXFP4 weights (every matrix, embeddings and output included, as `gen-model
/// --type MXFP4` writes them), as [`MODELS`]: llama.cpp repacks the matrices of 8k rows (the
/// experts among them) and sums them in its repacked gemv/gemm order, the others (the
/// 1001-row output) in its `vec_dot` order; tinyBLAS has no MXFP4.
const MXFP4_MODELS: [(&str, &str, u64); 2] = [
    ("qwen2", "MXFP4", 0x9563d8d78a9f5085),
    ("qwen3moe", "MXFP4", 0x650b39f9fd1a2f47),
];

/// The giant mixtures' models (shared experts, leading dense layers, sigmoid routing with a
/// selection bias, expert groups), as [`MODELS`].
const GIANT_MODELS: [(&str, &str, u64); 5] = [
    ("glm4moe", "F32", 0xe8bceff797424886),
    ("glm4moe", "Q8_0", 0xa972fbddb38daea8),
    ("glm4moe", "Q4_K", 0xd2651f69e9d0944e),
    ("glm4moeg", "F32", 0x64f743fdf7cb3b19),
    ("glm4moeg", "Q8_0", 0xc53cdb4b6ea548b1),
];

/// The prompts whose full logits were recorded (of tests/data/golden/prompts).
const LOGIT_PROMPTS: [(usize, &str); 2] = [(1, "01.txt"), (9, "09.txt")];

/// Gemma 3's prompt that wraps the sliding-window ring, whose logits were recorded after the
/// prompt and after [`STEPS`] decoded tokens.
const WRAP_PROMPT: (usize, &str) = (12, "12.txt");

/// llama.cpp's sliding-window cache at `n_ctx` 2048 for either window: window + 512 (its
/// micro-batch) cells, padded to 256.
const RING_CELLS: usize = 768;

/// Greedy steps compared per prompt.
const STEPS: usize = 32;

fn check(family: &Family, ty: &str, want_fnv: u64) -> Vec<String> {
    let &(label, arch, window, extra) = family;
    let tag = format!("fam_{label}_{ty}");
    let cases = golden::read_greedy(&common::skip::golden_file(&format!("greedy_{tag}.txt")));
    let dir = common::temp_dir(&format!("golden-{tag}"));
    let path = dir.join(format!("{tag}.gguf"));
    let mut args = vec![
        "gen-model",
        path.to_str().unwrap(),
        "--arch",
        arch,
        "--type",
        ty,
    ];
    args.extend(SHAPE);
    args.extend(extra);
    let out = common::locus(&args);
    assert!(out.status.success(), "gen-model {tag}: {out:?}");
    let fnv = common::fnv(&std::fs::read(&path).unwrap());
    assert_eq!(
        fnv, want_fnv,
        "{tag}: gen-model's output changed (FNV {fnv:#x}); the golden data describe another model"
    );
    let file = ModelFile::open(&path).unwrap();
    let l = LoadedModel::load(&file, Instant::now()).unwrap();
    assert_eq!(l.model.config.arch.name(), arch);
    // Latent attention keeps a copy of its cache per pool group: two groups of one thread
    // each check that every group's copy, written and read by its own threads, gives
    // llama.cpp's bits.
    let latent = l.model.config.latent_cache().is_some();
    let pool = if latent {
        Pool::grouped(&[1, 1], |_| {})
    } else {
        Pool::new(2, |_| {})
    };
    if latent {
        let copies = l
            .model
            .state_bytes(2048, &pool, KvType::F16)
            .map(|b| b.kv_copies);
        assert_eq!(copies, Some(2), "{tag}: a latent cache per group");
    }
    let mut failures = Vec::new();
    let mut past_window = 0;
    let mut wrapped = 0;
    let mut shared_and_idle = 0;
    for case in &cases {
        let ids = l.tokenizer.encode(&case.prompt, true, true);
        assert_eq!(
            ids, case.prompt_ids,
            "{tag} {}: tokenization differs",
            case.name
        );
        past_window += usize::from(ids.len() + STEPS > window);
        let mut s = l.model.new_state(2048, &pool, KvType::F16);
        let mut logits = Vec::new();
        l.model.eval(&pool, &mut s, &ids, ids.len() - 1, |_, lg| {
            logits = lg.to_vec()
        });
        if let (Some(counts), Some(moe)) = (s.expert_counts(), l.model.config.moe) {
            // The prompt ran as one step of ≤ 32 tokens per layer but the last (which keeps
            // one token): in layer 0, one expert must have served several of its tokens at
            // once and another none, so the batched expert path is checked on both.
            if ids.len() <= 32 && ids.len() * moe.n_used > moe.n_expert {
                let first = &counts[..moe.n_expert];
                let most = first.iter().max().copied().unwrap_or(0);
                let idle = first.iter().filter(|&&c| c == 0).count();
                if most >= 2 && idle > 0 {
                    shared_and_idle += 1;
                }
            }
        }
        let wraps = window > 0 && case.name == WRAP_PROMPT.1;
        if let Some(&(idx, _)) = LOGIT_PROMPTS.iter().find(|(_, n)| *n == case.name) {
            compare(
                &tag,
                &case.name,
                &logits,
                &golden::family_logits(&tag, idx, ""),
                &mut failures,
            );
        }
        if wraps {
            assert!(
                ids.len() > RING_CELLS,
                "{tag}: prompt 12 must wrap the ring"
            );
            let want = golden::family_logits(&tag, WRAP_PROMPT.0, "");
            compare(&tag, &case.name, &logits, &want, &mut failures);
            wrapped += 1;
        }
        let mut gen = Vec::new();
        for _ in 0..STEPS.min(case.gen_ids.len()) {
            let tok = argmax(&logits);
            gen.push(tok);
            l.model.forward(&pool, &mut s, tok, true);
            logits = s.logits(0).to_vec();
        }
        if wraps {
            let want = golden::family_logits(&tag, WRAP_PROMPT.0, &format!("_s{STEPS}"));
            let step = format!("{} after {STEPS} tokens", case.name);
            compare(&tag, &step, &logits, &want, &mut failures);
        }
        if gen[..] != case.gen_ids[..gen.len()] {
            failures.push(format!(
                "{tag} {}: greedy continuation differs\n  got  {gen:?}\n  want {:?}",
                case.name,
                &case.gen_ids[..gen.len()]
            ));
        }
    }
    if window > 0 {
        assert!(
            past_window >= 1,
            "{tag}: no prompt runs past the {window}-token window"
        );
        assert_eq!(
            wrapped, 1,
            "{tag}: prompt {} is not among the cases",
            WRAP_PROMPT.1
        );
        eprintln!(
            "{tag}: {past_window} of {} prompts run past the {window}-token sliding window, \
             prompt {} wraps its ring of {RING_CELLS} cells",
            cases.len(),
            WRAP_PROMPT.1
        );
    }
    if let Some(moe) = l.model.config.moe {
        // With 8 experts and 2 per token every expert serves a short prompt; with 128 and 8
        // some prompt must leave experts idle while others serve several tokens.
        if moe.n_expert > 4 * moe.n_used {
            assert!(
                shared_and_idle > 0,
                "{tag}: no prompt had an expert shared by several of its tokens and one unused"
            );
            eprintln!("{tag}: {shared_and_idle} prompts had experts shared by several tokens of one step and experts none chose");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    failures
}

/// Records in `failures` how many of `got`'s logits differ from `want` in their bits.
fn compare(tag: &str, what: &str, got: &[f32], want: &[f32], failures: &mut Vec<String>) {
    assert_eq!(got.len(), want.len(), "{tag}: vocabulary size");
    let differing = got
        .iter()
        .zip(want)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    if differing > 0 {
        failures.push(format!(
            "{tag} {what}: {differing} of {} logits differ (first: {} vs {})",
            want.len(),
            got[0],
            want[0]
        ));
    }
}

/// Checks every model of `models` whose family's architecture `pick` takes.
fn check_models(models: &[(&str, &str, u64)], pick: impl Fn(&str) -> bool) {
    let mut failures = Vec::new();
    let mut checked = 0;
    for &(label, ty, fnv) in models {
        let family = FAMILIES.iter().find(|f| f.0 == label).unwrap();
        if pick(family.1) {
            failures.extend(check(family, ty, fnv));
            checked += 1;
        }
    }
    assert!(checked > 0, "no model of the families asked for");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_family_gives_llama_cpp_logits_and_greedy_tokens() {
    check_models(&MODELS, |arch| arch != "deepseek2");
}

#[test]
fn half_precision_weights_give_llama_cpp_logits_and_greedy_tokens() {
    check_models(&HALF_MODELS, |_| true);
}

#[test]
fn mxfp4_weights_give_llama_cpp_logits_and_greedy_tokens() {
    check_models(&MXFP4_MODELS, |_| true);
}

#[test]
fn latent_attention_gives_llama_cpp_logits_and_greedy_tokens() {
    check_models(&MODELS, |arch| arch == "deepseek2");
}

#[test]
fn glm4moe_gives_llama_cpp_logits_and_greedy_tokens() {
    check_models(&GIANT_MODELS, |_| true);
}
