//! Weights by name: every tensor the family's forward pass needs, checked for presence, type and
//! shape against the config before the first token is computed.

use std::cell::RefCell;
use std::collections::HashSet;

use super::arch::Need;
use super::config::{Config, Mla};
use super::error::ModelError;
use super::gguf::Gguf;
use crate::kernels::oracle_repacked::repacked_in_llama;
use crate::kernels::{GgmlType, Layout, SumOrder};

/// A 1-D or 2-D tensor view: `rows` rows of `cols` elements, row-major, of type `ty`, of which
/// `data` holds rows `row0..row0 + data.len() / row_bytes` (all of them, except in a shard).
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    pub ty: GgmlType,
    /// How its dot products sum: llama.cpp repacks Q4_0, Q4_K, Q2_K, IQ4_NL and MXFP4 matmul
    /// weights whose row count is a multiple of 8 and then sums them in its repacked kernels'
    /// order.
    pub order: SumOrder,
    /// How `data` stores the rows: the file's layout, or packed for the kernels (a copy
    /// placement made; see `kernels::pack`).
    pub layout: Layout,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
    /// The first row `data` holds.
    pub row0: usize,
    pub data: &'a [u8],
}

impl<'a> Tensor<'a> {
    /// Row `i` of the matrix; it must be one of the rows this view holds, in the file's
    /// layout (a packed view has no rows on their own: read it by [`Tensor::rows_bytes`]).
    #[inline]
    pub fn row(&self, i: usize) -> &'a [u8] {
        assert_eq!(self.layout, Layout::Rows, "a row of a packed view");
        let j = i - self.row0;
        &self.data[j * self.row_bytes..(j + 1) * self.row_bytes]
    }

    /// The rows this view holds.
    pub fn held_rows(&self) -> std::ops::Range<usize> {
        self.row0..self.row0 + self.data.len() / self.row_bytes.max(1)
    }

    /// The same tensor with rows `lo..hi` held in `data` (a shard's or a copy's bytes).
    pub fn with_data(&self, lo: usize, hi: usize, data: &'a [u8]) -> Tensor<'a> {
        assert_eq!(
            data.len(),
            (hi - lo) * self.row_bytes,
            "view of the wrong size"
        );
        Tensor {
            row0: lo,
            data,
            ..*self
        }
    }

    /// The same view with its bytes in `layout` (placement packed them).
    pub fn with_layout(&self, layout: Layout) -> Tensor<'a> {
        Tensor { layout, ..*self }
    }

    /// The bytes of rows `lo..hi`, back to back (in a packed view, whole packed groups of
    /// them); they must be rows this view holds.
    #[inline]
    pub fn rows_bytes(&self, lo: usize, hi: usize) -> &'a [u8] {
        &self.data[(lo - self.row0) * self.row_bytes..(hi - self.row0) * self.row_bytes]
    }

    /// The tensor as f32 values (for norm weights and other small vectors).
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for (r, o) in out.chunks_exact_mut(self.cols).enumerate() {
            crate::kernels::dequantize_row(self.ty, self.row(r), o);
        }
        out
    }
}

/// A weight matrix as the forward pass reads it: the tensor as the file stores it, and for
/// each node slot of the thread pool a view holding at least the rows that slot computes.
/// One view serves every slot when the weights are not placed (the file's mapping).
#[derive(Clone, Debug)]
pub struct Matrix<'a> {
    pub name: String,
    /// Shape, type and the file's bytes.
    pub file: Tensor<'a>,
    /// Read row by row (the token embedding's lookup), so its copies keep the file's layout
    /// whatever the kernels would read fastest.
    pub gathered: bool,
    views: Vec<Tensor<'a>>,
}

impl<'a> Matrix<'a> {
    fn new(name: &str, file: Tensor<'a>) -> Matrix<'a> {
        Matrix {
            name: name.to_string(),
            file,
            gathered: false,
            views: vec![file],
        }
    }

    /// The view node slot `slot` reads.
    #[inline]
    pub fn view(&self, slot: usize) -> &Tensor<'a> {
        if self.views.len() == 1 {
            &self.views[0]
        } else {
            &self.views[slot]
        }
    }

    pub fn views(&self) -> &[Tensor<'a>] {
        &self.views
    }

    /// Replaces the views (placement); every view must describe this matrix.
    pub fn set_views(&mut self, views: Vec<Tensor<'a>>) {
        assert!(!views.is_empty(), "a matrix needs a view");
        for v in &views {
            assert!(
                v.ty == self.file.ty && v.rows == self.file.rows && v.cols == self.file.cols,
                "a view of another matrix"
            );
        }
        self.views = views;
    }

