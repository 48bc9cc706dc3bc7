//! Greedy continuations identical token for token to llama.cpp's, on SmolLM2-135M-Instruct in
//! Q4_1 (as shipped) and its Q8_0/Q4_0 requantizations. Golden ids, the top-1/top-2 logit gap
//! at every step, and the exact commands are in tests/data/golden/ (README.md there).
//!
//! A divergence is accepted only at a recorded near-tie (gap < NEAR_TIE): there the two
//! engines' last-bit differences can legitimately pick the other token, and everything after
//! it is a different continuation. Any other difference fails.

mod common;
#[path = "common/golden.rs"]
mod golden;

use std::time::Instant;

use locus::kernels::{GgmlType, Layout, SumOrder};
use locus::model::forward::KvType;
use locus::model::sampler::argmax;
use locus::model::ModelFile;
use locus::placement::{Mode, Options, Placement};
use locus::pool::Pool;
use locus::runtime::LoadedModel;

/// Logit gap below which llama.cpp's own choice is a coin toss at float precision.
const NEAR_TIE: f32 = 0.01;
/// At most one prompt in this many may end early at a near-tie: more would mean the "ties"
/// hide a real difference (none does today, at any tier).
const PROMPTS_PER_TIE: usize = 6;
/// Each golden continuation holds at least this many tokens (each with its gap).
const MIN_STEPS: usize = 32;

/// How the golden run reads the weights.
#[derive(Clone, Copy, PartialEq)]
enum Weights {
    /// Straight from the file's mapping.
    File,
    /// From a placed copy (`--numa mirror`), packed where the kernels ask for it.
    Copy,
}

/// The model a golden file describes: SmolLM2 in `quant`, or the real Gemma 3 270M.
fn model_file(quant: &str) -> String {
    match quant {
        GEMMA3 => "gemma-3-270m-q4_k_m.gguf".into(),
        q => format!("SmolLM2-135M-Instruct.{q}.gguf"),
    }
}

/// The golden label of Gemma 3 270M Q4_K_M (greedy_gemma3_Q4_K_M.txt).
const GEMMA3: &str = "gemma3_Q4_K_M";
/// Gemma 3 270M's sliding window (`gemma3.attention.sliding_window`).
const GEMMA3_WINDOW: usize = 512;

fn check(quant: &str) {
    check_from(quant, Weights::File);
}

