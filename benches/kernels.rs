//! Matmul kernel throughput: each quantized kernel × tier × row length, computed one dot per
//! call (`single`) and in tiles (`tile`, [`Kernels::dot_tile`]).
//!
//! One iteration multiplies `PANEL_ROWS` weight rows with a batch of `BATCH` tokens, as the
//! model's matmuls do for one step of rows, so the activations come from L1/L2 as they do there.
//! Throughput is in bytes of weights *as read per dot* (row bytes × rows × tokens); ns per block
//! is `block bytes / (GB/s)`: 18 bytes for Q4_0, 20 for Q4_1, 34 for Q8_0.
//!
//! The `decode_*` groups multiply a whole matrix by one token, as decoding does: `single` one dot
//! per row (what one token cost before the single-token kernels), `tile` [`Kernels::dot_tile`]
//! in steps of `PANEL_ROWS` rows (the matmuls' path for one token before `gemv`), and `gemv`
//! [`Kernels::gemv`] over the matrix's rows laid back to back, as the matmuls call it now.
//! `decode_stream_q4_0_chain` does the same over 256 MiB, which streams from memory: the file's
//! layout against the packed one, prefetching into L1 against L2.
//!
//! Run: `cargo bench --bench kernels`. A tier this CPU lacks is reported with a SKIPPED line.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use locus::kernels::{
    pack, set_stream_target, ActRow, GgmlType, Kernels, Layout, PackedSteps, Queries, StreamTarget,
    SumOrder, Tier, PACK_ROWS, PANEL_ROWS,
};
use locus::model::quantize::quantize_row;
use std::hint::black_box;
use std::time::Duration;

/// Tokens per iteration: the model's batch size (`MAX_BATCH`).
const BATCH: usize = 32;
/// Row lengths: SmolLM2-135M's model width and feed-forward width, and a 1B-class FFN width.
const ROW_LENS: [usize; 3] = [576, 2048, 5632];

/// Deterministic pseudo-random values in [-1, 1) (a 32-bit LCG; the bench needs no crate).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

fn kernels(c: &mut Criterion) {
    let tiers: Vec<Kernels> = [Tier::Scalar, Tier::Avx2, Tier::Avx512]
        .into_iter()
        .filter_map(|t| match Kernels::for_tier(t) {
            Ok(k) => Some(k),
            Err(e) => {
                eprintln!("SKIPPED tier {t}: {e}");
                None
            }
        })
        .collect();
    let cases = [
        ("q4_0_lanes", GgmlType::Q4_0, SumOrder::Lanes),
        ("q4_0_chain", GgmlType::Q4_0, SumOrder::BlockChain),
        ("q4_1", GgmlType::Q4_1, SumOrder::Lanes),
        ("q8_0", GgmlType::Q8_0, SumOrder::Lanes),
    ];
    for (name, ty, order) in cases {
        let mut group = c.benchmark_group(format!("matmul_{name}"));
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        for n in ROW_LENS {
            let weights: Vec<Vec<u8>> = (0..PANEL_ROWS)
                .map(|r| quantize_row(ty, &values(n, r as u32)))
                .collect();
            let rows: Vec<&[u8]> = weights.iter().map(Vec::as_slice).collect();
            let acts: Vec<ActRow> = (0..BATCH)
                .map(|t| {
                    let mut a = ActRow::new_for(ty);
                    a.set(&values(n, 1000 + t as u32));
                    a
                })
                .collect();
            let mut out = vec![0f32; PANEL_ROWS * BATCH];
            let weight_bytes = (weights[0].len() * PANEL_ROWS * BATCH) as u64;
            group.throughput(Throughput::Bytes(weight_bytes));
            for k in &tiers {
                group.bench_function(BenchmarkId::new(format!("{}/single", k.tier), n), |b| {
                    b.iter(|| {
                        for (t, a) in acts.iter().enumerate() {
                            for (r, row) in rows.iter().enumerate() {
                                out[t * PANEL_ROWS + r] = k.dot_ordered(ty, order, row, a);
                            }
                        }
                        black_box(&mut out);
                    })
                });
                group.bench_function(BenchmarkId::new(format!("{}/tile", k.tier), n), |b| {
                    b.iter(|| {
                        k.dot_tile(ty, order, black_box(&rows), &acts, &mut out);
                        black_box(&mut out);
                    })
                });
            }
        }
        group.finish();
    }
}

