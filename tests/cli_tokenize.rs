//! `locus tokenize` prints what llama-tokenize prints: `--ids` as `[a, b, ...]` with the file's
//! exact bytes, for a GPT-2 BPE vocabulary (SmolLM2) and a SentencePiece one (Gemma 3).

mod common;

fn golden_ids(text: &str, name: &str) -> Vec<u32> {
    let line = text
        .lines()
        .find(|l| l.split('\t').next() == Some(name))
        .unwrap();
    line.split('\t')
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

fn check(model: &str, golden: &str) {
    let golden = common::skip::golden_file(golden);
    let Some(m) = common::model_path(model) else {
        return;
    };
    for name in [
        "01_english_prose.txt",
        "21_chatml.txt",
        "32_trailing_newlines.txt",
        "09_emoji.txt",
    ] {
        let path = common::repo_path(&format!("tests/data/tokenizer/corpus/{name}"));
        let out = common::locus(&[
            "tokenize",
            "-m",
            m.to_str().unwrap(),
            "-f",
            path.to_str().unwrap(),
            "--ids",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want = golden_ids(&golden, name);
        let printed = String::from_utf8(out.stdout).unwrap();
        let expect = format!(
            "[{}]\n",
            want.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert_eq!(printed, expect, "{model} {name}");
    }
}

#[test]
fn smollm2_ids_match_llama_tokenize() {
    check("SmolLM2-135M-Instruct.Q4_1.gguf", "tokenize_smollm2.txt");
}

#[test]
fn gemma3_sentencepiece_vocabulary_tokenizes_as_llama_tokenize() {
    check("gemma-3-270m-q4_k_m.gguf", "tokenize_gemma3.txt");
}