    /// Row `i` from whichever view holds it (the embedding lookup reads any row).
    pub fn row_any(&self, i: usize) -> &'a [u8] {
        let v = self
            .views
            .iter()
            .find(|v| v.held_rows().contains(&i))
            .expect("every row is held by some view");
        v.row(i)
    }

    pub fn rows(&self) -> usize {
        self.file.rows
    }

    pub fn ty(&self) -> GgmlType {
        self.file.ty
    }
}

/// One layer's weights: a norm and an attention block, a norm and an FFN block. The optional
/// parts are there where the family's recipe asks for them (see `arch`); the forward pass
/// applies each step whose weights are present.
pub struct Layer<'a> {
    pub attn_norm: Vec<f32>,
    pub attn: Attention<'a>,
    /// RMSNorm weights of the attention output and of the FFN output, applied before each
    /// residual add.
    pub post_norms: Option<[Vec<f32>; 2]>,
    pub ffn_norm: Vec<f32>,
    pub ffn: Ffn<'a>,
    /// `layer_output_scale`: multiplies the layer's output (Gemma 4).
    pub out_scale: Option<f32>,
    /// The layer's use of its per-layer embedding input (Gemma 4 E2B/E4B).
    pub ple: Option<LayerPle<'a>>,
}

/// A layer's per-layer embedding block (after its FFN): `proj · (gelu(inp_gate · x) ⊙ its
/// per-layer input)`, RMS-normed by `post_norm`, added to the residual stream.
pub struct LayerPle<'a> {
    /// `blk.N.inp_gate`: `n_embd` → the per-layer width.
    pub gate: Matrix<'a>,
    /// `blk.N.proj`: the per-layer width → `n_embd`.
    pub proj: Matrix<'a>,
    /// `blk.N.post_norm`.
    pub post_norm: Vec<f32>,
}

/// The model's per-layer embeddings (Gemma 4 E2B/E4B): a token's input to each layer is
/// `(rms_norm(model_proj · x / √n_embd) · proj_norm + table[token] · √width) / √2`.
pub struct Ple<'a> {
    /// `per_layer_token_embd`: a row of `width × n_layer` values per token, read row by row as
    /// the token embedding is (never dequantized whole).
    pub table: Matrix<'a>,
    /// `per_layer_model_proj`: `n_embd` → `width × n_layer`.
    pub model_proj: Matrix<'a>,
    /// `per_layer_proj_norm`: RMSNorm weights of each layer's `width` projected values.
    pub proj_norm: Vec<f32>,
}

/// A layer's attention block: how it projects a token to queries, keys and values, what its
/// cache keeps, and how it projects the heads' outputs back. Latent attention (DeepSeek's
/// compressed cache, issue 41) and attention sinks (gpt-oss, issue 43) join here.
pub enum Attention<'a> {
    /// Grouped-query attention: `n_head` query heads share `n_head_kv` key and value heads.
    Gqa(Gqa<'a>),
    /// Multi-head latent attention (DeepSeek), absorbed: every query head attends over one
    /// shared latent cache.
    Latent(Latent<'a>),
}

/// Latent attention's weights (see `Config::mla` for the sizes).
pub struct Latent<'a> {
    /// How a token becomes its queries.
    pub q: LatentQuery<'a>,
    /// `attn_kv_a_mqa`: the latent vector and the rotated key, `kv_lora + rope` rows.
    pub wkv_a: Matrix<'a>,
    /// `attn_kv_a_norm`: RMSNorm of the latent vector.
    pub kv_a_norm: Vec<f32>,
    /// `attn_k_b`, one matrix per head (`kv_lora` rows of `nope`): absorbed into the query.
    pub wk_b: Vec<Matrix<'a>>,
    /// `attn_v_b`, one matrix per head (`v_head` rows of `kv_lora`): a head's output out of
    /// the latent space.
    pub wv_b: Vec<Matrix<'a>>,
    /// The unabsorbed form's `attn_kv_b` instead of the two above (empty then): every head's
    /// no-RoPE key (`nope` rows) and value (`v_head` rows) out of the latent vector.
    pub wkv_b: Option<Matrix<'a>>,
    pub wo: Matrix<'a>,
}

/// A latent attention layer's query projection.
pub enum LatentQuery<'a> {
    /// `attn_q`: full rank (DeepSeek-V2-Lite).
    Full(Matrix<'a>),
    /// `attn_q_a` → RMSNorm `attn_q_a_norm` → `attn_q_b` (DeepSeek-V2/V3).
    LowRank {
        a: Matrix<'a>,
        norm: Vec<f32>,
        b: Matrix<'a>,
    },
}

