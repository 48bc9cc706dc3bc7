//! `quantize` streams tensor by tensor: quantizing the generated 1B-shape model (Q4_0, 450 MiB)
//! to F32 (3.3 GB) holds at most 1.5 × the largest output tensor plus 256 MiB of heap at any
//! moment (the bound; it used to build the whole 3.3 GB output in memory). Measured by
//! the counting global allocator (tests/common/counting_alloc.rs) around the call, which runs
//! on this thread; the input's mapped pages are not heap and do not count.

use std::sync::atomic::AtomicBool;

use locus::kernels::GgmlType;
use locus::model::synth::{write_synth_model, SynthSpec};
use locus::model::ModelFile;

mod common;
#[path = "common/counting_alloc.rs"]
mod counting_alloc;

#[global_allocator]
static ALLOC: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

#[test]
fn quantizing_the_1b_shape_to_f32_holds_about_one_tensor() {
    let dir = common::temp_dir("quantize-memory");
    let (src, out) = (dir.join("1b-q4_0.gguf"), dir.join("1b-f32.gguf"));
    let never = AtomicBool::new(false);
    write_synth_model(&SynthSpec::one_b(GgmlType::Q4_0), &src, &never).unwrap();
    let largest = {
        let file = ModelFile::open(&src).unwrap();
        let g = file.gguf().unwrap();
        g.tensors.iter().map(|t| t.n_elements() * 4).max().unwrap()
    };
    // quantize works on the calling thread, whose live heap bytes the allocator counts.
    let (r, peak) = counting_alloc::measure(|| {
        // One thread: the work stays on this thread, where the allocator counts.
        let f32 = locus::model::quantize::Target::Float(GgmlType::F32);
        let opts = locus::model::quant_mix::MixOptions::default();
        locus::model::quantize::quantize_file(&src, &out, f32, &opts, None, 1, &never)
    });
    r.unwrap();
    let bound = largest * 3 / 2 + (256 << 20);
    eprintln!(
        "quantize 1B Q4_0 -> F32: heap peak {:.1} MiB; largest output tensor {:.1} MiB; bound {:.1} MiB",
        peak as f64 / (1 << 20) as f64,
        largest as f64 / (1 << 20) as f64,
        bound as f64 / (1 << 20) as f64
    );
    assert!(peak < bound, "heap peak {peak} bytes, bound {bound}");
    // The output is a whole model of F32 matrices.
    let file = ModelFile::open(&out).unwrap();
    let g = file.gguf().unwrap();
    assert!(g
        .tensors
        .iter()
        .filter(|t| t.dims.len() == 2)
        .all(|t| t.ty == GgmlType::F32));
    drop(file);
    std::fs::remove_dir_all(&dir).unwrap();
}
