//! `locus quantize`'s mixture plans against llama-quantize: every fixture in
//! `tests/data/quant_mix` records, for one model and one preset, the type llama.cpp's
//! llama-quantize wrote for every tensor (the command is in the fixture's header), and the plan
//! must give the same types, in the same order, and the same `general.file_type`. The command's
//! flags (`--pure`, `--imatrix`, `--tensor-type`, `--output-tensor-type`,
//! `--token-embedding-type`, `--leave-output-tensor`) are read from the header and given to the
//! plan. `refusals.txt` lists the plans llama-quantize refuses without an importance matrix,
//! with the tensor and type its error names.

use locus::kernels::GgmlType;
use locus::model::quant_mix::{
    parse_ggml_type, MixOptions, MixPlan, ModelShape, Preset, TensorTypeOverride,
};

/// One fixture of `tests/data/quant_mix`: what llama-quantize did to one model.
struct Fixture {
    file: String,
    preset: String,
    opts: MixOptions,
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
    let (mut preset, mut opts, mut shape, mut file_type) = (None, None, None, None);
    let mut rows = Vec::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix('#') {
            let words: Vec<&str> = comment.split_whitespace().collect();
            if words.first() == Some(&"llama-quantize") {
                // `llama-quantize [flags] IN OUT PRESET NTHREADS`
                preset = Some(words[words.len() - 2].to_string());
                opts = Some(options(&words[1..words.len() - 4]));
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
        opts: opts.unwrap(),
        shape: shape.unwrap_or_else(|| panic!("{file}: no shape")),
        file_type: file_type.unwrap_or_else(|| panic!("{file}: no file type")),
        rows,
        file,
    }
}

/// The plan options of llama-quantize's flags (shell-quoted as the headers write them).
fn options(flags: &[&str]) -> MixOptions {
    let mut o = MixOptions::default();
    let mut it = flags.iter().map(|w| w.trim_matches('\''));
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag {
            "--allow-requantize" => {}
            "--pure" => o.pure = true,
            "--leave-output-tensor" => o.leave_output_tensor = true,
            "--imatrix" => {
                value();
                o.has_imatrix = true;
            }
            "--tensor-type" => o
                .tensor_types
                .push(TensorTypeOverride::parse(value()).unwrap()),
            "--output-tensor-type" => {
                o.output_tensor_type = Some(parse_ggml_type(value()).unwrap())
            }
            "--token-embedding-type" => {
                o.token_embedding_type = Some(parse_ggml_type(value()).unwrap())
            }
            other => panic!("unexpected flag {other}"),
        }
    }
    o
}

fn fixture_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/quant_mix")
}

fn fixtures() -> Vec<Fixture> {
    let dir = fixture_dir();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/data/quant_mix exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .filter(|p| !p.ends_with("refusals.txt"))
        .collect();
    paths.sort();
    paths.iter().map(|p| read_fixture(p)).collect()
}

#[test]
fn plans_match_llama_quantize() {
    let all = fixtures();
    // Every preset has a SmolLM2 fixture (rows not multiples of 256: the fallbacks), with an
    // importance matrix where llama-quantize needs one, and a MoE one (8 experts).
    for p in Preset::all() {
        for model in ["smollm2", "moe8"] {
            let want = [
                format!("{model}-{}.txt", p.name()),
                format!("{model}-{}-imatrix.txt", p.name()),
            ];
            assert!(
                all.iter().any(|f| want.contains(&f.file)),
                "missing fixture {}",
                want[0]
            );
        }
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
        let opts = &f.opts;
        // Fed in reverse: the plan must restore llama-quantize's order by itself.
        let input: Vec<(&str, &[u64])> = f
            .rows
            .iter()
            .rev()
            .map(|(n, d, _, _)| (n.as_str(), d.as_slice()))
            .collect();
        let plan = MixPlan::new(preset, &f.shape, opts, input).unwrap();
        // A plan llama-quantize carried out needs no imatrix it was not given.
        if !opts.has_imatrix {
            assert_eq!(plan.first_requiring_imatrix(), None, "{}", f.file);
        }
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

#[test]
fn refusals_match_llama_quantize() {
    let text = std::fs::read_to_string(fixture_dir().join("refusals.txt")).unwrap();
    let fixtures = fixtures();
    let mut n = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (fields, command) = line.split_once('#').expect("a command after the fields");
        let w: Vec<&str> = fields.split_whitespace().collect();
        let [model, preset, tensor, ty] = w[..] else {
            panic!("bad line {line:?}")
        };
        // The model's tensors and shape, from any fixture of it.
        let f = fixtures
            .iter()
            .find(|f| f.file.starts_with(&format!("{model}-")))
            .unwrap_or_else(|| panic!("no fixture of {model}"));
        let words: Vec<&str> = command.split_whitespace().collect();
        let opts = options(&words[1..words.len() - 4]);
        assert!(!opts.has_imatrix, "{line}");
        let tensors = f.rows.iter().map(|(n, d, _, _)| (n.as_str(), d.as_slice()));
        let plan = MixPlan::new(Preset::parse(preset).unwrap(), &f.shape, &opts, tensors).unwrap();
        assert_eq!(
            plan.first_requiring_imatrix(),
            Some((tensor, GgmlType::from_name(ty).unwrap())),
            "{line}"
        );
        n += 1;
    }
    assert!(n >= 40, "{n} refusals");
}