/// Grouped-query attention's weights.
pub struct Gqa<'a> {
    pub wq: Matrix<'a>,
    /// `None` in a shared-KV layer, which computes queries only and attends over an earlier
    /// layer's cache (`Recipe::kv_source`; Gemma 4 E2B/E4B).
    pub wk: Option<Matrix<'a>>,
    /// `None` where the layer's values are its key projection (Gemma 4's global layers), and in
    /// a shared-KV layer.
    pub wv: Option<Matrix<'a>>,
    pub wo: Matrix<'a>,
    /// Biases of the Q, K and V projections (all three or none).
    pub qkv_bias: Option<[Vec<f32>; 3]>,
    /// Bias of the attention output projection.
    pub bo: Option<Vec<f32>>,
    /// RMSNorm weights of every query head and every key head (`head_dim` each; the keys'
    /// empty in a shared-KV layer).
    pub qk_norm: Option<[Vec<f32>; 2]>,
    /// `attn_sinks.weight`: one logit per query head joined to its softmax (gpt-oss).
    pub sinks: Option<Vec<f32>>,
}

impl<'a> Attention<'a> {
    /// Its matrices, in the order a token reads them.
    pub fn matrices(&self) -> Vec<&Matrix<'a>> {
        match self {
            Attention::Gqa(a) => {
                let mut v = vec![&a.wq];
                v.extend(&a.wk);
                v.extend(&a.wv);
                v.push(&a.wo);
                v
            }
            Attention::Latent(a) => {
                let mut v = match &a.q {
                    LatentQuery::Full(q) => vec![q],
                    LatentQuery::LowRank { a, b, .. } => vec![a, b],
                };
                v.push(&a.wkv_a);
                v.extend(&a.wk_b);
                v.extend(&a.wv_b);
                v.extend(&a.wkv_b);
                v.push(&a.wo);
                v
            }
        }
    }

    fn matrices_mut(&mut self) -> Vec<&mut Matrix<'a>> {
        match self {
            Attention::Gqa(a) => {
                let mut v = vec![&mut a.wq];
                v.extend(&mut a.wk);
                v.extend(&mut a.wv);
                v.push(&mut a.wo);
                v
            }
            Attention::Latent(a) => {
                let mut v = match &mut a.q {
                    LatentQuery::Full(q) => vec![q],
                    LatentQuery::LowRank { a, b, .. } => vec![a, b],
                };
                v.push(&mut a.wkv_a);
                v.extend(&mut a.wk_b);
                v.extend(&mut a.wv_b);
                v.extend(&mut a.wkv_b);
                v.push(&mut a.wo);
                v
            }
        }
    }
}

/// A layer's feed-forward network.
pub enum Ffn<'a> {
    /// One gated FFN every token runs.
    Dense {
        gate: Matrix<'a>,
        up: Matrix<'a>,
        down: Matrix<'a>,
    },
    /// A mixture of experts: the router's logits pick each token's experts.
    Moe(Experts<'a>),
}

/// A mixture-of-experts FFN. Each expert's slice of the 3-D `ffn_{gate,up,down}_exps`
/// tensors is a matrix of its own (named `…_exps.weight[e]`), so placement splits every
/// expert's rows across the nodes like any matrix's, and a token reads only its experts' rows.
pub struct Experts<'a> {
    /// `ffn_gate_inp.weight`: one row of router weights per expert.
    pub router: Matrix<'a>,
    pub gate: Vec<Matrix<'a>>,
    pub up: Vec<Matrix<'a>>,
    pub down: Vec<Matrix<'a>>,
    /// Experts each token uses.
    pub n_used: usize,
    /// `exp_probs_b.bias`: added to the gate's probabilities for the choice of experts only.
    pub probs_bias: Option<Vec<f32>>,
    /// The shared experts' FFN (`ffn_{gate,up,down}_shexp`), which every token runs, its
    /// output added to the routed experts'.
    pub shared: Option<Box<Shared<'a>>>,
    /// The router's and the experts' biases (gpt-oss).
    pub biases: Option<Box<ExpertBiases>>,
    /// Gemma 4's dense MLP beside the experts, with the norms and scales around them.
    pub beside: Option<Box<Beside<'a>>>,
}

/// Gemma 4's mixture (`Moe::beside_mlp`): the dense MLP (`ffn_{gate,up,down}`, GELU, input
/// `ffn_norm`) whose output goes through `post_norm_1`, the experts' input norm `pre_norm_2`
/// and output norm `post_norm_2`, the router's input scale, and per expert a scale of its
/// down projection's output.
pub struct Beside<'a> {
    pub mlp: Shared<'a>,
    /// `ffn_gate_inp.scale`: multiplies the router's normed input, element by element.
    pub router_scale: Vec<f32>,
    /// `pre_ffw_norm_2`, `post_ffw_norm_1`, `post_ffw_norm_2`.
    pub pre_norm_2: Vec<f32>,
    pub post_norm_1: Vec<f32>,
    pub post_norm_2: Vec<f32>,
    /// `ffn_down_exps.scale`: one factor per expert (optional).
    pub down_scale: Option<Vec<f32>>,
}

/// A mixture's biases: on the router's logits, and per expert on its gate, up and down
/// projections' outputs (`ffn_{gate,up,down}_exps.bias`, a row per expert).
pub struct ExpertBiases {
    pub router: Vec<f32>,
    pub gate: Vec<Vec<f32>>,
    pub up: Vec<Vec<f32>>,
    pub down: Vec<Vec<f32>>,
}

