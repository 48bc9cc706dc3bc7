//! The pre-tokenizers of the DeepSeek, Kimi-K2, GLM and GPT-4o (o200k) families against
//! `llama-tokenize`.
//!
//! No small model ships these vocabularies, so each check takes SmolLM2's byte-level BPE
//! vocabulary (49,152 tokens, 48,900 merges) and only renames its pre-tokenizer
//! (`tokenizer.ggml.pre`), as llama.cpp's `gguf_new_metadata.py --pre-tokenizer` did for the
//! golden data: every difference in where words are cut shows as different merges. The golden
//! files `tests/data/golden/tokenize_pre_<pre>.txt` hold llama.cpp's ids for each corpus file
//! (the commands are in `tests/data/golden/README.md`). The splitters were also compared with
//! llama.cpp's `unicode_regex_split` directly, outside the repository, on 40,000 random strings.

mod common;

use std::path::PathBuf;

use locus::model::gguf::Gguf;
use locus::model::gguf_write::{GgufWriter, MetaValue};
use locus::model::tokenizer::Tokenizer;
use locus::model::ModelFile;

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const PRE_KEY: &str = "tokenizer.ggml.pre";
const MERGES_KEY: &str = "tokenizer.ggml.merges";
/// Every corpus file must have a golden line.
const MIN_CORPUS_FILES: usize = 32;

/// Which merges the renamed vocabulary keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Merges {
    Kept,
    /// `--remove-metadata tokenizer.ggml.merges`: Kimi-K2 files may have none.
    Removed,
}

/// SmolLM2's metadata (all of it, as `gguf_new_metadata.py` copies it) with `pre` as its
/// pre-tokenizer; `None` after a recorded skip when the model is absent.
fn renamed_vocab(pre: &str, merges: Merges) -> Option<Vec<u8>> {
    let path = common::model_path(SMOLLM2)?;
    let file = ModelFile::open(&path).expect("model file opens");
    let gguf = file.gguf().expect("model file parses");
    let mut w = GgufWriter::new();
    for (key, value) in &gguf.metadata {
        w.set(key, MetaValue::from_value(value));
    }
    w.set(PRE_KEY, MetaValue::str(pre));
    if merges == Merges::Removed {
        w.metadata.retain(|(k, _)| k != MERGES_KEY);
    }
    Some(w.to_bytes())
}

/// The shared corpus, then texts that aim at these splitters' edges (CJK ranges, ideographic
/// and other Unicode spaces, symbols before trailing space, marks, contractions, numbers in
/// other scripts, full-width forms, and a random mix of all of them).
const CORPORA: [&str; 2] = ["corpus", "pre_corpus"];

fn tokenizer_data() -> PathBuf {
    common::repo_path("tests/data/tokenizer")
}

/// `corpus/NAME` for every file of both corpora.
fn corpus_files() -> Vec<String> {
    let mut files = Vec::new();
    for dir in CORPORA {
        for e in std::fs::read_dir(tokenizer_data().join(dir)).expect("corpus directory exists") {
            let name = e.expect("readable entry").file_name();
            files.push(format!("{dir}/{}", name.to_string_lossy()));
        }
    }
    files
}

/// GPT-2's byte alphabet: printable bytes stand for themselves, the others are shifted, in
/// byte order, to U+0100, U+0101, ...
fn byte_level_char(byte: u8) -> char {
    let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(byte) {
        return byte as char;
    }
    let shifted = (0..byte).filter(|&b| !printable(b)).count() as u32;
    char::from_u32(0x100 + shifted).expect("valid code point")
}

