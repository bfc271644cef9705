//! The weights of a Llama GGUF file, dequantized once with fused-core's
//! dequantizers into f32 (each value exactly the one its format encodes)
//! and kept: about 540 MB for SmolLM2-135M, so that the reference's
//! products read plain floats instead of unpacking blocks on every token.

use fused_core::DType;
use fused_core::quant::dequantize_row;
use fused_gguf::{Gguf, TensorInfo};

use super::config::Hyper;
use super::error::ModelError;
use super::par::for_each_chunk;

/// A weight matrix, dequantized: `rows` rows of `cols` values, row-major
/// (GGML's `[cols, rows]` tensor, `ne[0] = cols`).
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
}

impl Matrix {
    /// A matrix of `rows` rows of `cols` values from `data` (row-major);
    /// an error when `data` holds another count.
    pub fn new(rows: usize, cols: usize, data: Vec<f32>) -> Result<Matrix, ModelError> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(ModelError::Usage(format!(
                "a {rows} × {cols} matrix from {} values",
                data.len()
            )));
        }
        Ok(Matrix { rows, cols, data })
    }

    /// Rows (outputs of a product).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row length (inputs of a product).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row `r` (panics past the last row: the reference's own indexing).
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// The weights of one decoder layer.
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    /// RMSNorm weight before attention (`attn_norm`).
    pub attn_norm: Vec<f32>,
    /// Query projection, `q_dim × hidden`.
    pub wq: Matrix,
    /// Key projection, `kv_dim × hidden`.
    pub wk: Matrix,
    /// Value projection, `kv_dim × hidden`.
    pub wv: Matrix,
    /// Output projection, `hidden × q_dim`.
    pub wo: Matrix,
    /// RMSNorm weight before the feed-forward block (`ffn_norm`).
    pub ffn_norm: Vec<f32>,
    /// Gate projection, `ffn × hidden`.
    pub w_gate: Matrix,
    /// Up projection, `ffn × hidden`.
    pub w_up: Matrix,
    /// Down projection, `hidden × ffn`.
    pub w_down: Matrix,
}

/// Every weight the reference reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Weights {
    /// Token embeddings, `vocab × hidden`.
    pub embedding: Matrix,
    /// The decoder layers.
    pub layers: Vec<Layer>,
    /// The final RMSNorm's weight.
    pub output_norm: Vec<f32>,
    /// The output head, `vocab × hidden`; `None` when the file ties it to
    /// the embeddings (no `output.weight`).
    pub output: Option<Matrix>,
    /// Per-pair RoPE frequency divisors (`rope_freqs.weight`), or empty.
    pub rope_factors: Vec<f32>,
    /// Matrices per stored format (GGML's type name), in order of first
    /// appearance.
    pub formats: Vec<(&'static str, usize)>,
}

impl Weights {
    /// Reads and dequantizes every tensor of `h`'s model from `g`, on
    /// `threads` threads; a tensor missing, of another shape or of a
    /// format without a dequantizer is an error naming it.
    pub fn load(g: &Gguf<'_>, h: &Hyper, threads: usize) -> Result<Weights, ModelError> {
        let mut formats: Vec<(&'static str, usize)> = Vec::new();
        let mut mat = |name: &str, cols: usize, rows: usize| -> Result<Matrix, ModelError> {
            let t = tensor(g, name)?;
            let m = matrix(&t, cols, rows, threads)?;
            match formats.iter_mut().find(|(f, _)| *f == t.type_name()) {
                Some((_, n)) => *n += 1,
                None => formats.push((t.type_name(), 1)),
            }
            Ok(m)
        };
        let (hidden, q, kv, ffn) = (h.hidden, h.q_dim(), h.kv_dim(), h.ffn);
        let embedding = mat("token_embd.weight", hidden, h.vocab)?;
        let mut layers = Vec::with_capacity(h.n_layer);
        for l in 0..h.n_layer {
            let n = |t: &str| format!("blk.{l}.{t}.weight");
            layers.push(Layer {
                attn_norm: vector(g, &n("attn_norm"), hidden)?,
                wq: mat(&n("attn_q"), hidden, q)?,
                wk: mat(&n("attn_k"), hidden, kv)?,
                wv: mat(&n("attn_v"), hidden, kv)?,
                wo: mat(&n("attn_output"), q, hidden)?,
                ffn_norm: vector(g, &n("ffn_norm"), hidden)?,
                w_gate: mat(&n("ffn_gate"), hidden, ffn)?,
                w_up: mat(&n("ffn_up"), hidden, ffn)?,
                w_down: mat(&n("ffn_down"), ffn, hidden)?,
            });
        }
        let output = match g.tensor("output.weight") {
            Some(_) => Some(mat("output.weight", hidden, h.vocab)?),
            None => None,
        };
        let output_norm = vector(g, "output_norm.weight", hidden)?;
        let rope_factors = match g.tensor("rope_freqs.weight") {
            Some(_) => vector(g, "rope_freqs.weight", h.head_dim / 2)?,
            None => Vec::new(),
        };
        Ok(Weights {
            embedding,
            layers,
            output_norm,
            output,
            rope_factors,
            formats,
        })
    }

    /// The output head: `output.weight`, or the embeddings when tied.
    pub fn head(&self) -> &Matrix {
        self.output.as_ref().unwrap_or(&self.embedding)
    }
}

fn tensor<'a>(g: &Gguf<'a>, name: &str) -> Result<TensorInfo<'a>, ModelError> {
    g.tensor(name)
        .copied()
        .ok_or_else(|| ModelError::tensor(name, "not in the file"))
}