fn check_from(quant: &str, from: Weights) {
    // The golden file is read first: it is in git, so its absence fails even without models.
    let text = common::skip::golden_file(&format!("greedy_{quant}.txt"));
    let cases = golden::read_greedy(&text);
    assert!(
        cases.len() >= 8,
        "{quant}: only {} golden prompts",
        cases.len()
    );
    for case in &cases {
        assert!(
            case.gen_ids.len() >= MIN_STEPS && case.gaps.len() == case.gen_ids.len(),
            "greedy_{quant}.txt, {}: {} tokens and {} gaps (a gap per token, at least {MIN_STEPS})",
            case.name,
            case.gen_ids.len(),
            case.gaps.len()
        );
    }
    let recorded: usize = cases.iter().map(|c| c.gen_ids.len()).sum();
    let Some(path) = common::model_path(&model_file(quant)) else {
        return;
    };
    let file = ModelFile::open(&path).unwrap();
    let placement = (from == Weights::Copy).then(|| {
        let opts = Options {
            mode: Mode::Mirror,
            threads: Some(1),
            ..Options::default()
        };
        Placement::build(&file, &opts).unwrap()
    });
    let l = match &placement {
        Some(p) => {
            let l = LoadedModel::load_placed(&file, p, Instant::now()).unwrap();
            let packed = p
                .store
                .pieces()
                .iter()
                .filter(|p| p.layout != Layout::Rows)
                .count();
            eprintln!(
                "{quant}: {packed} of {} copied matrices packed",
                p.store.pieces().len()
            );
            // The type the kernels read packed (Q4_0 and Q4_K, where llama.cpp repacks it).
            let ty = if quant.starts_with("Q4_K") {
                GgmlType::Q4K
            } else {
                GgmlType::Q4_0
            };
            if l.model.kernels.preferred_layout(ty, SumOrder::BlockChain) != Layout::Rows {
                assert!(
                    packed > 0,
                    "{quant}: the kernels read packed {}, but nothing was packed",
                    ty.name()
                );
            }
            l
        }
        None => LoadedModel::load(&file, Instant::now()).unwrap(),
    };
    // One thread per test: the three quant tests run side by side on a small machine, and
    // results do not depend on the thread count (tests/forward_reference.rs checks that).
    // The packed copy runs in two groups of 2 and 3 threads instead: their row shares are cut
    // off packed-group boundaries (576 / 5), so the rounding of the shares is checked too.
    let pool = match from {
        Weights::File => Pool::new(1, |_| {}),
        Weights::Copy => Pool::grouped(&[2, 3], |_| {}),
    };
    pool.set_poll(0);
    let mut failures = Vec::new();
    let mut ties = 0;
    let mut compared = 0;
    for case in &cases {
        let ids = l.tokenizer.encode(&case.prompt, true, true);
        if ids != case.prompt_ids {
            failures.push(format!(
                "{}: prompt tokenization differs: {ids:?} vs {:?}",
                case.name, case.prompt_ids
            ));
            continue;
        }
        let mut s = l.model.new_state(2048, pool.threads(), KvType::F16);
        let mut last = vec![0f32; l.model.config.n_vocab];
        l.model.eval(
            &pool,
            &mut s,
            &case.prompt_ids,
            case.prompt_ids.len() - 1,
            |_, lg| last.copy_from_slice(lg),
        );
        for (step, (&want, &gap)) in case.gen_ids.iter().zip(&case.gaps).enumerate() {
            let got = argmax(&last);
            compared += 1;
            if got != want {
                if gap < NEAR_TIE {
                    eprintln!("{quant} {}: step {step} near-tie (gap {gap}): {got} vs {want}; rest not compared", case.name);
                    ties += 1;
                } else {
                    failures.push(format!(
                        "{}: step {step}: got {got}, llama.cpp {want} (gap {gap})",
                        case.name
                    ));
                }
                break;
            }
            l.model.forward(&pool, &mut s, got, true);
            last.copy_from_slice(s.logits(0));
        }
    }
    eprintln!(
        "{quant}: {} prompts, {compared} of {recorded} steps compared, {ties} ended at a recorded near-tie",
        cases.len(),
    );
    assert!(failures.is_empty(), "{quant}:\n{}", failures.join("\n"));
    assert!(
        ties * PROMPTS_PER_TIE <= cases.len(),
        "{quant}: {ties} of {} prompts ended at a near-tie; more than one in {PROMPTS_PER_TIE} \
         is a real difference, not a tie",
        cases.len()
    );
    // Every step up to a prompt's end (or its tie) was compared: a prompt cut short by a tie
    // still compared the steps before it, so at most the tails of the tied prompts are missing.
    assert!(
        compared * 4 >= recorded * 3,
        "{quant}: only {compared} of {recorded} recorded steps were compared"
    );
}

#[test]
fn greedy_matches_llama_cpp_q4_1() {
    check("Q4_1");
}

#[test]
fn greedy_matches_llama_cpp_q8_0() {
    check("Q8_0");
}

#[test]
fn greedy_matches_llama_cpp_q4_0() {
    check("Q4_0");
}

#[test]
fn greedy_matches_llama_cpp_q4_k_m() {
    check("Q4_K_M");
}

#[test]
fn greedy_matches_llama_cpp_q5_k_m() {
    check("Q5_K_M");
}

#[test]
fn greedy_matches_llama_cpp_q6_k() {
    check("Q6_K");
}

#[test]
fn greedy_matches_llama_cpp_q3_k_m() {
    check("Q3_K_M");
}

/// SmolLM2's rows (576 wide) are not whole 256-element super-blocks: the Q2_K mix falls back to
/// Q4_0 for them and keeps Q3_K only where rows are 1536 wide.
#[test]
fn greedy_matches_llama_cpp_q2_k() {
    check("Q2_K");
}

/// The IQ presets of SmolLM2 with an importance matrix (made by `make models` with `locus
/// quantize --imatrix`, byte-identical to llama-quantize's): SmolLM2's 576-wide rows take the
/// fallback types (IQ4_NL, Q4_0 …), its 1536-wide `ffn_down` rows and the mixes' choices the
/// IQ types themselves.
#[test]
fn greedy_matches_llama_cpp_iq2_xxs() {
    check("IQ2_XXS");
}

#[test]
fn greedy_matches_llama_cpp_iq2_m() {
    check("IQ2_M");
}

#[test]
fn greedy_matches_llama_cpp_iq3_xxs() {
    check("IQ3_XXS");
}