/// Matrix shapes (rows × columns) of SmolLM2-135M's decode matmuls: the attention output, the
/// feed-forward gate/up and down projections.
const DECODE_SHAPES: [(usize, usize); 3] = [(576, 576), (1536, 576), (576, 1536)];

fn decode(c: &mut Criterion) {
    let tiers: Vec<Kernels> = [Tier::Scalar, Tier::Avx2, Tier::Avx512]
        .into_iter()
        .filter_map(|t| Kernels::for_tier(t).ok())
        .collect();
    let cases = [
        ("q4_0_lanes", GgmlType::Q4_0, SumOrder::Lanes),
        ("q4_0_chain", GgmlType::Q4_0, SumOrder::BlockChain),
        ("q4_1", GgmlType::Q4_1, SumOrder::Lanes),
        ("q8_0", GgmlType::Q8_0, SumOrder::Lanes),
    ];
    for (name, ty, order) in cases {
        let mut group = c.benchmark_group(format!("decode_{name}"));
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        for (m, n) in DECODE_SHAPES {
            let weights: Vec<Vec<u8>> = (0..m)
                .map(|r| quantize_row(ty, &values(n, r as u32)))
                .collect();
            let rows: Vec<&[u8]> = weights.iter().map(Vec::as_slice).collect();
            let joined = weights.concat();
            let mut act = ActRow::new_for(ty);
            act.set(&values(n, 7));
            let acts = [act];
            let mut out = vec![0f32; m];
            group.throughput(Throughput::Bytes((weights[0].len() * m) as u64));
            let shape = format!("{m}x{n}");
            for k in &tiers {
                group.bench_function(
                    BenchmarkId::new(format!("{}/single", k.tier), &shape),
                    |b| {
                        b.iter(|| {
                            for (o, row) in out.iter_mut().zip(&rows) {
                                *o = k.dot_ordered(ty, order, row, &acts[0]);
                            }
                            black_box(&mut out);
                        })
                    },
                );
                group.bench_function(BenchmarkId::new(format!("{}/tile", k.tier), &shape), |b| {
                    b.iter(|| {
                        for (rc, oc) in rows.chunks(PANEL_ROWS).zip(out.chunks_mut(PANEL_ROWS)) {
                            k.dot_tile(ty, order, black_box(rc), &acts, oc);
                        }
                        black_box(&mut out);
                    })
                });
                group.bench_function(BenchmarkId::new(format!("{}/gemv", k.tier), &shape), |b| {
                    b.iter(|| {
                        k.gemv(ty, order, black_box(&joined), &acts[0], &mut out);
                        black_box(&mut out);
                    })
                });
            }
        }
        group.finish();
    }
}

/// Bytes of the `decode_stream` matrix: far beyond any cache, so every pass streams it from
/// memory, as decoding a large model does.
const STREAM_BYTES: usize = 256 << 20;