/// The shared experts of a mixture: one gated FFN, `expert_shared_count` experts wide.
pub struct Shared<'a> {
    pub gate: Matrix<'a>,
    pub up: Matrix<'a>,
    pub down: Matrix<'a>,
}

impl<'a> Layer<'a> {
    fn matrices(&self) -> Vec<&Matrix<'a>> {
        self.matrices_read().into_iter().map(|(m, _)| m).collect()
    }

    /// Every matrix, with the share of its bytes a token reads on average: all of each, but
    /// of the experts `n_used` in `n_expert`.
    fn matrices_read(&self) -> Vec<(&Matrix<'a>, f64)> {
        let mut v: Vec<_> = self.attn.matrices().into_iter().map(|m| (m, 1.0)).collect();
        if let Some(p) = &self.ple {
            v.extend([&p.gate, &p.proj].map(|m| (m, 1.0)));
        }
        match &self.ffn {
            Ffn::Dense { gate, up, down } => v.extend([gate, up, down].map(|m| (m, 1.0))),
            Ffn::Moe(x) => {
                v.push((&x.router, 1.0));
                if let Some(sh) = &x.shared {
                    v.extend([&sh.gate, &sh.up, &sh.down].map(|m| (m, 1.0)));
                }
                if let Some(b) = &x.beside {
                    v.extend([&b.mlp.gate, &b.mlp.up, &b.mlp.down].map(|m| (m, 1.0)));
                }
                let share = x.n_used as f64 / x.gate.len() as f64;
                for e in 0..x.gate.len() {
                    v.extend([&x.gate[e], &x.up[e], &x.down[e]].map(|m| (m, share)));
                }
            }
        }
        v
    }

    fn matrices_mut(&mut self) -> Vec<&mut Matrix<'a>> {
        let mut v = self.attn.matrices_mut();
        if let Some(p) = &mut self.ple {
            v.extend([&mut p.gate, &mut p.proj]);
        }
        match &mut self.ffn {
            Ffn::Dense { gate, up, down } => v.extend([gate, up, down]),
            Ffn::Moe(x) => {
                v.push(&mut x.router);
                if let Some(sh) = &mut x.shared {
                    v.extend([&mut sh.gate, &mut sh.up, &mut sh.down]);
                }
                if let Some(b) = &mut x.beside {
                    v.extend([&mut b.mlp.gate, &mut b.mlp.up, &mut b.mlp.down]);
                }
                for ((g, u), d) in x.gate.iter_mut().zip(&mut x.up).zip(&mut x.down) {
                    v.extend([g, u, d]);
                }
            }
        }
        v
    }
}

/// Every weight of a model, whatever its family: the matrices as one list for placement,
/// audit and bench ([`Weights::matrices`]), and the small vectors the forward pass applies.
pub struct Weights<'a> {
    pub token_embd: Matrix<'a>,
    pub output_norm: Vec<f32>,
    /// The output head; when the model ties it to the token embedding, the embedding's tensor
    /// under its name, held as llama.cpp holds a matmul weight (repacked order where the rule
    /// says so; the embedding's own rows, read by `get_rows`, never are).
    pub output: Matrix<'a>,
    pub layers: Vec<Layer<'a>>,
    /// Llama-3 RoPE frequency divisors, if present.
    pub rope_freqs: Option<Vec<f32>>,
    /// Per-layer embeddings (Gemma 4 E2B/E4B).
    pub ple: Option<Ple<'a>>,
}

fn tensor<'a>(
    g: &Gguf<'a>,
    name: &str,
    cols: usize,
    rows: usize,
) -> Result<Tensor<'a>, ModelError> {
    let expected: Vec<u64> = if rows == 1 {
        vec![cols as u64]
    } else {
        vec![cols as u64, rows as u64]
    };
    tensor_of_shape(g, name, cols, rows, expected)
}

/// The tensor `name` of dims `expected` (trailing 1s of the file's dims ignored), as `rows`
/// rows of `cols` values.
fn tensor_of_shape<'a>(
    g: &Gguf<'a>,
    name: &str,
    cols: usize,
    rows: usize,
    expected: Vec<u64>,
) -> Result<Tensor<'a>, ModelError> {
    let t = g
        .tensor(name)
        .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
    let mut found = t.dims.clone();
    while found.len() > expected.len() && found.last() == Some(&1) {
        found.pop();
    }
    if found != expected {
        return Err(ModelError::BadShape {
            tensor: name.into(),
            expected,
            found: t.dims.clone(),
        });
    }
    if !t.ty.supported() {
        return Err(ModelError::UnsupportedType {
            tensor: name.into(),
            ty: t.ty.name(),
        });
    }
    Ok(Tensor {
        ty: t.ty,
        order: SumOrder::Lanes,
        layout: Layout::Rows,
        rows,
        cols,
        row_bytes: t.ty.row_bytes(cols),
        row0: 0,
        data: t.data,
    })
}

