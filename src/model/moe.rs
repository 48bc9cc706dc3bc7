//! A mixture-of-experts router, step by step as llama.cpp computes it on the CPU (an AVX-512
//! build), so each token picks the same experts with the same weights to the last bit. The
//! family's [`Routing`] says which steps it takes:
//!
//! ```text
//! p      = soft_max(logits)            gating: ggml's row softmax (16-lane blocks, a libm tail)
//!        | 1 / (1 + expf(-logits))             or ggml's sigmoid, element by element
//! s      = p + bias                    the selection scores (`exp_probs_b`, where present)
//! groups (count > 1): group g's score = (f32)((f64) s[a] + (f64) s[b]), a, b its first two
//!          of argsort(s[g], descending); the first `used` of argsort(scores, descending)
//!          keep their experts' s, every other expert's s becomes −∞
//! sel    = argsort(s, descending)[..k] libstdc++'s std::sort on the indices (its ties)
//! w[i]   = p[sel[i]]                   the unbiased probabilities
//! w      = soft_max(w)                 gating softmax-weight: p are the logits (gpt-oss)
//! w[i]  /= max((f32) Σ (f64) w, 2⁻¹⁴)  norm_weights: renormalised (Qwen3-MoE, Mixtral)
//! w[i]  *= scale                       where the scale is neither 0 nor 1
//! ```
//!
//! Every argsort is ggml's: `std::sort` of the indices with `s[a] > s[b]`. The slot order
//! (`sel`'s) is also the order in which the experts' outputs are added, so it must be the one
//! llama.cpp's sort leaves, equal scores included.

use crate::kernels::ggml_math::{expf, reduce16};
use crate::model::arch::{ExpertGroups, Gating, Routing};

/// The smallest weight sum llama.cpp divides by (the smallest normal f16, 2⁻¹⁴).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// Lanes of one block of ggml's vectorised softmax sum (AVX-512).
const LANES: usize = 16;