/// Checks that `t`'s dimensions are `want` (trailing 1s ignored).
fn check_shape(t: &TensorInfo<'_>, want: &[u64]) -> Result<(), ModelError> {
    let mut dims = t.dims();
    while dims.len() > want.len() && dims.last() == Some(&1) {
        dims = &dims[..dims.len() - 1];
    }
    if dims != want {
        return Err(ModelError::tensor(
            t.name(),
            format!("shape {:?}, the model needs {want:?}", t.dims()),
        ));
    }
    Ok(())
}

/// The format of `t`, if fused-core has it.
fn dtype(t: &TensorInfo<'_>) -> Result<DType, ModelError> {
    t.dtype()
        .map_err(|e| ModelError::tensor(t.name(), e.to_string()))
}

/// `t` as a `rows × cols` matrix, dequantized row by row on `threads`
/// threads.
fn matrix(
    t: &TensorInfo<'_>,
    cols: usize,
    rows: usize,
    threads: usize,
) -> Result<Matrix, ModelError> {
    check_shape(t, &[cols as u64, rows as u64])?;
    let d = dtype(t)?;
    let rb = d
        .row_bytes(cols)
        .map_err(|e| ModelError::tensor(t.name(), e.to_string()))?;
    let bytes = t.data();
    if rb.checked_mul(rows) != Some(bytes.len()) {
        return Err(ModelError::tensor(
            t.name(),
            format!("{} bytes for {rows} rows of {rb}", bytes.len()),
        ));
    }
    let mut data = vec![0.0f32; rows * cols];
    for_each_chunk(&mut data, cols, threads, 64, |start, chunk| {
        let first = start / cols;
        for (i, out) in chunk.chunks_exact_mut(cols).enumerate() {
            let r = first + i;
            dequantize_row(d, &bytes[r * rb..(r + 1) * rb], out)
                .map_err(|e| ModelError::tensor(t.name(), format!("row {r}: {e}")))?;
        }
        Ok::<(), ModelError>(())
    })?;
    Ok(Matrix { rows, cols, data })
}

/// The vector `name` of `n` elements, dequantized (a norm or scale: F32,
/// F16 or BF16 in practice).
fn vector(g: &Gguf<'_>, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
    let t = tensor(g, name)?;
    check_shape(&t, &[n as u64])?;
    let d = dtype(&t)?;
    let mut out = vec![0.0f32; n];
    dequantize_row(d, t.data(), &mut out).map_err(|e| ModelError::tensor(name, e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::Matrix;

    #[test]
    fn rows_are_row_major() {
        let m = Matrix::new(2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert!(Matrix::new(2, 2, vec![0.0; 3]).is_err());
        assert_eq!((m.rows(), m.cols()), (2, 3));
        assert_eq!(m.row(1), &[4.0, 5.0, 6.0]);
    }
}
