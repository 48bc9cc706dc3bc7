//! Weights by name: every tensor the llama forward pass needs, checked for presence, type and
//! shape against the config before the first token is computed.

use super::config::LlamaConfig;
use super::error::ModelError;
use super::gguf::Gguf;
use crate::kernels::{GgmlType, SumOrder};

/// llama.cpp interleaves Q4_0 matmul weights in groups of this many rows.
const REPACK_ROWS: usize = 8;

/// A 1-D or 2-D tensor view: `rows` rows of `cols` elements, row-major, of type `ty`.
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    pub ty: GgmlType,
    /// How its dot products sum: llama.cpp repacks Q4_0 matmul weights whose row count is a
    /// multiple of 8 and then sums them in one chain over blocks.
    pub order: SumOrder,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
    pub data: &'a [u8],
}

impl<'a> Tensor<'a> {
    #[inline]
    pub fn row(&self, i: usize) -> &'a [u8] {
        &self.data[i * self.row_bytes..(i + 1) * self.row_bytes]
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

pub struct Layer<'a> {
    pub attn_norm: Vec<f32>,
    pub wq: Tensor<'a>,
    pub wk: Tensor<'a>,
    pub wv: Tensor<'a>,
    pub wo: Tensor<'a>,
    pub ffn_norm: Vec<f32>,
    pub w_gate: Tensor<'a>,
    pub w_up: Tensor<'a>,
    pub w_down: Tensor<'a>,
}

pub struct LlamaWeights<'a> {
    pub token_embd: Tensor<'a>,
    pub output_norm: Vec<f32>,
    /// The output head; the token embedding itself when the model ties them.
    pub output: Tensor<'a>,
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
        rows,
        cols,
        row_bytes: t.ty.row_bytes(cols),
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
) -> Result<Tensor<'a>, ModelError> {
    let mut t = tensor(g, name, cols, rows)?;
    if t.ty == GgmlType::Q4_0 && rows.is_multiple_of(REPACK_ROWS) {
        t.order = SumOrder::BlockChain;
    }
    Ok(t)
}

impl<'a> LlamaWeights<'a> {
    pub fn from_gguf(g: &Gguf<'a>, c: &LlamaConfig) -> Result<LlamaWeights<'a>, ModelError> {
        // The embedding is also read row by row (get_rows), so llama.cpp never repacks it.
        let token_embd = tensor(g, "token_embd.weight", c.n_embd, c.n_vocab)?;
        let output = if g.tensor("output.weight").is_some() {
            matrix(g, "output.weight", c.n_embd, c.n_vocab)?
        } else {
            token_embd
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