/// ggml's `soft_max` of one row with scale 1 and no mask, as its AVX-512 build computes it:
/// blocks of 16 with the vectorised exponential, each block's sum reduced and added in f64;
/// the elements past the last whole block with libm's `expf`, added one by one in f64.
pub fn softmax_row(x: &mut [f32]) {
    let max = x
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if m > v { m } else { v });
    let whole = x.len() / LANES * LANES;
    let mut sum = 0f64;
    for block in x[..whole].chunks_exact_mut(LANES) {
        let mut lanes = [0f32; LANES];
        for (l, v) in lanes.iter_mut().zip(block.iter_mut()) {
            *v = expf(*v - max);
            *l = *v;
        }
        sum += reduce16(&lanes) as f64;
    }
    for v in &mut x[whole..] {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// The router's scratch buffers (any contents; sized on use).
#[derive(Default)]
pub struct RouteScratch {
    /// Indices being sorted.
    order: Vec<usize>,
    /// The selection scores (biased, groups masked).
    scores: Vec<f32>,
    /// Each group's score.
    group_scores: Vec<f32>,
}

/// Routes one token as `r` says: `probs` (the router's logits, turned into probabilities in
/// place) picks `sel.len()` experts into `sel`, in slot order, with their weights in `w`;
/// `bias` (one per expert) shifts the scores the choice reads, not the weights.
pub fn route(
    r: &Routing,
    bias: Option<&[f32]>,
    probs: &mut [f32],
    scratch: &mut RouteScratch,
    (sel, w): (&mut [usize], &mut [f32]),
) {
    assert!(!sel.is_empty() && sel.len() <= probs.len() && sel.len() == w.len());
    match r.gating {
        Gating::Softmax => softmax_row(probs),
        Gating::Sigmoid => probs.iter_mut().for_each(|v| *v = sigmoid(*v)),
        // The logits choose and weigh (their softmax over the chosen, below).
        Gating::SoftmaxWeight => {}
    }
    let p = &*probs;
    let RouteScratch {
        order,
        scores,
        group_scores,
    } = scratch;
    scores.clear();
    match bias {
        Some(b) => {
            assert_eq!(b.len(), p.len(), "a bias per expert");
            scores.extend(p.iter().zip(b).map(|(&v, &b)| v + b));
        }
        None => scores.extend_from_slice(p),
    }
    if let Some(gr) = r.groups {
        mask_groups(gr, scores, group_scores, order);
    }
    argsort_desc(scores, order);
    sel.copy_from_slice(&order[..sel.len()]);
    for (wi, &e) in w.iter_mut().zip(sel.iter()) {
        *wi = p[e];
    }
    if r.gating == Gating::SoftmaxWeight {
        softmax_row(w);
    }
    if r.norm_weights {
        let mut sum = 0f64;
        for &wi in w.iter() {
            sum += wi as f64;
        }
        let sum = (sum as f32).max(MIN_WEIGHT_SUM);
        for wi in w.iter_mut() {
            *wi /= sum;
        }
    }
    if r.scale != 0.0 && r.scale != 1.0 {
        w.iter_mut().for_each(|wi| *wi *= r.scale);
    }
}

/// ggml's sigmoid of one value (`op_sigmoid`: libm's `expf`).
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `order` = the indices of `x` as ggml's descending argsort leaves them.
fn argsort_desc(x: &[f32], order: &mut Vec<usize>) {
    order.clear();
    order.extend(0..x.len());
    std_sort(order, &|a, b| x[a] > x[b]);
}

/// Group-limited choice, as llama.cpp's `build_moe_ffn` computes it: each group's score is the
/// f64 sum, rounded to f32 (`ggml_sum_rows`), of its first two experts in its own descending
/// argsort; the groups' descending argsort keeps its first `gr.used`; every expert of the
/// other groups gets the score −∞.
fn mask_groups(
    gr: ExpertGroups,
    scores: &mut [f32],
    group_scores: &mut Vec<f32>,
    order: &mut Vec<usize>,
) {
    let per = scores.len() / gr.count;
    group_scores.clear();
    for g in scores.chunks_exact(per) {
        argsort_desc(g, order);
        group_scores.push((g[order[0]] as f64 + g[order[1]] as f64) as f32);
    }
    argsort_desc(group_scores, order);
    for &dropped in &order[gr.used..] {
        scores[dropped * per..(dropped + 1) * per].fill(f32::NEG_INFINITY);
    }
}

/// Elements below which libstdc++'s introsort leaves a range to the final insertion sort.
const THRESHOLD: usize = 16;

/// libstdc++'s `std::sort` (GCC's `bits/stl_algo.h`): introsort with a median-of-three pivot,
/// heapsort past twice log₂ n levels, then an insertion sort. Not stable: equal elements end
/// where this very sequence of swaps leaves them, which is what makes it worth copying.
pub fn std_sort(v: &mut [usize], less: &dyn Fn(usize, usize) -> bool) {
    let n = v.len();
    if n < 2 {
        return;
    }
    introsort(v, 2 * n.ilog2() as usize, less);
    if n > THRESHOLD {
        insertion_sort(&mut v[..THRESHOLD], less);
        for i in THRESHOLD..n {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, less);
    }
}

fn introsort(v: &mut [usize], mut depth: usize, less: &dyn Fn(usize, usize) -> bool) {
    let mut last = v.len();
    while last > THRESHOLD {
        if depth == 0 {
            heap_sort(&mut v[..last], less);
            return;
        }
        depth -= 1;
        let cut = partition_pivot(&mut v[..last], less);
        introsort(&mut v[cut..last], depth, less);
        last = cut;
    }
}

/// `__unguarded_partition_pivot`: the median of the second, middle and last elements moved to
/// the front, then the rest partitioned around it; returns the cut.
fn partition_pivot(v: &mut [usize], less: &dyn Fn(usize, usize) -> bool) -> usize {
    let (n, mid) = (v.len(), v.len() / 2);
    // __move_median_to_first(first, first + 1, mid, last - 1)
    let (a, b, c) = (1, mid, n - 1);
    let pick = if less(v[a], v[b]) {
        if less(v[b], v[c]) {
            b
        } else if less(v[a], v[c]) {
            c
        } else {
            a
        }
    } else if less(v[a], v[c]) {
        a
    } else if less(v[b], v[c]) {
        c
    } else {
        b
    };
    v.swap(0, pick);
    // __unguarded_partition(first + 1, last, first)
    let pivot = v[0];
    let (mut f, mut l) = (1, n);
    loop {
        while less(v[f], pivot) {
            f += 1;
        }
        l -= 1;
        while less(pivot, v[l]) {
            l -= 1;
        }
        if f >= l {
            return f;
        }
        v.swap(f, l);
        f += 1;
    }
}

fn insertion_sort(v: &mut [usize], less: &dyn Fn(usize, usize) -> bool) {
    for i in 1..v.len() {
        if less(v[i], v[0]) {
            v[..=i].rotate_right(1);
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn unguarded_linear_insert(v: &mut [usize], mut i: usize, less: &dyn Fn(usize, usize) -> bool) {
    let val = v[i];
    while less(val, v[i - 1]) {
        v[i] = v[i - 1];
        i -= 1;
    }
    v[i] = val;
}

/// `__make_heap` then `__sort_heap` (what `__partial_sort(first, last, last)` does).
fn heap_sort(v: &mut [usize], less: &dyn Fn(usize, usize) -> bool) {
    let len = v.len();
    if len >= 2 {
        let mut parent = (len - 2) / 2;
        loop {
            let value = v[parent];
            adjust_heap(v, parent, len, value, less);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    let mut last = len;
    while last > 1 {
        last -= 1;
        let value = v[last];
        v[last] = v[0];
        adjust_heap(v, 0, last, value, less);
    }
}

fn adjust_heap(
    v: &mut [usize],
    mut hole: usize,
    len: usize,
    value: usize,
    less: &dyn Fn(usize, usize) -> bool,
) {
    let top = hole;
    let mut child = hole;
    while child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if less(v[child], v[child - 1]) {
            child -= 1;
        }
        v[hole] = v[child];
        hole = child;
    }
    if len & 1 == 0 && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        v[hole] = v[child - 1];
        hole = child - 1;
    }
    // __push_heap
    let mut parent = hole.wrapping_sub(1) / 2;
    while hole > top && less(v[parent], value) {
        v[hole] = v[parent];
        hole = parent;
        parent = hole.wrapping_sub(1) / 2;
    }
    v[hole] = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sort_orders_and_keeps_every_index() {
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for n in [0, 1, 2, 5, 16, 17, 33, 128, 1000] {
            // Few distinct values, so ties abound.
            let p: Vec<u32> = (0..n).map(|_| (next() % 7) as u32).collect();
            let mut v: Vec<usize> = (0..n).collect();
            std_sort(&mut v, &|a, b| p[a] > p[b]);
            assert!(
                v.windows(2).all(|w| p[w[0]] >= p[w[1]]),
                "n = {n}: not sorted"
            );
            let mut seen = v.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>());
        }
        // Up to 16 elements it is an insertion sort: stable, ties in index order.
        let p = [1, 3, 3, 2, 3, 1, 0, 3];
        let mut v: Vec<usize> = (0..p.len()).collect();
        std_sort(&mut v, &|a, b| p[a] > p[b]);
        assert_eq!(v, [1, 2, 4, 7, 3, 0, 5, 6]);
        // The heapsort (reached when the depth runs out) orders too.
        let mut v: Vec<usize> = (0..100).collect();
        let p: Vec<u32> = (0..100).map(|i| (i * 37 % 11) as u32).collect();
        heap_sort(&mut v, &|a, b| p[a] > p[b]);
        assert!(v.windows(2).all(|w| p[w[0]] >= p[w[1]]));
    }

    #[test]
    fn routing_renormalises_the_chosen_weights() {
        let mut logits = [0.5f32, 2.0, -1.0, 1.0, 2.0, 0.0, 0.25, -3.0];
        let (mut sel, mut w, mut order) = ([0usize; 3], [0f32; 3], RouteScratch::default());
        let r = Routing::new(Gating::Softmax, true);
        route(&r, None, &mut logits, &mut order, (&mut sel, &mut w));
        // The two equal logits keep index order (insertion sort), then the next.
        assert_eq!(sel, [1, 4, 3]);
        assert_eq!(w[0], w[1]);
        let sum: f32 = w.iter().sum();
        assert!((sum - 1.0).abs() < 1e-6, "{w:?}");
        // Without normalisation the weights are the chosen experts' probabilities.
        let mut probs = [0.5f32, 2.0, -1.0, 1.0, 2.0, 0.0, 0.25, -3.0];
        let raw = Routing {
            norm_weights: false,
            ..r
        };
        route(&raw, None, &mut probs, &mut order, (&mut sel, &mut w));
        assert_eq!(w, [probs[1], probs[4], probs[3]]);
        // The softmax sums to one and orders as the logits do.
        let mut x: Vec<f32> = (0..40).map(|i| (i as f32 * 0.37).sin()).collect();
        let y = x.clone();
        softmax_row(&mut x);
        let total: f64 = x.iter().map(|&v| v as f64).sum();
        assert!((total - 1.0).abs() < 1e-6);
        for i in 1..40 {
            assert_eq!(x[i] > x[0], y[i] > y[0]);
        }
    }

    /// llama.cpp's `build_moe_ffn` routing restated op by op as its graph runs them on one
    /// token (`ggml_argsort` is `std::sort` of the indices with `a > b`): probs, biased
    /// selection probs, per group argsort → get_rows of its first 2 → sum_rows (f64, to
    /// f32) → argsort of the groups → fill −∞ and set_rows of the kept groups → argsort
    /// → get_rows of the unbiased probs → sum_rows, clamp, div → scale.
    fn graph_routing(
        r: &Routing,
        bias: Option<&[f32]>,
        logits: &[f32],
        k: usize,
    ) -> (Vec<usize>, Vec<f32>) {
        let n = logits.len();
        let argsort = |x: &[f32]| {
            let mut v: Vec<usize> = (0..x.len()).collect();
            std_sort(&mut v, &|a, b| x[a] > x[b]);
            v
        };
        let mut probs = logits.to_vec();
        match r.gating {
            Gating::Softmax => softmax_row(&mut probs),
            Gating::Sigmoid => {
                for p in probs.iter_mut() {
                    *p = 1.0 / (1.0 + (-*p).exp());
                }
            }
            Gating::SoftmaxWeight => {}
        }
        let mut selection: Vec<f32> = match bias {
            Some(b) => (0..n).map(|i| probs[i] + b[i]).collect(),
            None => probs.clone(),
        };
        if let Some(g) = r.groups {
            let per = n / g.count;
            let rows: Vec<&[f32]> = selection.chunks(per).collect();
            let group_scores: Vec<f32> = rows
                .iter()
                .map(|row| {
                    let top = argsort(row);
                    let got = [row[top[0]], row[top[1]]];
                    let mut sum = 0f64;
                    for v in got {
                        sum += v as f64;
                    }
                    sum as f32
                })
                .collect();
            let kept = &argsort(&group_scores)[..g.used];
            let mut masked = vec![f32::NEG_INFINITY; n];
            for &gi in kept {
                masked[gi * per..(gi + 1) * per].copy_from_slice(rows[gi]);
            }
            selection = masked;
        }
        let sel = argsort(&selection)[..k].to_vec();
        let mut w: Vec<f32> = sel.iter().map(|&e| probs[e]).collect();
        if r.gating == Gating::SoftmaxWeight {
            // ggml_soft_max of the k chosen logits (fewer than a 16-lane block: libm's expf,
            // an f64 sum, one reciprocal).
            let max = w.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let mut sum = 0f64;
            for v in w.iter_mut() {
                *v = (*v - max).exp();
                sum += *v as f64;
            }
            let inv = (1.0 / sum) as f32;
            w.iter_mut().for_each(|v| *v *= inv);
        }
        if r.norm_weights {
            let sum = w.iter().fold(0f64, |s, &v| s + v as f64) as f32;
            // ggml_clamp to the smallest normal f16, 2⁻¹⁴.
            let sum = sum.clamp(2f32.powi(-14), f32::INFINITY);
            w.iter_mut().for_each(|v| *v /= sum);
        }
        if r.scale != 0.0 && r.scale != 1.0 {
            w.iter_mut().for_each(|v| *v *= r.scale);
        }
        (sel, w)
    }

    #[test]
    fn routing_is_llama_cpp_s_graph_ties_included() {
        let mut seed = 99u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        // (experts, per token, groups): GLM-4.5-Air's 128 choose 8, DeepSeek-V3's 256 choose 8
        // in 8 groups choosing 4, small ones where the sorts are insertion sorts.
        let shapes = [
            (16, 4, None),
            (16, 4, Some((4, 2))),
            (128, 8, None),
            (256, 8, Some((8, 4))),
            (64, 6, Some((8, 3))),
        ];
        let mut checked = 0;
        for (n, k, groups) in shapes {
            for case in 0..200 {
                // Logits and biases from a few values, so equal scores (and equal group
                // scores) are common: the ties must fall as llama.cpp's sorts leave them.
                let logits: Vec<f32> = (0..n).map(|_| (next() % 5) as f32 * 0.5 - 1.0).collect();
                let bias: Vec<f32> = (0..n).map(|_| (next() % 3) as f32 * 0.25).collect();
                for gating in [Gating::Softmax, Gating::Sigmoid, Gating::SoftmaxWeight] {
                    let r = Routing {
                        groups: groups.map(|(count, used)| ExpertGroups { count, used }),
                        scale: [0.0, 1.0, 2.5][case % 3],
                        ..Routing::new(gating, case % 2 == 0)
                    };
                    let bias = (case % 4 < 2).then_some(&bias[..]);
                    let (want_sel, want_w) = graph_routing(&r, bias, &logits, k);
                    let (mut sel, mut w) = (vec![0; k], vec![0f32; k]);
                    let mut probs = logits.clone();
                    route(
                        &r,
                        bias,
                        &mut probs,
                        &mut RouteScratch::default(),
                        (&mut sel, &mut w),
                    );
                    assert_eq!(sel, want_sel, "{n} experts, {groups:?}, case {case}");
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&w), bits(&want_w), "{n} experts, case {case}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 3000);
    }

    #[test]
    fn groups_score_their_best_two_and_ties_keep_the_first() {
        // Sigmoid gating is monotone, so the logits order the scores.
        let r = Routing {
            groups: Some(ExpertGroups { count: 2, used: 1 }),
            ..Routing::new(Gating::Sigmoid, false)
        };
        let (mut sel, mut w) = ([0usize; 2], [0f32; 2]);
        // Group 0 holds the single best expert, group 1 the better pair: the sum, not the
        // max, chooses group 1, and expert 0 is left out.
        let mut logits = [4.0, -4.0, 1.0, 1.5];
        route(
            &r,
            None,
            &mut logits,
            &mut RouteScratch::default(),
            (&mut sel, &mut w),
        );
        assert_eq!(sel, [3, 2]);
        // The selection bias moves the choice but not the weights.
        let bias = [0.0, 0.0, 0.3, 0.0];
        let mut logits = [4.0, -4.0, 1.0, 1.5];
        route(
            &r,
            Some(&bias),
            &mut logits,
            &mut RouteScratch::default(),
            (&mut sel, &mut w),
        );
        assert_eq!((sel, w), ([2, 3], [sigmoid(1.0), sigmoid(1.5)]));
        // Equal groups: the first wins (an insertion sort); equal experts keep index order.
        let mut logits = [0.5f32; 8];
        let r = Routing {
            groups: Some(ExpertGroups { count: 4, used: 2 }),
            ..r
        };
        let mut sel3 = [0usize; 3];
        route(
            &r,
            None,
            &mut logits,
            &mut RouteScratch::default(),
            (&mut sel3, &mut [0f32; 3]),
        );
        assert_eq!(sel3, [0, 1, 2]);
        // More experts than the kept groups hold: the rest come from the −∞ experts, in the
        // sort's order, with their own probabilities as weights.
        let mut logits = [3.0f32, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let r1 = Routing {
            groups: Some(ExpertGroups { count: 4, used: 1 }),
            ..r
        };
        let mut sel4 = [0usize; 4];
        let mut w4 = [0f32; 4];
        route(
            &r1,
            None,
            &mut logits,
            &mut RouteScratch::default(),
            (&mut sel4, &mut w4),
        );
        assert_eq!(&sel4[..2], [0, 1]);
        assert_eq!(w4[2], sigmoid(0.0));
    }
}