/// `t` as llama.cpp holds a matmul weight: repacked at load where its type and row count allow
/// (the x86 rule of an AVX-512 build: `oracle_repacked::repacked_in_llama`), and so summed in the
/// repacked kernels' order.
fn as_matmul_weight(mut t: Tensor) -> Tensor {
    if repacked_in_llama(t.ty, t.rows) {
        t.order = SumOrder::BlockChain;
    } else if matches!(t.ty, GgmlType::F32 | GgmlType::F16) {
        t.order = SumOrder::f32_order(t.rows, t.cols);
    } else if t.ty == GgmlType::Bf16 {
        t.order = SumOrder::bf16_order(t.rows, t.cols);
    }
    t
}

impl<'a> Weights<'a> {
    /// Every matrix, the tied output head included (it shares the embedding's name).
    pub fn matrices_mut(&mut self) -> Vec<&mut Matrix<'a>> {
        let mut v = vec![&mut self.token_embd, &mut self.output];
        if let Some(p) = &mut self.ple {
            v.extend([&mut p.table, &mut p.model_proj]);
        }
        for l in &mut self.layers {
            v.extend(l.matrices_mut());
        }
        v
    }

    /// Every distinct matrix once (a tied output head shares the embedding's name and bytes),
    /// in file order of use.
    pub fn matrices(&self) -> Vec<&Matrix<'a>> {
        let mut v = vec![&self.token_embd];
        if self.output.name != self.token_embd.name {
            v.push(&self.output);
        }
        if let Some(p) = &self.ple {
            v.extend([&p.table, &p.model_proj]);
        }
        for l in &self.layers {
            v.extend(l.matrices());
        }
        v
    }

    /// The matrices a token's forward pass streams, each with the share of its bytes one token
    /// reads on average: the output head and every layer's, whole, except a mixture's experts,
    /// of which a token reads `n_used` of `n_expert` (the active bytes).
    pub fn read_per_token(&self) -> Vec<(&Matrix<'a>, f64)> {
        let mut v = vec![(&self.output, 1.0)];
        if let Some(p) = &self.ple {
            // Of the per-layer table a token reads one row, as of the token embedding.
            v.push((&p.model_proj, 1.0));
        }
        for l in &self.layers {
            v.extend(l.matrices_read());
        }
        v
    }

    /// Loads every tensor `c`'s family reads, checked for presence, type and shape; a file
    /// with a tensor the family would not read is refused (its arithmetic would be missing).
    pub fn from_gguf(g: &Gguf<'a>, c: &Config) -> Result<Weights<'a>, ModelError> {
        let r = Reader {
            g,
            used: RefCell::new(HashSet::new()),
        };
        let w = Weights::load(&r, c)?;
        let used = r.used.into_inner();
        let unread = |t: &&crate::model::gguf::TensorInfo| {
            !used.contains(t.name) && !c.is_nextn_tensor(t.name)
        };
        if let Some(t) = g.tensors.iter().find(unread) {
            return Err(ModelError::UnexpectedTensor {
                tensor: t.name.to_string(),
                arch: c.arch.name(),
            });
        }
        Ok(w)
    }

    fn load(r: &Reader<'_, 'a>, c: &Config) -> Result<Weights<'a>, ModelError> {
        let spec = &c.recipe.tensors;
        // The embedding is also read row by row (get_rows), so llama.cpp never repacks it.
        let embd = "token_embd.weight";
        let token_embd = Matrix {
            gathered: true,
            ..Matrix::new(embd, r.tensor(embd, c.n_embd, c.n_vocab)?)
        };
        let output = if r.has("output.weight") {
            r.matrix("output.weight", c.n_embd, c.n_vocab)?
        } else {
            // A tied head: llama.cpp loads the embedding a second time as a matmul weight, and
            // that copy is repacked by the usual rule (the embedding itself never is).
            Matrix::new(embd, as_matmul_weight(token_embd.file))
        };
        let e = c.n_embd;
        let local_view = c.local_view();
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            let vec = |s: &str, len| r.vector(&n(s), len);
            let opt = |need, first: &str| r.optional(need, &n(first));
            // A sliding-window layer of its own attention shape reads its tensors at it.
            let lc = match &local_view {
                Some(l) if c.recipe.is_local(i) => l,
                _ => c,
            };
            layers.push(Layer {
                attn_norm: vec("attn_norm.weight", e)?,
                attn: r.attention(lc, i)?,
                post_norms: match opt(spec.post_norms, "post_attention_norm.weight")? {
                    false => None,
                    true => Some([
                        vec("post_attention_norm.weight", e)?,
                        vec("post_ffw_norm.weight", e)?,
                    ]),
                },
                ffn_norm: vec(spec.ffn_norm, e)?,
                ffn: r.ffn(c, i)?,
                out_scale: match opt(spec.out_scale, "layer_output_scale.weight")? {
                    false => None,
                    true => Some(vec("layer_output_scale.weight", 1)?[0]),
                },
                ple: match c.recipe.ple {
                    0 => None,
                    w => Some(LayerPle {
                        gate: r.matrix(&n("inp_gate.weight"), e, w)?,
                        proj: r.matrix(&n("proj.weight"), w, e)?,
                        post_norm: vec("post_norm.weight", e)?,
                    }),
                },
            });
        }
        let freqs = "rope_freqs.weight";
        let rope_freqs = match r.optional(spec.rope_freqs, freqs)? {
            false => None,
            true => Some(r.vector(freqs, c.n_rot / 2)?),
        };
        let ple = match c.recipe.ple {
            0 => None,
            w => {
                let table = "per_layer_token_embd.weight";
                Some(Ple {
                    // Read row by row (get_rows), so never repacked, as the token embedding.
                    table: Matrix {
                        gathered: true,
                        ..Matrix::new(table, r.tensor(table, w * c.n_layer, c.n_vocab)?)
                    },
                    model_proj: r.matrix("per_layer_model_proj.weight", e, w * c.n_layer)?,
                    proj_norm: r.vector("per_layer_proj_norm.weight", w)?,
                })
            }
        };
        Ok(Weights {
            token_embd,
            output_norm: r.vector("output_norm.weight", c.n_embd)?,
            output,
            layers,
            rope_freqs,
            ple,
        })
    }
}

