//! `locus quantize`'s mixture plans against llama-quantize: every fixture in
//! `tests/data/quant_mix` records, for one model and one preset, the type llama.cpp's
//! llama-quantize wrote for every tensor (the command is in the fixture's header), and the plan
//! must give the same types, in the same order, and the same `general.file_type`.

use locus::model::quant_mix::{MixOptions, MixPlan, ModelShape, Preset};

/// One fixture of `tests/data/quant_mix`: what llama-quantize did to one model.
struct Fixture {
    file: String,
    preset: String,
    pure: bool,
    shape: ModelShape,
    file_type: u32,
    /// (name, dims, source type, written type), in the output file's order.
    rows: Vec<(String, Vec<u64>, String, String)>,
}

fn header_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn read_fixture(path: &std::path::Path) -> Fixture {
    let text = std::fs::read_to_string(path).expect("fixture readable");
    let file = path.file_name().unwrap().to_string_lossy().into_owned();
    let (mut preset, mut pure, mut shape, mut file_type) = (None, false, None, None);
    let mut rows = Vec::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix('#') {
            let words: Vec<&str> = comment.split_whitespace().collect();
            if words.first() == Some(&"llama-quantize") {
                // `llama-quantize [flags] IN OUT PRESET NTHREADS`
                preset = Some(words[words.len() - 2].to_string());
                pure = words.contains(&"--pure");
            } else if words.first() == Some(&"shape") {
                let num = |k: &str| -> u32 { header_value(comment, k).unwrap().parse().unwrap() };
                let arch = header_value(comment, "arch").unwrap();
                shape = Some(ModelShape::new(
                    arch,
                    num("n_layer"),
                    num("n_head"),
                    num("n_head_kv"),
                    num("n_expert"),
                ));
            } else if words.first() == Some(&"general.file_type") {
                file_type = Some(words[1].parse().unwrap());
            }
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(w.len(), 4, "{file}: bad line {line:?}");
        let dims = w[1].split('x').map(|d| d.parse().unwrap()).collect();
        rows.push((w[0].into(), dims, w[2].into(), w[3].into()));
    }
    Fixture {
        preset: preset.unwrap_or_else(|| panic!("{file}: no command line")),
        pure,
        shape: shape.unwrap_or_else(|| panic!("{file}: no shape")),
        file_type: file_type.unwrap_or_else(|| panic!("{file}: no file type")),
        rows,
        file,
    }
}

fn fixtures() -> Vec<Fixture> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/quant_mix");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/data/quant_mix exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    paths.sort();
    paths.iter().map(|p| read_fixture(p)).collect()
}

#[test]
fn plans_match_llama_quantize() {
    let all = fixtures();
    // Every preset has a SmolLM2 fixture (rows not multiples of 256: the fallbacks).
    for p in Preset::all() {
        let want = format!("smollm2-{}.txt", p.name());
        assert!(all.iter().any(|f| f.file == want), "missing fixture {want}");
    }
    // …and the synthetic models (rows multiples of 256, tied and untied, n_gqa 1 and 4).
    for tag in ["synth-tied", "synth-untied"] {
        let n = all.iter().filter(|f| f.file.starts_with(tag)).count();
        assert!(n >= Preset::all().len(), "{tag}: {n} fixtures");
    }
    for f in &all {
        let preset = Preset::parse(&f.preset).unwrap_or_else(|| panic!("{}", f.file));
        assert_eq!(preset.name(), f.preset, "{}", f.file);
        assert_eq!(preset.file_type(), f.file_type, "{}: file type", f.file);
        let opts = MixOptions {
            pure: f.pure,
            ..MixOptions::default()
        };
        // Fed in reverse: the plan must restore llama-quantize's order by itself.
        let input: Vec<(&str, &[u64])> = f
            .rows
            .iter()
            .rev()
            .map(|(n, d, _, _)| (n.as_str(), d.as_slice()))
            .collect();
        let plan = MixPlan::new(preset, &f.shape, &opts, input).unwrap();
        let order: Vec<&str> = plan.tensors().iter().map(|t| t.name.as_str()).collect();
        let want: Vec<&str> = f.rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(order, want, "{}: tensor order", f.file);
        let mut misfits = 0;
        for (name, dims, src, dst) in &f.rows {
            let got = plan.type_for(name).map_or(src.as_str(), |t| t.name());
            assert_eq!(got, dst, "{}: {name}", f.file);
            let ty = plan.type_for(name);
            if ty.is_some_and(|t| !dims[0].is_multiple_of(t.block_size() as u64)) {
                misfits += 1;
            }
        }
        assert_eq!(
            misfits, 0,
            "{}: a planned type does not fit its rows",
            f.file
        );
    }
}