/// `gen_digit_vocab.py PRE`: the 256 byte tokens, then "00".."99" and "000".."999", with the
/// merges "a b" and then "ab c" that make them.
fn digit_vocab(pre: &str) -> Vec<u8> {
    const TOKEN_TYPE_NORMAL: i32 = 1;
    let digits: Vec<char> = ('0'..='9').collect();
    let pairs: Vec<String> = digits
        .iter()
        .flat_map(|a| digits.iter().map(move |b| format!("{a}{b}")))
        .collect();
    let triples: Vec<String> = pairs
        .iter()
        .flat_map(|p| digits.iter().map(move |c| format!("{p}{c}")))
        .collect();
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| byte_level_char(b).to_string())
        .collect();
    tokens.extend(pairs.iter().cloned());
    tokens.extend(triples.iter().cloned());
    let merges: Vec<String> = pairs
        .iter()
        .map(|p| format!("{} {}", &p[..1], &p[1..]))
        .chain(triples.iter().map(|t| format!("{} {}", &t[..2], &t[2..])))
        .collect();
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::str("llama"));
    w.set("tokenizer.ggml.model", MetaValue::str("gpt2"));
    w.set(PRE_KEY, MetaValue::str(pre));
    w.set("tokenizer.ggml.tokens", MetaValue::strs(&tokens));
    w.set(
        "tokenizer.ggml.token_type",
        MetaValue::i32s(&vec![TOKEN_TYPE_NORMAL; tokens.len()]),
    );
    w.set(MERGES_KEY, MetaValue::strs(&merges));
    w.to_bytes()
}

/// Every corpus file's ids (add_special and parse_special, llama-tokenize's defaults) equal
/// llama.cpp's for SmolLM2's vocabulary under pre-tokenizer `pre`.
fn check(pre: &str, merges: Merges, golden_name: &str) {
    let golden = common::skip::golden_file(golden_name);
    let Some(bytes) = renamed_vocab(pre, merges) else {
        return;
    };
    check_vocab(pre, &bytes, &golden, golden_name);
}

/// The same with the digit vocabulary, which shows how numbers are grouped.
fn check_digits(pre: &str) {
    let golden_name = format!("tokenize_digits_{pre}.txt");
    let golden = common::skip::golden_file(&golden_name);
    check_vocab(pre, &digit_vocab(pre), &golden, &golden_name);
}