/// One thread's decode matmul over a matrix that streams from memory: block-chain Q4_0 of 2048
/// columns in the file's layout and packed ([`Layout::Q4_0x16`], where the tier packs), with
/// the single-token kernels prefetching into L1 and into L2 ([`StreamTarget`]). Compare the
/// GB/s with `locus membw -t 1`.
fn decode_stream(c: &mut Criterion) {
    let (ty, order, n) = (GgmlType::Q4_0, SumOrder::BlockChain, 2048);
    let distinct: Vec<Vec<u8>> = (0..PACK_ROWS)
        .map(|r| quantize_row(ty, &values(n, r as u32)))
        .collect();
    let group_bytes = distinct.concat();
    let groups = STREAM_BYTES / group_bytes.len();
    let file = group_bytes.repeat(groups);
    let mut one_group = vec![0u8; group_bytes.len()];
    pack::pack_group(Layout::Q4_0x16, &group_bytes, n / 32, &mut one_group);
    let packed = one_group.repeat(groups);
    let mut act = ActRow::new_for(ty);
    act.set(&values(n, 7));
    let mut out = vec![0f32; groups * PACK_ROWS];
    let mut group = c.benchmark_group("decode_stream_q4_0_chain");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes(file.len() as u64));
    for k in [Tier::Avx2, Tier::Avx512]
        .into_iter()
        .filter_map(|t| Kernels::for_tier(t).ok())
    {
        let mut layouts = vec![(Layout::Rows, &file)];
        if k.preferred_layout(ty, order) == Layout::Q4_0x16 {
            layouts.push((Layout::Q4_0x16, &packed));
        }
        for (layout, bytes) in layouts {
            for target in [StreamTarget::L1, StreamTarget::L2] {
                let id = format!("{}/{}/{}", k.tier, layout.name(), target.name());
                group.bench_function(BenchmarkId::new(id, "256MiB"), |b| {
                    set_stream_target(target);
                    b.iter(|| {
                        k.gemv_in(layout, ty, order, black_box(bytes), &act, &mut out);
                        black_box(&mut out);
                    })
                });
            }
        }
    }
    group.finish();
}

/// Row groups of the streamed `decode_stream_k` matrix: about 128 MiB at 2048 columns.
const STREAM_K_GROUPS: usize = 8192;

/// One thread's decode matmul (`Kernels::gemv`) for the K-quants and IQ4_XS in the order
/// decode takes them (Q4_K as llama.cpp's repacked gemv sums it; the others `vec_dot`'s),
/// 2048 columns: over 256 rows that stay in L2 (the kernel's compute rate) and over 128 MiB that
/// stream from memory (compare the GB/s with `locus membw -t 1`), in the file's layout and in the
/// layout the tier packs copies into, where it packs the type.
fn decode_stream_k(c: &mut Criterion) {
    let n = 2048;
    let cases = [
        ("q4_k_repacked", GgmlType::Q4K, SumOrder::BlockChain),
        ("q5_k", GgmlType::Q5K, SumOrder::Lanes),
        ("q6_k", GgmlType::Q6K, SumOrder::Lanes),
        ("iq4_xs", GgmlType::Iq4Xs, SumOrder::Lanes),
    ];
    let mut group = c.benchmark_group("decode_stream_k");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (name, ty, order) in cases {
        let distinct: Vec<Vec<u8>> = (0..PANEL_ROWS)
            .map(|r| quantize_row(ty, &values(n, r as u32)))
            .collect();
        let group_bytes = distinct.concat();
        let mut act = ActRow::new_for(ty);
        act.set(&values(n, 7));
        for (label, copies) in [
            ("l1", 1),
            ("l2", 256 / PANEL_ROWS),
            ("stream", STREAM_K_GROUPS),
        ] {
            let file = group_bytes.repeat(copies);
            let mut out = vec![0f32; file.len() / distinct[0].len()];
            group.throughput(Throughput::Bytes(file.len() as u64));
            for k in [Tier::Avx2, Tier::Avx512]
                .into_iter()
                .filter_map(|t| Kernels::for_tier(t).ok())
            {
                let mut layouts = vec![(Layout::Rows, file.clone())];
                let packed_layout = k.preferred_layout(ty, order);
                if packed_layout != Layout::Rows {
                    let mut one = vec![0u8; group_bytes.len()];
                    let blocks = n / packed_layout.block_elems();
                    pack::pack_group(packed_layout, &group_bytes, blocks, &mut one);
                    layouts.push((packed_layout, one.repeat(copies)));
                }
                for (layout, bytes) in &layouts {
                    let id = format!("{name}/{}/{}", k.tier, layout.name());
                    group.bench_function(BenchmarkId::new(id, label), |b| {
                        b.iter(|| {
                            k.gemv_in(*layout, ty, order, black_box(bytes), &act, &mut out);
                            black_box(&mut out);
                        })
                    });
                }
            }
        }
    }
    group.finish();
}

/// Groups of the streamed `prompt_packed_k` matrix: about 32 MiB at 2048 columns.
const PROMPT_K_GROUPS: usize = 1024;

