//! Every weight type of the generic path, logits bit for bit against llama.cpp's.
//!
//! A small model from `locus gen-model` (F32; rows of 512 and 1280, so whole 256-element
//! super-blocks; an untied output head of 1001 rows, a row count llama.cpp does not repack) is
//! quantized by `locus quantize --pure` to each type, and to the Q4_K_M and Q3_K_M mixes. Each
//! file must equal llama-quantize's byte for byte (its FNV-1a hash is recorded), and the full
//! logits vector after each of two prompts must equal llama.cpp's (`-fa off`) bit for bit:
//! a 62-token prompt (llama.cpp's tiled K-quant matmul and tinyBLAS for the plain weights, the
//! repacked gemm for 60 tokens and its gemv for 2) and a 2-token one (vector dot products and
//! the repacked gemv only). Commands in tests/data/golden/README.md.

mod common;
#[path = "common/golden.rs"]
mod golden;

use std::path::Path;
use std::time::Instant;

use locus::kernels::Layout;
use locus::model::ModelFile;
use locus::placement::{Mode, Options, Placement};
use locus::pool::Pool;
use locus::runtime::LoadedModel;

/// `locus gen-model` arguments of the F32 source model.
const GEN_ARGS: [&str; 17] = [
    "--type",
    "F32",
    "--dim",
    "512",
    "--layers",
    "2",
    "--ffn",
    "1280",
    "--heads",
    "8",
    "--kv-heads",
    "2",
    "--vocab",
    "1001",
    "--untied",
    "--seed",
    "7",
];

/// FNV-1a of the source model: if `gen-model` changes its output, the golden data no longer
/// describe this model and must be made again.
const SOURCE_FNV: u64 = 0x9b87_54af_e8ce_6a24;

/// (target, `--pure`, FNV-1a of llama-quantize's output file).
const TARGETS: [(&str, bool, u64); 11] = [
    ("Q5_0", true, 0xbb8f09ba2436db5c),
    ("Q5_1", true, 0x426cba90bc5fff3e),
    ("IQ4_NL", true, 0x287ce8c2afa1fac9),
    ("Q2_K", true, 0x84a12eaa6b3e22e5),
    ("Q3_K", true, 0x7a1821c69a3b8028),
    ("Q4_K", true, 0xb4c24942d0b16ce3),
    ("Q5_K", true, 0xdf10ca3a6485383e),
    ("Q6_K", true, 0x9316b14f095f2aca),
    ("IQ4_XS", true, 0x51b2382b7a14c724),
    ("Q4_K_M", false, 0xea13a6a450c3e4c7),
    ("Q3_K_M", false, 0x78592cb593228543),
];

/// The prompts whose logits were recorded (of tests/data/golden/prompts).
const PROMPTS: [(usize, &str); 2] = [(1, "01.txt"), (9, "09.txt")];

fn file_fnv(path: &Path) -> u64 {
    common::fnv(&std::fs::read(path).unwrap())
}

fn golden_logits(target: &str, idx: usize) -> Vec<f32> {
    golden::read_logits(&format!("logits_gm_{target}_p{idx:02}.txt.gz"))
}

#[test]
fn every_type_gives_llama_cpp_logits_bit_for_bit() {
    let prompts = golden::read_greedy(&common::skip::golden_file("greedy_gm_Q4_K.txt"));
    let dir = common::temp_dir("golden-kquants");
    let src = dir.join("gm-f32.gguf");
    let mut args = vec!["gen-model", src.to_str().unwrap()];
    args.extend(GEN_ARGS);
    let out = common::locus(&args);
    assert!(out.status.success(), "gen-model: {out:?}");
    assert_eq!(
        file_fnv(&src),
        SOURCE_FNV,
        "gen-model's output changed: the golden logits describe another model"
    );
    let pool = Pool::new(2, |_| {});
    let mut failures = Vec::new();
    for (target, pure, want_fnv) in TARGETS {
        let dst = dir.join(format!("gm-{target}.gguf"));
        let mut args = vec!["quantize"];
        if pure {
            args.push("--pure");
        }
        args.extend([src.to_str().unwrap(), dst.to_str().unwrap(), target]);
        let out = common::locus(&args);
        assert!(out.status.success(), "quantize {target}: {out:?}");
        if file_fnv(&dst) != want_fnv {
            failures.push(format!("{target}: the file differs from llama-quantize's"));
        }
        let file = ModelFile::open(&dst).unwrap();
        // From the file's layout, and from a mirror copy, which the kernels read packed where
        // they pack the type (AVX-512: Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL), prompts included.
        let opts = Options {
            mode: Mode::Mirror,
            threads: Some(pool.threads()),
            ..Options::default()
        };
        let placement = Placement::build(&file, &opts).unwrap();
        let packed = placement
            .store
            .pieces()
            .iter()
            .filter(|p| p.layout != Layout::Rows)
            .count();
        for copy in [false, true] {
            let l = match copy {
                false => LoadedModel::load(&file, Instant::now()).unwrap(),
                true => LoadedModel::load_placed(&file, &placement, Instant::now()).unwrap(),
            };
            let from = if copy {
                format!("a copy ({packed} matrices packed)")
            } else {
                "the file".to_string()
            };
            check_prompts(&l, &pool, &prompts, target, &from, &mut failures);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The logits after each recorded prompt against llama.cpp's, bit for bit; a difference is
/// added to `failures`.
fn check_prompts(
    l: &LoadedModel,
    pool: &Pool,
    prompts: &[golden::Greedy],
    target: &str,
    from: &str,
    failures: &mut Vec<String>,
) {
    for (idx, name) in PROMPTS {
        let case = prompts.iter().find(|c| c.name == name).unwrap();
        let want = golden_logits(target, idx);
        let what = format!("{target} {name} from {from}");
        failures.extend(golden::prompt_logits_mismatch(l, pool, case, &want, &what));
    }
}
