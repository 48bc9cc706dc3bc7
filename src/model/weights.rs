//! Weights by name: every tensor the llama forward pass needs, checked for presence, type and
//! shape against the config before the first token is computed.

use super::config::LlamaConfig;
use super::error::ModelError;
use super::gguf::Gguf;
use crate::kernels::krepack::repacked_in_llama;
use crate::kernels::{GgmlType, Layout, SumOrder};

/// A 1-D or 2-D tensor view: `rows` rows of `cols` elements, row-major, of type `ty`, of which
/// `data` holds rows `row0..row0 + data.len() / row_bytes` (all of them, except in a shard).
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    pub ty: GgmlType,
    /// How its dot products sum: llama.cpp repacks Q4_0, Q4_K, Q2_K and IQ4_NL matmul weights
    /// whose row count is a multiple of 8 and then sums them in its repacked kernels' order.
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
    views: Vec<Tensor<'a>>,
}

impl<'a> Matrix<'a> {
    fn new(name: &str, file: Tensor<'a>) -> Matrix<'a> {
        Matrix {
            name: name.to_string(),
            file,
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

pub struct Layer<'a> {
    pub attn_norm: Vec<f32>,
    pub wq: Matrix<'a>,
    pub wk: Matrix<'a>,
    pub wv: Matrix<'a>,
    pub wo: Matrix<'a>,
    pub ffn_norm: Vec<f32>,
    pub w_gate: Matrix<'a>,
    pub w_up: Matrix<'a>,
    pub w_down: Matrix<'a>,
}

pub struct LlamaWeights<'a> {
    pub token_embd: Matrix<'a>,
    pub output_norm: Vec<f32>,
    /// The output head; when the model ties it to the token embedding, the embedding's tensor
    /// under its name, held as llama.cpp holds a matmul weight (repacked order where the rule
    /// says so; the embedding's own rows, read by `get_rows`, never are).
    pub output: Matrix<'a>,
    pub layers: Vec<Layer<'a>>,
    /// Llama-3 RoPE frequency divisors, if present.
    pub rope_freqs: Option<Vec<f32>>,
}

fn tensor<'a>(
    g: &Gguf<'a>,
    name: &str,
    cols: usize,
    rows: usize,
) -> Result<Tensor<'a>, ModelError> {
    let t = g
        .tensor(name)
        .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
    let expected: Vec<u64> = if rows == 1 {
        vec![cols as u64]
    } else {
        vec![cols as u64, rows as u64]
    };
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

/// A 1-D tensor as f32 (norm weights), any supported type.
fn vector(g: &Gguf, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    Ok(tensor(g, name, len, 1)?.to_f32())
}

/// A matrix used only as a matmul weight (so llama.cpp may repack it).
fn matrix<'a>(
    g: &Gguf<'a>,
    name: &str,
    cols: usize,
    rows: usize,
) -> Result<Matrix<'a>, ModelError> {
    Ok(Matrix::new(
        name,
        as_matmul_weight(tensor(g, name, cols, rows)?),
    ))
}

/// `t` as llama.cpp holds a matmul weight: repacked at load where its type and row count allow
/// (the x86 rule of an AVX-512 build: `krepack::repacked_in_llama`), and so summed in the
/// repacked kernels' order.
fn as_matmul_weight(mut t: Tensor) -> Tensor {
    if repacked_in_llama(t.ty, t.rows) {
        t.order = SumOrder::BlockChain;
    }
    t
}

impl<'a> LlamaWeights<'a> {
    /// Every matrix, the tied output head included (it shares the embedding's name).
    pub fn matrices_mut(&mut self) -> Vec<&mut Matrix<'a>> {
        let mut v = vec![&mut self.token_embd, &mut self.output];
        for l in &mut self.layers {
            v.extend([
                &mut l.wq,
                &mut l.wk,
                &mut l.wv,
                &mut l.wo,
                &mut l.w_gate,
                &mut l.w_up,
                &mut l.w_down,
            ]);
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
        for l in &self.layers {
            v.extend([&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        }
        v
    }

    /// The matrices a token's forward pass streams: the output head and every layer's.
    pub fn read_per_token(&self) -> Vec<&Matrix<'a>> {
        let mut v = vec![&self.output];
        for l in &self.layers {
            v.extend([&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        }
        v
    }

    pub fn from_gguf(g: &Gguf<'a>, c: &LlamaConfig) -> Result<LlamaWeights<'a>, ModelError> {
        // The embedding is also read row by row (get_rows), so llama.cpp never repacks it.
        let embd = "token_embd.weight";
        let token_embd = Matrix::new(embd, tensor(g, embd, c.n_embd, c.n_vocab)?);
        let output = if g.tensor("output.weight").is_some() {
            matrix(g, "output.weight", c.n_embd, c.n_vocab)?
        } else {
            // A tied head: llama.cpp loads the embedding a second time as a matmul weight, and
            // that copy is repacked by the usual rule (the embedding itself never is).
            Matrix::new(embd, as_matmul_weight(token_embd.file))
        };
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            layers.push(Layer {
                attn_norm: vector(g, &n("attn_norm"), c.n_embd)?,
                wq: matrix(g, &n("attn_q"), c.n_embd, c.q_dim())?,
                wk: matrix(g, &n("attn_k"), c.n_embd, c.kv_dim())?,
                wv: matrix(g, &n("attn_v"), c.n_embd, c.kv_dim())?,
                wo: matrix(g, &n("attn_output"), c.q_dim(), c.n_embd)?,
                ffn_norm: vector(g, &n("ffn_norm"), c.n_embd)?,
                w_gate: matrix(g, &n("ffn_gate"), c.n_embd, c.n_ff)?,
                w_up: matrix(g, &n("ffn_up"), c.n_embd, c.n_ff)?,
                w_down: matrix(g, &n("ffn_down"), c.n_ff, c.n_embd)?,
            });
        }
        let rope_freqs = match g.tensor("rope_freqs.weight") {
            Some(_) => Some(vector(g, "rope_freqs.weight", c.n_rot / 2)?),
            None => None,
        };
        Ok(LlamaWeights {
            token_embd,
            output_norm: vector(g, "output_norm.weight", c.n_embd)?,
            output,
            layers,
            rope_freqs,
        })
    }
}