/// One thread's prompt matmul over packed copies (`Kernels::dot_tile_in`, the tiled order; Q4_K
/// the repacked gemm's) for a step of 32 tokens, 2048 columns: over 16 groups that stay in L2
/// and over 32 MiB that stream from memory. Throughput in weight bytes per token-pass.
fn prompt_packed_k(c: &mut Criterion) {
    let n = 2048;
    let cases = [
        ("q4_k_gemm", GgmlType::Q4K, SumOrder::RepackedGemm),
        ("q5_k_tiled", GgmlType::Q5K, SumOrder::Batched),
        ("q6_k_tiled", GgmlType::Q6K, SumOrder::Batched),
        ("iq4_xs_tiled", GgmlType::Iq4Xs, SumOrder::Batched),
    ];
    let Ok(k) = Kernels::for_tier(Tier::Avx512) else {
        eprintln!("prompt_packed_k: SKIPPED: no AVX-512 tier on this CPU");
        return;
    };
    let mut group = c.benchmark_group("prompt_packed_k");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (name, ty, order) in cases {
        let rows: Vec<Vec<u8>> = (0..PACK_ROWS)
            .map(|r| quantize_row(ty, &values(n, r as u32)))
            .collect();
        let layout = k.preferred_layout(ty, SumOrder::for_token(ty, order, 1, 0));
        let layout = if layout == Layout::Rows {
            k.preferred_layout(ty, SumOrder::BlockChain)
        } else {
            layout
        };
        let mut one = vec![0u8; rows.concat().len()];
        pack::pack_group(layout, &rows.concat(), n / layout.block_elems(), &mut one);
        let acts: Vec<ActRow> = (0..32)
            .map(|t| {
                let mut a = ActRow::new_for(ty);
                a.set(&values(n, 100 + t));
                a
            })
            .collect();
        // Two groups a call, as the forward pass steps packed layouts.
        let mut out = vec![0f32; 2 * PACK_ROWS * acts.len()];
        for (label, groups) in [("l2", 16), ("stream", PROMPT_K_GROUPS)] {
            let bytes = one.repeat(groups);
            group.throughput(Throughput::Bytes((bytes.len() * acts.len()) as u64));
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.iter(|| {
                    for g in bytes.chunks_exact(2 * one.len()) {
                        let done = k.dot_tile_in(layout, ty, order, black_box(g), &acts, &mut out);
                        assert!(done, "{name}: no packed tile kernel");
                    }
                    black_box(&mut out);
                })
            });
        }
    }
    group.finish();
}

/// One thread's packed Q4_0 panel (`Kernels::dot_tile_packed_run`, decode's block-chain order)
/// for a serving step of 8 sequences' decoded tokens and for a 32-token step, 2048 columns,
/// over 16 groups that stay in L2. Throughput in weight bytes per token-pass.
fn panel_packed_q4_0(c: &mut Criterion) {
    let n = 2048;
    let mut group = c.benchmark_group("panel_packed_q4_0");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let rows: Vec<Vec<u8>> = (0..PACK_ROWS)
        .map(|r| quantize_row(GgmlType::Q4_0, &values(n, r as u32)))
        .collect();
    let mut one = vec![0u8; rows.concat().len()];
    pack::pack_group(Layout::Q4_0x16, &rows.concat(), n / 32, &mut one);
    let groups = 16;
    let bytes = one.repeat(groups);
    for tier in [Tier::Avx2, Tier::Avx512] {
        let Ok(k) = Kernels::for_tier(tier) else {
            eprintln!("panel_packed_q4_0: SKIPPED: no {tier} tier on this CPU");
            continue;
        };
        for tokens in [8usize, 32] {
            let acts: Vec<ActRow> = (0..tokens)
                .map(|t| {
                    let mut a = ActRow::new_for(GgmlType::Q4_0);
                    a.set(&values(n, 100 + t as u32));
                    a
                })
                .collect();
            let mut out = vec![0f32; PACK_ROWS * acts.len()];
            // The steps panels' activations, built once per step as the forward pass does.
            let mut steps = PackedSteps::default();
            let steps = k.build_packed_steps(&acts, &mut steps).then_some(&steps);
            group.throughput(Throughput::Bytes((bytes.len() * tokens) as u64));
            group.bench_function(BenchmarkId::new(format!("{tier}"), tokens), |b| {
                b.iter(|| {
                    k.dot_tile_packed_run(
                        Layout::Q4_0x16,
                        black_box(&bytes),
                        groups,
                        &acts,
                        steps,
                        &mut out,
                        |_, _| {},
                    );
                    black_box(&mut out);
                })
            });
        }
    }
    group.finish();
}