#[test]
fn greedy_matches_llama_cpp_iq3_m() {
    check("IQ3_M");
}

#[test]
fn greedy_matches_llama_cpp_iq1_m() {
    check("IQ1_M");
}

/// Gemma 3 270M (Q4_K_M, the base model from PyPI) through the architecture seam: head norms,
/// post-norms, GELU, scaled embeddings, NEOX RoPE with two bases, and sliding-window layers.
/// One prompt is longer than the 512-token window, so its local layers mask the oldest keys.
#[test]
fn greedy_matches_llama_cpp_gemma3() {
    let cases = golden::read_greedy(&common::skip::golden_file(&format!("greedy_{GEMMA3}.txt")));
    let longest = cases.iter().map(|c| c.prompt_ids.len()).max().unwrap_or(0);
    assert!(
        longest > GEMMA3_WINDOW,
        "a prompt must run past the {GEMMA3_WINDOW}-token window (longest: {longest})"
    );
    eprintln!("{GEMMA3}: longest prompt {longest} tokens, past the {GEMMA3_WINDOW}-token window");
    check(GEMMA3);
}

/// `locus run -p "The capital of France is"` on Gemma 3 270M prints what llama-completion
/// prints for it (run_gemma3_capital.txt; command in the golden README).
#[test]
fn run_continues_gemma3_as_llama_cpp() {
    let want = std::fs::read(common::repo_path(
        "tests/data/golden/run_gemma3_capital.txt",
    ))
    .expect("the committed golden text");
    let Some(model) = common::model_path(&model_file(GEMMA3)) else {
        return;
    };
    let m = model.to_str().unwrap();
    let out = common::locus(&[
        "run",
        "-m",
        m,
        "-p",
        "The capital of France is",
        "-n",
        "32",
        "--temp",
        "0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&want),
        "locus run differs from llama-completion"
    );
}

/// The same through a placed copy, where a tier with packed kernels (AVX-512) reads Q4_0
/// packed (`kernels::pack`): the tokens may not change.
#[test]
fn greedy_matches_llama_cpp_q4_0_from_a_packed_copy() {
    check_from("Q4_0", Weights::Copy);
}

/// The same for Q4_K_M, whose Q4_K matrices a tier with packed kernels (AVX-512) reads packed
/// in groups of sixteen rows (`Layout::Q4Kx16`), prompts included (unpacked per step there).
#[test]
fn greedy_matches_llama_cpp_q4_k_m_from_a_packed_copy() {
    check_from("Q4_K_M", Weights::Copy);
}

/// The full logits vector after a prompt equals llama.cpp's bit for bit (recorded with
/// `%.9g`, which round-trips f32), for two prompts of the Q4_1 model.
#[test]
fn prompt_logits_equal_llama_cpp_exactly() {
    check_logits("Q4_1", &[(0, "00.txt"), (5, "05.txt")]);
}

/// Q4_0's head is the tied embedding: llama.cpp loads it a second time as a matmul weight and
/// repacks that copy (49152 rows, a multiple of 8), so the logits take the repacked order.
#[test]
fn prompt_logits_of_a_tied_repacked_head_equal_llama_cpp_exactly() {
    check_logits("Q4_0", &[(0, "00.txt")]);
}

fn check_logits(quant: &str, prompts: &[(usize, &str)]) {
    let text = common::skip::golden_file(&format!("greedy_{quant}.txt"));
    let Some(path) = common::model_path(&format!("SmolLM2-135M-Instruct.{quant}.gguf")) else {
        return;
    };
    let cases = golden::read_greedy(&text);
    let file = ModelFile::open(&path).unwrap();
    let l = LoadedModel::load(&file, Instant::now()).unwrap();
    let pool = Pool::new(1, |_| {});
    for &(idx, name) in prompts {
        let want = golden::read_logits(&format!("logits_{quant}_p{idx:02}.txt.gz"));
        let case = cases.iter().find(|c| c.name == name).unwrap();
        let mut s = l.model.new_state(2048, 1, KvType::F16);
        let mut got = Vec::new();
        l.model.eval(
            &pool,
            &mut s,
            &case.prompt_ids,
            case.prompt_ids.len() - 1,
            |_, lg| got = lg.to_vec(),
        );
        assert_eq!(got.len(), want.len());
        let differing = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            differing,
            0,
            "{quant} prompt {name}: {differing} of {} logits differ from llama.cpp",
            want.len()
        );
    }
}