fn check_vocab(pre: &str, bytes: &[u8], golden: &str, golden_name: &str) {
    let gguf = Gguf::parse(bytes).expect("the vocabulary parses");
    let tok = Tokenizer::from_gguf(&gguf).expect("the vocabulary loads");
    let lines: Vec<(&str, &str)> = golden
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split_once('\t').unwrap_or((l, "")))
        .collect();
    let files = corpus_files();
    assert!(
        lines.len() >= MIN_CORPUS_FILES,
        "{golden_name} is too short"
    );
    for f in &files {
        assert!(lines.iter().any(|(g, _)| g == f), "{golden_name} lacks {f}");
    }
    let mut failures = Vec::new();
    for (file, ids) in lines {
        let want: Vec<u32> = ids
            .split_whitespace()
            .map(|s| s.parse().expect("golden ids are numbers"))
            .collect();
        let text = std::fs::read(tokenizer_data().join(file)).expect("corpus file exists");
        let got = tok.encode_bytes(&text, true, true);
        if got != want {
            let at = want.iter().zip(&got).take_while(|(a, b)| a == b).count();
            failures.push(format!(
                "  {file}: {} ids (llama.cpp) vs {} (locus), first difference at {at}: {:?} vs {:?}",
                want.len(),
                got.len(),
                &want[at..(at + 4).min(want.len())],
                &got[at..(at + 4).min(got.len())],
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "pre-tokenizer {pre}: {} corpus files differ from llama.cpp:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn deepseek_llm_matches_llama_cpp() {
    check(
        "deepseek-llm",
        Merges::Kept,
        "tokenize_pre_deepseek-llm.txt",
    );
}

#[test]
fn deepseek_coder_matches_llama_cpp() {
    check(
        "deepseek-coder",
        Merges::Kept,
        "tokenize_pre_deepseek-coder.txt",
    );
}

#[test]
fn deepseek_v3_matches_llama_cpp() {
    check("deepseek-v3", Merges::Kept, "tokenize_pre_deepseek-v3.txt");
}

#[test]
fn kimi_k2_matches_llama_cpp() {
    check("kimi-k2", Merges::Kept, "tokenize_pre_kimi-k2.txt");
}

/// Without merges llama.cpp loads a Kimi-K2 vocabulary all the same and merges nothing.
#[test]
fn kimi_k2_without_merges_matches_llama_cpp() {
    check(
        "kimi-k2",
        Merges::Removed,
        "tokenize_pre_kimi-k2-nomerges.txt",
    );
}

#[test]
fn glm4_matches_llama_cpp() {
    check("glm4", Merges::Kept, "tokenize_pre_glm4.txt");
}

#[test]
fn chatglm_bpe_matches_llama_cpp() {
    check("chatglm-bpe", Merges::Kept, "tokenize_pre_chatglm-bpe.txt");
}

/// gpt-oss, Llama 4 and the others llama.cpp maps to `LLAMA_VOCAB_PRE_TYPE_GPT4O`.
#[test]
fn gpt_4o_matches_llama_cpp() {
    check("gpt-4o", Merges::Kept, "tokenize_pre_gpt-4o.txt");
}

/// GPT-4o's expression with marks as letters; llama.cpp also looks whole words up first.
#[test]
fn granite_embed_multi_matches_llama_cpp() {
    check(
        "granite-embed-multi-97m",
        Merges::Kept,
        "tokenize_pre_granite-embed-multi-97m.txt",
    );
}

#[test]
fn gpt_4o_groups_numbers_as_llama_cpp() {
    check_digits("gpt-4o");
}

#[test]
fn granite_embed_multi_groups_numbers_as_llama_cpp() {
    check_digits("granite-embed-multi-97m");
}

#[test]
fn deepseek_llm_groups_numbers_as_llama_cpp() {
    check_digits("deepseek-llm");
}

#[test]
fn deepseek_coder_groups_numbers_as_llama_cpp() {
    check_digits("deepseek-coder");
}

#[test]
fn deepseek_v3_groups_numbers_as_llama_cpp() {
    check_digits("deepseek-v3");
}

#[test]
fn kimi_k2_groups_numbers_as_llama_cpp() {
    check_digits("kimi-k2");
}

#[test]
fn glm4_groups_numbers_as_llama_cpp() {
    check_digits("glm4");
}

/// Only Kimi-K2 may leave its merges out; llama.cpp refuses any other BPE vocabulary without.
#[test]
fn only_kimi_k2_may_lack_merges() {
    let Some(bytes) = renamed_vocab("deepseek-v3", Merges::Removed) else {
        return;
    };
    let gguf = Gguf::parse(&bytes).expect("parses");
    let err = Tokenizer::from_gguf(&gguf).expect_err("no merges, not Kimi-K2");
    assert!(err.to_string().contains(MERGES_KEY), "{err}");
}

/// GLM vocabularies name no BOS: llama.cpp drops its BPE default (id 11) for them, while the
/// file's own `bos_token_id` still counts.
#[test]
fn glm_drops_the_default_bos() {
    let Some(bytes) = renamed_vocab("glm4", Merges::Kept) else {
        return;
    };
    let gguf = Gguf::parse(&bytes).expect("parses");
    let file_bos = gguf
        .get("tokenizer.ggml.bos_token_id")
        .and_then(|v| v.as_u64())
        .expect("SmolLM2 names its BOS");
    let mut w = GgufWriter::new();
    for (key, value) in &gguf.metadata {
        w.set(key, MetaValue::from_value(value));
    }
    w.metadata
        .retain(|(k, _)| k != "tokenizer.ggml.bos_token_id");
    for (pre, bos_without_key) in [("glm4", None), ("chatglm-bpe", None), ("gpt-2", Some(11))] {
        let mut w2 = w.clone();
        w2.set(PRE_KEY, MetaValue::str(pre));
        let b = w2.to_bytes();
        let tok = Tokenizer::from_gguf(&Gguf::parse(&b).expect("parses")).expect("loads");
        assert_eq!(tok.bos(), bos_without_key, "{pre} without bos_token_id");
    }
    let with = Tokenizer::from_gguf(&gguf).expect("loads");
    assert_eq!(with.bos().map(u64::from), Some(file_bos));
}
