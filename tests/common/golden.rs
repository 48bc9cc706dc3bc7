//! Readers for the golden data in tests/data/golden (plain text; see its README.md).
#![allow(dead_code)]

/// One greedy continuation recorded from llama.cpp.
#[derive(Clone, Debug)]
pub struct Greedy {
    pub name: String,
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    pub gen_ids: Vec<u32>,
    /// Top-1 minus top-2 logit at each generated step.
    pub gaps: Vec<f32>,
}

pub fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a') as u32 + 26,
            b'0'..=b'9' => (c - b'0') as u32 + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => panic!("bad base64 byte {c}"),
        }
    };
    let clean: Vec<u8> = s
        .bytes()
        .filter(|&c| c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::new();
    for chunk in clean.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c) << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

fn ids(s: &str) -> Vec<u32> {
    s.split_whitespace().map(|x| x.parse().unwrap()).collect()
}

pub fn read_greedy(text: &str) -> Vec<Greedy> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut g = Greedy {
            name: String::new(),
            prompt: String::new(),
            prompt_ids: vec![],
            gen_ids: vec![],
            gaps: vec![],
        };
        let mut any = false;
        for line in block.lines().filter(|l| !l.starts_with('#')) {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            any = true;
            match k {
                "name" => g.name = v.to_string(),
                "prompt_b64" => g.prompt = String::from_utf8(base64_decode(v)).unwrap(),
                "prompt_ids" => g.prompt_ids = ids(v),
                "gen_ids" => g.gen_ids = ids(v),
                "gaps" => g.gaps = v.split_whitespace().map(|x| x.parse().unwrap()).collect(),
                _ => {}
            }
        }
        if any && !g.gen_ids.is_empty() {
            out.push(g);
        }
    }
    out
}

#[test]
fn base64_known_answers() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(base64_decode(""), b"");
}

/// The logits in `tests/data/golden/NAME` (gzipped, one `%.9g` value per line, as
/// gen_greedy.py writes them).
pub fn read_logits(name: &str) -> Vec<f32> {
    let gz = crate::common::repo_path(&format!("tests/data/golden/{name}"));
    assert!(gz.exists(), "golden logits {} are missing", gz.display());
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(&gz)
        .output()
        .expect("gzip is needed to read the golden logits");
    assert!(out.status.success(), "gzip -dc {}", gz.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|v| v.parse().unwrap())
        .collect()
}

/// The recorded logits of a family model `tag` after prompt `idx` (`suffix`: `""`, or `"_s32"`
/// for after the decoded steps): `logits_{tag}_p{idx:02}{suffix}.txt.gz`.
pub fn family_logits(tag: &str, idx: usize, suffix: &str) -> Vec<f32> {
    read_logits(&format!("logits_{tag}_p{idx:02}{suffix}.txt.gz"))
}

/// Evaluates `case`'s prompt on `l` (its text through the model's tokenizer, which must give
/// the recorded ids) and compares the logits after it with `want` bit for bit: `None` when
/// every one is equal, else what differs, labelled `what`.
pub fn prompt_logits_mismatch(
    l: &locus::runtime::LoadedModel,
    pool: &locus::pool::Pool,
    case: &Greedy,
    want: &[f32],
    what: &str,
) -> Option<String> {
    let ids = l.tokenizer.encode(&case.prompt, true, true);
    assert_eq!(ids, case.prompt_ids, "{}: tokenization differs", case.name);
    let mut s = l
        .model
        .new_state(256, pool.threads(), locus::model::forward::KvType::F16);
    let mut got = Vec::new();
    l.model
        .eval(pool, &mut s, &ids, ids.len() - 1, |_, lg| got = lg.to_vec());
    assert_eq!(got.len(), want.len(), "{what}: vocabulary size");
    let differing = got
        .iter()
        .zip(want)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    (differing > 0).then(|| {
        format!(
            "{what}: {differing} of {} logits differ (first: {} vs {})",
            want.len(),
            got[0],
            want[0]
        )
    })
}
