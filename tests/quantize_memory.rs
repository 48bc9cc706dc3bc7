//! `quantize` streams tensor by tensor: quantizing the generated 1B-shape model (Q4_0, 450 MiB)
//! to F32 (3.3 GB) holds at most 1.5 × the largest output tensor plus 256 MiB of heap at any
//! moment (the bound; it used to build the whole 3.3 GB output in memory). Measured by
//! a counting global allocator around the call; the input's mapped pages are not heap and do
//! not count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use locus::kernels::GgmlType;
use locus::model::synth::{write_synth_model, SynthSpec};
use locus::model::ModelFile;

mod common;

static TRACKING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

struct Counting;

fn note(delta: i64) {
    if TRACKING.load(Ordering::Relaxed) {
        let live = LIVE.fetch_add(delta, Ordering::Relaxed) + delta;
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged
// and only adds bookkeeping in atomics, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, passed on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (hence by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr`/`layout` come from this allocator; the caller checked `new_size`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as i64);
            note(-(layout.size() as i64));
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

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
    LIVE.store(0, Ordering::SeqCst);
    PEAK.store(0, Ordering::SeqCst);
    TRACKING.store(true, Ordering::SeqCst);
    let r = locus::model::quantize::quantize_file(&src, &out, GgmlType::F32, &never);
    TRACKING.store(false, Ordering::SeqCst);
    r.unwrap();
    let peak = PEAK.load(Ordering::SeqCst) as u64;
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