/// Reads tensors by name from a file and remembers which it read.
struct Reader<'g, 'a> {
    g: &'g Gguf<'a>,
    used: RefCell<HashSet<&'a str>>,
}

impl<'a> Reader<'_, 'a> {
    fn has(&self, name: &str) -> bool {
        self.g.tensor(name).is_some()
    }

    fn tensor(&self, name: &str, cols: usize, rows: usize) -> Result<Tensor<'a>, ModelError> {
        if let Some(t) = self.g.tensors.iter().find(|t| t.name == name) {
            self.used.borrow_mut().insert(t.name);
        }
        tensor(self.g, name, cols, rows)
    }

    /// A 1-D tensor as f32 (norm weights, biases), any supported type.
    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        Ok(self.tensor(name, len, 1)?.to_f32())
    }

    /// A matrix used only as a matmul weight (so llama.cpp may repack it).
    fn matrix(&self, name: &str, cols: usize, rows: usize) -> Result<Matrix<'a>, ModelError> {
        Ok(Matrix::new(
            name,
            as_matmul_weight(self.tensor(name, cols, rows)?),
        ))
    }

    /// Layer `i`'s attention, of the kind its recipe says, with the optional tensors the
    /// recipe asks for.
    fn attention(&self, c: &Config, i: usize) -> Result<Attention<'a>, ModelError> {
        if let Some(m) = c.mla {
            return self.latent(c, &m, i);
        }
        let spec = &c.recipe.tensors;
        let (qd, kvd, hd, e) = (c.q_dim(), c.kv_dim(), c.head_dim, c.n_embd);
        let n = |s: &str| format!("blk.{i}.{s}");
        let mat = |s: &str, cols, rows| self.matrix(&n(s), cols, rows);
        let vec = |s: &str, len| self.vector(&n(s), len);
        let opt = |need, first: &str| self.optional(need, &n(first));
        let own_kv = c.recipe.has_kv(i);
        if !own_kv {
            // A shared-KV layer: llama.cpp loads its key and value projections and key norm
            // where the file has them (checked for shape) and never uses them.
            for (name, cols, rows) in [
                ("attn_k.weight", e, kvd),
                ("attn_v.weight", e, kvd),
                ("attn_k_norm.weight", hd, 1),
            ] {
                if self.has(&n(name)) {
                    self.tensor(&n(name), cols, rows)?;
                }
            }
        }
        Ok(Attention::Gqa(Gqa {
            wq: mat("attn_q.weight", e, qd)?,
            wk: match own_kv {
                true => Some(mat("attn_k.weight", e, kvd)?),
                false => None,
            },
            wv: match own_kv && opt(spec.v_proj, "attn_v.weight")? {
                false => None,
                true => Some(mat("attn_v.weight", e, kvd)?),
            },
            wo: mat("attn_output.weight", qd, e)?,
            qkv_bias: match opt(spec.qkv_bias, "attn_q.bias")? {
                false => None,
                true => Some([
                    vec("attn_q.bias", qd)?,
                    vec("attn_k.bias", kvd)?,
                    vec("attn_v.bias", kvd)?,
                ]),
            },
            bo: match opt(spec.out_bias, "attn_output.bias")? {
                false => None,
                true => Some(vec("attn_output.bias", e)?),
            },
            qk_norm: match opt(spec.qk_norm, "attn_q_norm.weight")? {
                false => None,
                true => Some([
                    vec("attn_q_norm.weight", hd)?,
                    match own_kv {
                        true => vec("attn_k_norm.weight", hd)?,
                        false => Vec::new(),
                    },
                ]),
            },
            sinks: match opt(spec.sinks, "attn_sinks.weight")? {
                false => None,
                true => Some(vec("attn_sinks.weight", c.n_head)?),
            },
        }))
    }

    /// Layer `i`'s latent attention (`attn_k_b` and `attn_v_b` are 3-D, a matrix per head;
    /// the unabsorbed form has one `attn_kv_b` instead).
    fn latent(&self, c: &Config, m: &Mla, i: usize) -> Result<Attention<'a>, ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}");
        let (e, h) = (c.n_embd, c.n_head);
        let q = match m.q_lora {
            0 => LatentQuery::Full(self.matrix(&n("attn_q.weight"), e, h * m.q_head())?),
            r => LatentQuery::LowRank {
                a: self.matrix(&n("attn_q_a.weight"), e, r)?,
                norm: self.vector(&n("attn_q_a_norm.weight"), r)?,
                b: self.matrix(&n("attn_q_b.weight"), r, h * m.q_head())?,
            },
        };
        Ok(Attention::Latent(Latent {
            q,
            wkv_a: self.matrix(&n("attn_kv_a_mqa.weight"), e, m.kv_lora + m.rope)?,
            kv_a_norm: self.vector(&n("attn_kv_a_norm.weight"), m.kv_lora)?,
            // Per-head matmuls of a 3-D weight: never repacked (llama.cpp repacks 2-D MUL_MAT
            // weights only). The query's no-RoPE part they take is a permuted view, so an f32
            // `attn_k_b` never reaches tinyBLAS (its input is not contiguous): `vec_dot`.
            wk_b: match m.joint {
                true => Vec::new(),
                false => self.per_head(&n("attn_k_b.weight"), m.nope, m.kv_lora, h, true)?,
            },
            wv_b: match m.joint {
                true => Vec::new(),
                false => self.per_head(&n("attn_v_b.weight"), m.kv_lora, m.v_head, h, false)?,
            },
            wkv_b: match m.joint {
                true => {
                    Some(self.matrix(&n("attn_kv_b.weight"), m.kv_lora, h * (m.nope + m.v_head))?)
                }
                false => None,
            },
            wo: self.matrix(&n("attn_output.weight"), h * m.v_head, e)?,
        }))
    }

    /// The `n` per-head matrices of a 3-D tensor `{cols, rows, n}` used as a batched matmul's
    /// weight (`strided_input`: its input is a permuted view, which keeps f32 weights in
    /// `vec_dot`'s order).
    fn per_head(
        &self,
        name: &str,
        cols: usize,
        rows: usize,
        n: usize,
        strided_input: bool,
    ) -> Result<Vec<Matrix<'a>>, ModelError> {
        self.slabs(name, (cols, rows, n), |t| {
            // An F16 or BF16 matrix's input is converted to a contiguous f16 copy first, so tinyBLAS
            // takes it whatever the input's strides.
            if (t.ty == GgmlType::F32 && !strided_input) || t.ty == GgmlType::F16 {
                t.order = SumOrder::f32_order(rows, cols);
            } else if t.ty == GgmlType::Bf16 {
                t.order = SumOrder::bf16_order(rows, cols);
            }
        })
    }

    /// The `n` slabs of a 3-D tensor `{cols, rows, n}`, each a matrix of its own named
    /// `name[x]`, its summation order set by `order`.
    fn slabs(
        &self,
        name: &str,
        (cols, rows, n): (usize, usize, usize),
        order: impl Fn(&mut Tensor<'a>),
    ) -> Result<Vec<Matrix<'a>>, ModelError> {
        if let Some(t) = self.g.tensors.iter().find(|t| t.name == name) {
            self.used.borrow_mut().insert(t.name);
        }
        let dims = vec![cols as u64, rows as u64, n as u64];
        let all = tensor_of_shape(self.g, name, cols, rows * n, dims)?;
        let slab = rows * all.row_bytes;
        Ok((0..n)
            .map(|x| {
                let mut t = Tensor {
                    rows,
                    data: &all.data[x * slab..(x + 1) * slab],
                    ..all
                };
                order(&mut t);
                Matrix::new(&format!("{name}[{x}]"), t)
            })
            .collect())
    }

    /// Layer `i`'s FFN: dense (a model without experts, or one of its leading dense layers), or
    /// the experts `c.moe` declares, with their selection bias and shared experts where the
    /// family has them.
    fn ffn(&self, c: &Config, i: usize) -> Result<Ffn<'a>, ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let e = c.n_embd;
        let moe = c.moe.filter(|m| m.is_moe_layer(i));
        let Some(moe) = moe else {
            let ff = c.n_ff_of(i);
            return Ok(Ffn::Dense {
                gate: self.matrix(&n("ffn_gate"), e, ff)?,
                up: self.matrix(&n("ffn_up"), e, ff)?,
                down: self.matrix(&n("ffn_down"), ff, e)?,
            });
        };
        let ff = moe.n_ff;
        let bias = format!("blk.{i}.exp_probs_b.bias");
        let probs_bias = match self.optional(c.recipe.moe.probs_bias, &bias)? {
            false => None,
            true => Some(self.vector(&bias, moe.n_expert)?),
        };
        let shared = match moe.shared_ff() {
            0 => None,
            sf => Some(Box::new(Shared {
                gate: self.matrix(&n("ffn_gate_shexp"), e, sf)?,
                up: self.matrix(&n("ffn_up_shexp"), e, sf)?,
                down: self.matrix(&n("ffn_down_shexp"), sf, e)?,
            })),
        };
        let biases =
            match self.optional(c.recipe.moe.biases, &format!("blk.{i}.ffn_gate_inp.bias"))? {
                false => None,
                true => {
                    let b = |s: &str| format!("blk.{i}.{s}.bias");
                    let rows = |name: &str, len: usize| -> Result<Vec<Vec<f32>>, ModelError> {
                        let t = self.tensor(&b(name), len, moe.n_expert)?;
                        Ok(t.to_f32().chunks_exact(len).map(<[f32]>::to_vec).collect())
                    };
                    Some(Box::new(ExpertBiases {
                        router: self.vector(&b("ffn_gate_inp"), moe.n_expert)?,
                        gate: rows("ffn_gate_exps", ff)?,
                        up: rows("ffn_up_exps", ff)?,
                        down: rows("ffn_down_exps", e)?,
                    }))
                }
            };
        let beside = match c.recipe.moe.beside_mlp {
            false => None,
            true => {
                let down_scale = format!("blk.{i}.ffn_down_exps.scale");
                Some(Box::new(Beside {
                    mlp: Shared {
                        gate: self.matrix(&n("ffn_gate"), e, c.n_ff_of(i))?,
                        up: self.matrix(&n("ffn_up"), e, c.n_ff_of(i))?,
                        down: self.matrix(&n("ffn_down"), c.n_ff_of(i), e)?,
                    },
                    router_scale: self.vector(&format!("blk.{i}.ffn_gate_inp.scale"), e)?,
                    pre_norm_2: self.vector(&n("pre_ffw_norm_2"), e)?,
                    post_norm_1: self.vector(&n("post_ffw_norm_1"), e)?,
                    post_norm_2: self.vector(&n("post_ffw_norm_2"), e)?,
                    down_scale: match self.optional(Need::Optional, &down_scale)? {
                        false => None,
                        true => Some(self.vector(&down_scale, moe.n_expert)?),
                    },
                }))
            }
        };
        Ok(Ffn::Moe(Experts {
            beside,
            biases,
            router: self.matrix(&n("ffn_gate_inp"), e, moe.n_expert)?,
            gate: self.experts(&n("ffn_gate_exps"), e, ff, moe.n_expert)?,
            up: self.experts(&n("ffn_up_exps"), e, ff, moe.n_expert)?,
            down: self.experts(&n("ffn_down_exps"), ff, e, moe.n_expert)?,
            n_used: moe.n_used,
            probs_bias,
            shared,
        }))
    }

    /// The `n` experts of a 3-D tensor `{cols, rows, n}`, each a matrix of its own, held as
    /// llama.cpp holds expert weights: repacked where the dense rule repacks a matrix of `rows`
    /// rows (its repacked experts then always take the gemv's order), otherwise summed in its
    /// `vec_dot`'s order (its expert matmul never runs tinyBLAS; the tiled K-quant kernel, for
    /// experts many tokens chose, is decided per step).
    fn experts(
        &self,
        name: &str,
        cols: usize,
        rows: usize,
        n: usize,
    ) -> Result<Vec<Matrix<'a>>, ModelError> {
        self.slabs(name, (cols, rows, n), |t| {
            if repacked_in_llama(t.ty, rows) {
                t.order = SumOrder::BlockChain;
            }
        })
    }

    /// Whether to load a family's optional tensors, of which `first` is one: where the family
    /// uses them and the file has them; a required one that is missing is an error. With
    /// [`Need::No`] nothing is loaded, and a file that has them anyway is refused by the check
    /// for unread tensors.
    fn optional(&self, need: Need, first: &str) -> Result<bool, ModelError> {
        match (need, self.has(first)) {
            (Need::No, _) | (Need::Optional, false) => Ok(false),
            (Need::Yes, false) => Err(ModelError::MissingTensor(first.into())),
            (_, true) => Ok(true),
        }
    }
}