/// Decode attention of the eight query heads of one KV head over a 3072-token f16 cache, one
/// head at a time (`att_dot_decode_rows`) against all eight at once (`att_dot_decode_heads`):
/// the keys (3072 rows of 64) and the values (64 rows of 3072). One thread, from L2.
fn attention_heads(c: &mut Criterion) {
    let (cells, hd, heads) = (3072usize, 64usize, 8usize);
    let f16 = |n: usize, seed: u32| -> Vec<u16> {
        values(n, seed)
            .iter()
            .map(|&v| locus::kernels::half::f32_to_f16(v))
            .collect()
    };
    let (keys, vals) = (f16(cells * hd, 1), f16(hd * cells, 2));
    let q = values(heads * hd, 3);
    let p: Vec<f32> = values(heads * cells, 4).iter().map(|v| v.abs()).collect();
    let mut group = c.benchmark_group("attention_heads");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for tier in [Tier::Avx2, Tier::Avx512] {
        let Ok(k) = Kernels::for_tier(tier) else {
            eprintln!("attention_heads: SKIPPED: no {tier} tier on this CPU");
            continue;
        };
        for (side, x, stride, rows, ys, len) in [
            ("keys", &keys, hd, cells, &q, hd),
            ("values", &vals, cells, hd, &p, cells),
        ] {
            let queries = Queries {
                ys,
                len,
                stride: len,
                count: heads,
            };
            let mut out = vec![0f32; heads * rows];
            group.bench_function(BenchmarkId::new(format!("{tier}/{side}"), "each"), |b| {
                b.iter(|| {
                    for (j, o) in out.chunks_exact_mut(rows).enumerate() {
                        k.att_dot_decode_rows(black_box(x), stride, queries.get(j), len, o);
                    }
                    black_box(&mut out);
                })
            });
            group.bench_function(BenchmarkId::new(format!("{tier}/{side}"), "heads"), |b| {
                b.iter(|| {
                    k.att_dot_decode_heads(
                        black_box(x),
                        (stride, rows),
                        queries,
                        len,
                        &mut out,
                        rows,
                    );
                    black_box(&mut out);
                })
            });
        }
    }
    group.finish();
}

/// Packing at load: sixteen-row groups of 2048 columns in each packed layout, from a 64 MiB
/// source into a 64 MiB destination (both beyond the caches, as a copy's build streams them).
/// Throughput is in bytes packed; `rows` is a plain copy, the yardstick.
fn pack_groups(c: &mut Criterion) {
    const BYTES: usize = 64 << 20;
    let cols = 2048usize;
    let mut group = c.benchmark_group("pack_groups");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    // The file's layout (a plain copy of Q4_0 rows) is the yardstick.
    for layout in std::iter::once(Layout::Rows).chain(Layout::PACKED) {
        let ty = layout.holds().unwrap_or(GgmlType::Q4_0);
        let n = cols / layout.block_elems();
        let group_bytes = PACK_ROWS * n * ty.block_bytes();
        let groups = BYTES / group_bytes;
        let src: Vec<u8> = (0..groups * group_bytes)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        let mut dst = vec![0u8; src.len()];
        group.throughput(Throughput::Bytes(src.len() as u64));
        group.bench_function(BenchmarkId::new(layout.name(), cols), |b| {
            b.iter(|| {
                for (s, d) in src
                    .chunks_exact(group_bytes)
                    .zip(dst.chunks_exact_mut(group_bytes))
                {
                    pack::pack_group(layout, black_box(s), n, d);
                }
                black_box(&mut dst);
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    pack_groups,
    attention_heads,
    panel_packed_q4_0,
    kernels,
    decode,
    decode_stream,
    decode_stream_k,
    prompt_packed_k
);
criterion_main!(benches);
